//! Per-namespace quality of service: IOPS and bandwidth limits, total and per direction, held
//! for the namespace as a whole across every queue, core and host (ADR 0020).
//!
//! **Shared budget, local buckets.** Each limited quantity (a [`Kind`]) of a namespace has one
//! shared budget ([`NsQos`]): a rate and a *theoretical arrival time* (`tat`), the instant up to
//! which the rate's tokens have been handed out. A queue does not take tokens per command: it
//! keeps its own [`Bucket`] per kind (in the queue, touched only by the core that owns the
//! queue) and refills it in batches of about [`BATCH`] worth of the rate with one
//! compare-exchange on `tat`. Taking `n` tokens at `now` moves `tat` to
//! `max(tat, now − BURST) + n / rate`; the tokens are usable once that instant has come. A
//! command therefore waits until its tokens have accrued, and never fails: a command larger
//! than a batch takes what it needs (it borrows ahead, so a 1 MiB write at 1 MB/s waits about
//! a second, then runs).
//!
//! **Time** enters as a parameter (`now`, as everywhere in the sans-IO core): the budget keeps
//! nanoseconds since the first instant it was given, so tests drive it with made-up instants.
//!
//! **Accuracy.** Over a window `W` a namespace gets at most `rate × (W + BURST)` plus the
//! tokens queues hold in their buckets (at most one batch each, [`BATCH`] worth), and while
//! commands wait it gets at least `rate × (W − BURST)` minus the same: with the defaults and a
//! few dozen queues, well inside ±1 % over 5 s. `BURST` also absorbs the driver's late
//! wake-ups (a sleeping reactor wakes at millisecond granularity): a late wake-up leaves
//! credit behind that the next commands use.
//!
//! **Cost when off.** A namespace without limits has `on` false; the command path reads it
//! (one relaxed load of a line nothing writes) and goes on. Nothing else is touched.

use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A queue refills a bucket with this much of the rate at a time (at least one I/O, or the
/// command's own size): one atomic operation per batch, not per command.
pub const BATCH: Duration = Duration::from_millis(1);

/// Credit an idle budget keeps: a namespace idle for a while may run this much of its rate
/// at once. Also what makes late wake-ups of the driver not lose rate.
pub const BURST: Duration = Duration::from_millis(5);

/// A queue with waiting commands looks at its namespaces' limits at least this often, so a
/// limit lifted or changed live releases commands that were scheduled under the old one.
pub const RECHECK: Duration = Duration::from_millis(50);

/// The limits of one namespace; 0 is unlimited. MB are 10^6 bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QosLimits {
    /// Commands per second, both directions.
    pub iops: u64,
    /// Megabytes per second, both directions.
    pub mbps: u64,
    /// Read commands per second.
    pub read_iops: u64,
    /// Write commands per second.
    pub write_iops: u64,
    /// Megabytes read per second.
    pub read_mbps: u64,
    /// Megabytes written per second.
    pub write_mbps: u64,
}

impl QosLimits {
    /// True when no limit is set.
    pub fn is_unlimited(&self) -> bool {
        *self == QosLimits::default()
    }

    /// The rate of `k` in its unit per second (bytes for the bandwidth kinds); 0 is unlimited.
    fn rate(&self, k: Kind) -> u64 {
        let mb = |v: u64| v.saturating_mul(1_000_000);
        match k {
            Kind::Iops => self.iops,
            Kind::Bytes => mb(self.mbps),
            Kind::ReadIops => self.read_iops,
            Kind::WriteIops => self.write_iops,
            Kind::ReadBytes => mb(self.read_mbps),
            Kind::WriteBytes => mb(self.write_mbps),
        }
    }
}

/// One limited quantity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Commands, both directions.
    Iops = 0,
    /// Bytes, both directions.
    Bytes = 1,
    /// Read commands.
    ReadIops = 2,
    /// Write commands.
    WriteIops = 3,
    /// Bytes read.
    ReadBytes = 4,
    /// Bytes written.
    WriteBytes = 5,
}

/// Number of [`Kind`]s.
pub const KINDS: usize = 6;

impl Kind {
    /// Every kind, in index order.
    pub const ALL: [Kind; KINDS] = [
        Kind::Iops,
        Kind::Bytes,
        Kind::ReadIops,
        Kind::WriteIops,
        Kind::ReadBytes,
        Kind::WriteBytes,
    ];
}

/// What a command costs: its direction and its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Charge {
    /// True for commands that write (Write, Write Zeroes, Deallocate, Copy, Flush).
    pub write: bool,
    /// Bytes moved (0 for Write Zeroes, Deallocate, Flush).
    pub bytes: u64,
}

impl Charge {
    /// The tokens of kind `k` this command takes (0: not charged to `k`).
    #[inline]
    fn cost(&self, k: Kind) -> u64 {
        match k {
            Kind::Iops => 1,
            Kind::Bytes => self.bytes,
            Kind::ReadIops => u64::from(!self.write),
            Kind::WriteIops => u64::from(self.write),
            Kind::ReadBytes => self.bytes * u64::from(!self.write),
            Kind::WriteBytes => self.bytes * u64::from(self.write),
        }
    }
}

/// One shared budget on its own cache-line pair: `tat` is written by every queue that refills
/// (once per batch), `rate` only by the control plane.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Budget {
    /// Tokens per second; 0: unlimited.
    rate: AtomicU64,
    /// Nanoseconds since the epoch up to which tokens are handed out.
    tat: AtomicU64,
}

/// The shared part of a namespace's QoS: limits, budgets, and how much commands waited.
#[derive(Debug, Default)]
pub struct QosShared {
    budgets: [Budget; KINDS],
    /// Instant 0 of the budgets (the first instant a queue gave).
    epoch: OnceLock<Instant>,
    /// Bumped at every change of the limits: queues drop their buckets and release waiting
    /// commands scheduled under the old limits.
    generation: AtomicU64,
    /// Commands that waited (published by the queues in batches).
    waited: AtomicU64,
    /// Their total wait, in nanoseconds.
    wait_ns: AtomicU64,
    /// The limits as set (for display).
    limits: std::sync::Mutex<QosLimits>,
}

impl QosShared {
    /// Nanoseconds from the epoch to `now`. The epoch is a second before the first instant
    /// seen, so a new budget starts with its [`BURST`] of credit, as an idle one has.
    fn ns(&self, now: Instant) -> u64 {
        let epoch = *self
            .epoch
            .get_or_init(|| now.checked_sub(Duration::from_secs(1)).unwrap_or(now));
        u64::try_from(now.saturating_duration_since(epoch).as_nanos()).unwrap_or(u64::MAX)
    }

    /// The instant `ns` nanoseconds after the epoch.
    fn at(&self, ns: u64) -> Option<Instant> {
        self.epoch
            .get()
            .and_then(|e| e.checked_add(Duration::from_nanos(ns)))
    }

    /// Batch size of kind `k` at `rate`: [`BATCH`] worth, at least one token.
    fn batch(rate: u64) -> u64 {
        (rate / (1_000_000_000 / BATCH.as_nanos() as u64)).max(1)
    }

    /// Hand out `n` tokens of kind `k` at `now`: the instant they have accrued (`None` when
    /// `k` is unlimited). One compare-exchange loop on the budget's `tat`.
    pub fn reserve(&self, k: Kind, n: u64, now: Instant) -> Option<Instant> {
        let b = &self.budgets[k as usize];
        let rate = b.rate.load(Ordering::Relaxed);
        if rate == 0 {
            return None;
        }
        let now_ns = self.ns(now);
        let cost =
            u64::try_from(u128::from(n) * 1_000_000_000 / u128::from(rate)).unwrap_or(u64::MAX);
        let floor = now_ns.saturating_sub(BURST.as_nanos() as u64);
        let mut cur = b.tat.load(Ordering::Relaxed);
        loop {
            let new = cur.max(floor).saturating_add(cost);
            match b
                .tat
                .compare_exchange_weak(cur, new, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return Some(self.at(new).unwrap_or(now)),
                Err(c) => cur = c,
            }
        }
    }

    /// The limits in force.
    pub fn limits(&self) -> QosLimits {
        *self.limits.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// (commands that waited, their total wait) so far.
    pub fn waits(&self) -> (u64, Duration) {
        (
            self.waited.load(Ordering::Relaxed),
            Duration::from_nanos(self.wait_ns.load(Ordering::Relaxed)),
        )
    }

    /// The current generation of the limits.
    #[inline]
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    fn set(&self, l: QosLimits) {
        *self.limits.lock().unwrap_or_else(|e| e.into_inner()) = l;
        for k in Kind::ALL {
            let b = &self.budgets[k as usize];
            b.rate.store(l.rate(k), Ordering::Relaxed);
            // Start from a clean budget: debt run up under the old limits is forgiven.
            b.tat.store(0, Ordering::Relaxed);
        }
        self.generation.fetch_add(1, Ordering::Release);
    }

    fn publish(&self, waited: u64, wait_ns: u64) {
        if waited > 0 {
            self.waited.fetch_add(waited, Ordering::Relaxed);
            self.wait_ns.fetch_add(wait_ns, Ordering::Relaxed);
        }
    }
}

/// A namespace's QoS as the namespace holds it: the read-mostly switch the command path looks
/// at, and the shared budgets behind a pointer (their writes never touch the namespace's lines).
#[derive(Debug, Default)]
pub struct NsQos {
    on: AtomicBool,
    shared: Arc<QosShared>,
}

impl NsQos {
    /// True when any limit is set (one relaxed load; written only when limits change).
    #[inline(always)]
    pub fn on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// Set the limits, live (all zero: unlimited). Queues pick them up at their next command;
    /// commands waiting under the old limits are released within [`RECHECK`].
    pub fn set(&self, l: QosLimits) {
        self.shared.set(l);
        self.on.store(!l.is_unlimited(), Ordering::Release);
    }

    /// The limits in force.
    pub fn limits(&self) -> QosLimits {
        self.shared.limits()
    }

    /// (commands that waited, their total wait) so far (published by queues in batches, at
    /// the latest at their next tick).
    pub fn waits(&self) -> (u64, Duration) {
        self.shared.waits()
    }

    /// The shared budgets.
    pub fn shared(&self) -> &Arc<QosShared> {
        &self.shared
    }
}

/// One queue's bucket of one kind: tokens it took from the shared budget and has not used
/// (negative: a command borrowed ahead), usable from `ready`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Bucket {
    balance: i64,
    ready: Option<Instant>,
}

impl Bucket {
    /// Take `cost` tokens of kind `k` for a command at `now`, refilling from `shared` in a
    /// batch when the bucket runs short. Returns when the command may run (`None`: now, or
    /// `k` is unlimited).
    pub fn take(
        &mut self,
        shared: &QosShared,
        k: Kind,
        cost: u64,
        now: Instant,
    ) -> Option<Instant> {
        if cost == 0 {
            return None;
        }
        let cost_i = i64::try_from(cost).unwrap_or(i64::MAX);
        if self.balance < cost_i {
            let rate = shared.budgets[k as usize].rate.load(Ordering::Relaxed);
            if rate == 0 {
                return None;
            }
            let short = u64::try_from(cost_i.saturating_sub(self.balance)).unwrap_or(0);
            let want = QosShared::batch(rate).max(short);
            let at = shared.reserve(k, want, now)?;
            self.balance = self
                .balance
                .saturating_add(i64::try_from(want).unwrap_or(i64::MAX));
            self.ready = Some(self.ready.map_or(at, |r| r.max(at)));
        }
        self.balance -= cost_i;
        self.ready.filter(|&r| r > now)
    }
}

/// One queue's buckets for one namespace, and the waits not yet published.
#[derive(Debug)]
pub struct LocalQos {
    shared: Arc<QosShared>,
    generation: u64,
    buckets: [Bucket; KINDS],
    waited: u64,
    wait_ns: u64,
}

impl LocalQos {
    /// A queue's empty buckets on `shared`.
    pub fn new(shared: Arc<QosShared>) -> LocalQos {
        let generation = shared.generation();
        LocalQos {
            shared,
            generation,
            buckets: [Bucket::default(); KINDS],
            waited: 0,
            wait_ns: 0,
        }
    }

    /// The shared budgets these buckets draw from.
    pub fn shared(&self) -> &Arc<QosShared> {
        &self.shared
    }

    /// Charge a command: when it may run (`None`: now).
    pub fn admit(&mut self, c: Charge, now: Instant) -> Option<Instant> {
        let g = self.shared.generation();
        if g != self.generation {
            self.generation = g;
            self.buckets = [Bucket::default(); KINDS];
        }
        let mut until: Option<Instant> = None;
        for k in Kind::ALL {
            let cost = c.cost(k);
            if cost == 0 {
                continue;
            }
            if let Some(t) = self.buckets[k as usize].take(&self.shared, k, cost, now) {
                until = Some(until.map_or(t, |u| u.max(t)));
            }
        }
        if let Some(t) = until {
            self.waited += 1;
            self.wait_ns = self.wait_ns.saturating_add(
                u64::try_from(t.saturating_duration_since(now).as_nanos()).unwrap_or(u64::MAX),
            );
        }
        until
    }

    /// Publish the waits counted so far to the namespace.
    pub fn publish(&mut self) {
        self.shared.publish(
            std::mem::take(&mut self.waited),
            std::mem::take(&mut self.wait_ns),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Commands of `c` issued back to back on `queues` local bucket sets (round robin) for
    /// `secs` simulated seconds, each starting when its predecessor on its queue may run
    /// (a queue depth of `qd` per queue): how many ran.
    fn simulate(ns: &NsQos, queues: usize, qd: usize, c: Charge, secs: u64) -> u64 {
        let t0 = Instant::now();
        let end = t0 + Duration::from_secs(secs);
        let mut locals: Vec<LocalQos> = (0..queues)
            .map(|_| LocalQos::new(ns.shared().clone()))
            .collect();
        // Per queue, per outstanding command: when it may be issued again.
        let mut free: Vec<Vec<Instant>> = vec![vec![t0; qd]; queues];
        let mut done = 0u64;
        loop {
            // The earliest free command slot anywhere.
            let (q, s) = (0..queues)
                .flat_map(|q| (0..qd).map(move |s| (q, s)))
                .min_by_key(|&(q, s)| free[q][s])
                .unwrap();
            let now = free[q][s];
            if now >= end {
                break;
            }
            let run_at = locals[q].admit(c, now).unwrap_or(now);
            if run_at < end {
                done += 1;
            }
            // The command completes at once when it runs; its slot is reused then.
            free[q][s] = run_at + Duration::from_micros(10);
        }
        done
    }

    fn read(bytes: u64) -> Charge {
        Charge {
            write: false,
            bytes,
        }
    }

    fn write(bytes: u64) -> Charge {
        Charge { write: true, bytes }
    }

    fn within(got: u64, want: u64, pct: u64) -> bool {
        got * 100 >= want * (100 - pct) && got * 100 <= want * (100 + pct)
    }

    #[test]
    fn unlimited_is_off_and_never_waits() {
        let ns = NsQos::default();
        assert!(!ns.on());
        let mut l = LocalQos::new(ns.shared().clone());
        let now = Instant::now();
        for _ in 0..1000 {
            assert_eq!(l.admit(read(4096), now), None);
        }
        assert_eq!(ns.waits().0, 0);
    }

    #[test]
    fn iops_rate_held_on_one_queue_at_any_depth() {
        for qd in [1, 4, 32] {
            let ns = NsQos::default();
            ns.set(QosLimits {
                iops: 1000,
                ..Default::default()
            });
            assert!(ns.on());
            let n = simulate(&ns, 1, qd, read(4096), 5);
            assert!(within(n, 5000, 1), "qd {qd}: {n}");
        }
    }

    #[test]
    fn batches_shared_across_cores() {
        // Four queues (as on four cores) share one namespace's 20 000 IOPS.
        let ns = NsQos::default();
        ns.set(QosLimits {
            iops: 20_000,
            ..Default::default()
        });
        let n = simulate(&ns, 4, 8, read(512), 5);
        assert!(within(n, 100_000, 1), "{n}");
        // Batches, not single tokens: 20 per refill at 20 000/s.
        assert_eq!(QosShared::batch(20_000), 20);
    }

    #[test]
    fn bandwidth_rate_held_across_two_queues() {
        let ns = NsQos::default();
        ns.set(QosLimits {
            mbps: 100,
            ..Default::default()
        });
        // 128 KiB reads: 100 MB/s is ~763 per second.
        let n = simulate(&ns, 2, 16, read(131_072), 5);
        let bytes = n * 131_072;
        assert!(within(bytes, 500_000_000, 2), "{bytes}");
    }

    #[test]
    fn a_command_larger_than_a_batch_borrows_ahead() {
        let ns = NsQos::default();
        ns.set(QosLimits {
            mbps: 1,
            ..Default::default()
        });
        let mut l = LocalQos::new(ns.shared().clone());
        let t0 = Instant::now();
        // A 1 MiB write at 1 MB/s: passes, after about a second (5 ms of burst credit).
        let at = l.admit(write(1 << 20), t0).expect("waits");
        let waited = at - t0;
        assert!(waited > ms(1000) && waited < ms(1050), "{waited:?}");
        // The next one waits another second.
        let at2 = l.admit(write(1 << 20), at).expect("waits");
        assert!(at2 - at > ms(1040), "{:?}", at2 - at);
        let (n, total) = ns.waits();
        assert_eq!(n, 0, "not published yet");
        l.publish();
        let (n, total2) = ns.waits();
        assert_eq!(n, 2);
        assert!(total2 > total);
    }

    #[test]
    fn per_direction_limits_leave_the_other_direction_free() {
        let ns = NsQos::default();
        ns.set(QosLimits {
            read_iops: 100,
            ..Default::default()
        });
        let mut l = LocalQos::new(ns.shared().clone());
        let now = Instant::now();
        for _ in 0..10_000 {
            assert_eq!(l.admit(write(4096), now), None);
        }
        let waited = (0..100)
            .filter(|_| l.admit(read(4096), now).is_some())
            .count();
        assert!(waited > 90, "{waited}");
    }

    #[test]
    fn limits_change_live() {
        let ns = NsQos::default();
        ns.set(QosLimits {
            iops: 1000,
            ..Default::default()
        });
        let t0 = Instant::now();
        let mut l = LocalQos::new(ns.shared().clone());
        // Run up a debt: 2000 commands at once are scheduled over two seconds.
        let last = (0..2000)
            .filter_map(|_| l.admit(read(0), t0))
            .max()
            .unwrap();
        assert!(last - t0 > ms(1900));
        // Raised: the debt is forgiven and the new rate applies from now.
        ns.set(QosLimits {
            iops: 100_000,
            ..Default::default()
        });
        let t1 = t0 + ms(10);
        let last = (0..1000).filter_map(|_| l.admit(read(0), t1)).max();
        assert!(last.is_none_or(|t| t - t1 < ms(10)), "{last:?}");
        // Lifted: off, and nothing waits.
        ns.set(QosLimits::default());
        assert!(!ns.on());
        assert_eq!(l.admit(read(0), t1), None);
    }

    #[test]
    fn an_idle_budget_keeps_only_a_burst() {
        let ns = NsQos::default();
        ns.set(QosLimits {
            iops: 1000,
            ..Default::default()
        });
        let mut l = LocalQos::new(ns.shared().clone());
        let t0 = Instant::now();
        let _ = l.admit(read(0), t0);
        // An hour later, only BURST (5 ms = 5 commands) run at once.
        let later = t0 + Duration::from_secs(3600);
        let free = (0..100)
            .take_while(|_| l.admit(read(0), later).is_none())
            .count();
        assert!((4..=6).contains(&free), "{free}");
    }
}
