//! The witness's lease table (ADR 0028), sans-IO: which box may be primary of each mirrored
//! volume. A box with `[witness]` keeps one; the mirrors of other boxes ask it with the vendor
//! admin command Witness Lease (C5h) on the witness subsystem.
//!
//! Rules, for one volume (its 16-byte id, the namespace's NGUID):
//! - the holder of a live lease may renew it, with an epoch at least its current one;
//! - another box may take it only when the lease has expired on **this** clock, the last
//!   holder's last report said its peer (the box now asking) was in sync, and the epoch it asks
//!   for is greater than the current one: a secondary that missed degraded writes is never
//!   promoted, and epochs only grow;
//! - a table that has just been made (the witness restarted: it remembers nothing) grants
//!   nothing for the longest lease it allows, so no lease it granted before can still be live;
//! - at most [`MAX_VOLUMES`] volumes; expired entries are evicted first, a table full of live
//!   leases refuses.
//! - with a store ([`LeaseTable::with_store`]) what the rules rest on — each volume's holder,
//!   epoch and last in-sync report — is saved before a grant that changes it is answered (a
//!   renewal that only moves the lease's end saves nothing), and a witness that restarts from
//!   it ([`LeaseTable::restore`]) keeps refusing a secondary that missed degraded writes. A
//!   save that fails refuses the grant. Without a store a restarted witness knows no volume,
//!   and the first box to ask after the grace period gets the lease.
//!
//! Time is always passed in; nothing here reads a clock.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Volumes one witness keeps.
pub const MAX_VOLUMES: usize = 4096;

/// The witness subsystem: Witness Lease (C5h) is answered only on its controllers.
pub const WITNESS_NQN: &str = "nqn.2026-11.io.ebof:witness";

/// What a requester asks ([`LeaseTable::request`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseOp {
    /// Take the lease or renew it.
    Acquire,
    /// Give it up (only the holder).
    Release,
    /// Only ask how it stands.
    Query,
}

/// One request, decoded from a Witness Lease command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseRequest {
    /// The volume (namespace NGUID).
    pub volume: [u8; 16],
    /// The box asking.
    pub holder: [u8; 16],
    /// The epoch it holds or wants.
    pub epoch: u64,
    /// How long the lease lasts from now.
    pub lease: Duration,
    /// What it asks.
    pub op: LeaseOp,
    /// The holder's report: its peer has every write it acknowledged.
    pub peer_in_sync: bool,
}

/// The answer: granted or not, and how long the current holder's lease still runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseReply {
    /// The requester holds the lease now (Acquire), or held it and gave it up (Release).
    pub granted: bool,
    /// Time left on the current holder's lease (zero when nobody holds a live one).
    pub left: Duration,
    /// The volume's current epoch (0: unknown volume).
    pub epoch: u64,
}

impl From<&nvme_spec::ebof_vendor::WitnessLease> for LeaseRequest {
    fn from(w: &nvme_spec::ebof_vendor::WitnessLease) -> LeaseRequest {
        use nvme_spec::ebof_vendor::LeaseOpCode;
        LeaseRequest {
            volume: w.volume,
            holder: w.holder,
            epoch: w.epoch,
            lease: Duration::from_millis(u64::from(w.lease_ms)),
            op: match w.op {
                LeaseOpCode::Acquire => LeaseOp::Acquire,
                LeaseOpCode::Release => LeaseOp::Release,
                LeaseOpCode::Query => LeaseOp::Query,
            },
            peer_in_sync: w.peer_in_sync,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Lease {
    holder: [u8; 16],
    epoch: u64,
    until: Instant,
    peer_in_sync: bool,
}

/// Where a table saves its records ([`LeaseTable::with_store`]): called with the whole
/// encoded table ([`LeaseTable::encode`]); Ok only once it is durable.
pub type LeaseStore = Box<dyn FnMut(&[u8]) -> std::io::Result<()> + Send>;

/// The table (see the module docs).
pub struct LeaseTable {
    leases: HashMap<[u8; 16], Lease>,
    max_lease: Duration,
    grace_until: Instant,
    store: Option<LeaseStore>,
}

impl std::fmt::Debug for LeaseTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseTable")
            .field("volumes", &self.leases.len())
            .field("max_lease", &self.max_lease)
            .field("stored", &self.store.is_some())
            .finish()
    }
}

/// The first bytes of an encoded table.
const MAGIC: &[u8; 8] = b"EBOFWIT1";
/// Bytes per record: volume, holder, epoch (LE), flags (bit 0: peer in sync).
const RECORD: usize = 16 + 16 + 8 + 1;

/// Why saved records cannot be restored ([`LeaseTable::restore`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RestoreError {
    /// Not a saved lease table (wrong magic or shorter than its header).
    #[error("not an ebof witness lease table")]
    NotATable,
    /// The record count does not match the length, or exceeds [`MAX_VOLUMES`].
    #[error("{0} records do not fit the file or the table")]
    Count(u64),
    /// A record's flags have unknown bits.
    #[error("record {0} has unknown flags")]
    Flags(usize),
    /// Volumes are not in ascending order, each once (as [`LeaseTable::encode`] writes them).
    #[error("record {0} is out of order or repeats a volume")]
    Order(usize),
}

impl LeaseTable {
    /// A table made at `now`, granting leases of at most `max_lease`; it grants nothing before
    /// `now + max_lease`.
    pub fn new(now: Instant, max_lease: Duration) -> LeaseTable {
        LeaseTable {
            leases: HashMap::new(),
            max_lease,
            grace_until: now + max_lease,
            store: None,
        }
    }

    /// Save the table with `store` from now on (see the module docs).
    pub fn with_store(mut self, store: LeaseStore) -> LeaseTable {
        self.store = Some(store);
        self
    }

    /// A table made at `now` from records saved by [`LeaseTable::encode`]: every volume's
    /// holder, epoch and in-sync report, its lease expired; like a new table it grants nothing
    /// before `now + max_lease`.
    pub fn restore(
        now: Instant,
        max_lease: Duration,
        bytes: &[u8],
    ) -> Result<LeaseTable, RestoreError> {
        let (head, body) = bytes
            .split_at_checked(MAGIC.len() + 4)
            .ok_or(RestoreError::NotATable)?;
        if &head[..MAGIC.len()] != MAGIC {
            return Err(RestoreError::NotATable);
        }
        let mut n = [0u8; 4];
        n.copy_from_slice(&head[MAGIC.len()..]);
        let count = u32::from_le_bytes(n) as usize;
        if count > MAX_VOLUMES || body.len() != count * RECORD {
            return Err(RestoreError::Count(count as u64));
        }
        let mut t = LeaseTable::new(now, max_lease);
        let mut last: Option<[u8; 16]> = None;
        for (i, r) in body.chunks_exact(RECORD).enumerate() {
            let mut volume = [0u8; 16];
            let mut holder = [0u8; 16];
            let mut epoch = [0u8; 8];
            volume.copy_from_slice(&r[..16]);
            holder.copy_from_slice(&r[16..32]);
            epoch.copy_from_slice(&r[32..40]);
            let flags = r[40];
            if flags & !1 != 0 {
                return Err(RestoreError::Flags(i));
            }
            let lease = Lease {
                holder,
                epoch: u64::from_le_bytes(epoch),
                until: now,
                peer_in_sync: flags & 1 != 0,
            };
            if last.is_some_and(|l| l >= volume) {
                return Err(RestoreError::Order(i));
            }
            last = Some(volume);
            t.leases.insert(volume, lease);
        }
        Ok(t)
    }

    /// The records a restart needs ([`LeaseTable::restore`]), volumes in ascending order.
    pub fn encode(&self) -> Vec<u8> {
        encode(&self.leases)
    }

    /// The longest lease granted.
    pub fn max_lease(&self) -> Duration {
        self.max_lease
    }

    /// Volumes known.
    pub fn len(&self) -> usize {
        self.leases.len()
    }

    /// No volume known.
    pub fn is_empty(&self) -> bool {
        self.leases.is_empty()
    }

    /// Answer `req` at `now`.
    pub fn request(&mut self, req: &LeaseRequest, now: Instant) -> LeaseReply {
        let cur = self.leases.get(&req.volume).copied();
        let left = |l: &Lease| l.until.saturating_duration_since(now);
        let refuse = |cur: Option<Lease>| LeaseReply {
            granted: false,
            left: cur.as_ref().map_or(Duration::ZERO, left),
            epoch: cur.map_or(0, |l| l.epoch),
        };
        match req.op {
            LeaseOp::Query => refuse(cur),
            LeaseOp::Release => match cur {
                Some(l) if l.holder == req.holder && l.epoch == req.epoch => {
                    // Keep the epoch and the in-sync report; the lease ends now.
                    self.leases.insert(req.volume, Lease { until: now, ..l });
                    LeaseReply {
                        granted: true,
                        left: Duration::ZERO,
                        epoch: l.epoch,
                    }
                }
                _ => refuse(cur),
            },
            LeaseOp::Acquire => {
                if now < self.grace_until || req.lease.is_zero() {
                    return refuse(cur);
                }
                let lease = req.lease.min(self.max_lease);
                let ok = match cur {
                    None => true,
                    // The last holder has every write it acknowledged: it may always come back.
                    Some(l) if l.holder == req.holder => req.epoch >= l.epoch,
                    Some(l) => l.until <= now && l.peer_in_sync && req.epoch > l.epoch,
                };
                if !ok {
                    return refuse(cur);
                }
                if cur.is_none() && !self.make_room(now) {
                    return refuse(cur);
                }
                let new = Lease {
                    holder: req.holder,
                    epoch: req.epoch,
                    until: now + lease,
                    peer_in_sync: req.peer_in_sync,
                };
                let changed = cur.is_none_or(|l| {
                    (l.holder, l.epoch, l.peer_in_sync) != (new.holder, new.epoch, new.peer_in_sync)
                });
                if changed && !self.save_with(req.volume, new) {
                    return refuse(cur);
                }
                self.leases.insert(req.volume, new);
                LeaseReply {
                    granted: true,
                    left: lease,
                    epoch: req.epoch,
                }
            }
        }
    }

    /// Save the table as it would be with `lease` for `volume` (true: saved, or no store).
    fn save_with(&mut self, volume: [u8; 16], lease: Lease) -> bool {
        let Some(store) = self.store.as_mut() else {
            return true;
        };
        let mut next = self.leases.clone();
        next.insert(volume, lease);
        match store(&encode(&next)) {
            Ok(()) => true,
            Err(e) => {
                tracing::error!(error = %e, "witness: cannot save the lease table; grant refused");
                false
            }
        }
    }

    /// Room for one more volume: evict an expired lease whose holder's peer was in sync (its
    /// volume can be taken over by anyone anyway) when the table is full.
    fn make_room(&mut self, now: Instant) -> bool {
        if self.leases.len() < MAX_VOLUMES {
            return true;
        }
        let victim = self
            .leases
            .iter()
            .filter(|(_, l)| l.until <= now && l.peer_in_sync)
            .min_by_key(|(_, l)| l.until)
            .map(|(k, _)| *k);
        match victim {
            Some(k) => {
                self.leases.remove(&k);
                true
            }
            None => false,
        }
    }
}

fn encode(leases: &HashMap<[u8; 16], Lease>) -> Vec<u8> {
    let mut v: Vec<_> = leases.iter().collect();
    v.sort_unstable_by_key(|(k, _)| **k);
    let mut out = Vec::with_capacity(MAGIC.len() + 4 + v.len() * RECORD);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(v.len() as u32).to_le_bytes());
    for (volume, l) in v {
        out.extend_from_slice(volume);
        out.extend_from_slice(&l.holder);
        out.extend_from_slice(&l.epoch.to_le_bytes());
        out.push(u8::from(l.peer_in_sync));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: Duration = Duration::from_secs(4);
    const MAX: Duration = Duration::from_secs(10);

    fn req(holder: u8, epoch: u64, op: LeaseOp, in_sync: bool) -> LeaseRequest {
        LeaseRequest {
            volume: [7; 16],
            holder: [holder; 16],
            epoch,
            lease: L,
            op,
            peer_in_sync: in_sync,
        }
    }

    /// A table past its grace period.
    fn table() -> (LeaseTable, Instant) {
        let t0 = Instant::now();
        (LeaseTable::new(t0, MAX), t0 + MAX)
    }

    /// What a test store kept (the last bytes, the number of saves).
    type Kept = std::sync::Arc<std::sync::Mutex<(Vec<u8>, usize)>>;

    /// A store that keeps what it was given, counting saves; fails while `fail` is set.
    fn store() -> (
        LeaseStore,
        Kept,
        std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) {
        let kept = std::sync::Arc::new(std::sync::Mutex::new((Vec::new(), 0)));
        let fail = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (k, f) = (kept.clone(), fail.clone());
        let s: LeaseStore = Box::new(move |b: &[u8]| {
            if f.load(std::sync::atomic::Ordering::SeqCst) {
                return Err(std::io::Error::other("disk full"));
            }
            let mut k = k.lock().unwrap();
            k.0 = b.to_vec();
            k.1 += 1;
            Ok(())
        });
        (s, kept, fail)
    }

    #[test]
    fn a_restarted_witness_still_refuses_a_secondary_that_missed_writes() {
        let (s, kept, _) = store();
        let t0 = Instant::now();
        let mut t = LeaseTable::new(t0, MAX).with_store(s);
        let now = t0 + MAX;
        // A holds epoch 3 and reports its peer behind (it went on degraded).
        assert!(t.request(&req(1, 3, LeaseOp::Acquire, true), now).granted);
        assert!(t.request(&req(1, 3, LeaseOp::Acquire, false), now).granted);
        let saved = kept.lock().unwrap().0.clone();
        // The witness restarts from what was saved; after its grace period, B (the
        // secondary, behind) asks for epoch 4: refused; A comes back: granted.
        let t1 = now + Duration::from_secs(1);
        let mut r = LeaseTable::restore(t1, MAX, &saved).expect("restore");
        assert_eq!(r.len(), 1);
        assert!(
            !r.request(&req(1, 3, LeaseOp::Acquire, false), t1).granted,
            "grace"
        );
        let later = t1 + MAX;
        assert!(!r.request(&req(2, 4, LeaseOp::Acquire, true), later).granted);
        assert_eq!(r.request(&req(2, 4, LeaseOp::Query, true), later).epoch, 3);
        assert!(
            r.request(&req(1, 3, LeaseOp::Acquire, false), later)
                .granted
        );
        // Without the saved table the same restart would have handed B the lease.
        let mut blank = LeaseTable::new(t1, MAX);
        assert!(
            blank
                .request(&req(2, 4, LeaseOp::Acquire, true), later)
                .granted
        );
    }

    #[test]
    fn only_changes_are_saved_and_a_failed_save_refuses_the_grant() {
        let (s, kept, fail) = store();
        let (t, now) = table();
        let mut t = t.with_store(s);
        assert!(t.request(&req(1, 1, LeaseOp::Acquire, true), now).granted);
        assert_eq!(kept.lock().unwrap().1, 1);
        for i in 1..5 {
            let at = now + Duration::from_millis(500 * i);
            assert!(t.request(&req(1, 1, LeaseOp::Acquire, true), at).granted);
        }
        assert_eq!(kept.lock().unwrap().1, 1, "a plain renewal saved");
        // The report flips while the disk fails: refused, and nothing changed.
        fail.store(true, std::sync::atomic::Ordering::SeqCst);
        let at = now + Duration::from_secs(3);
        assert!(!t.request(&req(1, 1, LeaseOp::Acquire, false), at).granted);
        let back = LeaseTable::restore(at, MAX, &t.encode()).expect("restore");
        assert_eq!(
            back.encode(),
            kept.lock().unwrap().0,
            "the table moved past its save"
        );
        fail.store(false, std::sync::atomic::Ordering::SeqCst);
        assert!(t.request(&req(1, 1, LeaseOp::Acquire, false), at).granted);
        assert_eq!(kept.lock().unwrap().1, 2);
    }

    #[test]
    fn restore_refuses_what_it_cannot_trust() {
        let (mut t, now) = table();
        t.request(&req(1, 2, LeaseOp::Acquire, true), now);
        let good = t.encode();
        assert_eq!(good.len(), 12 + RECORD);
        assert!(LeaseTable::restore(now, MAX, &good).is_ok());
        assert_eq!(
            LeaseTable::restore(now, MAX, b"EBOFWIT").unwrap_err(),
            RestoreError::NotATable
        );
        let mut bad = good.clone();
        bad[0] ^= 1;
        assert_eq!(
            LeaseTable::restore(now, MAX, &bad).unwrap_err(),
            RestoreError::NotATable
        );
        let short = &good[..good.len() - 1];
        assert_eq!(
            LeaseTable::restore(now, MAX, short).unwrap_err(),
            RestoreError::Count(1)
        );
        let mut flags = good.clone();
        *flags.last_mut().unwrap() = 2;
        assert_eq!(
            LeaseTable::restore(now, MAX, &flags).unwrap_err(),
            RestoreError::Flags(0)
        );
        let mut dup = good.clone();
        dup[8] = 2;
        dup.extend_from_slice(&good[12..]);
        assert_eq!(
            LeaseTable::restore(now, MAX, &dup).unwrap_err(),
            RestoreError::Order(1)
        );
        let mut many = good[..12].to_vec();
        many[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            LeaseTable::restore(now, MAX, &many),
            Err(RestoreError::Count(_))
        ));
    }

    #[test]
    fn a_fresh_witness_grants_nothing_for_its_longest_lease() {
        let t0 = Instant::now();
        let mut t = LeaseTable::new(t0, MAX);
        let r = req(1, 1, LeaseOp::Acquire, true);
        assert!(!t.request(&r, t0).granted);
        assert!(!t.request(&r, t0 + MAX - Duration::from_millis(1)).granted);
        assert!(t.request(&r, t0 + MAX).granted);
    }

    #[test]
    fn the_holder_renews_and_others_wait_for_expiry() {
        let (mut t, now) = table();
        assert!(t.request(&req(1, 1, LeaseOp::Acquire, true), now).granted);
        // another box, even with a higher epoch, while the lease runs
        let other = req(2, 2, LeaseOp::Acquire, true);
        let r = t.request(&other, now + L / 2);
        assert!(!r.granted);
        assert_eq!(r.left, L / 2);
        assert_eq!(r.epoch, 1);
        // renewal moves the expiry
        assert!(
            t.request(&req(1, 1, LeaseOp::Acquire, true), now + L / 2)
                .granted
        );
        assert!(!t.request(&other, now + L).granted);
        // expired: the other box takes it with a higher epoch
        assert!(t.request(&other, now + L / 2 + L).granted);
        // the old holder cannot come back with its old epoch, nor renew
        assert!(
            !t.request(&req(1, 1, LeaseOp::Acquire, true), now + 2 * L)
                .granted
        );
    }

    #[test]
    fn takeover_needs_a_higher_epoch() {
        let (mut t, now) = table();
        assert!(t.request(&req(1, 5, LeaseOp::Acquire, true), now).granted);
        let later = now + L;
        assert!(!t.request(&req(2, 5, LeaseOp::Acquire, true), later).granted);
        assert!(!t.request(&req(2, 4, LeaseOp::Acquire, true), later).granted);
        assert!(t.request(&req(2, 6, LeaseOp::Acquire, true), later).granted);
    }

    #[test]
    fn no_takeover_when_the_last_report_said_the_peer_was_behind() {
        let (mut t, now) = table();
        assert!(t.request(&req(1, 1, LeaseOp::Acquire, true), now).granted);
        // the primary went degraded: it says so before completing anything alone
        assert!(
            t.request(&req(1, 1, LeaseOp::Acquire, false), now + L / 4)
                .granted
        );
        // then dies: the stale secondary is never promoted
        let r = t.request(&req(2, 2, LeaseOp::Acquire, true), now + 10 * L);
        assert!(!r.granted);
        assert_eq!(r.left, Duration::ZERO);
        // the old primary, back, may take it again (it has every write)
        assert!(
            t.request(&req(1, 2, LeaseOp::Acquire, false), now + 10 * L)
                .granted
        );
    }

    #[test]
    fn release_ends_the_lease_and_keeps_the_epoch() {
        let (mut t, now) = table();
        assert!(t.request(&req(1, 3, LeaseOp::Acquire, true), now).granted);
        assert!(!t.request(&req(2, 3, LeaseOp::Release, true), now).granted);
        assert!(t.request(&req(1, 3, LeaseOp::Release, true), now).granted);
        assert!(!t.request(&req(2, 3, LeaseOp::Acquire, true), now).granted);
        assert!(t.request(&req(2, 4, LeaseOp::Acquire, true), now).granted);
    }

    #[test]
    fn query_changes_nothing_and_leases_are_capped() {
        let (mut t, now) = table();
        let mut r = req(1, 1, LeaseOp::Acquire, true);
        r.lease = Duration::from_secs(3600);
        let g = t.request(&r, now);
        assert!(g.granted);
        assert_eq!(g.left, MAX);
        let q = t.request(
            &req(9, 0, LeaseOp::Query, false),
            now + Duration::from_secs(1),
        );
        assert!(!q.granted);
        assert_eq!(q.left, MAX - Duration::from_secs(1));
        assert_eq!(q.epoch, 1);
        let mut zero = req(1, 1, LeaseOp::Acquire, true);
        zero.lease = Duration::ZERO;
        assert!(!t.request(&zero, now).granted);
    }

    #[test]
    fn the_table_is_bounded_and_evicts_only_what_anyone_could_take() {
        let (mut t, now) = table();
        let mut r = req(1, 1, LeaseOp::Acquire, true);
        for i in 0..MAX_VOLUMES {
            r.volume[..8].copy_from_slice(&(i as u64).to_le_bytes());
            assert!(t.request(&r, now).granted);
        }
        assert_eq!(t.len(), MAX_VOLUMES);
        r.volume = [0xEE; 16];
        assert!(!t.request(&r, now).granted, "every lease is live: full");
        // one expires with its peer behind: still not evictable
        let mut behind = req(1, 1, LeaseOp::Acquire, false);
        behind.volume[..8].copy_from_slice(&0u64.to_le_bytes());
        assert!(t.request(&behind, now).granted);
        let later = now + L + Duration::from_millis(1);
        // all expired now; the in-sync ones can go
        assert!(t.request(&r, later).granted);
        assert_eq!(t.len(), MAX_VOLUMES);
        // the out-of-sync record survived
        let mut takeover = req(2, 2, LeaseOp::Acquire, true);
        takeover.volume = behind.volume;
        assert!(!t.request(&takeover, later).granted);
    }
}
