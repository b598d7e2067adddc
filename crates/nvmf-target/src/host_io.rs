//! Per-host I/O counters (opt-in: `[metrics] per_host_io = true`; a host NQN is an identity).
//!
//! Nothing is added to the per-command path: a queue already gathers its reads and writes per
//! namespace in its `StatsBatch` (no shared write per command). When per-host counting is on,
//! an I/O queue takes its host's [`HostIo`] at Connect, and each time the batch is published
//! (idle, every 1,024 commands, on the timer tick) the same figures are also added to it — a
//! handful of relaxed atomic adds per batch. Off (the default), the queue holds `None` and the
//! publishing pays one branch.
//!
//! Cardinality is bounded: the table keeps one entry per host NQN (its queues share it, so its
//! counters only grow while it reconnects), at most [`MAX_HOSTS`] of them. When the table is
//! full, entries no queue holds any more are dropped; a host that still finds it full is
//! counted under the empty NQN (the overflow entry, labelled `hostnqn=""`).

use crate::latency::LatencyHistogram;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Most host NQNs counted apart; beyond them, hosts are counted together under `""`.
pub const MAX_HOSTS: usize = 1024;

/// One host's I/O counters, summed over all its queues (every subsystem and namespace).
#[derive(Debug, Default)]
pub struct HostIo {
    /// Read commands completed successfully.
    pub read_cmds: AtomicU64,
    /// Bytes read.
    pub bytes_read: AtomicU64,
    /// Write commands completed successfully.
    pub write_cmds: AtomicU64,
    /// Bytes written.
    pub bytes_written: AtomicU64,
    /// Reads and writes that failed.
    pub media_errors: AtomicU64,
    /// Latency of successful reads (the namespaces' histogram type, [`crate::latency`]).
    pub read_latency: LatencyHistogram,
    /// Latency of successful writes.
    pub write_latency: LatencyHistogram,
}

/// The target's per-host counters: off until [`HostIoTable::set_enabled`].
#[derive(Debug, Default)]
pub struct HostIoTable {
    enabled: AtomicBool,
    hosts: Mutex<BTreeMap<String, Arc<HostIo>>>,
}

impl HostIoTable {
    /// Count I/O per host from now on (queues connected before keep not counting), or stop
    /// (new queues count nothing; the counters gathered are kept).
    pub fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Ordering::Relaxed);
    }

    /// Is per-host counting on?
    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// The counters of host `hostnqn` for a queue connecting now; `None` when counting is off.
    /// Called at Connect, never per command.
    pub fn for_host(&self, hostnqn: &str) -> Option<Arc<HostIo>> {
        if !self.enabled() {
            return None;
        }
        let mut m = self.hosts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(h) = m.get(hostnqn) {
            return Some(h.clone());
        }
        if m.len() >= MAX_HOSTS {
            // Forget hosts no queue counts into any more (the overflow entry stays).
            m.retain(|k, h| k.is_empty() || Arc::strong_count(h) > 1);
        }
        let key = if m.len() >= MAX_HOSTS {
            String::new()
        } else {
            hostnqn.to_string()
        };
        Some(m.entry(key).or_default().clone())
    }

    /// Every host counted, by NQN (`""`: the overflow entry); `None` when counting is off.
    pub fn snapshot(&self) -> Option<Vec<(String, Arc<HostIo>)>> {
        if !self.enabled() {
            return None;
        }
        let m = self.hosts.lock().unwrap_or_else(|e| e.into_inner());
        Some(m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_hands_out_nothing_and_the_table_is_bounded() {
        let t = HostIoTable::default();
        assert!(t.for_host("h").is_none() && t.snapshot().is_none());
        t.set_enabled(true);
        let a = t.for_host("h1").unwrap();
        assert!(
            Arc::ptr_eq(&a, &t.for_host("h1").unwrap()),
            "one entry per NQN"
        );
        let held: Vec<_> = (0..MAX_HOSTS - 1)
            .map(|i| t.for_host(&format!("n{i}")).unwrap())
            .collect();
        // Full, and every entry held: a new host goes to the overflow entry.
        let o = t.for_host("late").unwrap();
        let snap = t.snapshot().unwrap();
        assert!(snap.iter().any(|(k, h)| k.is_empty() && Arc::ptr_eq(h, &o)));
        // Idle entries are dropped when room is needed.
        drop((held, o, snap));
        t.for_host("later").unwrap();
        let snap = t.snapshot().unwrap();
        assert!(snap.iter().any(|(k, _)| k == "later"));
        assert!(snap.iter().any(|(k, _)| k == "h1"), "a held entry stays");
        assert!(snap.len() <= MAX_HOSTS);
    }
}
