//! perf results: per-direction counters and latency histograms, merged over jobs, printed as text
//! or one JSON object.

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde_json::{Value, json};

use super::verify::Mismatch;

/// Latencies are recorded in ns between 1 ns and this bound (larger values saturate).
const HIST_MAX_NS: u64 = 60_000_000_000;
/// Mismatches kept for the report (all are counted).
pub const MAX_REPORTED_MISMATCHES: usize = 100;

/// I/Os, bytes and latency of one direction.
#[derive(Clone, Debug)]
pub struct DirStats {
    /// Commands completed.
    pub ios: u64,
    /// Bytes transferred.
    pub bytes: u64,
    /// Latency in ns.
    pub hist: Histogram<u64>,
}

impl DirStats {
    /// Empty counters.
    pub fn new() -> DirStats {
        DirStats {
            ios: 0,
            bytes: 0,
            hist: Histogram::new_with_bounds(1, HIST_MAX_NS, 3).expect("valid histogram bounds"),
        }
    }
    #[inline]
    /// Count one command of `bytes` that took `ns` nanoseconds.
    pub fn record(&mut self, bytes: u64, ns: u64) {
        self.ios += 1;
        self.bytes += bytes;
        self.hist.saturating_record(ns.max(1));
    }
    /// Add `o` to these.
    pub fn merge(&mut self, o: &DirStats) {
        self.ios += o.ios;
        self.bytes += o.bytes;
        // Same bounds on both sides: cannot fail.
        let _ = self.hist.add(&o.hist);
    }
}

impl Default for DirStats {
    fn default() -> DirStats {
        DirStats::new()
    }
}

/// What `--verify` found.
#[derive(Clone, Debug, Default)]
pub struct VerifyStats {
    /// Blocks read and checked.
    pub checked_blocks: u64,
    /// Blocks that did not hold what they should (all of them counted).
    pub mismatch_count: u64,
    /// The first [`MAX_REPORTED_MISMATCHES`].
    pub mismatches: Vec<Mismatch>,
}

/// One job's outcome.
#[derive(Clone, Debug)]
pub struct JobResult {
    /// The I/O queue.
    pub qid: u16,
    /// Reads in the measured window.
    pub read: DirStats,
    /// Writes in the measured window.
    pub write: DirStats,
    /// Commands completed with an error status, by status.
    pub status_errors: BTreeMap<String, u64>,
    /// The connection failure that ended the job early, if any.
    pub transport_error: Option<String>,
    /// Commands in flight when the connection failed.
    pub lost: u64,
    /// What verify found.
    pub verify: VerifyStats,
    /// Completed Flush commands (`ios`) and their latency; `bytes` stays 0.
    pub flush: DirStats,
}

impl JobResult {
    /// Nothing counted yet, for queue `qid`.
    pub fn new(qid: u16) -> JobResult {
        JobResult {
            qid,
            read: DirStats::new(),
            write: DirStats::new(),
            status_errors: BTreeMap::new(),
            transport_error: None,
            lost: 0,
            verify: VerifyStats::default(),
            flush: DirStats::new(),
        }
    }
}

/// The workload as run (echoed in the report).
#[derive(Clone, Debug, serde::Serialize)]
pub struct Workload {
    /// `ADDR:PORT`.
    pub target: String,
    /// Subsystem NQN.
    pub subnqn: String,
    /// Namespace.
    pub nsid: u32,
    /// Block size in bytes.
    pub lba_size: usize,
    /// fio's name of the workload.
    pub rw: &'static str,
    /// Percentage of reads.
    pub read_pct: u8,
    /// Bytes per I/O.
    pub bs: usize,
    /// Commands in flight per queue.
    pub qd: usize,
    /// I/O queues.
    pub queues: usize,
    /// Cores the workers were pinned to.
    pub cores: Option<Vec<usize>>,
    /// Worker threads.
    pub threads: usize,
    /// Measured seconds asked for.
    pub runtime_s: f64,
    /// Ramp seconds.
    pub ramp_s: f64,
    /// Byte range [start, end).
    pub range: (u64, u64),
    /// `--verify`.
    pub verify: bool,
    /// Header digest asked for.
    pub hdr_digest: bool,
    /// Data digest asked for.
    pub data_digest: bool,
    /// `--flush-every` (0: off).
    pub flush_every: u64,
    /// `--flush-at-end`.
    pub flush_at_end: bool,
    /// Writes with FUA.
    pub fua: bool,
    /// `--verify-log`.
    pub verify_log: Option<String>,
}

/// CPU time of the whole process over the measured window.
#[derive(Clone, Copy, Debug, Default)]
pub struct Cpu {
    /// User time.
    pub user: Duration,
    /// System time.
    pub sys: Duration,
}

impl Cpu {
    /// getrusage(RUSAGE_SELF): user and system time of every thread of the process.
    pub fn now() -> Cpu {
        // SAFETY: rusage is plain data, zeroed is valid; getrusage writes into the struct we own.
        let ru = unsafe {
            let mut ru: libc::rusage = std::mem::zeroed();
            libc::getrusage(libc::RUSAGE_SELF, &mut ru);
            ru
        };
        let tv = |t: libc::timeval| {
            Duration::new(
                t.tv_sec.max(0) as u64,
                (t.tv_usec.max(0) as u32).saturating_mul(1000),
            )
        };
        Cpu {
            user: tv(ru.ru_utime),
            sys: tv(ru.ru_stime),
        }
    }
    /// CPU time since `earlier`.
    pub fn since(self, earlier: Cpu) -> Cpu {
        Cpu {
            user: self.user.saturating_sub(earlier.user),
            sys: self.sys.saturating_sub(earlier.sys),
        }
    }
}

/// The merged result of a perf run.
pub struct Report {
    /// The workload as run.
    pub workload: Workload,
    /// Length of the measured window.
    pub window: Duration,
    /// Reads, merged over the queues.
    pub read: DirStats,
    /// Writes, merged over the queues.
    pub write: DirStats,
    /// CPU time of the whole process over the window.
    pub cpu: Cpu,
    /// Commands completed with an error status, by status.
    pub status_errors: BTreeMap<String, u64>,
    /// Connection failures, `queue N: error`.
    pub transport_errors: Vec<String>,
    /// Commands in flight when their connection failed.
    pub lost: u64,
    /// What verify found.
    pub verify: VerifyStats,
    /// Every completed Flush (not only those in the measured window).
    pub flush: DirStats,
}

/// Latency summary of a histogram, in µs.
pub(crate) struct Lat {
    pub min: f64,
    pub avg: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub p9999: f64,
    pub max: f64,
}

pub(crate) fn lat(h: &Histogram<u64>) -> Option<Lat> {
    if h.is_empty() {
        return None;
    }
    let us = |ns: u64| ns as f64 / 1000.0;
    Some(Lat {
        min: us(h.min()),
        avg: h.mean() / 1000.0,
        p50: us(h.value_at_quantile(0.50)),
        p90: us(h.value_at_quantile(0.90)),
        p99: us(h.value_at_quantile(0.99)),
        p999: us(h.value_at_quantile(0.999)),
        p9999: us(h.value_at_quantile(0.9999)),
        max: us(h.max()),
    })
}

fn round(v: f64, digits: i32) -> f64 {
    let m = 10f64.powi(digits);
    (v * m).round() / m
}

/// `123.4k` style.
fn si(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

impl Report {
    /// Merge the jobs' results over the measured `window`.
    pub fn new(workload: Workload, window: Duration, jobs: &[JobResult], cpu: Cpu) -> Report {
        let mut r = Report {
            workload,
            window,
            read: DirStats::new(),
            write: DirStats::new(),
            cpu,
            status_errors: BTreeMap::new(),
            transport_errors: Vec::new(),
            lost: 0,
            verify: VerifyStats::default(),
            flush: DirStats::new(),
        };
        for j in jobs {
            r.read.merge(&j.read);
            r.write.merge(&j.write);
            r.flush.merge(&j.flush);
            for (k, v) in &j.status_errors {
                *r.status_errors.entry(k.clone()).or_insert(0) += v;
            }
            if let Some(e) = &j.transport_error {
                r.transport_errors.push(format!("queue {}: {e}", j.qid));
            }
            r.lost += j.lost;
            r.verify.checked_blocks += j.verify.checked_blocks;
            r.verify.mismatch_count += j.verify.mismatch_count;
            let room = MAX_REPORTED_MISMATCHES.saturating_sub(r.verify.mismatches.len());
            r.verify
                .mismatches
                .extend(j.verify.mismatches.iter().take(room).cloned());
        }
        r
    }

    fn total(&self) -> DirStats {
        let mut t = self.read.clone();
        t.merge(&self.write);
        t
    }

    /// Commands that failed (error status or lost with the connection) and bad blocks.
    pub fn failures(&self) -> (u64, u64) {
        (
            self.status_errors.values().sum::<u64>()
                + self.lost
                + self.transport_errors.len() as u64,
            self.verify.mismatch_count,
        )
    }

    /// `Ok` unless the run had failed commands or bad blocks; the error says how many (and,
    /// after a `verify_log` run, that the log is complete and how to check it).
    pub fn verdict(&self) -> anyhow::Result<()> {
        let (errors, bad) = self.failures();
        // After a failed run (e.g. the target died) the log is still complete: say where it is.
        let log_hint = self
            .workload
            .verify_log
            .as_ref()
            .map(|p| {
                format!(
                    "; the verify log is complete, check it with --verify-only --verify-log {p}"
                )
            })
            .unwrap_or_default();
        if bad > 0 {
            anyhow::bail!(
                "verify found {bad} bad blocks (first at LBA {}){log_hint}",
                self.verify.mismatches.first().map_or(0, |m| m.lba)
            );
        }
        if errors > 0 {
            let lost = if self.transport_errors.is_empty() {
                ""
            } else {
                " (connection lost)"
            };
            anyhow::bail!("{errors} I/O errors{lost}{log_hint}");
        }
        Ok(())
    }

    fn secs(&self) -> f64 {
        self.window.as_secs_f64().max(1e-9)
    }

    fn dir_json(&self, d: &DirStats) -> Value {
        let s = self.secs();
        let l = lat(&d.hist).map(|l| {
            json!({
                "min": round(l.min, 3), "avg": round(l.avg, 3), "p50": round(l.p50, 3),
                "p90": round(l.p90, 3), "p99": round(l.p99, 3), "p99_9": round(l.p999, 3),
                "p99_99": round(l.p9999, 3), "max": round(l.max, 3),
            })
        });
        json!({
            "ios": d.ios,
            "bytes": d.bytes,
            "iops": round(d.ios as f64 / s, 1),
            "mib_s": round(d.bytes as f64 / s / (1 << 20) as f64, 2),
            "mb_s": round(d.bytes as f64 / s / 1e6, 2),
            "latency_us": l,
        })
    }

    /// The report as one JSON object (`ebof perf --json`).
    pub fn to_json(&self) -> Value {
        let total = self.total();
        let cpu_s = (self.cpu.user + self.cpu.sys).as_secs_f64();
        let per_io = (total.ios > 0).then(|| round(cpu_s * 1e6 / total.ios as f64, 3));
        let (errors, bad) = self.failures();
        let mut v = self.dir_json(&total);
        let o = v.as_object_mut().expect("object");
        o.insert("workload".into(), json!(self.workload));
        o.insert("elapsed_s".into(), json!(round(self.secs(), 3)));
        o.insert("read".into(), self.dir_json(&self.read));
        o.insert("write".into(), self.dir_json(&self.write));
        o.insert(
            "cpu".into(),
            json!({
                "user_s": round(self.cpu.user.as_secs_f64(), 3),
                "sys_s": round(self.cpu.sys.as_secs_f64(), 3),
                "total_s": round(cpu_s, 3),
                "us_per_io": per_io,
            }),
        );
        o.insert(
            "errors".into(),
            json!({
                "total": errors,
                "status": self.status_errors,
                "transport": self.transport_errors,
                "lost": self.lost,
            }),
        );
        o.insert(
            "flush".into(),
            json!({
                "count": self.flush.ios,
                "latency_us": lat(&self.flush.hist).map(|l| json!({
                    "min": round(l.min, 3), "avg": round(l.avg, 3), "p50": round(l.p50, 3),
                    "p99": round(l.p99, 3), "max": round(l.max, 3),
                })),
            }),
        );
        o.insert(
            "verify".into(),
            json!({
                "enabled": self.workload.verify,
                "checked_blocks": self.verify.checked_blocks,
                "mismatch_count": bad,
                "mismatches": self.verify.mismatches,
                "log": self.workload.verify_log,
            }),
        );
        v
    }

    fn dir_text(&self, name: &str, d: &DirStats, out: &mut String) {
        if d.ios == 0 {
            return;
        }
        let s = self.secs();
        let bps = d.bytes as f64 / s;
        *out += &format!(
            "  {name:<5}: IOPS={}, BW={:.1}MiB/s ({:.1}MB/s), ios={}\n",
            si(d.ios as f64 / s),
            bps / (1 << 20) as f64,
            bps / 1e6,
            d.ios
        );
        if let Some(l) = lat(&d.hist) {
            *out += &format!(
                "         lat (us): min={:.1}, avg={:.1}, p50={:.1}, p90={:.1}, p99={:.1}, p99.9={:.1}, p99.99={:.1}, max={:.1}\n",
                l.min, l.avg, l.p50, l.p90, l.p99, l.p999, l.p9999, l.max
            );
        }
    }

    /// The report as text (`ebof perf`).
    pub fn to_text(&self) -> String {
        let w = &self.workload;
        let mut s = format!(
            "ebof perf: {} bs={} qd={} queues={} threads={} runtime={}s ramp={}s\n  target {} {} nsid {} ({} B blocks), range {}-{}{}{}{}\n",
            w.rw,
            w.bs,
            w.qd,
            w.queues,
            w.threads,
            w.runtime_s,
            w.ramp_s,
            w.target,
            w.subnqn,
            w.nsid,
            w.lba_size,
            w.range.0,
            w.range.1,
            if w.rw == "randrw" {
                format!(", {}% reads", w.read_pct)
            } else {
                String::new()
            },
            if w.verify { ", verify" } else { "" },
            if w.fua { ", FUA writes" } else { "" },
        );
        self.dir_text("read", &self.read, &mut s);
        self.dir_text("write", &self.write, &mut s);
        let total = self.total();
        if self.read.ios > 0 && self.write.ios > 0 {
            self.dir_text("total", &total, &mut s);
        }
        let cpu_s = (self.cpu.user + self.cpu.sys).as_secs_f64();
        if total.ios > 0 {
            s += &format!(
                "  cpu  : {:.2}s (user {:.2}s, sys {:.2}s) = {:.2} us/IO\n",
                cpu_s,
                self.cpu.user.as_secs_f64(),
                self.cpu.sys.as_secs_f64(),
                cpu_s * 1e6 / total.ios as f64
            );
        }
        if self.flush.ios > 0 || w.flush_every > 0 || w.flush_at_end {
            s += &format!("  flush: {}", self.flush.ios);
            if let Some(l) = lat(&self.flush.hist) {
                s += &format!(
                    ", lat (us): min={:.1}, avg={:.1}, p50={:.1}, p99={:.1}, max={:.1}",
                    l.min, l.avg, l.p50, l.p99, l.max
                );
            }
            s += "\n";
        }
        let (errors, bad) = self.failures();
        s += &format!("  errors: {errors}");
        for (k, v) in &self.status_errors {
            s += &format!(", {v} × {k}");
        }
        if self.lost > 0 {
            s += &format!(", {} lost in flight", self.lost);
        }
        s += "\n";
        for e in &self.transport_errors {
            s += &format!("  connection failed: {e}\n");
        }
        if w.verify {
            s += &format!(
                "  verify: {} blocks checked, {bad} mismatches\n",
                self.verify.checked_blocks
            );
            for m in &self.verify.mismatches {
                s += &format!(
                    "    MISMATCH lba {}: {} (expected generation {}, found generation {}, found lba {})\n",
                    m.lba,
                    m.reason,
                    m.expected_gen,
                    m.found_gen.map_or("-".into(), |g| g.to_string()),
                    m.found_lba.map_or("-".into(), |l| l.to_string()),
                );
            }
            if bad > self.verify.mismatches.len() as u64 {
                s += &format!(
                    "    ... {} more\n",
                    bad - self.verify.mismatches.len() as u64
                );
            }
            if let Some(p) = &w.verify_log {
                s += &format!("  verify log: {p} (check later with --verify-only)\n");
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workload() -> Workload {
        Workload {
            target: "127.0.0.1:4420".into(),
            subnqn: "nqn.x".into(),
            nsid: 1,
            lba_size: 512,
            rw: "randrw",
            read_pct: 70,
            bs: 4096,
            qd: 32,
            queues: 2,
            cores: None,
            threads: 2,
            runtime_s: 1.0,
            ramp_s: 0.0,
            range: (0, 1 << 20),
            verify: true,
            hdr_digest: false,
            data_digest: false,
            flush_every: 8,
            flush_at_end: false,
            fua: false,
            verify_log: None,
        }
    }

    #[test]
    fn merge_and_render() {
        let mut a = JobResult::new(1);
        let mut b = JobResult::new(2);
        for i in 1..=1000 {
            a.read.record(4096, i * 1000);
        }
        b.write.record(4096, 50_000);
        b.flush.record(0, 120_000);
        a.flush.record(0, 80_000);
        b.status_errors.insert("LBA Out of Range".into(), 2);
        b.verify.mismatch_count = 1;
        b.verify.mismatches.push(Mismatch {
            lba: 9,
            expected_gen: 2,
            found_gen: Some(1),
            found_lba: Some(9),
            reason: "stale",
        });
        let r = Report::new(
            workload(),
            Duration::from_secs(2),
            &[a, b],
            Cpu {
                user: Duration::from_millis(500),
                sys: Duration::ZERO,
            },
        );
        let j = r.to_json();
        assert_eq!(j["ios"], 1001);
        assert_eq!(j["read"]["iops"], 500.0);
        assert_eq!(j["errors"]["total"], 2);
        assert_eq!(j["verify"]["mismatch_count"], 1);
        assert_eq!(j["verify"]["mismatches"][0]["lba"], 9);
        let p50 = j["read"]["latency_us"]["p50"].as_f64().unwrap();
        assert!((499.0..=501.0).contains(&p50), "{p50}");
        assert!(j["cpu"]["us_per_io"].as_f64().unwrap() > 499.0);
        assert_eq!(r.failures(), (2, 1));
        let t = r.to_text();
        assert!(t.contains("read : IOPS=500, BW="));
        assert!(t.contains("MISMATCH lba 9: stale"));
        assert!(t.contains("2 × LBA Out of Range"));
        assert_eq!(j["flush"]["count"], 2);
        let avg = j["flush"]["latency_us"]["avg"].as_f64().unwrap();
        assert!((99.9..=100.1).contains(&avg), "{avg}");
        assert!(t.contains("  flush: 2, lat (us): min=80.0"), "{t}");
        // Flushes are neither I/Os nor bytes.
        assert_eq!(j["ios"], 1001);
    }
}
