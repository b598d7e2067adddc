//! Replicated volumes on this box (ADR 0028): a namespace with `mirror = { peer, role }` runs
//! an [`ebof_mirror::Mirror`] over its backend, and its ANA group follows the mirror's role.
//!
//! * [`open`] (from [`crate::build::open_namespace`], at start and when the API adds a
//!   namespace) starts the mirror over the opened backend, with the target-side fence restored
//!   from the persisted state; the namespace is built over the mirror's backend and fence.
//! * The mirror is found again from its namespace's fence (one registry per process, keyed by
//!   the fence, so two boxes in one process never meet); [`bind`] tells it the live target so
//!   that every role change flips its ANA group on every listener (primary optimized, secondary
//!   or fenced inaccessible) and raises the ANA change event.
//! * The [`MirrorApply`] applier keeps the target in step with `[mirror]` and `[witness]`: the
//!   replication link's host NQN, the NQNs hosts must keep retrying (item 5 of the issue), the
//!   witness's lease table and subsystem, the mirrored groups' states on listeners added at run
//!   time, and it stops the mirrors of namespaces that are gone.
//! * The namespace view's `mirror`; the API's requests are [`crate::mirror_api`]'s.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use ebof_backend::Backend;
use ebof_config::{BackendChoice, Config, MirrorRole as CfgRole, NamespaceMirror};
use ebof_mirror::state::{self, State};
use ebof_mirror::{Mirror, MirrorSpec, MirrorStatus, NsFence, PeerState, Role, RoleSink};
use nvme_spec::ana::AnaState;
use nvmf_target::{MirrorFence, MirrorRole, Namespace, Target};

use crate::api::{ApiError, MirrorView};
use crate::apply::Apply;

/// A running mirror, found from its namespace's fence.
struct Entry {
    fence: Weak<MirrorFence>,
    /// The namespace (gone: nothing serves it any more, the mirror stops).
    ns: Weak<Namespace>,
    mirror: Arc<Mirror>,
    sink: Arc<AnaSink>,
}

/// Every mirror of this process (a handful: one per mirrored namespace).
static MIRRORS: Mutex<Vec<Entry>> = Mutex::new(Vec::new());

fn registry() -> MutexGuard<'static, Vec<Entry>> {
    MIRRORS.lock().unwrap_or_else(|e| e.into_inner())
}

/// The mirror of namespace `ns` (None: not mirrored, or its mirror stopped).
pub(crate) fn mirror_of(ns: &Namespace) -> Option<Arc<Mirror>> {
    let fence = ns.mirror.as_ref()?;
    registry()
        .iter()
        .find(|e| std::ptr::eq(e.fence.as_ptr(), Arc::as_ptr(fence)))
        .map(|e| e.mirror.clone())
}

/// The status of the mirror of `ns`: a secondary's epoch is its fence's (the primary's link
/// moves it with every Mirror Admit).
pub(crate) fn status_of(ns: &Namespace, m: &Mirror) -> MirrorStatus {
    let mut s = m.status();
    if let Some(f) = &ns.mirror {
        s.epoch = s.epoch.max(f.epoch());
    }
    s
}

/// Turns a mirror's role into its ANA group's state on every listener of the target.
#[derive(Debug)]
struct AnaSink {
    group: u32,
    /// (role, fenced) as last told.
    state: Mutex<(Role, bool)>,
    target: Mutex<Weak<Target>>,
}

impl AnaSink {
    fn ana_state(&self) -> AnaState {
        match *self.state.lock().unwrap_or_else(|e| e.into_inner()) {
            (Role::Primary, false) => AnaState::Optimized,
            _ => AnaState::Inaccessible,
        }
    }

    /// Set the group's state on every NVMe listener of `t` (an ANA change event where it
    /// changed).
    fn apply_to(&self, t: &Target) {
        let st = self.ana_state();
        for l in t.listeners().iter() {
            if let Err(e) = t.set_ana_state(l.addr, self.group, st) {
                tracing::warn!(group = self.group, addr = %l.addr, "mirror ANA state: {e}");
            }
        }
    }

    fn push(&self) {
        let t = self
            .target
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .upgrade();
        if let Some(t) = t {
            self.apply_to(&t);
        }
    }

    fn bound_to(&self, t: &Target) -> bool {
        std::ptr::eq(
            self.target
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_ptr(),
            t,
        )
    }
}

impl RoleSink for AnaSink {
    fn role_changed(&self, role: Role, epoch: u64) {
        tracing::info!(group = self.group, ?role, epoch, "mirror role");
        self.state.lock().unwrap_or_else(|e| e.into_inner()).0 = role;
        self.push();
    }

    fn fenced(&self, fenced: bool) {
        if fenced {
            tracing::warn!(
                group = self.group,
                "mirror fenced: no lease, paths inaccessible"
            );
        }
        self.state.lock().unwrap_or_else(|e| e.into_inner()).1 = fenced;
        self.push();
    }
}

/// A mirror started over a namespace's backend, to be attached to the namespace once built.
pub(crate) struct Opened {
    /// The backend the namespace must use.
    pub(crate) backend: Arc<dyn Backend>,
    /// The fence the namespace must carry (`Namespace::with_mirror`).
    pub(crate) fence: Arc<MirrorFence>,
    ns_fence: Arc<NsFence>,
    mirror: Arc<Mirror>,
    sink: Arc<AnaSink>,
    /// This copy's snapshots when its primary asks (file namespaces).
    snaps: Option<Arc<crate::snapshot_take::CopySnapshots>>,
}

impl Opened {
    /// The namespace is built: promotions drain its commands, its reservations are
    /// replicated, and the mirror is registered.
    pub(crate) fn attach(self, ns: &Arc<Namespace>) {
        self.ns_fence.attach(ns);
        self.mirror.attach_reservations(ns);
        if let Some(s) = self.snaps {
            s.attach(ns);
            self.fence.set_snapshots(s);
        }
        registry().push(Entry {
            fence: Arc::downgrade(&self.fence),
            ns: Arc::downgrade(ns),
            mirror: self.mirror,
            sink: self.sink,
        });
    }
}

/// Where the mirror of `n` keeps its epoch (the bitmap goes beside it): in `[target]
/// state_dir` as `mirror-<uuid>.state`, else beside a file namespace's file as `<path>.mirror`.
/// RAM and block namespaces need a state directory (checked by the configuration).
pub(crate) fn state_path(n: &ebof_config::Namespace, cfg: &Config) -> Option<PathBuf> {
    if let Some(d) = &cfg.target.state_dir {
        let uuid = uuid::Uuid::from_bytes(n.uuid);
        return Some(d.join(format!("mirror-{uuid}.state")));
    }
    match &n.backend {
        BackendChoice::File { path, .. } => {
            let mut p = path.clone().into_os_string();
            p.push(".mirror");
            Some(PathBuf::from(p))
        }
        _ => None,
    }
}

/// This box towards a witness, for the mirror whose peer is `peer`: SHA-256 of its sorted NVMe
/// listeners, the peer's address and the machine id, first 16 bytes. The two boxes of a
/// mirror never share it, even when both listen on `0.0.0.0:4420` (their peers differ), and a
/// box keeps it across restarts.
fn holder_id(cfg: &Config, peer: std::net::SocketAddr) -> [u8; 16] {
    let mut l: Vec<String> = cfg.listeners.iter().map(|l| l.to_string()).collect();
    l.sort();
    let machine = std::fs::read_to_string("/etc/machine-id").unwrap_or_default();
    let text = format!("{}|peer {peer}|machine {}", l.join(","), machine.trim());
    let d = openssl::sha::sha256(text.as_bytes());
    let mut id = [0u8; 16];
    id.copy_from_slice(&d[..16]);
    id
}

/// How the box connects as the replication link's (and the witness's) host: `[mirror]
/// link_hostnqn`, with the DH-HMAC-CHAP keys of its `[[hosts]]` entry when there is one (both
/// boxes of a mirror hold the same entry: each is the other's host).
fn link_host(
    nqn: &str,
    hostid: [u8; 16],
    cfg: &Config,
    field: &str,
) -> Result<nvmf_host::HostConfig, String> {
    let link = &cfg.mirror.link_hostnqn;
    let entry = cfg.hosts.iter().enumerate().find_map(|(i, h)| {
        let key = h.dhchap_key.as_ref()?;
        (&h.nqn == link && h.subsystem.as_deref().is_none_or(|s| s == nqn)).then_some((i, h, key))
    });
    let dhchap = match entry {
        None => None,
        Some((i, h, key)) => {
            let secret = |s: &ebof_config::SecretSource, what: &str| {
                s.resolve()
                    .map_err(|e| format!("{field}.mirror: hosts[{i}].{what}: {e}"))
            };
            let host = secret(key, "dhchap_key")?;
            let ctrl = h
                .dhchap_ctrl_key
                .as_ref()
                .map(|k| secret(k, "dhchap_ctrl_key"))
                .transpose()?;
            Some(
                nvmf_host::DhchapKeys::parse(&host, ctrl.as_deref())
                    .map_err(|e| format!("{field}.mirror: hosts[{i}]: {e}"))?,
            )
        }
    };
    Ok(nvmf_host::HostConfig {
        hostnqn: link.clone(),
        hostid,
        dhchap,
        // The secondary learns that the primary's link is gone when its keep-alive expires
        // (a paused primary): no longer than the lease.
        kato_ms: cfg.mirror.lease_ms.max(1000),
        ..nvmf_host::HostConfig::default()
    })
}

/// The target-side fence of `n`, restored from the persisted state (secondary at its epoch;
/// the mirror decides the role). A RAM copy does not survive a restart: its state is marked
/// not synced first, so the primary copies it whole.
fn fence(
    n: &ebof_config::Namespace,
    path: Option<&PathBuf>,
    field: &str,
) -> Result<MirrorFence, String> {
    let Some(path) = path else {
        return Ok(MirrorFence::new(0, MirrorRole::Secondary));
    };
    let err = |e: std::io::Error| format!("{field}.mirror: state {}: {e}", path.display());
    let mut st = state::load(path).map_err(err)?;
    if let Some(s) = &mut st
        && s.synced
        && matches!(n.backend, BackendChoice::Ram { .. })
    {
        s.synced = false;
        state::save(path, s).map_err(err)?;
    }
    let (epoch, synced) = st.map_or((0, 0), |s| (s.epoch, if s.synced { s.epoch } else { 0 }));
    let p = path.clone();
    let persist: nvmf_target::PersistFn = Box::new(move |epoch, synced| {
        let role = state::load(&p)
            .ok()
            .flatten()
            .map_or(Role::Secondary, |s| s.role);
        state::save(
            &p,
            &State {
                epoch,
                role,
                synced,
            },
        )
    });
    Ok(MirrorFence::new(epoch, MirrorRole::Secondary)
        .with_synced(synced)
        .with_persist(persist))
}

/// Start the mirror of namespace `n` of subsystem `nqn` over its opened backend `local`.
pub(crate) fn open(
    nqn: &str,
    n: &ebof_config::Namespace,
    m: &NamespaceMirror,
    cfg: &Config,
    local: Arc<dyn Backend>,
    field: &str,
) -> Result<Opened, String> {
    let s = &cfg.mirror;
    let path = state_path(n, cfg);
    if let Some(dir) = path.as_ref().and_then(|p| p.parent())
        && !dir.as_os_str().is_empty()
    {
        std::fs::create_dir_all(dir).map_err(|e| {
            format!(
                "{field}.mirror: cannot create the state directory {}: {e}",
                dir.display()
            )
        })?;
    }
    let holder = holder_id(cfg, m.peer);
    let spec = MirrorSpec {
        subnqn: nqn.to_string(),
        nsid: n.nsid,
        volume_id: n.uuid,
        block_size: n.block_size,
        peer: m.peer,
        role: match m.role {
            CfgRole::Primary => Role::Primary,
            CfgRole::Secondary => Role::Secondary,
        },
        link_hostnqn: s.link_hostnqn.clone(),
        link_queues: s.link_queues,
        host: link_host(nqn, holder, cfg, field)?,
        witness: s.witness,
        lease: Duration::from_millis(u64::from(s.lease_ms)),
        resync_bytes_per_sec: (s.resync_mbps > 0).then(|| u64::from(s.resync_mbps) * 1_000_000),
        region_bytes: u64::from(s.region_kib) * 1024,
        state_path: path.clone(),
        holder_id: holder,
    };
    let fence = Arc::new(fence(n, path.as_ref(), field)?);
    let ns_fence = NsFence::new(fence.clone());
    let sink = Arc::new(AnaSink {
        group: n.ana_group,
        state: Mutex::new((Role::Secondary, false)),
        target: Mutex::new(Weak::new()),
    });
    let mirror = Mirror::start(spec, local, ns_fence.clone(), sink.clone())
        .map_err(|e| format!("{field}.mirror: {e}"))?;
    Ok(Opened {
        backend: mirror.backend(),
        fence,
        ns_fence,
        mirror,
        sink,
        snaps: crate::snapshot_take::CopySnapshots::new(nqn, n),
    })
}

/// The fences of `t`'s mirrored namespaces.
fn fences_of(t: &Target) -> Vec<*const MirrorFence> {
    t.subsystems()
        .iter()
        .flat_map(|s| s.namespaces.iter())
        .filter_map(|n| n.mirror.as_ref().map(Arc::as_ptr))
        .collect()
}

/// The live target of the mirrors of its namespaces: from now on each role change sets the
/// namespace's ANA group on the target's listeners (set now too).
pub(crate) fn bind(t: &Arc<Target>) {
    let fences = fences_of(t);
    for e in registry().iter() {
        if fences.contains(&e.fence.as_ptr()) {
            *e.sink.target.lock().unwrap_or_else(|e| e.into_inner()) = Arc::downgrade(t);
            e.sink.apply_to(t);
        }
    }
}

/// Set the ANA group of mirrored namespace `ns` on `t`'s listeners now (before it is published,
/// so no host sees a secondary as optimized).
pub(crate) fn apply_now(ns: &Namespace, t: &Target) {
    let Some(fence) = ns.mirror.as_ref() else {
        return;
    };
    for e in registry().iter() {
        if std::ptr::eq(e.fence.as_ptr(), Arc::as_ptr(fence)) {
            e.sink.apply_to(t);
        }
    }
}

/// Stop the mirrors of `t`'s namespaces (the box stops; its servers are stopped already).
pub(crate) fn stop_all(t: &Target) {
    let fences = fences_of(t);
    let stopped: Vec<Entry> = {
        let mut r = registry();
        let (gone, keep): (Vec<Entry>, Vec<Entry>) = r
            .drain(..)
            .partition(|e| fences.contains(&e.fence.as_ptr()) || e.sink.bound_to(t));
        *r = keep;
        gone
    };
    for e in stopped {
        e.mirror.stop();
    }
}

/// Keeps the target in step with `[mirror]`, `[witness]` and the mirrored namespaces (see the
/// module docs).
#[derive(Debug)]
pub struct MirrorApply;

impl Apply for MirrorApply {
    fn apply(&self, _old: &Config, new: &Config, live: &Target) -> Result<(), ApiError> {
        let mirrored: Vec<String> = new
            .subsystems
            .iter()
            .filter(|s| s.namespaces.iter().any(|n| n.mirror.is_some()))
            .map(|s| s.nqn.clone())
            .collect();
        live.set_mirror_link_nqn((!mirrored.is_empty()).then(|| new.mirror.link_hostnqn.clone()));
        live.set_expected_nqns(mirrored);
        match &new.witness {
            Some(w) => {
                if !live.is_witness() {
                    let max = Duration::from_millis(u64::from(w.lease_max_ms));
                    live.set_witness(Some(crate::witness_store::open(new, max)?));
                }
                live.set_witness_hosts(Some(w.hosts.clone()));
            }
            None => {
                live.set_witness(None);
                live.set_witness_hosts(None);
            }
        }
        let fences = fences_of(live);
        let gone: Vec<Entry> = {
            let mut r = registry();
            for e in r.iter().filter(|e| fences.contains(&e.fence.as_ptr())) {
                e.sink.apply_to(live);
            }
            // Gone: removed from this target, or a namespace nothing holds any more (one whose
            // start failed after its mirror started).
            let (gone, keep): (Vec<Entry>, Vec<Entry>) = r.drain(..).partition(|e| {
                (e.sink.bound_to(live) && !fences.contains(&e.fence.as_ptr()))
                    || e.ns.strong_count() == 0
            });
            *r = keep;
            gone
        };
        for e in gone {
            e.mirror.stop();
        }
        Ok(())
    }
}

/// The lowest ANA group no namespace and no `[[ana]]` entry uses (None: all are used; the
/// namespace is then refused by the configuration's check, which says why).
pub(crate) fn free_ana_group(cfg: &Config) -> Option<u32> {
    (1..=ebof_config::ANA_GROUP_MAX).find(|g| {
        !cfg.subsystems
            .iter()
            .flat_map(|s| s.namespaces.iter())
            .any(|n| n.ana_group == *g)
            && !cfg.ana.iter().any(|a| a.group == *g)
    })
}

/// The ANA groups the mirrors drive (the ANA applier leaves them alone).
pub(crate) fn mirrored_group(cfg: &Config, group: u32) -> bool {
    cfg.subsystems
        .iter()
        .flat_map(|s| s.namespaces.iter())
        .any(|n| n.mirror.is_some() && n.ana_group == group)
}

/// The API's view of a mirror's status.
pub(crate) fn view(s: &MirrorStatus) -> MirrorView {
    let (state, done, total) = match s.peer {
        PeerState::InSync => ("in-sync", 0, 0),
        PeerState::Degraded => ("degraded", 0, 0),
        PeerState::Resyncing { done, total } => ("resyncing", done, total),
        PeerState::Connecting => ("connecting", 0, 0),
    };
    MirrorView {
        role: match s.role {
            Role::Primary => "primary",
            Role::Secondary => "secondary",
        }
        .into(),
        epoch: s.epoch,
        peer: s.peer_addr.to_string(),
        state: state.into(),
        resync_done: done,
        resync_total: total,
        resync_bytes_left: s.resync_bytes_left,
        dirty_regions: s.dirty_regions,
        in_flight: s.in_flight,
        lease_ms_left: s.lease_ms_left,
        fenced: s.fenced,
    }
}

/// The mirror view of namespace `ns`, when it is mirrored.
pub(crate) fn view_of(ns: &Namespace) -> Option<MirrorView> {
    mirror_of(ns).map(|m| view(&status_of(ns, &m)))
}

/// Every mirror of `t` with its subsystem NQN and NSID (metrics).
pub(crate) fn statuses(t: &Target) -> Vec<(String, u32, MirrorStatus)> {
    let mut out = Vec::new();
    for s in t.subsystems().iter() {
        for n in &s.namespaces {
            if let Some(m) = mirror_of(n) {
                out.push((s.nqn.clone(), n.nsid, status_of(n, &m)));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two boxes configured alike (both on 0.0.0.0:4420) are two holders to the witness: a
    /// secondary must never renew its primary's lease as if it were the primary.
    #[test]
    fn the_two_boxes_of_a_mirror_are_distinct_holders() {
        let mut cfg = Config::embedded_default();
        cfg.listeners = vec![ebof_config::Listener {
            address: "0.0.0.0".parse().unwrap(),
            port: 4420,
        }];
        let a: std::net::SocketAddr = "10.0.0.1:4420".parse().unwrap();
        let b: std::net::SocketAddr = "10.0.0.2:4420".parse().unwrap();
        assert_ne!(holder_id(&cfg, b), holder_id(&cfg, a));
        assert_eq!(
            holder_id(&cfg, b),
            holder_id(&cfg, b),
            "stable across restarts"
        );
    }
}
