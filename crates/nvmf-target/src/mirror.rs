//! The target-side fence of a mirrored namespace (ADR 0028, replicated volumes): which epoch
//! the namespace is at, whether this box is its primary or secondary, and the epoch its copy
//! was last synced at.
//!
//! A replica-link session (host NQN = `Target::mirror_link_nqn`) is admitted by Mirror Admit
//! (C1h) at an epoch; its writes are taken only while the fence is secondary and still at that
//! epoch, checked before the command enters the namespace gate and again after. [`MirrorFence::
//! promote`] takes the gate exclusively (as a Compare-and-Write does), waits until no data
//! command is inside, then bumps the epoch: a replica write that entered before completes
//! first, every later one sees the new epoch and is refused (Operation Denied). So a paused
//! old primary resumed after a promotion can never land a write.
//!
//! A leaf: it knows the gate, not the namespace (`Namespace::promote_mirror` passes its gate).

use std::io;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::gate::Gate;

/// Called with (epoch, synced) before a change of the fence's epoch or synced state takes
/// effect; an error leaves the fence unchanged. `synced`: the local copy is in sync at `epoch`
/// (always true for a promotion).
pub type PersistFn = Box<dyn Fn(u64, bool) -> io::Result<()> + Send + Sync>;

/// The fence's role.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MirrorRole {
    /// Neither (stopped, or not yet started).
    None,
    /// Serves hosts; refuses replica writes.
    Primary,
    /// Takes only replica writes from the peer's admitted link.
    Secondary,
}

impl MirrorRole {
    fn to_u8(self) -> u8 {
        match self {
            MirrorRole::None => 0,
            MirrorRole::Primary => 1,
            MirrorRole::Secondary => 2,
        }
    }
    fn from_u8(v: u8) -> MirrorRole {
        match v {
            1 => MirrorRole::Primary,
            2 => MirrorRole::Secondary,
            _ => MirrorRole::None,
        }
    }
}

/// The answer to [`MirrorFence::admit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Admit {
    /// Admitted: the link may write at the epoch asked.
    pub ok: bool,
    /// The epoch the local copy was last synced at (0: never).
    pub synced_at: u64,
}

/// Why [`MirrorFence::promote`] failed (the fence is unchanged).
#[derive(Debug)]
pub enum PromoteError {
    /// The epoch asked is lower than the fence's.
    Stale {
        /// The fence's epoch.
        current: u64,
        /// The epoch asked.
        asked: u64,
    },
    /// The gate did not drain in time (a command still inside, or a Compare-and-Write held it).
    Timeout,
    /// The persist callback failed.
    Persist(io::Error),
}

impl std::fmt::Display for PromoteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PromoteError::Stale { current, asked } => {
                write!(f, "epoch {asked} is older than the fence's {current}")
            }
            PromoteError::Timeout => write!(f, "namespace commands did not drain in time"),
            PromoteError::Persist(e) => write!(f, "persisting the epoch: {e}"),
        }
    }
}

impl std::error::Error for PromoteError {}

/// What the fence needs of a replication link's controller (implemented by
/// [`crate::Controller`]; a trait so that this module stays a leaf).
pub trait LinkAlive: Send + Sync {
    /// Not torn down (connection closed, keep-alive expired).
    fn link_alive(&self) -> bool;
}

/// The fence of one mirrored namespace (see the module docs).
pub struct MirrorFence {
    epoch: AtomicU64,
    role: AtomicU8,
    synced_at: AtomicU64,
    persist: Option<PersistFn>,
    /// Serialises changes (admit, promote, demote) so persisting and storing stay in order.
    change: Mutex<()>,
    /// Replication-link controllers admitted ([`MirrorFence::peer_linked`]).
    links: Mutex<Vec<std::sync::Weak<dyn LinkAlive>>>,
    /// The token of the link controller admitted last ([`MirrorFence::admit`]; 0: none
    /// given): only its replica writes are taken, so writes of a link the primary has replaced
    /// (still on the wire when it reconnected) never land after the new link's resync.
    link: AtomicU64,
    /// Takes and deletes this copy's snapshots when the primary asks (Mirror Snapshot, CDh;
    /// set by the control plane, which owns snapshots).
    snapshots: std::sync::OnceLock<std::sync::Arc<dyn MirrorSnapshots>>,
}

/// The control plane's side of a Mirror Snapshot (CDh) on a secondary: take (under this copy's
/// I/O hold) or delete the snapshot `name` of the namespace. Err: why not (logged by the
/// caller; the primary is told Operation Denied and makes nothing).
pub trait MirrorSnapshots: Send + Sync {
    /// Do `op` for snapshot `name`.
    fn snapshot(&self, op: nvme_spec::ebof_vendor::SnapshotOp, name: &str) -> Result<(), String>;
}

impl std::fmt::Debug for MirrorFence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MirrorFence")
            .field("epoch", &self.epoch())
            .field("role", &self.role())
            .field("synced_at", &self.synced_at())
            .finish()
    }
}

impl MirrorFence {
    /// A fence at `epoch` in `role`, never synced, persisting nothing.
    pub fn new(epoch: u64, role: MirrorRole) -> MirrorFence {
        MirrorFence {
            epoch: AtomicU64::new(epoch),
            role: AtomicU8::new(role.to_u8()),
            synced_at: AtomicU64::new(0),
            persist: None,
            change: Mutex::new(()),
            links: Mutex::new(Vec::new()),
            link: AtomicU64::new(0),
            snapshots: std::sync::OnceLock::new(),
        }
    }
    /// The same, with the epoch the local copy was last synced at (restored state).
    pub fn with_synced(self, synced_at: u64) -> MirrorFence {
        self.synced_at.store(synced_at, Ordering::SeqCst);
        self
    }
    /// The same, calling `persist` before each change (see [`PersistFn`]).
    pub fn with_persist(mut self, persist: PersistFn) -> MirrorFence {
        self.persist = Some(persist);
        self
    }
    /// The current epoch.
    #[inline]
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }
    /// The current role.
    #[inline]
    pub fn role(&self) -> MirrorRole {
        MirrorRole::from_u8(self.role.load(Ordering::SeqCst))
    }
    /// The epoch the local copy was last synced at (0: never).
    pub fn synced_at(&self) -> u64 {
        self.synced_at.load(Ordering::SeqCst)
    }
    /// Set the role (no drain, no persist: for start-up and stop).
    pub fn set_role(&self, role: MirrorRole) {
        self.role.store(role.to_u8(), Ordering::SeqCst);
    }
    /// True when a replica write of a link admitted at `link_epoch` may go on: secondary and
    /// still at that epoch. The I/O path asks this before the gate and again inside it.
    #[inline]
    pub fn admits_replica(&self, link_epoch: u64) -> bool {
        self.role.load(Ordering::SeqCst) == MirrorRole::Secondary.to_u8()
            && self.epoch.load(Ordering::SeqCst) == link_epoch
    }

    /// [`MirrorFence::admits_replica`] for the link controller with `token`: also the link
    /// admitted last ([`MirrorFence::admit`]).
    #[inline]
    pub fn admits_link(&self, link_epoch: u64, token: u64) -> bool {
        self.admits_replica(link_epoch) && self.link.load(Ordering::SeqCst) == token
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ()> {
        self.change.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn persist(&self, epoch: u64, synced: bool) -> io::Result<()> {
        match &self.persist {
            Some(p) => p(epoch, synced),
            None => Ok(()),
        }
    }

    /// Mirror Admit from the primary's link controller with `token` (unique per controller) at
    /// `epoch`: refused unless secondary and `epoch` is at least the fence's; then the fence
    /// moves to `epoch` and, with `in_sync`, the copy is recorded synced at it (persisted first;
    /// a persist failure refuses). Admitted, the link becomes the only one whose replica writes
    /// are taken ([`MirrorFence::admits_link`]); a link admitted before (the primary
    /// reconnected) is refused from then on.
    pub fn admit(&self, epoch: u64, in_sync: bool, token: u64) -> Admit {
        let _g = self.lock();
        let synced = self.synced_at();
        let refused = Admit {
            ok: false,
            synced_at: synced,
        };
        if self.role() != MirrorRole::Secondary || epoch < self.epoch() {
            return refused;
        }
        let new_synced = if in_sync { epoch } else { synced };
        if (epoch != self.epoch() || new_synced != synced)
            && self.persist(epoch, new_synced == epoch).is_err()
        {
            return refused;
        }
        self.link.store(token, Ordering::SeqCst);
        self.epoch.store(epoch, Ordering::SeqCst);
        self.synced_at.store(new_synced, Ordering::SeqCst);
        Admit {
            ok: true,
            synced_at: new_synced,
        }
    }

    /// Become primary at `new_epoch` (at least the current one): take `gate` exclusively, wait
    /// (polling, blocking the caller: never call it on a reactor) until no data command is
    /// inside, persist, bump the epoch, set the role, give the gate back. Replica writes of
    /// links admitted before are refused from then on.
    pub fn promote(
        &self,
        gate: &Gate,
        new_epoch: u64,
        timeout: Duration,
    ) -> Result<(), PromoteError> {
        let _g = self.lock();
        let current = self.epoch();
        if new_epoch < current {
            return Err(PromoteError::Stale {
                current,
                asked: new_epoch,
            });
        }
        let deadline = Instant::now() + timeout;
        let pause = Duration::from_micros(200);
        while !gate.try_lock() {
            if Instant::now() >= deadline {
                return Err(PromoteError::Timeout);
            }
            std::thread::sleep(pause);
        }
        let r = (|| {
            while !gate.drained() {
                if Instant::now() >= deadline {
                    return Err(PromoteError::Timeout);
                }
                std::thread::sleep(pause);
            }
            self.persist(new_epoch, true)
                .map_err(PromoteError::Persist)?;
            self.epoch.store(new_epoch, Ordering::SeqCst);
            self.synced_at.store(new_epoch, Ordering::SeqCst);
            self.role
                .store(MirrorRole::Primary.to_u8(), Ordering::SeqCst);
            Ok(())
        })();
        gate.unlock();
        r
    }

    /// Run `f` only while a replica-link command of the link controller with `token`,
    /// admitted at `link_epoch`, may change the namespace ([`MirrorFence::admits_link`]),
    /// serialised with promotions and admits: a change from an old primary, or from a link
    /// since replaced, can never land after the promotion or admit that fenced it. None:
    /// refused.
    pub fn while_link_admitted<R>(
        &self,
        link_epoch: u64,
        token: u64,
        f: impl FnOnce() -> R,
    ) -> Option<R> {
        let _g = self.lock();
        self.admits_link(link_epoch, token).then(f)
    }

    /// Who takes this copy's snapshots on a Mirror Snapshot (first call wins).
    pub fn set_snapshots(&self, s: std::sync::Arc<dyn MirrorSnapshots>) {
        let _ = self.snapshots.set(s);
    }

    /// Who takes this copy's snapshots (None: nobody, a Mirror Snapshot is refused).
    pub fn snapshots(&self) -> Option<std::sync::Arc<dyn MirrorSnapshots>> {
        self.snapshots.get().cloned()
    }

    /// Replication-link controller `ctrl` was admitted (Mirror Admit).
    pub(crate) fn link_admitted(&self, ctrl: std::sync::Weak<dyn LinkAlive>) {
        let mut l = self.links.lock().unwrap_or_else(|e| e.into_inner());
        l.retain(|w| w.upgrade().is_some_and(|c| c.link_alive()));
        if !l.iter().any(|w| w.ptr_eq(&ctrl)) {
            l.push(ctrl);
        }
    }

    /// A replication link from the primary is connected and admitted now (its controller is
    /// alive: not torn down by a closed connection or an expired keep-alive). A secondary does
    /// not ask the witness for a takeover while it is: the primary is alive enough to talk to
    /// it, and a takeover race with a primary that is only waiting for its lease is avoided.
    pub fn peer_linked(&self) -> bool {
        self.links
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .any(|w| w.upgrade().is_some_and(|c| c.link_alive()))
    }

    /// Become secondary (epoch unchanged): links admitted at the current epoch or later may
    /// write.
    pub fn demote(&self) {
        let _g = self.lock();
        self.role
            .store(MirrorRole::Secondary.to_u8(), Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;

    /// Only the link admitted last writes: a primary that reconnected fences its old link at
    /// the same epoch; the same link admitted again (in sync at the end of a resync) stays.
    #[test]
    fn the_link_admitted_last_is_the_only_one() {
        let f = MirrorFence::new(0, MirrorRole::Secondary);
        assert!(f.admit(3, false, 7).ok);
        assert!(f.admits_link(3, 7) && !f.admits_link(3, 8));
        assert!(f.admit(3, false, 8).ok, "the primary reconnected");
        assert!(!f.admits_link(3, 7) && f.admits_link(3, 8));
        assert!(f.admit(3, true, 8).ok);
        assert!(f.admits_link(3, 8));
        assert_eq!(f.synced_at(), 3);
        assert!(!f.admits_link(2, 8), "an older epoch");
        f.set_role(MirrorRole::Primary);
        assert!(!f.admits_link(3, 8), "not secondary");
    }

    #[test]
    fn admit_rules() {
        let f = MirrorFence::new(5, MirrorRole::Primary);
        assert!(!f.admit(5, false, 0).ok, "a primary admits nothing");
        f.demote();
        assert_eq!(
            f.admit(4, true, 0),
            Admit {
                ok: false,
                synced_at: 0
            }
        );
        assert_eq!(
            f.admit(5, false, 0),
            Admit {
                ok: true,
                synced_at: 0
            }
        );
        assert!(f.admits_replica(5) && !f.admits_replica(4));
        assert_eq!(
            f.admit(7, true, 0),
            Admit {
                ok: true,
                synced_at: 7
            }
        );
        assert_eq!(f.epoch(), 7);
        assert!(!f.admits_replica(5));
        assert_eq!(
            f.admit(8, false, 0),
            Admit {
                ok: true,
                synced_at: 7
            }
        );
    }

    #[test]
    fn persist_first_and_failure_refuses() {
        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        let f = MirrorFence::new(1, MirrorRole::Secondary).with_persist(Box::new(move |e, s| {
            c.fetch_add(1, Ordering::SeqCst);
            if e == 9 {
                Err(io::Error::other("disk"))
            } else {
                assert!(s || e == 2);
                Ok(())
            }
        }));
        assert!(f.admit(1, false, 0).ok);
        assert_eq!(
            calls.load(Ordering::SeqCst),
            0,
            "nothing changed, nothing persisted"
        );
        assert!(f.admit(2, false, 0).ok);
        assert!(f.admit(2, true, 0).ok);
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        assert!(!f.admit(9, true, 0).ok);
        assert_eq!(f.epoch(), 2);
        let g = Gate::default();
        assert!(matches!(
            f.promote(&g, 9, Duration::from_secs(1)),
            Err(PromoteError::Persist(_))
        ));
        assert_eq!((f.epoch(), f.role()), (2, MirrorRole::Secondary));
        assert!(!g.is_locked());
    }

    #[test]
    fn promote_drains_the_gate() {
        let f = Arc::new(MirrorFence::new(3, MirrorRole::Secondary));
        let g = Arc::new(Gate::default());
        assert!(matches!(
            f.promote(&g, 2, Duration::from_secs(1)),
            Err(PromoteError::Stale {
                current: 3,
                asked: 2
            })
        ));
        assert!(g.enter());
        assert!(matches!(
            f.promote(&g, 4, Duration::from_millis(20)),
            Err(PromoteError::Timeout)
        ));
        assert!(!g.is_locked() && f.admits_replica(3));
        let (f2, g2) = (f.clone(), g.clone());
        let t = std::thread::spawn(move || f2.promote(&g2, 4, Duration::from_secs(10)));
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(f.epoch(), 3, "no bump while a replica write is inside");
        assert!(!g.enter(), "later commands are held off");
        g.exit(1);
        t.join().unwrap().unwrap();
        assert_eq!(
            (f.epoch(), f.role(), f.synced_at()),
            (4, MirrorRole::Primary, 4)
        );
        assert!(!g.is_locked() && !f.admits_replica(3) && !f.admits_replica(4));
    }
}
