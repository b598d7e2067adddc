//! `ebof bench`'s engine: the seed papers' test plans, each run as one call against any
//! NVMe/TCP target (or, on fio, any block device), with a report a person can read
//! (`report.md`, SVG charts) and one a machine can compare (`report.json`, [`compare`]).
//!
//! Layout (ADR 0009): [`plan`] the plans as data (no I/O); [`report`] the versioned report
//! schema, its Markdown and `compare`; `chart` the SVG charts; `fio` the fio engine's
//! command lines and JSON parser; `engine` runs a step on the built-in initiator through
//! perf's engine ([`crate::perf::run`]) or on fio. This file runs a plan: the destroy-data
//! guard (`prepare`), the step loop (`run_steps`) and the report files (`write_report`).
//! Progress reaches the caller through an [`Observer`]; nothing here prints.

mod chart;
mod engine;
mod fio;
pub mod plan;
pub mod report;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

pub use engine::EngineSpec;
use plan::{PlanName, Role, Step};
pub use report::compare;
use report::{Outcome, Report, SCHEMA, SCHEMA_VERSION, StepReport};

/// How a plan runs, whatever the engine.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// The plan.
    pub plan: PlanName,
    /// Byte range `[start, end)` to use (`None`: the whole namespace or device; quick: 64 MiB).
    pub size: Option<(u64, u64)>,
    /// Multiply every step's duration (and the preconditioning caps) by this.
    pub duration_scale: f64,
    /// Directory for report.md, report.json and the charts (`None`: bench-PLAN-UNIXTIME).
    pub out: Option<PathBuf>,
    /// adq: sweep 1..N target cores (`None`: as the granted I/O queues allow, at most 8).
    pub cores_max: Option<u16>,
    /// Allow the plan's write steps to overwrite the range.
    pub yes_destroy_data: bool,
    /// Also run every QD1 step against this local file or block device.
    pub local: Option<PathBuf>,
}

impl BenchOptions {
    /// Check the options that need no target: the duration scale and the top of the sweep.
    pub fn check(&self) -> Result<()> {
        if !(self.duration_scale.is_finite()
            && self.duration_scale > 0.0
            && self.duration_scale <= MAX_SCALE)
        {
            bail!("--duration-scale must be > 0 and at most {MAX_SCALE}");
        }
        if self.cores_max == Some(0) {
            bail!("--cores-max must be ≥ 1");
        }
        Ok(())
    }
}

/// What a running plan tells its caller (for a progress display; nothing here prints). Every
/// method has an empty default.
pub trait Observer {
    /// Something the user should know that is not an error (e.g. writing to an ebof RAM
    /// namespace without `yes_destroy_data`).
    fn notice(&mut self, _message: &str) {}
    /// The steps are about to run; together they are planned to take `total_ms`.
    fn started(&mut self, _total_ms: u64) {}
    /// Step `index` (from 0) of `count` starts; the steps before it were planned to take
    /// `done_ms`, this one `planned_ms`.
    fn step_started(
        &mut self,
        _index: usize,
        _count: usize,
        _step: &Step,
        _done_ms: u64,
        _planned_ms: u64,
    ) {
    }
    /// A step that ran has ended (steps skipped for want of a saturation figure, and the
    /// `local` twins, are not reported here; they are in the report).
    fn step_done(&mut self, _step: &Step, _result: &Result<Outcome, String>) {}
    /// Every step has ended; the report is written next.
    fn finished(&mut self) {}
}

/// A plan that ran: its report, where the files are, and `report.json`'s text.
#[derive(Debug)]
pub struct BenchRun {
    /// The report (as in `report.json`).
    pub report: Report,
    /// The directory holding report.md, report.json and the charts.
    pub out: PathBuf,
    /// The text of `report.json`.
    pub json: String,
}

impl BenchRun {
    /// `Ok` unless a step failed; the error says how many.
    pub fn verdict(&self) -> Result<()> {
        let steps = &self.report.steps;
        let failed = steps.iter().filter(|s| s.error.is_some()).count();
        if failed > 0 {
            bail!("{failed} of {} steps failed (see the report)", steps.len());
        }
        Ok(())
    }
}

/// Read a `report.json`, refusing other schemas and schema versions.
pub fn load(p: &Path) -> Result<Report> {
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

/// Run the plan `opts` names on the engine `spec` describes, write the report files and
/// return the report. `observer` hears the progress.
pub fn run(opts: &BenchOptions, spec: EngineSpec, observer: &mut dyn Observer) -> Result<BenchRun> {
    opts.check()?;
    let started = Instant::now();
    let started_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut p = prepare(opts, spec, started_unix, observer)?;
    let results = run_steps(&mut p, opts.local.as_deref(), observer);
    let mut notes = plan_notes(
        opts.plan,
        opts.duration_scale,
        &p.steps,
        p.range,
        p.engine.capacity(),
    );
    notes.extend(precondition_notes(&results));
    notes.extend(fabric_notes(&results));
    notes.push(format!(
        "Whole run: {:.1} s of wall time.",
        started.elapsed().as_secs_f64()
    ));
    let report = Report {
        schema: SCHEMA.into(),
        schema_version: SCHEMA_VERSION,
        ebof_version: env!("CARGO_PKG_VERSION").into(),
        plan: opts.plan,
        engine: p.engine.name().into(),
        started_unix,
        duration_scale: opts.duration_scale,
        target: p.engine.target_info(),
        machine: engine::machine(),
        notes,
        steps: results,
        charts: Vec::new(),
    };
    write_report(report, p.out)
}

/// A plan ready to run: the engine, the scaled steps, the range, the output directory.
struct Prepared {
    engine: engine::Engine,
    steps: Vec<Step>,
    range: (u64, u64),
    out: PathBuf,
}

/// Open the engine, scale the plan's steps, settle the range, apply the destroy-data guard
/// and create the output directory.
fn prepare(
    opts: &BenchOptions,
    spec: EngineSpec,
    started_unix: u64,
    observer: &mut dyn Observer,
) -> Result<Prepared> {
    let plan = opts.plan;
    let engine = engine::Engine::open(spec)?;
    let cores_max = opts
        .cores_max
        .unwrap_or_else(|| engine.cores_max(DEFAULT_CORES_MAX));
    let mut steps = plan::steps(plan, opts.duration_scale, cores_max);
    for s in &mut steps {
        s.runtime = s.runtime.max(MIN_STEP);
        if s.passes.is_some() {
            s.runtime = s.runtime.max(MIN_PASSES_CAP);
        }
    }
    let range = engine.range(opts.size.or(plan::default_size(plan).map(|n| (0, n))))?;
    let writes = steps.iter().any(|s| s.rw.writes());
    if writes && !opts.yes_destroy_data && engine.is_ebof_ram() {
        observer.notice(&format!(
            "{} is an ebof RAM namespace (Identify says so): writing without --yes-destroy-data",
            engine.what()
        ));
    } else if writes && !opts.yes_destroy_data {
        bail!(
            "plan {} writes to {}: every byte of {} may be overwritten; pass --yes-destroy-data",
            plan.name(),
            engine.what(),
            range_text(range)
        );
    }
    let out = opts
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("bench-{}-{started_unix}", plan.name())));
    std::fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
    Ok(Prepared {
        engine,
        steps,
        range,
        out,
    })
}

/// Run every step in order (a load step takes its rate from the last saturation figure; a QD1
/// step gets its `local` twin) and gather their reports.
fn run_steps(
    p: &mut Prepared,
    local: Option<&Path>,
    observer: &mut dyn Observer,
) -> Vec<StepReport> {
    let range = p.range;
    let total_ms: u64 = p.steps.iter().map(planned_ms).sum();
    observer.started(total_ms);
    let mut done_ms = 0u64;
    let mut saturation: Option<f64> = None;
    let mut results = Vec::new();
    for (i, st) in p.steps.iter().enumerate() {
        observer.step_started(i, p.steps.len(), st, done_ms, planned_ms(st));
        done_ms += planned_ms(st);
        let rate = match st.role {
            Role::Load { fraction } => match saturation {
                Some(s) => Some((s * fraction).max(1.0)),
                None => {
                    results.push(StepReport::new(
                        st.clone(),
                        range,
                        Err("no saturation figure (its step failed)".into()),
                    ));
                    continue;
                }
            },
            _ => None,
        };
        let r = p.engine.run_step(st, range, rate);
        if let (Role::Saturation, Ok(o)) = (st.role, &r) {
            saturation = Some(o.iops);
        }
        observer.step_done(st, &r);
        results.push(StepReport::new(st.clone(), range, r));
        if let Some(path) = local.filter(|_| st.qd == 1) {
            results.push(local_twin(path, st, range));
        }
    }
    observer.finished();
    results
}

/// The same QD1 step against a local file or device (`--local`), for the latency the fabric
/// adds.
fn local_twin(path: &Path, st: &Step, range: (u64, u64)) -> StepReport {
    let mut local = st.clone();
    local.id = format!("local-{}", st.id);
    local.title = format!("{} (local {})", st.title, path.display());
    local.reference = None;
    local.paper = "the same QD1 workload on a local device (fabric vs local)".into();
    let r = engine::run_local(path, &local, range.1 - range.0);
    StepReport::new(local, range, r)
}

/// Render the charts and write them, `report.json` and `report.md` into `out`.
fn write_report(mut report: Report, out: PathBuf) -> Result<BenchRun> {
    let charts = chart::render_all(&report).map_err(|e| anyhow::anyhow!("charts: {e}"))?;
    for (name, svg) in &charts {
        write(&out.join(name), svg)?;
        report.charts.push(name.clone());
    }
    let json = serde_json::to_string_pretty(&report)?;
    write(&out.join("report.json"), &json)?;
    write(&out.join("report.md"), &report.to_markdown())?;
    Ok(BenchRun { report, out, json })
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
