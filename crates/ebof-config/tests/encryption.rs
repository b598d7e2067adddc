//! `encryption = { key_file }` on pools and namespaces (ADR 0029): parsed, checked, emitted
//! back by `save` as the path (the key never appears in a configuration).

use ebof_config::{Config, codes};
use std::path::Path;

const BOX: &str = r#"
[[listeners]]
address = "127.0.0.1"
port = 4420

[[pools]]
name = "secure"
directory = "/var/lib/ebof/secure"
encryption = { key_file = "/etc/ebof/secure.key" }

[[subsystems]]
nqn = "nqn.2014-08.org.example:enc"

[[subsystems.namespaces]]
backend = "file"
path = "/var/lib/ebof/one.img"
size = "1G"
encryption = { key_file = "/etc/ebof/one.key" }
"#;

#[test]
fn pools_and_namespaces_round_trip_the_key_file_path() {
    let c = Config::from_toml_str(BOX).unwrap();
    let pool = c.pool("secure").unwrap();
    assert_eq!(
        pool.encryption.as_ref().unwrap().key_file,
        Path::new("/etc/ebof/secure.key")
    );
    let ns = &c.subsystems[0].namespaces[0];
    assert_eq!(
        ns.encryption.as_ref().unwrap().key_file,
        Path::new("/etc/ebof/one.key")
    );
    let text = c.to_toml_string();
    assert!(
        text.contains(r#"encryption = { key_file = "/etc/ebof/secure.key" }"#),
        "{text}"
    );
    assert_eq!(Config::from_toml_str(&text).unwrap(), c);
}

#[test]
fn misplaced_or_malformed_encryption_is_refused_with_a_path() {
    let cases = [
        (
            BOX.replace("/etc/ebof/one.key", "one.key"),
            codes::INVALID_ENCRYPTION,
            "subsystems[0].namespaces[0].encryption.key_file",
        ),
        (
            BOX.replace("key_file = \"/etc/ebof/secure.key\"", "file = \"/x\""),
            codes::UNKNOWN_FIELD,
            "",
        ),
        (
            BOX.replace(
                "backend = \"file\"\npath = \"/var/lib/ebof/one.img\"",
                "backend = \"ram\"",
            ),
            codes::INVALID_ENCRYPTION,
            "subsystems[0].namespaces[0].encryption",
        ),
        (
            BOX.replace(
                "encryption = { key_file = \"/etc/ebof/secure.key\" }",
                "encryption = {}",
            ),
            codes::MISSING_FIELD,
            "pools[0].encryption.key_file",
        ),
    ];
    for (text, code, path) in cases {
        let e = Config::from_toml_str(&text).unwrap_err();
        assert_eq!(e.code, code, "{e}");
        if !path.is_empty() {
            assert_eq!(e.path, path, "{e}");
        }
    }
}
