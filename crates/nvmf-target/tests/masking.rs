//! Per-host namespace masking through the queue state machine, with no transport: two hosts
//! with different views of one subsystem (Identify, Active Namespace ID list, logs, I/O,
//! reservations), and the Namespace Attribute Changed events and Changed Namespace Lists the
//! control plane's attach / detach / add / remove / resize raise for each host.

mod common;

use common::Host;
use ebof_backend::BackendSpec;
use nvme_spec::ana::AnaLog;
use nvme_spec::identify::{IdentifyNamespace, cns, decode_ns_list};
use nvme_spec::log::{ChangedNsList, SmartLog, aen, lid};
use nvme_spec::opcode::{admin, feature, io};
use nvme_spec::resv::{ResvCdw10, ResvKeys, racqa, rrega, rtype};
use nvme_spec::{CommandId, NamespaceId, Sqe, Status};
use nvmf_target::{Namespace, Subsystem, Target};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

const NQN: &str = "nqn.2026-11.io.ebof:mask";
const A: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000a1";
const B: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000b2";
/// An NSID no namespace has (the reference for "does not exist").
const ABSENT: u32 = 9;

fn local() -> SocketAddr {
    SocketAddr::from(([10, 77, 0, 1], 4420))
}

fn ns(nsid: u32, group: u32) -> Arc<Namespace> {
    let b = ebof_backend::open(&BackendSpec::Ram { size: 1 << 20 }).unwrap();
    Arc::new(Namespace::new(nsid, b, 512, [nsid as u8; 16]).with_ana_group(group))
}

/// Namespaces 1 (ANA group 1, every host), 2 (group 2, host A only) and 3 (group 2, no host).
fn target() -> Arc<Target> {
    let sub = Subsystem {
        nqn: NQN.into(),
        serial: "MASK1".into(),
        model: "ebof".into(),
        allow_any_host: true,
        hosts: vec![],
        namespaces: vec![ns(1, 1), ns(2, 2), ns(3, 2)],
        ns_hosts: BTreeMap::from([(2, vec![A.to_string()]), (3, vec![])]),
    };
    Arc::new(Target::new(
        vec![sub],
        vec![],
        Default::default(),
        Instant::now(),
    ))
}

/// A host's admin queue (Namespace Attribute notices on, an AER parked) and one I/O queue.
struct H {
    admin: Host,
    io: Host,
}

fn connect(t: &Arc<Target>, hostnqn: &str, hostid: u8) -> H {
    let mut admin = Host::new(t, local(), NQN, hostnqn);
    admin.hostid = [hostid; 16];
    let c = admin.connect(0, 0xFFFF);
    assert!(c.status.is_success(), "{c:?}");
    admin.enable();
    let mut sqe = Sqe::new(admin::SET_FEATURES, CommandId(3));
    sqe.set_cdw(10, u32::from(feature::ASYNC_EVENT));
    sqe.set_cdw(11, aen::CFG_NS_ATTR);
    assert!(admin.cmd(sqe, &[]).0.status.is_success());
    let mut io = Host::new(t, local(), NQN, hostnqn);
    io.hostid = [hostid; 16];
    let c2 = io.connect(1, c.dw0 as u16);
    assert!(c2.status.is_success(), "{c2:?}");
    let mut h = H { admin, io };
    assert_eq!(h.admin.aer(), None, "AER parked");
    h
}

impl Host {
    fn log(&mut self, log_id: u8, nsid: u32, len: u32) -> (Status, Vec<u8>) {
        let mut sqe = Sqe::new(admin::GET_LOG_PAGE, CommandId(5));
        sqe.set_nsid(NamespaceId(nsid));
        sqe.set_cdw(10, u32::from(log_id) | ((len / 4 - 1) << 16));
        sqe.set_sgl_transport(len);
        let (c, d) = self.cmd(sqe, &[]);
        (c.status, d)
    }

    fn active_list(&mut self) -> Vec<u32> {
        let (s, d) = self.identify(cns::ACTIVE_NS_LIST, 0);
        assert!(s.is_success(), "{s:?}");
        decode_ns_list(&d)
    }

    /// The Changed Namespace List (reading it clears it and re-arms the event).
    fn changed(&mut self) -> Vec<u32> {
        let (s, d) = self.log(lid::CHANGED_NS, 0, ChangedNsList::LEN as u32);
        assert!(s.is_success(), "{s:?}");
        ChangedNsList::decode(&d).unwrap().nsids
    }

    fn resv(&mut self, op: u8, nsid: u32, c: ResvCdw10, k: ResvKeys) -> Status {
        let mut sqe = Sqe::new(op, CommandId(8));
        sqe.set_nsid(NamespaceId(nsid));
        sqe.set_cdw(10, c.to_cdw10());
        let data = k.encode();
        sqe.set_sgl_icd(16);
        self.cmd(sqe, &data).0.status
    }

    fn resv_report(&mut self, nsid: u32) -> Status {
        let mut sqe = Sqe::new(io::RESV_REPORT, CommandId(9));
        sqe.set_nsid(NamespaceId(nsid));
        sqe.set_cdw(10, 4096 / 4 - 1);
        sqe.set_cdw(11, 1); // extended data structure (128-bit host identifiers)
        sqe.set_sgl_transport(4096);
        self.cmd(sqe, &[]).0.status
    }
}

impl H {
    /// The Namespace Attribute Changed events delivered now, and (when there was one) the
    /// Changed Namespace List, read and cleared; the AER is parked again.
    fn ns_event(&mut self) -> Option<Vec<u32>> {
        let ev = self.admin.events();
        if ev.is_empty() {
            return None;
        }
        assert_eq!(
            ev,
            vec![aen::result(
                aen::TYPE_NOTICE,
                aen::NOTICE_NS_CHANGED,
                lid::CHANGED_NS
            )]
        );
        let list = self.admin.changed();
        assert_eq!(self.admin.aer(), None);
        Some(list)
    }
}

fn update(t: &Target, f: impl FnOnce(&mut Subsystem)) {
    t.update_subsystem(NQN, |s| {
        let mut s = s.clone();
        f(&mut s);
        Ok::<_, ()>(s)
    })
    .unwrap();
}

#[test]
fn each_host_sees_only_its_namespaces() {
    let t = target();
    let mut a = connect(&t, A, 0xA1);
    let mut b = connect(&t, B, 0xB2);

    // Active Namespace ID list (CNS 02h).
    assert_eq!(a.admin.active_list(), vec![1, 2]);
    assert_eq!(b.admin.active_list(), vec![1]);

    // Identify Namespace: a masked NSID reads exactly as an absent one (success, zeroes).
    let absent = b.admin.identify(cns::NS, ABSENT);
    assert!(absent.0.is_success());
    assert!(absent.1.iter().all(|&x| x == 0));
    assert_eq!(b.admin.identify(cns::NS, 2), absent);
    assert_eq!(b.admin.identify(cns::NS, 3), absent);
    let (s, d) = a.admin.identify(cns::NS, 2);
    assert!(s.is_success());
    assert_ne!(IdentifyNamespace::decode(&d).unwrap().nsze, 0);
    assert_eq!(a.admin.identify(cns::NS, 3), absent);

    // Descriptors and the I/O-command-set-independent page: Invalid Namespace, as absent.
    for c in [cns::NS_ID_DESC_LIST, cns::CS_INDEP_NS] {
        let absent = b.admin.identify(c, ABSENT);
        assert_eq!(absent.0, Status::INVALID_NS, "cns {c}");
        assert_eq!(b.admin.identify(c, 2), absent, "cns {c}");
        assert!(a.admin.identify(c, 2).0.is_success(), "cns {c}");
    }

    // SMART for one namespace: as absent; NSID FFFFFFFFh: only the host's namespaces.
    let absent = b.admin.log(lid::SMART, ABSENT, 512);
    assert_eq!(absent.0, Status::INVALID_NS);
    assert_eq!(b.admin.log(lid::SMART, 2, 512).0, absent.0);
    assert!(a.admin.log(lid::SMART, 2, 512).0.is_success());
    t.subsystems()[0].namespaces[1]
        .stats
        .bytes_written
        .store(512_000 * 5, std::sync::atomic::Ordering::Relaxed);
    let smart = |h: &mut H| {
        let (s, d) = h.admin.log(lid::SMART, u32::MAX, 512);
        assert!(s.is_success());
        SmartLog::decode(&d).unwrap().data_units_written
    };
    assert_eq!(smart(&mut a), 5);
    assert_eq!(smart(&mut b), 0);

    // ANA: group descriptors and their NSIDs list only the host's namespaces.
    let ana = |h: &mut H| {
        let (s, d) = h.admin.log(lid::ANA, 0, 4096);
        assert!(s.is_success());
        AnaLog::decode(&d)
            .unwrap()
            .groups
            .into_iter()
            .map(|g| (g.grpid, g.nsids))
            .collect::<Vec<_>>()
    };
    assert_eq!(ana(&mut a), vec![(1, vec![1]), (2, vec![2])]);
    assert_eq!(ana(&mut b), vec![(1, vec![1])]);

    // I/O and reservations: Invalid Namespace or Format, exactly as for an absent namespace.
    for op in [io::READ, io::WRITE] {
        let absent = b.io.rw(op, ABSENT);
        assert_eq!(absent, Status::INVALID_NS);
        assert_eq!(b.io.rw(op, 2), absent);
        assert_eq!(b.io.rw(op, 3), absent);
        assert_eq!(a.io.rw(op, 3), absent);
        assert!(a.io.rw(op, 2).is_success());
        assert!(b.io.rw(op, 1).is_success());
    }
    assert_eq!(b.io.resv_report(ABSENT), Status::INVALID_NS);
    assert_eq!(b.io.resv_report(2), Status::INVALID_NS);
    assert_eq!(a.io.resv_report(2), Status::SUCCESS);

    // Nothing changed, nothing raised.
    assert_eq!(a.ns_event(), None);
    assert_eq!(b.ns_event(), None);
}

#[test]
fn attach_and_detach_raise_events_only_where_the_view_changes() {
    let t = target();
    let mut a = connect(&t, A, 0xA1);
    let mut b = connect(&t, B, 0xB2);
    let ns2 = t.subsystems()[0].namespaces[1].clone();

    // Attach B to namespace 2: B sees it (Identify and I/O), A's view is unchanged.
    update(&t, |s| {
        s.ns_hosts.insert(2, vec![A.into(), B.into()]);
    });
    assert_eq!(b.ns_event(), Some(vec![2]));
    assert_eq!(a.ns_event(), None);
    assert_eq!(b.admin.active_list(), vec![1, 2]);
    assert!(b.io.rw(io::READ, 2).is_success());
    assert!(Arc::ptr_eq(&t.subsystems()[0].namespaces[1], &ns2));

    // Detach A: A loses it (I/O fails as for an absent namespace), B is not told.
    update(&t, |s| {
        s.ns_hosts.insert(2, vec![B.into()]);
    });
    assert_eq!(a.ns_event(), Some(vec![2]));
    assert_eq!(b.ns_event(), None);
    assert_eq!(a.admin.active_list(), vec![1]);
    assert_eq!(a.io.rw(io::READ, 2), Status::INVALID_NS);
    assert!(!ns2.is_removed(), "masking does not remove the namespace");
    assert!(b.io.rw(io::WRITE, 2).is_success());

    // Namespace 3 visible to every host again: both are told about 3 only.
    update(&t, |s| {
        s.ns_hosts.remove(&3);
    });
    assert_eq!(a.ns_event(), Some(vec![3]));
    assert_eq!(b.ns_event(), Some(vec![3]));
    assert_eq!(a.admin.active_list(), vec![1, 3]);
    assert_eq!(b.admin.active_list(), vec![1, 2, 3]);

    // A namespace added for A only: A is told, B not; then resized, then removed.
    update(&t, |s| {
        s.namespaces.push(ns(4, 1));
        s.ns_hosts.insert(4, vec![A.into()]);
    });
    assert_eq!(a.ns_event(), Some(vec![4]));
    assert_eq!(b.ns_event(), None);
    assert!(a.io.rw(io::WRITE, 4).is_success());
    assert_eq!(b.io.rw(io::WRITE, 4), Status::INVALID_NS);
    t.namespace_changed(NQN, 4);
    assert_eq!(a.ns_event(), Some(vec![4]));
    assert_eq!(b.ns_event(), None);
    let ns4 = t.subsystems()[0].namespace(4).unwrap().clone();
    update(&t, |s| s.namespaces.retain(|n| n.nsid != 4));
    assert_eq!(a.ns_event(), Some(vec![4]));
    assert_eq!(b.ns_event(), None);
    assert!(ns4.is_removed());
    assert!(
        !t.subsystems()[0].ns_hosts.contains_key(&4),
        "host list dropped with its namespace"
    );
    assert_eq!(a.io.rw(io::READ, 4), Status::INVALID_NS);

    // A change no host's view shows (a namespace masked from everyone) raises nothing.
    update(&t, |s| {
        s.namespaces.push(ns(5, 1));
        s.ns_hosts.insert(5, vec![]);
    });
    assert_eq!(a.ns_event(), None);
    assert_eq!(b.ns_event(), None);
    t.namespace_changed(NQN, 5);
    assert_eq!(a.ns_event(), None);
    assert_eq!(b.ns_event(), None);
}

#[test]
fn a_controller_connecting_gets_its_view_and_masking_off_shares_the_snapshot() {
    let t = target();
    let _a = connect(&t, A, 0xA1);
    let b = connect(&t, B, 0xB2);
    let ctrls = t.controllers();
    let view = |host: &str| {
        ctrls
            .iter()
            .find(|c| c.hostnqn == host)
            .unwrap()
            .subsystem()
            .unwrap()
    };
    let nsids = |s: &Subsystem| s.namespaces.iter().map(|n| n.nsid).collect::<Vec<_>>();
    assert_eq!(nsids(&view(A)), vec![1, 2]);
    assert_eq!(nsids(&view(B)), vec![1]);
    // Without any host list every controller holds the subsystem's own snapshot.
    update(&t, |s| s.ns_hosts.clear());
    let snap = t.subsystem(NQN).unwrap();
    assert!(Arc::ptr_eq(&view(A), &snap));
    assert!(Arc::ptr_eq(&view(B), &snap));
    drop(b);
}

#[test]
fn reservation_notices_skip_a_host_the_namespace_is_masked_from() {
    let t = target();
    update(&t, |s| {
        s.ns_hosts.insert(2, vec![A.into(), B.into()]);
    });
    let mut a = connect(&t, A, 0xA1);
    let mut b = connect(&t, B, 0xB2);
    let reg = |h: &mut H, key: u64| {
        let c = ResvCdw10 {
            action: rrega::REGISTER,
            iekey: false,
            rtype: 0,
            cptpl: 0,
        };
        h.io.resv(
            io::RESV_REGISTER,
            2,
            c,
            ResvKeys {
                crkey: 0,
                second: key,
            },
        )
    };
    let preempt = |h: &mut H, key: u64, victim: u64| {
        let c = ResvCdw10 {
            action: racqa::PREEMPT,
            iekey: false,
            rtype: rtype::WRITE_EXCLUSIVE,
            cptpl: 0,
        };
        h.io.resv(
            io::RESV_ACQUIRE,
            2,
            c,
            ResvKeys {
                crkey: key,
                second: victim,
            },
        )
    };
    let resv_event = aen::result(
        aen::TYPE_IO_CMD_SPECIFIC,
        aen::IO_RESV_LOG_AVAILABLE,
        lid::RESERVATION,
    );
    assert!(reg(&mut a, 0xA).is_success());
    assert!(reg(&mut b, 0xB).is_success());
    // B is detached, then preempted: no notice for a namespace it cannot see.
    update(&t, |s| {
        s.ns_hosts.insert(2, vec![A.into()]);
    });
    assert_eq!(b.ns_event(), Some(vec![2]));
    assert!(preempt(&mut a, 0xA, 0xB).is_success());
    assert_eq!(b.admin.events(), Vec::<u32>::new());
    // Control: attached, B is told.
    update(&t, |s| {
        s.ns_hosts.insert(2, vec![A.into(), B.into()]);
    });
    assert_eq!(b.ns_event(), Some(vec![2]));
    assert!(reg(&mut b, 0xB).is_success());
    assert!(preempt(&mut a, 0xA, 0xB).is_success());
    assert_eq!(b.admin.events(), vec![resv_event]);
}
