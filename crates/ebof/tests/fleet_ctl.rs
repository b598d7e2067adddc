//! Referrals and DIM registrations end to end: `[discovery] referrals` in the file is served
//! at start, `ebof ctl referral add|remove|list` changes it live (with `ebof discover` seeing
//! the SUBTYPE 1 entries and GENCTR move), autosave and `ebof ctl save` keep it, bad requests
//! get one precise error and change nothing; `ebof ctl show` and `ebof ctl dim list` show
//! what hosts registered.

mod common;

use common::served::{NQN, ctl_at, serve_file};
use common::{ebof, free_port};
use serde_json::Value;
use std::net::SocketAddr;

/// `ebof discover --json` against `port`: the records' (subtype, traddr:trsvcid) and GENCTR.
fn discover(port: u16) -> (u64, Vec<(String, String)>) {
    let o = ebof(&[
        "discover",
        "-a",
        "127.0.0.1",
        "-s",
        &port.to_string(),
        "--json",
    ]);
    assert!(o.ok, "{}", o.stderr);
    let v: Value = serde_json::from_str(&o.stdout).unwrap();
    let recs = v["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["subtype"].as_str().unwrap().to_string(),
                format!(
                    "{}:{}",
                    r["traddr"].as_str().unwrap(),
                    r["trsvcid"].as_str().unwrap()
                ),
            )
        })
        .collect();
    (v["genctr"].as_u64().unwrap(), recs)
}

fn referrals_in(recs: &[(String, String)]) -> Vec<String> {
    recs.iter()
        .filter(|(s, _)| s == "discovery subsystem referral")
        .map(|(_, a)| a.clone())
        .collect()
}

#[test]
fn referrals_from_file_live_changes_autosaved_and_refusals() {
    let dir = tempfile::tempdir().unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let config = dir.path().join("ebof.toml");
    std::fs::write(
        &config,
        format!(
            "[[listeners]]\naddress = \"127.0.0.1\"\nport = {}\n\n[discovery]\n\
             referrals = [\"10.77.0.12\"]\n\n[management]\nautosave = true\ndata_dirs = [{:?}]\n\n\
             [[subsystems]]\nnqn = \"{NQN}\"\n[[subsystems.namespaces]]\nbackend = \"ram\"\nsize = \"16M\"\n",
            addr.port(),
            dir.path().to_str().unwrap()
        ),
    )
    .unwrap();
    let (_t, sock) = serve_file(&config, dir.path(), addr);
    let c = |args: &[&str]| {
        let o = ctl_at(&sock, args);
        assert!(o.ok, "{args:?}: {}", o.stderr);
        o
    };
    // The file's referral is served at start, port 8009 by default.
    let (g0, recs) = discover(addr.port());
    assert_eq!(referrals_in(&recs), vec!["10.77.0.12:8009"]);
    let o = c(&["referral", "list"]);
    assert!(o.stdout.contains("10.77.0.12:8009"), "{}", o.stdout);

    // Add live: served, GENCTR moves, autosaved.
    let o = c(&["referral", "add", "10.77.0.13:8010"]);
    assert!(o.stdout.contains("10.77.0.13:8010"), "{}", o.stdout);
    let (g1, recs) = discover(addr.port());
    assert!(g1 > g0);
    assert_eq!(
        referrals_in(&recs),
        vec!["10.77.0.12:8009", "10.77.0.13:8010"]
    );
    let saved = ebof_config::Config::load(&config).unwrap();
    let saved: Vec<String> = saved
        .discovery_settings
        .referrals
        .iter()
        .map(|l| l.to_string())
        .collect();
    assert_eq!(saved, vec!["10.77.0.12:8009", "10.77.0.13:8010"]);
    let show = c(&["show"]).stdout;
    assert!(
        show.contains("referrals (discovery log SUBTYPE 1)") && show.contains("10.77.0.13:8010"),
        "{show}"
    );
    assert!(show.contains("dim registrations: none"), "{show}");
    let st: Value = serde_json::from_str(&c(&["show", "--json"]).stdout).unwrap();
    assert_eq!(
        st["referrals"],
        serde_json::json!(["10.77.0.12:8009", "10.77.0.13:8010"])
    );

    // Refusals: one precise error each, nothing changes (the file neither).
    let text = std::fs::read_to_string(&config).unwrap();
    for (args, code) in [
        (&["referral", "add", "10.77.0.12"][..], "duplicate-referral"),
        (
            &["referral", "add", "not an address"][..],
            "invalid-address",
        ),
        (&["referral", "add", "10.77.0.14:0"][..], "invalid-port"),
        (
            &["referral", "remove", "10.77.0.99"][..],
            "unknown-referral",
        ),
    ] {
        let o = ctl_at(&sock, args);
        assert!(!o.ok, "{args:?} succeeded");
        assert_eq!(o.stderr.lines().count(), 1, "{args:?}: {}", o.stderr);
        assert!(
            o.stderr.contains(&format!("({code})")),
            "{args:?}: {}",
            o.stderr
        );
        assert!(
            o.stderr.contains("address"),
            "{args:?} names the field: {}",
            o.stderr
        );
    }
    assert_eq!(std::fs::read_to_string(&config).unwrap(), text);
    assert_eq!(discover(addr.port()).0, g1);

    // Remove live.
    c(&["referral", "remove", "10.77.0.12"]);
    let (g2, recs) = discover(addr.port());
    assert!(g2 > g1);
    assert_eq!(referrals_in(&recs), vec!["10.77.0.13:8010"]);
    let o = c(&["--json", "referral", "list"]);
    let v: Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(v["referrals"], serde_json::json!(["10.77.0.13:8010"]));
    assert_eq!(v["changed"], false);

    // `ebof ctl save` elsewhere keeps it too.
    let copy = dir.path().join("copy.toml");
    c(&["save", copy.to_str().unwrap()]);
    let back = ebof_config::Config::load(&copy).unwrap();
    assert_eq!(back.discovery_settings.referrals.len(), 1);
    assert_eq!(
        back.discovery_settings.referrals[0].to_string(),
        "10.77.0.13:8010"
    );

    // DIM registrations are listed (none here: the host side is covered by the sans-IO
    // tests and the guest scenario's `nvme dim`).
    let o = c(&["dim", "list"]);
    assert!(o.stdout.contains("dim registrations: none"), "{}", o.stdout);
    let o = c(&["--json", "dim", "list"]);
    assert_eq!(
        serde_json::from_str::<Value>(&o.stdout).unwrap(),
        serde_json::json!([])
    );
}
