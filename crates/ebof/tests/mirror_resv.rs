//! Reservations survive a failover (issue 34 item 2, ADR 0028): two `ebof serve` boxes mirror
//! one namespace; a host registers and takes Write Exclusive through the primary (PTPL on);
//! the secondary is killed, a second host registers while the primary is degraded, the
//! secondary comes back and is resynced; the primary is killed and the secondary promoted with
//! `ebof ctl ns mirror promote`. On the new primary, Reservation Report shows both registrants,
//! the same keys, holder and type; the holder's write succeeds, a registrant's and a stranger's
//! are reservation conflicts. The same with a witness and automatic failover.

mod common;

use common::served::ctl_at;
use common::{Target, free_port};
use nvme_spec::resv::{ResvCdw10, ResvKeys, ResvStatusExt, cptpl, racqa, rrega, rtype};
use nvme_spec::{NamespaceId, Sqe, Status, opcode::io};
use nvmf_host::{Controller, DataDir, HostConfig};
use serde_json::Value;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

const NQN: &str = "nqn.2026-11.io.ebof:mirrored-resv";
const NS: NamespaceId = NamespaceId(1);
const HOLDER: [u8; 16] = [0x11; 16];
const OTHER: [u8; 16] = [0x22; 16];
const STRANGER: [u8; 16] = [0x33; 16];
const KEY: u64 = 0x1234;
const KEY2: u64 = 0x5678;

fn sock(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.sock"))
}

/// Box `name` on `addr`, mirroring with `peer` as `role` (file namespace, state directory),
/// without a witness ([`start_with`] gives one).
fn start(dir: &Path, name: &str, addr: SocketAddr, peer: SocketAddr, role: &str) -> Target {
    start_with(dir, name, addr, peer, role, None)
}

fn start_with(
    dir: &Path,
    name: &str,
    addr: SocketAddr,
    peer: SocketAddr,
    role: &str,
    witness: Option<SocketAddr>,
) -> Target {
    let cfg = dir.join(format!("{name}.toml"));
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
             size = \"4M\"\nana_group = 2\n\
             mirror = {{ peer = \"{peer}\", role = \"{role}\" }}\n",
            state = dir.join(format!("{name}-state")).display(),
            sock = sock(dir, name).display(),
            port = addr.port(),
            file = dir.join(format!("{name}.img")).display(),
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

fn wait_in_sync(dir: &Path, name: &str) {
    wait_status(dir, name, "in sync", |s| s["state"] == "in-sync");
}

/// Wait (bounded) until box `name`'s mirror status satisfies `f`.
fn wait_status(dir: &Path, name: &str, what: &str, f: impl Fn(&Value) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let o = ctl_at(
            &sock(dir, name),
            &["--json", "ns", "mirror", "status", NQN, "1"],
        );
        let s: Value = serde_json::from_str(&o.stdout).unwrap_or(Value::Null);
        if f(&s) {
            return;
        }
        assert!(Instant::now() < deadline, "{name} never {what}: {s}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Run one I/O command as host `hostid` through `addr`: its status and data (`in_len` bytes
/// from the controller, or `out` to it).
fn run(
    addr: SocketAddr,
    hostid: [u8; 16],
    sqe: Sqe,
    out: &[u8],
    in_len: usize,
) -> (Status, Vec<u8>) {
    let cfg = HostConfig {
        hostnqn: format!(
            "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000{:02x}",
            hostid[0]
        ),
        hostid,
        ..HostConfig::default()
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let c = Controller::connect(addr, NQN, &cfg).await.expect("connect");
        let mut q = c.io_queue(1, 0, false).await.expect("I/O queue");
        let (dir, len) = if out.is_empty() {
            (DataDir::FromController, in_len)
        } else {
            (DataDir::ToController, out.len())
        };
        let dir = if len == 0 { DataDir::None } else { dir };
        q.submit_raw(sqe, dir, len, 7, |b| b.copy_from_slice(out))
            .expect("submit")
            .expect("room");
        let mut got = None;
        while got.is_none() {
            q.poll_completions(|c| got = Some((c.status(), c.data.to_vec())))
                .await
                .expect("completion");
        }
        c.disconnect().await;
        got.unwrap()
    })
}

fn resv(op: u8, action: u8, rt: u8, cp: u8, crkey: u64, second: u64) -> (Sqe, Vec<u8>) {
    let mut s = Sqe::new(op, nvme_spec::CommandId(0));
    s.set_nsid(NS);
    let cdw = ResvCdw10 {
        action,
        iekey: false,
        rtype: rt,
        cptpl: cp,
    };
    s.set_cdw(10, cdw.to_cdw10());
    (s, ResvKeys { crkey, second }.encode().to_vec())
}

fn register(addr: SocketAddr, host: [u8; 16], key: u64, cp: u8) {
    let (s, d) = resv(io::RESV_REGISTER, rrega::REGISTER, 0, cp, 0, key);
    assert_eq!(run(addr, host, s, &d, 0).0, Status::SUCCESS, "register");
}

fn report(addr: SocketAddr, host: [u8; 16]) -> ResvStatusExt {
    let mut s = Sqe::new(io::RESV_REPORT, nvme_spec::CommandId(0));
    s.set_nsid(NS);
    s.set_cdw(10, 4096 / 4 - 1);
    s.set_cdw(11, 1);
    let (st, d) = run(addr, host, s, &[], 4096);
    assert_eq!(st, Status::SUCCESS, "report");
    ResvStatusExt::decode(&d).unwrap()
}

fn write(addr: SocketAddr, host: [u8; 16]) -> Status {
    let mut s = Sqe::new(io::WRITE, nvme_spec::CommandId(0));
    s.set_nsid(NS);
    s.set_cdw(10, 8);
    run(addr, host, s, &[0xA5; 512], 0).0
}

#[test]
fn reservations_survive_a_failover() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let a_addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let b_addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let tb = start(d, "b", b_addr, a_addr, "secondary");
    let ta = start(d, "a", a_addr, b_addr, "primary");
    wait_in_sync(d, "a");

    // Through the primary: register (PTPL on) and take Write Exclusive.
    register(a_addr, HOLDER, KEY, cptpl::SET);
    let (s, k) = resv(
        io::RESV_ACQUIRE,
        racqa::ACQUIRE,
        rtype::WRITE_EXCLUSIVE,
        0,
        KEY,
        0,
    );
    assert_eq!(run(a_addr, HOLDER, s, &k, 0).0, Status::SUCCESS, "acquire");

    // The secondary dies; a second host registers while the primary is alone; the
    // secondary comes back (its persisted table is the old one) and is resynced.
    drop(tb);
    register(a_addr, OTHER, KEY2, cptpl::NO_CHANGE);
    let tb = start(d, "b", b_addr, a_addr, "secondary");
    wait_in_sync(d, "a");

    // The primary dies; the secondary is promoted by hand.
    drop(ta);
    let o = ctl_at(&sock(d, "b"), &["ns", "mirror", "promote", NQN, "1"]);
    assert!(o.ok, "promote: {}", o.stderr);

    let r = report(b_addr, HOLDER);
    assert_eq!(r.rtype, rtype::WRITE_EXCLUSIVE);
    assert!(r.ptpls, "PTPL state replicated");
    let regs: Vec<_> = r.regs.iter().map(|g| (g.hostid, g.rkey, g.holds)).collect();
    assert_eq!(regs, vec![(HOLDER, KEY, true), (OTHER, KEY2, false)]);
    assert!(r.regs.iter().all(|g| g.cntlid == 0xFFFF));
    assert_eq!(write(b_addr, HOLDER), Status::SUCCESS, "the holder writes");
    assert_eq!(write(b_addr, OTHER), Status::RESERVATION_CONFLICT);
    assert_eq!(write(b_addr, STRANGER), Status::RESERVATION_CONFLICT);
    drop(tb);
}

/// A box that is only a witness.
fn start_witness(dir: &Path, addr: SocketAddr) -> Target {
    let cfg = dir.join("w.toml");
    std::fs::write(
        &cfg,
        format!(
            "[management]\nsocket = \"{}\"\n\n[[listeners]]\naddress = \"127.0.0.1\"\n\
             port = {}\n\n[witness]\nlease_max_ms = 2000\n",
            sock(dir, "w").display(),
            addr.port()
        ),
    )
    .unwrap();
    Target::spawn(
        &["serve", "--config", cfg.to_str().unwrap()],
        addr,
        Stdio::null(),
    )
}

/// With a witness: a registration made while the secondary is down completes once the witness
/// holds the primary's "not in sync" report, reaches the secondary when it is back, and the
/// secondary that promotes itself after `kill -9` of the primary serves the same table.
#[test]
fn reservations_survive_a_witness_failover() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let addr = || -> SocketAddr { format!("127.0.0.1:{}", free_port()).parse().unwrap() };
    let (a_addr, b_addr, w_addr) = (addr(), addr(), addr());
    let _w = start_witness(d, w_addr);
    let tb = start_with(d, "b", b_addr, a_addr, "secondary", Some(w_addr));
    let ta = start_with(d, "a", a_addr, b_addr, "primary", Some(w_addr));
    wait_status(d, "a", "in sync with a lease", |s| {
        s["state"] == "in-sync" && s["lease_ms_left"].as_u64().is_some_and(|l| l > 0)
    });
    register(a_addr, HOLDER, KEY, cptpl::NO_CHANGE);
    let (s, k) = resv(
        io::RESV_ACQUIRE,
        racqa::ACQUIRE,
        rtype::EXCLUSIVE_ACCESS,
        0,
        KEY,
        0,
    );
    assert_eq!(run(a_addr, HOLDER, s, &k, 0).0, Status::SUCCESS, "acquire");

    drop(tb);
    register(a_addr, OTHER, KEY2, cptpl::NO_CHANGE);
    let tb = start_with(d, "b", b_addr, a_addr, "secondary", Some(w_addr));
    wait_in_sync(d, "a");

    drop(ta);
    wait_status(d, "b", "promoted by the witness", |s| {
        s["role"] == "primary"
    });
    let r = report(b_addr, HOLDER);
    assert_eq!(r.rtype, rtype::EXCLUSIVE_ACCESS);
    let regs: Vec<_> = r.regs.iter().map(|g| (g.hostid, g.rkey, g.holds)).collect();
    assert_eq!(regs, vec![(HOLDER, KEY, true), (OTHER, KEY2, false)]);
    assert_eq!(write(b_addr, HOLDER), Status::SUCCESS, "the holder writes");
    assert_eq!(write(b_addr, OTHER), Status::RESERVATION_CONFLICT);
    drop(tb);
}
