//! Replicated volumes in the configuration (ADR 0028): `mirror = { peer, role }` on a
//! namespace, `[mirror]` and `[witness]`: parsed, checked with precise codes and paths, and
//! written back by `save` so that the saved file parses to the same configuration.

use ebof_config::{
    Config, DEFAULT_LINK_HOSTNQN, MirrorRole, MirrorSettings, WitnessSettings, codes,
};

const BASE: &str = r#"
[target]
state_dir = "/var/lib/ebof-test-state"

[[listeners]]
address = "127.0.0.1"
port = 4420

[[subsystems]]
nqn = "nqn.2026-11.io.ebof:vol"

[[subsystems.namespaces]]
backend = "ram"
size = "64M"
ana_group = 2
"#;

fn parse(extra_ns: &str, extra: &str) -> Result<Config, ebof_config::ConfigError> {
    Config::from_toml_str(&format!("{BASE}{extra_ns}\n{extra}"))
}

#[test]
fn a_mirrored_namespace_with_defaults_round_trips() {
    let c = parse(
        r#"mirror = { peer = "127.0.0.2:4420", role = "primary" }"#,
        "",
    )
    .unwrap();
    let m = c.subsystems[0].namespaces[0].mirror.unwrap();
    assert_eq!(m.peer, "127.0.0.2:4420".parse().unwrap());
    assert_eq!(m.role, MirrorRole::Primary);
    assert_eq!(c.mirror, MirrorSettings::default());
    assert_eq!(c.mirror.link_hostnqn, DEFAULT_LINK_HOSTNQN);
    assert_eq!(c.witness, None);
    let again = Config::from_toml_str(&c.to_toml_string()).unwrap();
    assert_eq!(again, c);
    // Defaults are not written: the saved file stays as short as the one written by hand.
    assert!(!c.to_toml_string().contains("[mirror]"));
}

#[test]
fn every_mirror_and_witness_key_round_trips() {
    let c = parse(
        r#"mirror = { peer = "10.0.0.2", role = "secondary" }"#,
        r#"
[mirror]
witness = "10.0.0.9:4420"
lease_ms = 2500
resync_mbps = 800
link_hostnqn = "nqn.2026-11.io.example:link"
link_queues = 4
region_kib = 256

[witness]
lease_max_ms = 30000
hosts = ["nqn.2026-11.io.example:link", "nqn.2026-11.io.example:other"]
"#,
    )
    .unwrap();
    let m = c.subsystems[0].namespaces[0].mirror.unwrap();
    assert_eq!(m.peer.port(), 4420, "the NVMe/TCP port by default");
    assert_eq!(m.role, MirrorRole::Secondary);
    assert_eq!(c.mirror.witness, Some("10.0.0.9:4420".parse().unwrap()));
    assert_eq!(
        (
            c.mirror.lease_ms,
            c.mirror.resync_mbps,
            c.mirror.link_queues,
            c.mirror.region_kib
        ),
        (2500, 800, 4, 256)
    );
    assert_eq!(
        c.witness,
        Some(WitnessSettings {
            lease_max_ms: 30000,
            hosts: vec![
                "nqn.2026-11.io.example:link".into(),
                "nqn.2026-11.io.example:other".into()
            ],
        })
    );
    let again = Config::from_toml_str(&c.to_toml_string()).unwrap();
    assert_eq!(again, c);
}

#[test]
fn a_witness_alone_takes_the_link_nqn_by_default() {
    let c = parse("", "[witness]\n").unwrap();
    assert_eq!(c.witness, Some(WitnessSettings::default()));
    assert_eq!(
        c.witness.unwrap().hosts,
        vec![DEFAULT_LINK_HOSTNQN.to_string()]
    );
}

/// (namespace line, extra sections, code, path) of refused documents.
const REFUSED: &[(&str, &str, &str, &str)] = &[
    (
        r#"mirror = { peer = "127.0.0.2:4420" }"#,
        "",
        codes::MISSING_FIELD,
        "subsystems[0].namespaces[0].mirror.role",
    ),
    (
        r#"mirror = { role = "primary" }"#,
        "",
        codes::MISSING_FIELD,
        "subsystems[0].namespaces[0].mirror.peer",
    ),
    (
        r#"mirror = { peer = "127.0.0.2:4420", role = "leader" }"#,
        "",
        codes::INVALID_MIRROR,
        "subsystems[0].namespaces[0].mirror.role",
    ),
    (
        r#"mirror = { peer = "no such host", role = "primary" }"#,
        "",
        codes::INVALID_ADDRESS,
        "subsystems[0].namespaces[0].mirror.peer",
    ),
    (
        r#"mirror = { peer = "0.0.0.0:4420", role = "primary" }"#,
        "",
        codes::INVALID_MIRROR,
        "subsystems[0].namespaces[0].mirror.peer",
    ),
    (
        r#"mirror = { peer = "127.0.0.1:4420", role = "primary" }"#,
        "",
        codes::INVALID_MIRROR,
        "subsystems[0].namespaces[0].mirror.peer",
    ),
    (
        r#"mirror = { peer = "127.0.0.2:4420", role = "primary", extra = 1 }"#,
        "",
        codes::UNKNOWN_FIELD,
        "subsystems[0].namespaces[0].mirror.extra",
    ),
    (
        r#"mirror = { peer = "127.0.0.2:4420", role = "primary" }"#,
        "[[subsystems.namespaces]]\nbackend = \"ram\"\nsize = \"1M\"\nana_group = 2\n",
        codes::INVALID_MIRROR,
        "subsystems[0].namespaces[0].ana_group",
    ),
    (
        r#"mirror = { peer = "127.0.0.2:4420", role = "primary" }"#,
        "[[ana]]\nlistener = \"127.0.0.1:4420\"\ngroup = 2\nstate = \"inaccessible\"\n",
        codes::INVALID_MIRROR,
        "subsystems[0].namespaces[0].ana_group",
    ),
    (
        r#"mirror = { peer = "127.0.0.2:4420", role = "primary" }
hosts = ["nqn.2026-11.io.example:h"]"#,
        "",
        codes::INVALID_MIRROR,
        "subsystems[0].namespaces[0].hosts",
    ),
    (
        "",
        "[mirror]\nlease_ms = 50\n",
        codes::INVALID_MIRROR,
        "mirror.lease_ms",
    ),
    (
        "",
        "[mirror]\nlease_ms = 60001\n",
        codes::INVALID_MIRROR,
        "mirror.lease_ms",
    ),
    (
        "",
        "[mirror]\nlink_queues = 0\n",
        codes::INVALID_MIRROR,
        "mirror.link_queues",
    ),
    (
        "",
        "[mirror]\nregion_kib = 1000\n",
        codes::INVALID_MIRROR,
        "mirror.region_kib",
    ),
    (
        "",
        "[mirror]\nregion_kib = 2\n",
        codes::INVALID_MIRROR,
        "mirror.region_kib",
    ),
    (
        "",
        "[mirror]\nresync_mbps = -1\n",
        codes::INVALID_MIRROR,
        "mirror.resync_mbps",
    ),
    (
        "",
        "[mirror]\nlink_hostnqn = \"link\"\n",
        codes::INVALID_NQN,
        "mirror.link_hostnqn",
    ),
    (
        "",
        "[mirror]\nwitness = \"\"\n",
        codes::INVALID_ADDRESS,
        "mirror.witness",
    ),
    (
        "",
        "[mirror]\nleader = 1\n",
        codes::UNKNOWN_FIELD,
        "mirror.leader",
    ),
    (
        "",
        "[witness]\nlease_max_ms = 0\n",
        codes::INVALID_MIRROR,
        "witness.lease_max_ms",
    ),
    (
        "",
        "[witness]\nhosts = [\"x\"]\n",
        codes::INVALID_NQN,
        "witness.hosts[0]",
    ),
    (
        "",
        "[witness]\nhosts = [\"nqn.2026-11.io.example:a\", \"nqn.2026-11.io.example:a\"]\n",
        codes::DUPLICATE_HOST,
        "witness.hosts[1]",
    ),
];

#[test]
fn bad_mirror_settings_are_refused_with_code_and_path() {
    for (ns, extra, code, path) in REFUSED {
        let e = parse(ns, extra).expect_err(&format!("accepted: {ns} / {extra}"));
        assert_eq!(
            (e.code, e.path.as_str()),
            (*code, *path),
            "{ns} / {extra}: {e}"
        );
    }
}

#[test]
fn a_restricted_subsystem_must_admit_the_link() {
    let doc = BASE.replace(
        "nqn = \"nqn.2026-11.io.ebof:vol\"",
        "nqn = \"nqn.2026-11.io.ebof:vol\"\nhosts = [\"nqn.2026-11.io.example:h\"]",
    );
    let ns = r#"mirror = { peer = "127.0.0.2:4420", role = "primary" }"#;
    let e = Config::from_toml_str(&format!("{doc}{ns}\n")).unwrap_err();
    assert_eq!(
        (e.code, e.path.as_str()),
        (codes::INVALID_MIRROR, "subsystems[0].hosts")
    );
    let ok = doc.replace(
        "hosts = [\"nqn.2026-11.io.example:h\"]",
        &format!("hosts = [\"nqn.2026-11.io.example:h\", \"{DEFAULT_LINK_HOSTNQN}\"]"),
    );
    Config::from_toml_str(&format!("{ok}{ns}\n")).unwrap();
}

#[test]
fn a_ram_mirror_needs_a_state_directory_a_file_mirror_does_not() {
    let doc = BASE.replace("state_dir = \"/var/lib/ebof-test-state\"", "");
    let ns = r#"mirror = { peer = "127.0.0.2:4420", role = "primary" }"#;
    let e = Config::from_toml_str(&format!("{doc}{ns}\n")).unwrap_err();
    assert_eq!(
        (e.code, e.path.as_str()),
        (codes::INVALID_MIRROR, "subsystems[0].namespaces[0].mirror")
    );
    let file = doc.replace(
        "backend = \"ram\"\nsize = \"64M\"",
        "backend = \"file\"\npath = \"/tmp/ebof-mirror-test.img\"\nsize = \"64M\"",
    );
    let c = Config::from_toml_str(&format!("{file}{ns}\n")).unwrap();
    assert!(c.subsystems[0].namespaces[0].mirror.is_some());
}
