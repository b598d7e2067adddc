//! Command latency histograms: log-linear buckets (four per power of two, from 1 µs to about
//! 16.8 s, so a bucket is at most 25 % wide), counted per queue without any shared write and
//! added to the namespace's histogram in the same batches as the SMART counters.
//!
//! Latency is measured inside the target: from the receive batch that carried the command to
//! the batch that hands its completion to the transport.

use std::sync::atomic::{AtomicU64, Ordering};

/// Buckets: one for ≤ 1 µs, four per octave up to 2^24 µs, and one open-ended.
pub const BUCKETS: usize = 2 + 4 * 24;

/// The bucket of a latency of `ns` nanoseconds.
#[inline]
pub fn bucket(ns: u64) -> usize {
    // Quarter microseconds; 4..8 is the first octave above 1 µs.
    let q = ns / 250;
    if q < 4 {
        return 0;
    }
    let octave = (63 - q.leading_zeros() as usize) - 2;
    let sub = ((q >> octave) - 4) as usize;
    (1 + 4 * octave + sub).min(BUCKETS - 1)
}

/// Upper bound of bucket `i` in seconds (`f64::MAX` for the open-ended last one, as
/// Prometheus' `+Inf`).
pub fn upper_bound_secs(i: usize) -> f64 {
    if i == 0 {
        return 1e-6;
    }
    if i >= BUCKETS - 1 {
        return f64::MAX;
    }
    let octave = (i - 1) / 4;
    let sub = (i - 1) % 4;
    let us = f64::from(1u32 << octave) * (1.0 + (sub as f64 + 1.0) / 4.0);
    us * 1e-6
}

/// One queue's latencies not yet published (no atomics).
#[derive(Debug, Clone)]
pub(crate) struct LatencyBatch {
    counts: [u32; BUCKETS],
    /// Buckets with a nonzero count (bit i = bucket i), so publishing touches only those.
    touched: u128,
    sum_ns: u64,
}

impl Default for LatencyBatch {
    fn default() -> Self {
        LatencyBatch {
            counts: [0; BUCKETS],
            touched: 0,
            sum_ns: 0,
        }
    }
}

impl LatencyBatch {
    #[inline]
    pub fn record(&mut self, ns: u64) {
        let b = bucket(ns);
        self.counts[b] += 1;
        self.touched |= 1 << b;
        self.sum_ns = self.sum_ns.wrapping_add(ns);
    }

    /// Add everything to `into` and start over.
    #[cfg(test)]
    pub fn publish(&mut self, into: &LatencyHistogram) {
        self.publish_to(into, None);
    }

    /// Add everything to `into` (and to `also`: the host's histogram, [`crate::host_io`]) and
    /// start over.
    pub fn publish_to(&mut self, into: &LatencyHistogram, also: Option<&LatencyHistogram>) {
        let mut t = self.touched;
        while t != 0 {
            let b = t.trailing_zeros() as usize;
            t &= t - 1;
            let n = u64::from(self.counts[b]);
            into.buckets[b].fetch_add(n, Ordering::Relaxed);
            if let Some(h) = also {
                h.buckets[b].fetch_add(n, Ordering::Relaxed);
            }
            self.counts[b] = 0;
        }
        if self.sum_ns != 0 {
            into.sum_ns.fetch_add(self.sum_ns, Ordering::Relaxed);
            if let Some(h) = also {
                h.sum_ns.fetch_add(self.sum_ns, Ordering::Relaxed);
            }
        }
        self.touched = 0;
        self.sum_ns = 0;
    }
}

/// A namespace's latency histogram, summed over all its queues.
#[derive(Debug)]
pub struct LatencyHistogram {
    buckets: [AtomicU64; BUCKETS],
    sum_ns: AtomicU64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_ns: AtomicU64::new(0),
        }
    }
}

/// A copy of a histogram at one moment.
#[derive(Clone, Debug, PartialEq)]
pub struct LatencySnapshot {
    /// Count per bucket (not cumulative); bucket i ends at [`upper_bound_secs`]`(i)`.
    pub buckets: Vec<u64>,
    /// Sum of all latencies, seconds.
    pub sum_secs: f64,
}

impl LatencyHistogram {
    /// The counts and sum now; buckets are read one by one, so concurrent records may be
    /// partly included.
    pub fn snapshot(&self) -> LatencySnapshot {
        LatencySnapshot {
            buckets: self
                .buckets
                .iter()
                .map(|b| b.load(Ordering::Relaxed))
                .collect(),
            sum_secs: self.sum_ns.load(Ordering::Relaxed) as f64 * 1e-9,
        }
    }
}

impl LatencySnapshot {
    /// Number of commands counted (sum of all buckets).
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// The latency (seconds, the upper bound of its bucket) below which a fraction `q` of the
    /// commands completed; `None` without commands.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let want = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, c) in self.buckets.iter().enumerate() {
            seen += c;
            if seen >= want {
                return Some(upper_bound_secs(i));
            }
        }
        Some(upper_bound_secs(BUCKETS - 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_log_linear_and_bounded() {
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(999), 0);
        assert_eq!(bucket(1_000), 1);
        assert_eq!(bucket(1_249), 1);
        assert_eq!(bucket(1_250), 2);
        assert_eq!(bucket(1_999), 4);
        assert_eq!(bucket(2_000), 5);
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
        // Every value lies below its bucket's upper bound and at or above the previous one.
        for ns in (0..20_000_000u64)
            .step_by(997)
            .chain([1 << 40, 17_000_000_000])
        {
            let b = bucket(ns);
            let s = ns as f64 * 1e-9;
            assert!(s < upper_bound_secs(b) * (1.0 + 1e-12), "{ns} in {b}");
            if b > 0 {
                assert!(s >= upper_bound_secs(b - 1) * (1.0 - 1e-12), "{ns} in {b}");
            }
        }
        // Bounds increase, each at most 25 % above the previous one past 1 µs.
        for i in 1..BUCKETS - 1 {
            let (a, b) = (upper_bound_secs(i - 1), upper_bound_secs(i));
            assert!(b > a && b <= a * 1.25 + 1e-15, "{i}: {a} {b}");
        }
    }

    #[test]
    fn batches_publish_into_the_histogram_and_quantiles_follow() {
        let h = LatencyHistogram::default();
        let mut b = LatencyBatch::default();
        for i in 0..1000u64 {
            b.record(10_000 + i); // ~10 µs
        }
        b.record(5_000_000); // one 5 ms outlier
        b.publish(&h);
        b.publish(&h); // nothing twice
        let s = h.snapshot();
        assert_eq!(s.count(), 1001);
        let p50 = s.quantile(0.5).unwrap();
        assert!((10e-6..=12.5e-6).contains(&p50), "{p50}");
        let p999 = s.quantile(0.999).unwrap();
        assert!(p999 < 20e-6, "{p999}");
        let max = s.quantile(1.0).unwrap();
        assert!((5e-3..=6.25e-3).contains(&max), "{max}");
        assert!((s.sum_secs - (1000.0 * 10.5e-6 + 5e-3)).abs() < 1e-6);
        assert_eq!(LatencyHistogram::default().snapshot().quantile(0.5), None);
    }
}
