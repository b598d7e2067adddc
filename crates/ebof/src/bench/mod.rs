//! `ebof bench`: the seed papers' test plans as one command each, against any NVMe/TCP target
//! (or, with `--engine fio`, any block device), with a report a person can read (`report.md`,
//! SVG charts) and one a machine can compare (`report.json`, `ebof bench compare`).
//!
//! Layout (ADR 0009): [`plan`] the plans as data (no I/O); [`report`] the versioned report
//! schema, its Markdown and `compare`; [`chart`] the SVG charts; [`fio`] the fio engine's
//! command lines and JSON parser; [`engine`] runs a step on the built-in initiator through
//! `ebof perf`'s engine (`host_cmds::perf::run`) or on fio. This file is the wiring: arguments,
//! the destroy-data guard, the step loop with its progress bar, and the output files.

mod chart;
mod engine;
mod fio;
mod plan;
mod report;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};

use crate::host_cmds::common::parse_range;
use plan::{PlanName, Role, Step};
use report::{Report, SCHEMA, SCHEMA_VERSION, StepReport};

#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub cmd: Option<BenchCmd>,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(clap::Subcommand, Debug)]
pub enum BenchCmd {
    /// Print two reports' figures side by side, B relative to A (regressions, target vs target).
    Compare(CompareArgs),
}

#[derive(clap::Args, Debug)]
pub struct CompareArgs {
    /// The baseline report.json.
    pub a: PathBuf,
    /// The report.json compared with it.
    pub b: PathBuf,
}

/// Which engine runs the I/O.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineName {
    /// The built-in userspace NVMe/TCP initiator (no root, no kernel module).
    Builtin,
    /// fio on a block device (e.g. the Linux initiator's /dev/nvmeXnY); needs --device.
    Fio,
}

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// The plan: quick (~30 s smoke test of all), latency, odcc, es2000, adq.
    #[arg(value_enum, required = true)]
    pub plan: Option<PlanName>,
    /// Target address (built-in engine).
    #[arg(short = 'a', long = "traddr", value_name = "ADDR")]
    pub traddr: Option<String>,
    /// Target port.
    #[arg(
        short = 's',
        long = "trsvcid",
        value_name = "PORT",
        default_value_t = 4420
    )]
    pub trsvcid: u16,
    /// Subsystem NQN (built-in engine).
    #[arg(short = 'n', long = "nqn", value_name = "SUBNQN")]
    pub nqn: Option<String>,
    /// Namespace (default: the first active one).
    #[arg(long, value_name = "N")]
    pub nsid: Option<u32>,
    /// Byte range START-END (or LEN) to use (default: the whole namespace; quick: 64M).
    #[arg(long, value_name = "RANGE", value_parser = parse_range)]
    pub size: Option<(u64, u64)>,
    /// Multiply every step's duration (and the preconditioning caps) by F, e.g. 0.1.
    #[arg(long, value_name = "F", default_value_t = 1.0)]
    pub duration_scale: f64,
    /// Directory for report.md, report.json and the charts (default: bench-PLAN-UNIXTIME).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Print report.json on stdout instead of the results table.
    #[arg(long)]
    pub json: bool,
    /// I/O engine.
    #[arg(long, value_enum, default_value_t = EngineName::Builtin)]
    pub engine: EngineName,
    /// Block device (or file) for --engine fio, e.g. /dev/nvme1n1.
    #[arg(long, value_name = "PATH")]
    pub device: Option<PathBuf>,
    /// adq: sweep 1..N target cores (3 connections each); default: as many as the I/O queues
    /// the controller grants allow, at most 8.
    #[arg(long, value_name = "N")]
    pub cores_max: Option<u16>,
    /// Allow the plan's write steps (every plan has some) to overwrite the range of the
    /// namespace or device.
    #[arg(long)]
    pub yes_destroy_data: bool,
    /// Host NQN (default: /etc/nvme/hostnqn, else a generated UUID NQN).
    #[arg(long, value_name = "NQN")]
    pub hostnqn: Option<String>,
    /// Also run every QD1 step against this local file or block device (pread/pwrite,
    /// O_DIRECT on a device), for the latency the fabric adds (plans latency and quick).
    #[arg(long, value_name = "PATH")]
    pub local: Option<PathBuf>,
}

pub fn run(a: BenchArgs) -> Result<()> {
    match a.cmd {
        Some(BenchCmd::Compare(c)) => compare(&c),
        None => bench(a.run),
    }
}

fn load(p: &Path) -> Result<Report> {
    let text =
        std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", p.display()))?;
    if v["schema"] != SCHEMA {
        bail!(
            "{} is not an ebof bench report (schema {})",
            p.display(),
            v["schema"]
        );
    }
    if v["schema_version"].as_u64() != Some(u64::from(SCHEMA_VERSION)) {
        bail!(
            "{}: schema version {} (this ebof reads {SCHEMA_VERSION})",
            p.display(),
            v["schema_version"]
        );
    }
    serde_json::from_value(v).with_context(|| format!("{}: bad report", p.display()))
}

fn compare(c: &CompareArgs) -> Result<()> {
    let (a, b) = (load(&c.a)?, load(&c.b)?);
    print!("{}", report::compare(&a, &b));
    Ok(())
}

/// Largest sane `--duration-scale` (a 4 h step times 1000 is already over five months).
const MAX_SCALE: f64 = 1000.0;
/// No step runs shorter than this, whatever the scale.
const MIN_STEP: Duration = Duration::from_millis(50);
/// Preconditioning ends after its passes; its time cap is never scaled below this, so that a
/// small `--duration-scale` still leaves the range written (a fresh namespace's first writes
/// can be much slower than later ones, and would otherwise land in the measured steps).
const MIN_PASSES_CAP: Duration = Duration::from_secs(10);
/// Default top of the ADQ sweep.
const DEFAULT_CORES_MAX: u16 = 8;

fn bench(a: RunArgs) -> Result<()> {
    let plan = a.plan.context("a plan is required")?;
    if !(a.duration_scale.is_finite() && a.duration_scale > 0.0 && a.duration_scale <= MAX_SCALE) {
        bail!("--duration-scale must be > 0 and at most {MAX_SCALE}");
    }
    if a.cores_max == Some(0) {
        bail!("--cores-max must be ≥ 1");
    }
    let started = Instant::now();
    let started_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut eng = engine::Engine::open(&a, plan)?;
    let cores_max = a
        .cores_max
        .unwrap_or_else(|| eng.cores_max(DEFAULT_CORES_MAX));
    let mut steps = plan::steps(plan, a.duration_scale, cores_max);
    for s in &mut steps {
        s.runtime = s.runtime.max(MIN_STEP);
        if s.passes.is_some() {
            s.runtime = s.runtime.max(MIN_PASSES_CAP);
        }
    }
    let range = eng.range(a.size.or(plan::default_size(plan).map(|n| (0, n))))?;
    let writes = steps.iter().any(|s| s.rw.writes());
    if writes && !a.yes_destroy_data && eng.is_ebof_ram() {
        eprintln!(
            "{} is an ebof RAM namespace (Identify says so): writing without --yes-destroy-data",
            eng.what()
        );
    } else if writes && !a.yes_destroy_data {
        bail!(
            "plan {} writes to {}: every byte of {} may be overwritten; pass --yes-destroy-data",
            plan.name(),
            eng.what(),
            range_text(range)
        );
    }
    let out = a
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("bench-{}-{started_unix}", plan.name())));
    std::fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;

    let total_ms: u64 = steps.iter().map(planned_ms).sum();
    let pb = progress_bar(total_ms, a.json);
    let ticker = Ticker::start(pb.clone());
    let mut done_ms = 0u64;
    let mut saturation: Option<f64> = None;
    let mut results = Vec::new();
    for (i, st) in steps.iter().enumerate() {
        pb.set_message(format!("[{}/{}] {}", i + 1, steps.len(), st.title));
        ticker.step(done_ms, planned_ms(st));
        let rate = match st.role {
            Role::Load { fraction } => match saturation {
                Some(s) => Some((s * fraction).max(1.0)),
                None => {
                    results.push(StepReport::new(
                        st.clone(),
                        range,
                        Err("no saturation figure (its step failed)".into()),
                    ));
                    done_ms += planned_ms(st);
                    continue;
                }
            },
            _ => None,
        };
        let r = eng.run_step(st, range, rate);
        if let (Role::Saturation, Ok(o)) = (st.role, &r) {
            saturation = Some(o.iops);
        }
        let line = match &r {
            Ok(o) => format!(
                "  {:<52} {:>10} IOPS {:>9.1} MiB/s  p99 {}  errors {}",
                st.title,
                report::si(o.iops),
                o.mib_s,
                o.latency_us
                    .as_ref()
                    .map_or("–".into(), |l| format!("{:.1} µs", l.p99)),
                o.errors
            ),
            Err(e) => format!("  {:<52} failed: {e}", st.title),
        };
        if !a.json {
            pb.suspend(|| eprintln!("{line}"));
        }
        results.push(StepReport::new(st.clone(), range, r));
        if let Some(p) = a.local.as_deref().filter(|_| st.qd == 1) {
            let mut local = st.clone();
            local.id = format!("local-{}", st.id);
            local.title = format!("{} (local {})", st.title, p.display());
            local.reference = None;
            local.paper = "the same QD1 workload on a local device (fabric vs local)".into();
            let r = engine::run_local(p, &local, range.1 - range.0);
            results.push(StepReport::new(local, range, r));
        }
        done_ms += planned_ms(st);
    }
    ticker.stop();
    pb.finish_and_clear();
    let mut notes = plan_notes(plan, a.duration_scale, &steps, range, eng.capacity());
    notes.extend(precondition_notes(&results));
    notes.extend(fabric_notes(&results));
    notes.push(format!(
        "Whole run: {:.1} s of wall time.",
        started.elapsed().as_secs_f64()
    ));
    let mut rep = Report {
        schema: SCHEMA.into(),
        schema_version: SCHEMA_VERSION,
        ebof_version: env!("CARGO_PKG_VERSION").into(),
        plan,
        engine: eng.name().into(),
        started_unix,
        duration_scale: a.duration_scale,
        target: eng.target_info(),
        machine: engine::machine(),
        notes,
        steps: results,
        charts: Vec::new(),
    };
    let charts = chart::render_all(&rep).map_err(|e| anyhow::anyhow!("charts: {e}"))?;
    for (name, svg) in &charts {
        write(&out.join(name), svg)?;
        rep.charts.push(name.clone());
    }
    let json = serde_json::to_string_pretty(&rep)?;
    write(&out.join("report.json"), &json)?;
    write(&out.join("report.md"), &rep.to_markdown())?;
    if a.json {
        println!("{json}");
    } else {
        print!("{}", rep.results_table());
        eprintln!(
            "report: {} (report.md, report.json, {} charts)",
            out.display(),
            rep.charts.len()
        );
    }
    let failed = rep.steps.iter().filter(|s| s.error.is_some()).count();
    if failed > 0 {
        bail!(
            "{failed} of {} steps failed (see the report)",
            rep.steps.len()
        );
    }
    Ok(())
}

fn write(p: &Path, s: &str) -> Result<()> {
    std::fs::write(p, s).with_context(|| format!("cannot write {}", p.display()))
}

fn range_text(r: (u64, u64)) -> String {
    format!("bytes {}-{}", r.0, r.1)
}

fn planned_ms(s: &Step) -> u64 {
    (s.runtime + s.ramp).as_millis() as u64
}

fn plan_notes(
    plan: PlanName,
    scale: f64,
    steps: &[Step],
    range: (u64, u64),
    capacity: u64,
) -> Vec<String> {
    let mut n = vec![format!(
        "Durations are the plan's × {scale} (--duration-scale); no step runs shorter than {} ms, \
         no preconditioning cap is shorter than {} s.",
        MIN_STEP.as_millis(),
        MIN_PASSES_CAP.as_secs()
    )];
    n.push(format!(
        "Range: {} of {capacity} bytes ({} MiB).",
        range_text(range),
        (range.1 - range.0) >> 20
    ));
    for s in steps.iter().filter(|s| s.passes.is_some()) {
        n.push(format!(
            "`{}`: {} pass(es) over the range or {:.1} s, whichever comes first (the paper: {}).",
            s.id,
            s.passes.unwrap_or(0.0),
            s.runtime.as_secs_f64(),
            s.paper
        ));
    }
    if matches!(plan, PlanName::Adq | PlanName::Quick) {
        n.push(
            "A client cannot set the target's cores: step `cores N` runs 3N connections at QD32; \
             to sweep the target's cores as the paper did, restart it with N cores (ebof serve \
             --cores) for each step."
                .into(),
        );
        n.push(
            "Latency versus load: open loop, commands evenly spaced at the asked rate, at most QD32 \
             in flight per connection; latency counts from when a command was due (no coordinated \
             omission)."
                .into(),
        );
    }
    n
}

fn precondition_notes(results: &[StepReport]) -> Vec<String> {
    results
        .iter()
        .filter(|r| r.step.role == Role::Precondition)
        .filter_map(|r| {
            let o = r.outcome.as_ref()?;
            let len = (r.range.1 - r.range.0).max(1);
            Some(format!(
                "`{}` wrote {:.2} passes of the range in {:.1} s.",
                r.step.id,
                o.bytes as f64 / len as f64,
                o.elapsed_s
            ))
        })
        .collect()
}

/// "Added by the fabric": each QD1 step's median against its `--local` twin's.
fn fabric_notes(results: &[StepReport]) -> Vec<String> {
    let p50 = |r: &StepReport| r.outcome.as_ref()?.latency_us.as_ref().map(|l| l.p50);
    results
        .iter()
        .filter_map(|local| {
            let id = local.step.id.strip_prefix("local-")?;
            let fabric = results.iter().find(|r| r.step.id == id)?;
            let (f, l) = (p50(fabric)?, p50(local)?);
            Some(format!(
                "`{id}`: median {f:.1} µs over the fabric, {l:.1} µs local: the fabric adds {:.1} µs.",
                f - l
            ))
        })
        .collect()
}

fn progress_bar(total_ms: u64, json: bool) -> ProgressBar {
    if json || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(total_ms);
    pb.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:30} {percent:>3}% ETA {eta} {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    pb
}

/// Moves the bar with the clock inside the running step (a step reports only when it ends).
struct Ticker {
    state: Arc<Mutex<(u64, u64, Instant)>>,
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Ticker {
    fn start(pb: ProgressBar) -> Ticker {
        let state = Arc::new(Mutex::new((0u64, 0u64, Instant::now())));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (state.clone(), stop.clone());
        let handle = std::thread::Builder::new()
            .name("bench-progress".into())
            .spawn(move || {
                while !st.load(Ordering::Relaxed) {
                    if let Ok(g) = s.lock() {
                        let (base, len, t0) = *g;
                        pb.set_position(base + (t0.elapsed().as_millis() as u64).min(len));
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
            })
            .ok();
        Ticker {
            state,
            stop,
            handle,
        }
    }
    fn step(&self, base_ms: u64, len_ms: u64) {
        if let Ok(mut g) = self.state.lock() {
            *g = (base_ms, len_ms, Instant::now());
        }
    }
    fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}
