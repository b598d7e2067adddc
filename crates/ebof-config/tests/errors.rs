//! Every error has the right code and path: one row per rule.

use ebof_config::{Config, codes};

/// A valid document; each case appends to it or replaces a piece of it.
const BASE: &str = r#"
[[listeners]]
address = "127.0.0.1"

[[subsystems]]
nqn = "nqn.2026-11.io.ebof:a"

[[subsystems.namespaces]]
backend = "ram"
size = "1M"
"#;

/// The base with `[target]` keys.
fn target(keys: &str) -> String {
    format!("[target]\n{keys}\n{BASE}")
}

/// The base plus a second subsystem whose body is `body`.
fn second(body: &str) -> String {
    format!("{BASE}\n[[subsystems]]\n{body}\n")
}

/// The base with the first namespace's body replaced by `body`.
fn ns(body: &str) -> String {
    format!(
        "[[listeners]]\naddress = \"127.0.0.1\"\n[[subsystems]]\nnqn = \"nqn.2026-11.io.ebof:a\"\n[[subsystems.namespaces]]\n{body}\n"
    )
}

#[test]
fn base_is_valid() {
    Config::from_toml_str(BASE).unwrap();
}

#[test]
fn each_rule_reports_code_and_path() {
    let cases: Vec<(&str, String, &str, &str)> = vec![
        // --- document level
        ("toml syntax", "[[listeners]\n".into(), codes::PARSE, ""),
        (
            "duplicate key",
            format!("{BASE}size = 2\n"),
            codes::PARSE,
            "",
        ),
        (
            "unknown top-level key",
            format!("bogus = 1\n{BASE}"),
            codes::UNKNOWN_FIELD,
            "bogus",
        ),
        (
            "unknown nested key",
            ns("backend = \"ram\"\nsize = 512\nsise = 1"),
            codes::UNKNOWN_FIELD,
            "subsystems[0].namespaces[0].sise",
        ),
        (
            "wrong type",
            target("max_io_queues = \"many\""),
            codes::INVALID_TYPE,
            "target.max_io_queues",
        ),
        (
            "wrong type in array",
            second("nqn = \"nqn.x:b\"\nhosts = [1]"),
            codes::INVALID_TYPE,
            "subsystems[1].hosts[0]",
        ),
        (
            "no listeners",
            BASE.replace("[[listeners]]\naddress = \"127.0.0.1\"\n", ""),
            codes::NO_LISTENERS,
            "listeners",
        ),
        (
            "cdc member not an address",
            "[[listeners]]\naddress = \"127.0.0.1\"\n[cdc]\nmembers = [\"10.0.0.1:8009\", \"box-2\"]\n".into(),
            codes::INVALID_ADDRESS,
            "cdc.members[1]",
        ),
        (
            "cdc member twice",
            "[[listeners]]\naddress = \"127.0.0.1\"\n[cdc]\nmembers = [\"10.0.0.1\", \"10.0.0.1:8009\"]\n".into(),
            codes::INVALID_ADDRESS,
            "cdc.members[1]",
        ),
        (
            "cdc hostnqn",
            "[[listeners]]\naddress = \"127.0.0.1\"\n[cdc]\nhostnqn = \"cdc\"\n".into(),
            codes::INVALID_NQN,
            "cdc.hostnqn",
        ),
        (
            "cdc unknown key",
            "[[listeners]]\naddress = \"127.0.0.1\"\n[cdc]\nmember = []\n".into(),
            codes::UNKNOWN_FIELD,
            "cdc.member",
        ),
        // --- target
        (
            "cores out of range",
            target("cores = [0, 9000]"),
            codes::INVALID_CORES,
            "target.cores[1]",
        ),
        (
            "cores negative",
            target("cores = [-1]"),
            codes::INVALID_CORES,
            "target.cores[0]",
        ),
        (
            "cores duplicate",
            target("cores = [1, 1]"),
            codes::INVALID_CORES,
            "target.cores[1]",
        ),
        (
            "cores empty",
            target("cores = []"),
            codes::INVALID_CORES,
            "target.cores",
        ),
        (
            "cores string garbage",
            target("cores = \"0-\""),
            codes::INVALID_CORES,
            "target.cores",
        ),
        (
            "inline data granularity",
            target("io_inline_data = 4100"),
            codes::INVALID_TUNING,
            "target.io_inline_data",
        ),
        (
            "inline data too big",
            target("io_inline_data = 262144"),
            codes::INVALID_TUNING,
            "target.io_inline_data",
        ),
        (
            "maxh2cdata too small",
            target("max_h2c_data = 1024"),
            codes::INVALID_TUNING,
            "target.max_h2c_data",
        ),
        (
            "maxh2cdata not dword",
            target("max_h2c_data = 4098"),
            codes::INVALID_TUNING,
            "target.max_h2c_data",
        ),
        (
            "c2h data negative",
            target("c2h_data_max = -4096"),
            codes::INVALID_TUNING,
            "target.c2h_data_max",
        ),
        (
            "max transfer not a power of two",
            target("max_transfer = 12288"),
            codes::INVALID_TUNING,
            "target.max_transfer",
        ),
        (
            "max transfer too large",
            target("max_transfer = 16777216"),
            codes::INVALID_TUNING,
            "target.max_transfer",
        ),
        (
            "max transfer below a page",
            target("max_transfer = 2048"),
            codes::INVALID_TUNING,
            "target.max_transfer",
        ),
        (
            "zero io queues",
            target("max_io_queues = 0"),
            codes::INVALID_TUNING,
            "target.max_io_queues",
        ),
        (
            "zero namespaces allowed",
            target("max_namespaces = 0"),
            codes::INVALID_TUNING,
            "target.max_namespaces",
        ),
        (
            "more namespaces than 1024",
            target("max_namespaces = 1025"),
            codes::INVALID_TUNING,
            "target.max_namespaces",
        ),
        (
            "queue size beyond u16",
            target("max_queue_size = 70000"),
            codes::INVALID_TUNING,
            "target.max_queue_size",
        ),
        (
            "queue size too small",
            target("max_queue_size = 8"),
            codes::INVALID_TUNING,
            "target.max_queue_size",
        ),
        (
            "handshake deadline too short",
            target("handshake_timeout_ms = 10"),
            codes::INVALID_TUNING,
            "target.handshake_timeout_ms",
        ),
        (
            "no connections allowed",
            target("max_connections = 0"),
            codes::INVALID_TUNING,
            "target.max_connections",
        ),
        (
            "negative per-address cap",
            target("max_connections_per_address = -1"),
            codes::INVALID_TUNING,
            "target.max_connections_per_address",
        ),
        (
            "serial prefix too long",
            target("serial_prefix = \"ABCDEFGHIJKLM\""),
            codes::INVALID_SERIAL,
            "target.serial_prefix",
        ),
        // --- listeners
        (
            "listener host name",
            BASE.replace("127.0.0.1", "localhost"),
            codes::INVALID_ADDRESS,
            "listeners[0].address",
        ),
        (
            "listener without address",
            BASE.replace("address = \"127.0.0.1\"", "port = 1"),
            codes::MISSING_FIELD,
            "listeners[0].address",
        ),
        (
            "listener port range",
            BASE.replace(
                "address = \"127.0.0.1\"",
                "address = \"127.0.0.1\"\nport = 65536",
            ),
            codes::INVALID_PORT,
            "listeners[0].port",
        ),
        (
            "duplicate listener",
            format!("[[listeners]]\naddress = \"127.0.0.1\"\nport = 4420\n{BASE}"),
            codes::DUPLICATE_LISTENER,
            "listeners[1]",
        ),
        (
            "wildcard overlaps",
            format!("[[listeners]]\naddress = \"0.0.0.0\"\n{BASE}"),
            codes::DUPLICATE_LISTENER,
            "listeners[1]",
        ),
        (
            "discovery on an I/O listener",
            format!("[discovery]\naddress = \"127.0.0.1\"\nport = 4420\n{BASE}"),
            codes::DUPLICATE_LISTENER,
            "discovery",
        ),
        (
            "discovery bad address",
            format!("[discovery]\naddress = \"1.2.3\"\n{BASE}"),
            codes::INVALID_ADDRESS,
            "discovery.address",
        ),
        // --- subsystems
        (
            "missing nqn",
            second("model = \"x\""),
            codes::MISSING_FIELD,
            "subsystems[1].nqn",
        ),
        (
            "nqn prefix",
            second("nqn = \"iqn.2026-11.io.ebof:b\""),
            codes::INVALID_NQN,
            "subsystems[1].nqn",
        ),
        (
            "nqn too long",
            second(&format!("nqn = \"nqn.{}\"", "x".repeat(220))),
            codes::INVALID_NQN,
            "subsystems[1].nqn",
        ),
        (
            "nqn not ascii",
            second("nqn = \"nqn.2026-11.io.ebof:caf\u{e9}\""),
            codes::INVALID_NQN,
            "subsystems[1].nqn",
        ),
        (
            "discovery nqn",
            second("nqn = \"nqn.2014-08.org.nvmexpress.discovery\""),
            codes::RESERVED_NQN,
            "subsystems[1].nqn",
        ),
        (
            "duplicate nqn",
            second("nqn = \"nqn.2026-11.io.ebof:a\""),
            codes::DUPLICATE_NQN,
            "subsystems[1].nqn",
        ),
        (
            "serial too long",
            second("nqn = \"nqn.x:b\"\nserial = \"123456789012345678901\""),
            codes::INVALID_SERIAL,
            "subsystems[1].serial",
        ),
        (
            "serial not ascii",
            second("nqn = \"nqn.x:b\"\nserial = \"s\u{e9}rie\""),
            codes::INVALID_SERIAL,
            "subsystems[1].serial",
        ),
        (
            "duplicate serial",
            second("nqn = \"nqn.x:b\"\nserial = \"S1\"").replace(
                "nqn = \"nqn.2026-11.io.ebof:a\"",
                "nqn = \"nqn.2026-11.io.ebof:a\"\nserial = \"S1\"",
            ),
            codes::DUPLICATE_SERIAL,
            "subsystems[1].serial",
        ),
        (
            "model too long",
            second(&format!(
                "nqn = \"nqn.x:b\"\nmodel = \"{}\"",
                "m".repeat(41)
            )),
            codes::INVALID_MODEL,
            "subsystems[1].model",
        ),
        (
            "model empty",
            second("nqn = \"nqn.x:b\"\nmodel = \"\""),
            codes::INVALID_MODEL,
            "subsystems[1].model",
        ),
        (
            "host nqn invalid",
            second("nqn = \"nqn.x:b\"\nhosts = [\"nqn.ok:h\", \"host1\"]"),
            codes::INVALID_NQN,
            "subsystems[1].hosts[1]",
        ),
        (
            "host twice",
            second("nqn = \"nqn.x:b\"\nhosts = [\"nqn.ok:h\", \"nqn.ok:h\"]"),
            codes::DUPLICATE_HOST,
            "subsystems[1].hosts[1]",
        ),
        (
            "any host with hosts",
            second("nqn = \"nqn.x:b\"\nallow_any_host = true\nhosts = [\"nqn.ok:h\"]"),
            codes::CONFLICTING_HOSTS,
            "subsystems[1].allow_any_host",
        ),
        // --- namespaces
        (
            "nsid zero",
            ns("nsid = 0\nbackend = \"ram\"\nsize = 512"),
            codes::INVALID_NSID,
            "subsystems[0].namespaces[0].nsid",
        ),
        (
            "nsid broadcast",
            ns("nsid = 0xFFFFFFFF\nbackend = \"ram\"\nsize = 512"),
            codes::INVALID_NSID,
            "subsystems[0].namespaces[0].nsid",
        ),
        (
            "nsid beyond u32",
            ns("nsid = 0x100000000\nbackend = \"ram\"\nsize = 512"),
            codes::INVALID_NSID,
            "subsystems[0].namespaces[0].nsid",
        ),
        (
            "duplicate nsid",
            format!(
                "{}\n[[subsystems.namespaces]]\nnsid = 1\nbackend = \"ram\"\nsize = 512\n",
                BASE
            ),
            codes::DUPLICATE_NSID,
            "subsystems[0].namespaces[1].nsid",
        ),
        (
            "more namespaces than max_namespaces",
            format!(
                "[target]\nmax_namespaces = 1\n{}\n[[subsystems.namespaces]]\nnsid = 2\nbackend = \"ram\"\nsize = 512\n",
                BASE
            ),
            codes::TOO_MANY_NAMESPACES,
            "subsystems[0].namespaces",
        ),
        (
            "defaulted nsid collides",
            ns(
                "nsid = 2\nbackend = \"ram\"\nsize = 512\n[[subsystems.namespaces]]\nbackend = \"ram\"\nsize = 512",
            ),
            codes::DUPLICATE_NSID,
            "subsystems[0].namespaces[1].nsid",
        ),
        (
            "missing backend",
            ns("size = 512"),
            codes::MISSING_FIELD,
            "subsystems[0].namespaces[0].backend",
        ),
        (
            "unknown backend",
            ns("backend = \"nvme\"\nsize = 512"),
            codes::INVALID_BACKEND,
            "subsystems[0].namespaces[0].backend",
        ),
        (
            "block size",
            ns("backend = \"ram\"\nsize = 4096\nblock_size = 1024"),
            codes::INVALID_BLOCK_SIZE,
            "subsystems[0].namespaces[0].block_size",
        ),
        (
            "ram without size",
            ns("backend = \"ram\""),
            codes::MISSING_FIELD,
            "subsystems[0].namespaces[0].size",
        ),
        (
            "ram with path",
            ns("backend = \"ram\"\nsize = 512\npath = \"/x\""),
            codes::FORBIDDEN_FIELD,
            "subsystems[0].namespaces[0].path",
        ),
        (
            "ram with direct",
            ns("backend = \"ram\"\nsize = 512\ndirect = true"),
            codes::FORBIDDEN_FIELD,
            "subsystems[0].namespaces[0].direct",
        ),
        (
            "direct not a boolean",
            ns("backend = \"file\"\npath = \"/x\"\ndirect = \"yes\""),
            codes::INVALID_TYPE,
            "subsystems[0].namespaces[0].direct",
        ),
        (
            "unknown io_engine",
            target("io_engine = \"uring\""),
            codes::INVALID_TUNING,
            "target.io_engine",
        ),
        (
            "io_threads zero",
            target("io_threads = 0"),
            codes::INVALID_TUNING,
            "target.io_threads",
        ),
        (
            "io_threads too many",
            target("io_threads = 257"),
            codes::INVALID_TUNING,
            "target.io_threads",
        ),
        (
            "file without path",
            ns("backend = \"file\""),
            codes::MISSING_FIELD,
            "subsystems[0].namespaces[0].path",
        ),
        (
            "block with size",
            ns("backend = \"block\"\npath = \"/dev/x\"\nsize = 512"),
            codes::FORBIDDEN_FIELD,
            "subsystems[0].namespaces[0].size",
        ),
        (
            "block without path",
            ns("backend = \"block\""),
            codes::MISSING_FIELD,
            "subsystems[0].namespaces[0].path",
        ),
        (
            "empty path",
            ns("backend = \"file\"\npath = \"\""),
            codes::INVALID_PATH,
            "subsystems[0].namespaces[0].path",
        ),
        (
            "nul in path",
            ns("backend = \"file\"\npath = \"/a\\u0000b\""),
            codes::INVALID_PATH,
            "subsystems[0].namespaces[0].path",
        ),
        (
            "size not multiple",
            ns("backend = \"ram\"\nsize = 1000"),
            codes::INVALID_SIZE,
            "subsystems[0].namespaces[0].size",
        ),
        (
            "size not multiple of 4k",
            ns("backend = \"ram\"\nsize = \"2K\"\nblock_size = 4096"),
            codes::INVALID_SIZE,
            "subsystems[0].namespaces[0].size",
        ),
        (
            "size zero",
            ns("backend = \"ram\"\nsize = 0"),
            codes::INVALID_SIZE,
            "subsystems[0].namespaces[0].size",
        ),
        (
            "size negative",
            ns("backend = \"ram\"\nsize = -512"),
            codes::INVALID_SIZE,
            "subsystems[0].namespaces[0].size",
        ),
        (
            "size overflow",
            ns("backend = \"ram\"\nsize = \"99999999999T\""),
            codes::INVALID_SIZE,
            "subsystems[0].namespaces[0].size",
        ),
        (
            "size garbage",
            ns("backend = \"file\"\npath = \"/x\"\nsize = \"lots\""),
            codes::INVALID_SIZE,
            "subsystems[0].namespaces[0].size",
        ),
        (
            "size wrong type",
            ns("backend = \"ram\"\nsize = 1.5"),
            codes::INVALID_TYPE,
            "subsystems[0].namespaces[0].size",
        ),
        (
            "duplicate path across subsystems",
            format!(
                "{}\n[[subsystems.namespaces]]\nbackend = \"file\"\npath = \"/d/x.img\"\n",
                second(
                    "nqn = \"nqn.x:b\"\n[[subsystems.namespaces]]\nbackend = \"block\"\npath = \"/d//x.img\""
                )
            ),
            codes::DUPLICATE_PATH,
            "subsystems[1].namespaces[1].path",
        ),
        (
            "uuid garbage",
            ns("backend = \"ram\"\nsize = 512\nuuid = \"not-a-uuid\""),
            codes::INVALID_UUID,
            "subsystems[0].namespaces[0].uuid",
        ),
        (
            "uuid nil",
            ns("backend = \"ram\"\nsize = 512\nuuid = \"00000000-0000-0000-0000-000000000000\""),
            codes::INVALID_UUID,
            "subsystems[0].namespaces[0].uuid",
        ),
        (
            "duplicate uuid",
            ns(
                "backend = \"ram\"\nsize = 512\nuuid = \"0b6b6f2e-5d1c-4b8e-9a51-3f0c2d7e8a14\"\n[[subsystems.namespaces]]\nbackend = \"ram\"\nsize = 512\nuuid = \"0b6b6f2e5d1c4b8e9a513f0c2d7e8a14\"",
            ),
            codes::DUPLICATE_UUID,
            "subsystems[0].namespaces[1].uuid",
        ),
        // --- ANA
        (
            "ana_group zero",
            ns("backend = \"ram\"\nsize = 512\nana_group = 0"),
            codes::INVALID_ANA_GROUP,
            "subsystems[0].namespaces[0].ana_group",
        ),
        (
            "ana_group too large",
            ns("backend = \"ram\"\nsize = 512\nana_group = 1025"),
            codes::INVALID_ANA_GROUP,
            "subsystems[0].namespaces[0].ana_group",
        ),
        (
            "ana group out of range",
            format!(
                "{BASE}[[ana]]\nlistener = \"127.0.0.1:4420\"\ngroup = 1025\nstate = \"change\"\n"
            ),
            codes::INVALID_ANA_GROUP,
            "ana[0].group",
        ),
        (
            "ana state unknown",
            format!("{BASE}[[ana]]\nlistener = \"127.0.0.1:4420\"\ngroup = 1\nstate = \"down\"\n"),
            codes::INVALID_ANA_STATE,
            "ana[0].state",
        ),
        (
            "ana listener not configured",
            format!(
                "{BASE}[[ana]]\nlistener = \"127.0.0.1:4421\"\ngroup = 1\nstate = \"inaccessible\"\n"
            ),
            codes::UNKNOWN_ANA_LISTENER,
            "ana[0].listener",
        ),
        (
            "ana listener garbage",
            format!("{BASE}[[ana]]\nlistener = \"here\"\ngroup = 1\nstate = \"inaccessible\"\n"),
            codes::INVALID_ADDRESS,
            "ana[0].listener",
        ),
        (
            "ana without state",
            format!("{BASE}[[ana]]\nlistener = \"127.0.0.1\"\ngroup = 1\n"),
            codes::MISSING_FIELD,
            "ana[0].state",
        ),
        (
            "ana twice",
            format!(
                "{BASE}[[ana]]\nlistener = \"127.0.0.1\"\ngroup = 1\nstate = \"change\"\n[[ana]]\nlistener = \"127.0.0.1:4420\"\ngroup = 1\nstate = \"optimized\"\n"
            ),
            codes::DUPLICATE_ANA,
            "ana[1]",
        ),
        (
            "ana unknown key",
            format!(
                "{BASE}[[ana]]\nlistener = \"127.0.0.1\"\ngroup = 1\nstate = \"change\"\nport = 1\n"
            ),
            codes::UNKNOWN_FIELD,
            "ana[0].port",
        ),
        // --- management
        (
            "management listen without token file",
            format!("{BASE}[management]\nlisten = \"127.0.0.1:9651\"\n"),
            codes::MISSING_FIELD,
            "management.token_file",
        ),
        (
            "management listen garbage",
            format!("{BASE}[management]\nlisten = \"localhost:x\"\ntoken_file = \"t\"\n"),
            codes::INVALID_ADDRESS,
            "management.listen",
        ),
        (
            "management listen port out of range",
            format!("{BASE}[management]\nlisten = \"127.0.0.1:70000\"\ntoken_file = \"t\"\n"),
            codes::INVALID_PORT,
            "management.listen",
        ),
        (
            "management token file empty path",
            format!("{BASE}[management]\nlisten = \"127.0.0.1:9651\"\ntoken_file = \"\"\n"),
            codes::INVALID_PATH,
            "management.token_file",
        ),
        (
            "management token given inline",
            format!("{BASE}[management]\nlisten = \"127.0.0.1:9651\"\ntoken = \"secret\"\n"),
            codes::UNKNOWN_FIELD,
            "management.token",
        ),
        (
            "management token file not a string",
            format!("{BASE}[management]\ntoken_file = 1\n"),
            codes::INVALID_TYPE,
            "management.token_file",
        ),
    ];
    assert!(cases.len() >= 25);
    let mut failures = Vec::new();
    for (name, text, code, path) in &cases {
        match Config::from_toml_str(text) {
            Ok(_) => failures.push(format!("{name}: accepted\n{text}")),
            Err(e) => {
                if e.code != *code || e.path != *path {
                    failures.push(format!(
                        "{name}: expected ({code}) at {path:?}, got {e}  [path {:?}]",
                        e.path
                    ));
                }
                assert!(!e.message.is_empty(), "{name}");
                let shown = e.to_string();
                assert!(
                    shown.ends_with(&format!("({code})")) || e.code != *code,
                    "{name}: {shown}"
                );
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn messages_are_specific() {
    let e = Config::from_toml_str(&ns("backend = \"ram\"\nsize = 1000")).unwrap_err();
    assert_eq!(
        e.to_string(),
        "config error at subsystems[0].namespaces[0].size: size 1000 is not a multiple of block_size 512 (invalid-size)"
    );
    let e = Config::from_toml_str("[[listeners]\n").unwrap_err();
    assert!(e.message.starts_with("line 1, column "), "{e}");
    let e = Config::from_toml_str(&format!(
        "{BASE}\n[[subsystems.namespaces]]\nbackend = \"ram\"\nsize = 512\nbogus = 1\n"
    ))
    .unwrap_err();
    assert_eq!(e.path, "subsystems[0].namespaces[1].bogus");
    assert!(e.message.contains("unknown field `bogus`"), "{e}");
    assert!(e.message.contains("line 15"), "{e}");
    let e = Config::from_toml_str(&ns("backend = \"disk\"")).unwrap_err();
    assert!(e.message.contains("\"ram\", \"file\" or \"block\""), "{e}");
}

#[test]
fn validate_catches_what_types_allow() {
    let mut c = Config::embedded_default();
    c.subsystems[0].namespaces[0].block_size = 520;
    let e = c.validate().unwrap_err();
    assert_eq!(
        (e.code, e.path.as_str()),
        (
            codes::INVALID_BLOCK_SIZE,
            "subsystems[0].namespaces[0].block_size"
        )
    );

    let mut c = Config::embedded_default();
    c.target.cores = Some(vec![]);
    assert_eq!(c.validate().unwrap_err().code, codes::INVALID_CORES);

    let mut c = Config::embedded_default();
    c.subsystems[0].serial = "x ".into();
    assert_eq!(c.validate().unwrap_err().code, codes::INVALID_SERIAL);

    let mut c = Config::embedded_default();
    c.subsystems[0].namespaces[0].uuid = [0; 16];
    assert_eq!(c.validate().unwrap_err().code, codes::INVALID_UUID);

    let mut c = Config::embedded_default();
    c.subsystems[0].namespaces[0].ana_group = 0;
    assert_eq!(c.validate().unwrap_err().code, codes::INVALID_ANA_GROUP);
}

#[test]
fn ana_state_edits_keep_only_what_is_not_optimized() {
    use ebof_config::{AnaState, parse_ana_state};
    let mut c = Config::embedded_default();
    let l = c.listeners[0];
    c.set_ana_state(l, 3, AnaState::Inaccessible);
    c.set_ana_state(l, 3, AnaState::Change);
    assert_eq!(c.ana.len(), 1);
    assert_eq!(c.ana_state(&l, 3), AnaState::Change);
    c.validate().unwrap();
    c.set_ana_state(l, 3, AnaState::Optimized);
    assert!(c.ana.is_empty());
    c.set_ana_state(l, 4, AnaState::Optimized);
    assert!(c.ana.is_empty());
    for s in AnaState::ALL {
        assert_eq!(parse_ana_state(s.name()).unwrap(), s);
    }
    let e = parse_ana_state("Optimised").unwrap_err();
    assert!(
        e.message
            .contains("optimized, non-optimized, inaccessible, persistent-loss, change"),
        "{e}"
    );
    // A listener that goes away takes its states with it or validation says so.
    c.set_ana_state(l, 2, AnaState::Inaccessible);
    c.listeners[0].port = 4500;
    c.discovery = None;
    let e = c.validate().unwrap_err();
    assert_eq!(
        (e.code, e.path.as_str()),
        (codes::UNKNOWN_ANA_LISTENER, "ana[0].listener")
    );
}
