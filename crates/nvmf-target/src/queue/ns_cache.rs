//! A queue's own handles on the namespaces its commands address (ADR 0014).
//!
//! [`NsCache`] keeps the handles sorted by NSID (found by binary search) and the controller's
//! namespace generation they were checked at. A handle is made the first time a command names
//! its namespace ([`NsCache::cache`]); when the control plane moves the generation, the handles
//! of namespaces that are gone or replaced are dropped ([`NsCache::refresh`]) before the next
//! command looks one up. Commands in flight keep their own `Arc`.

use crate::controller::Controller;
use crate::io::NsRef;
use std::sync::Arc;

/// Handles of the namespaces this queue used, sorted by NSID.
#[derive(Debug, Default)]
pub(crate) struct NsCache {
    refs: Vec<Arc<NsRef>>,
    /// The controller's namespace generation `refs` were checked at.
    generation: u32,
}

impl NsCache {
    /// True when the controller's namespaces changed since the last [`NsCache::refresh`] (one
    /// atomic load of a line the command path reads anyway).
    #[inline]
    pub(crate) fn stale(&self, ctrl: &Controller) -> bool {
        ctrl.ns_gen() != self.generation
    }

    /// Drop the handles of namespaces the control plane removed or replaced (at Connect, and
    /// when the generation moved). Handles of namespaces that are still there are kept.
    /// Handles are made on first use, so a queue holds one per namespace it addressed, not one
    /// per namespace of the subsystem (1024 I/O queues × 1024 namespaces would otherwise be a
    /// million handles). False when the controller has no subsystem (nothing done).
    pub(crate) fn refresh(&mut self, ctrl: &Controller) -> bool {
        // Generation first: a change after this load bumps it again, so it is not missed.
        let generation = ctrl.ns_gen();
        let Some(sub) = ctrl.subsystem() else {
            return false;
        };
        self.refs
            .retain(|r| sub.namespace(r.nsid).is_some_and(|n| Arc::ptr_eq(n, &r.0)));
        self.generation = generation;
        true
    }

    /// Make sure there is a handle on namespace `nsid` if `ctrl`'s subsystem has one (before a
    /// command looks it up). A handle already there costs a binary search; a new one is made
    /// from the controller's subsystem.
    #[inline]
    pub(crate) fn cache(&mut self, ctrl: &Controller, nsid: u32) {
        let Err(pos) = self.refs.binary_search_by_key(&nsid, |r| r.nsid) else {
            return;
        };
        self.insert(ctrl, nsid, pos);
    }

    #[cold]
    fn insert(&mut self, ctrl: &Controller, nsid: u32, pos: usize) {
        let Some(sub) = ctrl.subsystem() else {
            return;
        };
        if let Some(n) = sub.namespace(nsid) {
            self.refs.insert(pos, Arc::new(NsRef(n.clone())));
        }
    }

    /// The handle on namespace `nsid`, if this queue has one.
    #[inline]
    pub(crate) fn get(&self, nsid: u32) -> Option<&Arc<NsRef>> {
        self.refs
            .binary_search_by_key(&nsid, |r| r.nsid)
            .ok()
            .map(|i| &self.refs[i])
    }
}
