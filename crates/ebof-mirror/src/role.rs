//! Role changes of one mirror, serialised: promotion (manual or granted by the witness),
//! demotion (the witness says another box holds the lease), fencing (our lease lapsed).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use crate::shared::Shared;
use crate::{Fence, MirrorError, MirrorSpec, Role, RoleSink, state};

/// The shared state with the fence and the sink every role change must reach.
pub(crate) struct Roles {
    pub(crate) shared: Arc<Shared>,
    pub(crate) fence: Arc<dyn Fence>,
    pub(crate) sink: Arc<dyn RoleSink>,
    change: Mutex<()>,
}

impl Roles {
    pub(crate) fn new(shared: Arc<Shared>, fence: Arc<dyn Fence>, sink: Arc<dyn RoleSink>) -> Self {
        Roles {
            shared,
            fence,
            sink,
            change: Mutex::new(()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ()> {
        self.change.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The epoch a promotion would take: one past everything we and our fence have seen.
    pub(crate) fn next_epoch(&self) -> u64 {
        self.shared.epoch().max(self.fence.epoch()) + 1
    }

    /// Become primary at `epoch` (None: [`Roles::next_epoch`]): persist, drain and bump the
    /// fence, then the shared state, then tell the sink. Refused when already primary or when
    /// the fence has moved to `epoch` or past it meanwhile (another primary admitted us).
    pub(crate) fn promote(&self, epoch: Option<u64>, forced: bool) -> Result<u64, MirrorError> {
        let _g = self.lock();
        if self.shared.role() == Role::Primary {
            return Err(MirrorError::Promote("already primary".into()));
        }
        let next = self.next_epoch();
        let epoch = epoch.unwrap_or(next);
        if epoch < next {
            return Err(MirrorError::Promote(format!(
                "epoch {epoch} is stale (next is {next})"
            )));
        }
        persist(&self.shared.spec, epoch, Role::Primary)?;
        self.fence.promote(epoch).map_err(MirrorError::Promote)?;
        self.shared.forced.store(forced, Ordering::Release);
        let was_fenced = self.shared.fenced.swap(false, Ordering::AcqRel);
        self.shared.become_primary(epoch);
        self.sink.role_changed(Role::Primary, epoch);
        if was_fenced {
            self.sink.fenced(false);
        }
        Ok(epoch)
    }

    /// Become secondary at the current epoch (the witness gave the lease to another box). The
    /// caller has fenced us first, so the box's ANA group is already inaccessible.
    pub(crate) fn demote(&self) {
        let _g = self.lock();
        if self.shared.role() != Role::Primary {
            return;
        }
        let epoch = self.shared.epoch();
        let was_fenced = self.shared.fenced.load(Ordering::Acquire);
        self.shared.become_secondary();
        self.fence.demote();
        if let Err(e) = persist(&self.shared.spec, epoch, Role::Secondary) {
            tracing::error!(nsid = self.shared.spec.nsid, "mirror demotion: {e}");
        }
        tracing::warn!(
            nsid = self.shared.spec.nsid,
            epoch,
            "mirror: another box holds the lease; now secondary"
        );
        self.sink.role_changed(Role::Secondary, epoch);
        if was_fenced {
            self.sink.fenced(false);
        }
    }

    /// Fence or unfence the primary (no-op when unchanged or not primary); the sink is told.
    /// The sink's fenced state always follows `status().fenced`.
    pub(crate) fn set_fenced(&self, fenced: bool) {
        let _g = self.lock();
        if self.shared.role() != Role::Primary
            || self.shared.fenced.swap(fenced, Ordering::AcqRel) == fenced
        {
            return;
        }
        let nsid = self.shared.spec.nsid;
        if fenced {
            tracing::warn!(nsid, "mirror: no lease; fenced (writes refused)");
        } else {
            tracing::info!(nsid, "mirror: lease granted; unfenced");
        }
        self.sink.fenced(fenced);
    }
}

/// Save epoch and role (synced: we are, or are becoming, the primary's copy holder).
pub(crate) fn persist(spec: &MirrorSpec, epoch: u64, role: Role) -> Result<(), MirrorError> {
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
