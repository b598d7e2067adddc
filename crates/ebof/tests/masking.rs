//! Per-host namespace masking end to end: `ebof ctl ns mask / attach / detach / unmask`
//! against a running `ebof serve`, seen by `ebof perf` as two different hosts; bad requests
//! get one clear error and change nothing; `ebof ctl save` keeps the host lists.

mod common;

use common::served::{HOST_A, HOST_B, NQN, Served, ctl, perf_args_at, rejected, serve, state};
use common::{Output, ebof};
use serde_json::json;

fn perf(s: &Served, hostnqn: &str) -> Output {
    let a = perf_args_at(&s.t.port(), hostnqn, &["--runtime", "100ms"]);
    ebof(&a.iter().map(String::as_str).collect::<Vec<_>>())
}

#[test]
fn two_hosts_see_what_their_host_lists_say() {
    let s = serve();
    assert!(
        perf(&s, HOST_A).ok && perf(&s, HOST_B).ok,
        "both see nsid 1"
    );

    let o = ctl(&s, &["ns", "mask", NQN, "1", HOST_A]);
    assert!(o.ok, "{}", o.stderr);
    assert!(
        o.stdout.contains(&format!("visible to {HOST_A}")),
        "{}",
        o.stdout
    );
    assert_eq!(
        state(&s)["subsystems"][0]["namespaces"][0]["hosts"],
        json!([HOST_A])
    );
    let show = ctl(&s, &["show"]);
    assert!(
        show.stdout
            .contains(&format!("nsid 1 masked: visible to {HOST_A}")),
        "{}",
        show.stdout
    );
    assert!(perf(&s, HOST_A).ok);
    let o = perf(&s, HOST_B);
    assert!(!o.ok, "{HOST_B} must not see namespace 1: {}", o.stdout);

    rejected(&s, &["ns", "attach", NQN, "1", HOST_A], "duplicate-host");
    rejected(&s, &["ns", "detach", NQN, "1", HOST_B], "unknown-host");
    rejected(&s, &["ns", "attach", NQN, "1", "not-an-nqn"], "invalid-nqn");
    rejected(
        &s,
        &["ns", "mask", NQN, "1", HOST_A, HOST_A],
        "duplicate-host",
    );
    rejected(&s, &["ns", "attach", NQN, "7", HOST_B], "unknown-namespace");
    rejected(
        &s,
        &["ns", "attach", "nqn.2026-11.io.ebof:none", "1", HOST_B],
        "unknown-subsystem",
    );

    let o = ctl(&s, &["ns", "attach", NQN, "1", HOST_B]);
    assert!(o.ok, "{}", o.stderr);
    assert!(perf(&s, HOST_B).ok);
    let o = ctl(&s, &["--json", "ns", "detach", NQN, "1", HOST_A]);
    assert!(o.ok, "{}", o.stderr);
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(v["namespace"]["hosts"], json!([HOST_B]));
    assert!(!perf(&s, HOST_A).ok, "{HOST_A} was detached");
    assert!(perf(&s, HOST_B).ok);

    // Saved, the host list is in the file, and the file loads to the same.
    let file = s._dir.path().join("saved.toml");
    let o = ctl(&s, &["save", file.to_str().unwrap()]);
    assert!(o.ok, "{}", o.stderr);
    let cfg = ebof_config::Config::load(&file).unwrap();
    assert_eq!(
        cfg.subsystems[0].namespaces[0].hosts,
        Some(vec![HOST_B.to_string()])
    );

    let o = ctl(&s, &["ns", "unmask", NQN, "1"]);
    assert!(o.ok, "{}", o.stderr);
    assert!(o.stdout.contains("every host"), "{}", o.stdout);
    assert!(
        state(&s)["subsystems"][0]["namespaces"][0]
            .get("hosts")
            .is_none()
    );
    assert!(perf(&s, HOST_A).ok && perf(&s, HOST_B).ok);
    rejected(
        &s,
        &["ns", "attach", NQN, "1", HOST_A],
        "namespace-not-masked",
    );

    // Added masked: only the listed host ever sees it.
    let o = ctl(&s, &["ns", "add", NQN, "--ram", "8M", "--host", HOST_B]);
    assert!(o.ok, "{}", o.stderr);
    assert_eq!(
        state(&s)["subsystems"][0]["namespaces"][1]["hosts"],
        json!([HOST_B])
    );
    // An empty list hides it from every host.
    let o = ctl(&s, &["ns", "mask", NQN, "2"]);
    assert!(o.ok, "{}", o.stderr);
    assert!(o.stdout.contains("visible to no host"), "{}", o.stdout);
}
