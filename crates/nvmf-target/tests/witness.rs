//! Witness Lease (C5h) through the queue state machine: answered on the witness subsystem of a
//! target that is a witness, with the lease table's rules and the queue's clock; refused as an
//! unknown opcode everywhere else; listed in the Commands Supported and Effects log only where
//! it is answered.

mod common;

use common::Host;
use nvme_spec::ebof_vendor::{LeaseOpCode, LeaseReplyDw, WitnessLease, opcode};
use nvme_spec::log::{CmdEffectsLog, effects, lid};
use nvme_spec::opcode::admin;
use nvme_spec::{CommandId, Cqe, Sqe, Status};
use nvmf_target::witness::{LeaseTable, WITNESS_NQN};
use nvmf_target::{ListenerInfo, Namespace, Subsystem, Target};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

const OTHER: &str = "nqn.2026-11.io.ebof:other";
const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000bb";
const MAX: Duration = Duration::from_secs(10);

fn local() -> SocketAddr {
    SocketAddr::from(([10, 77, 0, 9], 4420))
}

fn sub(nqn: &str, namespaces: Vec<Arc<Namespace>>) -> Subsystem {
    Subsystem {
        nqn: nqn.into(),
        serial: "W1".into(),
        model: "ebof".into(),
        allow_any_host: true,
        hosts: vec![],
        namespaces,
        ns_hosts: Default::default(),
    }
}

/// The witness subsystem (no namespace) and another one with a namespace; `t0` is made the
/// table's birth, so it grants from `t0 + MAX`.
fn target(t0: Instant, witness: bool) -> Arc<Target> {
    let b = ebof_backend::open(&ebof_backend::BackendSpec::Ram { size: 1 << 20 }).unwrap();
    let ns = Arc::new(Namespace::new(1, b, 512, [1; 16]));
    let t = Target::new(
        vec![sub(WITNESS_NQN, vec![]), sub(OTHER, vec![ns])],
        vec![ListenerInfo {
            addr: local(),
            portid: 1,
            tls: Default::default(),
            transport: Default::default(),
        }],
        Default::default(),
        t0,
    );
    if witness {
        t.set_witness(Some(LeaseTable::new(t0, MAX)));
    }
    Arc::new(t)
}

fn admin(t: &Arc<Target>, nqn: &str, now: Instant) -> Host {
    let mut h = Host::new(t, local(), nqn, HOSTNQN);
    h.now = now;
    assert!(h.connect(0, 0xFFFF).status.is_success());
    h.enable();
    h
}

fn lease(holder: u8, epoch: u64, op: LeaseOpCode, in_sync: bool) -> WitnessLease {
    WitnessLease {
        volume: [0x42; 16],
        holder: [holder; 16],
        epoch,
        lease_ms: 4000,
        op,
        peer_in_sync: in_sync,
    }
}

fn ask(h: &mut Host, w: &WitnessLease) -> Cqe {
    let mut sqe = Sqe::new(opcode::WITNESS_LEASE, CommandId(9));
    WitnessLease::encode_sqe(&mut sqe);
    sqe.set_sgl_icd(64);
    h.cmd(sqe, &w.encode_data()).0
}

fn granted(c: &Cqe) -> bool {
    assert!(c.status.is_success(), "{c:?}");
    LeaseReplyDw::from_cqe(c).granted
}

fn effects_lists_c5h(h: &mut Host) -> bool {
    let mut sqe = Sqe::new(admin::GET_LOG_PAGE, CommandId(5));
    let len = CmdEffectsLog::LEN as u32;
    sqe.set_cdw(10, u32::from(lid::CMD_EFFECTS) | ((len / 4 - 1) << 16));
    sqe.set_sgl_transport(len);
    let (c, d) = h.cmd(sqe, &[]);
    assert!(c.status.is_success(), "{c:?}");
    let acs = u32::from_le_bytes(d[4 * 0xC5..4 * 0xC5 + 4].try_into().unwrap());
    acs & effects::CSUPP != 0
}

#[test]
fn the_witness_grants_renews_and_refuses_with_its_queue_clock() {
    let t0 = Instant::now();
    let t = target(t0, true);
    let start = t0 + MAX;
    let mut a = admin(&t, WITNESS_NQN, t0);
    let mut b = admin(&t, WITNESS_NQN, t0);
    assert!(effects_lists_c5h(&mut a));
    // grace: the witness just started and remembers nothing
    assert!(!granted(&ask(
        &mut a,
        &lease(1, 1, LeaseOpCode::Acquire, true)
    )));
    a.now = start;
    let c = ask(&mut a, &lease(1, 1, LeaseOpCode::Acquire, true));
    assert!(granted(&c));
    assert_eq!(c.dw1, 4000);
    // another holder while the lease runs: refused, with the time left
    b.now = start + Duration::from_secs(1);
    let c = ask(&mut b, &lease(2, 2, LeaseOpCode::Acquire, true));
    assert!(!granted(&c));
    assert_eq!(c.dw1, 3000);
    // expired, the holder's last report said in sync, higher epoch: taken over
    b.now = start + Duration::from_secs(5);
    assert!(granted(&ask(
        &mut b,
        &lease(2, 2, LeaseOpCode::Acquire, true)
    )));
    // the old holder cannot renew
    a.now = b.now;
    assert!(!granted(&ask(
        &mut a,
        &lease(1, 1, LeaseOpCode::Acquire, true)
    )));
    // query changes nothing
    let q = ask(&mut a, &lease(1, 0, LeaseOpCode::Query, false));
    assert!(!granted(&q));
    assert_eq!(q.dw1, 4000);
}

#[test]
fn a_stale_secondary_is_never_granted_through_the_queue() {
    let t0 = Instant::now();
    let t = target(t0, true);
    let start = t0 + MAX;
    let mut a = admin(&t, WITNESS_NQN, start);
    assert!(granted(&ask(
        &mut a,
        &lease(1, 1, LeaseOpCode::Acquire, true)
    )));
    a.now = start + Duration::from_secs(1);
    assert!(granted(&ask(
        &mut a,
        &lease(1, 1, LeaseOpCode::Acquire, false)
    )));
    let mut b = admin(&t, WITNESS_NQN, start + Duration::from_secs(60));
    assert!(!granted(&ask(
        &mut b,
        &lease(2, 2, LeaseOpCode::Acquire, true)
    )));
}

#[test]
fn malformed_leases_are_invalid_field() {
    let t0 = Instant::now();
    let t = target(t0, true);
    let mut a = admin(&t, WITNESS_NQN, t0 + MAX);
    let mut w = lease(1, 1, LeaseOpCode::Acquire, true);
    w.lease_ms = 0;
    assert_eq!(ask(&mut a, &w).status, Status::INVALID_FIELD);
    // a reserved CDW set
    let mut sqe = Sqe::new(opcode::WITNESS_LEASE, CommandId(9));
    sqe.set_cdw(12, 1);
    sqe.set_sgl_icd(64);
    let good = lease(1, 1, LeaseOpCode::Acquire, true).encode_data();
    assert_eq!(a.cmd(sqe, &good).0.status, Status::INVALID_FIELD);
    // the wrong length never reaches the decoder
    let mut sqe = Sqe::new(opcode::WITNESS_LEASE, CommandId(9));
    sqe.set_sgl_icd(32);
    assert!(!a.cmd(sqe, &good[..32]).0.status.is_success());
    // nothing was granted by those
    let mut b = admin(&t, WITNESS_NQN, t0 + MAX);
    assert!(granted(&ask(
        &mut b,
        &lease(2, 1, LeaseOpCode::Acquire, true)
    )));
}

#[test]
fn elsewhere_the_opcode_does_not_exist() {
    let t0 = Instant::now();
    let w = lease(1, 1, LeaseOpCode::Acquire, true);
    // another subsystem of a witness
    let t = target(t0, true);
    let mut o = admin(&t, OTHER, t0 + MAX);
    assert_eq!(ask(&mut o, &w).status, Status::INVALID_OPCODE);
    assert!(!effects_lists_c5h(&mut o));
    // the witness NQN on a box that is no witness
    let t = target(t0, false);
    let mut n = admin(&t, WITNESS_NQN, t0 + MAX);
    assert_eq!(ask(&mut n, &w).status, Status::INVALID_OPCODE);
    assert!(!effects_lists_c5h(&mut n));
    // and a witness that stops being one
    let t = target(t0, true);
    let mut a = admin(&t, WITNESS_NQN, t0 + MAX);
    assert!(granted(&ask(&mut a, &w)));
    t.set_witness(None);
    assert!(!t.is_witness());
    assert_eq!(ask(&mut a, &w).status, Status::INVALID_OPCODE);
}
