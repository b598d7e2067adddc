//! Error messages as a person reads them: each cause said once, and a rejected Fabrics Connect
//! explained (which field, what it means) instead of a raw status. Servers are killed by PID.

mod common;

use std::net::SocketAddr;
use std::process::Stdio;

use common::{Target, ebof, free_port};

const DEFAULT_NQN: &str = "nqn.2026-11.io.ebof:default";

#[test]
fn connection_refused_is_said_once() {
    let port = free_port().to_string();
    for args in [
        vec!["discover", "-a", "127.0.0.1", "-s", &port],
        vec![
            "identify",
            "-a",
            "127.0.0.1",
            "-s",
            &port,
            "-n",
            DEFAULT_NQN,
        ],
    ] {
        let o = ebof(&args);
        assert!(!o.ok);
        assert_eq!(
            o.stderr.matches("Connection refused").count(),
            1,
            "{args:?}: {}",
            o.stderr
        );
        assert!(o.stderr.starts_with("ebof: error: "), "{}", o.stderr);
    }
}

#[test]
fn connect_rejections_are_explained() {
    let dir = tempfile::tempdir().unwrap();
    let allowed = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555";
    let other = "nqn.2014-08.org.nvmexpress:uuid:99999999-2222-3333-4444-555555555555";
    let port = free_port();
    let cfg = dir.path().join("ebof.toml");
    std::fs::write(
        &cfg,
        format!(
            "[[listeners]]\naddress = \"127.0.0.1\"\nport = {port}\n\n\
             [[subsystems]]\nnqn = \"nqn.2026-11.io.ebof:closed\"\nhosts = [\"{allowed}\"]\n\n\
             [[subsystems.namespaces]]\nbackend = \"ram\"\nsize = \"1M\"\n"
        ),
    )
    .unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let t = Target::spawn(
        &["serve", "--config", cfg.to_str().unwrap()],
        addr,
        Stdio::null(),
    );
    let p = t.port();
    let identify = |nqn: &str, hostnqn: Option<&str>| {
        let mut args = vec!["identify", "-a", "127.0.0.1", "-s", &p, "-n", nqn];
        args.extend(hostnqn.iter().flat_map(|h| ["--hostnqn", h]));
        ebof(&args)
    };
    let wrong = "nqn.2026-11.io.ebof:nope";
    let o = identify(wrong, None);
    assert!(!o.ok);
    assert!(
        o.stderr
            .contains(&format!("cannot connect to {wrong} at {addr} as host nqn.")),
        "{}",
        o.stderr
    );
    assert!(
        o.stderr.contains(
            "connect rejected: the target has no subsystem with this NQN \
             (Connect data offset 256: SUBNQN)"
        ),
        "{}",
        o.stderr
    );
    let closed = "nqn.2026-11.io.ebof:closed";
    let o = identify(closed, Some(other));
    assert!(!o.ok);
    assert!(
        o.stderr.contains(&format!("as host {other}")),
        "{}",
        o.stderr
    );
    assert!(
        o.stderr
            .contains("connect rejected: this host is not allowed to connect to the subsystem"),
        "{}",
        o.stderr
    );
    let o = identify(closed, Some(allowed));
    assert!(o.ok, "the allowed host connects: {}", o.stderr);
}
