//! The object model: target → subsystems → namespaces, plus the controller registry.

use crate::controller::Controller;
use arc_swap::ArcSwap;
use ebof_backend::Backend;
use nvme_spec::ControllerId;
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

/// Limits that shape controllers and queues (from the configuration's `[target]` table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TargetLimits {
    /// In-capsule data limit for I/O queues, bytes (IOCCSZ = (64 + this) / 16).
    pub io_inline_data: u32,
    /// Maximum number of I/O queues per controller.
    pub max_io_queues: u16,
    /// Namespaces a subsystem may hold (Identify Controller NN, unless a higher NSID is in
    /// use); the control plane enforces the count.
    pub max_namespaces: u32,
    /// Maximum entries per I/O queue (CAP.MQES + 1).
    pub max_queue_size: u16,
    /// Maximum data transfer size in bytes (MDTS, a power of two × 4 KiB).
    pub max_transfer: u32,
}

impl Default for TargetLimits {
    fn default() -> Self {
        TargetLimits {
            io_inline_data: 8192,
            max_io_queues: 32,
            max_namespaces: MAX_NAMESPACES,
            max_queue_size: 1024,
            max_transfer: 128 * 1024,
        }
    }
}

/// Default of [`TargetLimits::max_namespaces`] (as Linux nvmet's NVMET_MAX_NAMESPACES).
pub const MAX_NAMESPACES: u32 = 1024;

/// Entries of the admin queue we accept at most (Linux uses 32: NVMF_AQ_DEPTH).
pub const ADMIN_QUEUE_MAX: u32 = 32;
/// In-capsule data accepted on admin/fabrics commands (NVMe/TCP: 8 KiB).
pub const ADMIN_INLINE_DATA: u32 = 8192;

/// One namespace: a backend with an LBA format and identifiers.
#[derive(Debug)]
pub struct Namespace {
    /// Namespace ID (NSID), unique within its subsystem; never 0 or FFFFFFFFh.
    pub nsid: u32,
    /// The storage the namespace reads and writes.
    pub backend: Arc<dyn Backend>,
    /// LBA data size in bytes (512 or 4096).
    pub block_size: u32,
    /// Namespace UUID, reported as the NIDT UUID descriptor of Identify CNS 03h.
    pub uuid: [u8; 16],
    /// Set when the control plane removed the namespace: commands still in flight on it fail
    /// with Invalid Namespace (later ones find no namespace at all).
    removed: AtomicBool,
    /// Counters for the SMART / Health log (summed over all controllers).
    pub stats: NsStats,
    /// Reservations on the namespace (NVMe Base 2.0 8.19); see [`crate::reservation`].
    pub resv: crate::reservation::NsReservations,
    /// ANA group (1..=[`crate::ana::MAX_GROUPS`]); see [`Namespace::with_ana_group`].
    ana_group: u32,
    /// What makes fused Compare-and-Write atomic against every other command on the namespace
    /// ([`crate::gate`]).
    pub gate: crate::gate::Gate,
    /// Per-namespace QoS limits and their shared budgets ([`crate::qos`]); unlimited unless
    /// set.
    pub qos: crate::qos::NsQos,
}

impl Namespace {
    /// A namespace `nsid` over `backend` with LBA data size `block_size`, in ANA group 1,
    /// not removed, with empty counters and reservations.
    pub fn new(nsid: u32, backend: Arc<dyn Backend>, block_size: u32, uuid: [u8; 16]) -> Namespace {
        Namespace {
            nsid,
            backend,
            block_size,
            uuid,
            removed: AtomicBool::new(false),
            stats: NsStats::default(),
            resv: Default::default(),
            ana_group: 1,
            gate: crate::gate::Gate::default(),
            qos: crate::qos::NsQos::default(),
        }
    }
    /// The namespace with reservations persisted through `store` (PTPL capable), starting
    /// from the state loaded from it.
    pub fn with_reservations(mut self, resv: crate::reservation::NsReservations) -> Namespace {
        self.resv = resv;
        self
    }
    /// The namespace in ANA group `grpid` (default 1; out-of-range values are clamped to
    /// 1..=[`crate::ana::MAX_GROUPS`], the configuration rejects them first).
    pub fn with_ana_group(mut self, grpid: u32) -> Namespace {
        self.ana_group = grpid.clamp(1, crate::ana::MAX_GROUPS);
        self
    }
    /// ANA group (Identify Namespace ANAGRPID).
    pub fn ana_group(&self) -> u32 {
        self.ana_group
    }
    /// Column of the namespace's group in the ANA table ([`crate::ana::AnaTable::path_status`]).
    #[inline]
    pub fn ana_index(&self) -> usize {
        self.ana_group as usize - 1
    }
    /// True once the namespace was removed from its subsystem.
    pub fn is_removed(&self) -> bool {
        self.removed.load(Ordering::Relaxed)
    }
    /// Size in logical blocks (NSZE).
    pub fn blocks(&self) -> u64 {
        self.backend.size() / u64::from(self.block_size)
    }
    /// log2 of the block size (LBADS).
    pub fn lbads(&self) -> u8 {
        self.block_size.trailing_zeros() as u8
    }
    /// NGUID: derived from the UUID so both are stable across restarts.
    pub fn nguid(&self) -> [u8; 16] {
        let mut g = self.uuid;
        g.reverse();
        g
    }
    /// EUI-64: eight bytes derived from the UUID, with an IEEE OUI-less local prefix.
    pub fn eui64(&self) -> [u8; 8] {
        let mut e = [0u8; 8];
        for (i, b) in self.uuid.iter().enumerate() {
            e[i % 8] ^= *b;
        }
        e[0] = (e[0] & 0xF0) | 0x02;
        e
    }
}

/// SMART counters and latency histograms of a namespace; updated in batches by queues.
#[derive(Debug, Default)]
pub struct NsStats {
    pub bytes_read: AtomicU64,
    pub bytes_written: AtomicU64,
    pub read_cmds: AtomicU64,
    pub write_cmds: AtomicU64,
    pub media_errors: AtomicU64,
    /// Latency of successful reads and writes (see [`crate::latency`]).
    pub read_latency: crate::latency::LatencyHistogram,
    pub write_latency: crate::latency::LatencyHistogram,
    /// Backend failures by [`crate::FailureClass`] (indexed by the class).
    pub backend_errors: [AtomicU64; crate::FailureClass::COUNT],
}

/// An NVM subsystem: NQN, identity, host access list and namespaces.
///
/// Immutable once published in a [`Target`]: the control plane changes a subsystem by building
/// a new value (namespaces are shared `Arc`s, so their counters carry over) and swapping it in
/// with [`Target::update_subsystem`]. A controller keeps the snapshot it connected with.
#[derive(Clone, Debug)]
pub struct Subsystem {
    /// NVM Subsystem NQN (SUBNQN), what hosts connect to.
    pub nqn: String,
    /// Serial Number (Identify Controller SN, ASCII, at most 20 bytes).
    pub serial: String,
    /// Model Number (Identify Controller MN, ASCII, at most 40 bytes).
    pub model: String,
    /// Any host NQN may connect; `hosts` is then not consulted.
    pub allow_any_host: bool,
    /// Host NQNs allowed to connect when `allow_any_host` is false.
    pub hosts: Vec<String>,
    /// Sorted by nsid.
    pub namespaces: Vec<Arc<Namespace>>,
    /// Per-host namespace masking: a namespace with an entry here is visible only to the
    /// host NQNs listed (none, for an empty list); a namespace without one is visible to every
    /// host the subsystem admits. Entries for NSIDs the subsystem does not have are ignored
    /// ([`Target::update_subsystem`] drops them). See [`Subsystem::view`].
    pub ns_hosts: BTreeMap<u32, Vec<String>>,
}

impl Subsystem {
    /// May the host with NQN `hostnqn` connect?
    pub fn host_allowed(&self, hostnqn: &str) -> bool {
        self.allow_any_host || self.hosts.iter().any(|h| h == hostnqn)
    }
    /// The namespace `nsid`, if the subsystem has it (binary search).
    pub fn namespace(&self, nsid: u32) -> Option<&Arc<Namespace>> {
        self.namespaces
            .binary_search_by_key(&nsid, |n| n.nsid)
            .ok()
            .map(|i| &self.namespaces[i])
    }
    /// Highest NSID in use (Identify Controller NN).
    pub fn max_nsid(&self) -> u32 {
        self.namespaces.last().map_or(0, |n| n.nsid)
    }
    /// May host `hostnqn` see namespace `nsid` (masking only: whether the host may connect
    /// at all is [`Subsystem::host_allowed`])?
    pub fn ns_visible(&self, nsid: u32, hostnqn: &str) -> bool {
        self.ns_hosts
            .get(&nsid)
            .is_none_or(|hosts| hosts.iter().any(|h| h == hostnqn))
    }
    /// The host lists of namespace `nsid` (`None`: visible to every admitted host).
    pub fn ns_host_list(&self, nsid: u32) -> Option<&[String]> {
        self.ns_hosts.get(&nsid).map(Vec::as_slice)
    }
    /// The subsystem as host `hostnqn` sees it: the same value without the namespaces masked
    /// from it. This is what an I/O controller of the host holds ([`Controller::subsystem`]),
    /// so every command (Identify, logs, I/O, reservations) finds exactly the host's
    /// namespaces with no per-command check. Without masking the snapshot itself is returned
    /// (the same `Arc`); the namespaces of a view are the subsystem's own `Arc`s.
    pub fn view(self: &Arc<Self>, hostnqn: &str) -> Arc<Subsystem> {
        if self.ns_hosts.is_empty() {
            return self.clone();
        }
        let mut v = Subsystem::clone(self);
        v.namespaces.retain(|n| self.ns_visible(n.nsid, hostnqn));
        Arc::new(v)
    }
}

/// True when `a` and `b` hold the very same namespaces (the same `Arc`s, in order).
pub(crate) fn same_namespaces(a: &Subsystem, b: &Subsystem) -> bool {
    a.namespaces.len() == b.namespaces.len()
        && a.namespaces
            .iter()
            .zip(&b.namespaces)
            .all(|(x, y)| Arc::ptr_eq(x, y))
}

/// NSIDs that differ between two snapshots of a subsystem: added, removed or replaced.
fn changed_namespaces(old: &Subsystem, new: &Subsystem) -> Vec<u32> {
    let mut v: Vec<u32> = old
        .namespaces
        .iter()
        .filter(|n| !new.namespaces.iter().any(|m| Arc::ptr_eq(m, n)))
        .chain(
            new.namespaces
                .iter()
                .filter(|n| !old.namespaces.iter().any(|m| Arc::ptr_eq(m, n))),
        )
        .map(|n| n.nsid)
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// A listener as the discovery log reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListenerInfo {
    /// Listening socket address (TRADDR and TRSVCID of the discovery log entry).
    pub addr: SocketAddr,
    /// Port ID in the discovery log (1-based position).
    pub portid: u16,
    /// NVMe/TCP TLS on this listener, as the discovery log advertises it (TREQ, TSAS).
    pub tls: ListenerTls,
    /// The fabric (discovery log TRTYPE and TSAS).
    pub transport: crate::Transport,
}

/// A listener's TLS policy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ListenerTls {
    /// Plain NVMe/TCP only.
    #[default]
    Off,
    /// TLS 1.3 when the host asks for it, plain NVMe/TCP otherwise.
    Optional,
    /// TLS 1.3 only.
    Required,
}

/// Counters of rare events, for metrics (each touched only when the event happens).
#[derive(Debug, Default)]
pub struct EventCounters {
    /// Controllers torn down because their keep-alive timer expired.
    pub keep_alive_expiries: AtomicU64,
    /// Controllers torn down by the management API (`ebof ctl disconnect`).
    pub admin_disconnects: AtomicU64,
    /// TCP connections accepted (under the connection caps).
    pub connections_accepted: AtomicU64,
    /// TCP connections refused at accept by the connection caps.
    pub connections_refused: AtomicU64,
    /// Accepted connections that have closed since (open = accepted − closed).
    pub connections_closed: AtomicU64,
    /// Connections terminated for a protocol error (C2HTermReq sent).
    pub protocol_errors: AtomicU64,
    /// Connections the host ended with H2CTermReq.
    pub host_terminations: AtomicU64,
    /// Connections closed for missing the ICReq / Connect deadline.
    pub handshake_timeouts: AtomicU64,
    /// Failed in-band authentications (DH-HMAC-CHAP), queues of every controller.
    pub auth_failures: AtomicU64,
    /// Connections refused or ended by TLS (bad handshake, unknown PSK, plaintext on a
    /// TLS-only listener).
    pub tls_failures: AtomicU64,
    /// Discovery Information Management commands refused: an untrusted discovery controller
    /// (pull registration), a change from another address, or no room.
    pub dim_refusals: AtomicU64,
}

/// Why [`Target::update_subsystem`] changed nothing.
#[derive(Debug, PartialEq, Eq)]
pub enum UpdateError<E> {
    /// No subsystem has this NQN.
    UnknownSubsystem,
    /// The update function refused the change.
    Rejected(E),
}

/// The whole target: the model (published as an immutable snapshot, replaced whole by the
/// control plane) plus the controller registry. Shared by all cores.
///
/// The data path never takes a lock the control plane holds: Connect and the discovery log
/// load the current subsystem table ([`Target::subsystems`], an `ArcSwap` load), and a
/// controller then holds its `Arc<Subsystem>` for life. Writers ([`Target::update_subsystem`])
/// are serialised among themselves by a mutex no reader touches.
#[derive(Debug)]
pub struct Target {
    subsystems: ArcSwap<Vec<Arc<Subsystem>>>,
    /// Serialises control-plane writers (read-modify-swap of `subsystems`).
    writer: Mutex<()>,
    /// Rare-event counters for metrics.
    pub events: EventCounters,
    /// NVMe listeners, as the discovery log lists them (replaced whole by the control plane).
    listeners: ArcSwap<Vec<ListenerInfo>>,
    /// Limits on queues, namespaces and controllers applied at Connect.
    pub limits: TargetLimits,
    /// Discovery log generation counter.
    pub genctr: AtomicU64,
    /// Power-on reference for SMART power-on hours.
    pub started: Instant,
    registry: Mutex<Registry>,
    /// ANA state of every (listener, group) ([`Target::set_ana_state`] changes it).
    pub ana: crate::ana::AnaTable,
    /// Who must authenticate ([`Target::set_auth_policy`]); read at Connect only.
    auth: Mutex<Option<Arc<dyn crate::auth::AuthPolicy>>>,
    /// Set when this target is a Central Discovery Controller ([`Target::set_central`]).
    central: Mutex<Option<Arc<dyn crate::discovery::CentralDiscovery>>>,
    /// Referrals served by the discovery controllers ([`Target::set_referrals`]).
    referrals: ArcSwap<Vec<crate::discovery::Referral>>,
    /// DIM registrations by (host NQN, entity NQN) ([`Target::dim_registrations`]).
    dim: Mutex<DimMap>,
}

/// The DIM registry: registrations by (host NQN, entity NQN).
type DimMap = std::collections::BTreeMap<(String, String), crate::discovery::DimRegistration>;

/// There is room in `m` for the new registration `reg` (its key is not in `m`).
fn dim_room(m: &DimMap, reg: &crate::discovery::DimRegistration) -> bool {
    use crate::discovery::{MAX_DIM_PER_HOST, MAX_DIM_PER_PEER, MAX_DIM_RESERVED, MAX_DIM_TOTAL};
    if m.len() >= MAX_DIM_TOTAL
        || m.keys().filter(|k| k.0 == reg.hostnqn).count() >= MAX_DIM_PER_HOST
    {
        return false;
    }
    if reg.admitted {
        return true;
    }
    let ip = reg.peer.map(|p| p.ip());
    let (mut others, mut same_peer) = (0, 0);
    for r in m.values().filter(|r| !r.admitted) {
        others += 1;
        if r.peer.map(|p| p.ip()) == ip {
            same_peer += 1;
        }
    }
    others < MAX_DIM_TOTAL - MAX_DIM_RESERVED && same_peer < MAX_DIM_PER_PEER
}

/// Why a DIM task changed nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DimRefusal {
    /// Update or deregister of an entity this host has not registered.
    Unknown,
    /// The host, its source address or the target holds as many registrations as it may.
    Full,
    /// A discovery controller the Central Discovery Controller does not trust.
    Untrusted,
    /// A change to a discovery controller's registration from another source address than
    /// the one that made it, on a connection that did not authenticate.
    NotOrigin,
}

#[derive(Debug, Default)]
struct Registry {
    controllers: HashMap<u16, Weak<Controller>>,
    next: u16,
}

impl Target {
    /// A target serving `subsystems` (their namespaces sorted by NSID here) on `listeners`,
    /// with no controller yet; `now` is the power-on time for SMART.
    pub fn new(
        mut subsystems: Vec<Subsystem>,
        listeners: Vec<ListenerInfo>,
        limits: TargetLimits,
        now: Instant,
    ) -> Target {
        for s in &mut subsystems {
            s.namespaces.sort_by_key(|n| n.nsid);
        }
        Target {
            subsystems: ArcSwap::from_pointee(subsystems.into_iter().map(Arc::new).collect()),
            writer: Mutex::new(()),
            events: EventCounters::default(),
            listeners: ArcSwap::from_pointee(listeners),
            limits,
            genctr: AtomicU64::new(1),
            started: now,
            registry: Mutex::new(Registry {
                controllers: HashMap::new(),
                next: ControllerId::MIN,
            }),
            ana: crate::ana::AnaTable::new(),
            auth: Mutex::new(None),
            central: Mutex::new(None),
            referrals: ArcSwap::from_pointee(Vec::new()),
            dim: Mutex::new(Default::default()),
        }
    }

    /// The referrals the discovery controllers serve (a snapshot).
    pub fn referrals(&self) -> Arc<Vec<crate::discovery::Referral>> {
        self.referrals.load_full()
    }

    /// Serve `list` as the referrals (SUBTYPE 1 entries, in this order). When the list differs
    /// from the current one the discovery log changes (GENCTR moves, Discovery Log Page Change
    /// to the discovery controllers that asked for it) and `Ok(true)` is returned; the same
    /// list again changes nothing. Refused, changing nothing, with more than
    /// [`crate::MAX_REFERRALS`] entries or an address twice.
    pub fn set_referrals(
        &self,
        list: Vec<crate::discovery::Referral>,
    ) -> Result<bool, crate::discovery::ReferralError> {
        use crate::discovery::{MAX_REFERRALS, ReferralError};
        if list.len() > MAX_REFERRALS {
            return Err(ReferralError::TooMany(list.len()));
        }
        for (i, r) in list.iter().enumerate() {
            if list[..i].iter().any(|o| o.addr == r.addr) {
                return Err(ReferralError::Duplicate(r.addr));
            }
        }
        let _w = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        if **self.referrals.load() == list {
            return Ok(false);
        }
        self.referrals.store(Arc::new(list));
        drop(_w);
        self.discovery_log_changed();
        Ok(true)
    }

    /// Every DIM registration held, sorted by host NQN then entity NQN.
    pub fn dim_registrations(&self) -> Vec<crate::discovery::DimRegistration> {
        self.dim
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// Apply a DIM task for `reg` (built from the command): register adds or replaces (the
    /// first registration time is kept), update replaces an existing one, deregister removes
    /// it. The Central Discovery Controller source, if any, is asked first whether a
    /// discovery controller's task may be applied ([`crate::CentralDiscovery::admit`]) and
    /// told afterwards. A refusal is counted ([`EventCounters::dim_refusals`]) and logged at
    /// a bounded rate.
    pub(crate) fn dim_apply(
        &self,
        task: nvme_spec::dim::DimTask,
        reg: crate::discovery::DimRegistration,
    ) -> Result<(), DimRefusal> {
        let (host, peer, etype) = (reg.hostnqn.clone(), reg.peer, reg.entity_type);
        let r = self.dim_apply_inner(task, reg);
        if let Err(e) = r
            && e != DimRefusal::Unknown
        {
            self.events.dim_refusals.fetch_add(1, Ordering::Relaxed);
            crate::warn_every!(
                task = task.name(),
                %host,
                peer = ?peer,
                etype = etype.name(),
                "discovery information management refused: {}",
                match e {
                    DimRefusal::Untrusted => "not a discovery controller this CDC trusts",
                    DimRefusal::NotOrigin => "registration made from another address",
                    _ => "no room for more registrations",
                }
            );
        }
        r
    }

    fn dim_apply_inner(
        &self,
        task: nvme_spec::dim::DimTask,
        mut reg: crate::discovery::DimRegistration,
    ) -> Result<(), DimRefusal> {
        use nvme_spec::dim::{DimTask, EntityType};
        let pull = matches!(reg.entity_type, EntityType::Ddc | EntityType::Cdc);
        let central = self.central();
        if pull && let Some(c) = &central {
            c.admit(task, &reg).map_err(|d| match d {
                crate::discovery::DimDenial::Untrusted => DimRefusal::Untrusted,
                crate::discovery::DimDenial::Full => DimRefusal::Full,
            })?;
            reg.admitted = true;
        }
        let key = (reg.hostnqn.clone(), reg.entity_nqn.clone());
        let mut m = self.dim.lock().unwrap_or_else(|e| e.into_inner());
        // A discovery controller's registration is changed or withdrawn only from the address
        // that made it, or by a connection that proved its host NQN, while that host NQN has
        // another discovery connection (the announcer's persistent one): host NQNs are
        // self-declared and an announcer's is easy to guess. An announcer that moved (its old
        // connection gone) registers again from its new address.
        if pull
            && !reg.authenticated
            && let Some(old) = m.get(&key)
            && old.peer.map(|p| p.ip()) != reg.peer.map(|p| p.ip())
            && self
                .controllers()
                .iter()
                .filter(|c| c.is_discovery() && c.hostnqn == reg.hostnqn)
                .count()
                > 1
        {
            return Err(DimRefusal::NotOrigin);
        }
        let mut expired = Vec::new();
        let old = match task {
            DimTask::Register | DimTask::Update => {
                let old = match m.get(&key) {
                    Some(old) => {
                        // The replacement counts where it comes from: room is checked as
                        // for a new one, without the registration it replaces.
                        let old = old.clone();
                        m.remove(&key);
                        if !dim_room(&m, &reg) {
                            m.insert(key, old);
                            return Err(DimRefusal::Full);
                        }
                        reg.registered = old.registered;
                        Some(old)
                    }
                    None if task == DimTask::Update => return Err(DimRefusal::Unknown),
                    None => {
                        if !dim_room(&m, &reg) {
                            expired = self.dim_expire(&mut m, reg.updated);
                        }
                        if !dim_room(&m, &reg) {
                            drop(m);
                            self.dim_tell_expired(&expired);
                            return Err(DimRefusal::Full);
                        }
                        None
                    }
                };
                m.insert(key, reg.clone());
                old
            }
            DimTask::Deregister => {
                reg = m.remove(&key).ok_or(DimRefusal::Unknown)?;
                None
            }
        };
        drop(m);
        self.dim_tell_expired(&expired);
        tracing::info!(
            task = task.name(),
            host = %reg.hostnqn,
            entity = %reg.entity_nqn,
            etype = reg.entity_type.name(),
            "discovery information management"
        );
        if let Some(c) = central {
            match (task, old) {
                (DimTask::Deregister, _) => c.deregistered(&reg),
                (_, Some(old)) => c.replaced(&old, &reg),
                (_, None) => c.registered(&reg),
            }
        }
        Ok(())
    }

    /// Drop the registrations of hosts with no discovery controller connected that were last
    /// registered [`crate::DIM_STALE`] or longer before `now`; returns them.
    fn dim_expire(&self, m: &mut DimMap, now: Instant) -> Vec<crate::discovery::DimRegistration> {
        let connected: std::collections::HashSet<String> = self
            .controllers()
            .iter()
            .filter(|c| c.is_discovery())
            .map(|c| c.hostnqn.clone())
            .collect();
        let stale: Vec<(String, String)> = m
            .iter()
            .filter(|(k, r)| {
                !connected.contains(&k.0)
                    && now.saturating_duration_since(r.updated) >= crate::discovery::DIM_STALE
            })
            .map(|(k, _)| k.clone())
            .collect();
        stale.iter().filter_map(|k| m.remove(k)).collect()
    }

    /// Tell the CDC source about registrations [`Target::dim_expire`] dropped.
    fn dim_tell_expired(&self, expired: &[crate::discovery::DimRegistration]) {
        if expired.is_empty() {
            return;
        }
        tracing::info!(
            count = expired.len(),
            "discovery information management: stale registrations dropped"
        );
        if let Some(c) = self.central() {
            for r in expired {
                c.deregistered(r);
            }
        }
    }

    /// Make this target a Central Discovery Controller fed by `c` (DCTYPE 2), or, with
    /// `None`, a Direct Discovery Controller again (DCTYPE 1). The discovery log changes.
    pub fn set_central(&self, c: Option<Arc<dyn crate::discovery::CentralDiscovery>>) {
        *self.central.lock().unwrap_or_else(|e| e.into_inner()) = c;
        self.discovery_log_changed();
    }

    /// The Central Discovery Controller's source of entries, when this target is one.
    pub fn central(&self) -> Option<Arc<dyn crate::discovery::CentralDiscovery>> {
        self.central
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Set (or clear) the authentication policy: queues connected from now on follow it.
    pub fn set_auth_policy(&self, p: Option<Arc<dyn crate::auth::AuthPolicy>>) {
        *self.auth.lock().unwrap_or_else(|e| e.into_inner()) = p;
    }

    /// The authentication policy, if any.
    pub fn auth_policy(&self) -> Option<Arc<dyn crate::auth::AuthPolicy>> {
        self.auth.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The current subsystem table (a snapshot: later changes do not show in it).
    pub fn subsystems(&self) -> Arc<Vec<Arc<Subsystem>>> {
        self.subsystems.load_full()
    }

    /// The NVMe listeners now (a snapshot).
    pub fn listeners(&self) -> Arc<Vec<ListenerInfo>> {
        self.listeners.load_full()
    }

    /// Replace the listener list (the discovery log changes with it).
    pub fn set_listeners(&self, listeners: Vec<ListenerInfo>) {
        let _w = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        self.listeners.store(Arc::new(listeners));
        drop(_w);
        self.discovery_log_changed();
    }

    /// The current snapshot of the subsystem named `nqn`.
    pub fn subsystem(&self, nqn: &str) -> Option<Arc<Subsystem>> {
        self.subsystems
            .load()
            .iter()
            .find(|s| s.nqn == nqn)
            .cloned()
    }

    /// Replace the subsystem `nqn` by `f(current)`, atomically for readers: a Connect sees
    /// either the old or the new subsystem, never a mix, and waits for nothing. When `f` fails
    /// nothing changes.
    ///
    /// Connected controllers of the subsystem get the new snapshot, filtered for their host
    /// ([`Subsystem::view`]): namespaces added, removed, attached to or detached from the host
    /// reach their I/O queues before the next command, and a Namespace Attribute Changed event
    /// tells the host, with exactly the NSIDs that changed in its view (none: no event);
    /// namespaces no longer in the subsystem fail their in-flight commands. A change of who may connect moves the discovery log generation counter and
    /// notifies discovery controllers.
    pub fn update_subsystem<E>(
        &self,
        nqn: &str,
        f: impl FnOnce(&Subsystem) -> Result<Subsystem, E>,
    ) -> Result<Arc<Subsystem>, UpdateError<E>> {
        let _w = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let table = self.subsystems.load_full();
        let i = table
            .iter()
            .position(|s| s.nqn == nqn)
            .ok_or(UpdateError::UnknownSubsystem)?;
        let mut new = f(&table[i]).map_err(UpdateError::Rejected)?;
        new.nqn = table[i].nqn.clone();
        new.namespaces.sort_by_key(|n| n.nsid);
        let nsids: Vec<u32> = new.namespaces.iter().map(|n| n.nsid).collect();
        new.ns_hosts
            .retain(|nsid, _| nsids.binary_search(nsid).is_ok());
        let new = Arc::new(new);
        let mut next: Vec<Arc<Subsystem>> = table.as_ref().clone();
        next[i] = new.clone();
        self.subsystems.store(Arc::new(next));
        let old = &table[i];
        // Only a namespace that leaves the subsystem is removed; one masked from a host is
        // merely absent from that host's view.
        for n in &old.namespaces {
            if !new.namespaces.iter().any(|m| Arc::ptr_eq(m, n)) {
                n.removed.store(true, Ordering::Relaxed);
            }
        }
        for c in self.controllers() {
            if !c.is_discovery() && c.subnqn() == new.nqn {
                // Each host's Changed Namespace List is the difference of *its* views.
                let view = new.view(&c.hostnqn);
                let changed = c
                    .subsystem()
                    .map(|cur| changed_namespaces(&cur, &view))
                    .unwrap_or_default();
                c.set_subsystem(view, &changed);
            }
        }
        if old.hosts != new.hosts || old.allow_any_host != new.allow_any_host {
            self.discovery_log_changed();
        }
        Ok(new)
    }

    /// Connect registered `ctrl` with its host's view of `base`: if the subsystem changed
    /// since `base` was looked up, give the controller its host's view of the current one.
    /// Serialised with the writers, so a view computed here never overwrites a newer one.
    /// False when the subsystem is gone (the Connect then fails).
    pub(crate) fn settle_connect(&self, ctrl: &Controller, base: &Arc<Subsystem>) -> bool {
        let _w = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        match self.subsystem(&base.nqn) {
            None => false,
            Some(now) => {
                if !Arc::ptr_eq(&now, base) {
                    ctrl.set_subsystem(now.view(&ctrl.hostnqn), &[]);
                }
                true
            }
        }
    }

    /// A namespace of `nqn` changed in place (its size): connected controllers of the
    /// subsystem whose host can see it are told with a Namespace Attribute Changed event.
    pub fn namespace_changed(&self, nqn: &str, nsid: u32) {
        let Some(sub) = self.subsystem(nqn) else {
            return;
        };
        for c in self.controllers() {
            if !c.is_discovery() && c.subnqn() == nqn {
                let view = sub.view(&c.hostnqn);
                // A host that cannot see the namespace is not told.
                if view.namespace(nsid).is_some() {
                    c.set_subsystem(view, &[nsid]);
                }
            }
        }
    }

    /// The discovery log changed (subsystems, hosts or listeners): move its generation counter
    /// and raise Discovery Log Page Change on the discovery controllers that asked for it.
    pub fn discovery_log_changed(&self) {
        self.genctr.fetch_add(1, Ordering::Relaxed);
        for c in self.controllers() {
            c.discovery_changed();
        }
    }

    /// Replace the whole subsystem table by `f(current)` (adding or removing subsystems), with
    /// the same guarantees as [`Target::update_subsystem`]. Controllers of a subsystem that is
    /// no longer in the table are torn down (their queues close within a tick).
    pub fn update_table<E>(
        &self,
        f: impl FnOnce(&[Arc<Subsystem>]) -> Result<Vec<Arc<Subsystem>>, E>,
    ) -> Result<(), E> {
        let _w = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let table = self.subsystems.load_full();
        let mut next = f(&table)?;
        for s in &mut next {
            if s.namespaces.windows(2).any(|w| w[0].nsid > w[1].nsid) {
                Arc::make_mut(s).namespaces.sort_by_key(|n| n.nsid);
            }
        }
        let gone: Vec<String> = table
            .iter()
            .filter(|s| !next.iter().any(|n| n.nqn == s.nqn))
            .map(|s| s.nqn.clone())
            .collect();
        self.subsystems.store(Arc::new(next));
        for c in self.controllers() {
            if !c.is_discovery() && gone.contains(&c.subnqn()) {
                c.kill();
            }
        }
        self.discovery_log_changed();
        Ok(())
    }

    /// Live controllers, by controller id.
    pub fn controllers(&self) -> Vec<Arc<Controller>> {
        let r = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        let mut v: Vec<Arc<Controller>> = r
            .controllers
            .values()
            .filter_map(Weak::upgrade)
            .filter(|c| !c.is_dead())
            .collect();
        drop(r);
        v.sort_by_key(|c| c.cntlid.0);
        v
    }

    /// Allocate a free controller id and register the controller built by `make`.
    /// Returns `None` if every id is in use.
    pub(crate) fn register_controller(
        &self,
        make: impl FnOnce(ControllerId) -> Arc<Controller>,
    ) -> Option<Arc<Controller>> {
        let mut r = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        r.controllers.retain(|_, w| w.strong_count() > 0);
        let span = u32::from(ControllerId::MAX - ControllerId::MIN) + 1;
        for _ in 0..span {
            let id = r.next;
            r.next = if id >= ControllerId::MAX {
                ControllerId::MIN
            } else {
                id + 1
            };
            if let std::collections::hash_map::Entry::Vacant(v) = r.controllers.entry(id) {
                let c = make(ControllerId(id));
                v.insert(Arc::downgrade(&c));
                return Some(c);
            }
        }
        None
    }

    /// Find a live controller by id.
    pub fn controller(&self, id: u16) -> Option<Arc<Controller>> {
        let r = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        r.controllers
            .get(&id)
            .and_then(Weak::upgrade)
            .filter(|c| !c.is_dead())
    }

    /// Number of live controllers (for logs and tests).
    pub fn controller_count(&self) -> usize {
        let r = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        r.controllers
            .values()
            .filter(|w| w.upgrade().is_some_and(|c| !c.is_dead()))
            .count()
    }

    /// The discovery log generation counter (GENCTR): bumped when the log's content changes.
    pub fn discovery_genctr(&self) -> u64 {
        self.genctr.load(Ordering::Relaxed)
    }
}
