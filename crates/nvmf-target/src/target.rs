//! The target on top of the model: [`Target`] holds the subsystem table (published as an
//! immutable snapshot), the controller registry and the target-wide registries: the ANA table
//! ([`crate::ana`]), the authentication policy ([`crate::auth`]), the Central Discovery
//! Controller, referrals and DIM registrations ([`crate::discovery`]). The leaf data it holds
//! is in `model.rs`.

use crate::ana::{AnaError, AnaState};
use crate::controller::Controller;
use crate::model::{
    EventCounters, ListenerInfo, Subsystem, TargetLimits, UpdateError, changed_namespaces,
};
use arc_swap::ArcSwap;
use nvme_spec::ControllerId;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

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
    /// Per-host I/O counters, when enabled ([`crate::host_io`]).
    pub host_io: crate::host_io::HostIoTable,
    /// How busy each run loop is ([`crate::load`]).
    pub loads: crate::load::LoadTable,
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
    /// Subsystem NQNs removed while running or expected ([`Target::will_serve`]).
    known: crate::known::KnownNqns,
    /// Host NQN of mirror replication links ([`Target::set_mirror_link_nqn`]).
    mirror_link_nqn: Mutex<Option<String>>,
    /// The witness's lease table, when this box is a witness ([`Target::set_witness`]).
    witness: Mutex<Option<crate::witness::LeaseTable>>,
    /// The witness subsystem a box with `[witness]` serves outside its subsystem table
    /// ([`Target::set_witness_hosts`]): never in a discovery log nor in [`Target::subsystems`].
    witness_sub: Mutex<Option<Arc<Subsystem>>>,
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
            host_io: Default::default(),
            loads: Default::default(),
            listeners: ArcSwap::from_pointee(listeners),
            limits,
            genctr: AtomicU64::new(1),
            started: now,
            registry: Mutex::new(Registry {
                controllers: HashMap::new(),
                // kept in range where it is used (`register_controller`)
                next: limits.cntlid_min,
            }),
            ana: crate::ana::AnaTable::new(),
            auth: Mutex::new(None),
            central: Mutex::new(None),
            referrals: ArcSwap::from_pointee(Vec::new()),
            dim: Mutex::new(Default::default()),
            known: Default::default(),
            mirror_link_nqn: Mutex::new(None),
            witness: Mutex::new(None),
            witness_sub: Mutex::new(None),
        }
    }

    /// Make this box a witness with `table` (Witness Lease, C5h, is then answered on
    /// controllers of [`crate::witness::WITNESS_NQN`]), or stop being one with `None`.
    pub fn set_witness(&self, table: Option<crate::witness::LeaseTable>) {
        *self.witness.lock().unwrap_or_else(|e| e.into_inner()) = table;
    }

    /// Serve the witness subsystem ([`crate::witness::WITNESS_NQN`], no namespaces) to the host
    /// NQNs `hosts` only, outside the subsystem table (so no discovery log lists it and the
    /// control plane's subsystems are untouched); `None` stops serving it. A subsystem of that
    /// NQN in the table, if any, is found first.
    pub fn set_witness_hosts(&self, hosts: Option<Vec<String>>) {
        let sub = hosts.map(|hosts| {
            Arc::new(Subsystem {
                nqn: crate::witness::WITNESS_NQN.to_string(),
                serial: "EBOFWITNESS".into(),
                model: "ebof witness".into(),
                allow_any_host: false,
                hosts,
                namespaces: Vec::new(),
                ns_hosts: Default::default(),
            })
        });
        *self.witness_sub.lock().unwrap_or_else(|e| e.into_inner()) = sub;
    }

    /// This box is a witness ([`Target::set_witness`]).
    pub fn is_witness(&self) -> bool {
        self.witness
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    /// Answer a lease request at `now` (`None`: this box is no witness).
    pub fn witness_request(
        &self,
        req: &crate::witness::LeaseRequest,
        now: Instant,
    ) -> Option<crate::witness::LeaseReply> {
        self.witness
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
            .map(|t| t.request(req, now))
    }

    /// Connections whose Connect host NQN is `nqn` are mirror replication links (ADR 0028):
    /// their I/O is fenced by the namespace's `MirrorFence` instead of ANA and reservations,
    /// and they may send Mirror Admit (C1h). `None`: no replication links.
    pub fn set_mirror_link_nqn(&self, nqn: Option<String>) {
        *self
            .mirror_link_nqn
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = nqn;
    }

    /// The host NQN of mirror replication links ([`Target::set_mirror_link_nqn`]).
    pub fn mirror_link_nqn(&self) -> Option<String> {
        self.mirror_link_nqn
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// True when `hostnqn` is the mirror replication links' host NQN.
    pub fn is_mirror_link(&self, hostnqn: &str) -> bool {
        self.mirror_link_nqn
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_deref()
            == Some(hostnqn)
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
        let found = self
            .subsystems
            .load()
            .iter()
            .find(|s| s.nqn == nqn)
            .cloned();
        if found.is_none() && nqn == crate::witness::WITNESS_NQN {
            return self
                .witness_sub
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
        }
        found
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
        // Remembered before the swap: a Connect that finds the subsystem gone finds it here.
        self.known.removed(gone.iter().map(String::as_str));
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
        let (min, max) = self.cntlid_range();
        let span = u32::from(max - min) + 1;
        for _ in 0..span {
            let id = r.next.clamp(min, max);
            r.next = if id >= max { min } else { id + 1 };
            if let std::collections::hash_map::Entry::Vacant(v) = r.controllers.entry(id) {
                let c = make(ControllerId(id));
                v.insert(Arc::downgrade(&c));
                return Some(c);
            }
        }
        None
    }

    /// The controller IDs this target hands out (`TargetLimits::cntlid_min..=cntlid_max`,
    /// kept within 1..=FFEFh and ordered even if the limits were not).
    pub fn cntlid_range(&self) -> (u16, u16) {
        let lo = self
            .limits
            .cntlid_min
            .clamp(ControllerId::MIN, ControllerId::MAX);
        let hi = self.limits.cntlid_max.clamp(lo, ControllerId::MAX);
        (lo, hi)
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

impl Target {
    /// True when `nqn`, though not in the table now, is a subsystem this target will serve
    /// again: one removed while it runs ([`Target::update_table`]; the last
    /// [`crate::known::MAX_TOMBSTONES`] removed are remembered) or one the control plane
    /// expects ([`Target::set_expected_nqns`]). A Connect to it is refused without DNR, so the
    /// host retries until its `ctrl_loss_tmo` instead of deleting its controller.
    pub fn will_serve(&self, nqn: &str) -> bool {
        self.known.will_serve(nqn)
    }

    /// Replace the subsystem NQNs the control plane expects to serve (a mirrored namespace's
    /// subsystem, absent for a moment during a role change) whether or not they are in the
    /// table now.
    pub fn set_expected_nqns(&self, nqns: impl IntoIterator<Item = String>) {
        self.known.set_expected(nqns);
    }

    /// The expected subsystem NQNs ([`Target::set_expected_nqns`]), sorted.
    pub fn expected_nqns(&self) -> Vec<String> {
        self.known.expected()
    }
}

impl Target {
    /// Set the state of ANA group `grpid` on listener `addr`; when it changed, every I/O
    /// controller that came in through `addr` and has a namespace in the group gets an ANA
    /// Change event. Returns whether it changed.
    pub fn set_ana_state(
        &self,
        addr: SocketAddr,
        grpid: u32,
        state: AnaState,
    ) -> Result<bool, AnaError> {
        if !self.ana.set(addr, grpid, state)? {
            return Ok(false);
        }
        tracing::info!(%addr, group = grpid, %state, "ANA state changed");
        for c in self.controllers() {
            if c.local_addr() == Some(addr)
                && c.subsystem()
                    .is_some_and(|s| s.namespaces.iter().any(|n| n.ana_group() == grpid))
            {
                c.ana_changed();
            }
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Controller, ControllerKind, TargetLimits};

    fn target(min: u16, max: u16) -> Target {
        let limits = TargetLimits {
            cntlid_min: min,
            cntlid_max: max,
            ..TargetLimits::default()
        };
        Target::new(vec![], vec![], limits, Instant::now())
    }

    fn register(t: &Target) -> Option<Arc<Controller>> {
        t.register_controller(|id| {
            Arc::new(Controller::new(
                id,
                ControllerKind::Discovery,
                "nqn.2014-08.org.nvmexpress:uuid:0".into(),
                [0; 16],
                None,
                0,
                Instant::now(),
            ))
        })
    }

    #[test]
    fn controller_ids_come_from_the_configured_range_only() {
        let t = target(1001, 1003);
        assert_eq!(t.cntlid_range(), (1001, 1003));
        let a = register(&t).unwrap();
        let b = register(&t).unwrap();
        let c = register(&t).unwrap();
        let mut ids = [a.cntlid.0, b.cntlid.0, c.cntlid.0];
        ids.sort_unstable();
        assert_eq!(ids, [1001, 1002, 1003]);
        // the range is used up: Connect answers Controller Busy
        assert!(register(&t).is_none());
        // a freed ID is handed out again, still inside the range
        drop(b);
        let d = register(&t).unwrap();
        assert!((1001..=1003).contains(&d.cntlid.0));
    }

    #[test]
    fn a_range_out_of_bounds_is_clamped_to_valid_ids() {
        let t = target(0, 0xFFFF);
        assert_eq!(t.cntlid_range(), (ControllerId::MIN, ControllerId::MAX));
        assert_eq!(register(&t).unwrap().cntlid.0, ControllerId::MIN);
        let t = target(9, 3);
        assert_eq!(t.cntlid_range(), (9, 9));
        let only = register(&t).unwrap();
        assert_eq!(only.cntlid.0, 9);
        assert!(register(&t).is_none());
    }
}
