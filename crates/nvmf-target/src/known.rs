//! Subsystem NQNs the target knows it will serve again although they are not in its table now
//! (issue 34, "hosts must never give up on a path for good"): the subsystems removed while it
//! runs (a bounded tombstone set, oldest forgotten first) and the ones the control plane says
//! it expects (a mirrored namespace's subsystem, briefly absent during a role change).
//!
//! A Connect naming such an NQN is refused as any unknown subsystem (Connect Invalid
//! Parameters, IPO at SUBNQN) but with DNR clear, so the host retries until its
//! `ctrl_loss_tmo`: Linux 6.10 and later stop reconnecting on a DNR status
//! (`nvmf_should_reconnect`) and delete the controller ("Removing controller"). An NQN never
//! served keeps DNR: retrying cannot help. A leaf: the [`Target`](crate::Target) holds it.

use arc_swap::ArcSwap;
use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};

/// How many removed subsystem NQNs the target remembers; the oldest removal is forgotten
/// first (a host of a subsystem removed that long ago gets DNR again).
pub const MAX_TOMBSTONES: usize = 1024;

/// The NQNs, as one immutable snapshot: Connect reads it without a lock.
#[derive(Debug, Default, Clone)]
struct Snapshot {
    /// Removed while running, oldest first, at most [`MAX_TOMBSTONES`], no duplicates.
    removed: VecDeque<String>,
    /// Filled by the control plane ([`KnownNqns::set_expected`]).
    expected: HashSet<String>,
}

/// Removed and expected subsystem NQNs (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct KnownNqns {
    now: ArcSwap<Snapshot>,
    /// Serialises the writers (read-modify-swap of `now`).
    writer: Mutex<()>,
}

impl KnownNqns {
    fn update(&self, f: impl FnOnce(&mut Snapshot)) {
        let _w = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let mut next = Snapshot::clone(&self.now.load());
        f(&mut next);
        self.now.store(Arc::new(next));
    }

    /// Remember `nqns` as removed while running (a name removed again moves to the back).
    pub(crate) fn removed<'a>(&self, nqns: impl IntoIterator<Item = &'a str>) {
        self.update(|s| {
            for nqn in nqns {
                s.removed.retain(|n| n != nqn);
                if s.removed.len() >= MAX_TOMBSTONES {
                    s.removed.pop_front();
                }
                s.removed.push_back(nqn.to_string());
            }
        });
    }

    /// Replace the expected NQNs.
    pub(crate) fn set_expected(&self, nqns: impl IntoIterator<Item = String>) {
        let expected: HashSet<String> = nqns.into_iter().collect();
        self.update(|s| s.expected = expected);
    }

    /// The expected NQNs, sorted.
    pub(crate) fn expected(&self) -> Vec<String> {
        let mut v: Vec<String> = self.now.load().expected.iter().cloned().collect();
        v.sort();
        v
    }

    /// `nqn` was removed while running (and not forgotten since) or is expected.
    pub(crate) fn will_serve(&self, nqn: &str) -> bool {
        let s = self.now.load();
        s.expected.contains(nqn) || s.removed.iter().any(|n| n == nqn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removed_names_are_kept_fifo_and_bounded() {
        let k = KnownNqns::default();
        assert!(!k.will_serve("nqn.a"));
        k.removed(["nqn.a"]);
        assert!(k.will_serve("nqn.a"));
        let names: Vec<String> = (0..MAX_TOMBSTONES - 1)
            .map(|i| format!("nqn.{i}"))
            .collect();
        k.removed(names.iter().map(String::as_str));
        assert_eq!(k.now.load().removed.len(), MAX_TOMBSTONES);
        assert!(k.will_serve("nqn.a"));
        // Removed again: moves to the back, no duplicate.
        k.removed(["nqn.a"]);
        assert_eq!(k.now.load().removed.len(), MAX_TOMBSTONES);
        // One more: the oldest (nqn.0) is forgotten, not nqn.a.
        k.removed(["nqn.new"]);
        assert_eq!(k.now.load().removed.len(), MAX_TOMBSTONES);
        assert!(!k.will_serve("nqn.0"));
        assert!(k.will_serve("nqn.1") && k.will_serve("nqn.a") && k.will_serve("nqn.new"));
    }

    #[test]
    fn expected_names_are_replaced_whole() {
        let k = KnownNqns::default();
        k.set_expected(["nqn.m1".to_string(), "nqn.m2".to_string()]);
        assert!(k.will_serve("nqn.m1") && k.will_serve("nqn.m2"));
        assert_eq!(k.expected(), ["nqn.m1", "nqn.m2"]);
        k.set_expected(["nqn.m2".to_string()]);
        assert!(!k.will_serve("nqn.m1") && k.will_serve("nqn.m2"));
        k.set_expected([]);
        assert!(k.expected().is_empty() && !k.will_serve("nqn.m2"));
    }
}
