//! Synchronous mirroring of one namespace between two ebof boxes (issue 34).
//!
//! A [`Mirror`] owns a replication link (ordinary NVMe/TCP through `nvmf-host`) to the peer box
//! and hands the namespace a [`Mirror::backend`] that, on the primary, completes a write only
//! once both copies have it; when the peer is unreachable it goes on alone (degraded), marking
//! written regions dirty, and resyncs them when the link is back. See
//! `notes/mirror-design.md` and ADR 0028.

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod backend;
pub mod bitmap;
mod fence;
mod link;
mod pipe;
pub mod regions;
mod shared;
pub mod state;
pub mod witness;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ebof_backend::Backend;

pub use backend::MirrorBackend;
pub use fence::NsFence;
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
}

/// One mirrored namespace on this box.
pub struct Mirror {
    shared: Arc<Shared>,
    local: Arc<dyn Backend>,
    link: link::LinkHandle,
    fence: Arc<dyn Fence>,
    sink: Arc<dyn RoleSink>,
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
        let link =
            link::LinkHandle::start(shared.clone(), local.clone()).map_err(MirrorError::Thread)?;
        match role {
            Role::Primary => fence.promote(epoch).map_err(MirrorError::Promote)?,
            Role::Secondary => fence.demote(),
        }
        sink.role_changed(role, epoch);
        Ok(Arc::new(Mirror {
            shared,
            local,
            link,
            fence,
            sink,
        }))
    }

    /// The backend the namespace must use instead of the local one.
    pub fn backend(self: &Arc<Self>) -> Arc<dyn Backend> {
        Arc::new(MirrorBackend::new(
            self.shared.clone(),
            self.local.clone(),
            self.link.sender(),
        ))
    }

    /// A snapshot of the mirror's state.
    pub fn status(&self) -> MirrorStatus {
        self.shared.status()
    }

    /// Manual promotion (no witness, or `force`): epoch + 1, role primary; the peer gets a
    /// full copy when it comes back.
    pub fn promote(&self, force: bool) -> Result<(), MirrorError> {
        if self.shared.role() == Role::Primary {
            return Err(MirrorError::Promote("already primary".into()));
        }
        if self.shared.spec.witness.is_some() && !force {
            return Err(MirrorError::Promote("a witness decides; use force".into()));
        }
        let epoch = self.shared.epoch().max(self.fence.epoch()) + 1;
        persist(&self.shared.spec, epoch, Role::Primary)?;
        self.fence.promote(epoch).map_err(MirrorError::Promote)?;
        self.shared.become_primary(epoch);
        self.sink.role_changed(Role::Primary, epoch);
        Ok(())
    }

    /// Stop the link thread (joins it). In-flight replicated writes fail into degraded mode.
    pub fn stop(&self) {
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

/// Save epoch and role (synced: we are, or are becoming, the primary's copy holder).
fn persist(spec: &MirrorSpec, epoch: u64, role: Role) -> Result<(), MirrorError> {
    let Some(path) = &spec.state_path else {
        return Ok(());
    };
    let st = state::State {
        epoch,
        role,
        synced: role == Role::Primary,
    };
    state::save(path, &st).map_err(|source| MirrorError::State {
        path: path.clone(),
        source,
    })
}

impl Drop for Mirror {
    fn drop(&mut self) {
        self.link.stop();
    }
}
