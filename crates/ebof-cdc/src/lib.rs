//! A Central Discovery Controller (NVMe TP 8010): one discovery service that shows each host
//! the NVM subsystems every member of the fleet would show *that host*.
//!
//! [`Cdc::start`] installs itself on a [`Target`] as its [`CentralDiscovery`] (the target then
//! reports DCTYPE 2) and runs on its own thread with a single-threaded tokio runtime:
//!
//! - for every member it keeps a persistent discovery connection (the CDC's own host NQN,
//!   keep-alive, Discovery Log Page Change enabled with Set Features Asynchronous Event
//!   Configuration, one Asynchronous Event Request outstanding — [`nvmf_host`] does that for a
//!   discovery controller connected with a KATO and events), and reconnects with a bounded
//!   exponential backoff when it drops;
//! - members apply their own host lists, so the CDC reads each member's log *as each host*
//!   (a short discovery connection with that host's NQN, like `nvme discover`), for every host
//!   it knows (hosts that connected to the CDC's discovery service, at most
//!   [`CdcConfig::max_hosts`], forgotten after [`CdcConfig::host_idle`] without a connection),
//!   and caches the result per (member, host). It reads again for every known host when the
//!   member raises Discovery Log Page Change or its persistent connection comes back;
//! - only NVM subsystem entries (SUBTYPE 2) are kept from members (their current-discovery and
//!   referral entries point at the members, which a host of the CDC never needs); an entry two
//!   members both return identically is shown once;
//! - a member whose connection is lost keeps its entries until a reconnect fails, then they
//!   leave every view, and come back when it does;
//! - whenever any host's view changes the target's discovery generation counter moves and its
//!   discovery controllers get a Discovery Log Page Change event
//!   ([`Target::discovery_log_changed`]).
//!
//! Who may join: members are configured (`[cdc] members`, the API), or announce themselves by
//! DIM pull registration — admitted only from a discovery controller the CDC trusts
//! ([`CdcConfig::trusted`]: a source address or host NQN, a configured member's address, or a
//! connection that authenticated with DH-HMAC-CHAP), at most [`CdcConfig::max_members`]
//! members in all. An announced member serves only entries that point at its own addresses,
//! leaves when the registrations that announced it are withdrawn, replaced or expire, and
//! leaves after [`CdcConfig::announced_attempts`] failed connection attempts.
//!
//! Bounds against hostile hosts and members: new hosts are admitted at most
//! [`CdcConfig::new_hosts_per_sec`] (a host not admitted yet keeps CSTS.RDY at 0 and is
//! admitted on a later poll), at most [`CdcConfig::max_first_reads`] first reads run at once,
//! a full host table forgets a host never served (or one idle for
//! [`CdcConfig::host_protect`]) and never a recently active one, a member's log for one host
//! keeps at most [`CdcConfig::max_member_entries`] entries and a view at most
//! [`CdcConfig::max_view_entries`]. Views are computed outside the lock the reactors take and
//! swapped in.
//!
//! A host seen for the first time has no view until the first reads complete (each bounded by
//! [`CdcConfig::fetch_timeout`], so a member that does not answer delays it by at most that):
//! meanwhile [`CentralDiscovery::entries`] answers `None` and the target holds CSTS.RDY at 0.
//! Every [`CentralDiscovery`] method only takes a short lock and returns at once.

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod announce;
pub use announce::{AnnounceConfig, Announcer};
pub use nvmf_host::DhchapKeys;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant, SystemTime};

use nvme_spec::dim::{DimTask, EntityType};
use nvme_spec::discovery::{DiscoveryLogEntry, subtype};
use nvme_spec::log::lid;
use nvmf_host::{Controller, HostConfig};
use nvmf_target::{CentralDiscovery, DimDenial, DimRegistration, Target};
use tokio::sync::mpsc;

/// The port of a member's discovery service when none is given (the NVMe-oF discovery port).
pub const DEFAULT_MEMBER_PORT: u16 = 8009;

/// Host NQN of the CDC's connections when nothing better is known.
const FALLBACK_HOSTNQN: &str = "nqn.2026-11.io.ebof:cdc";

/// How many per-host reads of one member run at once.
const FETCH_PARALLEL: usize = 16;

/// First reconnect delay; doubled after every failure up to [`CdcConfig::backoff_max`].
const BACKOFF_MIN: Duration = Duration::from_millis(250);

/// Who may announce a discovery controller to the CDC (`[cdc] trusted`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Trusted {
    /// The source IP address of the registering discovery connection.
    Address(IpAddr),
    /// The host NQN of the registering discovery connection. Host NQNs are self-declared:
    /// give this NQN a DH-HMAC-CHAP secret in the CDC's `[[hosts]]` so that the discovery
    /// connection must prove it.
    Nqn(String),
}

impl std::fmt::Display for Trusted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Trusted::Address(a) => write!(f, "{a}"),
            Trusted::Nqn(n) => f.write_str(n),
        }
    }
}

/// How a CDC runs.
#[derive(Clone, Debug)]
pub struct CdcConfig {
    /// The members' discovery services.
    pub members: Vec<SocketAddr>,
    /// The host NQN of the CDC's persistent connections to its members ([`default_hostnqn`]).
    pub hostnqn: String,
    /// Keep Alive Timeout of the persistent connections (default 30 s).
    pub kato: Duration,
    /// Bound on one read of a member's log (connect, read, disconnect): default 2 s. A first-time
    /// host waits at most about this long for its view.
    pub fetch_timeout: Duration,
    /// Longest delay between two reconnect attempts to a member (default 10 s).
    pub backoff_max: Duration,
    /// Hosts remembered at most (default 1024); the one seen least recently is forgotten first.
    pub max_hosts: usize,
    /// A host with no discovery connection to the CDC for this long is forgotten (default
    /// 15 min); it gets a fresh view when it comes back.
    pub host_idle: Duration,
    /// Who may announce itself by DIM besides the configured members and DH-HMAC-CHAP
    /// authenticated connections (default: nobody). Changed live by [`Cdc::set_trusted`].
    pub trusted: Vec<Trusted>,
    /// Most members, configured and announced (default 256): an announcement beyond it is
    /// refused with Insufficient Discovery Resources. Configured members are never refused.
    pub max_members: usize,
    /// An announced member that fails this many connection attempts in a row leaves
    /// (default 5); it comes back when it registers again.
    pub announced_attempts: u32,
    /// Most NVM subsystem entries kept of one member's log for one host (default 512).
    pub max_member_entries: usize,
    /// Most entries of one host's view (default 1024, what a discovery log read holds).
    pub max_view_entries: usize,
    /// Most first reads (of every member, for a new host) running at once (default 16); at
    /// most four times as many new hosts wait for their first view, later ones are admitted
    /// on a later poll.
    pub max_first_reads: usize,
    /// New hosts admitted per second, with a burst of as many (default 32). A host not
    /// admitted yet sees CSTS.RDY 0 and is admitted on a later poll.
    pub new_hosts_per_sec: u32,
    /// A full host table never forgets a host served within this long (default 60 s): a
    /// flood of new host NQNs waits instead of evicting real hosts' views.
    pub host_protect: Duration,
    /// DH-HMAC-CHAP secrets by host NQN (the CDC's `[[hosts]]` for every subsystem or the
    /// discovery NQN): used when a member asks for authentication of a read made as that host
    /// (members authenticate discovery of hosts that have secrets), and of the CDC's own
    /// persistent connections (its [`CdcConfig::hostnqn`]). Without one, a member that
    /// requires it gives the CDC no view for that host.
    pub host_keys: HashMap<String, DhchapKeys>,
}

impl CdcConfig {
    /// Defaults for members `members` and host NQN `hostnqn`.
    pub fn new(members: Vec<SocketAddr>, hostnqn: String) -> CdcConfig {
        CdcConfig {
            members,
            hostnqn,
            kato: Duration::from_secs(30),
            fetch_timeout: Duration::from_secs(2),
            backoff_max: Duration::from_secs(10),
            max_hosts: 1024,
            host_idle: Duration::from_secs(15 * 60),
            trusted: Vec::new(),
            max_members: 256,
            announced_attempts: 5,
            max_member_entries: 512,
            max_view_entries: 1024,
            max_first_reads: 16,
            new_hosts_per_sec: 32,
            host_protect: Duration::from_secs(60),
            host_keys: HashMap::new(),
        }
    }
}

/// A stable host NQN for the CDC's own connections: the machine's `/etc/machine-id` as a UUID
/// NQN (`nqn.2014-08.org.nvmexpress:uuid:…`), else `nqn.2026-11.io.ebof:cdc`.
pub fn default_hostnqn() -> String {
    std::fs::read_to_string("/etc/machine-id")
        .ok()
        .and_then(|s| machine_id_nqn(s.trim()))
        .unwrap_or_else(|| FALLBACK_HOSTNQN.to_string())
}

/// `nqn.2014-08.org.nvmexpress:uuid:` + the 32 hex digits of a machine id as a UUID.
fn machine_id_nqn(id: &str) -> Option<String> {
    if id.len() != 32 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let h = id.to_ascii_lowercase();
    Some(format!(
        "nqn.2014-08.org.nvmexpress:uuid:{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    ))
}

/// A Host Identifier for `hostnqn`, the same every time (two FNV-1a hashes): the CDC reads a
/// member's log on behalf of a host whose real Host Identifier it does not know.
fn derived_hostid(hostnqn: &str) -> [u8; 16] {
    let fnv = |seed: u64| {
        hostnqn.bytes().fold(seed, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01B3)
        })
    };
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&fnv(0xcbf2_9ce4_8422_2325).to_be_bytes());
    id[8..].copy_from_slice(&fnv(0x6c62_272e_07bb_0142).to_be_bytes());
    id
}

/// What [`Cdc::members`] says of one member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberStatus {
    /// The member's discovery service.
    pub address: SocketAddr,
    /// The persistent discovery connection is up.
    pub connected: bool,
    /// Why the last connection attempt or read failed (cleared on a successful connect).
    pub last_error: Option<String>,
    /// Distinct NVM subsystem entries of this member over every known host's view.
    pub entries: usize,
    /// When what this member shows some host last changed.
    pub last_change: Option<SystemTime>,
    /// It announced itself (a DIM registration as a discovery controller), rather than
    /// being configured or added through the API.
    pub announced: bool,
}

/// A request to the CDC's thread.
enum Cmd {
    /// Read every member's log for this new host.
    HostSeen(String),
    /// Start the member task of this (already recorded) member.
    Add(SocketAddr),
    /// Stop the member task.
    Remove(SocketAddr),
    /// Members left: recompute the views (off the reactor threads) and tell the hosts.
    Refresh,
    /// Stop everything.
    Stop,
}

/// Members' logs for one host, in member order.
type Logs = Vec<Arc<Vec<DiscoveryLogEntry>>>;

/// A DIM registration's key: (host NQN, entity NQN).
type RegKey = (String, String);

/// One member as the CDC knows it.
#[derive(Debug, Default)]
struct Member {
    /// Added by a DIM registration of the member itself rather than configured.
    announced: bool,
    /// The registrations that announce it (announced members leave when none is left).
    owners: BTreeSet<RegKey>,
    /// An announced member's own addresses: only entries pointing at one of them are served.
    own: HashSet<IpAddr>,
    /// Connection attempts failed in a row.
    failures: u32,
    connected: bool,
    /// Its entries count in the views (connected, or lost and not yet failed to reconnect).
    live: bool,
    last_error: Option<String>,
    last_change: Option<SystemTime>,
    /// The member's NVM subsystem entries as each host would see them.
    logs: HashMap<String, Arc<Vec<DiscoveryLogEntry>>>,
}

/// One host that connected to the CDC.
#[derive(Debug)]
struct Host {
    last_seen: Instant,
    /// A view was handed out to it (hosts never served are forgotten first).
    served: bool,
    /// `None` until the first reads for this host are done.
    view: Option<Arc<Vec<DiscoveryLogEntry>>>,
}

#[derive(Debug)]
struct State {
    members: BTreeMap<SocketAddr, Member>,
    hosts: HashMap<String, Host>,
    /// Moves on every change of what the views are made of (members, their liveness, logs).
    epoch: u64,
    trusted: Vec<Trusted>,
    /// Hosts recorded whose first view is not ready yet.
    pending: usize,
    /// New-host admission: tokens left and when they were counted.
    tokens: f64,
    refilled: Instant,
}

/// What makes two entries the same entry (every field), borrowed, for hashing.
#[derive(Hash, PartialEq, Eq)]
struct EntryKey<'a> {
    head: [u8; 4],
    ids: [u16; 4],
    text: [&'a str; 3],
    tsas: [u8; 3],
}

fn entry_key(e: &DiscoveryLogEntry) -> EntryKey<'_> {
    EntryKey {
        head: [e.trtype, e.adrfam, e.subtype, e.treq],
        ids: [e.portid, e.cntlid, e.asqsz, e.eflags],
        text: [&e.trsvcid, &e.subnqn, &e.traddr],
        tsas: [e.tcp_sectype, e.rdma_prtype, e.rdma_cms],
    }
}

/// The union of `logs` (in order), each entry once, at most `max` entries: linear in the
/// entries (a hash set of the ones taken).
fn union_of<'a>(
    logs: impl Iterator<Item = &'a Arc<Vec<DiscoveryLogEntry>>>,
    max: usize,
) -> Vec<DiscoveryLogEntry> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    'all: for log in logs {
        for e in log.iter() {
            if out.len() >= max {
                break 'all;
            }
            if seen.insert(entry_key(e)) {
                out.push(e.clone());
            }
        }
    }
    out
}

impl State {
    fn new(trusted: Vec<Trusted>, burst: u32) -> State {
        State {
            members: BTreeMap::new(),
            hosts: HashMap::new(),
            epoch: 0,
            pending: 0,
            trusted,
            tokens: f64::from(burst),
            refilled: Instant::now(),
        }
    }

    /// The live members' logs for `host`, in member order (cheap: `Arc` clones).
    fn inputs(&self, host: &str) -> Logs {
        self.members
            .values()
            .filter(|m| m.live)
            .filter_map(|m| m.logs.get(host).cloned())
            .collect()
    }

    /// The union of the live members' entries for `host`, in member order, each entry once.
    #[cfg(test)]
    fn union(&self, host: &str) -> Vec<DiscoveryLogEntry> {
        union_of(self.inputs(host).iter(), usize::MAX)
    }

    /// Install `next` as the view of `host` (created when `first`); true when an existing
    /// view changed.
    fn install(&mut self, host: &str, next: Vec<DiscoveryLogEntry>, first: bool) -> bool {
        let Some(h) = self.hosts.get_mut(host) else {
            return false;
        };
        match &h.view {
            Some(v) if **v == next => false,
            Some(_) => {
                h.view = Some(Arc::new(next));
                true
            }
            None if first => {
                h.view = Some(Arc::new(next));
                self.pending = self.pending.saturating_sub(1);
                false
            }
            None => false,
        }
    }

    /// Recompute, under the lock, the view of `host`; see [`State::install`].
    #[cfg(test)]
    fn recompute(&mut self, host: &str, first: bool) -> bool {
        let next = self.union(host);
        self.install(host, next, first)
    }

    /// Recompute, under the lock, every view; true when any changed.
    #[cfg(test)]
    fn recompute_all(&mut self) -> bool {
        let names: Vec<String> = self.hosts.keys().cloned().collect();
        let mut changed = false;
        for h in names {
            changed |= self.recompute(&h, false);
        }
        changed
    }

    /// Is the sender of `reg` a discovery controller this CDC trusts?
    fn trusts(&self, reg: &DimRegistration) -> bool {
        let ip = reg.peer.map(|p| p.ip());
        reg.authenticated
            || self.trusted.iter().any(|t| match t {
                Trusted::Address(a) => Some(*a) == ip,
                Trusted::Nqn(n) => *n == reg.hostnqn,
            })
            || ip.is_some_and(|ip| {
                self.members
                    .iter()
                    .any(|(a, m)| !m.announced && a.ip() == ip)
            })
    }
}

/// What the target's reactors and the CDC's thread share.
#[derive(Debug)]
struct Shared {
    cfg: CdcConfig,
    st: Mutex<State>,
    tx: mpsc::UnboundedSender<Cmd>,
    target: Weak<Target>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Note `hostnqn` as seen; a new host is recorded (forgetting one never served, or one
    /// not served for `host_protect`, when the table is full) and its first reads are queued,
    /// at most `new_hosts_per_sec`. A host not admitted now is admitted on a later call (it
    /// polls CSTS until RDY).
    fn touch(&self, st: &mut State, hostnqn: &str) {
        let now = Instant::now();
        if let Some(h) = st.hosts.get_mut(hostnqn) {
            h.last_seen = now;
            return;
        }
        let rate = f64::from(self.cfg.new_hosts_per_sec.max(1));
        let elapsed = now.saturating_duration_since(st.refilled).as_secs_f64();
        st.tokens = (st.tokens + elapsed * rate).min(rate);
        st.refilled = now;
        // Admitted hosts still waiting for their first view are bounded too (a few rounds of
        // first reads), so the queue of first reads cannot grow while members are slow.
        if st.tokens < 1.0 || st.pending >= self.cfg.max_first_reads.max(1) * 4 {
            return;
        }
        if st.hosts.len() >= self.cfg.max_hosts.max(1) {
            let protect = self.cfg.host_protect;
            let victim = st
                .hosts
                .iter()
                .filter(|(_, h)| !h.served || now.saturating_duration_since(h.last_seen) >= protect)
                .min_by_key(|(_, h)| (h.served, h.last_seen))
                .map(|(n, _)| n.clone());
            match victim {
                Some(old) => forget_host(st, &old),
                None => {
                    crate::refused_host(hostnqn);
                    return;
                }
            }
        }
        st.tokens -= 1.0;
        st.pending += 1;
        st.hosts.insert(
            hostnqn.to_string(),
            Host {
                last_seen: now,
                served: false,
                view: None,
            },
        );
        let _ = self.tx.send(Cmd::HostSeen(hostnqn.to_string()));
    }

    /// A host's view changed: move the CDC's generation counter and tell its hosts.
    fn changed(&self) {
        if let Some(t) = self.target.upgrade() {
            t.discovery_log_changed();
        }
    }

    fn host_config(&self, hostnqn: &str) -> HostConfig {
        let t = self.cfg.fetch_timeout;
        HostConfig {
            hostnqn: hostnqn.to_string(),
            hostid: derived_hostid(hostnqn),
            kato_ms: 0,
            io_queues: 0,
            async_events: false,
            connect_timeout: t,
            admin_timeout: t,
            shutdown_timeout: t,
            dhchap: self.cfg.host_keys.get(hostnqn).cloned(),
            ..HostConfig::default()
        }
    }
}

fn forget_host(st: &mut State, host: &str) {
    if st.hosts.remove(host).is_some_and(|h| h.view.is_none()) {
        st.pending = st.pending.saturating_sub(1);
    }
    for m in st.members.values_mut() {
        m.logs.remove(host);
    }
}

impl CentralDiscovery for Shared {
    fn host_seen(&self, hostnqn: &str) {
        let mut st = self.lock();
        self.touch(&mut st, hostnqn);
    }

    fn entries(&self, hostnqn: &str) -> Option<Arc<Vec<DiscoveryLogEntry>>> {
        let mut st = self.lock();
        self.touch(&mut st, hostnqn);
        let h = st.hosts.get_mut(hostnqn)?;
        let v = h.view.clone();
        h.served |= v.is_some();
        v
    }

    fn admit(&self, task: DimTask, reg: &DimRegistration) -> Result<(), DimDenial> {
        let st = self.lock();
        if !st.trusts(reg) {
            return Err(DimDenial::Untrusted);
        }
        if task != DimTask::Deregister {
            let new = announced_addrs(reg)
                .iter()
                .filter(|a| !st.members.contains_key(a))
                .count();
            if new > 0 && st.members.len() + new > self.cfg.max_members {
                return Err(DimDenial::Full);
            }
        }
        Ok(())
    }

    fn registered(&self, reg: &DimRegistration) {
        let addrs = announced_addrs(reg);
        if addrs.is_empty() {
            return;
        }
        let mut own: HashSet<IpAddr> = addrs.iter().map(|a| a.ip()).collect();
        own.extend(reg.peer.map(|p| p.ip()));
        let key = (reg.hostnqn.clone(), reg.entity_nqn.clone());
        let mut started = Vec::new();
        {
            let mut st = self.lock();
            for a in addrs {
                if let Some(m) = st.members.get_mut(&a) {
                    if m.announced {
                        m.owners.insert(key.clone());
                        m.own.extend(own.iter().copied());
                    }
                    continue;
                }
                // Admission checked the limit; two admissions at once may both have passed.
                if st.members.len() >= self.cfg.max_members {
                    nvmf_target::warn_every!(member = %a, "central discovery: member limit reached, announcement ignored");
                    continue;
                }
                tracing::info!(member = %a, host = %key.0, "central discovery: member announced itself");
                st.members.insert(
                    a,
                    Member {
                        announced: true,
                        owners: BTreeSet::from([key.clone()]),
                        own: own.clone(),
                        ..Member::default()
                    },
                );
                started.push(a);
            }
        }
        for a in started {
            let _ = self.tx.send(Cmd::Add(a));
        }
    }

    fn replaced(&self, old: &DimRegistration, new: &DimRegistration) {
        let keep = announced_addrs(new);
        let gone: Vec<SocketAddr> = announced_addrs(old)
            .into_iter()
            .filter(|a| !keep.contains(a))
            .collect();
        self.withdraw(&(old.hostnqn.clone(), old.entity_nqn.clone()), gone);
        self.registered(new);
    }

    fn deregistered(&self, reg: &DimRegistration) {
        self.withdraw(
            &(reg.hostnqn.clone(), reg.entity_nqn.clone()),
            announced_addrs(reg),
        );
    }
}

impl Shared {
    /// Registration `key` no longer announces `addrs`: announced members it was the last
    /// owner of leave (their tasks stop, the views are recomputed on the CDC's thread).
    fn withdraw(&self, key: &RegKey, addrs: Vec<SocketAddr>) {
        if addrs.is_empty() {
            return;
        }
        let mut gone = Vec::new();
        {
            let mut st = self.lock();
            for a in addrs {
                let Some(m) = st.members.get_mut(&a) else {
                    continue;
                };
                if !m.announced {
                    continue;
                }
                m.owners.remove(key);
                if m.owners.is_empty() {
                    tracing::info!(member = %a, "central discovery: announced member withdrawn");
                    st.members.remove(&a);
                    gone.push(a);
                }
            }
            if !gone.is_empty() {
                st.epoch += 1;
            }
        }
        let refresh = !gone.is_empty();
        for a in gone {
            let _ = self.tx.send(Cmd::Remove(a));
        }
        if refresh {
            let _ = self.tx.send(Cmd::Refresh);
        }
    }
}

/// A new host refused because every known host was served recently (logged at a bounded
/// rate).
fn refused_host(hostnqn: &str) {
    nvmf_target::warn_every!(host = %hostnqn, "central discovery: host table full of active hosts, new host waits");
}

/// The NVMe/TCP discovery services a discovery controller announced with DIM (TP 8010 pull
/// registration: ETYPE DDC, one transport entry per discovery port).
fn announced_addrs(reg: &DimRegistration) -> Vec<SocketAddr> {
    if reg.entity_type != EntityType::Ddc {
        return Vec::new();
    }
    let mut out = Vec::new();
    for e in &reg.entries {
        if e.trtype != nvme_spec::discovery::trtype::TCP {
            continue;
        }
        let (Ok(ip), Ok(port)) = (
            e.traddr.trim().parse::<std::net::IpAddr>(),
            e.trsvcid.trim().parse::<u16>(),
        ) else {
            continue;
        };
        let a = SocketAddr::new(ip, port);
        if !out.contains(&a) {
            out.push(a);
        }
    }
    out
}

/// A running Central Discovery Controller (see the crate docs). Stopped by [`Cdc::stop`] or
/// when dropped.
#[derive(Debug)]
pub struct Cdc {
    shared: Arc<Shared>,
    thread: Mutex<Option<(std::thread::JoinHandle<()>, std::sync::mpsc::Receiver<()>)>>,
}

/// How long [`Cdc::stop`] waits for the CDC's thread.
const STOP_WAIT: Duration = Duration::from_secs(3);

impl Cdc {
    /// Start a CDC over `cfg.members` and make it `target`'s [`CentralDiscovery`].
    pub fn start(target: &Arc<Target>, cfg: CdcConfig) -> std::io::Result<Cdc> {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut st = State::new(cfg.trusted.clone(), cfg.new_hosts_per_sec.max(1));
        for m in &cfg.members {
            st.members.insert(*m, Member::default());
        }
        let shared = Arc::new(Shared {
            cfg,
            st: Mutex::new(st),
            tx,
            target: Arc::downgrade(target),
        });
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("ebof-cdc".into())
            .spawn(move || {
                rt.block_on(run(s, rx));
                let _ = done_tx.send(());
            })?;
        target.set_central(Some(shared.clone()));
        tracing::info!(
            members = shared.cfg.members.len(),
            hostnqn = %shared.cfg.hostnqn,
            "central discovery controller started"
        );
        Ok(Cdc {
            shared,
            thread: Mutex::new(Some((thread, done_rx))),
        })
    }

    /// The host NQN of the CDC's connections to its members.
    pub fn hostnqn(&self) -> &str {
        &self.shared.cfg.hostnqn
    }

    /// Add member `addr`; false if it is already one.
    pub fn add_member(&self, addr: SocketAddr) -> bool {
        let mut st = self.shared.lock();
        if st.members.contains_key(&addr) {
            return false;
        }
        st.members.insert(addr, Member::default());
        let _ = self.shared.tx.send(Cmd::Add(addr));
        true
    }

    /// Remove member `addr` (its entries leave every view at once); false if it is not one.
    pub fn remove_member(&self, addr: SocketAddr) -> bool {
        {
            let mut st = self.shared.lock();
            if st.members.remove(&addr).is_none() {
                return false;
            }
            st.epoch += 1;
        }
        let _ = self.shared.tx.send(Cmd::Remove(addr));
        if refresh_views(&self.shared) {
            self.shared.changed();
        }
        true
    }

    /// Who may announce itself besides configured members and authenticated connections.
    pub fn trusted(&self) -> Vec<Trusted> {
        self.shared.lock().trusted.clone()
    }

    /// Replace the trusted list: later registrations are checked against it (members already
    /// announced stay until withdrawn, unreachable or removed).
    pub fn set_trusted(&self, list: Vec<Trusted>) {
        self.shared.lock().trusted = list;
    }

    /// Every member, in address order.
    pub fn members(&self) -> Vec<MemberStatus> {
        let st = self.shared.lock();
        st.members
            .iter()
            .map(|(a, m)| {
                let distinct: HashSet<EntryKey<'_>> = m
                    .logs
                    .values()
                    .flat_map(|l| l.iter())
                    .map(entry_key)
                    .collect();
                MemberStatus {
                    address: *a,
                    connected: m.connected,
                    last_error: m.last_error.clone(),
                    entries: if m.live { distinct.len() } else { 0 },
                    last_change: m.last_change,
                    announced: m.announced,
                }
            })
            .collect()
    }

    /// How many hosts the CDC keeps views for.
    pub fn known_hosts(&self) -> usize {
        self.shared.lock().hosts.len()
    }

    /// Stop: the target is no longer a CDC, the member connections close; waits at most 3 s.
    pub fn stop(&self) {
        let Some((thread, done)) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take()
        else {
            return;
        };
        if let Some(t) = self.shared.target.upgrade() {
            t.set_central(None);
        }
        let _ = self.shared.tx.send(Cmd::Stop);
        match done.recv_timeout(STOP_WAIT) {
            Ok(()) => {
                let _ = thread.join();
            }
            Err(_) => tracing::warn!("central discovery controller did not stop in time"),
        }
    }
}

impl Drop for Cdc {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The CDC's thread: member tasks, first reads of new hosts (a bounded number at once),
/// forgetting idle hosts.
async fn run(shared: Arc<Shared>, mut rx: mpsc::UnboundedReceiver<Cmd>) {
    let mut tasks: HashMap<SocketAddr, tokio::task::JoinHandle<()>> = HashMap::new();
    let mut firsts = tokio::task::JoinSet::new();
    // New hosts whose first reads wait for a slot (bounded: hosts are admitted at a bounded
    // rate into a bounded table).
    let mut waiting: VecDeque<String> = VecDeque::new();
    let max_firsts = shared.cfg.max_first_reads.max(1);
    for m in shared.cfg.members.clone() {
        tasks.insert(m, tokio::spawn(member_loop(shared.clone(), m)));
    }
    let mut gc = tokio::time::interval(Duration::from_secs(30).min(shared.cfg.host_idle));
    gc.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        while firsts.len() < max_firsts
            && let Some(h) = waiting.pop_front()
        {
            firsts.spawn(first_reads(shared.clone(), h));
        }
        tokio::select! {
            cmd = rx.recv() => match cmd {
                Some(Cmd::HostSeen(h)) => waiting.push_back(h),
                Some(Cmd::Add(a)) => {
                    if let Some(old) = tasks.insert(a, tokio::spawn(member_loop(shared.clone(), a))) {
                        old.abort();
                    }
                }
                Some(Cmd::Remove(a)) => {
                    if let Some(t) = tasks.remove(&a) {
                        t.abort();
                    }
                }
                Some(Cmd::Refresh) => {
                    if refresh_views(&shared) {
                        shared.changed();
                    }
                }
                Some(Cmd::Stop) | None => break,
            },
            Some(_) = firsts.join_next(), if !firsts.is_empty() => {}
            _ = gc.tick() => {
                forget_idle_hosts(&shared);
                tasks.retain(|_, t| !t.is_finished());
            }
        }
    }
    for (_, t) in tasks.drain() {
        t.abort();
    }
    firsts.abort_all();
    // Let the aborted tasks drop their connections (closing the sockets).
    tokio::task::yield_now().await;
}

/// Recompute every host's view outside the lock and swap the new views in; true when any
/// changed. The inputs are `Arc`s of the members' logs taken under the lock; when what the
/// views are made of changed meanwhile (the epoch moved) it starts again, and after three
/// tries computes under the lock (bounded by the entry caps).
fn refresh_views(shared: &Shared) -> bool {
    let max = shared.cfg.max_view_entries.max(1);
    for _ in 0..3 {
        let (epoch, inputs): (u64, Vec<(String, Logs)>) = {
            let st = shared.lock();
            (
                st.epoch,
                st.hosts
                    .iter()
                    .filter(|(_, h)| h.view.is_some())
                    .map(|(n, _)| (n.clone(), st.inputs(n)))
                    .collect(),
            )
        };
        let views: Vec<(String, Vec<DiscoveryLogEntry>)> = inputs
            .into_iter()
            .map(|(h, logs)| {
                let v = union_of(logs.iter(), max);
                (h, v)
            })
            .collect();
        let mut st = shared.lock();
        if st.epoch != epoch {
            continue;
        }
        let mut changed = false;
        for (h, v) in views {
            changed |= st.install(&h, v, false);
        }
        return changed;
    }
    let mut st = shared.lock();
    let names: Vec<String> = st.hosts.keys().cloned().collect();
    let mut changed = false;
    for h in names {
        let v = union_of(st.inputs(&h).iter(), max);
        changed |= st.install(&h, v, false);
    }
    changed
}

/// Forget hosts idle for longer than `host_idle` that have no discovery connection to the CDC.
fn forget_idle_hosts(shared: &Shared) {
    let connected: HashSet<String> = match shared.target.upgrade() {
        Some(t) => t
            .controllers()
            .iter()
            .filter(|c| c.is_discovery())
            .map(|c| c.hostnqn.clone())
            .collect(),
        None => return,
    };
    let now = Instant::now();
    let mut st = shared.lock();
    let idle: Vec<String> = st
        .hosts
        .iter_mut()
        .filter_map(|(n, h)| {
            if connected.contains(n) {
                h.last_seen = now;
                None
            } else {
                (now.duration_since(h.last_seen) > shared.cfg.host_idle).then(|| n.clone())
            }
        })
        .collect();
    for h in idle {
        tracing::debug!(host = %h, "central discovery: idle host forgotten");
        forget_host(&mut st, &h);
    }
}

/// Read member `addr`'s log as `host` (NVM subsystem entries only), bounded by `fetch_timeout`.
async fn fetch(
    shared: &Shared,
    addr: SocketAddr,
    host: &str,
) -> Result<Vec<DiscoveryLogEntry>, String> {
    let cfg = shared.host_config(host);
    match tokio::time::timeout(shared.cfg.fetch_timeout, nvmf_host::discover(addr, &cfg)).await {
        Ok(Ok(log)) => Ok(log
            .entries
            .into_iter()
            .filter(|e| e.subtype == subtype::NVME)
            .collect()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!(
            "no discovery log within {} ms",
            shared.cfg.fetch_timeout.as_millis()
        )),
    }
}

/// Store what member `addr` shows each host (an announced member: only entries pointing at
/// its own addresses; at most `max_entries` per host); true when the member's entries changed
/// for any.
fn store(
    st: &mut State,
    addr: SocketAddr,
    results: Vec<(String, Result<Vec<DiscoveryLogEntry>, String>)>,
    max_entries: usize,
) -> bool {
    let Some(m) = st.members.get_mut(&addr) else {
        return false;
    };
    let mut changed = false;
    for (host, r) in results {
        match r {
            Ok(mut entries) => {
                if m.announced {
                    let before = entries.len();
                    entries.retain(|e| {
                        e.traddr
                            .trim()
                            .parse::<IpAddr>()
                            .is_ok_and(|ip| m.own.contains(&ip))
                    });
                    if entries.len() != before {
                        nvmf_target::warn_every!(
                            member = %addr,
                            dropped = before - entries.len(),
                            "central discovery: announced member lists entries that are not its own"
                        );
                    }
                }
                if entries.len() > max_entries {
                    nvmf_target::warn_every!(member = %addr, entries = entries.len(), max_entries, "central discovery: member log truncated");
                    entries.truncate(max_entries);
                }
                if m.logs.get(&host).map(|l| &***l) != Some(&entries[..]) {
                    changed = true;
                    m.logs.insert(host, Arc::new(entries));
                }
            }
            Err(e) => {
                // Keep what was read last time: a stale view beats an empty one.
                tracing::debug!(member = %addr, %host, error = %e, "central discovery: read failed");
                m.last_error = Some(e);
            }
        }
    }
    if changed {
        m.last_change = Some(SystemTime::now());
        st.epoch += 1;
    }
    changed
}

/// Read member `addr`'s log for every host in `hosts`, a few at a time.
async fn read_for_hosts(
    shared: &Arc<Shared>,
    addr: SocketAddr,
    hosts: Vec<String>,
) -> Vec<(String, Result<Vec<DiscoveryLogEntry>, String>)> {
    let mut out = Vec::with_capacity(hosts.len());
    for chunk in hosts.chunks(FETCH_PARALLEL) {
        let mut set = tokio::task::JoinSet::new();
        for h in chunk {
            let (s, h) = (shared.clone(), h.clone());
            set.spawn(async move {
                let r = fetch(&s, addr, &h).await;
                (h, r)
            });
        }
        while let Some(r) = set.join_next().await {
            if let Ok(r) = r {
                out.push(r);
            }
        }
    }
    out
}

/// Read member `addr` again for every known host and update the views.
async fn refresh_member(shared: &Arc<Shared>, addr: SocketAddr) {
    let hosts: Vec<String> = shared.lock().hosts.keys().cloned().collect();
    if hosts.is_empty() {
        return;
    }
    let results = read_for_hosts(shared, addr, hosts).await;
    let stored = {
        let mut st = shared.lock();
        store(&mut st, addr, results, shared.cfg.max_member_entries)
    };
    if stored && refresh_views(shared) {
        tracing::debug!(member = %addr, "central discovery: views changed");
        shared.changed();
    }
}

/// A new host: read every live member's log as it (in parallel, each bounded), then give it
/// its first view.
async fn first_reads(shared: Arc<Shared>, host: String) {
    if !shared.lock().hosts.contains_key(&host) {
        // Forgotten while it waited for a slot.
        return;
    }
    let members: Vec<SocketAddr> = shared
        .lock()
        .members
        .iter()
        .filter(|(_, m)| m.live)
        .map(|(a, _)| *a)
        .collect();
    let mut set = tokio::task::JoinSet::new();
    for a in members {
        let (s, h) = (shared.clone(), host.clone());
        set.spawn(async move {
            let r = fetch(&s, a, &h).await;
            (a, h, r)
        });
    }
    let mut results = Vec::new();
    while let Some(r) = set.join_next().await {
        if let Ok(r) = r {
            results.push(r);
        }
    }
    let max = shared.cfg.max_view_entries.max(1);
    let (epoch, inputs) = {
        let mut st = shared.lock();
        for (a, h, r) in results {
            store(&mut st, a, vec![(h, r)], shared.cfg.max_member_entries);
        }
        (st.epoch, st.inputs(&host))
    };
    let view = union_of(inputs.iter(), max);
    let mut st = shared.lock();
    // A member removed meanwhile (the API, from another thread): compute again, under the
    // lock (one host, bounded).
    let view = if st.epoch == epoch {
        view
    } else {
        union_of(st.inputs(&host).iter(), max)
    };
    st.install(&host, view, true);
}

/// The persistent discovery connection to member `addr`, for as long as it is a member.
async fn member_loop(shared: Arc<Shared>, addr: SocketAddr) {
    let mut backoff = BACKOFF_MIN;
    let cfg = HostConfig {
        hostnqn: shared.cfg.hostnqn.clone(),
        hostid: derived_hostid(&shared.cfg.hostnqn),
        kato_ms: u32::try_from(shared.cfg.kato.as_millis())
            .unwrap_or(u32::MAX)
            .max(1000),
        io_queues: 0,
        async_events: true,
        connect_timeout: shared.cfg.fetch_timeout,
        admin_timeout: shared.cfg.fetch_timeout.max(Duration::from_secs(1)),
        shutdown_timeout: shared.cfg.fetch_timeout,
        dhchap: shared.cfg.host_keys.get(&shared.cfg.hostnqn).cloned(),
        ..HostConfig::default()
    };
    loop {
        match Controller::connect(addr, nvme_spec::DISCOVERY_NQN, &cfg).await {
            Ok(mut ctrl) => {
                backoff = BACKOFF_MIN;
                let Some(mut events) = ctrl.take_events() else {
                    return;
                };
                {
                    let mut st = shared.lock();
                    let Some(m) = st.members.get_mut(&addr) else {
                        return;
                    };
                    m.connected = true;
                    m.last_error = None;
                    m.failures = 0;
                    let was_live = std::mem::replace(&mut m.live, true);
                    if !was_live {
                        m.last_change = Some(SystemTime::now());
                        st.epoch += 1;
                    }
                }
                tracing::info!(member = %addr, "central discovery: member connected");
                // Reading the log also arms the Discovery Log Page Change event.
                if let Err(e) = ctrl.discovery_log().await {
                    tracing::debug!(member = %addr, error = %e, "central discovery: member log read failed");
                }
                refresh_member(&shared, addr).await;
                while let Some(ev) = events.recv().await {
                    if ev.log_page != lid::DISCOVERY {
                        continue;
                    }
                    tracing::debug!(member = %addr, "central discovery: member log changed");
                    // Re-arm the event first, so a change during the reads is not missed.
                    if let Err(e) = ctrl.discovery_log().await {
                        tracing::debug!(member = %addr, error = %e, "central discovery: member log read failed");
                    }
                    refresh_member(&shared, addr).await;
                }
                // The admin queue is gone: try again at once; the entries stay until that fails.
                ctrl.disconnect().await;
                let mut st = shared.lock();
                let Some(m) = st.members.get_mut(&addr) else {
                    return;
                };
                m.connected = false;
                m.last_error = Some("connection lost".into());
                tracing::warn!(member = %addr, "central discovery: member connection lost");
            }
            Err(e) => {
                let (was_live, leave) = {
                    let mut st = shared.lock();
                    let Some(m) = st.members.get_mut(&addr) else {
                        return;
                    };
                    m.connected = false;
                    m.last_error = Some(e.to_string());
                    m.failures = m.failures.saturating_add(1);
                    let leave = m.announced && m.failures >= shared.cfg.announced_attempts.max(1);
                    let was_live = std::mem::replace(&mut m.live, false);
                    if was_live {
                        m.logs.clear();
                        m.last_change = Some(SystemTime::now());
                        tracing::warn!(member = %addr, error = %e, "central discovery: member gone");
                    }
                    if leave {
                        tracing::warn!(member = %addr, attempts = m.failures, "central discovery: announced member unreachable, it leaves");
                        st.members.remove(&addr);
                    }
                    if was_live || leave {
                        st.epoch += 1;
                    }
                    (was_live, leave)
                };
                if (was_live || leave) && refresh_views(&shared) {
                    shared.changed();
                }
                if leave {
                    return;
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(shared.cfg.backoff_max.max(BACKOFF_MIN));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn machine_id_becomes_a_uuid_nqn() {
        assert_eq!(
            machine_id_nqn("0123456789ABCDEF0123456789abcdef").as_deref(),
            Some("nqn.2014-08.org.nvmexpress:uuid:01234567-89ab-cdef-0123-456789abcdef")
        );
        assert_eq!(machine_id_nqn("short"), None);
        assert_eq!(machine_id_nqn(&"g".repeat(32)), None);
        assert!(nvme_spec::is_valid_nqn(&default_hostnqn()));
    }

    #[test]
    fn hostid_is_stable_and_differs_per_host() {
        assert_eq!(derived_hostid("nqn.a:1"), derived_hostid("nqn.a:1"));
        assert_ne!(derived_hostid("nqn.a:1"), derived_hostid("nqn.a:2"));
    }

    fn e(nqn: &str, port: &str) -> DiscoveryLogEntry {
        DiscoveryLogEntry {
            subtype: subtype::NVME,
            subnqn: nqn.into(),
            traddr: "10.0.0.1".into(),
            trsvcid: port.into(),
            ..Default::default()
        }
    }

    #[test]
    fn union_keeps_live_members_in_order_once() {
        let a: SocketAddr = "10.0.0.1:8009".parse().unwrap();
        let b: SocketAddr = "10.0.0.2:8009".parse().unwrap();
        let mut st = State::new(vec![], 1);
        for (addr, entries) in [
            (a, vec![e("nqn.x:1", "4420"), e("nqn.x:s", "4420")]),
            (b, vec![e("nqn.x:s", "4420"), e("nqn.x:2", "4420")]),
        ] {
            let mut m = Member {
                live: true,
                ..Default::default()
            };
            m.logs.insert("nqn.h:1".into(), Arc::new(entries));
            st.members.insert(addr, m);
        }
        st.hosts.insert(
            "nqn.h:1".into(),
            Host {
                last_seen: Instant::now(),
                served: false,
                view: None,
            },
        );
        let names: Vec<String> = st.union("nqn.h:1").into_iter().map(|e| e.subnqn).collect();
        assert_eq!(names, ["nqn.x:1", "nqn.x:s", "nqn.x:2"]);
        assert!(st.union("nqn.h:other").is_empty());
        // First view: created, no change reported; then a member goes away: changed.
        assert!(!st.recompute("nqn.h:1", true));
        assert_eq!(st.hosts["nqn.h:1"].view.as_ref().map(|v| v.len()), Some(3));
        st.members.get_mut(&a).unwrap().live = false;
        assert!(st.recompute_all());
        assert_eq!(st.hosts["nqn.h:1"].view.as_ref().map(|v| v.len()), Some(2));
        assert!(!st.recompute_all());
    }

    /// C5: the union is linear (a hash set) and bounded per view.
    #[test]
    fn union_is_bounded_and_fast() {
        let many = |tag: &str| {
            Arc::new(
                (0..1024)
                    .map(|i| e(&format!("nqn.x:{tag}{i}"), "4420"))
                    .collect::<Vec<_>>(),
            )
        };
        let (a, b) = (many("a"), many("b"));
        let t0 = Instant::now();
        let v = union_of([&a, &a, &b].into_iter(), usize::MAX);
        assert_eq!(v.len(), 2048);
        let v = union_of([&a, &b].into_iter(), 1024);
        assert_eq!(v.len(), 1024);
        assert!(
            t0.elapsed() < Duration::from_millis(500),
            "{:?}",
            t0.elapsed()
        );
    }

    /// C5: recomputing every view (256 hosts × 2 members × 512 entries each, all distinct)
    /// holds the lock the reactors take only briefly: a thread that takes it meanwhile (as
    /// `entries` does for a discovery Connect) never waits long.
    #[test]
    fn views_are_computed_outside_the_lock() {
        let (tx, _rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            cfg: CdcConfig::new(vec![], "nqn.x:cdc".into()),
            st: Mutex::new(State::new(vec![], 1)),
            tx,
            target: Weak::new(),
        });
        {
            let mut st = shared.lock();
            for (i, port) in ["4420", "4421"].iter().enumerate() {
                let log = Arc::new(
                    (0..512)
                        .map(|k| e(&format!("nqn.x:m{i}-{k}"), port))
                        .collect::<Vec<_>>(),
                );
                let mut m = Member {
                    live: true,
                    ..Member::default()
                };
                for h in 0..256 {
                    m.logs.insert(format!("nqn.h:{h}"), log.clone());
                }
                st.members
                    .insert(SocketAddr::from(([10, 0, 0, i as u8 + 1], 8009)), m);
            }
            for h in 0..256 {
                st.hosts.insert(
                    format!("nqn.h:{h}"),
                    Host {
                        last_seen: Instant::now(),
                        served: true,
                        view: Some(Arc::new(Vec::new())),
                    },
                );
            }
        }
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (s2, stop2) = (shared.clone(), stop.clone());
        let prober = std::thread::spawn(move || {
            let mut worst = Duration::ZERO;
            while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
                let t0 = Instant::now();
                drop(s2.lock());
                worst = worst.max(t0.elapsed());
                std::thread::sleep(Duration::from_micros(200));
            }
            worst
        });
        let t0 = Instant::now();
        assert!(refresh_views(&shared));
        let total = t0.elapsed();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let worst = prober.join().unwrap();
        eprintln!("recompute of 256 views: {total:?}; longest lock wait meanwhile {worst:?}");
        assert_eq!(
            shared.lock().hosts["nqn.h:7"]
                .view
                .as_ref()
                .map(|v| v.len()),
            Some(1024)
        );
        assert!(worst * 4 < total, "lock held {worst:?} of {total:?}");
    }

    fn reg(hostnqn: &str, peer: &str, authenticated: bool) -> DimRegistration {
        let now = Instant::now();
        DimRegistration {
            hostnqn: hostnqn.into(),
            hostid: [0; 16],
            entity_type: EntityType::Ddc,
            entity_nqn: hostnqn.into(),
            name: String::new(),
            version: String::new(),
            symname: None,
            entries: vec![],
            local: "10.0.0.9:8009".parse().unwrap(),
            peer: Some(peer.parse().unwrap()),
            registered: now,
            updated: now,
            authenticated,
            admitted: false,
        }
    }

    /// C1: who the CDC trusts to announce: listed addresses and NQNs, configured members'
    /// addresses, authenticated connections; nobody else (empty by default).
    #[test]
    fn trust_is_explicit() {
        let mut st = State::new(vec![], 1);
        let evil = reg("nqn.x:evil", "10.0.0.66:1234", false);
        assert!(!st.trusts(&evil));
        assert!(st.trusts(&reg("nqn.x:evil", "10.0.0.66:1234", true)));
        st.members
            .insert("10.0.0.1:8009".parse().unwrap(), Member::default());
        assert!(st.trusts(&reg("nqn.x:a", "10.0.0.1:40000", false)));
        // An announced member's address is not a reason to trust.
        st.members.insert(
            "10.0.0.66:8009".parse().unwrap(),
            Member {
                announced: true,
                ..Member::default()
            },
        );
        assert!(!st.trusts(&evil));
        st.trusted = vec![Trusted::Address("10.0.0.66".parse().unwrap())];
        assert!(st.trusts(&evil));
        st.trusted = vec![Trusted::Nqn("nqn.x:evil".into())];
        assert!(st.trusts(&evil));
        assert!(!st.trusts(&reg("nqn.x:other", "10.0.0.66:1234", false)));
    }
}
