//! ANA through the queue state machine, with no transport: Identify fields, the ANA log page
//! (RGO, windows), the status of I/O per state, and the ANA Change event with its mask.

mod common;

use ebof_backend::BackendSpec;
use nvme_spec::ana::{AnaLog, AnaState, LSP_RGO};
use nvme_spec::identify::{
    IdentifyController, IdentifyNamespace, IdentifyNamespaceCsIndep, cmic, cns, oaes,
};
use nvme_spec::log::{aen, lid};
use nvme_spec::opcode::{admin, feature, io};
use nvme_spec::{CommandId, Sqe, Status};
use nvmf_target::{ListenerInfo, Namespace, Subsystem, Target};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

const NQN: &str = "nqn.2026-11.io.ebof:ana";
const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000aa";

fn port(p: u16) -> SocketAddr {
    SocketAddr::from(([10, 77, 0, 1], p))
}

/// One subsystem on two listeners; namespace 1 in group 1, namespaces 2 and 3 in group 2.
fn target() -> Arc<Target> {
    let ns = |nsid: u32, g: u32| {
        let b = ebof_backend::open(&BackendSpec::Ram { size: 1 << 20 }).unwrap();
        Arc::new(Namespace::new(nsid, b, 512, [nsid as u8; 16]).with_ana_group(g))
    };
    let sub = Subsystem {
        nqn: NQN.into(),
        serial: "ANA1".into(),
        model: "ebof".into(),
        allow_any_host: true,
        hosts: vec![],
        namespaces: vec![ns(1, 1), ns(2, 2), ns(3, 2)],
        ns_hosts: Default::default(),
    };
    let listeners = vec![
        ListenerInfo {
            addr: port(4420),
            portid: 1,
            tls: Default::default(),
            transport: Default::default(),
        },
        ListenerInfo {
            addr: port(4421),
            portid: 2,
            tls: Default::default(),
            transport: Default::default(),
        },
    ];
    Arc::new(Target::new(
        vec![sub],
        listeners,
        Default::default(),
        Instant::now(),
    ))
}

use common::Host;

impl Host {
    /// Admin queue connected and enabled, ANA notices on; returns the controller id.
    fn admin(t: &Arc<Target>, local: SocketAddr) -> (Host, u16) {
        let mut h = Host::new(t, local, NQN, HOSTNQN);
        let c = h.connect(0, 0xFFFF);
        assert!(c.status.is_success(), "{c:?}");
        h.enable();
        let mut sqe = Sqe::new(admin::SET_FEATURES, CommandId(3));
        sqe.set_cdw(10, u32::from(feature::ASYNC_EVENT));
        sqe.set_cdw(11, aen::CFG_ANA_CHANGE | aen::CFG_NS_ATTR);
        assert!(h.cmd(sqe, &[]).0.status.is_success());
        (h, c.dw0 as u16)
    }

    fn io(t: &Arc<Target>, local: SocketAddr, cntlid: u16) -> Host {
        let mut h = Host::new(t, local, NQN, HOSTNQN);
        let c = h.connect(1, cntlid);
        assert!(c.status.is_success(), "{c:?}");
        h
    }

    /// Identify that must succeed: its data.
    fn identify_ok(&mut self, cns_v: u8, nsid: u32) -> Vec<u8> {
        let (s, d) = self.identify(cns_v, nsid);
        assert!(s.is_success(), "{s:?}");
        d
    }

    fn ana_log(&mut self, len: u32, offset: u64, rgo: bool, rae: bool) -> Vec<u8> {
        let mut sqe = Sqe::new(admin::GET_LOG_PAGE, CommandId(5));
        let mut cdw10 = u32::from(lid::ANA) | ((len / 4 - 1) << 16);
        if rgo {
            cdw10 |= LSP_RGO;
        }
        if rae {
            cdw10 |= aen::RAE;
        }
        sqe.set_cdw(10, cdw10);
        sqe.set_cdw(12, offset as u32);
        sqe.set_cdw(13, (offset >> 32) as u32);
        sqe.set_sgl_transport(len);
        let (c, d) = self.cmd(sqe, &[]);
        assert!(c.status.is_success(), "{c:?}");
        assert_eq!(d.len(), len as usize);
        d
    }
}

#[test]
fn identify_reports_ana() {
    let t = target();
    let (mut a, _) = Host::admin(&t, port(4420));
    let id = IdentifyController::decode(&a.identify_ok(cns::CTRL, 0)).unwrap();
    assert_eq!(
        id.cmic & (cmic::MULTI_PORT | cmic::MULTI_CTRL | cmic::ANA),
        cmic::MULTI_PORT | cmic::MULTI_CTRL | cmic::ANA
    );
    assert_eq!(id.anacap, 0x5F, "all five states, ANAGRPID static");
    assert_eq!(id.anatt, 10);
    assert_eq!(id.anagrpmax, nvmf_target::ana::MAX_GROUPS);
    assert_eq!(id.nanagrpid, nvmf_target::ana::MAX_GROUPS);
    // What a Linux host checks before it turns ANA on (nvme_mpath_init_identify): its ANA
    // log buffer, sized from NANAGRPID and MNAN, within MDTS.
    let mdts = 4096usize << id.mdts;
    let log = 16 + id.nanagrpid as usize * 32 + id.mnan as usize * 4;
    assert!(
        log <= mdts,
        "ANA log buffer {log} > MDTS {mdts}: Linux disables ANA"
    );
    assert_ne!(id.oaes & oaes::ANA_CHANGE, 0);
    // Linux refuses ANA unless 0 < MNAN <= NN.
    assert!(id.mnan > 0 && id.mnan <= id.nn, "{} {}", id.mnan, id.nn);
    for (nsid, g) in [(1, 1), (2, 2), (3, 2)] {
        let ns = IdentifyNamespace::decode(&a.identify_ok(cns::NS, nsid)).unwrap();
        assert_eq!(ns.anagrpid, g);
        assert_eq!(ns.nmic & 1, 1, "shared");
        let ind = IdentifyNamespaceCsIndep::decode(&a.identify_ok(cns::CS_INDEP_NS, nsid)).unwrap();
        assert_eq!(ind.anagrpid, g);
    }
}

#[test]
fn log_page_per_port_with_rgo_and_windows() {
    let t = target();
    t.set_ana_state(port(4421), 2, AnaState::Inaccessible)
        .unwrap();
    let (mut a, _) = Host::admin(&t, port(4420));
    let (mut b, _) = Host::admin(&t, port(4421));
    let full = a.ana_log(4096, 0, false, false);
    let la = AnaLog::decode(&full).unwrap();
    assert_eq!(la.chgcnt, 1);
    assert_eq!(la.groups.len(), 2);
    assert_eq!(
        (la.groups[0].grpid, la.groups[0].state),
        (1, AnaState::Optimized)
    );
    assert_eq!(la.groups[0].nsids, vec![1]);
    assert_eq!(
        (la.groups[1].grpid, la.groups[1].state),
        (2, AnaState::Optimized)
    );
    assert_eq!(la.groups[1].nsids, vec![2, 3]);
    // Zero padding after the page.
    assert!(full[16 + 32 + 4 + 32 + 8..].iter().all(|&x| x == 0));
    let lb = AnaLog::decode(&b.ana_log(4096, 0, false, false)).unwrap();
    assert_eq!(lb.groups[1].state, AnaState::Inaccessible);
    assert_eq!(lb.groups[1].chgcnt, 1);
    assert_eq!(lb.groups[0].state, AnaState::Optimized);
    // RGO: the descriptors without NSIDs.
    let rgo = b.ana_log(4096, 0, true, false);
    let lr = AnaLog::decode(&rgo).unwrap();
    assert_eq!(lr.groups.len(), 2);
    assert!(lr.groups.iter().all(|g| g.nsids.is_empty()));
    assert_eq!(lr.groups[1].state, AnaState::Inaccessible);
    assert!(rgo[16 + 64..].iter().all(|&x| x == 0));
    // Windows: a host reading in pieces gets the same bytes.
    let mut pieces = a.ana_log(20, 0, false, false);
    pieces.extend(a.ana_log(40, 20, false, false));
    pieces.extend(a.ana_log(36, 60, false, false));
    assert_eq!(pieces, full[..96]);
    assert!(a.ana_log(8, 1 << 20, false, false).iter().all(|&x| x == 0));
}

#[test]
fn io_fails_with_the_path_status_of_its_group() {
    let t = target();
    let (_a, cntlid) = Host::admin(&t, port(4420));
    let mut q = Host::io(&t, port(4420), cntlid);
    let (_b, cntlid_b) = Host::admin(&t, port(4421));
    let mut other = Host::io(&t, port(4421), cntlid_b);
    for op in [io::WRITE, io::READ, io::FLUSH, io::WRITE_ZEROES] {
        assert_eq!(q.rw(op, 2), Status::SUCCESS, "{op:#x}");
    }
    for (state, want) in [
        (AnaState::NonOptimized, Status::SUCCESS),
        (AnaState::Inaccessible, Status::ANA_INACCESSIBLE),
        (AnaState::PersistentLoss, Status::ANA_PERSISTENT_LOSS),
        (AnaState::Change, Status::ANA_TRANSITION),
        (AnaState::Optimized, Status::SUCCESS),
    ] {
        assert!(t.set_ana_state(port(4420), 2, state).unwrap());
        for op in [io::WRITE, io::READ, io::FLUSH, io::WRITE_ZEROES] {
            let got = q.rw(op, 2);
            assert_eq!(got, want, "{state} op {op:#x}");
            assert!(!got.dnr, "the host must be free to retry elsewhere");
            assert_eq!(q.rw(op, 3), want, "same group");
            assert_eq!(q.rw(op, 1), Status::SUCCESS, "group 1 unaffected");
            assert_eq!(other.rw(op, 2), Status::SUCCESS, "other path unaffected");
        }
    }
    // Flush of every namespace touches group 2 too.
    t.set_ana_state(port(4420), 2, AnaState::Inaccessible)
        .unwrap();
    assert_eq!(q.rw(io::FLUSH, u32::MAX), Status::ANA_INACCESSIBLE);
    assert_eq!(other.rw(io::FLUSH, u32::MAX), Status::SUCCESS);
}

/// A path whose controller was torn down (listener removed with its controllers) fails the
/// commands still arriving on its I/O queue with a path status, DNR clear: the Linux host
/// retries them on the other path instead of reporting an I/O error.
#[test]
fn io_on_a_torn_down_controller_fails_over() {
    let t = target();
    let (_a, cntlid) = Host::admin(&t, port(4420));
    let mut q = Host::io(&t, port(4420), cntlid);
    assert_eq!(q.rw(io::WRITE, 1), Status::SUCCESS);
    t.controller(cntlid).unwrap().kill();
    assert!(q.q.should_close());
    for op in [io::WRITE, io::READ, io::FLUSH] {
        let got = q.rw(op, 1);
        assert_eq!(got, Status::CONTROLLER_PATHING_ERROR, "{op:#x}");
        assert!(!got.dnr, "the host must be free to retry elsewhere");
    }
}

#[test]
fn inaccessible_write_leaves_the_media_alone() {
    let t = target();
    let (_a, cntlid) = Host::admin(&t, port(4420));
    let mut q = Host::io(&t, port(4420), cntlid);
    t.set_ana_state(port(4420), 2, AnaState::Inaccessible)
        .unwrap();
    assert_eq!(q.rw(io::WRITE, 2), Status::ANA_INACCESSIBLE);
    let ns = t.subsystem(NQN).unwrap().namespace(2).unwrap().clone();
    let mut buf = vec![0xFFu8; 512];
    ns.backend.read(0, &mut buf).unwrap();
    assert!(buf.iter().all(|&b| b == 0));
}

#[test]
fn change_event_reaches_the_port_and_waits_for_the_log() {
    let t = target();
    let (mut a, _) = Host::admin(&t, port(4420));
    let (mut b, _) = Host::admin(&t, port(4421));
    assert_eq!(a.aer(), None);
    assert_eq!(b.aer(), None);
    let want = aen::result(aen::TYPE_NOTICE, aen::NOTICE_ANA_CHANGE, lid::ANA);
    // A group with no namespace of the subsystem: nothing to tell.
    assert!(
        t.set_ana_state(port(4421), 7, AnaState::Inaccessible)
            .unwrap()
    );
    assert!(b.events().is_empty());
    t.set_ana_state(port(4421), 2, AnaState::Inaccessible)
        .unwrap();
    assert!(a.events().is_empty(), "other port");
    assert_eq!(b.events(), vec![want]);
    // Masked until the log is read without RAE.
    assert_eq!(b.aer(), None);
    t.set_ana_state(port(4421), 2, AnaState::Change).unwrap();
    assert!(b.events().is_empty());
    b.ana_log(4096, 0, false, true);
    t.set_ana_state(port(4421), 2, AnaState::Optimized).unwrap();
    assert!(b.events().is_empty(), "RAE keeps the mask");
    let log = AnaLog::decode(&b.ana_log(4096, 0, true, false)).unwrap();
    assert_eq!(log.groups[1].state, AnaState::Optimized);
    assert_eq!(log.chgcnt, 4);
    t.set_ana_state(port(4421), 2, AnaState::NonOptimized)
        .unwrap();
    assert_eq!(b.events(), vec![want]);
    // Unchanged state: no event, no count.
    b.ana_log(4096, 0, false, false);
    assert!(
        !t.set_ana_state(port(4421), 2, AnaState::NonOptimized)
            .unwrap()
    );
    assert_eq!(b.aer(), None);
    assert!(b.events().is_empty());
}
