//! Per-host namespace masking in the configuration: `[[subsystems.namespaces]] hosts`, parsed,
//! validated (NQN syntax, duplicates, with the entry's path) and emitted by `ebof ctl save`.

mod common;

use ebof_config::{Config, check_ns_hosts, codes};

const A: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000a1";
const B: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000b2";

fn doc(hosts_line: &str) -> String {
    common::second_namespace_with(hosts_line)
}

#[test]
fn absent_empty_and_listed() {
    let c = Config::from_toml_str(&doc("")).unwrap();
    assert_eq!(c.subsystems[0].namespaces[1].hosts, None);
    let c = Config::from_toml_str(&doc("hosts = []")).unwrap();
    assert_eq!(c.subsystems[0].namespaces[1].hosts, Some(vec![]));
    let c = Config::from_toml_str(&doc(&format!("hosts = [\"{A}\", \"{B}\"]"))).unwrap();
    assert_eq!(
        c.subsystems[0].namespaces[1].hosts,
        Some(vec![A.to_string(), B.to_string()])
    );
    assert_eq!(c.subsystems[0].namespaces[0].hosts, None);
}

#[test]
fn errors_name_the_entry() {
    let cases = [
        (
            format!("hosts = [\"{A}\", \"not an nqn\"]"),
            codes::INVALID_NQN,
            "subsystems[0].namespaces[1].hosts[1]",
        ),
        (
            format!("hosts = [\"{A}\", \"{B}\", \"{A}\"]"),
            codes::DUPLICATE_HOST,
            "subsystems[0].namespaces[1].hosts[2]",
        ),
        (
            "hosts = [3]".to_string(),
            codes::INVALID_TYPE,
            "subsystems[0].namespaces[1].hosts[0]",
        ),
        (
            "hosts = \"nqn.2014-08.org.nvmexpress:uuid:x\"".to_string(),
            codes::INVALID_TYPE,
            "subsystems[0].namespaces[1].hosts",
        ),
    ];
    for (line, code, path) in cases {
        let e = Config::from_toml_str(&doc(&line)).unwrap_err();
        assert_eq!((e.code, e.path.as_str()), (code, path), "{line}: {e}");
    }
    // The same rule for a list built in code (validate) and for an API request.
    let mut c = Config::from_toml_str(&doc("")).unwrap();
    c.subsystems[0].namespaces[0].hosts = Some(vec![B.into(), B.into()]);
    let e = c.validate().unwrap_err();
    assert_eq!(
        (e.code, e.path.as_str()),
        (
            codes::DUPLICATE_HOST,
            "subsystems[0].namespaces[0].hosts[1]"
        )
    );
    let e = check_ns_hosts("hosts", &["bad".into()]).unwrap_err();
    assert_eq!((e.code, e.path.as_str()), (codes::INVALID_NQN, "hosts[0]"));
    assert!(e.message.contains("bad"), "{e}");
}

#[test]
fn emitted_and_round_tripped() {
    for line in ["", "hosts = []", &format!("hosts = [\"{B}\", \"{A}\"]")] {
        let c = Config::from_toml_str(&doc(line)).unwrap();
        let text = c.to_toml_string();
        let back = Config::from_toml_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(back, c, "{text}");
        assert_eq!(back.to_toml_string(), text);
        assert_eq!(
            text.contains("\nhosts = [\"nqn.2014"),
            !line.is_empty() && line.contains('"')
        );
    }
    let c = Config::from_toml_str(&doc("hosts = []")).unwrap();
    let text = c.to_toml_string();
    // The subsystem's own `hosts = []` plus the namespace's.
    assert_eq!(text.matches("hosts = []").count(), 2, "{text}");
}
