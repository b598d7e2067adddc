//! Thin provisioning end to end: `ebof serve` over a sparse file, half of it written by
//! `ebof perf`, then what a host reads in Identify Namespace (NSFEAT bit 0, NUSE) and what
//! `ebof ctl show` and the metrics report (allocated bytes, the file system's figures).

mod common;

use common::served::ctl_at;
use common::{Target, ebof, ebof_host, free_port};
use serde_json::Value;
use std::net::SocketAddr;
use std::process::Stdio;

const NQN: &str = "nqn.2026-11.io.ebof:thin";
const SIZE: u64 = 64 << 20;
const WRITTEN: u64 = 32 << 20;

fn json(o: &common::Output) -> Value {
    assert!(o.ok, "{}\n{}", o.stdout, o.stderr);
    serde_json::from_str(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", o.stdout))
}

#[test]
fn a_half_written_file_namespace_reports_half_used() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("thin.img");
    std::fs::File::create(&img).unwrap().set_len(SIZE).unwrap();
    let sock = dir.path().join("ebof.sock");
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let t = Target::spawn(
        &[
            "serve",
            "--listen",
            &addr.to_string(),
            "--file",
            img.to_str().unwrap(),
            "--nqn",
            NQN,
            "--cores",
            "0",
            "--mgmt-socket",
            sock.to_str().unwrap(),
        ],
        addr,
        Stdio::null(),
    );
    let port = t.port();
    let identify = || {
        let j = json(&ebof_host("identify", &port, NQN, &["--json"]));
        let ns = j["namespaces"][0].clone();
        assert_eq!(ns["nsze"], SIZE / 512, "{j}");
        assert_eq!(ns["ncap"], SIZE / 512, "{j}");
        (ns["nsfeat"].as_u64().unwrap(), ns["nuse"].as_u64().unwrap())
    };
    let (feat, nuse) = identify();
    assert_eq!(feat & 1, 1, "NSFEAT thin provisioning bit");
    assert!(
        nuse * 512 < 1 << 20,
        "a fresh sparse file holds (almost) nothing: {nuse}"
    );

    // A verifying read run first fills its whole range (untimed), so exactly the first
    // 32 MiB are written, whatever the machine's speed.
    let range = format!("0-{WRITTEN}");
    let o = ebof_host(
        "perf",
        &port,
        NQN,
        &[
            "--rw",
            "randread",
            "--verify",
            "--range",
            &range,
            "--runtime",
            "200ms",
            "--qd",
            "8",
            "--json",
        ],
    );
    json(&o);
    let (_, nuse) = identify();
    // The file system may round up to its blocks (and keep a little metadata).
    let used = nuse * 512;
    assert!(
        (WRITTEN..=WRITTEN + (1 << 20)).contains(&used),
        "NUSE {nuse} blocks = {used} bytes after writing {WRITTEN}"
    );

    let st = json(&ctl_at(&sock, &["show", "--json"]));
    let ns = &st["subsystems"][0]["namespaces"][0];
    assert_eq!(ns["thin"], true, "{ns}");
    assert_eq!(ns["size"], SIZE, "{ns}");
    let allocated = ns["allocated_bytes"].as_u64().unwrap();
    assert!((WRITTEN..=WRITTEN + (1 << 20)).contains(&allocated), "{ns}");
    let fs = &ns["filesystem"];
    let (total, avail) = (
        fs["total_bytes"].as_u64().unwrap(),
        fs["available_bytes"].as_u64().unwrap(),
    );
    assert!(total > 0 && avail <= total, "{fs}");
    let text = ctl_at(&sock, &["show"]);
    assert!(text.ok, "{}", text.stderr);
    assert!(text.stdout.contains("USED"), "{}", text.stdout);
    assert!(text.stdout.contains("(50%)"), "{}", text.stdout);
    assert!(text.stdout.contains("file systems"), "{}", text.stdout);
    let m = ebof(&["ctl", "--socket", sock.to_str().unwrap(), "metrics"]);
    assert!(m.ok, "{}", m.stderr);
    let line = m
        .stdout
        .lines()
        .find(|l| l.starts_with("ebof_namespace_allocated_bytes{"))
        .unwrap_or_else(|| panic!("{}", m.stdout));
    let v: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(
        (WRITTEN as f64..=(WRITTEN + (1 << 20)) as f64).contains(&v),
        "{line}"
    );
}

#[test]
fn a_ram_namespace_is_thin_too() {
    let t = Target::start();
    let j = json(&ebof_host(
        "identify",
        &t.port(),
        "nqn.2026-11.io.ebof:default",
        &["--json"],
    ));
    let ns = &j["namespaces"][0];
    assert_eq!(ns["nsfeat"].as_u64().unwrap() & 1, 1, "{j}");
    assert_eq!(ns["nuse"], 0, "{j}");
}
