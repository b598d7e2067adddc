//! Two boxes on loopback: the secondary is the real server (`ebof_runtime::Server`) over a RAM
//! namespace; the primary is a `Mirror` over another RAM backend, written through its backend.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ebof_backend::{Backend, BackendSpec};
use ebof_mirror::{Fence, Mirror, MirrorSpec, PeerState, Role, RoleSink};
use ebof_runtime::{Server, ServerConfig, ServerHandle};
use nvmf_target::{
    ListenerInfo, MirrorFence, MirrorRole, Namespace, Subsystem, Target, TargetLimits,
};

const NQN: &str = "nqn.2026-11.io.ebof:mirror-test";

/// A subsystem NQN of its own per test: a port freed by one test and taken by another's
/// secondary must not take a link meant for the first.
fn nqn(tag: &str) -> String {
    format!("{NQN}-{tag}")
}
const LINK: &str = "nqn.2026-11.io.ebof:mirror-link";

struct Box2 {
    handle: Option<ServerHandle>,
    addr: SocketAddr,
}

impl Drop for Box2 {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            h.stop();
        }
    }
}

/// A secondary's fence (kept across its restarts, as its persisted state would be).
fn sec_fence() -> Arc<MirrorFence> {
    Arc::new(MirrorFence::new(0, MirrorRole::Secondary))
}

/// The secondary box: the real server on `addr` (port 0: any) over `backend`, fenced by
/// `fence`, taking replica links from `LINK`.
fn secondary(
    nqn: &str,
    addr: SocketAddr,
    backend: Arc<dyn Backend>,
    fence: &Arc<MirrorFence>,
) -> Box2 {
    let sub = Subsystem {
        nqn: nqn.into(),
        serial: "EBOFMIRROR".into(),
        model: "ebof-test".into(),
        allow_any_host: true,
        hosts: vec![],
        namespaces: vec![Arc::new(
            Namespace::new(1, backend, 512, [0x22; 16]).with_mirror(fence.clone()),
        )],
        ns_hosts: Default::default(),
    };
    let target = Arc::new(Target::new(
        vec![sub],
        vec![ListenerInfo {
            addr,
            portid: 1,
            tls: Default::default(),
            transport: Default::default(),
        }],
        TargetLimits::default(),
        Instant::now(),
    ));
    target.set_mirror_link_nqn(Some(LINK.into()));
    let cfg = ServerConfig::new(vec![addr], vec![0]);
    let handle = Server::start(target, cfg).expect("start secondary");
    let addr = handle.bound[0];
    Box2 {
        handle: Some(handle),
        addr,
    }
}

struct TestFence(std::sync::atomic::AtomicU64);

impl Fence for TestFence {
    fn epoch(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
    fn promote(&self, e: u64) -> Result<(), String> {
        self.0.store(e, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }
    fn demote(&self) {}
}

struct Sink;

impl RoleSink for Sink {
    fn role_changed(&self, _role: Role, _epoch: u64) {}
}

fn ram(size: u64) -> Arc<dyn Backend> {
    ebof_backend::open(&BackendSpec::Ram { size }).expect("ram")
}

fn spec(nqn: &str, peer: SocketAddr) -> MirrorSpec {
    MirrorSpec {
        subnqn: nqn.into(),
        nsid: 1,
        volume_id: [0x22; 16],
        block_size: 512,
        peer,
        role: Role::Primary,
        link_hostnqn: LINK.into(),
        link_queues: 1,
        host: nvmf_host::HostConfig::default(),
        witness: None,
        lease: Duration::from_secs(2),
        resync_bytes_per_sec: None,
        region_bytes: 1 << 20,
        state_path: None,
        holder_id: [1; 16],
    }
}

fn start(nqn: &str, local: Arc<dyn Backend>, peer: SocketAddr) -> Arc<Mirror> {
    Mirror::start(
        spec(nqn, peer),
        local,
        Arc::new(TestFence(0.into())),
        Arc::new(Sink),
    )
    .expect("start")
}

fn wait_for(m: &Mirror, what: &str, f: impl Fn(PeerState) -> bool) {
    let t = Instant::now();
    let mut last = None;
    while !f(m.status().peer) {
        let st = m.status();
        if last != Some(st.peer) {
            eprintln!("{what}: {st:?}");
            last = Some(st.peer);
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "no {what}: {:?}",
            m.status()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn read(b: &dyn Backend, off: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    b.read(off, &mut v).expect("read");
    v
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn writes_land_on_both_degrade_and_resync() {
    let n = nqn("writes_land_on_both_degrade_and_resync");
    const SIZE: u64 = 16 << 20;
    let (pl, sl, sf) = (ram(SIZE), ram(SIZE), sec_fence());
    // An empty secondary gets a full copy of what the primary already holds.
    pl.write(5 << 20, &pattern(7, 8192)).expect("seed");
    let sec = secondary(&n, "127.0.0.1:0".parse().expect("addr"), sl.clone(), &sf);
    let m = start(&n, pl.clone(), sec.addr);
    wait_for(&m, "in sync", |p| p == PeerState::InSync);
    assert_eq!(read(&*sl, 5 << 20, 8192), pattern(7, 8192));
    let b = m.backend();

    // In sync: a write is on both when it completes.
    b.write(4096, &pattern(1, 65536)).expect("write");
    b.flush().expect("flush");
    assert_eq!(read(&*sl, 4096, 65536), pattern(1, 65536));
    b.write_zeroes(8192, 4096).expect("zeroes");
    assert_eq!(read(&*sl, 8192, 4096), vec![0; 4096]);

    // Secondary down: writes still complete, locally, and mark their regions.
    let addr = sec.addr;
    drop(sec);
    b.write(3 << 20, &pattern(2, 4096)).expect("degraded write");
    b.write(9 << 20, &pattern(3, 4096)).expect("degraded write");
    let st = m.status();
    assert_eq!(st.peer, PeerState::Degraded, "{st:?}");
    assert!(st.dirty_regions >= 2, "{st:?}");
    assert_eq!(read(&*pl, 3 << 20, 4096), pattern(2, 4096));

    // A clean region changed behind the mirror's back on the secondary: a dirty-only resync
    // leaves it alone (a full copy would overwrite it).
    sl.write(12 << 20, &pattern(99, 4096)).expect("side write");
    assert_eq!(read(&*sl, 12 << 20, 4096), pattern(99, 4096), "side write");

    // Back: the secondary was in sync at our epoch: only the dirty regions are copied.
    let _sec = secondary(&n, addr, sl.clone(), &sf);
    wait_for(&m, "resync", |p| p == PeerState::InSync);
    assert_eq!(read(&*sl, 3 << 20, 4096), pattern(2, 4096));
    assert_eq!(read(&*sl, 9 << 20, 4096), pattern(3, 4096));
    assert_eq!(
        read(&*sl, 12 << 20, 4096),
        pattern(99, 4096),
        "clean region copied"
    );
    sl.write(12 << 20, &read(&*pl, 12 << 20, 4096))
        .expect("undo side write");
    assert_eq!(read(&*sl, 0, SIZE as usize), read(&*pl, 0, SIZE as usize));
    assert_eq!(sf.epoch(), m.status().epoch);
    m.stop();
}

/// Prints (does not assert) the rate of an unthrottled full copy.
#[test]
fn full_copy_rate() {
    let n = nqn("full_copy_rate");
    const SIZE: u64 = 256 << 20;
    let (pl, sl, sf) = (ram(SIZE), ram(SIZE), sec_fence());
    pl.write(0, &pattern(9, 1 << 20)).expect("seed");
    let sec = secondary(&n, "127.0.0.1:0".parse().expect("addr"), sl.clone(), &sf);
    let t = Instant::now();
    let m = start(&n, pl.clone(), sec.addr);
    wait_for(&m, "in sync", |p| p == PeerState::InSync);
    let s = t.elapsed().as_secs_f64();
    println!(
        "full copy of {} MiB: {:.1} s, {:.0} MB/s",
        SIZE >> 20,
        s,
        SIZE as f64 / s / 1e6
    );
    assert_eq!(read(&*sl, 0, 1 << 20), pattern(9, 1 << 20));
    m.stop();
}

/// A box with persisted state restarts as secondary, with its dirty regions remembered; a
/// manual promotion makes it primary at epoch + 1.
#[test]
fn restart_as_secondary_keeps_dirty_regions() {
    let n = nqn("restart_as_secondary_keeps_dirty_regions");
    const SIZE: u64 = 8 << 20;
    let dir = std::env::temp_dir().join(format!("ebof-mirror-restart-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let mut sp = spec(&n, "127.0.0.1:9".parse().expect("addr")); // nothing listens: degraded
    sp.state_path = Some(dir.join("ns1.state"));
    let pl = ram(SIZE);
    let fence = || Arc::new(TestFence(0.into()));
    let m = Mirror::start(sp.clone(), pl.clone(), fence(), Arc::new(Sink)).expect("start");
    assert_eq!(m.status().role, Role::Primary);
    let epoch = m.status().epoch;
    m.backend()
        .write(2 << 20, &pattern(4, 4096))
        .expect("write");
    m.stop();
    drop(m);
    let m = Mirror::start(sp, pl, fence(), Arc::new(Sink)).expect("restart");
    let st = m.status();
    assert_eq!(st.role, Role::Secondary, "{st:?}");
    assert_eq!(st.epoch, epoch);
    assert!(st.dirty_regions >= 1, "{st:?}");
    assert!(m.promote(false).is_ok());
    assert_eq!(m.status().role, Role::Primary);
    assert_eq!(m.status().epoch, epoch + 1);
    assert!(m.promote(false).is_err());
    m.stop();
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

/// Many writers at once (pipelined on the link): every write is on both copies; prints the
/// rate (not asserted).
#[test]
fn concurrent_writes_are_on_both() {
    let n = nqn("concurrent_writes_are_on_both");
    const SIZE: u64 = 32 << 20;
    let (pl, sl, sf) = (ram(SIZE), ram(SIZE), sec_fence());
    let sec = secondary(&n, "127.0.0.1:0".parse().expect("addr"), sl.clone(), &sf);
    let m = start(&n, pl.clone(), sec.addr);
    wait_for(&m, "in sync", |p| p == PeerState::InSync);
    let b = m.backend();
    let t = Instant::now();
    let threads: Vec<_> = (0..16u64)
        .map(|i| {
            let b = b.clone();
            std::thread::spawn(move || {
                for j in 0..256u64 {
                    let off = (i * 256 + j) * 4096;
                    b.write(off, &pattern((i + j) as u8, 4096)).expect("write");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("writer");
    }
    let s = t.elapsed().as_secs_f64();
    println!(
        "16 writers × 256 4K replicated writes: {:.0} IOPS",
        4096.0 / s
    );
    assert_eq!(m.status().peer, PeerState::InSync);
    assert_eq!(read(&*sl, 0, 16 << 20), read(&*pl, 0, 16 << 20));
    m.stop();
}

/// A peer that refuses replica writes (it was promoted: its fence moved on) leaves the old
/// primary degraded: writes complete locally, their regions stay dirty, the link is not
/// re-admitted at the stale epoch. A resync under a rate limit takes at least size / rate.
#[test]
fn refused_peer_degrades_and_resync_is_throttled() {
    let n = nqn("refused");
    const SIZE: u64 = 8 << 20;
    let (pl, sl, sf) = (ram(SIZE), ram(SIZE), sec_fence());
    let sec = secondary(&n, "127.0.0.1:0".parse().expect("addr"), sl.clone(), &sf);
    let mut sp = spec(&n, sec.addr);
    sp.resync_bytes_per_sec = Some(16 << 20);
    let t = Instant::now();
    let m = Mirror::start(sp, pl, Arc::new(TestFence(0.into())), Arc::new(Sink)).expect("start");
    wait_for(&m, "in sync", |p| p == PeerState::InSync);
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(400),
        "8 MiB at 16 MiB/s took {took:?}"
    );
    sf.promote(
        &nvmf_target::gate::Gate::default(),
        2,
        Duration::from_secs(1),
    )
    .expect("promote peer");
    m.backend()
        .write(1 << 20, &pattern(5, 4096))
        .expect("write completes locally");
    let st = m.status();
    assert_ne!(st.peer, PeerState::InSync, "{st:?}");
    assert!(st.dirty_regions >= 1, "{st:?}");
    assert_ne!(read(&*sl, 1 << 20, 4096), pattern(5, 4096));
    std::thread::sleep(Duration::from_millis(300));
    assert_ne!(m.status().peer, PeerState::InSync);
    m.stop();
    drop(sec);
}

/// Start a write through [`ebof_backend::AsyncWrites`]: Ok(receiver of its outcome), or Err
/// when the backend declined it.
fn start_async(
    b: &dyn Backend,
    off: u64,
    data: Vec<u8>,
) -> Result<std::sync::mpsc::Receiver<(Vec<u8>, bool)>, ()> {
    let (tx, rx) = std::sync::mpsc::channel();
    let len = data.len();
    let w = b.async_writes().expect("a mirror has asynchronous writes");
    let done = Box::new(
        move |buf: Vec<u8>, res: Result<(), ebof_backend::BackendError>| {
            let _ = tx.send((buf, res.is_ok()));
        },
    );
    w.start_write(off, len, data, done)
        .map(|()| rx)
        .map_err(|_| ())
}

/// Writes started from a reactor (no thread waits for the peer): each completes once both
/// copies have it, hands its buffer back, and degrades like a blocking write when the peer
/// is gone. A write that would have to sync the bitmap is declined (the runtime runs it the
/// blocking way).
#[test]
fn async_writes_are_on_both_and_decline_what_would_wait() {
    let n = nqn("async_writes");
    const SIZE: u64 = 16 << 20;
    let dir = std::env::temp_dir().join(format!("ebof-mirror-async-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let (pl, sl, sf) = (ram(SIZE), ram(SIZE), sec_fence());
    let sec = secondary(&n, "127.0.0.1:0".parse().expect("addr"), sl.clone(), &sf);
    let mut sp = spec(&n, sec.addr);
    sp.state_path = Some(dir.join("ns1.state"));
    let m = Mirror::start(
        sp,
        pl.clone(),
        Arc::new(TestFence(0.into())),
        Arc::new(Sink),
    )
    .expect("start");
    wait_for(&m, "in sync", |p| p == PeerState::InSync);
    let b = m.backend();

    // A clean region with a bitmap file: setting its bit needs an fdatasync: declined.
    assert!(start_async(&*b, 0, pattern(1, 4096)).is_err(), "declined");
    b.write(0, &pattern(1, 4096))
        .expect("blocking write marks the region");
    // Its region is marked now: 64 writes in flight at once, each on both copies.
    let pending: Vec<_> = (0..64u64)
        .map(|i| {
            let rx = start_async(&*b, i * 4096, pattern(i as u8 + 2, 4096)).expect("started");
            (i, rx)
        })
        .collect();
    for (i, rx) in pending {
        let (buf, ok) = rx.recv_timeout(Duration::from_secs(10)).expect("completed");
        assert!(ok, "write {i}");
        assert_eq!(buf, pattern(i as u8 + 2, 4096), "its buffer comes back");
    }
    assert_eq!(read(&*sl, 0, 64 * 4096), read(&*pl, 0, 64 * 4096));
    assert_eq!(m.status().in_flight, 0);

    // Peer gone: completes alone (no witness), degraded, its region dirty.
    drop(sec);
    let rx = start_async(&*b, 8192, pattern(77, 4096)).expect("started");
    let (_, ok) = rx.recv_timeout(Duration::from_secs(10)).expect("completed");
    assert!(ok);
    let st = m.status();
    assert_eq!(st.peer, PeerState::Degraded, "{st:?}");
    assert!(st.dirty_regions >= 1, "{st:?}");
    assert_eq!(read(&*pl, 8192, 4096), pattern(77, 4096));
    m.stop();
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

/// A secondary's copy (RAM) takes the primary's replica writes at once, on the reactor
/// (`write_now`); a primary's never do (they wait for the peer).
#[test]
fn a_secondary_writes_now_a_primary_does_not() {
    let n = nqn("write_now");
    const SIZE: u64 = 4 << 20;
    let mut sp = spec(&n, "127.0.0.1:9".parse().expect("addr"));
    sp.role = Role::Secondary;
    let local = ram(SIZE);
    let m = Mirror::start(
        sp,
        local.clone(),
        Arc::new(TestFence(0.into())),
        Arc::new(Sink),
    )
    .expect("start");
    assert_eq!(m.status().role, Role::Secondary);
    let b = m.backend();
    let w = b.async_writes().expect("asynchronous writes");
    assert!(matches!(w.write_now(4096, &pattern(5, 4096)), Some(Ok(()))));
    assert_eq!(read(&*local, 4096, 4096), pattern(5, 4096));
    assert!(m.promote(false).is_ok());
    assert!(w.write_now(8192, &pattern(6, 4096)).is_none(), "primary");
    m.stop();
}

/// A replicated namespace never shrinks, and its primary grows only once the secondary holds
/// the new size (asked over the link), with an error that says so; a secondary grows freely.
#[test]
fn the_primary_grows_after_its_secondary() {
    let n = nqn("grow");
    const SIZE: u64 = 8 << 20;
    let (pl, sl, sf) = (ram(SIZE), ram(SIZE), sec_fence());
    let sec = secondary(&n, "127.0.0.1:0".parse().expect("addr"), sl.clone(), &sf);
    let m = start(&n, pl.clone(), sec.addr);
    wait_for(&m, "in sync", |p| p == PeerState::InSync);
    let b = m.backend();
    let e = b.resize(SIZE / 2).expect_err("shrink");
    assert!(e.to_string().contains("does not shrink"), "{e}");
    let e = b.resize(2 * SIZE).expect_err("grown before the secondary");
    assert!(
        e.to_string().contains(&format!("holds {SIZE} bytes")) && e.to_string().contains("first"),
        "{e}"
    );
    assert_eq!(b.size(), SIZE);
    sl.resize(2 * SIZE).expect("the secondary grows");
    b.resize(2 * SIZE).expect("then the primary");
    assert_eq!(b.size(), 2 * SIZE);
    b.write(SIZE + 4096, &pattern(8, 4096))
        .expect("write past the old end");
    assert_eq!(read(&*sl, SIZE + 4096, 4096), pattern(8, 4096));
    drop(sec);
    b.write(0, &pattern(1, 4096)).expect("degraded");
    let e = b.resize(4 * SIZE).expect_err("peer down");
    assert!(e.to_string().contains("cannot be asked"), "{e}");
    m.stop();
}
