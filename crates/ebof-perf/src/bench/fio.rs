//! The fio engine: a step as a fio command line against a block device (the Linux initiator's
//! `/dev/nvmeXnY`, or any file), and fio's `--output-format=json+` parsed into an [`Outcome`]
//! (totals from `read`/`write`, latency percentiles and the histogram from fio's own `lat_ns`
//! percentiles and bins, i.e. submission to completion, as the built-in engine measures).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use serde::Deserialize;

use super::plan::{Rw, Step};
use super::report::{Bucket, Latency, Outcome, round3, trim_buckets};

/// Percentiles fio is asked for (`--percentile_list`).
const PERCENTILES: &str = "50:90:99:99.9:99.99";

/// The fio command line for `st` on `device` over the byte range `range`, at `rate` commands
/// per second in all (open loop) if given. `direct` selects O_DIRECT and libaio (devices);
/// without it psync is used (plain files in tests, where O_DIRECT may be refused).
pub fn args(
    st: &Step,
    device: &Path,
    range: (u64, u64),
    rate: Option<f64>,
    direct: bool,
) -> Vec<String> {
    let jobs = u64::from(st.queues.max(1));
    let len = range.1 - range.0;
    let mut a = vec![
        format!("--name={}", st.id),
        format!("--filename={}", device.display()),
        format!("--rw={}", st.rw.name()),
        format!("--bs={}", st.bs),
        format!("--iodepth={}", st.qd),
        format!("--numjobs={jobs}"),
        "--group_reporting".into(),
        "--thread".into(),
        "--norandommap".into(),
        "--randrepeat=0".into(),
        "--lat_percentiles=1".into(),
        format!("--percentile_list={PERCENTILES}"),
        "--output-format=json+".into(),
        format!("--runtime={}ms", st.runtime.as_millis().max(1)),
    ];
    if direct {
        a.push("--ioengine=libaio".into());
        a.push("--direct=1".into());
    } else {
        a.push("--ioengine=psync".into());
    }
    if !st.ramp.is_zero() {
        a.push(format!("--ramp_time={}ms", st.ramp.as_millis()));
    }
    // Sequential jobs get their own slice (as the built-in engine's queues do); random jobs
    // roam the whole range.
    let sequential = matches!(st.rw, Rw::Read | Rw::Write);
    let bs = st.bs.max(1);
    if sequential && jobs > 1 {
        let slice = (len / jobs / bs).max(1) * bs;
        a.push(format!("--offset={}", range.0));
        a.push(format!("--size={slice}"));
        a.push(format!("--offset_increment={slice}"));
    } else {
        a.push(format!("--offset={}", range.0));
        a.push(format!("--size={}", (len / bs).max(1) * bs));
    }
    match st.passes {
        Some(p) => a.push(format!("--loops={}", p.ceil().max(1.0) as u64)),
        None => a.push("--time_based".into()),
    }
    if let Some(r) = rate {
        let per_job = (r / jobs as f64).round().max(1.0) as u64;
        a.push(format!("--rate_iops={per_job}"));
        a.push("--rate_process=linear".into());
    }
    a
}

/// Run fio with `args`; its JSON output parsed.
pub fn run(args: &[String], rate: Option<f64>) -> Result<Outcome, String> {
    let out = Command::new("fio")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run fio: {e} (install it, e.g. apt-get install fio)"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "fio failed ({}): {}",
            out.status,
            stderr.trim().lines().last().unwrap_or("")
        ));
    }
    let mut o = parse(&stdout)?;
    o.rate_iops = rate;
    Ok(o)
}

#[derive(Deserialize)]
struct FioOutput {
    jobs: Vec<FioJob>,
}

#[derive(Deserialize)]
struct FioJob {
    #[serde(default)]
    error: i64,
    read: FioDir,
    write: FioDir,
}

#[derive(Deserialize)]
struct FioDir {
    io_bytes: u64,
    total_ios: u64,
    /// Milliseconds.
    runtime: u64,
    lat_ns: FioLat,
}

#[derive(Deserialize, Default)]
struct FioLat {
    #[serde(default)]
    min: u64,
    #[serde(default)]
    max: u64,
    #[serde(default)]
    mean: f64,
    #[serde(rename = "N", default)]
    n: u64,
    #[serde(default)]
    percentile: BTreeMap<String, u64>,
    /// json+: latency (ns, bucket value) → count.
    #[serde(default)]
    bins: BTreeMap<String, u64>,
}

/// fio's percentile map (`"99.990000": ns`) at `q` percent, in µs.
pub fn percentile(map: &BTreeMap<String, u64>, q: f64) -> Option<f64> {
    map.iter()
        .find(|(k, _)| k.parse::<f64>().is_ok_and(|p| (p - q).abs() < 1e-6))
        .map(|(_, v)| *v as f64 / 1000.0)
}

/// fio's json+ bins folded into the report's log2 buckets (1 µs, 2 µs, 4 µs, …).
fn bins_to_buckets(bins: &[(u64, u64)]) -> Vec<Bucket> {
    let mut counts: BTreeMap<u32, u64> = BTreeMap::new();
    for &(ns, c) in bins {
        // Bucket k holds (2^(k-1), 2^k] µs; bucket 0 everything up to 1 µs.
        let us = ns.div_ceil(1000).max(1);
        let k = 64 - (us - 1).leading_zeros();
        *counts.entry(k).or_insert(0) += c;
    }
    let (Some(&lo), Some(&hi)) = (counts.keys().next(), counts.keys().last()) else {
        return Vec::new();
    };
    trim_buckets(
        (lo..=hi)
            .map(|k| Bucket {
                le_us: (1u64 << k) as f64,
                count: counts.get(&k).copied().unwrap_or(0),
            })
            .collect(),
    )
}

/// Parse fio's `--output-format=json` or `json+` (group_reporting: the first job is the group).
/// Text before the JSON (fio prints notes there) is skipped.
pub fn parse(text: &str) -> Result<Outcome, String> {
    let start = text.find('{').ok_or("fio printed no JSON")?;
    let out: FioOutput =
        serde_json::from_str(&text[start..]).map_err(|e| format!("fio JSON: {e}"))?;
    let job = out.jobs.first().ok_or("fio JSON has no job")?;
    if job.error != 0 {
        return Err(format!("fio job error {}", job.error));
    }
    let (r, w) = (&job.read, &job.write);
    let ms = r.runtime.max(w.runtime);
    // Latency over both directions: fio reports them apart; the weighted merge of means and
    // the histogram union are exact, percentiles come from the direction that did the I/O
    // (or, for mixes, from the merged bins).
    let n = r.lat_ns.n + w.lat_ns.n;
    let mut bins: Vec<(u64, u64)> = Vec::new();
    for d in [r, w] {
        for (k, c) in &d.lat_ns.bins {
            if let Ok(ns) = k.parse::<u64>() {
                bins.push((ns, *c));
            }
        }
    }
    bins.sort_unstable();
    let latency = if n == 0 {
        None
    } else {
        let only = match (r.lat_ns.n, w.lat_ns.n) {
            (_, 0) => Some(&r.lat_ns),
            (0, _) => Some(&w.lat_ns),
            _ => None,
        };
        let pct = |q: f64| match only {
            Some(l) => percentile(&l.percentile, q),
            None => bins_quantile(&bins, q / 100.0),
        };
        let mins = [r, w]
            .iter()
            .filter(|d| d.lat_ns.n > 0)
            .map(|d| d.lat_ns.min)
            .min()
            .unwrap_or(0);
        Some(Latency {
            min: round3(mins as f64 / 1000.0),
            avg: round3(
                (r.lat_ns.mean * r.lat_ns.n as f64 + w.lat_ns.mean * w.lat_ns.n as f64)
                    / n as f64
                    / 1000.0,
            ),
            p50: pct(50.0).unwrap_or(0.0),
            p90: pct(90.0).unwrap_or(0.0),
            p99: pct(99.0).unwrap_or(0.0),
            p99_9: pct(99.9).unwrap_or(0.0),
            p99_99: pct(99.99).unwrap_or(0.0),
            max: round3(r.lat_ns.max.max(w.lat_ns.max) as f64 / 1000.0),
        })
    };
    Ok(Outcome {
        elapsed_s: ms as f64 / 1000.0,
        ios: r.total_ios + w.total_ios,
        bytes: r.io_bytes + w.io_bytes,
        read_ios: r.total_ios,
        write_ios: w.total_ios,
        latency_us: latency,
        histogram: bins_to_buckets(&bins),
        ..Default::default()
    }
    .with_rates())
}

/// Quantile `q` (0..1) of sorted (ns, count) bins, in µs.
fn bins_quantile(bins: &[(u64, u64)], q: f64) -> Option<f64> {
    let total: u64 = bins.iter().map(|b| b.1).sum();
    if total == 0 {
        return None;
    }
    let want = ((q * total as f64).ceil() as u64).clamp(1, total);
    let mut acc = 0;
    for &(ns, c) in bins {
        acc += c;
        if acc >= want {
            return Some(round3(ns as f64 / 1000.0));
        }
    }
    bins.last().map(|b| round3(b.0 as f64 / 1000.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::plan::{self, PlanName};

    /// Recorded on the development VM: `fio --rw=randrw --rwmixread=70 --bs=4k --numjobs=2
    /// --group_reporting --time_based --runtime=1 --lat_percentiles=1
    /// --percentile_list=50:90:99:99.9:99.99 --output-format=json+` on a 64 MiB file (fio 3.33).
    const SAMPLE: &str = include_str!("testdata/fio-randrw-json+.json");

    #[test]
    fn parses_recorded_fio_json_plus() {
        let o = parse(SAMPLE).unwrap();
        let v: serde_json::Value = serde_json::from_str(SAMPLE).unwrap();
        let j = &v["jobs"][0];
        let r_ios = j["read"]["total_ios"].as_u64().unwrap();
        let w_ios = j["write"]["total_ios"].as_u64().unwrap();
        assert!(r_ios > 0 && w_ios > 0);
        assert_eq!(
            (o.read_ios, o.write_ios, o.ios),
            (r_ios, w_ios, r_ios + w_ios)
        );
        assert_eq!(
            o.bytes,
            j["read"]["io_bytes"].as_u64().unwrap() + j["write"]["io_bytes"].as_u64().unwrap()
        );
        assert!(o.iops > 0.0 && o.elapsed_s > 0.0);
        let l = o.latency_us.clone().unwrap();
        assert!(
            l.min <= l.p50 && l.p50 <= l.p99 && l.p99 <= l.p99_99 && l.p99_99 <= l.max,
            "{l:?}"
        );
        // The histogram holds every completion of both directions.
        let binned: u64 = o.histogram.iter().map(|b| b.count).sum();
        let n = j["read"]["lat_ns"]["N"].as_u64().unwrap()
            + j["write"]["lat_ns"]["N"].as_u64().unwrap();
        assert_eq!(binned, n);
    }

    #[test]
    fn percentiles_from_fio_map_and_bins() {
        let mut m = BTreeMap::new();
        m.insert("50.000000".to_string(), 2024);
        m.insert("99.990000".to_string(), 112_128);
        assert_eq!(percentile(&m, 50.0), Some(2.024));
        assert_eq!(percentile(&m, 99.99), Some(112.128));
        assert_eq!(percentile(&m, 99.0), None);
        let bins = [(1000, 50), (2000, 49), (9000, 1)];
        assert_eq!(bins_quantile(&bins, 0.5), Some(1.0));
        assert_eq!(bins_quantile(&bins, 0.99), Some(2.0));
        assert_eq!(bins_quantile(&bins, 0.9999), Some(9.0));
        let b = bins_to_buckets(&bins);
        assert_eq!(
            b.iter().map(|b| (b.le_us, b.count)).collect::<Vec<_>>(),
            [(1.0, 50), (2.0, 49), (4.0, 0), (8.0, 0), (16.0, 1)]
        );
    }

    #[test]
    fn bad_output_is_an_error_not_a_panic() {
        assert!(parse("").is_err());
        assert!(parse("fio: oops").is_err());
        assert!(parse("{\"jobs\": []}").is_err());
        assert!(parse("{\"jobs\": [{\"read\": 1}]}").is_err());
    }

    #[test]
    fn command_lines_follow_the_plan() {
        let v = plan::steps(PlanName::Odcc, 1.0, 1);
        let dev = Path::new("/dev/nvme0n1");
        let a = args(&v[0], dev, (0, 1 << 30), None, true).join(" ");
        for want in [
            "--rw=write",
            "--bs=131072",
            "--iodepth=8",
            "--numjobs=1",
            "--loops=2",
            "--direct=1",
            "--ioengine=libaio",
        ] {
            assert!(a.contains(want), "{want} in {a}");
        }
        assert!(!a.contains("--time_based"));
        let a = args(&v[3], dev, (0, 1 << 30), None, true).join(" ");
        assert!(
            a.contains("--numjobs=8") && a.contains("--iodepth=256") && a.contains("--loops=2"),
            "{a}"
        );
        let a = args(&v[1], dev, (0, 1 << 30), None, true).join(" ");
        assert!(a.contains("--ramp_time=5000ms"), "{a}");
        let a = args(&v[5], dev, (0, 1 << 30), Some(8000.0), false).join(" ");
        assert!(
            a.contains("--time_based")
                && a.contains("--rate_iops=8000")
                && a.contains("--ioengine=psync"),
            "{a}"
        );
        // Sequential with several jobs: one slice each.
        let st = plan::steps(PlanName::Es2000, 1.0, 1)
            .into_iter()
            .find(|s| s.id == "aggregate-seq-read-x4")
            .unwrap();
        let a = args(&st, dev, (0, 1 << 30), None, true).join(" ");
        assert!(
            a.contains("--size=268435456") && a.contains("--offset_increment=268435456"),
            "{a}"
        );
    }
}
