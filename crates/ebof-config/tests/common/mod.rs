//! Helpers shared by the configuration tests.

/// A configuration with one listener and one subsystem of two 1M RAM namespaces, the second
/// ending with `line` (a key under test, e.g. `hosts = […]` or `qos = { … }`; empty for none).
pub fn second_namespace_with(line: &str) -> String {
    format!(
        r#"
[[listeners]]
address = "127.0.0.1"

[[subsystems]]
nqn = "nqn.2026-11.io.ebof:a"

[[subsystems.namespaces]]
backend = "ram"
size = "1M"

[[subsystems.namespaces]]
backend = "ram"
size = "1M"
{line}
"#
    )
}
