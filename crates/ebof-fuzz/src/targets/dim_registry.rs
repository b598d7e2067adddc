//! Fuzz target `dim_registry`: sequences of Discovery Information Management tasks (register,
//! update, deregister; hosts and discovery controllers) from many identities — host NQNs,
//! source addresses, authenticated or not — against a target that is a Central Discovery
//! Controller, through the real queue state machine (`nvmf_target::Queue`: Connect, DH-HMAC-
//! CHAP gate, the DIM command) and the real registry (`Target::dim_apply`).
//!
//! The CDC is a model with the admission rules of `ebof-fleet` (trusted source addresses and
//! NQNs, authenticated connections, a member limit) that keeps the announced addresses by
//! registration the way `ebof-fleet` does from the callbacks (`registered`, `replaced`,
//! `deregistered`). After every step:
//! - the registry's bounds hold: total, per host NQN, per source address for registrations
//!   that were not admitted, the room kept for admitted ones;
//! - a discovery controller's registration is admitted only from a trusted identity, and
//!   changes only from its origin address or an authenticated connection;
//! - what the callbacks announced is exactly what the admitted discovery controllers'
//!   registrations in the registry hold (no leak on replace, nothing left on deregister or
//!   expiry), within the member limit.
//!
//! Input: a sequence of 4-byte steps `[op, who, what, arg]`:
//! - `op & 7`: 0–2 register / update / deregister as a discovery controller, 3–4 register /
//!   deregister as a host, 5 drop the identity's connection, 6 advance the clock by
//!   [`nvmf_target::DIM_STALE`], 7 toggle trust of the identity's address (`arg & 1`) or NQN;
//! - `who`: the identity — host NQN `who & 31` (values 24–31 are authenticated with
//!   DH-HMAC-CHAP), source address `10.0.0.(who >> 5)`; a register from a new NQN index
//!   `arg` (op 3 with `who & 31 == 0`) floods a fresh host NQN instead;
//! - `what`: entity NQN choice and the announced addresses (`what & 3` + 1 of them, from a
//!   pool of eight);
//! - `arg`: extra bits (port choice, flood index).

use crate::Features;
use nvme_spec::dim::{DimData, DimTask, EntityType};
use nvme_spec::fabrics::{ConnectCmd, ConnectData, PropertyCmd, cc, prop};
use nvme_spec::opcode::{admin, fctype};
use nvme_spec::{CommandId, ControllerId, Cqe, QueueId, Sqe, Status};
use nvmf_target::auth::{AuthCmdError, AuthPolicy, AuthProgress, AuthSession, SECP_DHCHAP};
use nvmf_target::{
    C2hData, CentralDiscovery, DimDenial, DimRegistration, Disposition, MAX_DIM_PER_HOST,
    MAX_DIM_PER_PEER, MAX_DIM_RESERVED, MAX_DIM_TOTAL, Queue, Target,
};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Most steps of one input.
const MAX_STEPS: usize = 600;
/// Members the model CDC admits at most.
const MAX_MEMBERS: usize = 6;

fn hostnqn(i: u8) -> String {
    format!("nqn.2026-11.io.fuzz:id{i}")
}

fn authenticated(i: u8) -> bool {
    i >= 24
}

/// A DH-HMAC-CHAP session that succeeds on the first AUTH_Send (the exchange itself is the
/// `auth` target's business).
struct Pass(AuthProgress);

impl AuthSession for Pass {
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

/// Hosts 24–31 have a key.
struct Keys;

impl AuthPolicy for Keys {
    fn session(&self, hostnqn: &str, _: &str, _: u16) -> Option<Box<dyn AuthSession>> {
        (24..32)
            .any(|i| hostnqn == self::hostnqn(i))
            .then(|| Box::new(Pass(AuthProgress::InProgress)) as Box<dyn AuthSession>)
    }
}

/// The model CDC: ebof-fleet's admission rules and announced-address bookkeeping.
#[derive(Debug, Default)]
struct Model {
    trusted_ips: BTreeSet<IpAddr>,
    trusted_nqns: BTreeSet<String>,
    /// Announced addresses by registration key.
    announced: BTreeMap<(String, String), BTreeSet<SocketAddr>>,
    /// Callbacks that broke the CDC's expectations, in words.
    violations: Vec<String>,
}

impl Model {
    fn trusts(&self, reg: &DimRegistration) -> bool {
        reg.authenticated
            || reg.peer.is_some_and(|p| self.trusted_ips.contains(&p.ip()))
            || self.trusted_nqns.contains(&reg.hostnqn)
    }

    fn members(&self) -> BTreeSet<SocketAddr> {
        self.announced.values().flatten().copied().collect()
    }
}

fn addrs_of(reg: &DimRegistration) -> BTreeSet<SocketAddr> {
    if reg.entity_type != EntityType::Ddc {
        return BTreeSet::new();
    }
    reg.entries
        .iter()
        .filter_map(|e| {
            Some(SocketAddr::new(
                e.traddr.trim().parse().ok()?,
                e.trsvcid.trim().parse().ok()?,
            ))
        })
        .collect()
}

#[derive(Debug, Default)]
struct FakeCdc(Mutex<Model>);

impl FakeCdc {
    fn model(&self) -> std::sync::MutexGuard<'_, Model> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl CentralDiscovery for FakeCdc {
    fn host_seen(&self, _: &str) {}
    fn entries(&self, _: &str) -> Option<Arc<Vec<nvme_spec::discovery::DiscoveryLogEntry>>> {
        Some(Arc::new(Vec::new()))
    }
    fn admit(&self, task: DimTask, reg: &DimRegistration) -> Result<(), DimDenial> {
        let m = self.model();
        if !m.trusts(reg) {
            return Err(DimDenial::Untrusted);
        }
        if task != DimTask::Deregister {
            let members = m.members();
            let new = addrs_of(reg).difference(&members).count();
            if new > 0 && members.len() + new > MAX_MEMBERS {
                return Err(DimDenial::Full);
            }
        }
        Ok(())
    }
    fn registered(&self, reg: &DimRegistration) {
        let a = addrs_of(reg);
        let mut m = self.model();
        if !reg.admitted && !a.is_empty() {
            m.violations
                .push(format!("announced without admission: {}", reg.hostnqn));
        }
        let key = (reg.hostnqn.clone(), reg.entity_nqn.clone());
        if m.announced.contains_key(&key) {
            m.violations
                .push(format!("registered over a live key {key:?} (not replaced)"));
        }
        if !a.is_empty() {
            m.announced.insert(key, a);
        }
    }
    fn replaced(&self, old: &DimRegistration, new: &DimRegistration) {
        let key = (old.hostnqn.clone(), old.entity_nqn.clone());
        self.model().announced.remove(&key);
        self.registered(new);
    }
    fn deregistered(&self, reg: &DimRegistration) {
        let key = (reg.hostnqn.clone(), reg.entity_nqn.clone());
        self.model().announced.remove(&key);
    }
}

/// One identity's discovery connection.
struct Conn {
    q: Queue,
    now: Instant,
}

fn drain(q: &mut Queue) -> Vec<Cqe> {
    let mut out = Vec::new();
    q.drain_completions(|cqe, _: C2hData, _| {
        out.push(*cqe);
        Ok(())
    });
    q.output_sent();
    out
}

fn cmd(c: &mut Conn, sqe: &Sqe, data: &[u8]) -> Option<Cqe> {
    match c.q.handle_command(sqe, data, c.now) {
        Disposition::Done => {}
        Disposition::Execute { slot } => c.q.execute_inline(slot),
        _ => return None,
    }
    drain(&mut c.q).pop()
}

/// Connect identity `who` to the discovery NQN from its address, authenticate when it has a
/// key, enable.
fn connect(t: &Arc<Target>, who: u8, nqn: &str, now: Instant) -> Option<Conn> {
    let local = SocketAddr::from(([10, 0, 0, 254], 8009));
    let mut c = Conn {
        q: Queue::new(t.clone(), local, now),
        now,
    };
    c.q.set_peer(SocketAddr::from(([10, 0, 0, who >> 5], 40000)));
    let mut sqe = ConnectCmd {
        recfmt: 0,
        qid: QueueId(0),
        sqsize: 31,
        cattr: 0,
        kato: 0,
    }
    .to_sqe(CommandId(1));
    sqe.set_sgl_icd(1024);
    let data = ConnectData {
        hostid: [who; 16],
        cntlid: ControllerId(0xFFFF),
        subnqn: nvme_spec::DISCOVERY_NQN.into(),
        hostnqn: nqn.into(),
    };
    let cqe = cmd(&mut c, &sqe, &data.encode())?;
    if !cqe.status.is_success() {
        return None;
    }
    if cqe.dw0 & nvmf_target::auth::CONNECT_AUTHREQ_ATR != 0 {
        let mut sqe = Sqe::new(admin::FABRICS, CommandId(2));
        sqe.set_fctype(fctype::AUTH_SEND);
        sqe.set_cdw(10, u32::from_le_bytes([0, 1, 1, SECP_DHCHAP]));
        sqe.set_cdw(11, 8);
        sqe.set_sgl_icd(8);
        cmd(&mut c, &sqe, &[0; 8])?;
    }
    let mut sqe = Sqe::new(admin::FABRICS, CommandId(3));
    sqe.set_fctype(fctype::PROPERTY_SET);
    PropertyCmd {
        size8: false,
        ofst: prop::CC,
        value: u64::from(cc::enable_value(0)),
    }
    .encode_into(&mut sqe);
    cmd(&mut c, &sqe, &[])?;
    Some(c)
}

fn dim(c: &mut Conn, task: DimTask, data: &DimData) -> Option<Status> {
    let bytes = data.encode();
    let mut sqe = Sqe::new(admin::DISCOVERY_INFO_MGMT, CommandId(4));
    sqe.set_cdw(10, task.cdw10());
    sqe.set_sgl_icd(bytes.len() as u32);
    cmd(c, &sqe, &bytes).map(|c| c.status)
}

/// The pool of announced addresses.
fn pool(i: u8) -> SocketAddr {
    SocketAddr::from(([10, 0, 1, i % 4], 8009 + u16::from(i / 4 % 2)))
}

/// One input (see the module docs).
pub fn run(data: &[u8], feat: &mut Features) {
    let t = Arc::new(Target::new(
        vec![],
        vec![],
        Default::default(),
        Instant::now(),
    ));
    t.set_auth_policy(Some(Arc::new(Keys)));
    let cdc = Arc::new(FakeCdc::default());
    t.set_central(Some(cdc.clone()));
    let start = Instant::now();
    let mut now = start;
    // Connections by (host NQN, source address index).
    let mut conns: HashMap<(String, u8), Conn> = HashMap::new();
    for step in data.chunks_exact(4).take(MAX_STEPS) {
        let [op, who, what, arg] = [step[0], step[1], step[2], step[3]];
        let id = who & 31;
        let nqn = if op & 7 == 3 && id == 0 {
            format!("nqn.2026-11.io.fuzz:flood{arg}-{}", who >> 5)
        } else {
            hostnqn(id)
        };
        match op & 7 {
            5 => {
                conns.remove(&(nqn, who >> 5));
                feat.add(1, 5);
                continue;
            }
            6 => {
                now += nvmf_target::DIM_STALE;
                for c in conns.values_mut() {
                    c.now = now;
                }
                feat.add(1, 6);
                continue;
            }
            7 => {
                let mut m = cdc.model();
                if arg & 1 == 0 {
                    let ip = IpAddr::from([10, 0, 0, who >> 5]);
                    if !m.trusted_ips.remove(&ip) {
                        m.trusted_ips.insert(ip);
                    }
                } else if !m.trusted_nqns.remove(&nqn) {
                    m.trusted_nqns.insert(nqn.clone());
                }
                feat.add(1, 7);
                continue;
            }
            _ => {}
        }
        let key = (nqn.clone(), who >> 5);
        if !conns.contains_key(&key) {
            let Some(c) = connect(&t, who, &nqn, now) else {
                feat.add(2, 0);
                continue;
            };
            conns.insert(key.clone(), c);
        }
        // Another discovery connection of this host NQN, from another address.
        let others = conns.keys().any(|(n, p)| *n == nqn && *p != who >> 5);
        let Some(c) = conns.get_mut(&key) else {
            continue;
        };
        let (task, data) = match op & 7 {
            0..=2 => {
                let task =
                    [DimTask::Register, DimTask::Update, DimTask::Deregister][usize::from(op & 7)];
                let eid = if what & 0x80 == 0 {
                    nqn.clone()
                } else {
                    hostnqn((what >> 2) & 31)
                };
                let addrs: Vec<SocketAddr> = (0..=(what & 3))
                    .map(|k| pool(arg.wrapping_add(k)))
                    .collect();
                (
                    task,
                    DimData::discovery_controller(EntityType::Ddc, &eid, "box", "ebof", &addrs),
                )
            }
            _ => {
                let task = if op & 7 == 3 {
                    DimTask::Register
                } else {
                    DimTask::Deregister
                };
                (task, DimData::host(&nqn, [who; 16], "h", "v", None, None))
            }
        };
        let before = t.dim_registrations();
        let trusted_before = cdc.model().trusts(&DimRegistration {
            hostnqn: nqn.clone(),
            hostid: [0; 16],
            entity_type: EntityType::Ddc,
            entity_nqn: String::new(),
            name: String::new(),
            version: String::new(),
            symname: None,
            entries: vec![],
            local: SocketAddr::from(([0; 4], 0)),
            peer: Some(SocketAddr::from(([10, 0, 0, who >> 5], 40000))),
            registered: now,
            updated: now,
            authenticated: authenticated(id),
            admitted: false,
        });
        let Some(st) = dim(c, task, &data) else {
            feat.add(2, 1);
            continue;
        };
        feat.add(3, u64::from(st.sct) << 8 | u64::from(st.sc));
        feat.add(4, u64::from(op & 7));
        let after = t.dim_registrations();
        if !st.is_success() {
            // A refusal adds or changes nothing (only stale registrations may have gone).
            assert!(
                after.iter().all(|r| before.contains(r)),
                "a refused task changed the registry"
            );
        }
        let ddc = data.etype == EntityType::Ddc;
        if ddc && st.is_success() {
            assert!(trusted_before, "an untrusted DDC task succeeded: {nqn}");
            // The origin rule: a change of an existing DDC registration came from its
            // address, an authenticated connection, or while no other connection of its host
            // NQN exists (the announcer moved).
            let key = (nqn.clone(), data.eid.clone());
            if let Some(old) = before
                .iter()
                .find(|r| (r.hostnqn.clone(), r.entity_nqn.clone()) == key)
            {
                assert!(
                    authenticated(id)
                        || !others
                        || old.peer.map(|p| p.ip()) == Some(IpAddr::from([10, 0, 0, who >> 5])),
                    "a DDC registration changed from another address"
                );
            }
        }
        check(&t, &cdc);
        // How full the registry and the member set are: new levels are new features.
        feat.add(5, (after.len() / 16) as u64);
        feat.add(
            6,
            cdc.model().members().len() as u64 | u64::from(op & 7) << 8,
        );
    }
    drop(conns);
    check(&t, &cdc);
}

/// The registry's bounds and the model's agreement with it.
fn check(t: &Target, cdc: &FakeCdc) {
    let regs = t.dim_registrations();
    assert!(regs.len() <= MAX_DIM_TOTAL);
    let mut per_host: HashMap<&str, usize> = HashMap::new();
    let mut per_peer: HashMap<Option<IpAddr>, usize> = HashMap::new();
    let mut others = 0;
    for r in &regs {
        *per_host.entry(&r.hostnqn).or_default() += 1;
        if !r.admitted {
            others += 1;
            *per_peer.entry(r.peer.map(|p| p.ip())).or_default() += 1;
        }
        if r.entity_type == EntityType::Ddc {
            assert!(
                r.admitted,
                "a DDC registration the CDC did not admit: {r:?}"
            );
        }
    }
    assert!(per_host.values().all(|n| *n <= MAX_DIM_PER_HOST));
    assert!(per_peer.values().all(|n| *n <= MAX_DIM_PER_PEER));
    assert!(others <= MAX_DIM_TOTAL - MAX_DIM_RESERVED);
    let m = cdc.model();
    assert!(m.violations.is_empty(), "{:?}", m.violations);
    let want: BTreeMap<(String, String), BTreeSet<SocketAddr>> = regs
        .iter()
        .filter(|r| r.admitted)
        .map(|r| ((r.hostnqn.clone(), r.entity_nqn.clone()), addrs_of(r)))
        .filter(|(_, a)| !a.is_empty())
        .collect();
    assert_eq!(
        m.announced, want,
        "announced addresses out of step with the registry"
    );
    assert!(m.members().len() <= MAX_MEMBERS);
}
