//! Replicated reservations on the target side (ADR 0028): Mirror Reservations (C9h) from an
//! admitted replication link replaces a secondary's reservation table (persisted when PTPL is
//! on), is refused off a link, at another epoch and after a promotion; once promoted, the
//! table the primary pushed governs host I/O, keyed by the host identifier (not the
//! controller, whose ID differs on each box).

mod common;

use common::Host;
use ebof_backend::BackendSpec;
use nvme_spec::ana::AnaState;
use nvme_spec::ebof_vendor::{MirrorAdmit, MirrorResv, OPERATION_DENIED, ResvImage, opcode};
use nvme_spec::opcode::io;
use nvme_spec::resv::{ResvStatusExt, rtype};
use nvme_spec::{CommandId, Sqe, Status};
use nvmf_target::reservation::{FileStore, NsReservations, ResvTable};
use nvmf_target::{ListenerInfo, MirrorFence, MirrorRole, Namespace, Subsystem, Target};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

const NQN: &str = "nqn.2026-11.io.ebof:mirrored";
const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000bb";
const OTHER: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000cc";
const LINK: &str = "nqn.2026-11.io.ebof:mirror-link";
const HOLDER: [u8; 16] = [0x11; 16];
const KEY: u64 = 0xABCD;

fn port() -> SocketAddr {
    SocketAddr::from(([10, 77, 0, 2], 4420))
}

/// NSID 1 mirrored (group 1, secondary at epoch 3, PTPL capable through a file in `dir`),
/// NSID 2 plain.
fn target(dir: &std::path::Path) -> (Arc<Target>, Arc<Namespace>, Arc<MirrorFence>) {
    let b = || ebof_backend::open(&BackendSpec::Ram { size: 1 << 20 }).unwrap();
    let fence = Arc::new(MirrorFence::new(3, MirrorRole::Secondary));
    let store = Arc::new(FileStore::new(dir.join("resv")));
    let ns1 = Arc::new(
        Namespace::new(1, b(), 512, [1; 16])
            .with_ana_group(1)
            .with_mirror(fence.clone())
            .with_reservations(NsReservations::with_store(store, ResvTable::default())),
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
    t.set_ana_state(port(), 1, AnaState::Inaccessible).unwrap();
    (t, ns1, fence)
}

fn connect(t: &Arc<Target>, hostnqn: &str, hostid: [u8; 16]) -> (Host, Host) {
    let mut a = Host::new(t, port(), NQN, hostnqn);
    a.hostid = hostid;
    let c = a.connect(0, 0xFFFF);
    assert!(c.status.is_success(), "{c:?}");
    a.enable();
    let mut q = Host::new(t, port(), NQN, hostnqn);
    q.hostid = hostid;
    assert!(q.connect(1, c.dw0 as u16).status.is_success());
    (a, q)
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

fn push(a: &mut Host, nsid: u32, epoch: u64, data: &[u8]) -> Status {
    let mut s = Sqe::new(0, CommandId(10));
    MirrorResv::encode_sqe(nsid, epoch, &mut s);
    s.set_sgl_icd(data.len() as u32);
    a.cmd(s, data).0.status
}

/// HOLDER registered with KEY and holding Write Exclusive, one other registrant, PTPL on.
fn table() -> ResvTable {
    ResvTable::from_image(ResvImage {
        generation: 7,
        ptpl: true,
        reservation: Some((rtype::WRITE_EXCLUSIVE, HOLDER)),
        regs: vec![(HOLDER, KEY), ([0x22; 16], 5)],
    })
}

fn report(q: &mut Host) -> ResvStatusExt {
    let mut s = Sqe::new(io::RESV_REPORT, CommandId(11));
    s.set_nsid(nvme_spec::NamespaceId(1));
    s.set_cdw(10, 4096 / 4 - 1);
    s.set_cdw(11, 1);
    s.set_sgl_transport(4096);
    let (c, d) = q.cmd(s, &[]);
    assert!(c.status.is_success(), "{c:?}");
    ResvStatusExt::decode(&d).unwrap()
}

#[test]
fn pushed_table_survives_promotion_and_governs_io() {
    let dir = tempfile::tempdir().unwrap();
    let (t, ns, fence) = target(dir.path());
    let (mut la, _lq) = connect(&t, LINK, [9; 16]);
    let img = table().to_image().encode();
    // Not admitted yet (its replica epoch is 0): refused.
    assert_eq!(push(&mut la, 1, 3, &img), OPERATION_DENIED);
    assert!(admit(&mut la, 3).is_success());
    assert_eq!(push(&mut la, 1, 3, &img), Status::SUCCESS);
    assert_eq!(ns.resv.snapshot(), table());
    // PTPL on: persisted through the namespace's store.
    let saved = FileStore::load(&dir.path().join("resv")).unwrap().unwrap();
    assert_eq!(saved, table());
    // The same again is a no-op; a newer table replaces it whole.
    assert_eq!(push(&mut la, 1, 3, &img), Status::SUCCESS);
    let mut next = table();
    next.regs.pop();
    next.generation += 1;
    assert_eq!(
        push(&mut la, 1, 3, &next.to_image().encode()),
        Status::SUCCESS
    );
    assert_eq!(ns.resv.snapshot(), next);

    // Promotion: the box serves hosts with the table its old primary pushed.
    ns.promote_mirror(4, Duration::from_secs(5)).unwrap();
    t.set_ana_state(port(), 1, AnaState::Optimized).unwrap();
    assert_eq!(push(&mut la, 1, 3, &img), OPERATION_DENIED, "stale link");
    assert_eq!(push(&mut la, 1, 4, &img), OPERATION_DENIED, "primary now");
    // The holder reconnects here with its host ID (a controller ID of this box's range).
    let (_ha, mut hq) = connect(&t, HOSTNQN, HOLDER);
    let r = report(&mut hq);
    assert_eq!((r.generation, r.rtype), (8, rtype::WRITE_EXCLUSIVE));
    assert_eq!(r.regs.len(), 1);
    assert_eq!((r.regs[0].hostid, r.regs[0].rkey), (HOLDER, KEY));
    assert!(r.regs[0].holds);
    assert_eq!(r.regs[0].cntlid, 0xFFFF, "no controller ID across boxes");
    assert_eq!(hq.rw(io::WRITE, 1), Status::SUCCESS);
    let (_oa, mut oq) = connect(&t, OTHER, [0x33; 16]);
    assert_eq!(oq.rw(io::WRITE, 1), Status::RESERVATION_CONFLICT);
    assert_eq!(oq.rw(io::READ, 1), Status::SUCCESS);
    assert_eq!(fence.epoch(), 4);
}

#[test]
fn mirror_resv_refusals() {
    let dir = tempfile::tempdir().unwrap();
    let (t, ns, _fence) = target(dir.path());
    let img = table().to_image().encode();
    // Off a replication link: an opcode the controller does not know.
    let (mut ha, _hq) = connect(&t, HOSTNQN, HOLDER);
    assert_eq!(push(&mut ha, 1, 3, &img), Status::INVALID_OPCODE);
    let (mut la, _lq) = connect(&t, LINK, [9; 16]);
    assert!(admit(&mut la, 3).is_success());
    // Another epoch than the link's, a namespace that is not mirrored.
    assert_eq!(push(&mut la, 1, 4, &img), OPERATION_DENIED);
    assert_eq!(push(&mut la, 1, 2, &img), OPERATION_DENIED);
    assert_eq!(push(&mut la, 2, 3, &img), OPERATION_DENIED);
    // A table no reservation table can be: the holder is not registered.
    let mut bad = img.clone();
    bad[8] = 0x77;
    assert_eq!(push(&mut la, 1, 3, &bad), Status::INVALID_FIELD);
    // A truncated image, a reserved dword.
    assert_eq!(
        push(&mut la, 1, 3, &img[..img.len() - 1]),
        Status::SGL_INVALID_DATA
    );
    let mut s = Sqe::new(0, CommandId(10));
    MirrorResv::encode_sqe(1, 3, &mut s);
    s.set_cdw(13, 1);
    s.set_sgl_icd(img.len() as u32);
    assert_eq!(la.cmd(s, &img).0.status, Status::INVALID_FIELD);
    assert_eq!(ns.resv.snapshot(), ResvTable::default(), "nothing changed");
    // Listed in the Commands Supported and Effects log of a link only.
    let mut s = Sqe::new(nvme_spec::opcode::admin::GET_LOG_PAGE, CommandId(12));
    s.set_cdw(
        10,
        u32::from(nvme_spec::log::lid::CMD_EFFECTS) | ((4096 / 4 - 1) << 16),
    );
    s.set_sgl_transport(4096);
    let acs = |h: &mut Host| {
        let (c, d) = h.cmd(s, &[]);
        assert!(c.status.is_success());
        u32::from_le_bytes(d[4 * 0xC9..4 * 0xC9 + 4].try_into().unwrap())
    };
    assert_eq!(acs(&mut la) & 1, 1);
    assert_eq!(acs(&mut ha) & 1, 0);
}
