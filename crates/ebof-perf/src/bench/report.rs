//! The bench report: one versioned, serde-typed structure (`report.json`), its Markdown
//! rendering (`report.md`), and `compare` of two reports. No I/O here but what the caller passes.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use super::plan::{Metric, PlanName, Role, Step};
use crate::perf::report::lat;

/// `report.json`'s `schema` field.
pub const SCHEMA: &str = "ebof-bench-report";
/// Bumped on any change that removes or changes the meaning of a field (adding fields does not).
pub const SCHEMA_VERSION: u32 = 1;

/// Latency summary in microseconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    /// Smallest.
    pub min: f64,
    /// Mean.
    pub avg: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p99_9: f64,
    /// 99.99th percentile.
    pub p99_99: f64,
    /// Largest.
    pub max: f64,
}

impl Latency {
    /// From an HDR histogram of nanoseconds (`None` if empty).
    pub fn from_hist(h: &Histogram<u64>) -> Option<Latency> {
        // The same percentiles `ebof perf` prints.
        lat(h).map(|l| Latency {
            min: round3(l.min),
            avg: round3(l.avg),
            p50: round3(l.p50),
            p90: round3(l.p90),
            p99: round3(l.p99),
            p99_9: round3(l.p999),
            p99_99: round3(l.p9999),
            max: round3(l.max),
        })
    }
}

/// One histogram bucket: latencies up to `le_us` (and above the previous bucket's bound).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Bucket {
    /// Upper bound of the bucket, µs.
    pub le_us: f64,
    /// Commands in the bucket.
    pub count: u64,
}

/// Log2 buckets (1 µs, 2 µs, 4 µs, …) of an HDR histogram of nanoseconds; empty buckets at
/// either end are left out.
pub fn buckets_from_hist(h: &Histogram<u64>) -> Vec<Bucket> {
    if h.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for v in h.iter_log(1000, 2.0) {
        out.push(Bucket {
            le_us: round3(v.value_iterated_to() as f64 / 1000.0),
            count: v.count_since_last_iteration(),
        });
    }
    trim_buckets(out)
}

/// Drop empty buckets at either end.
pub fn trim_buckets(mut v: Vec<Bucket>) -> Vec<Bucket> {
    while v.last().is_some_and(|b| b.count == 0) {
        v.pop();
    }
    let first = v.iter().position(|b| b.count > 0).unwrap_or(v.len());
    v.drain(..first);
    v
}

/// Cumulative distribution of `buckets`: (le_us, fraction ≤ it).
pub fn cdf(buckets: &[Bucket]) -> Vec<(f64, f64)> {
    let total: u64 = buckets.iter().map(|b| b.count).sum();
    if total == 0 {
        return Vec::new();
    }
    let mut acc = 0u64;
    buckets
        .iter()
        .map(|b| {
            acc += b.count;
            (b.le_us, acc as f64 / total as f64)
        })
        .collect()
}

/// What a step measured.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// The measured window.
    pub elapsed_s: f64,
    /// Commands completed in the window.
    pub ios: u64,
    /// Bytes transferred in the window.
    pub bytes: u64,
    /// Reads among `ios`.
    pub read_ios: u64,
    /// Writes among `ios`.
    pub write_ios: u64,
    /// Commands per second.
    pub iops: f64,
    /// 10^6 bytes per second.
    pub mb_s: f64,
    /// 2^20 bytes per second.
    pub mib_s: f64,
    /// Latency percentiles (`None`: nothing completed).
    pub latency_us: Option<Latency>,
    /// Log2 latency histogram.
    pub histogram: Vec<Bucket>,
    /// Failed commands (error status, lost with a connection).
    pub errors: u64,
    /// Open-loop steps: the rate asked for (commands per second).
    pub rate_iops: Option<f64>,
}

impl Outcome {
    /// Derive the rates from the totals.
    pub fn with_rates(mut self) -> Outcome {
        let s = self.elapsed_s.max(1e-9);
        self.iops = round3(self.ios as f64 / s);
        self.mb_s = round3(self.bytes as f64 / s / 1e6);
        self.mib_s = round3(self.bytes as f64 / s / f64::from(1u32 << 20));
        self
    }

    /// The figure `m` of this outcome.
    pub fn value(&self, m: Metric) -> Option<f64> {
        match m {
            Metric::Iops => Some(self.iops),
            Metric::MbPerS => Some(self.mb_s),
            Metric::MibPerS => Some(self.mib_s),
            Metric::P9999Us => self.latency_us.as_ref().map(|l| l.p99_99),
            Metric::P50Us => self.latency_us.as_ref().map(|l| l.p50),
        }
    }
}

/// Our figure over the paper's (`None` without a reference or a result).
pub fn ratio(ours: Option<f64>, reference: Option<f64>) -> Option<f64> {
    match (ours, reference) {
        (Some(o), Some(r)) if r > 0.0 && o.is_finite() => Some(o / r),
        _ => None,
    }
}

/// A step as run: its definition, the byte range, and its outcome or its error.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepReport {
    #[serde(flatten)]
    /// The step as planned (and scaled).
    pub step: Step,
    /// Byte range [start, end) of the namespace or device.
    pub range: (u64, u64),
    /// What it measured (`None`: it failed).
    pub outcome: Option<Outcome>,
    /// Why it failed.
    pub error: Option<String>,
    /// `outcome`'s value of `step.metric`.
    pub value: Option<f64>,
    /// `value` / the reference figure.
    pub ratio: Option<f64>,
}

impl StepReport {
    /// A step's report from its result.
    pub fn new(step: Step, range: (u64, u64), r: Result<Outcome, String>) -> StepReport {
        let (outcome, error) = match r {
            Ok(o) => (Some(o), None),
            Err(e) => (None, Some(e)),
        };
        let value = outcome.as_ref().and_then(|o| o.value(step.metric));
        let ratio = ratio(value, step.reference.as_ref().map(|r| r.value));
        StepReport {
            step,
            range,
            outcome,
            error,
            value,
            ratio,
        }
    }
}

/// Identify Controller / Namespace facts of the target.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Identity {
    /// PCI vendor id (VID).
    pub vid: u16,
    /// Serial number (SN).
    pub sn: String,
    /// Model number (MN).
    pub mn: String,
    /// Firmware revision (FR).
    pub fr: String,
    /// NVMe version (VER), `major.minor.tertiary`.
    pub ver: String,
    /// Controller id (CNTLID).
    pub cntlid: u16,
    /// Maximum transfer in bytes (`None`: no limit).
    pub mdts_bytes: Option<u64>,
    /// In-capsule I/O data in bytes (IOCCSZ).
    pub io_capsule_bytes: u64,
    /// Number of namespaces (NN).
    pub nn: u32,
    /// I/O queues the controller granted (Number of Queues).
    pub io_queues_granted: Option<u16>,
    /// Subsystem NQN.
    pub subnqn: String,
    /// The namespace's size in blocks (NSZE).
    pub namespace_blocks: u64,
    /// The namespace's block size in bytes.
    pub lba_size: u32,
}

/// What was measured.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TargetInfo {
    /// `ADDR:PORT` (built-in engine) or the target the device is connected to, if known.
    pub address: Option<String>,
    /// Subsystem NQN, if known.
    pub subnqn: Option<String>,
    /// Namespace (built-in engine).
    pub nsid: Option<u32>,
    /// The block device (fio engine).
    pub device: Option<String>,
    /// What Identify (or sysfs) says about the target.
    pub identify: Option<Identity>,
    /// Bytes the plan could use.
    pub capacity_bytes: u64,
}

/// The machine the bench ran on.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// Host name.
    pub hostname: String,
    /// Kernel release.
    pub kernel: String,
    /// CPU model name.
    pub cpu_model: String,
    /// Online CPUs.
    pub cpus: usize,
    /// Memory in bytes.
    pub memory_bytes: u64,
}

/// `report.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Always `ebof-bench-report` ([`SCHEMA`]).
    pub schema: String,
    /// [`SCHEMA_VERSION`] of the writer.
    pub schema_version: u32,
    /// Version of the ebof that wrote it.
    pub ebof_version: String,
    /// The plan.
    pub plan: PlanName,
    /// `builtin` (the userspace initiator) or `fio`.
    pub engine: String,
    /// Unix seconds when the run started.
    pub started_unix: u64,
    /// `--duration-scale`.
    pub duration_scale: f64,
    /// What was measured.
    pub target: TargetInfo,
    /// What measured it.
    pub machine: Machine,
    /// How the plan was scaled and anything else a reader must know.
    pub notes: Vec<String>,
    /// Every step, in the order run.
    pub steps: Vec<StepReport>,
    /// SVG files written next to the report.
    pub charts: Vec<String>,
}

/// `v` rounded to three decimals.
pub fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// `123.4k` style.
pub fn si(v: f64) -> String {
    if v.abs() >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if v.abs() >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else if v.abs() >= 10.0 || v == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

fn fmt_value(v: Option<f64>, m: Metric) -> String {
    match v {
        None => "–".into(),
        Some(v) => match m {
            Metric::Iops => si(v),
            Metric::MbPerS | Metric::MibPerS => format!("{v:.0}"),
            Metric::P9999Us | Metric::P50Us => format!("{v:.1}"),
        },
    }
}

fn fmt_bytes(b: u64) -> String {
    const U: [(&str, u32); 4] = [("T", 40), ("G", 30), ("M", 20), ("K", 10)];
    for (s, sh) in U {
        if b >= 1 << sh && b.is_multiple_of(1 << sh) {
            return format!("{}{s}", b >> sh);
        }
    }
    b.to_string()
}

fn lat_cell(o: &Outcome) -> String {
    o.latency_us.as_ref().map_or("–".into(), |l| {
        format!("{:.1} / {:.1} / {:.1}", l.p50, l.p99, l.p99_99)
    })
}

impl Report {
    /// The results table (also what `ebof bench` prints).
    pub fn results_table(&self) -> String {
        let mut s = String::from(
            "| step | ours | paper | ours/paper | p50 / p99 / p99.99 µs | errors |\n|---|---|---|---|---|---|\n",
        );
        for r in &self.steps {
            let m = r.step.metric;
            let ours = match (&r.error, r.value) {
                (Some(e), _) => format!("failed: {e}"),
                (None, v) => format!("{} {}", fmt_value(v, m), m.unit()),
            };
            let paper = r.step.reference.as_ref().map_or("–".into(), |x| {
                format!("{} {}", fmt_value(Some(x.value), x.metric), x.metric.unit())
            });
            let ratio = r.ratio.map_or("–".into(), |x| format!("{x:.2}x"));
            let (lat, errors) = r.outcome.as_ref().map_or(("–".into(), "–".into()), |o| {
                (lat_cell(o), o.errors.to_string())
            });
            let _ = writeln!(
                s,
                "| {} | {ours} | {paper} | {ratio} | {lat} | {errors} |",
                r.step.title
            );
        }
        s
    }

    fn load_table(&self) -> Option<String> {
        let rows: Vec<_> = self
            .steps
            .iter()
            .filter(|r| matches!(r.step.role, Role::Load { .. } | Role::Saturation))
            .collect();
        if rows.is_empty() {
            return None;
        }
        let mut s = String::from(
            "| load | asked IOPS | achieved IOPS | p50 µs | p99 µs | p99.9 µs | p99.99 µs |\n|---|---|---|---|---|---|---|\n",
        );
        for r in rows {
            let load = match r.step.role {
                Role::Load { fraction } => format!("{:.0} %", fraction * 100.0),
                _ => "closed loop".into(),
            };
            let Some(o) = &r.outcome else {
                let _ = writeln!(s, "| {load} | – | failed | | | | |");
                continue;
            };
            let asked = o.rate_iops.map_or("–".into(), si);
            let l = o.latency_us.clone().unwrap_or_default();
            let _ = writeln!(
                s,
                "| {load} | {asked} | {} | {:.1} | {:.1} | {:.1} | {:.1} |",
                si(o.iops),
                l.p50,
                l.p99,
                l.p99_9,
                l.p99_99
            );
        }
        Some(s)
    }

    fn params_table(&self) -> String {
        let mut s = String::from(
            "| id | rw | bs | QD | queues | runtime s | ramp s | passes | range | the paper ran |\n|---|---|---|---|---|---|---|---|---|---|\n",
        );
        for r in &self.steps {
            let st = &r.step;
            let _ = writeln!(
                s,
                "| `{}` | {} | {} | {} | {} | {:.2} | {:.2} | {} | {}-{} | {} |",
                st.id,
                st.rw.name(),
                fmt_bytes(st.bs),
                st.qd,
                st.queues,
                st.runtime.as_secs_f64(),
                st.ramp.as_secs_f64(),
                st.passes.map_or("–".into(), |p| p.to_string()),
                fmt_bytes(r.range.0),
                fmt_bytes(r.range.1),
                st.paper,
            );
        }
        s
    }

    fn sources(&self) -> String {
        let mut seen = BTreeMap::new();
        for r in &self.steps {
            if let Some(x) = &r.step.reference {
                seen.entry(x.source.clone())
                    .or_insert_with(|| x.system.clone());
            }
        }
        seen.iter()
            .map(|(src, sys)| format!("- {src} — measured on: {sys}\n"))
            .collect()
    }

    /// `report.md`.
    pub fn to_markdown(&self) -> String {
        let mut s = format!(
            "# ebof bench {} ({} engine)\n\n",
            self.plan.name(),
            self.engine
        );
        let t = &self.target;
        s += "## Target\n\n| | |\n|---|---|\n";
        for (k, v) in [
            ("address", t.address.clone()),
            ("subsystem", t.subnqn.clone()),
            ("namespace", t.nsid.map(|n| n.to_string())),
            ("device", t.device.clone()),
            ("capacity", Some(format!("{} bytes", t.capacity_bytes))),
        ] {
            if let Some(v) = v {
                let _ = writeln!(s, "| {k} | {v} |");
            }
        }
        if let Some(i) = &t.identify {
            let _ = writeln!(s, "| model (mn) | {} |", i.mn);
            let _ = writeln!(s, "| serial (sn) | {} |", i.sn);
            let _ = writeln!(s, "| firmware (fr) | {} |", i.fr);
            let _ = writeln!(s, "| vendor id | 0x{:04x} |", i.vid);
            let _ = writeln!(s, "| NVMe version | {} |", i.ver);
            let _ = writeln!(
                s,
                "| max transfer (MDTS) | {} |",
                i.mdts_bytes.map_or("no limit".into(), fmt_bytes)
            );
            let _ = writeln!(
                s,
                "| in-capsule data (IOCCSZ) | {} bytes |",
                i.io_capsule_bytes
            );
            let _ = writeln!(s, "| namespaces (NN) | {} |", i.nn);
            if let Some(q) = i.io_queues_granted {
                let _ = writeln!(s, "| I/O queues granted | {q} |");
            }
            let _ = writeln!(
                s,
                "| namespace | {} blocks of {} bytes |",
                i.namespace_blocks, i.lba_size
            );
        }
        let m = &self.machine;
        let _ = write!(
            s,
            "\n## Machine\n\n| | |\n|---|---|\n| host | {} |\n| kernel | {} |\n| CPU | {} × {} |\n| memory | {} MiB |\n| ebof | {} |\n| duration scale | {} |\n",
            m.hostname,
            m.kernel,
            m.cpus,
            m.cpu_model,
            m.memory_bytes >> 20,
            self.ebof_version,
            self.duration_scale
        );
        s += "\n## Results\n\n";
        s += &self.results_table();
        s += "\nThe paper's figures were measured on other hardware (below); they are context for \
              the plan, not a target for this machine.\n\n";
        s += &self.sources();
        if let Some(t) = self.load_table() {
            s += "\n## Latency versus load (open loop)\n\n";
            s += &t;
        }
        s += "\n## Workload parameters\n\n";
        s += &self.params_table();
        if !self.notes.is_empty() {
            s += "\n## Notes\n\n";
            for n in &self.notes {
                let _ = writeln!(s, "- {n}");
            }
        }
        if !self.charts.is_empty() {
            s += "\n## Charts\n\n";
            for c in &self.charts {
                let _ = writeln!(s, "![{c}]({c})\n");
            }
        }
        s
    }
}

/// `ebof bench compare`: steps matched by id, side by side, B relative to A.
pub fn compare(a: &Report, b: &Report) -> String {
    let mut s = format!(
        "A: {} {} ({} engine, {})\nB: {} {} ({} engine, {})\n\n",
        a.plan.name(),
        a.target
            .address
            .as_deref()
            .or(a.target.device.as_deref())
            .unwrap_or("?"),
        a.engine,
        a.target.identify.as_ref().map_or("", |i| i.mn.as_str()),
        b.plan.name(),
        b.target
            .address
            .as_deref()
            .or(b.target.device.as_deref())
            .unwrap_or("?"),
        b.engine,
        b.target.identify.as_ref().map_or("", |i| i.mn.as_str()),
    );
    s += "| step | metric | A | B | B/A | p99.99 µs A | p99.99 µs B |\n|---|---|---|---|---|---|---|\n";
    let p9999 = |r: &StepReport| {
        r.outcome
            .as_ref()
            .and_then(|o| o.latency_us.as_ref())
            .map_or("–".into(), |l| format!("{:.1}", l.p99_99))
    };
    for ra in &a.steps {
        let m = ra.step.metric;
        let rb = b.steps.iter().find(|r| r.step.id == ra.step.id);
        let (vb, pb) = rb.map_or((None, "–".into()), |r| (r.value, p9999(r)));
        let rel = ratio(vb, ra.value).map_or("–".into(), |x| {
            let better = if m.higher_is_better() {
                x >= 1.0
            } else {
                x <= 1.0
            };
            format!("{x:.2}x{}", if better { "" } else { " ▼" })
        });
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {rel} | {} | {pb} |",
            ra.step.id,
            m.unit(),
            fmt_value(ra.value, m),
            fmt_value(vb, m),
            p9999(ra),
        );
    }
    for rb in &b.steps {
        if !a.steps.iter().any(|r| r.step.id == rb.step.id) {
            let _ = writeln!(s, "| {} | (only in B) | | | | | |", rb.step.id);
        }
    }
    s
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::bench::plan::{self, PlanName};

    fn hist(values_ns: &[u64]) -> Histogram<u64> {
        let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).unwrap();
        for &v in values_ns {
            h.record(v).unwrap();
        }
        h
    }

    #[test]
    fn percentiles_from_histogram() {
        // 1..=10000 µs: p50 = 5000 µs, p99 = 9900 µs, p99.99 = 9999 µs (within HDR's 0.1 %).
        let v: Vec<u64> = (1..=10_000u64).map(|i| i * 1000).collect();
        let l = Latency::from_hist(&hist(&v)).unwrap();
        let near = |a: f64, b: f64| (a - b).abs() <= b * 0.002;
        assert!(near(l.p50, 5000.0), "{l:?}");
        assert!(near(l.p99, 9900.0), "{l:?}");
        assert!(near(l.p99_9, 9990.0), "{l:?}");
        assert!(near(l.p99_99, 9999.0), "{l:?}");
        assert!(near(l.avg, 5000.5), "{l:?}");
        assert!(Latency::from_hist(&hist(&[])).is_none());
    }

    #[test]
    fn buckets_and_cdf() {
        let h = hist(&[1500, 1500, 3000, 100_000]);
        let b = buckets_from_hist(&h);
        assert_eq!(b.iter().map(|b| b.count).sum::<u64>(), 4);
        assert!(b.first().unwrap().count > 0 && b.last().unwrap().count > 0);
        assert!(b.windows(2).all(|w| w[0].le_us < w[1].le_us));
        let c = cdf(&b);
        assert_eq!(c.last().unwrap().1, 1.0);
        assert!(c.windows(2).all(|w| w[0].1 <= w[1].1));
        assert!((c[0].1 - 0.5).abs() < 1e-9, "{c:?}");
        assert!(cdf(&[]).is_empty());
    }

    #[test]
    fn ratios() {
        assert_eq!(ratio(Some(50.0), Some(100.0)), Some(0.5));
        assert_eq!(ratio(Some(50.0), None), None);
        assert_eq!(ratio(None, Some(1.0)), None);
        assert_eq!(ratio(Some(1.0), Some(0.0)), None);
        let o = Outcome {
            elapsed_s: 2.0,
            ios: 1000,
            bytes: 1000 * 4096,
            ..Default::default()
        }
        .with_rates();
        assert_eq!(o.iops, 500.0);
        assert_eq!(o.value(Metric::MbPerS), Some(2.048));
        assert_eq!(o.value(Metric::P50Us), None);
    }

    pub(crate) fn sample(scale: f64) -> Report {
        let steps = plan::steps(PlanName::Odcc, 0.01, 1)
            .into_iter()
            .map(|st| {
                let o = Outcome {
                    elapsed_s: 1.0,
                    ios: (1000.0 * scale) as u64,
                    bytes: (1000.0 * scale) as u64 * st.bs,
                    latency_us: Latency::from_hist(&hist(&[10_000, 20_000])),
                    ..Default::default()
                }
                .with_rates();
                StepReport::new(st, (0, 1 << 20), Ok(o))
            })
            .collect();
        Report {
            schema: SCHEMA.into(),
            schema_version: SCHEMA_VERSION,
            ebof_version: "0.1.0".into(),
            plan: PlanName::Odcc,
            engine: "builtin".into(),
            started_unix: 0,
            duration_scale: 0.01,
            target: TargetInfo {
                address: Some("127.0.0.1:4420".into()),
                ..Default::default()
            },
            machine: Machine::default(),
            notes: vec!["scaled".into()],
            steps,
            charts: vec!["x.svg".into()],
        }
    }

    /// `docs/bench-report.schema.json`, the JSON Schema of what [`Report`] serializes to.
    const SCHEMA_JSON: &str = include_str!("../../../../docs/bench-report.schema.json");

    fn validator() -> jsonschema::Validator {
        let schema: serde_json::Value = serde_json::from_str(SCHEMA_JSON).unwrap();
        jsonschema::draft202012::new(&schema).unwrap()
    }

    /// Every error the schema finds in `v`, one a line (empty: valid).
    fn schema_errors(v: &serde_json::Value) -> String {
        validator()
            .iter_errors(v)
            .map(|e| format!("{}: {e}\n", e.instance_path()))
            .collect()
    }

    #[test]
    fn the_schema_is_a_valid_draft_2020_12_schema() {
        let schema: serde_json::Value = serde_json::from_str(SCHEMA_JSON).unwrap();
        jsonschema::draft202012::meta::validate(&schema).unwrap();
        assert_eq!(schema["properties"]["schema"]["const"], SCHEMA);
        assert_eq!(
            schema["properties"]["schema_version"]["const"],
            SCHEMA_VERSION
        );
        // The committed sample report (docs/guide/bench.md's) is a report too.
        let sample: serde_json::Value = serde_json::from_str(include_str!(
            "../../../../docs/bench-sample/odcc/report.json"
        ))
        .unwrap();
        assert_eq!(schema_errors(&sample), "");
    }

    /// The schema accepts every shape the code writes: each plan, access pattern, metric and
    /// role; failed steps; and every `Option` field null or left out (serde reads both).
    #[test]
    fn the_schema_accepts_what_the_code_writes() {
        use plan::{Role, Rw};
        let v = serde_json::to_value(sample(1.0)).unwrap();
        assert_eq!(schema_errors(&v), "");

        let rws = [Rw::Read, Rw::Write, Rw::RandRead, Rw::RandWrite];
        let metrics = [
            Metric::Iops,
            Metric::MbPerS,
            Metric::MibPerS,
            Metric::P9999Us,
            Metric::P50Us,
        ];
        let roles = [
            Role::Precondition,
            Role::Measure,
            Role::Scaling { connections: 8 },
            Role::Cores { cores: 5 },
            Role::Saturation,
            Role::Load { fraction: 0.9 },
        ];
        // A new variant fails to compile here until it is listed above (and in the schema).
        for m in metrics {
            match m {
                Metric::Iops
                | Metric::MbPerS
                | Metric::MibPerS
                | Metric::P9999Us
                | Metric::P50Us => {}
            }
        }
        for r in roles {
            match r {
                Role::Precondition
                | Role::Measure
                | Role::Scaling { .. }
                | Role::Cores { .. }
                | Role::Saturation
                | Role::Load { .. } => {}
            }
        }
        let mut r = sample(1.0);
        let template = r.steps[0].clone();
        r.steps.clear();
        for (i, ((&rw, &metric), &role)) in rws
            .iter()
            .cycle()
            .zip(metrics.iter().cycle())
            .zip(roles.iter())
            .enumerate()
        {
            let mut s = template.clone();
            s.step.id = format!("step-{i}");
            (s.step.rw, s.step.metric, s.step.role) = (rw, metric, role);
            r.steps.push(s);
        }
        // A failed step: an error, no outcome, value or ratio.
        let mut failed = template.clone();
        (failed.outcome, failed.error, failed.value, failed.ratio) =
            (None, Some("connection refused".into()), None, None);
        r.steps.push(failed);
        for plan in PlanName::ALL {
            for engine in ["builtin", "fio"] {
                (r.plan, r.engine) = (plan, engine.into());
                let v = serde_json::to_value(&r).unwrap();
                assert_eq!(schema_errors(&v), "", "{plan:?} {engine}");
            }
        }

        // Every Option field null (as the code writes None) or absent (as serde reads it).
        let mut r = sample(1.0);
        r.target.identify = Some(Identity::default());
        r.steps[0].outcome.as_mut().unwrap().rate_iops = Some(100.0);
        let full = serde_json::to_value(&r).unwrap();
        assert_eq!(schema_errors(&full), "");
        let optional: [(&str, &[&str]); 5] = [
            (
                "/target",
                &["address", "subnqn", "nsid", "device", "identify"],
            ),
            ("/target/identify", &["mdts_bytes", "io_queues_granted"]),
            (
                "/steps/0",
                &["passes", "reference", "outcome", "error", "value", "ratio"],
            ),
            ("/steps/1/outcome", &["latency_us", "rate_iops"]),
            ("/steps/2/outcome", &["latency_us"]),
        ];
        for (at, keys) in optional {
            for k in keys {
                let mut v = full.clone();
                v.pointer_mut(at).unwrap()[*k] = serde_json::Value::Null;
                assert_eq!(schema_errors(&v), "", "{at}/{k} null");
                v.pointer_mut(at)
                    .unwrap()
                    .as_object_mut()
                    .unwrap()
                    .remove(*k);
                assert_eq!(schema_errors(&v), "", "{at}/{k} absent");
                serde_json::from_value::<Report>(v).unwrap();
            }
        }
    }

    /// A required field missing, misspelt, of the wrong type, or an unknown enum value fails.
    #[test]
    fn the_schema_rejects_broken_reports() {
        let good = serde_json::to_value(sample(1.0)).unwrap();
        assert_eq!(schema_errors(&good), "");
        let broken = |at: &str, f: &dyn Fn(&mut serde_json::Value)| {
            let mut v = good.clone();
            f(v.pointer_mut(at).unwrap());
            let e = schema_errors(&v);
            assert!(!e.is_empty(), "{at}: the schema accepted {v}");
            e
        };
        let remove = |k: &'static str| {
            move |v: &mut serde_json::Value| {
                v.as_object_mut().unwrap().remove(k).unwrap();
            }
        };
        // Required fields removed, at each level.
        let e = broken("", &remove("steps"));
        assert!(e.contains("\"steps\" is a required property"), "{e}");
        broken("", &remove("schema_version"));
        broken("/machine", &remove("cpus"));
        broken("/target", &remove("capacity_bytes"));
        broken("/steps/0", &remove("id"));
        broken("/steps/0", &remove("range"));
        broken("/steps/0/outcome", &remove("iops"));
        broken("/steps/0/outcome", &remove("histogram"));
        broken("/steps/0/outcome/latency_us", &remove("p99_99"));
        broken("/steps/1/reference", &remove("value"));
        // Misspelt: the old name missing and the new one unknown.
        broken("/steps/0/outcome", &|v| {
            let x = v.as_object_mut().unwrap().remove("iops").unwrap();
            v["iosp"] = x;
        });
        broken("", &|v| v["extra"] = 1.into());
        // Wrong types and values.
        let e = broken("", &|v| v["started_unix"] = "yesterday".into());
        assert!(e.contains("/started_unix"), "{e}");
        broken("", &|v| v["schema_version"] = 2.into());
        broken("", &|v| v["schema"] = "other".into());
        broken("", &|v| v["plan"] = "nosuchplan".into());
        broken("", &|v| v["engine"] = "spdk".into());
        broken("/steps/0", &|v| v["qd"] = 65536.into());
        broken("/steps/0", &|v| v["qd"] = (-1).into());
        broken("/steps/0", &|v| v["bs"] = 4096.5.into());
        broken("/steps/0", &|v| v["rw"] = "randrw".into());
        broken("/steps/0", &|v| v["metric"] = "gb_s".into());
        broken("/steps/0", &|v| v["range"] = serde_json::json!([0]));
        broken("/steps/0", &|v| v["range"] = serde_json::json!([0, 1, 2]));
        broken("/steps/0", &|v| {
            v["role"] = serde_json::json!({"kind": "load"})
        });
        broken("/steps/0", &|v| {
            v["role"] = serde_json::json!({"kind": "warmup"})
        });
        broken("/steps/0/outcome", &|v| v["iops"] = "fast".into());
        broken("/steps/0/outcome", &|v| v["latency_us"] = 5.into());
        broken("/steps/0/outcome", &|v| {
            v["histogram"] = serde_json::json!([{"le_us": 1.0}])
        });
        broken("/notes", &|v| v[0] = 1.into());
    }

    #[test]
    fn markdown_json_round_trip_and_compare() {
        let a = sample(1.0);
        let md = a.to_markdown();
        assert!(md.contains("| 128K sequential write, 1 job QD64 |"), "{md}");
        assert!(md.contains("2333 MB/s"), "{md}");
        assert!(md.contains("Table 1"));
        assert!(md.contains("![x.svg](x.svg)"));
        let j = serde_json::to_string(&a).unwrap();
        let back: Report = serde_json::from_str(&j).unwrap();
        assert_eq!(back, a);
        let v: serde_json::Value = serde_json::from_str(&j).unwrap();
        assert_eq!(v["schema_version"], SCHEMA_VERSION);
        assert_eq!(v["steps"][1]["id"], "seq-write-128k-qd64");
        assert_eq!(v["steps"][1]["reference"]["value"], 2333.0);
        let c = compare(&a, &sample(2.0));
        assert!(
            c.contains("| rand-read-4k-qd64 | IOPS | 1.0k | 2.0k | 2.00x |"),
            "{c}"
        );
        let c = compare(&sample(2.0), &a);
        assert!(c.contains("0.50x ▼"), "{c}");
    }
}
