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

/// The table (see the module docs).
#[derive(Debug)]
pub struct LeaseTable {
    leases: HashMap<[u8; 16], Lease>,
    max_lease: Duration,
    grace_until: Instant,
}

impl LeaseTable {
    /// A table made at `now`, granting leases of at most `max_lease`; it grants nothing before
    /// `now + max_lease`.
    pub fn new(now: Instant, max_lease: Duration) -> LeaseTable {
        LeaseTable {
            leases: HashMap::new(),
            max_lease,
            grace_until: now + max_lease,
        }
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
                self.leases.insert(req.volume, new);
                LeaseReply {
                    granted: true,
                    left: lease,
                    epoch: req.epoch,
                }
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
