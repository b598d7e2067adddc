//! Mirror Snapshot (CDh) on the target side (ADR 0028, decision 16): from an admitted
//! replication link at the fence's epoch, the namespace's `MirrorSnapshots` takes or deletes
//! the named snapshot; off a link it is Invalid Command Opcode; at another epoch, without a
//! taker, after a promotion, or when the taker fails, Operation Denied; a bad name is refused
//! by the decoder.

mod common;

use common::Host;
use ebof_backend::BackendSpec;
use nvme_spec::ana::AnaState;
use nvme_spec::ebof_vendor::{MirrorAdmit, MirrorSnapshot, OPERATION_DENIED, SnapshotOp, opcode};
use nvme_spec::{CommandId, Sqe, Status};
use nvmf_target::{
    ListenerInfo, MirrorFence, MirrorRole, MirrorSnapshots, Namespace, Subsystem, Target,
};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const NQN: &str = "nqn.2026-11.io.ebof:mirrored";
const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000bb";
const LINK: &str = "nqn.2026-11.io.ebof:mirror-link";

fn port() -> SocketAddr {
    SocketAddr::from(([10, 77, 0, 2], 4420))
}

/// What the fake control plane was asked; fails names starting with "x".
#[derive(Default)]
struct Taker(Mutex<Vec<(SnapshotOp, String)>>);

impl MirrorSnapshots for Taker {
    fn snapshot(&self, op: SnapshotOp, name: &str) -> Result<(), String> {
        if name.starts_with('x') {
            return Err("no".into());
        }
        self.0.lock().unwrap().push((op, name.to_string()));
        Ok(())
    }
}

fn target(taker: Option<Arc<Taker>>) -> (Arc<Target>, Arc<Namespace>, Arc<MirrorFence>) {
    let b = ebof_backend::open(&BackendSpec::Ram { size: 1 << 20 }).unwrap();
    let fence = Arc::new(MirrorFence::new(3, MirrorRole::Secondary));
    if let Some(t) = taker {
        fence.set_snapshots(t);
    }
    let ns = Arc::new(
        Namespace::new(1, b, 512, [1; 16])
            .with_ana_group(1)
            .with_mirror(fence.clone()),
    );
    let sub = Subsystem {
        nqn: NQN.into(),
        serial: "MIR1".into(),
        model: "ebof".into(),
        allow_any_host: true,
        hosts: vec![],
        namespaces: vec![ns.clone()],
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
    t.set_ana_state(port(), 1, AnaState::Inaccessible).unwrap();
    (t, ns, fence)
}

fn connect(t: &Arc<Target>, hostnqn: &str) -> Host {
    let mut a = Host::new(t, port(), NQN, hostnqn);
    let c = a.connect(0, 0xFFFF);
    assert!(c.status.is_success(), "{c:?}");
    a.enable();
    a
}

fn admit(a: &mut Host, epoch: u64) -> Status {
    let mut s = Sqe::new(opcode::MIRROR_ADMIT, CommandId(9));
    MirrorAdmit {
        nsid: 1,
        epoch,
        in_sync: true,
    }
    .encode_into(&mut s);
    a.cmd(s, &[]).0.status
}

fn snap(a: &mut Host, epoch: u64, op: SnapshotOp, name: &str) -> Status {
    let mut s = Sqe::new(0, CommandId(10));
    MirrorSnapshot {
        nsid: 1,
        epoch,
        op,
        name: name.into(),
    }
    .encode_sqe(&mut s);
    s.set_sgl_icd(name.len() as u32);
    a.cmd(s, name.as_bytes()).0.status
}

#[test]
fn a_link_admitted_at_the_epoch_takes_and_deletes_snapshots() {
    let taker = Arc::new(Taker::default());
    let (t, ns, fence) = target(Some(taker.clone()));
    // Off a replication link: not a command of this controller.
    let mut host = connect(&t, HOSTNQN);
    assert_eq!(
        snap(&mut host, 3, SnapshotOp::Take, "s1"),
        Status::INVALID_OPCODE
    );
    let mut link = connect(&t, LINK);
    // Not admitted yet (its replica epoch is 0): denied.
    assert_eq!(snap(&mut link, 3, SnapshotOp::Take, "s1"), OPERATION_DENIED);
    assert!(admit(&mut link, 3).is_success());
    assert_eq!(snap(&mut link, 2, SnapshotOp::Take, "s1"), OPERATION_DENIED);
    assert_eq!(snap(&mut link, 3, SnapshotOp::Take, "s1"), Status::SUCCESS);
    assert_eq!(
        snap(&mut link, 3, SnapshotOp::Delete, "s1"),
        Status::SUCCESS
    );
    // The taker's refusal is the primary's.
    assert_eq!(snap(&mut link, 3, SnapshotOp::Take, "xs"), OPERATION_DENIED);
    // A bad name never reaches the taker.
    let mut s = Sqe::new(0, CommandId(11));
    MirrorSnapshot {
        nsid: 1,
        epoch: 3,
        op: SnapshotOp::Take,
        name: "a".into(),
    }
    .encode_sqe(&mut s);
    s.set_sgl_icd(3);
    assert!(!link.cmd(s, b"../").0.status.is_success());
    assert_eq!(
        *taker.0.lock().unwrap(),
        vec![
            (SnapshotOp::Take, "s1".to_string()),
            (SnapshotOp::Delete, "s1".to_string())
        ]
    );
    // Promoted: the old primary's link is fenced.
    fence.promote(&ns.gate, 4, Duration::from_secs(1)).unwrap();
    assert_eq!(snap(&mut link, 3, SnapshotOp::Take, "s2"), OPERATION_DENIED);
    assert_eq!(taker.0.lock().unwrap().len(), 2);
}

#[test]
fn without_a_taker_a_snapshot_is_denied() {
    let (t, _ns, _fence) = target(None);
    let mut link = connect(&t, LINK);
    assert!(admit(&mut link, 3).is_success());
    assert_eq!(snap(&mut link, 3, SnapshotOp::Take, "s1"), OPERATION_DENIED);
}
