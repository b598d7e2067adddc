//! Hosts never give up on a path for good (issue 34): a Connect to a subsystem the target will
//! serve again (removed while running, or expected by the control plane) is refused with DNR
//! clear, so a Linux 6.10+ host retries until its `ctrl_loss_tmo` instead of deleting its
//! controller; an NQN never served keeps DNR. Driven through the queue state machine.

mod common;

use common::Host;
use ebof_backend::BackendSpec;
use nvme_spec::fabrics::{IATTR_CONNECT_DATA, connect_data_off};
use nvme_spec::{Cqe, Status};
use nvmf_target::{Namespace, QueueRole, Subsystem, Target, TargetLimits};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

const NQN: &str = "nqn.2026-11.io.ebof:reconnect";
const OTHER: &str = "nqn.2026-11.io.ebof:other";
const NEVER: &str = "nqn.2026-11.io.ebof:never-served";
const MIRROR: &str = "nqn.2026-11.io.ebof:mirrored";
const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000c3";

fn local() -> SocketAddr {
    SocketAddr::from(([10, 77, 0, 1], 4420))
}

fn subsystem(nqn: &str) -> Subsystem {
    let b = ebof_backend::open(&BackendSpec::Ram { size: 1 << 20 }).unwrap();
    Subsystem {
        nqn: nqn.into(),
        serial: "RECON1".into(),
        model: "ebof".into(),
        allow_any_host: true,
        hosts: vec![],
        namespaces: vec![Arc::new(Namespace::new(1, b, 512, [9; 16]))],
        ns_hosts: Default::default(),
    }
}

fn target() -> Arc<Target> {
    Arc::new(Target::new(
        vec![subsystem(NQN), subsystem(OTHER)],
        vec![],
        TargetLimits::default(),
        Instant::now(),
    ))
}

/// An admin Connect to `subnqn` on a new queue: its completion and the queue's role after.
fn connect(t: &Arc<Target>, subnqn: &str) -> (Cqe, QueueRole) {
    let mut h = Host::new(t, local(), subnqn, HOST);
    let c = h.connect(0, 0xFFFF);
    (c, h.q.role())
}

/// Connect Invalid Parameters at SUBNQN (in the Connect data), with `dnr` as given.
fn assert_refused(c: &Cqe, dnr: bool) {
    assert_eq!(
        c.status,
        Status::CONNECT_INVALID_PARAM.with_dnr(dnr),
        "{c:?}"
    );
    assert_eq!((c.status.sct, c.status.sc), (1, 0x82));
    assert_eq!(
        c.dw0,
        u32::from(connect_data_off::SUBNQN) | IATTR_CONNECT_DATA
    );
}

fn remove(t: &Target, nqn: &str) {
    t.update_table::<()>(|cur| Ok(cur.iter().filter(|s| s.nqn != nqn).cloned().collect()))
        .unwrap();
}

#[test]
fn removed_subsystem_refuses_without_dnr_until_it_is_back() {
    let t = target();
    let mut h = Host::new(&t, local(), NQN, HOST);
    assert!(h.connect(0, 0xFFFF).status.is_success());
    h.enable();
    assert_eq!(t.controller_count(), 1);

    // Never served: DNR, as before.
    let (c, role) = connect(&t, NEVER);
    assert_refused(&c, true);
    assert_eq!(role, QueueRole::Unconnected);
    assert!(!t.will_serve(NEVER) && !t.will_serve(NQN));

    remove(&t, NQN);
    assert_eq!(t.controller_count(), 0, "its controller is torn down");
    assert!(t.will_serve(NQN) && !t.will_serve(OTHER));
    // The host's reconnect: refused, but DNR clear (status 0x182 in Linux's encoding, not
    // 0x4182), so the host retries.
    let (c, role) = connect(&t, NQN);
    assert_refused(&c, false);
    assert_eq!(c.status.to_field() >> 1, 0x0182);
    assert_eq!(role, QueueRole::Unconnected);
    // Again and again: the answer does not change while it is absent.
    for _ in 0..3 {
        assert_refused(&connect(&t, NQN).0, false);
    }
    // The never-served NQN still has DNR; the other subsystem serves on.
    assert_refused(&connect(&t, NEVER).0, true);
    assert!(connect(&t, OTHER).0.status.is_success());

    // Back: the retry connects.
    t.update_table::<()>(|cur| {
        let mut v = cur.to_vec();
        v.push(Arc::new(subsystem(NQN)));
        Ok(v)
    })
    .unwrap();
    let (c, role) = connect(&t, NQN);
    assert!(c.status.is_success(), "{c:?}");
    assert_eq!(role, QueueRole::Admin);
}

#[test]
fn expected_subsystem_refuses_without_dnr() {
    let t = target();
    assert_refused(&connect(&t, MIRROR).0, true);
    t.set_expected_nqns([MIRROR.to_string()]);
    assert_eq!(t.expected_nqns(), [MIRROR]);
    assert_refused(&connect(&t, MIRROR).0, false);
    // No longer expected: DNR again.
    t.set_expected_nqns([]);
    assert_refused(&connect(&t, MIRROR).0, true);
}

#[test]
fn discovery_only_listener_keeps_dnr() {
    let t = target();
    remove(&t, NQN);
    let mut h = Host::new(&t, local(), NQN, HOST);
    h.q.set_discovery_only(true);
    assert_refused(&h.connect(0, 0xFFFF), true);
}

/// An I/O queue Connect naming a controller that ended with its subsystem since the admin
/// Connect (removed under a reconnect): Invalid Parameters at CNTLID with DNR clear, so the host
/// starts over. A CNTLID no controller has for a subsystem in the table, or for one never
/// served, keeps DNR.
#[test]
fn io_connect_to_a_controller_gone_with_its_subsystem_refuses_without_dnr() {
    let t = target();
    let mut h = Host::new(&t, local(), NQN, HOST);
    let c = h.connect(0, 0xFFFF);
    assert!(c.status.is_success());
    let cntlid = (c.dw0 & 0xFFFF) as u16;
    h.enable();
    remove(&t, NQN);
    let mut io = Host::new(&t, local(), NQN, HOST);
    let c = io.connect(1, cntlid);
    assert_eq!(
        c.status,
        Status::CONNECT_INVALID_PARAM.with_dnr(false),
        "{c:?}"
    );
    assert_eq!(
        c.dw0,
        u32::from(connect_data_off::CNTLID) | IATTR_CONNECT_DATA
    );
    for nqn in [OTHER, NEVER] {
        let mut io = Host::new(&t, local(), nqn, HOST);
        assert_eq!(
            io.connect(1, 0x0777).status,
            Status::CONNECT_INVALID_PARAM.with_dnr(true),
            "{nqn}"
        );
    }
}
