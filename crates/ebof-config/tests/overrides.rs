//! `ebof serve` command-line overrides.

use std::path::PathBuf;

use ebof_config::{
    BackendChoice, Config, DEFAULT_NQN, Listener, Overrides, codes, derived_serial, derived_uuid,
};

fn listener(s: &str) -> Listener {
    Listener {
        address: s
            .rsplit_once(':')
            .unwrap()
            .0
            .trim_matches(['[', ']'])
            .parse()
            .unwrap(),
        port: s.rsplit_once(':').unwrap().1.parse().unwrap(),
    }
}

#[test]
fn no_overrides_is_identity() {
    let mut c = Config::embedded_default();
    assert!(Overrides::default().is_empty());
    c.apply_overrides(&Overrides::default()).unwrap();
    assert_eq!(c, Config::embedded_default());
}

#[test]
fn listen_replaces_listeners_and_discovery_is_set() {
    let mut c = Config::embedded_default();
    c.apply_overrides(&Overrides {
        listen: vec![
            "10.0.0.1:4421".into(),
            "[::1]:4420".into(),
            "0.0.0.0".into(),
        ],
        discovery_listen: Some("127.0.0.1".into()),
        ..Overrides::default()
    })
    .unwrap();
    assert_eq!(
        c.listeners,
        vec![
            listener("10.0.0.1:4421"),
            listener("[::1]:4420"),
            listener("0.0.0.0:4420")
        ]
    );
    assert_eq!(c.discovery, Some(listener("127.0.0.1:8009")));
}

#[test]
fn ram_and_file_replace_first_subsystem_namespaces() {
    let mut c = Config::from_toml_str(
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
        block_size = 4096
        [[subsystems]]
        nqn = "nqn.2026-11.io.ebof:b"
        [[subsystems.namespaces]]
        backend = "ram"
        size = "1M"
        "#,
    )
    .unwrap();
    let untouched = c.subsystems[1].clone();
    c.apply_overrides(&Overrides {
        ram: Some("4G".into()),
        ..Overrides::default()
    })
    .unwrap();
    let ns = &c.subsystems[0].namespaces;
    assert_eq!(ns.len(), 1);
    assert_eq!(ns[0].nsid, 1);
    assert_eq!(ns[0].block_size, 512);
    assert_eq!(ns[0].backend, BackendChoice::Ram { size: 4 << 30 });
    assert_eq!(ns[0].uuid, derived_uuid("nqn.2026-11.io.ebof:a", 1));
    assert_eq!(c.subsystems[1], untouched);

    c.apply_overrides(&Overrides {
        file: Some("/tmp/x.img".into()),
        ..Overrides::default()
    })
    .unwrap();
    assert_eq!(
        c.subsystems[0].namespaces[0].backend,
        BackendChoice::File {
            path: PathBuf::from("/tmp/x.img"),
            size: None
        }
    );
}

#[test]
fn nqn_renames_and_rederives_identifiers() {
    let mut c = Config::embedded_default();
    let new = "nqn.2026-11.io.ebof:renamed";
    c.apply_overrides(&Overrides {
        nqn: Some(new.into()),
        ..Overrides::default()
    })
    .unwrap();
    assert_eq!(c.subsystems[0].nqn, new);
    assert_eq!(c.subsystems[0].serial, derived_serial("EBOF", new));
    assert_eq!(c.subsystems[0].namespaces[0].uuid, derived_uuid(new, 1));

    // Same result as a file that says `nqn = new`.
    let from_file = Config::from_toml_str(
        &Config::embedded_default()
            .to_toml_string()
            .replace(
                &format!("serial = \"{}\"", derived_serial("EBOF", DEFAULT_NQN)),
                "",
            )
            .replace(
                &format!("uuid = \"{}\"", uuid_str(derived_uuid(DEFAULT_NQN, 1))),
                "",
            )
            .replace(DEFAULT_NQN, new),
    )
    .unwrap();
    assert_eq!(c, from_file);

    // Configured identifiers are kept.
    let mut c = Config::embedded_default();
    c.subsystems[0].serial = "MINE".into();
    c.subsystems[0].namespaces[0].uuid = [7; 16];
    c.apply_overrides(&Overrides {
        nqn: Some(new.into()),
        ..Overrides::default()
    })
    .unwrap();
    assert_eq!(c.subsystems[0].serial, "MINE");
    assert_eq!(c.subsystems[0].namespaces[0].uuid, [7; 16]);
}

fn uuid_str(b: [u8; 16]) -> String {
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

#[test]
fn nqn_and_ram_create_a_subsystem_when_there_is_none() {
    let mut c = Config::embedded_default();
    c.subsystems.clear();
    let new = "nqn.2026-11.io.ebof:fresh";
    c.apply_overrides(&Overrides {
        nqn: Some(new.into()),
        ..Overrides::default()
    })
    .unwrap();
    assert_eq!(c.subsystems.len(), 1);
    assert_eq!(c.subsystems[0].nqn, new);
    assert_eq!(
        c.subsystems[0].namespaces[0].backend,
        BackendChoice::Ram { size: 1 << 30 }
    );

    let mut c = Config::embedded_default();
    c.subsystems.clear();
    c.apply_overrides(&Overrides {
        ram: Some("2M".into()),
        ..Overrides::default()
    })
    .unwrap();
    assert_eq!(c.subsystems[0].nqn, DEFAULT_NQN);
    assert_eq!(
        c.subsystems[0].namespaces[0].backend,
        BackendChoice::Ram { size: 2 << 20 }
    );
}

#[test]
fn cores_override() {
    let mut c = Config::embedded_default();
    c.apply_overrides(&Overrides {
        cores: Some("0-1,4".into()),
        ..Overrides::default()
    })
    .unwrap();
    assert_eq!(c.target.cores, Some(vec![0, 1, 4]));
}

#[test]
fn io_engine_override() {
    let mut c = Config::embedded_default();
    assert_eq!(c.target.io_engine, ebof_config::IoEngine::IoUring);
    c.apply_overrides(&Overrides {
        io_engine: Some("threads".into()),
        ..Overrides::default()
    })
    .unwrap();
    assert_eq!(c.target.io_engine, ebof_config::IoEngine::Threads);
}

#[test]
fn errors_name_the_option_and_leave_config_unchanged() {
    let cases: Vec<(Overrides, &str, &str)> = vec![
        (
            Overrides {
                ram: Some("1G".into()),
                file: Some("/x".into()),
                ..Default::default()
            },
            codes::CONFLICTING_OVERRIDES,
            "--ram",
        ),
        (
            Overrides {
                listen: vec!["localhost:4420".into()],
                ..Default::default()
            },
            codes::INVALID_ADDRESS,
            "--listen",
        ),
        (
            Overrides {
                listen: vec!["1.2.3.4:99999".into()],
                ..Default::default()
            },
            codes::INVALID_PORT,
            "--listen",
        ),
        (
            Overrides {
                listen: vec!["[::1]:4420".into(), "[::1]".into()],
                ..Default::default()
            },
            codes::DUPLICATE_LISTENER,
            "--listen",
        ),
        (
            Overrides {
                discovery_listen: Some("127.0.0.1:4420".into()),
                ..Default::default()
            },
            codes::DUPLICATE_LISTENER,
            "--discovery-listen",
        ),
        (
            Overrides {
                discovery_listen: Some("[::1".into()),
                ..Default::default()
            },
            codes::INVALID_ADDRESS,
            "--discovery-listen",
        ),
        (
            Overrides {
                ram: Some("99999999999T".into()),
                ..Default::default()
            },
            codes::INVALID_SIZE,
            "--ram",
        ),
        (
            Overrides {
                ram: Some("1000".into()),
                ..Default::default()
            },
            codes::INVALID_SIZE,
            "--ram",
        ),
        (
            Overrides {
                ram: Some("0".into()),
                ..Default::default()
            },
            codes::INVALID_SIZE,
            "--ram",
        ),
        (
            Overrides {
                file: Some("".into()),
                ..Default::default()
            },
            codes::INVALID_PATH,
            "--file",
        ),
        (
            Overrides {
                nqn: Some("bogus".into()),
                ..Default::default()
            },
            codes::INVALID_NQN,
            "--nqn",
        ),
        (
            Overrides {
                nqn: Some("nqn.2014-08.org.nvmexpress.discovery".into()),
                ..Default::default()
            },
            codes::RESERVED_NQN,
            "--nqn",
        ),
        (
            Overrides {
                cores: Some("3-1".into()),
                ..Default::default()
            },
            codes::INVALID_CORES,
            "--cores",
        ),
        (
            Overrides {
                cores: Some("".into()),
                ..Default::default()
            },
            codes::INVALID_CORES,
            "--cores",
        ),
        (
            Overrides {
                io_engine: Some("uring".into()),
                ..Default::default()
            },
            codes::INVALID_TUNING,
            "--io-engine",
        ),
    ];
    for (o, code, path) in cases {
        let mut c = Config::embedded_default();
        let e = c.apply_overrides(&o).unwrap_err();
        assert_eq!((e.code, e.path.as_str()), (code, path), "{o:?}: {e}");
        assert_eq!(c, Config::embedded_default(), "{o:?} changed the config");
    }
}

#[test]
fn nqn_override_cannot_duplicate_another_subsystem() {
    let mut c = Config::embedded_default();
    let mut other = c.subsystems[0].clone();
    other.nqn = "nqn.2026-11.io.ebof:other".into();
    other.serial = "OTHER".into();
    other.namespaces.clear();
    c.subsystems.push(other);
    let e = c
        .apply_overrides(&Overrides {
            nqn: Some("nqn.2026-11.io.ebof:other".into()),
            ..Overrides::default()
        })
        .unwrap_err();
    assert_eq!((e.code, e.path.as_str()), (codes::DUPLICATE_NQN, "--nqn"));
}
