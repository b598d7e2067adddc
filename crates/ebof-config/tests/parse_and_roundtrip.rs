//! Parsing of complete documents: the embedded default, the shipped
//! example, a full document with every key, and the TOML round trip.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

use ebof_config::{
    AnaSetting, AnaState, BackendChoice, Config, DEFAULT_NQN, IoEngine, Listener, Namespace,
    Subsystem, TargetTuning, codes, derived_serial, derived_uuid,
};

fn example_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/ebof.toml")
}

#[test]
fn embedded_default_validates_and_matches_its_doc() {
    let c = Config::embedded_default();
    c.validate().unwrap();
    assert_eq!(c.target, TargetTuning::default());
    assert_eq!(
        c.listeners,
        vec![Listener {
            address: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: 4420
        }]
    );
    assert_eq!(
        c.discovery,
        Some(Listener {
            address: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: 8009
        })
    );
    assert_eq!(c.subsystems.len(), 1);
    let s = &c.subsystems[0];
    assert_eq!(s.nqn, DEFAULT_NQN);
    assert!(s.allow_any_host);
    assert!(s.hosts.is_empty());
    assert_eq!(s.model, "ebof");
    assert_eq!(s.serial, derived_serial("EBOF", DEFAULT_NQN));
    assert_eq!(
        s.namespaces,
        vec![Namespace {
            nsid: 1,
            backend: BackendChoice::Ram { size: 1 << 30 },
            block_size: 512,
            uuid: derived_uuid(DEFAULT_NQN, 1),
            direct: false,
            ana_group: 1,
            hosts: None,
            qos: Default::default(),
            pool: None,
            mirror: None,
            encryption: None,
        }]
    );
}

#[test]
fn minimal_file_equals_embedded_default() {
    let c = Config::from_toml_str(
        r#"
        [[listeners]]
        address = "127.0.0.1"

        [discovery]
        address = "127.0.0.1"

        [[subsystems]]
        nqn = "nqn.2026-11.io.ebof:default"

        [[subsystems.namespaces]]
        backend = "ram"
        size = "1G"
        "#,
    )
    .unwrap();
    assert_eq!(c, Config::embedded_default());
}

#[test]
fn shipped_example_loads() {
    let c = Config::load(&example_path()).unwrap();
    assert_eq!(c.target.cores, Some(vec![0, 1]));
    assert_eq!(c.listeners.len(), 2);
    assert_eq!(c.listeners[1].address, IpAddr::V6(Ipv6Addr::LOCALHOST));
    assert_eq!(c.discovery.unwrap().port, 8009);
    assert_eq!(c.subsystems.len(), 2);
    assert_eq!(c.subsystems[0].namespaces.len(), 2);
    let restricted = &c.subsystems[1];
    assert!(!restricted.allow_any_host);
    assert_eq!(restricted.serial, "EBOF-RESTRICTED-01");
    assert_eq!(
        restricted.namespaces[0].backend,
        BackendChoice::Block {
            path: "/dev/nvme0n1".into()
        }
    );
    assert_eq!(restricted.namespaces[0].nsid, 1);
    // And it survives the round trip.
    assert_eq!(Config::from_toml_str(&c.to_toml_string()).unwrap(), c);
}

const FULL: &str = r#"
[target]
cores = "0-2,5"
io_inline_data = 16384
max_h2c_data = 65536
c2h_data_max = 32768
max_transfer = 262144
max_io_queues = 8
max_namespaces = 64
max_queue_size = 256
handshake_timeout_ms = 2500
max_connections = 100
max_connections_per_address = 10
serial_prefix = "TEST"
ram_huge_pages = false
io_engine = "threads"
io_threads = 2
state_dir = "/var/lib/ebof"
tls_rekey_records = 1000
tls_key_update = "always"

[[listeners]]
address = "0.0.0.0"

[[listeners]]
address = "[::1]"
port = 4421

[discovery]
address = "::1"

[[subsystems]]
nqn = "nqn.2026-11.io.ebof:a"
serial = "SER-A"
model = "ebof test model"
allow_any_host = false
hosts = ["nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555"]

[[subsystems.namespaces]]
backend = "ram"
size = 1048576

[[subsystems.namespaces]]
nsid = 7
backend = "file"
path = "/tmp/a.img"
block_size = 4096
direct = true
uuid = "{0B6B6F2E-5D1C-4B8E-9A51-3F0C2D7E8A14}"
ana_group = 2

[[subsystems.namespaces]]
backend = "file"
path = "b.img"
size = "3 MiB"

[[subsystems]]
nqn = "nqn.2026-11.io.ebof:b"

[[ana]]
listener = "[::1]:4421"
group = 2
state = "inaccessible"

[[ana]]
listener = "0.0.0.0"
group = 32
state = "change"
"#;

#[test]
fn full_document_parses_to_expected_values() {
    let c = Config::from_toml_str(FULL).unwrap();
    assert_eq!(
        c.target,
        TargetTuning {
            cores: Some(vec![0, 1, 2, 5]),
            io_inline_data: 16384,
            max_h2c_data: 65536,
            c2h_data_max: 32768,
            max_transfer: 262144,
            max_io_queues: 8,
            max_namespaces: 64,
            max_queue_size: 256,
            cntlid_min: 1,
            cntlid_max: 0xFFEF,
            handshake_timeout_ms: 2500,
            max_connections: 100,
            max_connections_per_address: 10,
            serial_prefix: "TEST".into(),
            ram_huge_pages: false,
            io_engine: IoEngine::Threads,
            io_threads: 2,
            state_dir: Some("/var/lib/ebof".into()),
            tls_rekey_records: 1000,
            tls_key_update: ebof_config::TlsKeyUpdate::Always,
        }
    );
    assert_eq!(
        c.listeners,
        vec![
            Listener {
                address: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                port: 4420
            },
            Listener {
                address: IpAddr::V6(Ipv6Addr::LOCALHOST),
                port: 4421
            },
        ]
    );
    assert_eq!(
        c.discovery,
        Some(Listener {
            address: IpAddr::V6(Ipv6Addr::LOCALHOST),
            port: 8009
        })
    );
    assert_eq!(c.listeners[1].socket_addr().to_string(), "[::1]:4421");
    let a = &c.subsystems[0];
    assert_eq!(
        a,
        &Subsystem {
            nqn: "nqn.2026-11.io.ebof:a".into(),
            serial: "SER-A".into(),
            model: "ebof test model".into(),
            allow_any_host: false,
            hosts: vec![
                "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555".into()
            ],
            namespaces: vec![
                Namespace {
                    nsid: 1,
                    backend: BackendChoice::Ram { size: 1 << 20 },
                    block_size: 512,
                    uuid: derived_uuid("nqn.2026-11.io.ebof:a", 1),
                    direct: false,
                    ana_group: 1,
                    hosts: None,
                    qos: Default::default(),
                    pool: None,
                    mirror: None,
                    encryption: None,
                },
                Namespace {
                    nsid: 7,
                    backend: BackendChoice::File {
                        path: "/tmp/a.img".into(),
                        size: None
                    },
                    block_size: 4096,
                    uuid: [
                        0x0b, 0x6b, 0x6f, 0x2e, 0x5d, 0x1c, 0x4b, 0x8e, 0x9a, 0x51, 0x3f, 0x0c,
                        0x2d, 0x7e, 0x8a, 0x14
                    ],
                    direct: true,
                    ana_group: 2,
                    hosts: None,
                    qos: Default::default(),
                    pool: None,
                    mirror: None,
                    encryption: None,
                },
                Namespace {
                    nsid: 3,
                    backend: BackendChoice::File {
                        path: "b.img".into(),
                        size: Some(3 << 20)
                    },
                    block_size: 512,
                    uuid: derived_uuid("nqn.2026-11.io.ebof:a", 3),
                    direct: false,
                    ana_group: 1,
                    hosts: None,
                    qos: Default::default(),
                    pool: None,
                    mirror: None,
                    encryption: None,
                },
            ],
        }
    );
    assert_eq!(
        c.ana,
        vec![
            AnaSetting {
                listener: c.listeners[1],
                group: 2,
                state: AnaState::Inaccessible,
            },
            AnaSetting {
                listener: c.listeners[0],
                group: 32,
                state: AnaState::Change,
            },
        ]
    );
    assert_eq!(c.ana_state(&c.listeners[1], 2), AnaState::Inaccessible);
    assert_eq!(c.ana_state(&c.listeners[1], 1), AnaState::Optimized);
    let b = &c.subsystems[1];
    assert_eq!(b.serial, derived_serial("TEST", "nqn.2026-11.io.ebof:b"));
    assert!(b.serial.starts_with("TEST") && b.serial.len() == 20);
    assert!(b.allow_any_host);
    assert!(b.namespaces.is_empty());
}

#[test]
fn round_trip() {
    for c in [
        Config::embedded_default(),
        Config::from_toml_str(FULL).unwrap(),
    ] {
        let text = c.to_toml_string();
        let back = Config::from_toml_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(back, c, "{text}");
        // The emitted text is a fixed point.
        assert_eq!(back.to_toml_string(), text);
    }
}

#[test]
fn round_trip_of_awkward_values() {
    let mut c = Config::embedded_default();
    c.subsystems[0].model = r#"it's a "model" \ ok"#.into();
    c.subsystems[0].namespaces.push(Namespace {
        nsid: 0xFFFF_FFFE,
        backend: BackendChoice::File {
            path: r"C:\odd 'path'.img".into(),
            size: Some(u64::MAX - 511),
        },
        block_size: 512,
        uuid: [0xff; 16],
        direct: true,
        ana_group: 1,
        hosts: None,
        qos: Default::default(),
        pool: None,
        mirror: None,
        encryption: None,
    });
    c.subsystems[0].namespaces.push(Namespace {
        nsid: 2,
        backend: BackendChoice::Ram { size: 1536 },
        block_size: 512,
        uuid: [1; 16],
        direct: false,
        ana_group: 1,
        hosts: None,
        qos: Default::default(),
        pool: None,
        mirror: None,
        encryption: None,
    });
    c.listeners.push(Listener {
        address: "fe80::1".parse().unwrap(),
        port: 0,
    });
    c.target.cores = Some(vec![3, 1]);
    c.target.serial_prefix = String::new();
    c.validate().unwrap();
    let text = c.to_toml_string();
    assert_eq!(Config::from_toml_str(&text).unwrap(), c, "{text}");
}

#[test]
fn load_errors_name_the_file() {
    let missing = Path::new("/nonexistent/ebof-config-test.toml");
    let e = Config::load(missing).unwrap_err();
    assert_eq!(e.code, codes::IO);
    assert_eq!(e.file.as_deref(), Some(missing));
    assert!(
        e.to_string().contains("/nonexistent/ebof-config-test.toml"),
        "{e}"
    );

    let dir = std::env::temp_dir().join(format!("ebof-config-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bad.toml");
    std::fs::write(&file, "[[listeners]]\naddress = \"127.0.0.1\"\nprot = 1\n").unwrap();
    let e = Config::load(&file).unwrap_err();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(e.code, codes::UNKNOWN_FIELD);
    assert_eq!(e.path, "listeners[0].prot");
    assert!(e.message.contains("line 3"), "{e}");
    let shown = e.to_string();
    assert!(
        shown.starts_with(&format!(
            "config error in {} at listeners[0].prot: ",
            file.display()
        )),
        "{shown}"
    );
}

#[test]
fn discovery_settings_parse_and_round_trip() {
    let base = "[[listeners]]\naddress = \"10.0.0.1\"\n\n[[subsystems]]\nnqn = \"nqn.2026-11.io.ebof:a\"\nallow_any_host = true\n[[subsystems.namespaces]]\nnsid = 1\nbackend = \"ram\"\nsize = \"1M\"\n";
    // Settings without a dedicated listener.
    let text = format!(
        "{base}\n[discovery]\nmdns = false\nreferrals = [\"10.0.0.2\", \"[fd00::3]:4430\"]\n"
    );
    let c = Config::from_toml_str(&text).unwrap();
    assert_eq!(c.discovery, None);
    assert_eq!(c.discovery_settings.mdns, Some(false));
    let r: Vec<String> = c
        .discovery_settings
        .referrals
        .iter()
        .map(|l| l.to_string())
        .collect();
    assert_eq!(r, ["10.0.0.2:8009", "[fd00::3]:4430"]);
    let back = Config::from_toml_str(&c.to_toml_string()).unwrap();
    assert_eq!(back, c);
    // With a dedicated listener.
    let text = format!("{base}\n[discovery]\naddress = \"10.0.0.1\"\nmdns = true\n");
    let c = Config::from_toml_str(&text).unwrap();
    assert!(c.discovery.is_some());
    assert_eq!(c.discovery_settings.mdns, Some(true));
    assert_eq!(Config::from_toml_str(&c.to_toml_string()).unwrap(), c);
    // Errors name their field.
    for (bad, field) in [
        (
            "referrals = [\"10.0.0.2\", \"10.0.0.2:8009\"]",
            "discovery.referrals[1]",
        ),
        ("referrals = [\"nowhere\"]", "discovery.referrals[0]"),
        ("port = 8009", "discovery.address"),
    ] {
        let e = Config::from_toml_str(&format!("{base}\n[discovery]\n{bad}\n")).unwrap_err();
        assert_eq!(e.path, field, "{bad}: {e}");
    }
}

#[test]
fn cdc_and_pool_box_parse_and_round_trip() {
    // A pool box: listeners and nothing else.
    let pool = Config::from_toml_str("[[listeners]]\naddress = \"10.0.0.1\"\n").unwrap();
    assert!(pool.subsystems.is_empty());
    assert_eq!(pool.cdc, None);
    assert_eq!(Config::from_toml_str(&pool.to_toml_string()).unwrap(), pool);
    // A CDC.
    let text = "[[listeners]]\naddress = \"10.0.0.1\"\n[discovery]\naddress = \"10.0.0.1\"\n\n[cdc]\nmembers = [\"10.0.0.11\", \"10.0.0.12:4420\", \"[fd00::13]\"]\nhostnqn = \"nqn.2026-11.io.example:cdc\"\n";
    let c = Config::from_toml_str(text).unwrap();
    let cdc = c.cdc.clone().unwrap();
    let m: Vec<String> = cdc.members.iter().map(|l| l.to_string()).collect();
    assert_eq!(m, ["10.0.0.11:8009", "10.0.0.12:4420", "[fd00::13]:8009"]);
    assert_eq!(cdc.hostnqn.as_deref(), Some("nqn.2026-11.io.example:cdc"));
    assert_eq!(Config::from_toml_str(&c.to_toml_string()).unwrap(), c);
    // A member announcing itself to a CDC.
    let c = Config::from_toml_str(
        "[[listeners]]\naddress = \"10.0.0.11\"\n[discovery]\ncdc = \"10.0.0.1\"\n",
    )
    .unwrap();
    assert_eq!(
        c.discovery_settings.cdc.map(|l| l.to_string()).as_deref(),
        Some("10.0.0.1:8009")
    );
    assert_eq!(Config::from_toml_str(&c.to_toml_string()).unwrap(), c);
    let e = Config::from_toml_str(
        "[[listeners]]\naddress = \"10.0.0.11\"\n[discovery]\ncdc = \"cdc-box\"\n",
    )
    .unwrap_err();
    assert_eq!(e.path, "discovery.cdc");
    // An empty member list is a CDC too (members are added at run time).
    let c = Config::from_toml_str("[[listeners]]\naddress = \"10.0.0.1\"\n[cdc]\n").unwrap();
    assert_eq!(c.cdc.as_ref().map(|c| c.members.len()), Some(0));
    assert_eq!(Config::from_toml_str(&c.to_toml_string()).unwrap(), c);
}
