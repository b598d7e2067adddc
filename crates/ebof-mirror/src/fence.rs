//! [`Fence`] for the target's `nvmf_target::MirrorFence` of one namespace.

use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use nvmf_target::gate::Gate;
use nvmf_target::{MirrorFence, MirrorRole, Namespace};

use crate::Fence;

/// How long a promotion waits for the namespace's commands to drain.
const DRAIN: Duration = Duration::from_secs(10);

/// The target fence of a mirrored namespace. The namespace is built after
/// [`crate::Mirror::start`] (its backend is the mirror's), so it is attached afterwards with
/// [`NsFence::attach`]; until then a promotion has nothing to drain.
pub struct NsFence {
    fence: Arc<MirrorFence>,
    ns: OnceLock<Weak<Namespace>>,
}

impl NsFence {
    /// Over `fence` (the one given to `Namespace::with_mirror`).
    pub fn new(fence: Arc<MirrorFence>) -> Arc<NsFence> {
        Arc::new(NsFence {
            fence,
            ns: OnceLock::new(),
        })
    }

    /// The namespace whose gate a promotion drains (first call wins).
    pub fn attach(&self, ns: &Arc<Namespace>) {
        let _ = self.ns.set(Arc::downgrade(ns));
    }

    /// The target fence.
    pub fn fence(&self) -> &Arc<MirrorFence> {
        &self.fence
    }
}

impl Fence for NsFence {
    fn epoch(&self) -> u64 {
        self.fence.epoch()
    }

    fn promote(&self, new_epoch: u64) -> Result<(), String> {
        let r = match self.ns.get().and_then(Weak::upgrade) {
            Some(ns) => ns.promote_mirror(new_epoch, DRAIN),
            None => self.fence.promote(&Gate::default(), new_epoch, DRAIN),
        };
        r.map_err(|e| e.to_string())
    }

    fn demote(&self) {
        if self.fence.role() != MirrorRole::Secondary {
            self.fence.demote();
        }
    }

    fn synced_epoch(&self) -> u64 {
        self.fence.synced_at()
    }

    fn peer_linked(&self) -> bool {
        self.fence.peer_linked()
    }
}
