//! Replicated volumes on the target side (ADR 0028), through the queue state machine with no
//! transport: replica-link sessions fenced by the namespace's `MirrorFence` instead of ANA,
//! Mirror Admit (C1h) and its refusals, a promotion that drains in-flight replica writes.

mod common;

use common::Host;
use ebof_backend::BackendSpec;
use nvme_spec::ana::AnaState;
use nvme_spec::ebof_vendor::{AdmitReply, MirrorAdmit, OPERATION_DENIED, opcode};
use nvme_spec::opcode::io;
use nvme_spec::{CommandId, Sqe, Status};
use nvmf_target::{
    Disposition, ListenerInfo, MirrorFence, MirrorRole, Namespace, Subsystem, Target,
};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

const NQN: &str = "nqn.2026-11.io.ebof:mirrored";
const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000bb";
const LINK: &str = "nqn.2026-11.io.ebof:mirror-link";

fn port() -> SocketAddr {
    SocketAddr::from(([10, 77, 0, 2], 4420))
}

/// NSID 1 mirrored (group 1, secondary at epoch 3, inaccessible to hosts), NSID 2 plain
/// (group 2). Returns the target, namespace 1 and its fence.
fn target() -> (Arc<Target>, Arc<Namespace>, Arc<MirrorFence>) {
    let b = || ebof_backend::open(&BackendSpec::Ram { size: 1 << 20 }).unwrap();
    let fence = Arc::new(MirrorFence::new(3, MirrorRole::Secondary));
    let ns1 = Arc::new(
        Namespace::new(1, b(), 512, [1; 16])
            .with_ana_group(1)
            .with_mirror(fence.clone()),
    );
    let ns2 = Arc::new(Namespace::new(2, b(), 512, [2; 16]).with_ana_group(2));
    let sub = Subsystem {
        nqn: NQN.into(),
        serial: "MIR1".into(),
        model: "ebof".into(),
        allow_any_host: true,
        hosts: vec![],
        namespaces: vec![ns1.clone(), ns2],
        ns_hosts: Default::default(),
    };
    let listeners = vec![ListenerInfo {
        addr: port(),
        portid: 1,
        tls: Default::default(),
        transport: Default::default(),
    }];
    let t = Arc::new(Target::new(
        vec![sub],
        listeners,
        Default::default(),
        Instant::now(),
    ));
    t.set_mirror_link_nqn(Some(LINK.into()));
    assert_eq!(t.mirror_link_nqn().as_deref(), Some(LINK));
    t.set_ana_state(port(), 1, AnaState::Inaccessible).unwrap();
    (t, ns1, fence)
}

/// An admin queue (enabled) and one I/O queue of host `hostnqn`.
fn connect(t: &Arc<Target>, hostnqn: &str) -> (Host, Host) {
    let mut a = Host::new(t, port(), NQN, hostnqn);
    let c = a.connect(0, 0xFFFF);
    assert!(c.status.is_success(), "{c:?}");
    a.enable();
    let mut q = Host::new(t, port(), NQN, hostnqn);
    assert!(q.connect(1, c.dw0 as u16).status.is_success());
    (a, q)
}

fn admit_sqe(nsid: u32, epoch: u64, in_sync: bool) -> Sqe {
    let mut s = Sqe::new(opcode::MIRROR_ADMIT, CommandId(9));
    MirrorAdmit {
        nsid,
        epoch,
        in_sync,
    }
    .encode_into(&mut s);
    s
}

fn admit(a: &mut Host, nsid: u32, epoch: u64, in_sync: bool) -> (Status, AdmitReply) {
    let (c, _) = a.cmd(admit_sqe(nsid, epoch, in_sync), &[]);
    (c.status, AdmitReply::from_cqe(&c))
}

#[test]
fn replica_link_bypasses_ana_only_once_admitted() {
    let (t, _ns, fence) = target();
    let (mut la, mut lq) = connect(&t, LINK);
    // Not admitted yet: its epoch is 0.
    assert_eq!(lq.rw(io::WRITE, 1), OPERATION_DENIED);
    let (s, r) = admit(&mut la, 1, 3, false);
    assert!(s.is_success(), "{s:?}");
    assert_eq!(
        r,
        AdmitReply {
            synced: false,
            synced_epoch_lo: 0
        }
    );
    for op in [io::WRITE, io::READ, io::FLUSH, io::WRITE_ZEROES] {
        assert_eq!(lq.rw(op, 1), Status::SUCCESS, "op {op:#x}");
    }
    // Not a mirrored namespace: the link may not touch it.
    assert_eq!(lq.rw(io::WRITE, 2), OPERATION_DENIED);
    // Ordinary hosts still see the secondary's path inaccessible.
    let (_ha, mut hq) = connect(&t, HOSTNQN);
    assert_eq!(hq.rw(io::WRITE, 1), Status::ANA_INACCESSIBLE);
    assert_eq!(hq.rw(io::READ, 1), Status::ANA_INACCESSIBLE);
    assert_eq!(hq.rw(io::WRITE, 2), Status::SUCCESS);
    // A newer primary admitted on another link: this one's epoch is stale.
    let (mut la2, _lq2) = connect(&t, LINK);
    let (s, r) = admit(&mut la2, 1, 4, true);
    assert!(s.is_success());
    assert_eq!(
        r,
        AdmitReply {
            synced: true,
            synced_epoch_lo: 4
        }
    );
    assert_eq!((fence.epoch(), fence.synced_at()), (4, 4));
    assert_eq!(lq.rw(io::WRITE, 1), OPERATION_DENIED);
}

#[test]
fn mirror_admit_refusals() {
    let (t, _ns, fence) = target();
    // Not a replication link: an opcode it does not know.
    let (mut ha, _hq) = connect(&t, HOSTNQN);
    assert_eq!(admit(&mut ha, 1, 3, false).0, Status::INVALID_OPCODE);
    let (mut la, _lq) = connect(&t, LINK);
    // Older than the fence.
    assert_eq!(admit(&mut la, 1, 2, false).0, OPERATION_DENIED);
    // Not mirrored, no such namespace.
    assert_eq!(admit(&mut la, 2, 3, false).0, OPERATION_DENIED);
    assert_eq!(admit(&mut la, 9, 3, false).0, OPERATION_DENIED);
    // Reserved bits, NSID 0.
    let mut s = admit_sqe(1, 3, false);
    s.set_cdw(13, 1);
    assert_eq!(la.cmd(s, &[]).0.status, Status::INVALID_FIELD);
    assert_eq!(
        la.cmd(admit_sqe(0, 3, false), &[]).0.status,
        Status::INVALID_NS
    );
    // A primary admits nothing.
    fence.set_role(MirrorRole::Primary);
    assert_eq!(admit(&mut la, 1, 3, false).0, OPERATION_DENIED);
    fence.demote();
    assert!(admit(&mut la, 1, 3, false).0.is_success());
    assert_eq!(fence.epoch(), 3);
}

#[test]
fn promote_waits_for_an_in_flight_replica_write() {
    let (t, ns, fence) = target();
    let (mut la, mut lq) = connect(&t, LINK);
    assert!(admit(&mut la, 1, 3, true).0.is_success());
    // A replica write inside the gate, not executed yet.
    let mut sqe = Sqe::new(io::WRITE, CommandId(11));
    sqe.set_nsid(nvme_spec::NamespaceId(1));
    sqe.set_nlb(1);
    sqe.set_sgl_icd(512);
    let slot = match lq.q.handle_command(&sqe, &[0x5A; 512], lq.now) {
        Disposition::Execute { slot } => slot,
        d => panic!("unexpected {d:?}"),
    };
    let (n2, f2) = (ns.clone(), fence.clone());
    let p = std::thread::spawn(move || n2.promote_mirror(4, Duration::from_secs(10)));
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        fence.epoch(),
        3,
        "the promotion waits for the write in the gate"
    );
    assert!(!p.is_finished());
    lq.q.execute_inline(slot);
    let done = lq.drain();
    assert_eq!(done.len(), 1);
    assert!(done[0].0.status.is_success(), "{:?}", done[0].0);
    p.join().unwrap().unwrap();
    assert_eq!((f2.epoch(), f2.role()), (4, MirrorRole::Primary));
    // The old link is fenced off, and a primary admits no link.
    assert_eq!(lq.rw(io::WRITE, 1), OPERATION_DENIED);
    assert_eq!(admit(&mut la, 1, 4, false).0, OPERATION_DENIED);
    let mut buf = [0u8; 512];
    ns.backend.read(0, &mut buf).unwrap();
    assert_eq!(buf, [0x5A; 512]);
}

#[test]
fn effects_log_lists_mirror_admit_on_links() {
    use nvme_spec::log::lid;
    let (t, _ns, _fence) = target();
    let effects = |a: &mut Host| {
        let mut sqe = Sqe::new(nvme_spec::opcode::admin::GET_LOG_PAGE, CommandId(5));
        sqe.set_cdw(10, u32::from(lid::CMD_EFFECTS) | ((4096 / 4 - 1) << 16));
        sqe.set_sgl_transport(4096);
        let (c, d) = a.cmd(sqe, &[]);
        assert!(c.status.is_success(), "{c:?}");
        u32::from_le_bytes(d[4 * 0xC1..4 * 0xC1 + 4].try_into().unwrap())
    };
    let (mut la, _lq) = connect(&t, LINK);
    assert_eq!(effects(&mut la) & 1, 1);
    let (mut ha, _hq) = connect(&t, HOSTNQN);
    assert_eq!(effects(&mut ha), 0);
}
