//! Replicated volumes through the product (issue 34, ADR 0028): two `ebof serve` processes
//! configured with `mirror = { peer, role }` serve one subsystem; a host (the `nvmf-host`
//! library, as a host would) sees the primary's path optimized and the secondary's
//! inaccessible, writes through the primary land on both copies, the primary is killed with
//! SIGKILL, the secondary is promoted with `ebof ctl ns mirror promote`, the data is read back
//! from it; the old primary restarts as secondary (never a second primary) and is resynced; the
//! new primary is killed and the old one promoted: everything written through either is there.

mod common;

use common::served::ctl_at;
use common::{Target, free_port};
use nvme_spec::NamespaceId;
use nvmf_host::{Controller, HostConfig, HostError};
use serde_json::Value;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

const NQN: &str = "nqn.2026-11.io.ebof:mirrored";
const NS: NamespaceId = NamespaceId(1);
const BS: usize = 512;

struct BoxSpec {
    name: &'static str,
    addr: SocketAddr,
    peer: SocketAddr,
    role: &'static str,
}

fn sock(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.sock"))
}

/// Write box `b`'s configuration and start it (logs in `<name>.log`).
fn start(dir: &Path, b: &BoxSpec, witness: Option<SocketAddr>) -> Target {
    let cfg = dir.join(format!("{}.toml", b.name));
    let witness = witness
        .map(|w| format!("[mirror]\nwitness = \"{w}\"\nlease_ms = 1000\n\n"))
        .unwrap_or_default();
    std::fs::write(
        &cfg,
        format!(
            "{witness}[target]\nstate_dir = \"{state}\"\n\n[management]\nsocket = \"{sock}\"\n\n\
             [[listeners]]\naddress = \"127.0.0.1\"\nport = {port}\n\n\
             [[subsystems]]\nnqn = \"{NQN}\"\n\n\
             [[subsystems.namespaces]]\nnsid = 1\nbackend = \"file\"\npath = \"{file}\"\n\
             size = \"8M\"\nana_group = 2\n\
             mirror = {{ peer = \"{peer}\", role = \"{role}\" }}\n",
            state = dir.join(format!("{}-state", b.name)).display(),
            sock = sock(dir, b.name).display(),
            port = b.addr.port(),
            file = dir.join(format!("{}.img", b.name)).display(),
            peer = b.peer,
            role = b.role,
        ),
    )
    .unwrap();
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(format!("{}.log", b.name)))
        .unwrap();
    Target::spawn(
        &["serve", "--config", cfg.to_str().unwrap()],
        b.addr,
        Stdio::from(log),
    )
}

/// `ebof ctl --json ns mirror status` of box `name`.
fn status(dir: &Path, name: &str) -> Value {
    let o = ctl_at(
        &sock(dir, name),
        &["--json", "ns", "mirror", "status", NQN, "1"],
    );
    assert!(o.ok, "mirror status of {name}: {}", o.stderr);
    serde_json::from_str(&o.stdout).unwrap()
}

/// Wait (bounded) until box `name`'s mirror status satisfies `f`.
fn wait_status(dir: &Path, name: &str, what: &str, f: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let s = status(dir, name);
        if f(&s) {
            return s;
        }
        assert!(Instant::now() < deadline, "{name}: never {what}: {s}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn pattern(seed: u8, blocks: usize) -> Vec<u8> {
    (0..blocks * BS)
        .map(|i| seed.wrapping_mul(31).wrapping_add((i / 7) as u8))
        .collect()
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Write `data` at `slba` through the box at `addr`: Ok, or the NVMe status.
fn write(addr: SocketAddr, slba: u64, data: &[u8]) -> Result<(), HostError> {
    rt().block_on(async {
        let c = Controller::connect(addr, NQN, &HostConfig::default()).await?;
        let mut q = c.io_queue(1, 0, false).await?;
        let r = q.write(NS, slba, (data.len() / BS) as u32, data).await;
        c.disconnect().await;
        r
    })
}

fn read(addr: SocketAddr, slba: u64, blocks: usize) -> Result<Vec<u8>, HostError> {
    rt().block_on(async {
        let c = Controller::connect(addr, NQN, &HostConfig::default()).await?;
        let mut q = c.io_queue(1, 0, false).await?;
        let mut buf = vec![0u8; blocks * BS];
        let r = q.read(NS, slba, blocks as u32, &mut buf).await;
        c.disconnect().await;
        r.map(|_| buf)
    })
}

/// The path through `addr` is ANA inaccessible: I/O fails with SCT 3h SC 02h.
fn assert_inaccessible(addr: SocketAddr, what: &str) {
    match write(addr, 0, &pattern(0xEE, 1)) {
        Err(HostError::Status(s)) => {
            assert_eq!((s.sct, s.sc), (3, 2), "{what}: {s}");
            assert!(
                !s.dnr,
                "{what}: an ANA refusal must let the host retry elsewhere"
            );
        }
        other => panic!("{what}: a write through an inaccessible path: {other:?}"),
    }
}

#[test]
fn manual_failover_resync_and_failback() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (pa, pb) = (free_port(), free_port());
    let a_addr: SocketAddr = format!("127.0.0.1:{pa}").parse().unwrap();
    let b_addr: SocketAddr = format!("127.0.0.1:{pb}").parse().unwrap();
    let a = BoxSpec {
        name: "a",
        addr: a_addr,
        peer: b_addr,
        role: "primary",
    };
    let b = BoxSpec {
        name: "b",
        addr: b_addr,
        peer: a_addr,
        role: "secondary",
    };
    let tb = start(d, &b, None);
    let ta = start(d, &a, None);

    // The primary copies the whole volume to the new secondary, then is in sync.
    let s = wait_status(d, "a", "in sync", |s| s["state"] == "in-sync");
    assert_eq!(
        (s["role"].as_str(), s["epoch"].as_u64()),
        (Some("primary"), Some(1))
    );
    assert_eq!(s["peer"], b_addr.to_string());
    let s = status(d, "b");
    assert_eq!(s["role"], "secondary");
    assert_inaccessible(b_addr, "the secondary");
    // `ctl show` marks it too.
    let o = ctl_at(&sock(d, "a"), &["show"]);
    assert!(
        o.stdout.contains("nsid 1 mirror: primary at epoch 1"),
        "{}",
        o.stdout
    );

    // Writes through the primary are acknowledged once both copies have them.
    let first = pattern(1, 64);
    write(a_addr, 100, &first).expect("write through the primary");
    assert_eq!(read(a_addr, 100, 64).unwrap(), first);

    // Kill -9 the primary; promote the secondary by hand (no witness configured).
    drop(ta);
    let o = ctl_at(
        &sock(d, "b"),
        &["--json", "ns", "mirror", "promote", NQN, "1"],
    );
    assert!(o.ok, "promote: {}", o.stderr);
    let s: Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(
        (s["role"].as_str(), s["epoch"].as_u64()),
        (Some("primary"), Some(2))
    );
    assert_eq!(
        read(b_addr, 100, 64).expect("read from the new primary"),
        first
    );
    let second = pattern(2, 32);
    write(b_addr, 1000, &second).expect("write through the new primary (degraded)");
    // Alone: the write is acknowledged on one copy and its region is marked for the resync.
    let s = status(d, "b");
    assert!(
        s["state"] == "degraded" || s["state"] == "connecting",
        "{s}"
    );
    assert!(s["dirty_regions"].as_u64().unwrap() > 0, "{s}");

    // The old primary restarts: it comes back as secondary at its epoch, never as a second
    // primary, and is copied whole (its copy may hold writes never acknowledged).
    let ta = start(d, &a, None);
    let s = status(d, "a");
    assert_eq!(
        s["role"], "secondary",
        "a restarted primary must come back secondary: {s}"
    );
    assert_inaccessible(a_addr, "the restarted old primary");
    wait_status(d, "b", "in sync again", |s| s["state"] == "in-sync");
    assert_eq!(
        status(d, "a")["epoch"],
        2,
        "the secondary follows the new epoch"
    );

    // Kill the new primary; promote the old one: everything written through either is there.
    drop(tb);
    let o = ctl_at(&sock(d, "a"), &["ns", "mirror", "promote", NQN, "1"]);
    assert!(o.ok, "promote back: {}", o.stderr);
    assert_eq!(read(a_addr, 100, 64).unwrap(), first);
    assert_eq!(read(a_addr, 1000, 32).unwrap(), second);
    let s = status(d, "a");
    assert_eq!(
        (s["role"].as_str(), s["epoch"].as_u64()),
        (Some("primary"), Some(3))
    );

    // Refusals are clear: promoting a primary, a namespace that is not mirrored.
    let o = ctl_at(&sock(d, "a"), &["ns", "mirror", "promote", NQN, "1"]);
    assert!(
        !o.ok && o.stderr.contains("already primary"),
        "{}",
        o.stderr
    );
    let o = ctl_at(&sock(d, "a"), &["ns", "mirror", "status", NQN, "7"]);
    assert!(
        !o.ok && o.stderr.contains("unknown-namespace"),
        "{}",
        o.stderr
    );
    // Metrics carry the role and epoch.
    let o = ctl_at(&sock(d, "a"), &["metrics"]);
    assert!(
        o.stdout.contains(&format!(
            "ebof_mirror_epoch{{subsystem=\"{NQN}\",nsid=\"1\"}} 3"
        )),
        "{}",
        o.stdout
    );
    drop(ta);
}
