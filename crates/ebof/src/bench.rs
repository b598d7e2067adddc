//! `ebof bench`: the flags, their conversion into `ebof_perf::bench`'s options, the progress
//! bar and the output (the results table or `report.json` on stdout, the step lines and where
//! the report is on stderr). Running the plans, the reports and the charts are the `ebof-perf`
//! library (ADR 0009).

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use ebof_perf::Endpoint;
use ebof_perf::bench::plan::{PlanName, Step};
use ebof_perf::bench::report::{self, Outcome};
use ebof_perf::bench::{self, BenchOptions, EngineSpec, Observer};
use indicatif::{ProgressBar, ProgressStyle};

use crate::host_cmds::common::{host_config, parse_range, resolve};

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
    pub plan: Option<PlanArg>,
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

/// The plans `ebof bench` knows (`ebof_perf::bench::plan::PlanName`, as flags).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlanArg {
    /// A ~30 s smoke version of every plan (for CI).
    Quick,
    /// QD1 4K read and write latency distribution (OFA 2017 Linux NVMe-oF talk).
    Latency,
    /// ODCC Ethernet SSD white paper: preconditioning, 128K sequential and 4K random at QD64.
    Odcc,
    /// Ingrasys ES2000 EBOF: 4K/128K random at QD 64-256, aggregate sequential bandwidth 1-8.
    Es2000,
    /// Intel SPDK NVMe/TCP + ADQ: 4K randread QD32, 3 connections per core; latency vs load.
    Adq,
}

impl From<PlanArg> for PlanName {
    fn from(p: PlanArg) -> PlanName {
        match p {
            PlanArg::Quick => PlanName::Quick,
            PlanArg::Latency => PlanName::Latency,
            PlanArg::Odcc => PlanName::Odcc,
            PlanArg::Es2000 => PlanName::Es2000,
            PlanArg::Adq => PlanName::Adq,
        }
    }
}

pub fn run(a: BenchArgs) -> Result<()> {
    match a.cmd {
        Some(BenchCmd::Compare(c)) => compare(&c),
        None => run_plan(a.run),
    }
}

fn compare(c: &CompareArgs) -> Result<()> {
    let (a, b) = (bench::load(&c.a)?, bench::load(&c.b)?);
    print!("{}", bench::compare(&a, &b));
    Ok(())
}

fn run_plan(a: RunArgs) -> Result<()> {
    let plan = a.plan.context("a plan is required")?;
    let opts = BenchOptions {
        plan: plan.into(),
        size: a.size,
        duration_scale: a.duration_scale,
        out: a.out.clone(),
        cores_max: a.cores_max,
        yes_destroy_data: a.yes_destroy_data,
        local: a.local.clone(),
    };
    opts.check()?;
    let spec = engine_spec(&a)?;
    let mut progress = Progress::new(a.json);
    let done = bench::run(&opts, spec, &mut progress)?;
    if a.json {
        println!("{}", done.json);
    } else {
        print!("{}", done.report.results_table());
        eprintln!(
            "report: {} (report.md, report.json, {} charts)",
            done.out.display(),
            done.report.charts.len()
        );
    }
    done.verdict()
}

/// The engine the flags name, with its target: `-a/-s/-n` (and `--hostnqn`) for the built-in
/// initiator, `--device` for fio.
fn engine_spec(a: &RunArgs) -> Result<EngineSpec> {
    match a.engine {
        EngineName::Builtin => {
            if a.device.is_some() {
                bail!("--device is for --engine fio");
            }
            let (Some(traddr), Some(nqn)) = (&a.traddr, &a.nqn) else {
                bail!("the built-in engine needs the target: -a ADDR [-s PORT] -n SUBNQN");
            };
            let endpoint = Box::new(Endpoint {
                addr: resolve(traddr, a.trsvcid)?,
                subnqn: nqn.clone(),
                host: host_config(a.hostnqn.as_deref())?,
            });
            Ok(EngineSpec::Builtin {
                endpoint,
                nsid: a.nsid,
            })
        }
        EngineName::Fio => {
            let device = a
                .device
                .clone()
                .context("--engine fio needs --device PATH (e.g. /dev/nvme1n1)")?;
            Ok(EngineSpec::Fio { device })
        }
    }
}

/// The progress bar on stderr (hidden with `--json` or when stderr is not a terminal), and a
/// line per step as it ends (not with `--json`).
struct Progress {
    json: bool,
    pb: ProgressBar,
    ticker: Option<Ticker>,
}

impl Progress {
    fn new(json: bool) -> Progress {
        Progress {
            json,
            pb: ProgressBar::hidden(),
            ticker: None,
        }
    }
}

impl Observer for Progress {
    fn notice(&mut self, message: &str) {
        eprintln!("{message}");
    }

    fn started(&mut self, total_ms: u64) {
        self.pb = progress_bar(total_ms, self.json);
        self.ticker = Some(Ticker::start(self.pb.clone()));
    }

    fn step_started(
        &mut self,
        index: usize,
        count: usize,
        step: &Step,
        done_ms: u64,
        planned_ms: u64,
    ) {
        self.pb
            .set_message(format!("[{}/{count}] {}", index + 1, step.title));
        if let Some(t) = &self.ticker {
            t.step(done_ms, planned_ms);
        }
    }

    fn step_done(&mut self, step: &Step, result: &Result<Outcome, String>) {
        let line = match result {
            Ok(o) => format!(
                "  {:<52} {:>10} IOPS {:>9.1} MiB/s  p99 {}  errors {}",
                step.title,
                report::si(o.iops),
                o.mib_s,
                o.latency_us
                    .as_ref()
                    .map_or("–".into(), |l| format!("{:.1} µs", l.p99)),
                o.errors
            ),
            Err(e) => format!("  {:<52} failed: {e}", step.title),
        };
        if !self.json {
            self.pb.suspend(|| eprintln!("{line}"));
        }
    }

    fn finished(&mut self) {
        if let Some(t) = self.ticker.take() {
            t.stop();
        }
        self.pb.finish_and_clear();
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::ValueEnum as _;

    /// `PlanArg` mirrors `PlanName`: every flag value is a plan under the same name, and every
    /// plan has a flag value (a plan added to the library fails to compile here until it is).
    #[test]
    fn plan_flags_name_every_plan() {
        let names: Vec<PlanName> = PlanArg::value_variants()
            .iter()
            .map(|&p| {
                let name = PlanName::from(p);
                let flag = p.to_possible_value().expect("no skipped plan");
                assert_eq!(flag.get_name(), name.name());
                name
            })
            .collect();
        assert_eq!(names, PlanName::ALL);
        for p in PlanName::ALL {
            match p {
                PlanName::Quick
                | PlanName::Latency
                | PlanName::Odcc
                | PlanName::Es2000
                | PlanName::Adq => {}
            }
        }
    }
}
