//! Per-namespace QoS through the queue state machine, with no transport and made-up time: a
//! command over the limit is parked (not failed), the queue names its wake-up, and
//! `retry_throttled` releases it then; two queues share one budget; a namespace without limits
//! never holds a command; lifting the limit releases what waits.

mod common;

use common::Host;
use ebof_backend::BackendSpec;
use nvme_spec::opcode::io;
use nvme_spec::{CommandId, NamespaceId, Sqe};
use nvmf_target::qos::QosLimits;
use nvmf_target::{Disposition, Namespace, Subsystem, Target};
use std::sync::Arc;
use std::time::{Duration, Instant};

const NQN: &str = "nqn.2026-11.io.ebof:qos";
const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000a1";

fn target() -> (Arc<Target>, Arc<Namespace>) {
    let b = ebof_backend::open(&BackendSpec::Ram { size: 1 << 20 }).unwrap();
    let ns = Arc::new(Namespace::new(1, b, 512, [1; 16]));
    let sub = Subsystem {
        nqn: NQN.into(),
        serial: "QOS1".into(),
        model: "ebof".into(),
        allow_any_host: true,
        hosts: vec![],
        namespaces: vec![ns.clone()],
        ns_hosts: Default::default(),
    };
    let t = Target::new(vec![sub], vec![], Default::default(), Instant::now());
    (Arc::new(t), ns)
}

/// An admin queue (kept alive) and one connected I/O queue of the same controller.
fn io_queue(t: &Arc<Target>) -> (Host, Host) {
    let local = "10.0.0.1:4420".parse().unwrap();
    let mut admin = Host::new(t, local, NQN, HOST);
    let c = admin.connect(0, 0xFFFF);
    assert!(c.status.is_success(), "{c:?}");
    admin.enable();
    let mut io = Host::new(t, local, NQN, HOST);
    let c = io.connect(1, c.dw0 as u16);
    assert!(c.status.is_success(), "{c:?}");
    (admin, io)
}

fn read(cid: u16) -> Sqe {
    let mut sqe = Sqe::new(io::READ, CommandId(cid));
    sqe.set_nsid(NamespaceId(1));
    sqe.set_slba(0);
    sqe.set_nlb(0);
    sqe.set_sgl_transport(512);
    sqe
}

/// Send `n` reads at `now`: how many may run at once (the others are throttled).
fn burst(h: &mut Host, n: u16, now: Instant, first_cid: u16) -> usize {
    let mut ran = 0;
    for i in 0..n {
        match h.q.handle_command(&read(first_cid + i), &[], now) {
            Disposition::Execute { slot } => {
                h.q.execute_inline(slot);
                ran += 1;
            }
            Disposition::Parked => {}
            d => panic!("unexpected {d:?}"),
        }
    }
    ran
}

#[test]
fn over_the_limit_waits_then_runs() {
    let (t, ns) = target();
    let (_admin, mut h) = io_queue(&t);
    ns.qos.set(QosLimits {
        iops: 1000,
        ..Default::default()
    });
    let t0 = Instant::now();
    // 5 ms of burst credit: about 5 run at once, the other 15 wait.
    let ran = burst(&mut h, 20, t0, 100);
    assert!((4..=6).contains(&ran), "{ran}");
    assert_eq!(h.drain().len(), ran, "only those complete");
    assert!(h.q.has_throttled());
    let wake = h.q.next_wake().expect("a wake-up");
    assert!(
        wake > t0 && wake <= t0 + Duration::from_millis(2),
        "{:?}",
        wake - t0
    );
    // Nothing is released early.
    let mut ready = Vec::new();
    h.q.retry_throttled(t0, &mut ready);
    assert!(ready.is_empty());
    // 20 ms later every one has its token: all released, all succeed.
    h.q.retry_throttled(t0 + Duration::from_millis(20), &mut ready);
    assert_eq!(ready.len(), 20 - ran);
    for s in ready {
        h.q.execute_inline(s);
    }
    let done = h.drain();
    assert_eq!(done.len(), 20 - ran);
    assert!(done.iter().all(|(c, _)| c.status.is_success()));
    assert!(!h.q.has_throttled());
    assert_eq!(h.q.next_wake(), None);
}

#[test]
fn two_queues_share_one_budget() {
    let (t, ns) = target();
    let (_a1, mut h1) = io_queue(&t);
    let (_a2, mut h2) = io_queue(&t);
    ns.qos.set(QosLimits {
        iops: 1000,
        ..Default::default()
    });
    let t0 = Instant::now();
    let ran = burst(&mut h1, 10, t0, 100) + burst(&mut h2, 10, t0, 100);
    // The burst credit is the namespace's, not each queue's.
    assert!((4..=7).contains(&ran), "{ran}");
}

#[test]
fn unlimited_never_holds_and_lifting_releases() {
    let (t, ns) = target();
    let (_admin, mut h) = io_queue(&t);
    let t0 = Instant::now();
    assert_eq!(burst(&mut h, 30, t0, 100), 30);
    h.drain();
    assert_eq!(h.q.next_wake(), None);
    ns.qos.set(QosLimits {
        iops: 10,
        ..Default::default()
    });
    let ran = burst(&mut h, 20, t0, 200);
    assert!(ran <= 2, "{ran}");
    h.drain();
    // Scheduled up to two seconds out; lifted, they go at the next wake-up (a recheck at most
    // 50 ms away).
    ns.qos.set(QosLimits::default());
    let wake = h.q.next_wake().unwrap();
    assert!(wake <= t0 + nvmf_target::qos::RECHECK);
    let mut ready = Vec::new();
    h.q.retry_throttled(wake, &mut ready);
    assert_eq!(ready.len(), 20 - ran);
}

/// The queue's one deadline (`poll_timeout`) names the QoS wake-up, and `handle_timeout` at
/// that instant releases what waits (no separate `next_wake`/`retry_throttled` calls).
#[test]
fn the_one_deadline_covers_the_qos_wake_and_handle_timeout_releases() {
    let (t, ns) = target();
    let (_admin, mut h) = io_queue(&t);
    ns.qos.set(QosLimits {
        iops: 1000,
        ..Default::default()
    });
    let t0 = Instant::now();
    let ran = burst(&mut h, 20, t0, 100);
    assert_eq!(h.drain().len(), ran);
    let wake = h.q.next_wake().expect("a wake-up");
    let deadline = h.q.poll_timeout().expect("a deadline");
    assert!(
        deadline <= wake,
        "the deadline is no later than the QoS wake-up"
    );
    // Drive time only through the pair, as a run loop does.
    let mut released = 0;
    let mut at = deadline;
    for _ in 0..100 {
        let mut ready = Vec::new();
        h.q.handle_timeout(at, &mut ready);
        for s in ready {
            h.q.execute_inline(s);
            released += 1;
        }
        if !h.q.has_throttled() {
            break;
        }
        let next = h.q.poll_timeout().expect("a deadline");
        assert!(next > at, "handle_timeout moved the deadline on");
        at = next;
    }
    assert_eq!(released, 20 - ran, "every throttled command ran");
    assert!(at <= t0 + Duration::from_millis(50), "{:?}", at - t0);
    assert!(h.drain().iter().all(|(c, _)| c.status.is_success()));
    // Nothing throttled: only the periodic timers remain, within one period.
    let last = h.q.poll_timeout().expect("the periodic timers");
    assert!(last > at && last <= at + nvmf_target::TIMER_PERIOD);
}
