//! How busy each run loop is: the wall time a loop (a TCP reactor, an RDMA poller) has run and
//! the part of it spent on turns that did work, for metrics
//! (`ebof_reactor_busy_seconds_total`, `ebof_reactor_seconds_total`) and benchmarks.
//!
//! A polling loop burns its whole core whether it works or not, so process CPU time cannot say
//! whether the loop is the limit of a benchmark; the busy share can (SPDK reports the same
//! split per thread as `busy` and `idle` ticks). The loop does the accounting itself, from the
//! two clock reads each turn already makes, and publishes its running totals with two relaxed
//! stores per turn (one writer per [`LoopLoad`]; readers only read).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

/// Which kind of run loop a [`LoopLoad`] belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LoopKind {
    /// A TCP reactor (NVMe/TCP queues, discovery).
    Tcp,
    /// An RDMA poller (NVMe/RDMA queues).
    Rdma,
}

impl LoopKind {
    /// The label value in metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            LoopKind::Tcp => "tcp",
            LoopKind::Rdma => "rdma",
        }
    }
}

/// One run loop's totals since it started: written by the loop only.
#[derive(Debug)]
pub struct LoopLoad {
    /// The core the loop runs on.
    pub core: usize,
    /// The kind of loop.
    pub kind: LoopKind,
    busy_ns: AtomicU64,
    run_ns: AtomicU64,
}

impl LoopLoad {
    /// Publish the loop's totals: `busy` of the `run` it has been running (the loop's only
    /// writer calls this; totals never go down).
    #[inline]
    pub fn publish(&self, busy: Duration, run: Duration) {
        self.busy_ns.store(nanos(busy), Ordering::Relaxed);
        self.run_ns.store(nanos(run), Ordering::Relaxed);
    }

    /// Time spent on turns that did work, as last published.
    pub fn busy(&self) -> Duration {
        Duration::from_nanos(self.busy_ns.load(Ordering::Relaxed))
    }

    /// Time the loop has run, as last published.
    pub fn run(&self) -> Duration {
        Duration::from_nanos(self.run_ns.load(Ordering::Relaxed))
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The target's run loops: each registers at start ([`LoadTable::register`]); a loop that
/// ended drops out of [`LoadTable::snapshot`].
#[derive(Debug, Default)]
pub struct LoadTable {
    loops: Mutex<Vec<Weak<LoopLoad>>>,
}

/// One loop's totals at the time of a [`LoadTable::snapshot`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadFigures {
    /// The loop's core.
    pub core: usize,
    /// The loop's kind.
    pub kind: LoopKind,
    /// Time on turns that did work.
    pub busy: Duration,
    /// Time the loop has run.
    pub run: Duration,
}

impl LoadTable {
    /// A new loop's totals, zero until it publishes.
    pub fn register(&self, core: usize, kind: LoopKind) -> Arc<LoopLoad> {
        let l = Arc::new(LoopLoad {
            core,
            kind,
            busy_ns: AtomicU64::new(0),
            run_ns: AtomicU64::new(0),
        });
        let mut v = self.loops.lock().unwrap_or_else(|e| e.into_inner());
        v.retain(|w| w.strong_count() > 0);
        v.push(Arc::downgrade(&l));
        l
    }

    /// Every running loop's totals, by kind and core.
    pub fn snapshot(&self) -> Vec<LoadFigures> {
        let v = self.loops.lock().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<LoadFigures> = v
            .iter()
            .filter_map(Weak::upgrade)
            .map(|l| LoadFigures {
                core: l.core,
                kind: l.kind,
                busy: l.busy(),
                run: l.run(),
            })
            .collect();
        out.sort_by_key(|f| (f.kind, f.core));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loops_publish_and_ended_loops_drop_out() {
        let t = LoadTable::default();
        let a = t.register(1, LoopKind::Tcp);
        let b = t.register(0, LoopKind::Rdma);
        let c = t.register(0, LoopKind::Tcp);
        a.publish(Duration::from_millis(3), Duration::from_millis(10));
        let s = t.snapshot();
        assert_eq!(
            s.iter().map(|f| (f.kind, f.core)).collect::<Vec<_>>(),
            [(LoopKind::Tcp, 0), (LoopKind::Tcp, 1), (LoopKind::Rdma, 0)]
        );
        assert_eq!(s[1].busy, Duration::from_millis(3));
        assert_eq!(s[1].run, Duration::from_millis(10));
        assert_eq!(s[0].run, Duration::ZERO);
        drop(b);
        drop(c);
        assert_eq!(t.snapshot().len(), 1);
        // A new loop prunes the ended ones from the table.
        let _d = t.register(2, LoopKind::Tcp);
        assert_eq!(t.loops.lock().unwrap().len(), 2);
    }
}
