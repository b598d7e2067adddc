//! Fault injection on the replication link of a mirrored namespace (issue 34, ADR 0028).
//!
//! Two `ebof serve` boxes and a witness; the primary's `mirror.peer` is a fault-injecting TCP
//! proxy in front of the secondary's listener (this host has no `sch_netem`, so the faults are
//! made in userspace: `common/fault_proxy.rs`). Host writers (the `nvmf-host` library) write
//! self-describing blocks (LBA, version, checksum) through the primary and record which writes
//! were acknowledged, while the link gets, in turn: a delay, a trickle of tiny pieces, a reset
//! in the middle of a PDU, a blackhole longer than the link's I/O timeout, a storm of resets and
//! a stall (a delay longer than that timeout). After each fault the link comes back: the
//! primary must report in sync again, and then (writers paused) both copies must be equal,
//! holding every acknowledged write. Reads through the primary are checked all along. At the
//! end the primary is killed with SIGKILL mid-write, the witness promotes the secondary, and
//! every block read from it must hold its newest acknowledged version or a newer
//! unacknowledged one: never an older one, never a torn or foreign block.
//!
//! Every wait is bounded; every process and thread started here is stopped by its guard.

mod common;

#[path = "common/fault_proxy.rs"]
mod fault_proxy;

use common::{Target, free_port};
use ebof_api::{Client, MirrorView};
use fault_proxy::{Fault, FaultProxy};
use nvme_spec::NamespaceId;
use nvmf_host::{Controller, HostConfig, HostError};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const NQN: &str = "nqn.2026-11.io.ebof:mirror-faults";
const NS: NamespaceId = NamespaceId(1);
const BS: usize = 512;
/// Each write: one unit of 8 blocks (4 KiB); 8 MiB volume (eight 1 MiB bitmap regions).
const UNIT_BLOCKS: usize = 8;
const UNIT: usize = UNIT_BLOCKS * BS;
const VOLUME: usize = 8 << 20;
const UNITS: usize = VOLUME / UNIT;
const WRITERS: usize = 3;
/// Units per writer that take half its writes.
const HOT: usize = 8;
/// `[mirror] lease_ms`; the link's I/O timeout is twice that (`link.rs`).
const LEASE_MS: u64 = 1000;
const LINK_TIMEOUT: Duration = Duration::from_millis(2 * LEASE_MS);
/// Bound on any wait for a mirror state.
const WAIT: Duration = Duration::from_secs(30);
const MAGIC: &[u8; 8] = b"MFLTBLK1";

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

// ---- self-describing blocks ----

fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, x| {
        (h ^ u64::from(*x)).wrapping_mul(0x100_0000_01b3)
    })
}

/// Block `lba` of version `seq`: magic, LBA, version, filler from both, checksum.
fn block(lba: u64, seq: u64, out: &mut [u8]) {
    out[..8].copy_from_slice(MAGIC);
    out[8..16].copy_from_slice(&lba.to_le_bytes());
    out[16..24].copy_from_slice(&seq.to_le_bytes());
    let mut x = lba.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ seq;
    for b in &mut out[24..BS - 8] {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        *b = (x >> 56) as u8;
    }
    let sum = fnv(&out[..BS - 8]);
    out[BS - 8..].copy_from_slice(&sum.to_le_bytes());
}

fn unit_data(u: usize, seq: u64) -> Vec<u8> {
    let mut d = vec![0u8; UNIT];
    for (i, b) in d.chunks_mut(BS).enumerate() {
        block((u * UNIT_BLOCKS + i) as u64, seq, b);
    }
    d
}

/// The version a block holds (0: never written), or why it is none.
fn version(lba: u64, b: &[u8]) -> Result<u64, String> {
    if b.iter().all(|x| *x == 0) {
        return Ok(0);
    }
    if &b[..8] != MAGIC || fnv(&b[..BS - 8]).to_le_bytes() != b[BS - 8..] {
        return Err("torn or corrupt (checksum)".into());
    }
    let at = u64::from_le_bytes(b[8..16].try_into().unwrap());
    if at != lba {
        return Err(format!("misdirected (holds LBA {at})"));
    }
    Ok(u64::from_le_bytes(b[16..24].try_into().unwrap()))
}

/// What a unit may hold: its newest acknowledged version and every version written since
/// (unacknowledged: failed or in flight), or zeroes before its first acknowledged write.
struct Unit {
    acked: u64,
    may_hold: Vec<u64>,
}

/// Check every block of unit `u` read as `data`; None when each holds a version it may.
fn check_unit(u: usize, book: &Unit, data: &[u8]) -> Option<String> {
    for (i, b) in data.chunks(BS).enumerate() {
        let lba = (u * UNIT_BLOCKS + i) as u64;
        let why = match version(lba, b) {
            Ok(v) if book.may_hold.contains(&v) => continue,
            Ok(v) if v < book.acked => format!("stale: version {v}, acknowledged {}", book.acked),
            Ok(v) => format!(
                "version {v} never written here (acknowledged {})",
                book.acked
            ),
            Err(e) => e,
        };
        return Some(format!("LBA {lba} (unit {u}): {why}"));
    }
    None
}

// ---- the host writers ----

#[derive(Default, Clone)]
struct Stats {
    acked: u64,
    failed: u64,
    reads: u64,
    max_lat: Duration,
    errors: Vec<String>,
}

struct HostState {
    book: Mutex<Vec<Unit>>,
    seq: AtomicU64,
    stop: AtomicBool,
    pause: AtomicBool,
    idle: AtomicUsize,
    phase: AtomicUsize,
    stats: Mutex<Vec<Stats>>,
    violations: Mutex<Vec<String>>,
    /// Writers whose connection to the primary ended: (writer, when, error).
    ended: Mutex<Vec<(usize, Instant, String)>>,
}

impl HostState {
    fn stat(&self, f: impl FnOnce(&mut Stats)) {
        let p = self.phase.load(Ordering::Acquire);
        let mut s = lock(&self.stats);
        if s.len() <= p {
            s.resize(p + 1, Stats::default());
        }
        f(&mut s[p]);
    }

    fn violation(&self, v: String) {
        eprintln!("VIOLATION: {v}");
        lock(&self.violations).push(v);
    }
}

/// The writer threads; stopped and joined on drop.
struct Host {
    st: Arc<HostState>,
    threads: Vec<JoinHandle<()>>,
}

impl Host {
    fn start(addr: SocketAddr) -> Host {
        let st = Arc::new(HostState {
            book: Mutex::new(
                (0..UNITS)
                    .map(|_| Unit {
                        acked: 0,
                        may_hold: vec![0],
                    })
                    .collect(),
            ),
            seq: AtomicU64::new(1),
            stop: AtomicBool::new(false),
            pause: AtomicBool::new(false),
            idle: AtomicUsize::new(0),
            phase: AtomicUsize::new(0),
            stats: Mutex::new(Vec::new()),
            violations: Mutex::new(Vec::new()),
            ended: Mutex::new(Vec::new()),
        });
        let threads = (0..WRITERS)
            .map(|i| {
                let st = st.clone();
                std::thread::spawn(move || rt().block_on(writer(&st, i, addr)))
            })
            .collect();
        Host { st, threads }
    }

    /// Pause every live writer (bounded); they finish the command they are in first.
    fn pause(&self) {
        self.st.pause.store(true, Ordering::Release);
        let deadline = Instant::now() + WAIT;
        while self.st.idle.load(Ordering::Acquire) + lock(&self.st.ended).len() < WRITERS {
            assert!(Instant::now() < deadline, "writers did not pause");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn resume(&self) {
        self.st.pause.store(false, Ordering::Release);
    }

    fn stop(&mut self) {
        self.st.stop.store(true, Ordering::Release);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        self.stop();
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn host_config() -> HostConfig {
    HostConfig {
        io_timeout: Duration::from_secs(15),
        connect_timeout: Duration::from_secs(5),
        ..HostConfig::default()
    }
}

/// Writer `idx`: write random units of its own (every WRITERS-th), one at a time, each a new
/// version; after every second write read one of its units back and check it exactly (no
/// other writer touches it, nothing of it is in flight).
async fn writer(st: &HostState, idx: usize, addr: SocketAddr) {
    let end = |e: String| lock(&st.ended).push((idx, Instant::now(), e));
    let c = match Controller::connect(addr, NQN, &host_config()).await {
        Ok(c) => c,
        Err(e) => return end(format!("connect: {e}")),
    };
    let mut q = match c.io_queue(1, 0, false).await {
        Ok(q) => q,
        Err(e) => return end(format!("I/O queue: {e}")),
    };
    let mine: Vec<usize> = (idx..UNITS).step_by(WRITERS).collect();
    // Half the writes go to a few hot units: versions replace each other quickly, so a
    // write that lands late (stale) is seen.
    let mut rng = 0x2545_f491_4f6c_dd1d_u64 ^ (idx as u64 + 1).wrapping_mul(0x9e37_79b9);
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let n = if rng & 1 == 0 { HOT } else { mine.len() };
        mine[((rng >> 1) % n as u64) as usize]
    };
    let mut paused = false;
    let mut n = 0u64;
    while !st.stop.load(Ordering::Acquire) {
        if st.pause.load(Ordering::Acquire) != paused {
            paused = !paused;
            if paused {
                st.idle.fetch_add(1, Ordering::AcqRel);
            } else {
                st.idle.fetch_sub(1, Ordering::AcqRel);
            }
        }
        if paused {
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        }
        let u = next();
        let seq = st.seq.fetch_add(1, Ordering::AcqRel);
        lock(&st.book)[u].may_hold.push(seq);
        let data = unit_data(u, seq);
        let t = Instant::now();
        let r = q
            .write(NS, (u * UNIT_BLOCKS) as u64, UNIT_BLOCKS as u32, &data)
            .await;
        let lat = t.elapsed();
        match r {
            Ok(()) => {
                let mut b = lock(&st.book);
                b[u].acked = seq;
                b[u].may_hold.retain(|v| *v >= seq);
                drop(b);
                st.stat(|s| {
                    s.acked += 1;
                    s.max_lat = s.max_lat.max(lat);
                });
            }
            Err(HostError::Status(s)) => st.stat(|x| {
                x.failed += 1;
                let e = format!("{s}");
                if !x.errors.contains(&e) {
                    x.errors.push(e);
                }
            }),
            Err(e) => return end(format!("write: {e}")),
        }
        n += 1;
        if n.is_multiple_of(2) {
            let v = next();
            let mut buf = vec![0u8; UNIT];
            match q
                .read(NS, (v * UNIT_BLOCKS) as u64, UNIT_BLOCKS as u32, &mut buf)
                .await
            {
                Ok(()) => {
                    st.stat(|s| s.reads += 1);
                    if let Some(bad) = check_unit(v, &lock(&st.book)[v], &buf) {
                        st.violation(format!("read through the primary: {bad}"));
                    }
                }
                Err(HostError::Status(_)) => {}
                Err(e) => return end(format!("read: {e}")),
            }
        }
    }
    drop(q);
    let _ = tokio::time::timeout(Duration::from_secs(2), c.disconnect()).await;
}

// ---- the boxes ----

struct BoxSpec {
    name: &'static str,
    addr: SocketAddr,
    peer: SocketAddr,
    role: &'static str,
}

fn sock(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.sock"))
}

fn image(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.img"))
}

/// Start box `b` with witness `w` (logs in `<name>.log`); its copy is `backend` (`file`: in
/// `<name>.img`, or `ram`).
fn start_box(dir: &Path, b: &BoxSpec, w: SocketAddr, backend: &str) -> Target {
    let cfg = dir.join(format!("{}.toml", b.name));
    let text = format!(
        "[mirror]\nwitness = \"{w}\"\nlease_ms = {LEASE_MS}\n\n\
         [target]\nstate_dir = \"{state}\"\n\n[management]\nsocket = \"{sock}\"\n\n\
         [[listeners]]\naddress = \"127.0.0.1\"\nport = {port}\n\n\
         [[subsystems]]\nnqn = \"{NQN}\"\n\n\
         [[subsystems.namespaces]]\nnsid = 1\nbackend = \"{backend}\"\n{path}\
         size = \"8M\"\nana_group = 2\nmirror = {{ peer = \"{peer}\", role = \"{role}\" }}\n",
        state = dir.join(format!("{}-state", b.name)).display(),
        sock = sock(dir, b.name).display(),
        port = b.addr.port(),
        path = match backend {
            "file" => format!("path = \"{}\"\n", image(dir, b.name).display()),
            _ => String::new(),
        },
        peer = b.peer,
        role = b.role,
    );
    std::fs::write(&cfg, text).unwrap();
    let log = std::fs::File::create(dir.join(format!("{}.log", b.name))).unwrap();
    Target::spawn(
        &["serve", "--config", cfg.to_str().unwrap()],
        b.addr,
        Stdio::from(log),
    )
}

fn start_witness(dir: &Path, addr: SocketAddr) -> Target {
    let cfg = dir.join("w.toml");
    let text = format!(
        "[management]\nsocket = \"{}\"\n\n[[listeners]]\naddress = \"127.0.0.1\"\nport = {}\n\n\
         [witness]\nlease_max_ms = {}\n",
        sock(dir, "w").display(),
        addr.port(),
        2 * LEASE_MS
    );
    std::fs::write(&cfg, text).unwrap();
    Target::spawn(
        &["serve", "--config", cfg.to_str().unwrap()],
        addr,
        Stdio::null(),
    )
}

// ---- watching the mirror ----

/// A change of a box's mirror status.
struct Seen {
    at: Instant,
    name: &'static str,
    role: String,
    state: String,
    fenced: bool,
}

struct Watch {
    seen: Mutex<Vec<Seen>>,
    latest: Mutex<Vec<Option<MirrorView>>>,
    stop: AtomicBool,
}

/// Polls both boxes' mirror status every 20 ms; stopped and joined on drop.
struct Monitor {
    w: Arc<Watch>,
    t: Option<JoinHandle<()>>,
}

const NAMES: [&str; 2] = ["a", "b"];

impl Monitor {
    fn start(dir: &Path) -> Monitor {
        let w = Arc::new(Watch {
            seen: Mutex::new(Vec::new()),
            latest: Mutex::new(vec![None, None]),
            stop: AtomicBool::new(false),
        });
        let clients: Vec<Client> = NAMES.iter().map(|n| Client::new(sock(dir, n))).collect();
        let w2 = w.clone();
        let t = std::thread::spawn(move || {
            while !w2.stop.load(Ordering::Acquire) {
                for (i, c) in clients.iter().enumerate() {
                    let v = c.mirror_status(NQN, "1").ok();
                    let mut latest = lock(&w2.latest);
                    if let Some(v) = &v {
                        let key = |m: &MirrorView| (m.role.clone(), m.state.clone(), m.fenced);
                        if latest[i].as_ref().map(key) != Some(key(v)) {
                            lock(&w2.seen).push(Seen {
                                at: Instant::now(),
                                name: NAMES[i],
                                role: v.role.clone(),
                                state: v.state.clone(),
                                fenced: v.fenced,
                            });
                        }
                    }
                    latest[i] = v;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        Monitor { w, t: Some(t) }
    }

    /// Wait (bounded) until box `i`'s status satisfies `f`; when it did.
    fn wait(&self, i: usize, what: &str, f: impl Fn(&MirrorView) -> bool) -> Instant {
        let deadline = Instant::now() + WAIT;
        loop {
            if lock(&self.w.latest)[i].as_ref().is_some_and(&f) {
                return Instant::now();
            }
            assert!(
                Instant::now() < deadline,
                "{} never {what}: {:?}",
                NAMES[i],
                lock(&self.w.latest)[i]
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Box `name`'s changes since `from`: "+0.12s degraded, …".
    fn changes(&self, name: &str, from: Instant) -> (Vec<String>, Option<Instant>) {
        let seen = lock(&self.w.seen);
        let mut left_sync = None;
        let v = seen
            .iter()
            .filter(|s| s.name == name && s.at >= from)
            .map(|s| {
                if s.state != "in-sync" && left_sync.is_none() {
                    left_sync = Some(s.at);
                }
                let fenced = if s.fenced { " FENCED" } else { "" };
                let secs = s.at.duration_since(from).as_secs_f64();
                format!("+{secs:.2}s {} {}{fenced}", s.role, s.state)
            })
            .collect();
        (v, left_sync)
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.w.stop.store(true, Ordering::Release);
        if let Some(t) = self.t.take() {
            let _ = t.join();
        }
    }
}

// ---- the scenario ----

struct Run<'a> {
    label: &'a str,
    dir: &'a Path,
    a_addr: SocketAddr,
    proxy: &'a FaultProxy,
    host: &'a Host,
    mon: &'a Monitor,
    report: Vec<String>,
}

impl Run<'_> {
    /// Inject a fault (by `inject`) for `hold`, heal the link, wait for the primary to be in
    /// sync again, then check both copies; report what the mirror did. Returns whether the
    /// mirror was seen out of sync, and how many link connections were made meanwhile.
    fn phase(
        &mut self,
        name: &str,
        hold: Duration,
        inject: impl FnOnce(&FaultProxy, &Host),
    ) -> (bool, u64) {
        let p = self.host.st.phase.fetch_add(1, Ordering::AcqRel) + 1;
        let conns = self.proxy.accepted();
        let start = Instant::now();
        inject(self.proxy, self.host);
        std::thread::sleep(hold);
        self.proxy.set(Fault::Pass);
        let healed = Instant::now();
        let synced = self.mon.wait(0, "in sync again", |m| m.state == "in-sync");
        let (changes, left) = self.mon.changes("a", start);
        let s = lock(&self.host.st.stats)
            .get(p)
            .cloned()
            .unwrap_or_default();
        let mut line = format!(
            "{name}: {} writes acknowledged (slowest {} ms), {} failed {:?}, {} reads checked; \
             link connections made {}; ",
            s.acked,
            s.max_lat.as_millis(),
            s.failed,
            s.errors,
            s.reads,
            self.proxy.accepted() - conns,
        );
        match left {
            None => line.push_str("the mirror stayed in sync"),
            Some(t) => line.push_str(&format!(
                "out of sync {} ms after the fault began, in sync again {} ms after the link \
                 came back [{}]",
                t.duration_since(start).as_millis(),
                synced.saturating_duration_since(healed).as_millis(),
                changes.join(", ")
            )),
        }
        println!("{}: {line}", self.label);
        self.report.push(line);
        self.compare_copies(name);
        (left.is_some(), self.proxy.accepted() - conns)
    }

    /// Writers paused and the mirror in sync: both copies equal, each unit as the book allows.
    fn compare_copies(&self, name: &str) {
        self.host.pause();
        self.mon.wait(0, "in sync and idle", |m| {
            m.state == "in-sync" && m.in_flight == 0
        });
        // The primary's copy as it serves it; the secondary's from its file.
        let a = read_all(self.a_addr);
        let b = std::fs::read(image(self.dir, "b")).unwrap();
        assert_eq!((a.len(), b.len()), (VOLUME, VOLUME));
        let book = lock(&self.host.st.book);
        for u in 0..UNITS {
            let r = u * UNIT..(u + 1) * UNIT;
            if let Some(bad) = check_unit(u, &book[u], &b[r.clone()]) {
                self.host
                    .st
                    .violation(format!("after {name}, the secondary's copy: {bad}"));
            }
            if a[r.clone()] != b[r] {
                self.host.st.violation(format!(
                    "after {name}, in sync but the copies differ in unit {u}"
                ));
            }
        }
        drop(book);
        self.host.resume();
    }
}

/// Read the whole volume through the box at `addr` (bounded retries while its path turns
/// accessible).
fn read_all(addr: SocketAddr) -> Vec<u8> {
    rt().block_on(async {
        let c = Controller::connect(addr, NQN, &host_config())
            .await
            .unwrap();
        let mut q = c.io_queue(1, 0, false).await.unwrap();
        let mut all = vec![0u8; VOLUME];
        let step = 128 * 1024;
        let deadline = Instant::now() + WAIT;
        for off in (0..VOLUME).step_by(step) {
            loop {
                let buf = &mut all[off..off + step];
                match q.read(NS, (off / BS) as u64, (step / BS) as u32, buf).await {
                    Ok(()) => break,
                    Err(HostError::Status(s)) if Instant::now() < deadline => {
                        eprintln!("read through {addr}: {s}; retrying");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    Err(e) => panic!("read through {addr}: {e}"),
                }
            }
        }
        drop(q);
        c.disconnect().await;
        all
    })
}

fn addr() -> SocketAddr {
    format!("127.0.0.1:{}", free_port()).parse().unwrap()
}

/// The primary's copy in a file (replicated writes on the worker pool).
#[test]
fn link_faults_lose_no_acknowledged_write_file_primary() {
    link_faults("file", faults);
}

/// The primary's copy in RAM (replicated writes completed by the link, without a waiting
/// thread, where the engine offers it).
#[test]
fn link_faults_lose_no_acknowledged_write_ram_primary() {
    link_faults("ram", faults);
}

/// Writes of a replaced link must never land (see `late_link_writes`): a Mirror Admit on a
/// new link fences the older link of the same epoch (`MirrorFence::admit`).
#[test]
fn writes_of_a_replaced_link_never_land() {
    link_faults("file", late_link_writes);
}

const SECOND: Duration = Duration::from_secs(1);

/// The faults of the module docs, in turn, each healed and checked: those shorter than the
/// link's I/O timeout keep it, the others make the primary reconnect (and go degraded when
/// they last).
fn faults(run: &mut Run) {
    let (ms, second) = (Duration::from_millis, SECOND);
    let kept = |r: (bool, u64), what: &str| assert_eq!(r.1, 0, "{what}: the link was remade");
    let remade = |r: (bool, u64), what: &str| assert!(r.1 > 0, "{what}: the link was kept");
    let lost = |r: (bool, u64), what: &str| assert!(r.0 && r.1 > 0, "{what}: never degraded");
    kept(run.phase("no fault", second, |_, _| {}), "no fault");
    let r = run.phase("delay 100 ms each way", 2 * second, |p, _| {
        p.set(Fault::Delay(ms(100)))
    });
    kept(r, "delay");
    let r = run.phase("trickle (1..=7-byte pieces)", 2 * second, |p, _| {
        p.set(Fault::Trickle(7))
    });
    kept(r, "trickle");
    remade(run.phase("reset mid-PDU", second, |p, _| p.tear()), "tear");
    assert_eq!(run.proxy.tears(), 1, "the torn transfer never happened");
    let r = run.phase("blackhole 3 s", 3 * second, |p, _| p.set(Fault::Blackhole));
    lost(r, "blackhole");
    let r = run.phase("4 resets 250 ms apart", Duration::ZERO, |p, _| {
        for _ in 0..4 {
            p.reset();
            std::thread::sleep(ms(250));
        }
    });
    remade(r, "resets");
    let r = run.phase("stall (delay 2.5 s)", 3 * second, |p, _| {
        p.set(Fault::Delay(LINK_TIMEOUT + ms(500)))
    });
    lost(r, "stall");
}

/// The writes in flight on a slow path (0.45 s one way: within the link's keep-alive timeout)
/// when the primary's side of it ends land on the secondary after the primary reconnected on
/// another path and resynced; the writers pause meanwhile, so nothing newer hides them. The
/// secondary's copy is then older than what was acknowledged while the primary says "in
/// sync"; the primary dies with the writers still paused, and the new primary serves it.
fn late_link_writes(run: &mut Run) {
    let name = "the link's path slows, then ends on the primary's side";
    run.phase(name, SECOND, |p, h| {
        let old = p.open_now();
        old.set(Duration::from_millis(450), Duration::ZERO);
        std::thread::sleep(Duration::from_millis(100));
        old.close_to_client();
        std::thread::sleep(Duration::from_millis(250));
        h.pause();
    });
    run.host.pause();
}

/// The scenario of the module docs with `faults`; the secondary's copy is a file (read at each
/// check). EBOF_KEEP_TEST_DIR=1 keeps the boxes' configurations and logs.
fn link_faults(primary_backend: &str, faults: fn(&mut Run)) {
    let began = Instant::now();
    let mut dir = Some(tempfile::tempdir().unwrap());
    let path = dir.as_ref().unwrap().path().to_path_buf();
    if std::env::var_os("EBOF_KEEP_TEST_DIR").is_some() {
        eprintln!("test dir: {}", path.display());
        std::mem::forget(dir.take());
    }
    let d = path.as_path();
    let (a_addr, b_addr, w_addr, proxy_addr) = (addr(), addr(), addr(), addr());
    let _w = start_witness(d, w_addr);
    let b = BoxSpec {
        name: "b",
        addr: b_addr,
        peer: a_addr,
        role: "secondary",
    };
    let _tb = start_box(d, &b, w_addr, "file");
    let proxy = FaultProxy::start(proxy_addr, b_addr);
    let a = BoxSpec {
        name: "a",
        addr: a_addr,
        peer: proxy.addr,
        role: "primary",
    };
    let ta = start_box(d, &a, w_addr, primary_backend);
    let mon = Monitor::start(d);
    mon.wait(0, "in sync with a lease", |m| {
        m.state == "in-sync" && !m.fenced && m.lease_ms_left.is_some_and(|l| l > 0)
    });
    let ready = began.elapsed();
    let mut host = Host::start(a_addr);
    let mut run = Run {
        label: primary_backend,
        dir: d,
        a_addr,
        proxy: &proxy,
        host: &host,
        mon: &mon,
        report: Vec::new(),
    };
    faults(&mut run);
    let report = std::mem::take(&mut run.report);
    assert!(
        lock(&host.st.ended).is_empty(),
        "a writer lost the primary during the link faults: {:?}",
        lock(&host.st.ended)
    );
    let (b_changes, _) = mon.changes("b", began);
    assert!(
        b_changes.iter().all(|c| c.contains("secondary")),
        "the secondary changed role while the primary was alive: {b_changes:?}"
    );

    // The primary dies mid-write; the witness promotes the secondary once the lease lapsed.
    host.st.phase.fetch_add(1, Ordering::AcqRel);
    std::thread::sleep(SECOND);
    let killed = Instant::now();
    drop(ta);
    let promoted = mon.wait(1, "promoted", |m| m.role == "primary");
    host.stop();
    let all = read_all(b_addr);
    let book = lock(&host.st.book);
    let mut acked = 0;
    for u in 0..UNITS {
        acked += u64::from(book[u].acked > 0);
        if let Some(bad) = check_unit(u, &book[u], &all[u * UNIT..(u + 1) * UNIT]) {
            host.st
                .violation(format!("after the failover, the new primary: {bad}"));
        }
    }
    drop(book);
    println!(
        "{primary_backend}: boxes ready in {} ms; promoted {} ms after kill -9 of the primary; \
         {acked} of {UNITS} units acknowledged, each checked on the new primary; {} s in all",
        ready.as_millis(),
        promoted.duration_since(killed).as_millis(),
        began.elapsed().as_secs()
    );
    let v = lock(&host.st.violations);
    assert!(
        v.is_empty(),
        "{} violations (first 20): {:#?}\nphases:\n{}",
        v.len(),
        &v[..v.len().min(20)],
        report.join("\n")
    );
}

/// The checker itself: a stale, torn, misdirected or never written version is caught.
#[test]
fn the_block_checker_catches_stale_torn_and_misdirected_blocks() {
    let book = Unit {
        acked: 7,
        may_hold: vec![7, 9],
    };
    assert_eq!(check_unit(3, &book, &unit_data(3, 7)), None);
    assert_eq!(check_unit(3, &book, &unit_data(3, 9)), None);
    let stale = check_unit(3, &book, &unit_data(3, 5)).unwrap();
    assert!(stale.contains("stale"), "{stale}");
    let unknown = check_unit(3, &book, &unit_data(3, 8)).unwrap();
    assert!(unknown.contains("never written"), "{unknown}");
    assert!(
        check_unit(3, &book, &vec![0; UNIT])
            .unwrap()
            .contains("stale")
    );
    let mut torn = unit_data(3, 9);
    torn[BS + 100] ^= 1;
    assert!(check_unit(3, &book, &torn).unwrap().contains("torn"));
    let elsewhere = check_unit(3, &book, &unit_data(4, 9)).unwrap();
    assert!(elsewhere.contains("misdirected"), "{elsewhere}");
}
