//! Snapshots of a replicated volume act on both copies (issue 34 item 2, ADR 0028 decision
//! 16): two `ebof serve` boxes mirror one file namespace; a host writes through the primary
//! without pause while `ebof ctl ns snapshot` runs on the primary; the secondary's snapshot of
//! the same name exists and is byte for byte the primary's (the same point in time). A
//! snapshot on the secondary is refused and names the primary; deleting on the primary deletes
//! both. With the secondary dead (degraded), a snapshot is refused as retryable and nothing is
//! made on the primary. A mirrored namespace added through the API admits the link host.

mod common;

use common::served::ctl_at;
use common::{Target, free_port};
use nvme_spec::NamespaceId;
use nvmf_host::{Controller, HostConfig};
use serde_json::Value;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const NQN: &str = "nqn.2026-11.io.ebof:mirrored-snap";
const NS: NamespaceId = NamespaceId(1);
/// Blocks (512 bytes) of the 4 MiB namespace.
const BLOCKS: u64 = 8192;

fn sock(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.sock"))
}

/// Each box's file in a directory of its own, so their `.ebof-snapshots` differ.
fn file(dir: &Path, name: &str) -> PathBuf {
    dir.join(name).join(format!("{name}.img"))
}

fn snap_file(dir: &Path, name: &str, snap: &str) -> PathBuf {
    dir.join(name)
        .join(".ebof-snapshots")
        .join(format!("{snap}.img"))
}

fn start(dir: &Path, name: &str, addr: SocketAddr, peer: SocketAddr, role: &str) -> Target {
    let cfg = dir.join(format!("{name}.toml"));
    std::fs::create_dir_all(dir.join(name)).unwrap();
    std::fs::write(
        &cfg,
        format!(
            "[target]\nstate_dir = \"{state}\"\n\n[management]\nsocket = \"{sock}\"\n\n\
             [[listeners]]\naddress = \"127.0.0.1\"\nport = {port}\n\n\
             [[subsystems]]\nnqn = \"{NQN}\"\n\n\
             [[subsystems.namespaces]]\nnsid = 1\nbackend = \"file\"\npath = \"{file}\"\n\
             size = \"4M\"\nana_group = 2\n\
             mirror = {{ peer = \"{peer}\", role = \"{role}\" }}\n",
            state = dir.join(format!("{name}-state")).display(),
            sock = sock(dir, name).display(),
            port = addr.port(),
            file = file(dir, name).display(),
        ),
    )
    .unwrap();
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(format!("{name}.log")))
        .unwrap();
    Target::spawn(
        &["serve", "--config", cfg.to_str().unwrap()],
        addr,
        Stdio::from(log),
    )
}

/// Wait (bounded) until box `name`'s mirror state is `state`.
fn wait_state(dir: &Path, name: &str, state: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let o = ctl_at(
            &sock(dir, name),
            &["--json", "ns", "mirror", "status", NQN, "1"],
        );
        let s: Value = serde_json::from_str(&o.stdout).unwrap_or(Value::Null);
        if s["state"] == state {
            return;
        }
        assert!(Instant::now() < deadline, "{name} never {state}: {s}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A host writing 4 KiB blocks (a counter in every byte) through `addr` until `stop`; counts
/// its acknowledged writes in `done`.
fn writer(addr: SocketAddr, stop: Arc<AtomicBool>, done: Arc<AtomicU64>, seed: u64) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let cfg = HostConfig::default();
        let c = Controller::connect(addr, NQN, &cfg).await.expect("connect");
        let mut q = c.io_queue(1, 0, false).await.expect("I/O queue");
        let mut i = seed;
        while !stop.load(Ordering::Relaxed) {
            i = i
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let slba = (i >> 33) % (BLOCKS / 8) * 8;
            let buf = vec![(i >> 24) as u8; 4096];
            q.write(NS, slba, 8, &buf).await.expect("write");
            done.fetch_add(1, Ordering::Relaxed);
        }
        c.disconnect().await;
    });
}

fn snapshot(dir: &Path, name: &str, snap: &str) -> common::Output {
    ctl_at(&sock(dir, name), &["ns", "snapshot", NQN, "1", snap])
}

#[test]
fn a_snapshot_is_taken_on_both_copies_at_one_point_in_time() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let a_addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let b_addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let tb = start(d, "b", b_addr, a_addr, "secondary");
    let ta = start(d, "a", a_addr, b_addr, "primary");
    wait_state(d, "a", "in-sync");

    // Under write load: two hosts write without pause through the primary.
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = (0..2)
        .map(|k| {
            let (stop, done) = (stop.clone(), done.clone());
            std::thread::spawn(move || writer(a_addr, stop, done, k + 1))
        })
        .collect();
    let started = Instant::now();
    while done.load(Ordering::Relaxed) < 200 {
        assert!(started.elapsed() < Duration::from_secs(20), "no writes");
        std::thread::sleep(Duration::from_millis(10));
    }
    let before = done.load(Ordering::Relaxed);
    let o = snapshot(d, "a", "s1");
    assert!(o.ok, "snapshot on the primary: {}", o.stderr);
    // More writes after it: they are in neither snapshot.
    let after = done.load(Ordering::Relaxed);
    while done.load(Ordering::Relaxed) < after + 200 {
        assert!(
            started.elapsed() < Duration::from_secs(40),
            "writes stopped"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    let (sa, sb) = (snap_file(d, "a", "s1"), snap_file(d, "b", "s1"));
    let (da, db) = (std::fs::read(&sa).unwrap(), std::fs::read(&sb).unwrap());
    assert_eq!(da.len(), 4 << 20);
    assert!(da == db, "the two copies' snapshots differ");
    assert!(
        before > 0 && da.iter().any(|&b| b != 0),
        "the snapshot holds writes"
    );
    assert!(
        std::fs::read(file(d, "a")).unwrap() != da,
        "writes after the snapshot are not in it"
    );
    // Both boxes list it.
    for name in ["a", "b"] {
        let o = ctl_at(&sock(d, name), &["--json", "snapshot", "list"]);
        assert!(o.ok && o.stdout.contains("\"s1\""), "{name}: {}", o.stdout);
    }

    // On the secondary: refused, naming the primary; nothing made there.
    let o = snapshot(d, "b", "s2");
    assert!(!o.ok, "a snapshot on the secondary is refused");
    assert!(
        o.stderr.contains("secondary") && o.stderr.contains(&a_addr.to_string()),
        "{}",
        o.stderr
    );
    assert!(!snap_file(d, "b", "s2").exists());

    // Deleted on the primary: gone on both.
    let o = ctl_at(&sock(d, "a"), &["snapshot", "delete", "s1"]);
    assert!(o.ok, "delete: {}", o.stderr);
    assert!(!sa.exists() && !sb.exists(), "deleted on both copies");

    // Degraded (the secondary is dead, a write made it so): refused, nothing made.
    drop(tb);
    let stop = Arc::new(AtomicBool::new(false));
    let (s2, d2) = (stop.clone(), Arc::new(AtomicU64::new(0)));
    let d3 = d2.clone();
    let w = std::thread::spawn(move || writer(a_addr, s2, d3, 9));
    while d2.load(Ordering::Relaxed) < 10 {
        std::thread::sleep(Duration::from_millis(10));
    }
    stop.store(true, Ordering::Relaxed);
    w.join().unwrap();
    wait_state(d, "a", "degraded");
    let o = snapshot(d, "a", "s3");
    assert!(!o.ok, "a snapshot of a degraded volume is refused");
    assert!(o.stderr.contains("not in sync"), "{}", o.stderr);
    assert!(
        !snap_file(d, "a", "s3").exists(),
        "nothing made on the primary"
    );
    drop(ta);
}

/// A mirrored namespace added through the API to a subsystem that takes listed hosts only:
/// the box adds its replication link's host NQN to the subsystem (the configuration demands
/// it, and an API client such as the CSI driver cannot know it), in the running configuration
/// and on the live subsystem.
#[test]
fn a_mirrored_namespace_added_live_admits_the_link_host() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let a_addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let peer: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let _ta = start(d, "a", a_addr, peer, "secondary");
    let nqn = "nqn.2026-11.io.ebof:csi:listed";
    let ctl = |args: &[&str]| ctl_at(&sock(d, "a"), args);
    let o = ctl(&["subsystem", "add", nqn, "--no-allow-any-host"]);
    assert!(o.ok, "{}", o.stderr);
    let p = peer.to_string();
    let o = ctl(&[
        "--json",
        "ns",
        "add",
        nqn,
        "--ram",
        "1M",
        "--mirror-peer",
        &p,
        "--mirror-role",
        "secondary",
    ]);
    assert!(o.ok, "{}", o.stderr);
    let o = ctl(&["--json", "show"]);
    let v: Value = serde_json::from_str(&o.stdout).unwrap();
    let s = v["subsystems"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["nqn"] == nqn)
        .unwrap();
    assert_eq!(
        s["hosts"],
        serde_json::json!(["nqn.2026-11.io.ebof:mirror-link"]),
        "{s}"
    );
}
