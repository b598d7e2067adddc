//! Per-namespace QoS limits in the configuration: `[[subsystems.namespaces]] qos = { … }`,
//! parsed, checked (each key with its path and the `invalid-qos` code, unknown keys refused)
//! and emitted by `ebof ctl save`.

mod common;

use ebof_config::{Config, Qos, QosFields, codes};

fn doc(qos_line: &str) -> String {
    common::second_namespace_with(qos_line)
}

#[test]
fn absent_partial_and_full() {
    let c = Config::from_toml_str(&doc("")).unwrap();
    assert!(c.subsystems[0].namespaces[1].qos.is_unlimited());
    let c = Config::from_toml_str(&doc("qos = { iops = 1000 }")).unwrap();
    assert_eq!(
        c.subsystems[0].namespaces[1].qos,
        Qos {
            iops: 1000,
            ..Default::default()
        }
    );
    let c = Config::from_toml_str(&doc(
        "qos = { iops = 1, mbps = 2, read_iops = 3, write_iops = 4, read_mbps = 5, write_mbps = 6 }",
    ))
    .unwrap();
    assert_eq!(
        c.subsystems[0].namespaces[1].qos,
        Qos {
            iops: 1,
            mbps: 2,
            read_iops: 3,
            write_iops: 4,
            read_mbps: 5,
            write_mbps: 6
        }
    );
    // A table form works too, and 0 is unlimited.
    let c = Config::from_toml_str(&doc("[subsystems.namespaces.qos]\niops = 0\nmbps = 0")).unwrap();
    assert!(c.subsystems[0].namespaces[1].qos.is_unlimited());
}

#[test]
fn bad_values_name_their_field() {
    let p = "subsystems[0].namespaces[1].qos";
    for (line, code, path) in [
        (
            "qos = { iops = -1 }",
            codes::INVALID_QOS,
            format!("{p}.iops"),
        ),
        (
            "qos = { write_mbps = 1000000000000 }",
            codes::INVALID_QOS,
            format!("{p}.write_mbps"),
        ),
        (
            "qos = { read_iops = -5 }",
            codes::INVALID_QOS,
            format!("{p}.read_iops"),
        ),
        (
            "qos = { iops = \"fast\" }",
            codes::INVALID_TYPE,
            format!("{p}.iops"),
        ),
        (
            "qos = { bogus = 1 }",
            codes::UNKNOWN_FIELD,
            format!("{p}.bogus"),
        ),
        ("qos = 5", codes::INVALID_TYPE, p.to_string()),
    ] {
        let e = Config::from_toml_str(&doc(line)).unwrap_err();
        assert_eq!(
            (e.code, e.path.as_str()),
            (code, path.as_str()),
            "{line}: {e}"
        );
        assert!(codes::ALL.contains(&e.code));
    }
    let e = Config::from_toml_str(&doc("qos = { iops = -1 }")).unwrap_err();
    assert!(e.to_string().contains("iops = -1 is out of range"), "{e}");
    let e = Config::from_toml_str(&doc("qos = { bogus = 1 }")).unwrap_err();
    assert!(e.to_string().contains("bogus"), "{e}");
}

#[test]
fn fields_check_the_same_as_the_file() {
    let f = QosFields {
        mbps: Some(-3),
        ..Default::default()
    };
    let e = f.check("qos").unwrap_err();
    assert_eq!((e.code, e.path.as_str()), (codes::INVALID_QOS, "qos.mbps"));
}

#[test]
fn emitted_and_round_tripped() {
    for line in [
        "",
        "qos = { iops = 1000 }",
        "qos = { mbps = 50, read_iops = 7, write_mbps = 9 }",
        "qos = { iops = 1, mbps = 2, read_iops = 3, write_iops = 4, read_mbps = 5, write_mbps = 6 }",
    ] {
        let c = Config::from_toml_str(&doc(line)).unwrap();
        let text = c.to_toml_string();
        if line.is_empty() {
            assert!(!text.contains("qos"), "{text}");
        } else {
            assert!(text.contains(line), "{line} not in {text}");
        }
        let back = Config::from_toml_str(&text).unwrap();
        assert_eq!(back, c);
        assert_eq!(back.to_toml_string(), text);
    }
}
