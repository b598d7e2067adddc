//! State shared by the mirror, its backend and its link thread.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::bitmap::Bitmap;
use crate::{MirrorSpec, MirrorStatus, PeerState, Role};

/// Striped per-region locks: a host write and the resync copy of the same region serialise.
const STRIPES: usize = 256;

pub(crate) struct Shared {
    pub(crate) spec: MirrorSpec,
    pub(crate) size: u64,
    role: AtomicU8,
    epoch: AtomicU64,
    pub(crate) fenced: AtomicBool,
    pub(crate) in_flight: AtomicU64,
    /// Origin of `lease_until`.
    base: Instant,
    /// Our lease runs until `base` + this many ns (0: not held).
    lease_until: AtomicU64,
    /// The witness's record of our last report says "peer not in sync" (a granted not-in-sync
    /// report and nothing sent since that said otherwise): a write may complete alone.
    pub(crate) covered: AtomicBool,
    /// Promoted by force (`Mirror::promote(true)`): serve without a lease until one is granted.
    pub(crate) forced: AtomicBool,
    /// The witness granted us a lease since we became primary: a fence from now on means the
    /// lease was lost (not the wait for the first grant at start).
    granted_once: AtomicBool,
    /// The peer just became in sync: the lease loop reports it now, not at the next renewal
    /// (until the witness has the report, a takeover by the secondary is refused).
    pub(crate) report_due: AtomicBool,
    /// Wakes the lease loop for `report_due`.
    pub(crate) nudge: tokio::sync::Notify,
    peer: Mutex<PeerState>,
    regions: Mutex<Bitmap>,
    /// A bitmap sync finished (waiters in [`Shared::mark`]).
    synced: Condvar,
    stripes: Vec<Mutex<()>>,
}

/// Sweeps in a row (one per idle tick of the link, 500 ms) with no new mark before the lazy
/// clear: regions under steady use stay marked, as md's bitmap daemon keeps them, so a write
/// after a short pause does not pay an fdatasync again.
const QUIET_SWEEPS: u32 = 4;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// `m` locked if it is free now.
fn try_lock(m: &Mutex<()>) -> Option<MutexGuard<'_, ()>> {
    match m.try_lock() {
        Ok(g) => Some(g),
        Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}

impl Shared {
    pub(crate) fn new(
        spec: MirrorSpec,
        size: u64,
        role: Role,
        epoch: u64,
        regions: Bitmap,
    ) -> Shared {
        Shared {
            spec,
            size,
            role: AtomicU8::new(role as u8),
            epoch: AtomicU64::new(epoch),
            fenced: AtomicBool::new(false),
            in_flight: AtomicU64::new(0),
            base: Instant::now(),
            lease_until: AtomicU64::new(0),
            covered: AtomicBool::new(false),
            forced: AtomicBool::new(false),
            granted_once: AtomicBool::new(false),
            report_due: AtomicBool::new(false),
            nudge: tokio::sync::Notify::new(),
            peer: Mutex::new(PeerState::Connecting),
            regions: Mutex::new(regions),
            synced: Condvar::new(),
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
        }
    }

    pub(crate) fn role(&self) -> Role {
        if self.role.load(Ordering::Acquire) == Role::Primary as u8 {
            Role::Primary
        } else {
            Role::Secondary
        }
    }

    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    pub(crate) fn become_primary(&self, epoch: u64) {
        self.epoch.store(epoch, Ordering::Release);
        // We cannot know what the peer holds: copy everything once it is back.
        self.mark_all_dirty();
        self.set_peer(PeerState::Connecting);
        self.role.store(Role::Primary as u8, Ordering::Release);
    }

    /// Raise the epoch (a secondary follows its fence); never lowers it.
    pub(crate) fn follow_epoch(&self, epoch: u64) {
        self.epoch.fetch_max(epoch, Ordering::AcqRel);
    }

    /// Become secondary (demoted: another box holds the lease). The peer is unknown.
    pub(crate) fn become_secondary(&self) {
        self.role.store(Role::Secondary as u8, Ordering::Release);
        self.granted_once.store(false, Ordering::Release);
        self.set_peer(PeerState::Connecting);
        self.covered.store(false, Ordering::Release);
        self.fenced.store(false, Ordering::Release);
    }

    /// Publish our lease's end (None: not held).
    pub(crate) fn set_lease_until(&self, until: Option<Instant>) {
        let ns = until.map_or(0, |u| {
            let d = u.saturating_duration_since(self.base).as_nanos();
            u64::try_from(d).unwrap_or(u64::MAX).max(1)
        });
        self.lease_until.store(ns, Ordering::Release);
        if ns != 0 {
            self.granted_once.store(true, Ordering::Release);
        }
    }

    /// A primary that lost its lease (fenced after a grant, not forced) withholds its
    /// replication link: it can complete no write anyway, and a connected link tells the
    /// secondary that the primary is alive ([`crate::Fence::peer_linked`]), which would keep
    /// it from taking over. The wait for the first grant after a start keeps the link (so a
    /// freshly started witness hands the lease to the primary, not to its secondary).
    pub(crate) fn link_withheld(&self) -> bool {
        self.spec.witness.is_some()
            && self.fenced.load(Ordering::Acquire)
            && self.granted_once.load(Ordering::Acquire)
            && !self.forced.load(Ordering::Acquire)
    }

    /// How long the link waits for the peer (a connect, a command) before it gives up: two
    /// leases, at least a second. A caller waiting on the link for an answer waits as long.
    pub(crate) fn link_timeout(&self) -> Duration {
        (self.spec.lease * 2).max(Duration::from_secs(1))
    }

    /// Time left on our lease (zero when not held).
    pub(crate) fn lease_left(&self) -> Duration {
        let ns = self.lease_until.load(Ordering::Acquire);
        if ns == 0 {
            return Duration::ZERO;
        }
        (self.base + Duration::from_nanos(ns)).saturating_duration_since(Instant::now())
    }

    /// A primary may complete a write now: no witness, promoted by force, or our lease is
    /// valid and we are not fenced.
    pub(crate) fn lease_ok(&self) -> bool {
        if self.spec.witness.is_none() || self.forced.load(Ordering::Acquire) {
            return true;
        }
        !self.fenced.load(Ordering::Acquire) && !self.lease_left().is_zero()
    }

    pub(crate) fn peer(&self) -> PeerState {
        *lock(&self.peer)
    }

    pub(crate) fn set_peer(&self, p: PeerState) {
        let was = std::mem::replace(&mut *lock(&self.peer), p);
        if p == PeerState::InSync && was != PeerState::InSync {
            self.report_due.store(true, Ordering::Release);
            self.nudge.notify_one();
        }
    }

    /// A replicated write failed or could not be sent: degraded (bits stay set).
    /// On a primary, the peer is unreachable (its link failed or could not be made): writes
    /// complete alone, whether the link was ever up or not. A secondary stays `Connecting`.
    pub(crate) fn degrade(&self) {
        if self.role() == Role::Primary {
            *lock(&self.peer) = PeerState::Degraded;
        }
    }

    /// Every region dirty, on disk when this returns. Waits for a group sync under way: its
    /// copies of pages were taken before, and written after this they would undo it.
    pub(crate) fn mark_all_dirty(&self) {
        let mut r = lock(&self.regions);
        while r.sync_active() {
            r = self.synced.wait(r).unwrap_or_else(|e| e.into_inner());
        }
        r.set_all(self.size);
    }

    /// Mark the regions of `offset..offset+len` dirty (before the data write is issued):
    /// returns once the marks are on disk. A group commit: the first writer to find pages
    /// waiting syncs every page set so far, the others wait for that sync.
    pub(crate) fn mark(&self, offset: u64, len: u64) {
        let mut r = lock(&self.regions);
        let span = r.regions().span(offset, len);
        let Some(n) = r.set_span(span) else {
            return;
        };
        while !r.durable(n) {
            if let Some(job) = r.take_sync() {
                drop(r);
                let res = job.run();
                r = lock(&self.regions);
                r.finish_sync(job.number(), res);
                self.synced.notify_all();
                continue;
            }
            r = self.synced.wait(r).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// [`Shared::mark`] when it needs no fdatasync (every region already set, or no file);
    /// false (nothing marked): it would.
    pub(crate) fn mark_in_memory(&self, offset: u64, len: u64) -> bool {
        let mut r = lock(&self.regions);
        let span = r.regions().span(offset, len);
        span.into_iter().all(|i| r.set_in_memory(i))
    }

    pub(crate) fn next_dirty(&self, from: u64) -> Option<u64> {
        lock(&self.regions).regions().next_dirty(from)
    }

    pub(crate) fn clear_region(&self, r: u64) {
        lock(&self.regions).clear(r);
    }

    pub(crate) fn dirty(&self) -> u64 {
        lock(&self.regions).regions().dirty()
    }

    /// Lazy clear: in sync and nothing in flight → no region can hold a write the peer lacks.
    /// Skipped while a region lock is held: a write started from the reactor
    /// (`MirrorBackend::start_write`) marks its regions under their locks before it counts in
    /// `in_flight`, and a clear in between would drop its mark (a write that then fails on
    /// the peer would complete degraded, unmarked, and never be resynced).
    pub(crate) fn sweep(&self) {
        let Some(_all) = self
            .stripes
            .iter()
            .map(try_lock)
            .collect::<Option<Vec<_>>>()
        else {
            return;
        };
        let mut r = lock(&self.regions);
        if r.quiet_sweeps() >= QUIET_SWEEPS
            && self.peer() == PeerState::InSync
            && self.in_flight.load(Ordering::Acquire) == 0
        {
            r.clear_all();
        }
    }

    /// The copy lock of every region touched by `offset..offset+len`, in ascending stripe order.
    pub(crate) fn region_locks(&self, offset: u64, len: u64) -> Vec<MutexGuard<'_, ()>> {
        self.stripes_of(offset, len)
            .into_iter()
            .map(|i| lock(&self.stripes[i]))
            .collect()
    }

    /// The stripes of the regions of `offset..offset+len`, ascending, each once.
    fn stripes_of(&self, offset: u64, len: u64) -> Vec<usize> {
        let span = lock(&self.regions).regions().span(offset, len);
        let mut idx: Vec<usize> = span.map(|r| (r % STRIPES as u64) as usize).collect();
        idx.sort_unstable();
        idx.dedup();
        idx
    }

    /// [`Shared::region_locks`] without waiting: None when one is held (a resync copy).
    pub(crate) fn try_region_locks(
        &self,
        offset: u64,
        len: u64,
    ) -> Option<Vec<MutexGuard<'_, ()>>> {
        self.stripes_of(offset, len)
            .into_iter()
            .map(|i| try_lock(&self.stripes[i]))
            .collect()
    }

    pub(crate) fn region_lock(&self, r: u64) -> MutexGuard<'_, ()> {
        lock(&self.stripes[(r % STRIPES as u64) as usize])
    }

    pub(crate) fn status(&self) -> MirrorStatus {
        let dirty = self.dirty();
        MirrorStatus {
            role: self.role(),
            epoch: self.epoch(),
            peer: self.peer(),
            peer_addr: self.spec.peer,
            in_flight: self.in_flight.load(Ordering::Relaxed),
            resync_bytes_left: (dirty * self.spec.region_bytes).min(self.size),
            dirty_regions: dirty,
            lease_ms_left: self
                .spec
                .witness
                .map(|_| u64::try_from(self.lease_left().as_millis()).unwrap_or(u64::MAX)),
            fenced: self.fenced.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> MirrorSpec {
        MirrorSpec {
            subnqn: "nqn.2026-11.io.ebof:t".into(),
            nsid: 1,
            volume_id: [1; 16],
            block_size: 512,
            peer: "127.0.0.1:4420".parse().unwrap(),
            role: Role::Primary,
            link_hostnqn: "nqn.2026-11.io.ebof:mirror-link".into(),
            link_queues: 1,
            host: nvmf_host::HostConfig::default(),
            witness: None,
            lease: Duration::from_secs(1),
            resync_bytes_per_sec: None,
            region_bytes: 1 << 20,
            state_path: None,
            holder_id: [2; 16],
        }
    }

    #[test]
    fn a_sweep_never_clears_the_mark_of_a_write_not_yet_counted() {
        let spec = spec();
        let size = 8 << 20;
        let bitmap = Bitmap::open(size, 1 << 20, None).unwrap();
        let s = Shared::new(spec, size, Role::Primary, 1, bitmap);
        s.set_peer(PeerState::InSync);
        // start_write's order: region locks, mark, then in_flight.
        let locks = s.try_region_locks(0, 4096).unwrap();
        assert!(s.mark_in_memory(0, 4096));
        s.sweep();
        assert_eq!(s.dirty(), 1, "the mark of a write under way was cleared");
        drop(locks);
        // The lazy clear waits for QUIET_SWEEPS sweeps with no new mark.
        for i in 0..QUIET_SWEEPS {
            s.sweep();
            assert_eq!(s.dirty(), 1, "cleared after {} sweeps", i + 1);
        }
        s.sweep();
        assert_eq!(s.dirty(), 0);
    }

    #[test]
    fn marks_from_many_threads_share_syncs_and_are_on_disk_when_mark_returns() {
        let dir = std::env::temp_dir().join(format!("ebof-mirror-gc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bitmap");
        let size = 256u64 << 20;
        let bitmap = Bitmap::open(size, 1 << 20, Some(&path)).unwrap();
        let s = std::sync::Arc::new(Shared::new(spec(), size, Role::Primary, 1, bitmap));
        let threads: Vec<_> = (0..8u64)
            .map(|t| {
                let s = s.clone();
                std::thread::spawn(move || {
                    for i in 0..32u64 {
                        s.mark(((t * 32 + i) % 256) << 20, 4096);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(s.dirty(), 256);
        let syncs = lock(&s.regions).syncs_done();
        println!("256 first marks from 8 threads: {syncs} syncs");
        // What mark returned for is on disk: a reopened map has every region.
        let back = Bitmap::open(size, 1 << 20, Some(&path)).unwrap();
        assert_eq!(back.regions().dirty(), 256);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
