//! Synchronous mirroring of one namespace between two ebof boxes (issue 34).
//!
//! A [`Mirror`] owns a replication link (ordinary NVMe/TCP through `nvmf-host`) to the peer box
//! and hands the namespace a [`Mirror::backend`] that, on the primary, completes a write only
//! once both copies have it; when the peer is unreachable it goes on alone (degraded), marking
//! written regions dirty, and resyncs them when the link is back. With a witness
//! ([`MirrorSpec::witness`]) the primary writes only while it holds the witness's lease, and a
//! secondary whose copy is in sync promotes itself when the witness grants it the lease (see
//! `lease.rs`). See `notes/mirror-design.md` and ADR 0028.

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod backend;
pub mod bitmap;
mod chan;
mod fence;
mod lease;
mod link;
mod pipe;
pub mod regions;
mod resv;
mod role;
mod shared;
mod snap;
pub mod state;
pub mod witness;
mod worker;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ebof_backend::Backend;

pub use backend::MirrorBackend;
pub use fence::NsFence;
use role::{Roles, persist};
use shared::Shared;

/// The role of this box for one mirrored namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Serves host I/O and replicates writes to the peer.
    Primary,
    /// Takes only replication writes from the peer's link.
    Secondary,
}

/// What the primary knows of its peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerState {
    /// Every acknowledged write is on both copies.
    InSync,
    /// The peer is unreachable; writes complete locally and mark regions dirty.
    Degraded,
    /// The link is up and dirty regions are being copied: `done` of `total` bytes.
    Resyncing {
        /// Bytes copied so far.
        done: u64,
        /// Bytes to copy in this pass.
        total: u64,
    },
    /// No link yet (start, or a secondary, which has no link of its own).
    Connecting,
}

/// A snapshot of a mirror's state (API view, metrics).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorStatus {
    /// Current role.
    pub role: Role,
    /// Current epoch.
    pub epoch: u64,
    /// Peer state.
    pub peer: PeerState,
    /// The peer's address.
    pub peer_addr: SocketAddr,
    /// Replicated operations in flight.
    pub in_flight: u64,
    /// Bytes still to copy to the peer (dirty regions × region size).
    pub resync_bytes_left: u64,
    /// Dirty regions in the write-intent bitmap.
    pub dirty_regions: u64,
    /// Milliseconds left of our lease (None without a witness).
    pub lease_ms_left: Option<u64>,
    /// The primary lost its lease: it completes no write.
    pub fenced: bool,
}

/// Everything a mirror needs, built by ebof-mgmt from the configuration.
#[derive(Debug, Clone)]
pub struct MirrorSpec {
    /// Subsystem NQN (the same on both boxes).
    pub subnqn: String,
    /// Namespace ID (the same on both boxes).
    pub nsid: u32,
    /// Volume identity (NGUID).
    pub volume_id: [u8; 16],
    /// Logical block size in bytes.
    pub block_size: u32,
    /// The peer box's NVMe/TCP listener.
    pub peer: SocketAddr,
    /// Role as configured; used only on a first start (no persisted state).
    pub role: Role,
    /// Host NQN of the replication link.
    pub link_hostnqn: String,
    /// I/O queues of the replication link.
    pub link_queues: u16,
    /// Host settings for the link (keys, TLS, timeouts); `hostnqn` is replaced by `link_hostnqn`.
    pub host: nvmf_host::HostConfig,
    /// Witness address (None: manual promotion only).
    pub witness: Option<SocketAddr>,
    /// Lease length.
    pub lease: Duration,
    /// Resync rate limit (None: unlimited).
    pub resync_bytes_per_sec: Option<u64>,
    /// Write-intent bitmap granularity in bytes.
    pub region_bytes: u64,
    /// Persisted state (epoch, role, synced); the bitmap lives beside it. None: memory only.
    pub state_path: Option<PathBuf>,
    /// This box's identity towards the witness.
    pub holder_id: [u8; 16],
}

/// Told of every role change (ebof-mgmt flips the namespace's ANA group).
pub trait RoleSink: Send + Sync + 'static {
    /// The mirror became `role` at `epoch`.
    fn role_changed(&self, role: Role, epoch: u64);
    /// The primary lost its lease (`true`: it completes no write or flush, the box should make
    /// the namespace's ANA group inaccessible) or got it back (`false`: the group goes back to
    /// what the role says). Called whenever `status().fenced` changes, so the sink's view
    /// always follows it: a primary with a witness is told `fenced(true)` right after
    /// `role_changed(Primary, _)` at start, until its first grant; a demotion (always from a
    /// fenced primary) is `role_changed(Secondary, _)` then `fenced(false)`. Only a primary is
    /// ever fenced.
    fn fenced(&self, fenced: bool) {
        let _ = fenced;
    }
}

/// The target-side fence of a mirrored namespace (implemented for `nvmf_target::MirrorFence`
/// by the control plane; a trait so this crate does not depend on the target's internals).
pub trait Fence: Send + Sync + 'static {
    /// The fence's current epoch.
    fn epoch(&self) -> u64;
    /// Drain replica writes, bump the epoch to `new_epoch`, become primary.
    fn promote(&self, new_epoch: u64) -> Result<(), String>;
    /// Become secondary (new replica writes at the current epoch or later are admitted).
    fn demote(&self);
    /// The epoch the local copy was last synced at (0: never, or unknown). A secondary with a
    /// witness asks for the lease (automatic promotion) only while this equals its current
    /// epoch; the default (0) means "never promoted by the witness".
    fn synced_epoch(&self) -> u64 {
        0
    }
    /// A replication link from the primary is connected to this box now. A secondary does not
    /// ask the witness for a takeover while it is (the primary is alive; and a witness with no
    /// record of the volume, freshly started, must not hand it to the secondary instead of the
    /// primary that is waiting for its lease). The default (false) never holds a takeover back.
    fn peer_linked(&self) -> bool {
        false
    }
}

/// The error a mirrored namespace's backend returns for a write or flush this box must not
/// complete (not the primary's lease holder, or the peer unreachable and the witness did not
/// take our "peer not in sync" report): the engine answers it ANA Inaccessible (SCT 3h SC 02h,
/// DNR clear), so the host retries on the other path.
pub use ebof_backend::PathInaccessible;

/// The error [`MirrorBackend`] returns when it must not complete a write or flush.
pub(crate) fn inaccessible() -> ebof_backend::BackendError {
    ebof_backend::BackendError::path_inaccessible()
}

/// True for the error [`MirrorBackend`] returns when it must not complete a write or flush
/// ([`PathInaccessible`]).
pub fn is_inaccessible(e: &ebof_backend::BackendError) -> bool {
    e.is_path_inaccessible()
}

/// What can go wrong with a mirror.
#[derive(Debug, thiserror::Error)]
pub enum MirrorError {
    /// The spec is unusable (zero region, block size, …).
    #[error("invalid mirror spec: {0}")]
    Spec(String),
    /// Reading or writing the persisted state failed.
    #[error("mirror state {}: {source}", path.display())]
    State {
        /// The state file.
        path: PathBuf,
        /// What the kernel said.
        source: std::io::Error,
    },
    /// Promotion refused: already primary, or a witness is configured and `force` not given.
    #[error("cannot promote: {0}")]
    Promote(String),
    /// The link thread could not be started.
    #[error("cannot start the replication link: {0}")]
    Thread(std::io::Error),
    /// The peer's snapshot was not taken (or deleted): why (`Mirror::peer_snapshot`).
    #[error("{0}")]
    Snapshot(String),
}

/// One mirrored namespace on this box.
pub struct Mirror {
    shared: Arc<Shared>,
    local: Arc<dyn Backend>,
    resv: Arc<resv::ResvSource>,
    link: link::LinkHandle,
    lease: Option<lease::LeaseHandle>,
    roles: Arc<Roles>,
}

impl std::fmt::Debug for Mirror {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mirror")
            .field("status", &self.status())
            .finish()
    }
}

impl Mirror {
    /// Start the mirror of one namespace over `local`. A namespace with persisted state comes
    /// back as secondary; only a first start takes `spec.role`.
    pub fn start(
        spec: MirrorSpec,
        local: Arc<dyn Backend>,
        fence: Arc<dyn Fence>,
        sink: Arc<dyn RoleSink>,
    ) -> Result<Arc<Mirror>, MirrorError> {
        if spec.region_bytes == 0 || spec.block_size == 0 || spec.link_queues == 0 {
            return Err(MirrorError::Spec(
                "region, block size and link queues must be > 0".into(),
            ));
        }
        if spec.witness.is_some() && !(1..=60_000).contains(&spec.lease.as_millis()) {
            return Err(MirrorError::Spec(
                "with a witness the lease must be 1 ms..=60 s".into(),
            ));
        }
        let (role, epoch) = initial_role(&spec, fence.epoch())?;
        let bitmap_path = spec.state_path.as_ref().map(|p| p.with_extension("bitmap"));
        let bitmap = bitmap::Bitmap::open(local.size(), spec.region_bytes, bitmap_path.as_deref())
            .map_err(|source| MirrorError::State {
                path: bitmap_path.clone().unwrap_or_default(),
                source,
            })?;
        let shared = Arc::new(Shared::new(spec, local.size(), role, epoch, bitmap));
        if role == Role::Primary {
            // A first-start primary has never synced the peer: full copy once it is reachable.
            shared.mark_all_dirty();
        }
        let with_witness = shared.spec.witness.is_some();
        if role == Role::Primary && with_witness {
            // No write before the witness's first grant.
            shared
                .fenced
                .store(true, std::sync::atomic::Ordering::Release);
        }
        match role {
            Role::Primary => fence.promote(epoch).map_err(MirrorError::Promote)?,
            Role::Secondary => fence.demote(),
        }
        let resv = Arc::new(resv::ResvSource::default());
        let link = link::start(shared.clone(), local.clone(), resv.clone())
            .map_err(MirrorError::Thread)?;
        let roles = Arc::new(Roles::new(shared.clone(), fence, sink));
        roles.sink.role_changed(role, epoch);
        if role == Role::Primary && with_witness {
            roles.sink.fenced(true);
        }
        let lease = match lease::start(roles.clone()) {
            Ok(l) => l,
            Err(e) => {
                link.stop();
                return Err(MirrorError::Thread(e));
            }
        };
        Ok(Arc::new(Mirror {
            shared,
            local,
            resv,
            link,
            lease,
            roles,
        }))
    }

    /// The backend the namespace must use instead of the local one.
    pub fn backend(self: &Arc<Self>) -> Arc<dyn Backend> {
        Arc::new(MirrorBackend::new(
            self.shared.clone(),
            self.local.clone(),
            self.link.sender(),
            self.lease.as_ref().map(lease::LeaseHandle::sender),
        ))
    }

    /// Replicate the reservations of `ns` (the namespace built over [`Mirror::backend`]): on
    /// the primary every change reaches the peer before it takes effect, and the whole table
    /// before the peer is in sync (ADR 0028). First call wins.
    pub fn attach_reservations(&self, ns: &Arc<nvmf_target::Namespace>) {
        self.resv.attach(ns);
        ns.resv.set_replica(Arc::new(resv::Replicator {
            shared: self.shared.clone(),
            link: self.link.sender(),
            lease: self.lease.as_ref().map(lease::LeaseHandle::sender),
        }));
    }

    /// A snapshot of the mirror's state.
    pub fn status(&self) -> MirrorStatus {
        self.shared.status()
    }

    /// Manual promotion (no witness, or `force`): epoch + 1, role primary; the peer gets a
    /// full copy when it comes back.
    ///
    /// With a witness, `force` is a manual override and **unsafe**: the box serves without a
    /// lease (never fenced, never demoted by the witness) until the witness grants it one; if
    /// the old primary is in fact alive and writing, both copies diverge (split brain). Use it
    /// only when the old primary is known dead and the witness will not grant the lease (its
    /// last report said not in sync, or the witness itself is gone).
    pub fn promote(&self, force: bool) -> Result<(), MirrorError> {
        if self.shared.role() == Role::Primary {
            return Err(MirrorError::Promote("already primary".into()));
        }
        let forced = self.shared.spec.witness.is_some();
        if forced && !force {
            return Err(MirrorError::Promote("a witness decides; use force".into()));
        }
        if forced {
            tracing::warn!(
                nsid = self.shared.spec.nsid,
                "mirror: forced promotion past the witness (serving without a lease)"
            );
        }
        self.roles.promote(None, forced).map(|_| ())
    }

    /// Stop the lease and link threads (joins them; no lease Release is sent: the lease runs
    /// out on the witness). In-flight replicated writes fail into degraded mode.
    pub fn stop(&self) {
        if let Some(l) = &self.lease {
            l.stop();
        }
        self.link.stop();
    }
}

/// The role and epoch to start with: persisted state → secondary at its epoch (never a second
/// primary); a first start takes the configured role and writes the state.
fn initial_role(spec: &MirrorSpec, fence_epoch: u64) -> Result<(Role, u64), MirrorError> {
    let Some(path) = &spec.state_path else {
        return Ok((
            spec.role,
            fence_epoch.max(u64::from(spec.role == Role::Primary)),
        ));
    };
    let err = |source| MirrorError::State {
        path: path.clone(),
        source,
    };
    match state::load(path).map_err(err)? {
        Some(st) => Ok((Role::Secondary, st.epoch.max(fence_epoch))),
        None => {
            let epoch = fence_epoch.max(u64::from(spec.role == Role::Primary));
            persist(spec, epoch, spec.role)?;
            Ok((spec.role, epoch))
        }
    }
}

impl Drop for Mirror {
    fn drop(&mut self) {
        self.stop();
    }
}
