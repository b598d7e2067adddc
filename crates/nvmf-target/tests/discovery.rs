//! The discovery service through the queue state machine, with no transport: DCTYPE (DDC,
//! CDC with a fake source and its CSTS.RDY hold), the self entry's flags, referrals and the
//! Discovery Log Page Change event, and Discovery Information Management (TP 8010) with its
//! bounds and the status of every malformed payload.

mod common;

use common::Host;
use ebof_backend::BackendSpec;
use nvme_spec::dim::{DimData, DimTask, EntityType, EntryFormat, off};
use nvme_spec::discovery::{
    DiscoveryLogEntry, adrfam, decode_discovery_log, eflags, subtype, treq, trtype,
};
use nvme_spec::fabrics::{PropertyCmd, csts, prop};
use nvme_spec::identify::{IdentifyController, cns};
use nvme_spec::log::{aen, lid};
use nvme_spec::opcode::{admin, fctype, feature};
use nvme_spec::{CommandId, Cqe, DISCOVERY_NQN, Sqe, Status};
use nvmf_target::{
    CentralDiscovery, DIM_STALE, DimDenial, DimRegistration, Disposition, ListenerInfo,
    MAX_DIM_ENTRIES, MAX_DIM_PER_HOST, MAX_DIM_PER_PEER, MAX_DIM_RESERVED, MAX_DIM_TOTAL,
    MAX_REFERRALS, Namespace, Referral, ReferralError, Subsystem, Target,
};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

const NQN: &str = "nqn.2026-11.io.ebof:disc";
const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000d1";

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn target() -> Arc<Target> {
    let b = ebof_backend::open(&BackendSpec::Ram { size: 1 << 20 }).unwrap();
    let sub = Subsystem {
        nqn: NQN.into(),
        serial: "DISC1".into(),
        model: "ebof".into(),
        allow_any_host: true,
        hosts: vec![],
        namespaces: vec![Arc::new(Namespace::new(1, b, 512, [1; 16]))],
        ns_hosts: Default::default(),
    };
    let listeners = vec![ListenerInfo {
        addr: addr("10.77.0.1:4420"),
        portid: 1,
        tls: Default::default(),
        transport: Default::default(),
    }];
    Arc::new(Target::new(
        vec![sub],
        listeners,
        Default::default(),
        Instant::now(),
    ))
}

/// A connected, enabled discovery controller for `hostnqn`.
fn disc(t: &Arc<Target>, hostnqn: &str) -> Host {
    let mut h = Host::new(t, addr("10.77.0.1:4420"), DISCOVERY_NQN, hostnqn);
    assert!(h.connect(0, 0xFFFF).status.is_success());
    h.enable();
    h
}

trait DiscHost {
    fn identify_ctrl(&mut self) -> IdentifyController;
    fn log(&mut self) -> (u64, Vec<DiscoveryLogEntry>);
    fn csts(&mut self) -> u32;
    fn dim(&mut self, task: DimTask, data: &[u8]) -> Cqe;
    fn enable_disc_events(&mut self);
}

impl DiscHost for Host {
    fn identify_ctrl(&mut self) -> IdentifyController {
        let mut sqe = Sqe::new(admin::IDENTIFY, CommandId(3));
        sqe.set_cdw(10, u32::from(cns::CTRL));
        sqe.set_sgl_transport(4096);
        let (c, d) = self.cmd(sqe, &[]);
        assert!(c.status.is_success(), "{c:?}");
        IdentifyController::decode(&d).unwrap()
    }

    fn log(&mut self) -> (u64, Vec<DiscoveryLogEntry>) {
        let len = 16 * 1024u32;
        let mut sqe = Sqe::new(admin::GET_LOG_PAGE, CommandId(4));
        sqe.set_cdw(10, u32::from(lid::DISCOVERY) | ((len / 4 - 1) << 16));
        sqe.set_sgl_transport(len);
        let (c, d) = self.cmd(sqe, &[]);
        assert!(c.status.is_success(), "{c:?}");
        let (h, e) = decode_discovery_log(&d).unwrap();
        assert_eq!(h.numrec as usize, e.len());
        (h.genctr, e)
    }

    fn csts(&mut self) -> u32 {
        let mut sqe = Sqe::new(admin::FABRICS, CommandId(5));
        sqe.set_fctype(fctype::PROPERTY_GET);
        PropertyCmd {
            size8: false,
            ofst: prop::CSTS,
            value: 0,
        }
        .encode_into(&mut sqe);
        let (c, _) = self.cmd(sqe, &[]);
        assert!(c.status.is_success(), "{c:?}");
        c.dw0
    }

    fn dim(&mut self, task: DimTask, data: &[u8]) -> Cqe {
        let mut sqe = Sqe::new(admin::DISCOVERY_INFO_MGMT, CommandId(6));
        sqe.set_cdw(10, task.cdw10());
        if data.len() <= 8192 {
            sqe.set_sgl_icd(data.len() as u32);
            return self.cmd(sqe, data).0;
        }
        // Too big for the capsule: R2T and one H2CData, as Linux sends it.
        sqe.set_sgl_transport(data.len() as u32);
        let d = match self.q.handle_command(&sqe, &[], self.now) {
            Disposition::NeedData { ttag, .. } => self.q.handle_h2c_data(ttag, 0, data, true),
            d => d,
        };
        match d {
            Disposition::Done => {}
            Disposition::Execute { slot } => self.q.execute_inline(slot),
            d => panic!("unexpected {d:?}"),
        }
        self.drain().remove(0).0
    }

    fn enable_disc_events(&mut self) {
        let mut sqe = Sqe::new(admin::SET_FEATURES, CommandId(7));
        sqe.set_cdw(10, u32::from(feature::ASYNC_EVENT));
        sqe.set_cdw(11, aen::CFG_DISC_CHANGE);
        assert!(self.cmd(sqe, &[]).0.status.is_success());
    }
}

/// The Discovery Log Page Change notice as AER DW0.
fn disc_change() -> u32 {
    u32::from(aen::TYPE_NOTICE)
        | (u32::from(aen::NOTICE_DISC_CHANGE) << 8)
        | (u32::from(lid::DISCOVERY) << 16)
}

/// A CDC source whose entries the test sets, recording what it is told.
#[derive(Debug, Default)]
struct FakeCdc {
    entries: Mutex<Option<Arc<Vec<DiscoveryLogEntry>>>>,
    seen: Mutex<Vec<String>>,
    registered: Mutex<Vec<DimRegistration>>,
    deregistered: Mutex<Vec<DimRegistration>>,
    replaced: Mutex<Vec<(DimRegistration, DimRegistration)>>,
    /// What `admit` answers (`None`: admitted).
    deny: Mutex<Option<DimDenial>>,
    admits: Mutex<Vec<(DimTask, String)>>,
}

impl CentralDiscovery for FakeCdc {
    fn host_seen(&self, hostnqn: &str) {
        self.seen.lock().unwrap().push(hostnqn.into());
    }
    fn entries(&self, _hostnqn: &str) -> Option<Arc<Vec<DiscoveryLogEntry>>> {
        self.entries.lock().unwrap().clone()
    }
    fn registered(&self, reg: &DimRegistration) {
        self.registered.lock().unwrap().push(reg.clone());
    }
    fn deregistered(&self, reg: &DimRegistration) {
        self.deregistered.lock().unwrap().push(reg.clone());
    }
    fn replaced(&self, old: &DimRegistration, new: &DimRegistration) {
        self.replaced
            .lock()
            .unwrap()
            .push((old.clone(), new.clone()));
        self.registered(new);
    }
    fn admit(&self, task: DimTask, reg: &DimRegistration) -> Result<(), DimDenial> {
        self.admits
            .lock()
            .unwrap()
            .push((task, reg.hostnqn.clone()));
        match *self.deny.lock().unwrap() {
            Some(d) => Err(d),
            None => Ok(()),
        }
    }
}

fn member_entry() -> DiscoveryLogEntry {
    DiscoveryLogEntry {
        trtype: trtype::TCP,
        adrfam: adrfam::IPV4,
        subtype: subtype::NVME,
        treq: treq::NOT_REQUIRED,
        portid: 1,
        cntlid: 0xFFFF,
        asqsz: 32,
        trsvcid: "4420".into(),
        subnqn: "nqn.2026-11.io.ebof:member".into(),
        traddr: "10.77.0.12".into(),
        ..Default::default()
    }
}

#[test]
fn ddc_reports_dctype_1_and_self_entry_has_epcsd_only() {
    let t = target();
    let mut h = disc(&t, HOSTNQN);
    let id = h.identify_ctrl();
    assert_eq!(id.dctype, 1);
    assert_eq!(id.cntrltype, nvme_spec::identify::cntrltype::DISCOVERY);
    let (_, e) = h.log();
    assert_eq!(e.len(), 2);
    assert_eq!(e[0].subtype, subtype::NVME);
    let me = &e[1];
    assert_eq!(me.subtype, subtype::CURRENT_DISCOVERY);
    assert_eq!(me.subnqn, DISCOVERY_NQN);
    // EPCSD keeps nvme-discoverd and libnvme --persistent=auto connected; DUPRETINFO would
    // make nvme-discoverd before nvme-cli PR #4000 drop the entry (see
    // CURRENT_DISCOVERY_EFLAGS).
    assert_eq!(me.eflags, eflags::EPCSD);
    assert_eq!(me.eflags & eflags::DUPRETINFO, 0);
    assert_eq!(nvmf_target::CURRENT_DISCOVERY_EFLAGS, eflags::EPCSD);
}

#[test]
fn cdc_reports_dctype_2_holds_rdy_and_appends_member_entries() {
    let t = target();
    let cdc = Arc::new(FakeCdc::default());
    t.set_central(Some(cdc.clone()));
    let mut h = Host::new(&t, addr("10.77.0.1:4420"), DISCOVERY_NQN, HOSTNQN);
    assert!(h.connect(0, 0xFFFF).status.is_success());
    assert_eq!(*cdc.seen.lock().unwrap(), vec![HOSTNQN.to_string()]);
    h.enable();
    // The member view is not ready: CSTS.RDY stays 0 although CC.EN is 1.
    assert_eq!(h.csts() & csts::RDY, 0);
    *cdc.entries.lock().unwrap() = Some(Arc::new(vec![member_entry()]));
    assert_eq!(h.csts() & csts::RDY, csts::RDY);
    assert_eq!(h.identify_ctrl().dctype, 2);
    let (_, e) = h.log();
    let kinds: Vec<u8> = e.iter().map(|e| e.subtype).collect();
    assert_eq!(
        kinds,
        vec![subtype::NVME, subtype::NVME, subtype::CURRENT_DISCOVERY]
    );
    assert_eq!(e[1], member_entry());
    // Back to a DDC.
    t.set_central(None);
    assert_eq!(h.identify_ctrl().dctype, 1);
}

#[test]
fn referrals_are_subtype_1_entries() {
    let t = target();
    let mut h = disc(&t, HOSTNQN);
    let (g0, _) = h.log();
    let refs = vec![
        Referral::tcp(addr("10.77.0.12:8009")),
        Referral::tcp(addr("[fd00::13]:8010")),
    ];
    assert_eq!(t.set_referrals(refs.clone()), Ok(true));
    assert_eq!(*t.referrals(), refs);
    let (g1, e) = h.log();
    assert!(g1 > g0, "GENCTR moves");
    let r: Vec<&DiscoveryLogEntry> = e
        .iter()
        .filter(|e| e.subtype == subtype::REFERRAL)
        .collect();
    assert_eq!(r.len(), 2);
    assert_eq!(r[0].trtype, trtype::TCP);
    assert_eq!(r[0].adrfam, adrfam::IPV4);
    assert_eq!(r[0].traddr, "10.77.0.12");
    assert_eq!(r[0].trsvcid, "8009");
    assert_eq!(r[0].subnqn, DISCOVERY_NQN);
    assert_eq!(r[0].treq, treq::NOT_SPECIFIED);
    assert_eq!(r[0].portid, 1);
    assert_eq!(r[0].eflags, 0);
    assert_eq!(r[1].adrfam, adrfam::IPV6);
    assert_eq!(r[1].traddr, "fd00::13");
    assert_eq!(r[1].trsvcid, "8010");
    assert_eq!(r[1].portid, 2);
    // The self entry stays last.
    assert_eq!(e.last().unwrap().subtype, subtype::CURRENT_DISCOVERY);

    // The same list again changes nothing.
    assert_eq!(t.set_referrals(refs.clone()), Ok(false));
    assert_eq!(h.log().0, g1);
    // Refusals change nothing either.
    let dup = vec![refs[0], refs[0]];
    assert_eq!(
        t.set_referrals(dup),
        Err(ReferralError::Duplicate(refs[0].addr))
    );
    let many: Vec<Referral> = (0..=MAX_REFERRALS as u16)
        .map(|p| Referral::tcp(SocketAddr::from(([10, 0, 0, 1], 1000 + p))))
        .collect();
    assert_eq!(
        t.set_referrals(many),
        Err(ReferralError::TooMany(MAX_REFERRALS + 1))
    );
    assert_eq!(*t.referrals(), refs);
    assert_eq!(h.log().0, g1);
}

#[test]
fn referral_change_raises_discovery_change_event_once() {
    let t = target();
    let mut h = disc(&t, HOSTNQN);
    h.enable_disc_events();
    assert_eq!(h.aer(), None);
    // Nothing changed: no event.
    assert_eq!(t.set_referrals(vec![]), Ok(false));
    assert!(h.events().is_empty());
    assert_eq!(
        t.set_referrals(vec![Referral::tcp(addr("10.77.0.12:8009"))]),
        Ok(true)
    );
    assert_eq!(h.events(), vec![disc_change()]);
    // Masked until the host reads the log.
    assert_eq!(h.aer(), None);
    assert_eq!(t.set_referrals(vec![]), Ok(true));
    assert!(h.events().is_empty());
    h.log();
    assert_eq!(
        t.set_referrals(vec![Referral::tcp(addr("10.77.0.13:8009"))]),
        Ok(true)
    );
    assert_eq!(h.events(), vec![disc_change()]);
}

fn host_dim(name: &str) -> Vec<u8> {
    DimData::host(HOSTNQN, [7; 16], name, "Linux 6.12", Some("rack-3"), None).encode()
}

#[test]
fn dim_register_update_deregister() {
    let t = target();
    let cdc = Arc::new(FakeCdc::default());
    *cdc.entries.lock().unwrap() = Some(Arc::new(vec![]));
    t.set_central(Some(cdc.clone()));
    let mut h = disc(&t, HOSTNQN);
    h.q.set_peer(addr("10.77.0.200:51000"));
    let g = h.log().0;

    let c = h.dim(DimTask::Register, &host_dim("host1"));
    assert!(c.status.is_success(), "{c:?}");
    let regs = t.dim_registrations();
    assert_eq!(regs.len(), 1);
    let r = &regs[0];
    assert_eq!(r.hostnqn, HOSTNQN);
    assert_eq!(r.hostid, [3; 16], "the connection's HOSTID");
    assert_eq!(r.entity_type, EntityType::Host);
    assert_eq!(r.entity_nqn, HOSTNQN);
    assert_eq!(r.name, "host1");
    assert_eq!(r.version, "Linux 6.12");
    assert_eq!(r.symname.as_deref(), Some("rack-3"));
    assert_eq!(r.entries.len(), 1);
    // TRADDR left empty by the host: the connection's source address.
    assert_eq!(r.entries[0].traddr, "10.77.0.200");
    assert_eq!(r.entries[0].adrfam, adrfam::IPV4);
    assert_eq!(r.local, addr("10.77.0.1:4420"));
    assert_eq!(r.peer, Some(addr("10.77.0.200:51000")));
    assert_eq!(cdc.registered.lock().unwrap().len(), 1);
    // Registrations do not change the discovery log.
    assert_eq!(h.log().0, g);

    // Register again replaces; update changes.
    assert!(
        h.dim(DimTask::Register, &host_dim("host1b"))
            .status
            .is_success()
    );
    assert_eq!(t.dim_registrations().len(), 1);
    assert!(
        h.dim(DimTask::Update, &host_dim("host1c"))
            .status
            .is_success()
    );
    let regs = t.dim_registrations();
    assert_eq!(regs.len(), 1);
    assert_eq!(regs[0].name, "host1c");
    assert_eq!(cdc.registered.lock().unwrap().len(), 3);

    // A registration outlives the connection that made it.
    drop(h);
    let mut h = disc(&t, HOSTNQN);
    assert_eq!(t.dim_registrations().len(), 1);
    let c = h.dim(DimTask::Deregister, &host_dim(""));
    assert!(c.status.is_success(), "{c:?}");
    assert!(t.dim_registrations().is_empty());
    assert_eq!(cdc.deregistered.lock().unwrap().len(), 1);
    assert_eq!(cdc.deregistered.lock().unwrap()[0].name, "host1c");

    // Update or deregister of nothing: Invalid Field, DW0 = EID's offset.
    for task in [DimTask::Update, DimTask::Deregister] {
        let c = h.dim(task, &host_dim("x"));
        assert_eq!(c.status, Status::INVALID_FIELD, "{task:?}");
        assert_eq!(c.dw0, off::EID);
    }
}

#[test]
fn dim_only_on_discovery_controllers() {
    let t = target();
    let mut h = Host::new(&t, addr("10.77.0.1:4420"), NQN, HOSTNQN);
    assert!(h.connect(0, 0xFFFF).status.is_success());
    h.enable();
    let c = h.dim(DimTask::Register, &host_dim("h"));
    assert_eq!(c.status, Status::INVALID_OPCODE);
    assert!(t.dim_registrations().is_empty());
}

#[test]
fn dim_bounds() {
    let t = target();
    let mut h = disc(&t, HOSTNQN);
    let ddc = |i: usize| {
        DimData::discovery_controller(
            EntityType::Ddc,
            &format!("nqn.2026-11.io.ebof:ddc{i}"),
            "box",
            "ebof",
            &[SocketAddr::from(([10, 77, 0, 20], 8009))],
        )
    };
    for i in 0..MAX_DIM_PER_HOST {
        let c = h.dim(DimTask::Register, &ddc(i).encode());
        assert!(c.status.is_success(), "{i}: {c:?}");
    }
    let c = h.dim(DimTask::Register, &ddc(99).encode());
    assert_eq!(c.status, Status::INSUFFICIENT_DISCOVERY_RESOURCES);
    // Re-registering a known entity is still fine.
    assert!(
        h.dim(DimTask::Register, &ddc(0).encode())
            .status
            .is_success()
    );
    // Another host has its own quota.
    let other = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000d2";
    let mut h2 = disc(&t, other);
    assert!(
        h2.dim(DimTask::Register, &ddc(0).encode())
            .status
            .is_success()
    );
    assert_eq!(t.dim_registrations().len(), MAX_DIM_PER_HOST + 1);

    // Too many entries in one registration.
    let mut big = ddc(50);
    big.format = EntryFormat::Basic;
    big.entries = vec![big.entries[0].clone(); MAX_DIM_ENTRIES + 1];
    let c = h2.dim(DimTask::Register, &big.encode());
    assert_eq!(c.status, Status::INSUFFICIENT_DISCOVERY_RESOURCES);
    assert_eq!(c.dw0, off::NUMENT);

    // More data than a DIM may carry, refused before any of it moves.
    let mut sqe = Sqe::new(admin::DISCOVERY_INFO_MGMT, CommandId(9));
    sqe.set_sgl_transport(nvmf_target::MAX_DIM_DATA + 4);
    let c = h2.cmd(sqe, &[]).0;
    assert_eq!(c.status, Status::INSUFFICIENT_DISCOVERY_RESOURCES);
}

/// Every malformed payload with its status and DW0 (the offset of the field at fault).
#[test]
fn dim_bad_payloads() {
    let t = target();
    let mut h = disc(&t, HOSTNQN);
    let good = host_dim("h");
    type Edit = fn(&mut Vec<u8>);
    let put = |b: &mut Vec<u8>, at: usize, v: &[u8]| b[at..at + v.len()].copy_from_slice(v);
    let _ = put;
    let cases: Vec<(&str, Edit, Status, u32)> = vec![
        (
            "short",
            |b| b.truncate(512),
            Status::INVALID_FIELD,
            off::TDL,
        ),
        (
            "tdl",
            |b| b[0..4].copy_from_slice(&9u32.to_le_bytes()),
            Status::INVALID_FIELD,
            off::TDL,
        ),
        ("nument", |b| b[8] = 5, Status::INVALID_FIELD, off::NUMENT),
        ("entfmt", |b| b[16] = 7, Status::INVALID_FIELD, off::ENTFMT),
        ("etype", |b| b[18] = 9, Status::INVALID_FIELD, off::ETYPE),
        (
            "eid",
            |b| b[24..28].copy_from_slice(b"xyz."),
            Status::INVALID_FIELD,
            off::EID,
        ),
        ("ename", |b| b[280] = 1, Status::INVALID_FIELD, off::ENAME),
        ("trtype", |b| b[1024] = 0, Status::INVALID_FIELD, 1024),
        ("tel", |b| b[2048] = 3, Status::INVALID_FIELD, 2048),
        (
            "entry for another host",
            |b| b[1024 + 256 + 4] = b'Z',
            Status::INVALID_DISCOVERY_INFO,
            1280,
        ),
        (
            "eid of another host",
            |b| {
                // EID and the entry's NQN both name another host: consistent, but not this one.
                b[24 + 60] = b'f';
                b[1024 + 256 + 60] = b'f';
            },
            Status::INVALID_DISCOVERY_INFO,
            off::EID,
        ),
    ];
    for (name, edit, status, dw0) in cases {
        let mut b = good.clone();
        edit(&mut b);
        let c = h.dim(DimTask::Register, &b);
        assert_eq!((c.status, c.dw0), (status, dw0), "{name}");
    }
    // Reserved task.
    let mut sqe = Sqe::new(admin::DISCOVERY_INFO_MGMT, CommandId(6));
    sqe.set_cdw(10, 7);
    sqe.set_sgl_icd(good.len() as u32);
    assert_eq!(h.cmd(sqe, &good).0.status, Status::INVALID_FIELD);
    assert!(t.dim_registrations().is_empty());
}

/// An admin opcode we do not implement is Invalid Command Opcode even when it carries
/// in-capsule data (not Data SGL Length Invalid, which told stafd "registration error" when
/// DIM did not exist yet).
#[test]
fn unknown_admin_opcodes_with_data_are_invalid_opcode() {
    let t = target();
    for (sub, first) in [(DISCOVERY_NQN, 0xC1u8), (NQN, 0xC1), (NQN, 0x0D)] {
        let mut h = Host::new(&t, addr("10.77.0.1:4420"), sub, HOSTNQN);
        assert!(h.connect(0, 0xFFFF).status.is_success());
        h.enable();
        let mut sqe = Sqe::new(first, CommandId(9));
        sqe.set_sgl_icd(64);
        let (c, _) = h.cmd(sqe, &[0u8; 64]);
        assert_eq!(c.status, Status::INVALID_OPCODE, "{sub} {first:#x}");
    }
}

/// A DIM registration of a discovery controller (ETYPE DDC) announcing `at`.
fn ddc_dim(eid: &str, at: &str) -> Vec<u8> {
    DimData::discovery_controller(EntityType::Ddc, eid, "box", "ebof", &[addr(at)]).encode()
}

/// A connected discovery controller of `hostnqn` whose connection comes from `peer`.
fn disc_from(t: &Arc<Target>, hostnqn: &str, peer: &str) -> Host {
    let mut h = disc(t, hostnqn);
    h.q.set_peer(addr(peer));
    h
}

/// C1: a CDC refuses pull registration from a discovery controller it does not trust: the
/// sender gets Access Denied, nothing is registered or announced, the refusal is counted.
/// Host registrations are not the CDC's to admit.
#[test]
fn dim_pull_registration_needs_the_cdcs_admission() {
    let t = target();
    let cdc = Arc::new(FakeCdc::default());
    *cdc.entries.lock().unwrap() = Some(Arc::new(vec![]));
    *cdc.deny.lock().unwrap() = Some(DimDenial::Untrusted);
    t.set_central(Some(cdc.clone()));
    let mut h = disc_from(&t, HOSTNQN, "10.77.0.66:40000");
    let c = h.dim(
        DimTask::Register,
        &ddc_dim("nqn.2026-11.io.evil:ddc", "10.77.0.66:8009"),
    );
    assert_eq!(c.status, Status::ACCESS_DENIED, "{c:?}");
    assert_eq!(c.dw0, off::EID);
    assert!(t.dim_registrations().is_empty());
    assert!(cdc.registered.lock().unwrap().is_empty());
    assert_eq!(
        t.events
            .dim_refusals
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    // No room at the CDC: Insufficient Discovery Resources.
    *cdc.deny.lock().unwrap() = Some(DimDenial::Full);
    let c = h.dim(
        DimTask::Register,
        &ddc_dim("nqn.2026-11.io.evil:ddc", "10.77.0.66:8009"),
    );
    assert_eq!(c.status, Status::INSUFFICIENT_DISCOVERY_RESOURCES);
    // A host registering itself is not asked about.
    let n = cdc.admits.lock().unwrap().len();
    assert!(h.dim(DimTask::Register, &host_dim("h")).status.is_success());
    assert_eq!(cdc.admits.lock().unwrap().len(), n);
    // Admitted: registered, marked so, unauthenticated (no DH-HMAC-CHAP here).
    *cdc.deny.lock().unwrap() = None;
    let c = h.dim(
        DimTask::Register,
        &ddc_dim("nqn.2026-11.io.ok:ddc", "10.77.0.66:8009"),
    );
    assert!(c.status.is_success(), "{c:?}");
    let r = t
        .dim_registrations()
        .into_iter()
        .find(|r| r.entity_nqn == "nqn.2026-11.io.ok:ddc")
        .unwrap();
    assert!(r.admitted && !r.authenticated, "{r:?}");
}

/// C2/C3: a discovery controller's registration is replaced (the CDC is told what it
/// replaces) or removed only from the address that made it: the announcer's host NQN and EID
/// are easy to guess.
#[test]
fn dim_ddc_registration_changes_only_from_its_origin() {
    let t = target();
    let cdc = Arc::new(FakeCdc::default());
    *cdc.entries.lock().unwrap() = Some(Arc::new(vec![]));
    t.set_central(Some(cdc.clone()));
    let ddc = "nqn.2026-11.io.ebof:ddc:10.77.0.20:8009";
    let mut real = disc_from(&t, ddc, "10.77.0.20:50000");
    assert!(
        real.dim(DimTask::Register, &ddc_dim(ddc, "10.77.0.20:8009"))
            .status
            .is_success()
    );
    let mut forger = disc_from(&t, ddc, "10.77.0.99:50000");
    for task in [DimTask::Deregister, DimTask::Update, DimTask::Register] {
        let c = forger.dim(task, &ddc_dim(ddc, "10.77.0.99:8009"));
        assert_eq!(c.status, Status::ACCESS_DENIED, "{task:?}");
    }
    assert_eq!(t.dim_registrations().len(), 1);
    assert!(cdc.deregistered.lock().unwrap().is_empty());
    // The real one moves its port: the CDC hears old and new together.
    assert!(
        real.dim(DimTask::Register, &ddc_dim(ddc, "10.77.0.20:8010"))
            .status
            .is_success()
    );
    let rep = cdc.replaced.lock().unwrap().clone();
    assert_eq!(rep.len(), 1);
    assert_eq!(rep[0].0.entries[0].trsvcid, "8009");
    assert_eq!(rep[0].1.entries[0].trsvcid, "8010");
    assert!(
        real.dim(DimTask::Deregister, &ddc_dim(ddc, "10.77.0.20:8010"))
            .status
            .is_success()
    );
    assert!(t.dim_registrations().is_empty());
    // An announcer that moved: once its old connection is gone it registers again from its
    // new address.
    assert!(
        real.dim(DimTask::Register, &ddc_dim(ddc, "10.77.0.20:8009"))
            .status
            .is_success()
    );
    drop(real);
    let c = forger.dim(DimTask::Register, &ddc_dim(ddc, "10.77.0.99:8009"));
    assert!(c.status.is_success(), "{c:?}");
    assert_eq!(
        t.dim_registrations()[0].peer,
        Some(addr("10.77.0.99:50000"))
    );
}

/// C3: self-declared host NQNs cannot fill the registry against a real announcer: a cap per
/// source address, room kept for admitted pull registrations, and stale registrations of
/// hosts that went away make room.
#[test]
fn dim_registry_flood_leaves_room_and_stale_registrations_go() {
    let t = target();
    let cdc = Arc::new(FakeCdc::default());
    *cdc.entries.lock().unwrap() = Some(Arc::new(vec![]));
    t.set_central(Some(cdc.clone()));
    let nqn = |p: usize, i: usize| format!("nqn.2026-11.io.flood:p{p}-h{i}");
    let reg = |h: &mut Host| {
        let n = h.hostnqn.clone();
        let d = DimData::host(&n, [7; 16], "x", "y", None, None).encode();
        h.dim(DimTask::Register, &d).status
    };
    let mut hosts = Vec::new();
    // One source address: MAX_DIM_PER_PEER, then no more.
    for i in 0..=MAX_DIM_PER_PEER {
        let mut h = disc_from(&t, &nqn(0, i), "10.78.0.1:1000");
        let st = reg(&mut h);
        if i < MAX_DIM_PER_PEER {
            assert!(st.is_success(), "{i}: {st:?}");
        } else {
            assert_eq!(st, Status::INSUFFICIENT_DISCOVERY_RESOURCES);
        }
        hosts.push(h);
    }
    // Many source addresses: up to the room not reserved.
    let free = MAX_DIM_TOTAL - MAX_DIM_RESERVED;
    let mut p = 1;
    while t.dim_registrations().len() < free {
        for i in 0..MAX_DIM_PER_PEER.min(free - t.dim_registrations().len()) {
            let mut h = disc_from(&t, &nqn(p, i), &format!("10.78.{p}.1:1000"));
            assert!(reg(&mut h).is_success());
            hosts.push(h);
        }
        p += 1;
    }
    let mut late = disc_from(&t, &nqn(999, 0), "10.79.0.1:1000");
    assert_eq!(reg(&mut late), Status::INSUFFICIENT_DISCOVERY_RESOURCES);
    // A real announcer (admitted by the CDC) still gets in.
    let ddc = "nqn.2026-11.io.ebof:ddc:10.77.0.20:8009";
    let mut real = disc_from(&t, ddc, "10.77.0.20:50000");
    let c = real.dim(DimTask::Register, &ddc_dim(ddc, "10.77.0.20:8009"));
    assert!(c.status.is_success(), "{c:?}");
    // The flooding hosts go away; once their registrations are stale they make room.
    drop(hosts);
    late.now += DIM_STALE;
    assert!(reg(&mut late).is_success());
    let expired = cdc.deregistered.lock().unwrap().len();
    assert_eq!(expired, free, "every stale registration dropped");
    // The announcer, still connected, kept its registration.
    assert!(t.dim_registrations().iter().any(|r| r.entity_nqn == ddc));
}

/// A discovery controller authenticates the hosts that have a key (as `nvme discover
/// --dhchap-secret` expects of nvmet): nothing but AUTH_Send / AUTH_Receive runs until it
/// did, and its DIM registrations are marked authenticated. Hosts without a key do not.
#[test]
fn discovery_controllers_authenticate_hosts_with_keys() {
    use nvmf_target::auth::{
        AuthCmdError, AuthPolicy, AuthProgress, AuthSession, CONNECT_AUTHREQ_ATR, SECP_DHCHAP,
    };
    struct Once(AuthProgress);
    impl AuthSession for Once {
        fn send(&mut self, _: &[u8]) -> Result<(), AuthCmdError> {
            self.0 = AuthProgress::Succeeded;
            Ok(())
        }
        fn receive(&mut self, _: u32) -> Result<Vec<u8>, AuthCmdError> {
            Ok(vec![0; 8])
        }
        fn progress(&self) -> AuthProgress {
            self.0
        }
    }
    const KEYED: &str = "nqn.2026-11.io.example:keyed";
    struct Keyed(Mutex<Vec<String>>);
    impl AuthPolicy for Keyed {
        fn session(&self, hostnqn: &str, subnqn: &str, _: u16) -> Option<Box<dyn AuthSession>> {
            self.0.lock().unwrap().push(subnqn.into());
            (hostnqn == KEYED).then(|| Box::new(Once(AuthProgress::InProgress)) as _)
        }
    }
    let t = target();
    let policy = Arc::new(Keyed(Mutex::new(Vec::new())));
    t.set_auth_policy(Some(policy.clone()));
    // No key: as before.
    let mut h = Host::new(&t, addr("10.77.0.1:4420"), DISCOVERY_NQN, HOSTNQN);
    let c = h.connect(0, 0xFFFF);
    assert!(c.status.is_success());
    assert_eq!(c.dw0 & CONNECT_AUTHREQ_ATR, 0);
    h.enable();
    assert_eq!(policy.0.lock().unwrap()[0], DISCOVERY_NQN);
    // A key: authentication required first.
    let mut k = Host::new(&t, addr("10.77.0.1:4420"), DISCOVERY_NQN, KEYED);
    let c = k.connect(0, 0xFFFF);
    assert!(c.status.is_success());
    assert_ne!(c.dw0 & CONNECT_AUTHREQ_ATR, 0, "AUTHREQ.ATR");
    let mut sqe = Sqe::new(admin::GET_LOG_PAGE, CommandId(4));
    sqe.set_cdw(10, u32::from(lid::DISCOVERY) | ((1024 / 4 - 1) << 16));
    sqe.set_sgl_transport(1024);
    assert_eq!(k.cmd(sqe, &[]).0.status, Status::AUTH_REQUIRED);
    let mut sqe = Sqe::new(admin::FABRICS, CommandId(8));
    sqe.set_fctype(fctype::AUTH_SEND);
    sqe.set_cdw(10, u32::from_le_bytes([0, 1, 1, SECP_DHCHAP]));
    sqe.set_cdw(11, 8);
    sqe.set_sgl_icd(8);
    assert!(k.cmd(sqe, &[0; 8]).0.status.is_success());
    k.enable();
    assert!(!k.log().1.is_empty());
    let c = k.dim(DimTask::Register, &ddc_dim(KEYED, "10.77.0.30:8009"));
    assert!(c.status.is_success(), "{c:?}");
    assert!(t.dim_registrations()[0].authenticated);
}

/// Found by the `dim_registry` fuzz target: a registration registered again from another
/// address counts there, so moving registrations cannot pass the per-address cap.
#[test]
fn dim_reregistration_from_another_address_counts_there() {
    let t = target();
    let reg = |h: &mut Host| {
        let n = h.hostnqn.clone();
        let d = DimData::host(&n, [7; 16], "x", "y", None, None).encode();
        h.dim(DimTask::Register, &d).status
    };
    let nqn = |p: usize, i: usize| format!("nqn.2026-11.io.move:p{p}-h{i}");
    let mut keep = Vec::new();
    for p in 0..2 {
        for i in 0..MAX_DIM_PER_PEER {
            let mut h = disc_from(&t, &nqn(p, i), &format!("10.80.0.{p}:1000"));
            assert!(reg(&mut h).is_success());
            keep.push(h);
        }
    }
    // Address 1 is full: host p0-h0 registering again from there is refused and keeps its
    // registration from address 0.
    let mut moved = disc_from(&t, &nqn(0, 0), "10.80.0.1:2000");
    assert_eq!(reg(&mut moved), Status::INSUFFICIENT_DISCOVERY_RESOURCES);
    let r = t
        .dim_registrations()
        .into_iter()
        .find(|r| r.hostnqn == nqn(0, 0))
        .unwrap();
    assert_eq!(r.peer, Some(addr("10.80.0.0:1000")));
    // From its own address it still may.
    let mut again = disc_from(&t, &nqn(0, 0), "10.80.0.0:3000");
    assert!(reg(&mut again).is_success());
}
