//! The reservation commands through real queues (no sockets): two hosts, a conflict on a
//! write before its data moves, Report EDS=0 refusal, notifications with masks, features,
//! Identify and the effects log.

use crate::{C2hData, Disposition, Namespace, Queue, Subsystem, Target, TargetLimits};
use ebof_backend::BackendSpec;
use nvme_spec::fabrics::{ConnectCmd, ConnectData, PropertyCmd, cc, prop};
use nvme_spec::identify::{IdentifyController, IdentifyNamespace, cns, oncs};
use nvme_spec::log::{CmdEffectsLog, aen, lid};
use nvme_spec::opcode::{admin, fctype, feature, io};
use nvme_spec::resv::{
    ResvCdw10, ResvKeys, ResvNotificationLog, ResvStatusExt, cptpl, log_type, notify_mask, racqa,
    rescap, rrega, rrela, rtype,
};
use nvme_spec::{CommandId, ControllerId, Cqe, NamespaceId, QueueId, Sqe, Status};
use std::sync::Arc;
use std::time::Instant;

const NQN: &str = "nqn.2026-11.io.ebof:resv";

struct Host {
    admin: Queue,
    io: Queue,
    cid: u16,
}

fn target() -> Arc<Target> {
    let ram = ebof_backend::open(&BackendSpec::Ram { size: 1 << 20 }).unwrap();
    let sub = Subsystem {
        nqn: NQN.into(),
        serial: "R1".into(),
        model: "ebof".into(),
        allow_any_host: true,
        hosts: vec![],
        namespaces: vec![Arc::new(Namespace::new(1, ram, 512, [7; 16]))],
        ns_hosts: Default::default(),
    };
    Arc::new(Target::new(
        vec![sub],
        vec![],
        TargetLimits::default(),
        Instant::now(),
    ))
}

/// Run one command on `q`; returns its completion and data.
fn run(q: &mut Queue, cid: &mut u16, mut sqe: Sqe, icd: &[u8]) -> (Cqe, Vec<u8>) {
    *cid += 1;
    sqe.set_cid(CommandId(*cid));
    if !icd.is_empty() {
        sqe.set_sgl_icd(icd.len() as u32);
    }
    match q.handle_command(&sqe, icd, Instant::now()) {
        Disposition::Execute { slot } => q.execute_inline(slot),
        Disposition::Done | Disposition::Parked => {}
        d => panic!("unexpected {d:?}"),
    }
    let mut out = None;
    q.drain_completions(|cqe, data, _| {
        let bytes = match data {
            C2hData::Bytes(b) => b.to_vec(),
            C2hData::Read {
                backend,
                offset,
                len,
            } => {
                let mut b = vec![0; len];
                backend.read(offset, &mut b).unwrap();
                b
            }
        };
        out = Some((*cqe, bytes));
        Ok(())
    });
    out.expect("a completion")
}

fn connect(t: &Arc<Target>, hostid: [u8; 16], n: u8) -> Host {
    let addr = "127.0.0.1:4420".parse().unwrap();
    let hostnqn =
        format!("nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000{n:02}");
    let mut cid = 0;
    let mut admin = Queue::new(t.clone(), addr, Instant::now());
    let connect_sqe = |qid: u16| {
        let mut sqe = Sqe::new(admin::FABRICS, CommandId(0));
        sqe.set_fctype(fctype::CONNECT);
        ConnectCmd {
            recfmt: 0,
            qid: QueueId(qid),
            sqsize: 31,
            cattr: 0,
            kato: 0,
        }
        .encode_into(&mut sqe);
        sqe
    };
    let data = |cntlid| {
        ConnectData {
            hostid,
            cntlid,
            subnqn: NQN.into(),
            hostnqn: hostnqn.clone(),
        }
        .encode()
    };
    let (cqe, _) = run(
        &mut admin,
        &mut cid,
        connect_sqe(0),
        &data(ControllerId::DYNAMIC),
    );
    assert!(cqe.status.is_success());
    let cntlid = ControllerId(cqe.dw0 as u16);
    let mut sqe = Sqe::new(admin::FABRICS, CommandId(0));
    sqe.set_fctype(fctype::PROPERTY_SET);
    PropertyCmd {
        size8: false,
        ofst: prop::CC,
        value: u64::from(cc::enable_value(0)),
    }
    .encode_into(&mut sqe);
    assert!(run(&mut admin, &mut cid, sqe, &[]).0.status.is_success());
    let mut io = Queue::new(t.clone(), addr, Instant::now());
    let (cqe, _) = run(&mut io, &mut cid, connect_sqe(1), &data(cntlid));
    assert!(cqe.status.is_success(), "{cqe:?}");
    Host { admin, io, cid }
}

impl Host {
    fn io_cmd(&mut self, sqe: Sqe, icd: &[u8]) -> (Cqe, Vec<u8>) {
        run(&mut self.io, &mut self.cid, sqe, icd)
    }
    fn admin_cmd(&mut self, sqe: Sqe) -> (Cqe, Vec<u8>) {
        run(&mut self.admin, &mut self.cid, sqe, &[])
    }
    fn resv(&mut self, op: u8, c: ResvCdw10, k: ResvKeys) -> Status {
        let mut sqe = Sqe::new(op, CommandId(0));
        sqe.set_nsid(NamespaceId(1));
        sqe.set_cdw(10, c.to_cdw10());
        let data = k.encode();
        let len = if op == io::RESV_RELEASE { 8 } else { 16 };
        self.io_cmd(sqe, &data[..len]).0.status
    }
    fn report(&mut self, eds: bool) -> (Status, Option<ResvStatusExt>) {
        let len = 4096u32;
        let mut sqe = Sqe::new(io::RESV_REPORT, CommandId(0));
        sqe.set_nsid(NamespaceId(1));
        sqe.set_cdw(10, len / 4 - 1);
        sqe.set_cdw(11, u32::from(eds));
        sqe.set_sgl_transport(len);
        let (cqe, data) = self.io_cmd(sqe, &[]);
        let r = cqe
            .status
            .is_success()
            .then(|| ResvStatusExt::decode(&data).unwrap());
        (cqe.status, r)
    }
    /// A 1-block write with in-capsule data.
    fn write(&mut self) -> Status {
        let mut sqe = Sqe::new(io::WRITE, CommandId(0));
        sqe.set_nsid(NamespaceId(1));
        sqe.set_nlb(1);
        self.io_cmd(sqe, &[0x5A; 512]).0.status
    }
    /// A 1-block Compare against what [`Host::write`] wrote.
    fn compare(&mut self) -> Status {
        let mut sqe = Sqe::new(io::COMPARE, CommandId(0));
        sqe.set_nsid(NamespaceId(1));
        sqe.set_nlb(1);
        self.io_cmd(sqe, &[0x5A; 512]).0.status
    }
    fn read(&mut self) -> Status {
        let mut sqe = Sqe::new(io::READ, CommandId(0));
        sqe.set_nsid(NamespaceId(1));
        sqe.set_nlb(1);
        sqe.set_sgl_transport(512);
        self.io_cmd(sqe, &[]).0.status
    }
    /// Start a 1-block Write whose data comes after an R2T; returns the transfer tag.
    fn start_write(&mut self) -> u16 {
        let mut sqe = Sqe::new(io::WRITE, CommandId(0));
        self.cid += 1;
        sqe.set_cid(CommandId(self.cid));
        sqe.set_nsid(NamespaceId(1));
        sqe.set_nlb(1);
        sqe.set_sgl_transport(512);
        match self.io.handle_command(&sqe, &[], Instant::now()) {
            Disposition::NeedData { ttag, .. } => ttag,
            d => panic!("expected an R2T, got {d:?}"),
        }
    }
    /// The data of the Write started with `ttag`: its completion status.
    fn finish_write(&mut self, ttag: u16, byte: u8) -> Status {
        if let Disposition::Execute { slot } = self.io.handle_h2c_data(ttag, 0, &[byte; 512], true)
        {
            self.io.execute_inline(slot);
        }
        statuses(&mut self.io).pop().expect("a completion")
    }
    /// Block 0 as read by this host.
    fn read_block(&mut self) -> Vec<u8> {
        let mut sqe = Sqe::new(io::READ, CommandId(0));
        sqe.set_nsid(NamespaceId(1));
        sqe.set_nlb(1);
        sqe.set_sgl_transport(512);
        let (cqe, data) = self.io_cmd(sqe, &[]);
        assert!(cqe.status.is_success(), "{cqe:?}");
        data
    }
    fn resv_log(&mut self) -> ResvNotificationLog {
        let mut sqe = Sqe::new(admin::GET_LOG_PAGE, CommandId(0));
        sqe.set_cdw(10, u32::from(lid::RESERVATION) | ((64 / 4 - 1) << 16));
        sqe.set_sgl_transport(64);
        let (cqe, data) = self.admin_cmd(sqe);
        assert!(cqe.status.is_success());
        ResvNotificationLog::decode(&data).unwrap()
    }
    fn set_feature(&mut self, fid: u8, nsid: u32, v: u32) -> Status {
        let mut sqe = Sqe::new(admin::SET_FEATURES, CommandId(0));
        sqe.set_nsid(NamespaceId(nsid));
        sqe.set_cdw(10, u32::from(fid));
        sqe.set_cdw(11, v);
        self.admin_cmd(sqe).0.status
    }
    fn get_feature(&mut self, fid: u8, nsid: u32) -> (Status, u32) {
        let mut sqe = Sqe::new(admin::GET_FEATURES, CommandId(0));
        sqe.set_nsid(NamespaceId(nsid));
        sqe.set_cdw(10, u32::from(fid));
        let (cqe, _) = self.admin_cmd(sqe);
        (cqe.status, cqe.dw0)
    }
    /// Park an AER and return its completion if an event is (or becomes) pending.
    fn aer(&mut self) -> Option<u32> {
        let mut sqe = Sqe::new(admin::ASYNC_EVENT_REQUEST, CommandId(0));
        self.cid += 1;
        sqe.set_cid(CommandId(self.cid));
        self.admin.handle_command(&sqe, &[], Instant::now());
        self.admin.deliver_events();
        let mut dw0 = None;
        self.admin.drain_completions(|cqe, _, _| {
            dw0 = Some(cqe.dw0);
            Ok(())
        });
        dw0
    }
}

/// The statuses of the completions `q` has ready.
fn statuses(q: &mut Queue) -> Vec<Status> {
    let mut st = vec![];
    q.drain_completions(|cqe, _, _| {
        st.push(cqe.status);
        Ok(())
    });
    st
}

fn c(action: u8, ty: u8) -> ResvCdw10 {
    ResvCdw10 {
        action,
        iekey: false,
        rtype: ty,
        cptpl: cptpl::NO_CHANGE,
    }
}

fn k(crkey: u64, second: u64) -> ResvKeys {
    ResvKeys { crkey, second }
}

#[test]
fn two_hosts_conflict_report_and_release() {
    let t = target();
    let mut a = connect(&t, [1; 16], 1);
    let mut b = connect(&t, [2; 16], 2);
    // A second controller of host A shares its registration.
    let mut a2 = connect(&t, [1; 16], 3);
    assert_eq!(
        a.resv(io::RESV_REGISTER, c(rrega::REGISTER, 0), k(0, 0xA)),
        Status::SUCCESS
    );
    assert_eq!(
        b.resv(io::RESV_REGISTER, c(rrega::REGISTER, 0), k(0, 0xB)),
        Status::SUCCESS
    );
    let s = a.resv(
        io::RESV_ACQUIRE,
        c(racqa::ACQUIRE, rtype::WRITE_EXCLUSIVE),
        k(0xA, 0),
    );
    assert_eq!(s, Status::SUCCESS);
    // B (registrant, not holder) may read, not write; the write fails before any R2T.
    assert_eq!(b.read(), Status::SUCCESS);
    // A Compare carries host data like a write but is checked as the read it is.
    assert_eq!(a.write(), Status::SUCCESS);
    assert_eq!(b.compare(), Status::SUCCESS);
    let st = b.write();
    assert_eq!((st.sct, st.sc, st.dnr), (0, 0x83, true));
    let mut sqe = Sqe::new(io::WRITE, CommandId(99));
    sqe.set_nsid(NamespaceId(1));
    sqe.set_nlb(8);
    sqe.set_sgl_transport(4096);
    assert_eq!(
        b.io.handle_command(&sqe, &[], Instant::now()),
        Disposition::Done,
        "a conflicting write gets no R2T"
    );
    b.io.drain_completions(|_, _, _| Ok(()));
    // A's other controller is the same host: it holds the reservation too.
    assert_eq!(a2.write(), Status::SUCCESS);
    assert_eq!(a.write(), Status::SUCCESS);
    // B cannot acquire; B's report sees both, A holding.
    let s = b.resv(
        io::RESV_ACQUIRE,
        c(racqa::ACQUIRE, rtype::WRITE_EXCLUSIVE),
        k(0xB, 0),
    );
    assert_eq!(s, Status::RESERVATION_CONFLICT);
    let (s, r) = b.report(true);
    assert_eq!(s, Status::SUCCESS);
    let r = r.unwrap();
    assert_eq!(
        (r.rtype, r.generation, r.regs.len()),
        (rtype::WRITE_EXCLUSIVE, 2, 2)
    );
    assert_eq!((r.regs[0].hostid, r.regs[0].holds), ([1; 16], true));
    // EDS=0 cannot carry our 128-bit host identifiers.
    assert_eq!(b.report(false).0, Status::HOST_ID_INCONSISTENT);
    // Release: B writes again.
    let s = a.resv(
        io::RESV_RELEASE,
        c(rrela::RELEASE, rtype::WRITE_EXCLUSIVE),
        k(0xA, 0),
    );
    assert_eq!(s, Status::SUCCESS);
    assert_eq!(b.write(), Status::SUCCESS);
    // PTPL cannot be set on a namespace without a store.
    let mut p = c(rrega::REGISTER, 0);
    p.cptpl = cptpl::SET;
    assert_eq!(
        a.resv(io::RESV_REGISTER, p, k(0, 0xA)),
        Status::INVALID_FIELD
    );
}

/// While a host is registered, a reservation may be acquired between a Write's R2T and its
/// data: the data is gathered, not written straight into the namespace, so the check right
/// before the write refuses it and nothing lands.
#[test]
fn write_data_that_arrives_after_an_acquire_writes_nothing() {
    let t = target();
    let mut a = connect(&t, [1; 16], 1);
    let mut b = connect(&t, [2; 16], 2);
    let reg = c(rrega::REGISTER, 0);
    assert_eq!(a.resv(io::RESV_REGISTER, reg, k(0, 0xA)), Status::SUCCESS);
    let ttag = b.start_write();
    assert!(
        b.io.direct_target(ttag).is_none(),
        "a host is registered: the data must be gathered first"
    );
    let acq = c(racqa::ACQUIRE, rtype::WRITE_EXCLUSIVE);
    assert_eq!(a.resv(io::RESV_ACQUIRE, acq, k(0xA, 0)), Status::SUCCESS);
    let st = b.finish_write(ttag, 0x77);
    assert_eq!((st.sct, st.sc), (0, 0x83), "{st:?}");
    assert_eq!(a.read_block(), vec![0; 512], "nothing of B's write landed");
    // The holder's own writes still succeed.
    let ttag = a.start_write();
    assert_eq!(a.finish_write(ttag, 0x11), Status::SUCCESS);
    assert_eq!(b.read_block(), vec![0x11; 512]);
}

/// A command that waits behind a Compare-and-Write for the namespace's gate is checked against
/// the reservations again when it gets in: a reservation acquired while it waited refuses it.
#[test]
fn a_write_deferred_behind_compare_and_write_is_checked_again() {
    use nvme_spec::sqe::{FUSE_FIRST, FUSE_SECOND};
    let t = target();
    let mut a = connect(&t, [1; 16], 1);
    let mut b = connect(&t, [2; 16], 2);
    let reg = c(rrega::REGISTER, 0);
    assert_eq!(a.resv(io::RESV_REGISTER, reg, k(0, 0xA)), Status::SUCCESS);
    assert_eq!(b.resv(io::RESV_REGISTER, reg, k(0, 0xB)), Status::SUCCESS);
    // A's read streamed from RAM keeps the gate busy until its output is sent.
    assert_eq!(a.read(), Status::SUCCESS);
    let now = Instant::now();
    let submit = |h: &mut Host, op: u8, fuse: u8, byte: u8| {
        let mut sqe = Sqe::new(op, CommandId(0));
        h.cid += 1;
        sqe.set_cid(CommandId(h.cid));
        sqe.set_nsid(NamespaceId(1));
        sqe.set_nlb(1);
        sqe.set_fuse(fuse);
        sqe.set_sgl_icd(512);
        h.io.handle_command(&sqe, &[byte; 512], now)
    };
    // A's Compare-and-Write takes the gate and waits for the read to leave.
    submit(&mut a, io::COMPARE, FUSE_FIRST, 0);
    assert_eq!(
        submit(&mut a, io::WRITE, FUSE_SECOND, 0xCA),
        Disposition::Parked
    );
    // B's write finds the gate closed and waits too.
    assert_eq!(submit(&mut b, io::WRITE, 0, 0xB0), Disposition::Parked);
    assert!(b.io.has_deferred());
    // Meanwhile A acquires Write Exclusive.
    let acq = c(racqa::ACQUIRE, rtype::WRITE_EXCLUSIVE);
    assert_eq!(a.resv(io::RESV_ACQUIRE, acq, k(0xA, 0)), Status::SUCCESS);
    // The read's data is sent: the pair runs (A holds the reservation), then B's write is
    // refused.
    a.io.output_sent();
    let mut ready = vec![];
    a.io.retry_deferred(Instant::now(), &mut ready);
    for s in ready.drain(..) {
        a.io.execute_inline(s);
    }
    assert_eq!(
        statuses(&mut a.io),
        vec![Status::SUCCESS; 2],
        "the holder's pair"
    );
    b.io.retry_deferred(Instant::now(), &mut ready);
    assert!(ready.is_empty(), "B's write must not run");
    let st = statuses(&mut b.io);
    assert_eq!(st.len(), 1);
    assert_eq!((st[0].sct, st[0].sc), (0, 0x83), "{:?}", st[0]);
    assert_eq!(b.read_block(), vec![0xCA; 512], "the pair's data, not B's");
}

/// A Write admitted while no host was registered may take the zero-copy path; if a
/// reservation is acquired before its data is in, the data has landed and the command reports
/// that truthfully (success, as Linux nvmet completes a write it admitted). The host's next
/// write is refused.
#[test]
fn a_write_placed_before_any_registration_completes() {
    let t = target();
    let mut a = connect(&t, [1; 16], 1);
    let mut b = connect(&t, [2; 16], 2);
    let ttag = b.start_write();
    assert!(
        b.io.direct_target(ttag).is_some(),
        "RAM, no registrant: zero copy"
    );
    let reg = c(rrega::REGISTER, 0);
    assert_eq!(a.resv(io::RESV_REGISTER, reg, k(0, 0xA)), Status::SUCCESS);
    let acq = c(racqa::ACQUIRE, rtype::WRITE_EXCLUSIVE);
    assert_eq!(a.resv(io::RESV_ACQUIRE, acq, k(0xA, 0)), Status::SUCCESS);
    assert_eq!(b.finish_write(ttag, 0x66), Status::SUCCESS);
    assert_eq!(a.read_block(), vec![0x66; 512]);
    let st = b.write();
    assert_eq!((st.sct, st.sc), (0, 0x83), "{st:?}");
}

/// Reservation commands are I/O commands: through a path where the namespace's ANA group is
/// not accessible they fail with the path status (the host retries on another path), as
/// Linux nvmet and SPDK do, and change nothing.
#[test]
fn reservation_commands_follow_the_ana_state_of_the_path() {
    use crate::ana::AnaState;
    let t = target();
    let mut a = connect(&t, [1; 16], 1);
    let port = "127.0.0.1:4420".parse().unwrap();
    let reg = c(rrega::REGISTER, 0);
    for (state, want) in [
        (AnaState::Inaccessible, Status::ANA_INACCESSIBLE),
        (AnaState::PersistentLoss, Status::ANA_PERSISTENT_LOSS),
        (AnaState::Change, Status::ANA_TRANSITION),
    ] {
        t.set_ana_state(port, 1, state).unwrap();
        assert_eq!(a.resv(io::RESV_REGISTER, reg, k(0, 0xA)), want, "{state}");
        assert_eq!(a.report(true).0, want, "{state}");
    }
    t.set_ana_state(port, 1, AnaState::NonOptimized).unwrap();
    let (s, r) = a.report(true);
    assert_eq!(s, Status::SUCCESS);
    assert!(
        r.unwrap().regs.is_empty(),
        "the refused Register changed nothing"
    );
    assert_eq!(a.resv(io::RESV_REGISTER, reg, k(0, 0xA)), Status::SUCCESS);
}

#[test]
fn notifications_reach_the_preempted_host_unless_masked() {
    let t = target();
    let mut a = connect(&t, [1; 16], 1);
    let mut b = connect(&t, [2; 16], 2);
    a.resv(io::RESV_REGISTER, c(rrega::REGISTER, 0), k(0, 0xA));
    b.resv(io::RESV_REGISTER, c(rrega::REGISTER, 0), k(0, 0xB));
    a.resv(
        io::RESV_ACQUIRE,
        c(racqa::ACQUIRE, rtype::EXCLUSIVE_ACCESS),
        k(0xA, 0),
    );
    // Empty log before anything happened.
    assert_eq!(a.resv_log(), ResvNotificationLog::default());
    // B preempts A: A's controller gets Registration Preempted, and the event.
    let s = b.resv(
        io::RESV_ACQUIRE,
        c(racqa::PREEMPT_AND_ABORT, rtype::EXCLUSIVE_ACCESS),
        k(0xB, 0xA),
    );
    assert_eq!(s, Status::SUCCESS);
    assert_eq!(a.read(), Status::RESERVATION_CONFLICT);
    assert_eq!(
        a.aer(),
        Some(aen::result(
            aen::TYPE_IO_CMD_SPECIFIC,
            aen::IO_RESV_LOG_AVAILABLE,
            lid::RESERVATION
        ))
    );
    let l = a.resv_log();
    assert_eq!(
        (l.count, l.log_type, l.nsid, l.available),
        (1, log_type::REGISTRATION_PREEMPTED, 1, 0)
    );
    assert_eq!(
        a.resv_log().log_type,
        log_type::EMPTY,
        "reading consumed it"
    );
    assert_eq!(
        b.resv_log().log_type,
        log_type::EMPTY,
        "the preempting host hears nothing"
    );
    // B masks Reservation Preempted for namespace 1; A registers and clears: B hears nothing.
    assert_eq!(
        b.set_feature(feature::RESV_MASK, 1, notify_mask::RESV_PREEMPTED),
        Status::SUCCESS
    );
    assert_eq!(
        b.get_feature(feature::RESV_MASK, 1),
        (Status::SUCCESS, notify_mask::RESV_PREEMPTED)
    );
    assert_eq!(
        b.set_feature(feature::RESV_MASK, 1, 1),
        Status::INVALID_FIELD
    );
    a.resv(io::RESV_REGISTER, c(rrega::REGISTER, 0), k(0, 0xA));
    assert_eq!(
        a.resv(io::RESV_RELEASE, c(rrela::CLEAR, 0), k(0xA, 0)),
        Status::SUCCESS
    );
    assert_eq!(b.resv_log().log_type, log_type::EMPTY);
    // Unmasked: B registers, A registers, A acquires WERO and releases: B is told.
    b.set_feature(feature::RESV_MASK, u32::MAX, 0);
    b.resv(io::RESV_REGISTER, c(rrega::REGISTER, 0), k(0, 0xB));
    a.resv(io::RESV_REGISTER, c(rrega::REGISTER, 0), k(0, 0xA));
    a.resv(
        io::RESV_ACQUIRE,
        c(racqa::ACQUIRE, rtype::WRITE_EXCLUSIVE_REG_ONLY),
        k(0xA, 0),
    );
    a.resv(
        io::RESV_RELEASE,
        c(rrela::RELEASE, rtype::WRITE_EXCLUSIVE_REG_ONLY),
        k(0xA, 0),
    );
    let l = b.resv_log();
    assert_eq!((l.count, l.log_type), (1, log_type::RESERVATION_RELEASED));
    // Reservation Persistence: readable; cannot be set without a store.
    assert_eq!(
        a.get_feature(feature::RESV_PERSIST, 1),
        (Status::SUCCESS, 0)
    );
    assert_eq!(
        a.set_feature(feature::RESV_PERSIST, 1, 1),
        Status::INVALID_FIELD
    );
    assert_eq!(
        a.get_feature(feature::RESV_PERSIST, 9).0,
        Status::INVALID_NS
    );
}

#[test]
fn identify_and_effects_advertise_reservations() {
    let t = target();
    let mut a = connect(&t, [1; 16], 1);
    let mut sqe = Sqe::new(admin::IDENTIFY, CommandId(0));
    sqe.set_cdw(10, u32::from(cns::CTRL));
    sqe.set_sgl_transport(4096);
    let (_, d) = a.admin_cmd(sqe);
    let id = IdentifyController::decode(&d).unwrap();
    assert_ne!(id.oncs & oncs::RESERVATIONS, 0);
    let mut sqe = Sqe::new(admin::IDENTIFY, CommandId(0));
    sqe.set_nsid(NamespaceId(1));
    sqe.set_cdw(10, u32::from(cns::NS));
    sqe.set_sgl_transport(4096);
    let (_, d) = a.admin_cmd(sqe);
    let ns = IdentifyNamespace::decode(&d).unwrap();
    assert_eq!(ns.nmic & 1, 1);
    assert_eq!(
        ns.rescap,
        rescap::ALL_TYPES | rescap::IEKEY,
        "no PTPL without a store"
    );
    let mut sqe = Sqe::new(admin::GET_LOG_PAGE, CommandId(0));
    sqe.set_cdw(10, u32::from(lid::CMD_EFFECTS) | ((4096 / 4 - 1) << 16));
    sqe.set_sgl_transport(4096);
    let (_, d) = a.admin_cmd(sqe);
    let log = CmdEffectsLog::decode(&d).unwrap();
    for op in [
        io::RESV_REGISTER,
        io::RESV_REPORT,
        io::RESV_ACQUIRE,
        io::RESV_RELEASE,
    ] {
        assert_ne!(log.iocs[usize::from(op)] & 1, 0, "opcode {op:#x}");
    }
}
