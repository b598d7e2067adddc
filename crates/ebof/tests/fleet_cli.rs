//! `ebof serve` as a pool box and as a Central Discovery Controller (`[cdc]`, `--cdc-member`),
//! driven with `ebof discover` and `ebof ctl cdc`, saved with `ebof ctl save`.

mod common;

use common::served::ctl_at;
use common::{Target, ebof, free_port};
use std::net::SocketAddr;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// `ebof discover` against the CDC until its output satisfies `ok` (the CDC connects to its
/// members in the background), bounded.
fn discover_until(port: &str, what: &str, ok: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let d = ebof(&["discover", "-a", "127.0.0.1", "-s", port]);
        if d.ok && ok(&d.stdout) {
            return d.stdout;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: {}{}",
            d.stdout,
            d.stderr
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_cdc_shows_its_members_and_members_change_live() {
    let m1 = Target::start();
    let m2 = Target::start();
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("cdc.sock");
    let file = dir.path().join("cdc.toml");
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    std::fs::write(
        &file,
        format!(
            "[[listeners]]\naddress = \"127.0.0.1\"\nport = {}\n\n[management]\nsocket = {:?}\n\n[cdc]\nmembers = [\"127.0.0.1:{}\"]\nhostnqn = \"nqn.2026-11.io.example:cdc\"\n",
            addr.port(),
            sock.to_str().unwrap(),
            m1.port()
        ),
    )
    .unwrap();
    let log = dir.path().join("serve.log");
    let _cdc = Target::spawn(
        &["serve", "--config", file.to_str().unwrap(), "--cores", "0"],
        addr,
        Stdio::from(std::fs::File::create(&log).unwrap()),
    );
    let port = addr.port().to_string();
    let at = |m: &Target| format!("trsvcid: {}", m.port());
    discover_until(&port, "member 1's subsystem", |out| out.contains(&at(&m1)));

    let list = ctl_at(&sock, &["cdc", "list", "--json"]);
    assert!(list.ok, "{}", list.stderr);
    let v: serde_json::Value = serde_json::from_str(&list.stdout).unwrap();
    assert_eq!(v["hostnqn"], "nqn.2026-11.io.example:cdc");
    assert_eq!(
        v["members"][0]["address"],
        format!("127.0.0.1:{}", m1.port())
    );
    assert_eq!(v["members"][0]["connected"], true);

    let add = ctl_at(&sock, &["cdc", "add", &format!("127.0.0.1:{}", m2.port())]);
    assert!(add.ok, "{}", add.stderr);
    discover_until(&port, "both members", |out| {
        out.contains(&at(&m1)) && out.contains(&at(&m2))
    });
    let rm = ctl_at(
        &sock,
        &["cdc", "remove", &format!("127.0.0.1:{}", m1.port())],
    );
    assert!(rm.ok, "{}", rm.stderr);
    let out = discover_until(&port, "member 2 only", |out| !out.contains(&at(&m1)));
    assert!(out.contains(&at(&m2)), "{out}");
    let bad = ctl_at(&sock, &["cdc", "remove", "127.0.0.1:1"]);
    assert!(
        !bad.ok && bad.stderr.contains("unknown-member"),
        "{}",
        bad.stderr
    );

    let show = ctl_at(&sock, &["show"]);
    assert!(
        show.ok && show.stdout.contains("central discovery controller"),
        "{}",
        show.stdout
    );
    // Who may announce: nobody by default, set and cleared live, saved.
    let t = ctl_at(&sock, &["cdc", "trusted"]);
    assert!(t.ok && t.stdout.contains("nobody"), "{}", t.stdout);
    let t = ctl_at(
        &sock,
        &["cdc", "trusted", "127.0.0.9", "nqn.2026-11.io.example:ddc"],
    );
    assert!(t.ok, "{}", t.stderr);
    assert_eq!(t.stdout, "127.0.0.9\nnqn.2026-11.io.example:ddc\n");
    let bad = ctl_at(&sock, &["cdc", "trusted", "box-3"]);
    assert!(
        !bad.ok && bad.stderr.contains("invalid-address") && bad.stderr.contains("trusted[0]"),
        "{}",
        bad.stderr
    );
    let save = ctl_at(&sock, &["save"]);
    assert!(save.ok, "{}", save.stderr);
    let saved = ebof_config::Config::load(&file).unwrap();
    assert_eq!(saved.cdc.as_ref().unwrap().trusted.len(), 2);
    let t = ctl_at(&sock, &["cdc", "trusted", "--clear", "--json"]);
    assert!(t.ok, "{}", t.stderr);
    let v: serde_json::Value = serde_json::from_str(&t.stdout).unwrap();
    assert_eq!(v["trusted"].as_array().unwrap().len(), 0);
    let members: Vec<String> = saved
        .cdc
        .unwrap()
        .members
        .iter()
        .map(|m| m.to_string())
        .collect();
    assert_eq!(members, [format!("127.0.0.1:{}", m2.port())]);
    assert!(saved.subsystems.is_empty());
}

#[test]
fn a_pool_box_starts_empty_and_is_provisioned_live() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("pool.sock");
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let _t = Target::spawn(
        &[
            "serve",
            "--pool",
            "--listen",
            &addr.to_string(),
            "--cores",
            "0",
            "--mgmt-socket",
            sock.to_str().unwrap(),
        ],
        addr,
        Stdio::null(),
    );
    let port = addr.port().to_string();
    let d = ebof(&["discover", "-a", "127.0.0.1", "-s", &port]);
    assert!(
        d.ok && !d.stdout.contains("nqn.2026-11.io.ebof:default"),
        "{}",
        d.stdout
    );
    let nqn = "nqn.2026-11.io.example:pool-1";
    let add = ctl_at(&sock, &["subsystem", "add", nqn]);
    assert!(add.ok, "{}", add.stderr);
    let ns = ctl_at(&sock, &["ns", "add", nqn, "--ram", "16M"]);
    assert!(ns.ok, "{}", ns.stderr);
    discover_until(&port, "the new subsystem", |out| out.contains(nqn));
    // --pool is for a box without a configuration file.
    let o = ebof(&["serve", "--pool", "--config", "/nonexistent.toml"]);
    assert!(!o.ok && o.stderr.contains("--pool"), "{}", o.stderr);
}

#[test]
fn a_member_announces_itself_to_the_cdc() {
    announce(false);
}

/// The member's announcer NQN has a DH-HMAC-CHAP key in both boxes' `[[hosts]]`: the CDC
/// requires it and admits the authenticated announcer without trusting its address.
#[test]
fn a_member_announces_itself_with_dh_hmac_chap() {
    announce(true);
}

fn announce(authenticated: bool) {
    let dir = tempfile::tempdir().unwrap();
    let cdc: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let member: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let cdc_file = dir.path().join("cdc.toml");
    let (trusted, hosts) = if authenticated {
        (
            "",
            format!(
                "\n[[hosts]]\nnqn = \"nqn.2026-11.io.ebof:ddc:{member}\"\n\
                 dhchap_key = \"DHHC-1:01:VZi5tbir3nYufwfgCrjX0O2mmPHFkObvzamIRZnYUahWiFGg:\"\n"
            ),
        )
    } else {
        ("trusted = [\"127.0.0.1\"]\n", String::new())
    };
    std::fs::write(
        &cdc_file,
        format!(
            "[[listeners]]\naddress = \"127.0.0.1\"\nport = {}\n\n[management]\nenabled = false\n\n[cdc]\nmembers = []\n{trusted}{hosts}",
            cdc.port()
        ),
    )
    .unwrap();
    let _c = Target::spawn(
        &[
            "serve",
            "--config",
            cdc_file.to_str().unwrap(),
            "--cores",
            "0",
        ],
        cdc,
        Stdio::null(),
    );
    let nqn = "nqn.2026-11.io.example:announced";
    let m_file = dir.path().join("member.toml");
    std::fs::write(
        &m_file,
        format!(
            "[[listeners]]\naddress = \"127.0.0.1\"\nport = {}\n\n[discovery]\ncdc = \"{cdc}\"\n\n[management]\nenabled = false\n{hosts}\n[[subsystems]]\nnqn = \"{nqn}\"\nallow_any_host = true\n[[subsystems.namespaces]]\nbackend = \"ram\"\nsize = \"16M\"\n",
            member.port()
        ),
    )
    .unwrap();
    let m = Target::spawn(
        &[
            "serve",
            "--config",
            m_file.to_str().unwrap(),
            "--cores",
            "0",
        ],
        member,
        Stdio::null(),
    );
    let port = cdc.port().to_string();
    discover_until(&port, "the announced member's subsystem", |out| {
        out.contains(nqn)
    });
    // The member stops: it deregisters (or its connection drops), and leaves the view.
    drop(m);
    discover_until(&port, "the member gone", |out| !out.contains(nqn));
}
