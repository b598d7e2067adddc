//! Storage pools in the configuration (`[[pools]]`, `pool = "…"` on a file namespace): parsed,
//! checked (each error with its code and field path) and emitted by `ebof ctl save` to an
//! equal configuration.

use ebof_config::{BackendChoice, Config, Pool, codes};

const LISTENER: &str = "[[listeners]]\naddress = \"127.0.0.1\"\n";

/// A pool box: two pools and no subsystem.
const POOL_BOX: &str = r#"
[[listeners]]
address = "127.0.0.1"

[[pools]]
name = "fast"
directory = "/var/lib/ebof/fast"
size = "100G"

[[pools]]
name = "bulk.2"
directory = "/srv/bulk"
"#;

#[test]
fn a_pool_box_loads_without_subsystems() {
    let c = Config::from_toml_str(POOL_BOX).unwrap();
    assert!(c.subsystems.is_empty());
    assert_eq!(
        c.pools,
        vec![
            Pool {
                name: "fast".into(),
                directory: "/var/lib/ebof/fast".into(),
                size: Some(100 << 30),
                encryption: None,
            },
            Pool {
                name: "bulk.2".into(),
                directory: "/srv/bulk".into(),
                size: None,
                encryption: None,
            },
        ]
    );
    assert_eq!(c.pool("bulk.2").unwrap().size, None);
    assert!(c.pool("nope").is_none());
    let text = c.to_toml_string();
    assert!(
        text.contains(
            "[[pools]]\nname = \"fast\"\ndirectory = \"/var/lib/ebof/fast\"\nsize = \"100G\"\n"
        ),
        "{text}"
    );
    assert_eq!(Config::from_toml_str(&text).unwrap(), c);
}

/// A subsystem with one namespace whose body is `ns`, after the pool box.
fn with_ns(ns: &str) -> String {
    format!(
        "{POOL_BOX}\n[[subsystems]]\nnqn = \"nqn.2026-11.io.ebof:v\"\n[[subsystems.namespaces]]\n{ns}\n"
    )
}

#[test]
fn a_pool_namespace_round_trips() {
    let c = Config::from_toml_str(&with_ns(
        "backend = \"file\"\npath = \"/var/lib/ebof/fast/nqn.2026-11.io.ebof_v.ns1.img\"\nsize = \"1G\"\npool = \"fast\"",
    ))
    .unwrap();
    let n = &c.subsystems[0].namespaces[0];
    assert_eq!(n.pool.as_deref(), Some("fast"));
    assert_eq!(
        n.backend,
        BackendChoice::File {
            path: "/var/lib/ebof/fast/nqn.2026-11.io.ebof_v.ns1.img".into(),
            size: Some(1 << 30)
        }
    );
    assert_eq!(
        c.pool("fast").unwrap().file_for("nqn.2026-11.io.ebof:v", 1),
        std::path::Path::new("/var/lib/ebof/fast/nqn.2026-11.io.ebof_v.ns1.img")
    );
    let text = c.to_toml_string();
    assert!(text.contains("size = \"1G\"\npool = \"fast\"\n"), "{text}");
    assert_eq!(Config::from_toml_str(&text).unwrap(), c);
    // Without a pool, no `pool` key is written.
    let plain = Config::from_toml_str(&with_ns(
        "backend = \"file\"\npath = \"/tmp/x.img\"\nsize = \"1G\"",
    ))
    .unwrap();
    assert_eq!(plain.subsystems[0].namespaces[0].pool, None);
    assert!(!plain.to_toml_string().contains("pool = "));
}

#[test]
fn each_pool_rule_reports_code_and_path() {
    let pool = |body: &str| format!("{LISTENER}[[pools]]\n{body}\n");
    let cases: Vec<(&str, String, &str, &str)> = vec![
        (
            "name missing",
            pool("directory = \"/p\""),
            codes::MISSING_FIELD,
            "pools[0].name",
        ),
        (
            "directory missing",
            pool("name = \"p\""),
            codes::MISSING_FIELD,
            "pools[0].directory",
        ),
        (
            "bad name",
            pool("name = \"a b\"\ndirectory = \"/p\""),
            codes::INVALID_POOL,
            "pools[0].name",
        ),
        (
            "empty name",
            pool("name = \"\"\ndirectory = \"/p\""),
            codes::INVALID_POOL,
            "pools[0].name",
        ),
        (
            "long name",
            pool(&format!(
                "name = \"{}\"\ndirectory = \"/p\"",
                "x".repeat(65)
            )),
            codes::INVALID_POOL,
            "pools[0].name",
        ),
        (
            "relative directory",
            pool("name = \"p\"\ndirectory = \"var/p\""),
            codes::INVALID_PATH,
            "pools[0].directory",
        ),
        (
            "root directory",
            pool("name = \"p\"\ndirectory = \"/\""),
            codes::INVALID_PATH,
            "pools[0].directory",
        ),
        (
            "dot-dot directory",
            pool("name = \"p\"\ndirectory = \"/a/../b\""),
            codes::INVALID_PATH,
            "pools[0].directory",
        ),
        (
            "bad size",
            pool("name = \"p\"\ndirectory = \"/p\"\nsize = \"1X\""),
            codes::INVALID_SIZE,
            "pools[0].size",
        ),
        (
            "negative size",
            pool("name = \"p\"\ndirectory = \"/p\"\nsize = -1"),
            codes::INVALID_SIZE,
            "pools[0].size",
        ),
        (
            "zero size",
            pool("name = \"p\"\ndirectory = \"/p\"\nsize = 0"),
            codes::INVALID_SIZE,
            "pools[0].size",
        ),
        (
            "unknown key",
            pool("name = \"p\"\ndirectory = \"/p\"\nsizee = 1"),
            codes::UNKNOWN_FIELD,
            "pools[0].sizee",
        ),
        (
            "duplicate name",
            format!("{POOL_BOX}[[pools]]\nname = \"fast\"\ndirectory = \"/q\"\n"),
            codes::DUPLICATE_POOL,
            "pools[2].name",
        ),
        (
            "duplicate directory",
            format!("{POOL_BOX}[[pools]]\nname = \"q\"\ndirectory = \"/srv/bulk\"\n"),
            codes::DUPLICATE_PATH,
            "pools[2].directory",
        ),
        (
            "unknown pool",
            with_ns("backend = \"file\"\npath = \"/var/lib/ebof/fast/a.img\"\npool = \"slow\""),
            codes::UNKNOWN_POOL,
            "subsystems[0].namespaces[0].pool",
        ),
        (
            "file outside the pool",
            with_ns("backend = \"file\"\npath = \"/var/lib/ebof/other/a.img\"\npool = \"fast\""),
            codes::INVALID_PATH,
            "subsystems[0].namespaces[0].path",
        ),
        (
            "relative file",
            with_ns("backend = \"file\"\npath = \"a.img\"\npool = \"fast\""),
            codes::INVALID_PATH,
            "subsystems[0].namespaces[0].path",
        ),
        (
            "pool on ram",
            with_ns("backend = \"ram\"\nsize = \"1M\"\npool = \"fast\""),
            codes::FORBIDDEN_FIELD,
            "subsystems[0].namespaces[0].pool",
        ),
        (
            "pool on block",
            with_ns("backend = \"block\"\npath = \"/dev/null\"\npool = \"fast\""),
            codes::FORBIDDEN_FIELD,
            "subsystems[0].namespaces[0].pool",
        ),
        (
            "malformed pool reference",
            with_ns("backend = \"file\"\npath = \"/var/lib/ebof/fast/a.img\"\npool = \"a/b\""),
            codes::INVALID_POOL,
            "subsystems[0].namespaces[0].pool",
        ),
    ];
    for (what, text, code, path) in cases {
        let e = Config::from_toml_str(&text).unwrap_err();
        assert_eq!((e.code, e.path.as_str()), (code, path), "{what}: {e}");
        assert!(e.message.len() > 10, "{what}: {e}");
    }
    // The unknown pool's message lists the pools there are.
    let e = Config::from_toml_str(&with_ns(
        "backend = \"file\"\npath = \"/var/lib/ebof/fast/a.img\"\npool = \"slow\"",
    ))
    .unwrap_err();
    assert!(e.message.contains("fast, bulk.2"), "{e}");
}

#[test]
fn codes_are_listed() {
    for c in [
        codes::INVALID_POOL,
        codes::DUPLICATE_POOL,
        codes::UNKNOWN_POOL,
    ] {
        assert!(codes::ALL.contains(&c), "{c}");
    }
}
