//! Automatic failover through a witness, on loopback: a witness server, a secondary box (the
//! real server over a namespace whose backend is its `Mirror`'s, fenced by a real
//! `MirrorFence`) and a primary `Mirror` written through its backend. Short leases; every wait
//! polls against a deadline.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ebof_backend::{Backend, BackendSpec};
use ebof_mirror::{Mirror, MirrorSpec, MirrorStatus, NsFence, PeerState, Role, RoleSink};
use ebof_runtime::{Server, ServerConfig, ServerHandle};
use nvme_spec::ebof_vendor::MirrorAdmit;
use nvme_spec::{CommandId, NamespaceId, Sqe};
use nvmf_host::{Controller, DataDir, HostConfig};
use nvmf_target::witness::{LeaseTable, WITNESS_NQN};
use nvmf_target::{
    ListenerInfo, MirrorFence, MirrorRole, Namespace, Subsystem, Target, TargetLimits,
};

const LEASE: Duration = Duration::from_millis(800);
const MAX: Duration = Duration::from_secs(1);
const LINK: &str = "nqn.2026-11.io.ebof:mirror-link";
const VOL: [u8; 16] = [0x33; 16];
const SIZE: u64 = 4 << 20;
/// Nothing listens there: a peer that is gone.
const NOWHERE: &str = "127.0.0.1:9";

fn nqn(tag: &str) -> String {
    format!("nqn.2026-11.io.ebof:failover-{tag}")
}

/// A running server, stopped on drop.
struct Srv(Option<ServerHandle>, SocketAddr);

impl Drop for Srv {
    fn drop(&mut self) {
        if let Some(h) = self.0.take() {
            h.stop();
        }
    }
}

fn serve(subsystem: Subsystem, setup: impl FnOnce(&Target)) -> Srv {
    let addr: SocketAddr = "127.0.0.1:0".parse().expect("addr");
    let target = Arc::new(Target::new(
        vec![subsystem],
        vec![ListenerInfo {
            addr,
            portid: 1,
            tls: Default::default(),
            transport: Default::default(),
        }],
        TargetLimits::default(),
        Instant::now(),
    ));
    setup(&target);
    let h = Server::start(target, ServerConfig::new(vec![addr], vec![0])).expect("server");
    let a = h.bound[0];
    Srv(Some(h), a)
}

fn subsystem(nqn: &str, namespaces: Vec<Arc<Namespace>>) -> Subsystem {
    Subsystem {
        nqn: nqn.into(),
        serial: "EBOFFAILOVER".into(),
        model: "ebof-test".into(),
        allow_any_host: true,
        hosts: vec![],
        namespaces,
        ns_hosts: Default::default(),
    }
}

/// A witness whose table is past its grace period.
fn witness() -> Srv {
    serve(subsystem(WITNESS_NQN, vec![]), |t| {
        t.set_witness(Some(LeaseTable::new(Instant::now() - MAX, MAX)));
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ev {
    Role(Role, u64),
    Fenced(bool),
}

#[derive(Default)]
struct Events(Mutex<Vec<Ev>>);

impl Events {
    fn all(&self) -> Vec<Ev> {
        self.0.lock().expect("events").clone()
    }
}

impl RoleSink for Events {
    fn role_changed(&self, role: Role, epoch: u64) {
        self.0.lock().expect("events").push(Ev::Role(role, epoch));
    }
    fn fenced(&self, fenced: bool) {
        self.0.lock().expect("events").push(Ev::Fenced(fenced));
    }
}

fn ram() -> Arc<dyn Backend> {
    ebof_backend::open(&BackendSpec::Ram { size: SIZE }).expect("ram")
}

fn spec(nqn: &str, peer: SocketAddr, witness: SocketAddr, role: Role, me: u8) -> MirrorSpec {
    MirrorSpec {
        subnqn: nqn.into(),
        nsid: 1,
        volume_id: VOL,
        block_size: 512,
        peer,
        role,
        link_hostnqn: LINK.into(),
        link_queues: 1,
        host: HostConfig::default(),
        witness: Some(witness),
        lease: LEASE,
        resync_bytes_per_sec: None,
        region_bytes: 1 << 20,
        state_path: None,
        holder_id: [me; 16],
    }
}

/// One box's mirror with its fence, local copy and role events.
struct Node {
    mirror: Arc<Mirror>,
    fence: Arc<MirrorFence>,
    local: Arc<dyn Backend>,
    events: Arc<Events>,
}

impl Node {
    fn start(spec: MirrorSpec, fence_role: MirrorRole) -> (Node, Arc<NsFence>) {
        let fence = Arc::new(MirrorFence::new(0, fence_role));
        let ns_fence = NsFence::new(fence.clone());
        let (local, events) = (ram(), Arc::new(Events::default()));
        let mirror =
            Mirror::start(spec, local.clone(), ns_fence.clone(), events.clone()).expect("mirror");
        let node = Node {
            mirror,
            fence,
            local,
            events,
        };
        (node, ns_fence)
    }

    fn status(&self) -> MirrorStatus {
        self.mirror.status()
    }

    fn wait(&self, what: &str, within: Duration, f: impl Fn(&MirrorStatus) -> bool) -> Duration {
        let t = Instant::now();
        while !f(&self.status()) {
            assert!(t.elapsed() < within, "no {what}: {:?}", self.status());
            std::thread::sleep(Duration::from_millis(10));
        }
        t.elapsed()
    }

    /// Assert `f` holds for all of `d`.
    fn hold(&self, what: &str, d: Duration, f: impl Fn(&MirrorStatus) -> bool) {
        let t = Instant::now();
        while t.elapsed() < d {
            assert!(f(&self.status()), "not {what}: {:?}", self.status());
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// The secondary box: its mirror (peer gone, asks the witness) and the real server over a
/// namespace whose backend is the mirror's, taking replica links.
fn secondary(nqn: &str, witness: SocketAddr) -> (Node, Srv) {
    let sp = spec(
        nqn,
        NOWHERE.parse().expect("addr"),
        witness,
        Role::Secondary,
        2,
    );
    let (node, ns_fence) = Node::start(sp, MirrorRole::Secondary);
    let ns = Arc::new(
        Namespace::new(1, node.mirror.backend(), 512, VOL).with_mirror(node.fence.clone()),
    );
    ns_fence.attach(&ns);
    let srv = serve(subsystem(nqn, vec![ns]), |t| {
        t.set_mirror_link_nqn(Some(LINK.into()))
    });
    (node, srv)
}

/// The primary box (no server: its host I/O goes through its backend).
fn primary(nqn: &str, peer: SocketAddr, witness: SocketAddr) -> Node {
    Node::start(spec(nqn, peer, witness, Role::Primary, 1), MirrorRole::None).0
}

/// Primary and secondary in sync at epoch 1, the primary holding the lease.
fn in_sync(p: &Node, s: &Node) {
    p.wait("sync", Duration::from_secs(20), |st| {
        st.peer == PeerState::InSync && !st.fenced
    });
    let t = Instant::now();
    while s.fence.synced_at() != 1 {
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", s.fence);
        std::thread::sleep(Duration::from_millis(10));
    }
    // The witness hears "in sync" at the next renewal (lease/4 later).
    std::thread::sleep(LEASE / 2);
    assert_eq!(p.status().peer, PeerState::InSync, "{:?}", p.status());
    assert_eq!(p.status().epoch, 1);
    assert!(p.status().lease_ms_left.is_some_and(|ms| ms > 0));
    assert_eq!(s.status().lease_ms_left, Some(0));
}

fn read(b: &dyn Backend, off: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    b.read(off, &mut v).expect("read");
    v
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
        .collect()
}

#[test]
fn a_dead_primary_is_replaced_by_its_in_sync_secondary() {
    let n = nqn("dead");
    let w = witness();
    let (s, s_srv) = secondary(&n, w.1);
    let p = primary(&n, s_srv.1, w.1);
    in_sync(&p, &s);
    let b = p.mirror.backend();
    b.write(8192, &pattern(1, 16384)).expect("write");
    b.flush().expect("flush");
    assert_eq!(read(&*s.local, 8192, 16384), pattern(1, 16384));
    // While the primary renews, the secondary's requests are refused.
    s.hold("secondary", LEASE * 2, |st| st.role == Role::Secondary);

    // The primary dies (no Release): the secondary takes over once the lease ran out.
    p.mirror.stop();
    let took = s.wait("promotion", LEASE * 2 + Duration::from_secs(1), |st| {
        st.role == Role::Primary
    });
    println!("promoted {took:?} after the primary died (lease {LEASE:?})");
    assert_eq!(s.status().epoch, 2);
    assert_eq!((s.fence.epoch(), s.fence.role()), (2, MirrorRole::Primary));
    assert!(s.events.all().contains(&Ev::Role(Role::Primary, 2)));
    assert_eq!(read(&*s.local, 8192, 16384), pattern(1, 16384));

    // The new primary's peer is gone: with the witness it degrades and goes on.
    let b2 = s.mirror.backend();
    b2.write(0, &pattern(2, 4096)).expect("degraded write");
    let st = s.status();
    assert!(!st.fenced && st.peer != PeerState::InSync, "{st:?}");
    assert!(st.lease_ms_left.is_some_and(|ms| ms > 0), "{st:?}");
    s.mirror.stop();
}

/// A TCP forwarder that can be cut (every connection closed, new ones dropped) and healed.
struct Proxy {
    addr: SocketAddr,
    cut: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Proxy {
    fn new(to: SocketAddr) -> Proxy {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        l.set_nonblocking(true).expect("nonblocking");
        let addr = l.local_addr().expect("addr");
        let (cut, stop) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let (c, s) = (cut.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Acquire) {
                match l.accept() {
                    Ok((a, _)) if !c.load(Ordering::Acquire) => {
                        if let Ok(b) = TcpStream::connect(to) {
                            pump(
                                a.try_clone().expect("clone"),
                                b.try_clone().expect("clone"),
                                &c,
                                &s,
                            );
                            pump(b, a, &c, &s);
                        }
                    }
                    Ok(_) => {}
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Proxy {
            addr,
            cut,
            stop,
            thread: Some(thread),
        }
    }

    fn set_cut(&self, cut: bool) {
        self.cut.store(cut, Ordering::Release);
    }
}

/// Copy `from` → `to` until either closes, or the proxy is cut or stopped (both closed).
fn pump(mut from: TcpStream, mut to: TcpStream, cut: &Arc<AtomicBool>, stop: &Arc<AtomicBool>) {
    let (cut, stop) = (cut.clone(), stop.clone());
    from.set_read_timeout(Some(Duration::from_millis(10)))
        .expect("timeout");
    std::thread::spawn(move || {
        let mut buf = [0u8; 16384];
        loop {
            if cut.load(Ordering::Acquire) || stop.load(Ordering::Acquire) {
                break;
            }
            match from.read(&mut buf) {
                Ok(0) => break,
                Ok(k) => {
                    if to.write_all(&buf[..k]).is_err() {
                        break;
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => break,
            }
        }
        let _ = from.shutdown(std::net::Shutdown::Both);
        let _ = to.shutdown(std::net::Shutdown::Both);
    });
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What an old primary's link would do after the promotion: admit and write at epoch 1.
async fn stale_link_write(addr: SocketAddr, nqn: &str) -> (bool, bool) {
    let cfg = HostConfig {
        hostnqn: LINK.into(),
        io_queues: 1,
        async_events: false,
        ..HostConfig::default()
    };
    let ctrl = Controller::connect(addr, nqn, &cfg).await.expect("link");
    let mut q = ctrl.io_queue(1, 0, false).await.expect("queue");
    let mut sqe = Sqe::new(0, CommandId(0));
    MirrorAdmit {
        nsid: 1,
        epoch: 1,
        in_sync: false,
    }
    .encode_into(&mut sqe);
    let (cqe, _) = ctrl
        .admin_raw(sqe, DataDir::None, Vec::new(), 0)
        .await
        .expect("admit answered");
    let admitted = cqe.status.is_success();
    let wrote = q
        .write(NamespaceId(1), 64, 8, &pattern(9, 4096))
        .await
        .is_ok();
    ctrl.disconnect().await;
    (admitted, wrote)
}

#[test]
fn a_primary_without_its_lease_completes_nothing_and_never_lands_after_a_promotion() {
    let n = nqn("paused");
    let w = witness();
    let proxy = Proxy::new(w.1);
    let (s, s_srv) = secondary(&n, w.1);
    let p = primary(&n, s_srv.1, proxy.addr);
    in_sync(&p, &s);
    let b = p.mirror.backend();
    b.write(0, &pattern(3, 4096)).expect("write");

    // The primary can no longer reach the witness (the secondary can): within its lease it
    // is fenced and completes no write and no flush.
    proxy.set_cut(true);
    let took = p.wait("fenced", LEASE + Duration::from_secs(1), |st| st.fenced);
    println!("fenced {took:?} after the witness became unreachable");
    assert!(p.events.all().ends_with(&[Ev::Fenced(true)]));
    let e = b.write(32768, &pattern(4, 4096)).expect_err("fenced write");
    assert!(ebof_mirror::is_inaccessible(&e), "{e}");
    let e = b.flush().expect_err("fenced flush");
    assert!(ebof_mirror::is_inaccessible(&e), "{e}");
    assert_ne!(read(&*s.local, 32768, 4096), pattern(4, 4096));

    // The witness's lease ran out and the last report was in sync: the secondary takes over.
    s.wait("promotion", LEASE * 2 + Duration::from_secs(2), |st| {
        st.role == Role::Primary
    });
    assert_eq!(s.status().epoch, 2);
    // A write of the old primary's link at epoch 1 is refused by the new primary's fence.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    let (admitted, wrote) = rt.block_on(stale_link_write(s_srv.1, &n));
    assert!(!admitted && !wrote, "admitted {admitted}, wrote {wrote}");
    assert_ne!(read(&*s.local, 32768, 512), pattern(9, 512));

    // The old primary reaches the witness again: refused (another holder), it becomes
    // secondary at its epoch; nothing it writes reaches the new primary.
    proxy.set_cut(false);
    p.wait("demotion", Duration::from_secs(5), |st| {
        st.role == Role::Secondary
    });
    assert!(
        p.events
            .all()
            .ends_with(&[Ev::Role(Role::Secondary, 1), Ev::Fenced(false)]),
        "{:?}",
        p.events.all()
    );
    assert_eq!(p.fence.role(), MirrorRole::Secondary);
    assert!(!p.status().fenced);
    let _ = b.write(65536, &pattern(5, 4096));
    assert_ne!(read(&*s.local, 65536, 4096), pattern(5, 4096));
    p.mirror.stop();
    s.mirror.stop();
}

#[test]
fn a_degraded_primary_completes_alone_and_its_stale_secondary_is_never_promoted() {
    let n = nqn("degraded");
    let w = witness();
    let (s, s_srv) = secondary(&n, w.1);
    let p = primary(&n, s_srv.1, w.1);
    in_sync(&p, &s);
    let b = p.mirror.backend();
    b.write(0, &pattern(6, 4096)).expect("write");

    // The link breaks (both boxes still reach the witness): the write's remote half fails,
    // the primary reports "not in sync", is granted, and completes alone.
    drop(s_srv);
    b.write(4096, &pattern(7, 4096)).expect("degraded write");
    let st = p.status();
    assert_eq!(st.peer, PeerState::Degraded, "{st:?}");
    assert!(!st.fenced && st.dirty_regions >= 1, "{st:?}");
    b.flush().expect("degraded flush");
    let fenced = |e: &Events| e.all().iter().filter(|e| **e == Ev::Fenced(true)).count();
    assert_eq!(fenced(&p.events), 1, "only until the first grant");

    // The primary dies. The secondary believes its copy in sync, but the witness's record
    // says otherwise: it is never promoted.
    p.mirror.stop();
    s.hold("secondary", LEASE * 4, |st| st.role == Role::Secondary);
    assert_eq!(s.fence.synced_at(), 1);
    assert_eq!(s.fence.role(), MirrorRole::Secondary);
    assert_ne!(read(&*s.local, 4096, 4096), pattern(7, 4096));
    s.mirror.stop();
}

#[test]
fn without_a_reachable_witness_only_a_forced_promotion_serves() {
    let n = nqn("nowitness");
    let nowhere: SocketAddr = NOWHERE.parse().expect("addr");
    // A witness that never answers (connections wait in the backlog).
    let mute = TcpListener::bind("127.0.0.1:0").expect("bind");
    let (p, _) = Node::start(
        spec(
            &n,
            nowhere,
            mute.local_addr().expect("addr"),
            Role::Primary,
            1,
        ),
        MirrorRole::None,
    );
    let st = p.status();
    assert!(st.fenced && st.lease_ms_left == Some(0), "{st:?}");
    let e = p
        .mirror
        .backend()
        .write(0, &[1; 512])
        .expect_err("no lease");
    assert!(ebof_mirror::is_inaccessible(&e), "{e}");
    assert_eq!(
        p.events.all(),
        vec![Ev::Role(Role::Primary, 1), Ev::Fenced(true)]
    );
    // Stopping does not wait for the unanswered request.
    std::thread::sleep(LEASE / 4);
    let t = Instant::now();
    p.mirror.stop();
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "{:?}",
        t.elapsed()
    );

    let (s, _) = Node::start(
        spec(&n, nowhere, nowhere, Role::Secondary, 2),
        MirrorRole::Secondary,
    );
    assert!(s.mirror.promote(false).is_err(), "the witness decides");
    s.mirror.promote(true).expect("forced");
    let st = s.status();
    assert!(
        st.role == Role::Primary && !st.fenced && st.epoch == 1,
        "{st:?}"
    );
    // Serves without a lease: the write completes alone (peer gone), and stays so.
    s.mirror
        .backend()
        .write(0, &[2; 512])
        .expect("forced write");
    s.hold("unfenced", LEASE, |st| {
        !st.fenced && st.role == Role::Primary
    });
    assert_eq!(read(&*s.local, 0, 512), vec![2; 512]);
    s.mirror.stop();
}

#[test]
fn a_write_alone_without_the_witness_fails_and_fences() {
    let n = nqn("alone");
    let w = witness();
    let proxy = Proxy::new(w.1);
    let (s, s_srv) = secondary(&n, w.1);
    let p = primary(&n, s_srv.1, proxy.addr);
    in_sync(&p, &s);
    let b = p.mirror.backend();
    // Peer and witness gone at once, our lease still running: the write's remote half
    // fails, the witness cannot take our "not in sync" report, so it must not complete.
    proxy.set_cut(true);
    drop(s_srv);
    assert!(p.status().lease_ms_left.is_some_and(|ms| ms > 0));
    let t = Instant::now();
    let e = b
        .write(4096, &pattern(8, 4096))
        .expect_err("alone, unreported");
    assert!(ebof_mirror::is_inaccessible(&e), "{e}");
    assert!(t.elapsed() <= LEASE + Duration::from_millis(200), "{t:?}");
    let st = p.status();
    assert!(
        st.fenced && st.peer != PeerState::InSync,
        "{st:?} {:?} {:?}",
        p.events.all(),
        t.elapsed()
    );
    assert!(p.events.all().ends_with(&[Ev::Fenced(true)]));
    // The witness is back: a grant (of a not-in-sync report) unfences, writes go on alone.
    proxy.set_cut(false);
    p.wait("unfenced", Duration::from_secs(5), |st| !st.fenced);
    b.write(4096, &pattern(8, 4096)).expect("degraded write");
    p.mirror.stop();
    s.mirror.stop();
}

#[test]
fn a_secondary_never_synced_never_asks_for_the_lease() {
    let n = nqn("unsynced");
    let w = witness();
    // Nobody holds the volume's lease: the witness would grant it to the first asker.
    let (s, _srv) = secondary(&n, w.1);
    s.hold("secondary", LEASE * 2, |st| st.role == Role::Secondary);
    assert_eq!(s.fence.synced_at(), 0);
    assert_eq!(s.events.all(), vec![Ev::Role(Role::Secondary, 0)]);
    s.mirror.stop();
}
