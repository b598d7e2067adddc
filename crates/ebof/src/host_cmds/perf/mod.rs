//! `ebof perf`: generate I/O against a namespace and report IOPS, bandwidth, latency
//! percentiles, the tool's CPU cost per I/O and errors.
//!
//! Layout: one admin connection on the main thread (keep-alive runs there), and `--queues` I/O
//! queues, each its own TCP connection driven by one task ([`job`]). Queues are spread
//! round-robin over worker threads, one per `--cores` entry (pinned, each with a current-thread
//! tokio runtime) or, without `--cores`, one per queue up to the number of CPUs (unpinned).
//!
//! Regions: random workloads without `--verify` let every queue roam the whole `--range`;
//! sequential workloads and every `--verify` run give each queue its own slice of it (verify
//! needs a single writer per block to know what a block must contain).
//!
//! `--verify` (see [`verify`]): writes self-describing blocks and checks every read. Workloads
//! that read (read, randread, randrw) first prefill each queue's slice (not timed); workloads
//! that write (write, randwrite, randrw) read everything back after the run. A mismatch is
//! printed with its LBA and makes the exit status non-zero, as do failed commands.
//!
//! Durability (`--flush-every`, `--flush-at-end`, `--verify-log`, `--verify-only`): a `--verify`
//! run can Flush as it goes and record in a log ([`vlog`]) which blocks were acknowledged, which
//! a completed Flush made durable and which were in flight when it ended; a later
//! `--verify-only` run ([`verify_only`]) reads the range without writing and checks it against
//! that log, e.g. after the target was killed and restarted.

mod job;
pub(crate) mod report;
mod verify;
mod verify_only;
mod vlog;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use ebof_runtime::affinity;
use nvme_spec::NamespaceId;
use nvmf_host::{Controller, IoConnector};
use std::io::IsTerminal;
use tokio::sync::{mpsc, watch};

use super::common::{host_config, parse_duration, parse_range, parse_size, resolve, runtime};
use job::{JobSpec, Pattern, Phase, Progress, Timing};
use report::{Cpu, JobResult, Report, Workload};

/// Access pattern and direction (fio's `rw=` names).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum RwMode {
    #[value(name = "read")]
    Read,
    #[value(name = "write")]
    Write,
    #[value(name = "randread")]
    RandRead,
    #[value(name = "randwrite")]
    RandWrite,
    #[value(name = "randrw")]
    RandRw,
}

impl RwMode {
    fn name(self) -> &'static str {
        match self {
            RwMode::Read => "read",
            RwMode::Write => "write",
            RwMode::RandRead => "randread",
            RwMode::RandWrite => "randwrite",
            RwMode::RandRw => "randrw",
        }
    }
    fn pattern(self) -> Pattern {
        match self {
            RwMode::Read | RwMode::Write => Pattern::Sequential,
            RwMode::RandRead | RwMode::RandWrite | RwMode::RandRw => Pattern::Random,
        }
    }
    fn read_pct(self, mix: u8) -> u8 {
        match self {
            RwMode::Read | RwMode::RandRead => 100,
            RwMode::Write | RwMode::RandWrite => 0,
            RwMode::RandRw => mix,
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct PerfArgs {
    #[command(flatten)]
    pub target: crate::host_cmds::common::SubsystemArgs,
    /// Namespace (default: the first active one).
    #[arg(long, value_name = "N")]
    pub nsid: Option<u32>,
    /// Workload.
    #[arg(long, value_enum, default_value_t = RwMode::RandRead)]
    pub rw: RwMode,
    /// Percentage of reads for randrw.
    #[arg(long, value_name = "PCT", default_value_t = 50, value_parser = clap::value_parser!(u8).range(0..=100))]
    pub mix: u8,
    /// Block size per I/O (e.g. 4k, 128k, 1M).
    #[arg(long, value_name = "SIZE", default_value = "4k", value_parser = parse_size)]
    pub bs: u64,
    /// Commands in flight per queue.
    #[arg(long, value_name = "N", default_value_t = 32)]
    pub qd: u16,
    /// I/O queues (TCP connections); default: one per --cores entry, else 1.
    #[arg(long, value_name = "N")]
    pub queues: Option<u16>,
    /// Cores for the worker threads, e.g. "0", "0-3", "0,2" (one pinned thread per core).
    #[arg(long, value_name = "LIST")]
    pub cores: Option<String>,
    /// Measured duration (e.g. 10s, 500ms, 2m).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub runtime: Duration,
    /// Warm-up before measuring.
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = parse_duration)]
    pub ramp: Duration,
    /// Byte range START-END (or LEN) of the namespace to use (e.g. 0-1G); default: all of it.
    #[arg(long, value_name = "RANGE", value_parser = parse_range)]
    pub range: Option<(u64, u64)>,
    /// Ask for the NVMe/TCP header digest.
    #[arg(long)]
    pub hdr_digest: bool,
    /// Ask for the NVMe/TCP data digest.
    #[arg(long)]
    pub data_digest: bool,
    /// Ask the target to disable SQ flow control on the I/O queues (Connect CATTR.DISSQFC).
    #[arg(long)]
    pub dissqfc: bool,
    /// Write self-checking blocks (LBA, generation, checksum) and check every read. Workloads
    /// that read prefill the range first (untimed); workloads that write read it all back after
    /// the run. Each queue gets its own slice of the range. Any mismatch fails the run.
    #[arg(long)]
    pub verify: bool,
    /// Send a Flush on each queue after every N successful writes (0: never); the report gives
    /// the flush count and latency. With --verify-log, a completed Flush marks what it covers as
    /// durable.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub flush_every: u64,
    /// Send a Flush on each queue when the run ends (before the read-back).
    #[arg(long)]
    pub flush_at_end: bool,
    /// Write with Force Unit Access: a write completes only once durable (with --verify-log,
    /// each completed write is logged as durable).
    #[arg(long)]
    pub fua: bool,
    /// With --verify: record in FILE (created; never overwritten) the run id, and for each
    /// queue which blocks were acknowledged, which a completed Flush made durable and which
    /// were in flight at the end, fsync'd as the run goes. With --verify-only: the log to check.
    #[arg(long, value_name = "FILE")]
    pub verify_log: Option<PathBuf>,
    /// Read-only check of an earlier --verify run (needs its --verify-log): read every block of
    /// its range and report blocks intact, never written, stale (older than flushed: a
    /// durability violation) and corrupt (torn, misdirected). Writes nothing; exits non-zero on
    /// any violation. Uses the log's namespace and range; --queues and --qd apply.
    #[arg(long, requires = "verify_log", conflicts_with_all = ["verify", "flush_every", "flush_at_end", "fua", "range", "ramp"])]
    pub verify_only: bool,
    /// Host NQN (default: /etc/nvme/hostnqn, else a generated UUID NQN).
    #[arg(long, value_name = "NQN")]
    pub hostnqn: Option<String>,
    #[command(flatten)]
    pub security: crate::host_cmds::common::SecurityArgs,
    /// Wait for completions in epoll instead of polling the sockets (by default each worker
    /// polls without sleeping while I/O is in flight, as spdk_nvme_perf does).
    #[arg(long)]
    pub no_busy_poll: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Open loop: submit at this many commands per second over all queues (evenly spaced, each
    /// queue its share), never more than --qd in flight; latency counts from when a command was
    /// due, so queueing behind a full queue shows. Set by `ebof bench`, not a flag.
    #[arg(skip)]
    pub rate_iops: Option<f64>,
    /// Stop once the queues together have issued this many passes over --range (fio's
    /// `loops=`), or at --runtime, whichever comes first. Set by `ebof bench`, not a flag.
    #[arg(skip)]
    pub passes: Option<f64>,
}

/// Most `--bs` units `--verify` tracks (5 bytes each: generation + in-flight flag), 80 MiB.
const MAX_VERIFY_UNITS: u64 = 16 << 20;

pub fn perf(a: PerfArgs) -> Result<()> {
    if a.qd == 0 || a.qd == u16::MAX {
        bail!("--qd must be 1..{}", u16::MAX - 1);
    }
    if let (true, Some(log)) = (a.verify_only, &a.verify_log) {
        return verify_only::run(&a, log);
    }
    if a.verify_log.is_some() && !a.verify {
        bail!("--verify-log needs --verify (or --verify-only to check an existing log)");
    }
    if a.bs == 0 {
        bail!("--bs must be > 0");
    }
    if a.runtime.is_zero() {
        bail!("--runtime must be > 0");
    }
    let cores = a
        .cores
        .as_deref()
        .map(affinity::parse_core_list)
        .transpose()
        .map_err(|e| anyhow::anyhow!("--cores: {e}"))?;
    let queues = usize::from(
        a.queues.unwrap_or(
            cores
                .as_ref()
                .map_or(1, |c| c.len().min(usize::from(u16::MAX)) as u16),
        ),
    );
    if queues == 0 {
        bail!("--queues must be ≥ 1");
    }
    let addr = resolve(&a.target.traddr, a.target.trsvcid)?;
    let mut cfg = host_config(a.hostnqn.as_deref())?;
    a.security.apply(&mut cfg)?;
    cfg.hdr_digest = a.hdr_digest;
    cfg.data_digest = a.data_digest;
    super::common::apply_transport(a.target.transport, &mut cfg)?;
    cfg.io_queues = queues as u16;
    cfg.async_events = false;
    let rt = runtime()?;
    let report = rt.block_on(async {
        let ctrl = Controller::connect(addr, &a.target.nqn, &cfg)
            .await
            .with_context(|| format!("cannot connect to {} at {addr}", a.target.nqn))?;
        let r = run(&a, &ctrl, addr, cores, queues).await;
        if let Err(e) = ctrl.shutdown().await {
            tracing::debug!(error = %e, "shutdown failed");
        }
        ctrl.disconnect().await;
        r
    })?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report.to_json())?);
    } else {
        print!("{}", report.to_text());
    }
    let (errors, bad) = report.failures();
    // After a failed run (e.g. the target died) the log is still complete: say where it is.
    let log_hint = a
        .verify_log
        .as_ref()
        .map(|p| {
            format!(
                "; the verify log is complete, check it with --verify-only --verify-log {}",
                p.display()
            )
        })
        .unwrap_or_default();
    if bad > 0 {
        bail!(
            "verify found {bad} bad blocks (first at LBA {}){log_hint}",
            report.verify.mismatches.first().map_or(0, |m| m.lba)
        );
    }
    if errors > 0 {
        let lost = if report.transport_errors.is_empty() {
            ""
        } else {
            " (connection lost)"
        };
        bail!("{errors} I/O errors{lost}{log_hint}");
    }
    Ok(())
}

/// Sizes derived from the namespace and the arguments.
struct Geometry {
    nsid: NamespaceId,
    lba_size: usize,
    range: (u64, u64),
    units: u64,
}

/// Identify Namespace `nsid`, which must be active.
async fn active_namespace(
    ctrl: &Controller,
    nsid: NamespaceId,
) -> Result<nvme_spec::identify::IdentifyNamespace> {
    let ns = ctrl
        .identify_namespace(nsid)
        .await
        .with_context(|| format!("Identify Namespace {}", nsid.0))?;
    if ns.nsze == 0 {
        bail!("namespace {} is not active", nsid.0);
    }
    Ok(ns)
}

/// Namespace `nsid` (default: the first active one) and its Identify data.
pub(crate) async fn namespace(
    ctrl: &Controller,
    nsid: Option<u32>,
) -> Result<(NamespaceId, nvme_spec::identify::IdentifyNamespace)> {
    let nsid = match nsid {
        Some(n) => NamespaceId(n),
        None => *ctrl
            .active_namespaces()
            .await
            .context("Identify Active Namespace List")?
            .first()
            .context("the subsystem has no active namespace")?,
    };
    Ok((nsid, active_namespace(ctrl, nsid).await?))
}

async fn geometry(a: &PerfArgs, ctrl: &Controller) -> Result<Geometry> {
    let (nsid, ns) = namespace(ctrl, a.nsid).await?;
    let lba_size = ns.lba_size() as usize;
    let bs = a.bs as usize;
    if !bs.is_multiple_of(lba_size) || bs / lba_size > 65536 {
        bail!(
            "--bs {bs} must be a multiple of the {lba_size}-byte block size, at most 65536 blocks"
        );
    }
    if let Some(m) = ctrl.max_transfer()
        && bs > m
    {
        bail!("--bs {bs} exceeds the controller's maximum transfer (MDTS) of {m} bytes");
    }
    let ns_bytes = ns.nsze.saturating_mul(lba_size as u64);
    let (start, end) = a.range.unwrap_or((0, ns_bytes));
    if start % lba_size as u64 != 0 {
        bail!("--range start {start} is not a multiple of the {lba_size}-byte block size");
    }
    if end > ns_bytes {
        bail!("--range end {end} is beyond the namespace ({ns_bytes} bytes)");
    }
    let units = (end - start) / bs as u64;
    if units == 0 {
        bail!("--range {start}-{end} holds no {bs}-byte block");
    }
    Ok(Geometry {
        nsid,
        lba_size,
        range: (start, start + units * bs as u64),
        units,
    })
}

/// Run the workload `a` describes on `ctrl` (connected with at least `queues` I/O queues).
pub(crate) async fn run(
    a: &PerfArgs,
    ctrl: &Controller,
    addr: SocketAddr,
    cores: Option<Vec<usize>>,
    queues: usize,
) -> Result<Report> {
    let g = geometry(a, ctrl).await?;
    let qd = usize::from(a.qd);
    let connector = ctrl.io_connector();
    if qd + 1 > connector.max_entries() as usize {
        bail!(
            "--qd {qd} needs {} queue entries; the controller allows {} (CAP.MQES)",
            qd + 1,
            connector.max_entries()
        );
    }
    if let Some(n) = ctrl.io_queues_granted()
        && usize::from(n) < queues
    {
        bail!("the controller granted {n} I/O queues, --queues asks for {queues}");
    }
    // Regions per queue.
    let private = a.verify || a.rw.pattern() == Pattern::Sequential;
    if a.verify && g.units > MAX_VERIFY_UNITS {
        bail!(
            "--verify over {} blocks of {} B needs too much memory; narrow --range",
            g.units,
            a.bs
        );
    }
    let per_queue = g.units / queues as u64;
    if private && per_queue == 0 {
        bail!(
            "--range holds {} blocks of {} B, fewer than --queues {queues}",
            g.units,
            a.bs
        );
    }
    if a.verify && per_queue <= qd as u64 {
        bail!(
            "--verify needs more than --qd ({qd}) blocks of {} B per queue; the range gives {per_queue}",
            a.bs
        );
    }
    if a.verify_log.is_some() && g.units > u64::from(u32::MAX) {
        bail!("--verify-log supports at most 2^32 units; narrow --range");
    }
    let threads = match &cores {
        Some(c) => c.len().min(queues),
        None => queues.min(std::thread::available_parallelism().map_or(1, |n| n.get())),
    };
    // Tells this run's blocks from an earlier run's.
    let run_id = (std::process::id().rotate_left(16) ^ nanos_now()) | 1;
    let bs = a.bs as usize;
    let read_pct = a.rw.read_pct(a.mix);
    let nlb = (bs / g.lba_size) as u64;
    let first_lba = g.range.0 / g.lba_size as u64;
    let log = match &a.verify_log {
        Some(p) => Some(vlog::LogWriter::create(
            p,
            &vlog::LogHeader {
                run_id,
                nsid: g.nsid.0,
                lba_size: g.lba_size as u32,
                bs: bs as u32,
                queues: queues as u32,
                first_lba,
                units: g.units,
                created: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs()),
            },
        )?),
        None => None,
    };
    let specs: Vec<JobSpec> = (0..queues)
        .map(|i| {
            let (region_lba, units) = if private {
                let first = i as u64 * per_queue;
                let last = if i + 1 == queues {
                    g.units
                } else {
                    first + per_queue
                };
                (
                    g.range.0 / g.lba_size as u64 + first * (bs / g.lba_size) as u64,
                    last - first,
                )
            } else {
                (g.range.0 / g.lba_size as u64, g.units)
            };
            JobSpec {
                qid: (i + 1) as u16,
                nsid: g.nsid,
                lba_size: g.lba_size,
                bs,
                qd,
                region_lba,
                units,
                pattern: a.rw.pattern(),
                read_pct,
                verify: a.verify,
                prefill: a.verify && read_pct > 0,
                readback: a.verify && read_pct < 100,
                seed: u64::from(run_id).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (i as u64 + 1),
                run_id,
                dissqfc: a.dissqfc,
                busy_poll: !a.no_busy_poll,
                flush_every: a.flush_every,
                flush_at_end: a.flush_at_end,
                fua: a.fua,
                log: log
                    .as_ref()
                    .map(|l| l.sink(((region_lba - first_lba) / nlb) as u32)),
                rate: a.rate_iops.map(|r| r / queues as f64),
                budget: a
                    .passes
                    .map(|p| ((g.units as f64 * p) / queues as f64).ceil().max(1.0) as u64),
            }
        })
        .collect();

    let workload = Workload {
        target: addr.to_string(),
        subnqn: a.target.nqn.clone(),
        nsid: g.nsid.0,
        lba_size: g.lba_size,
        rw: a.rw.name(),
        read_pct,
        bs,
        qd,
        queues,
        cores: cores.clone(),
        threads,
        runtime_s: a.runtime.as_secs_f64(),
        ramp_s: a.ramp.as_secs_f64(),
        range: g.range,
        verify: a.verify,
        hdr_digest: a.hdr_digest,
        data_digest: a.data_digest,
        flush_every: a.flush_every,
        flush_at_end: a.flush_at_end,
        fua: a.fua,
        verify_log: log.as_ref().map(|l| l.path().display().to_string()),
    };
    if a.verify && read_pct > 0 && !a.json {
        eprintln!(
            "perf: prefilling {} MiB for --verify",
            (g.range.1 - g.range.0) >> 20
        );
    }

    let progress = Arc::new(Progress::default());
    let (ready_tx, mut ready_rx) = mpsc::unbounded_channel();
    let (done_tx, mut done_rx) = mpsc::unbounded_channel();
    let (phase_tx, phase_rx) = watch::channel(Phase::Wait);
    let mut handles = Vec::new();
    for t in 0..threads {
        let mine: Vec<JobSpec> = specs.iter().skip(t).step_by(threads).cloned().collect();
        let core = cores.as_ref().map(|c| c[t]);
        let (connector, progress, ready, done, phase) = (
            connector.clone(),
            progress.clone(),
            ready_tx.clone(),
            done_tx.clone(),
            phase_rx.clone(),
        );
        let h = std::thread::Builder::new()
            .name(format!("perf-{t}"))
            .spawn(move || worker(core, mine, connector, progress, ready, done, phase))
            .context("cannot start a worker thread")?;
        handles.push(h);
    }
    drop((ready_tx, done_tx));
    // The jobs own the log sinks now: the log ends when the last job has.
    drop(specs);
    let finish_log = |log: Option<vlog::LogWriter>| -> Result<()> {
        match log {
            Some(l) => l.finish(),
            None => Ok(()),
        }
    };

    // Every queue connected (and prefilled)?
    let mut setup_errors = Vec::new();
    for _ in 0..queues {
        match ready_rx.recv().await {
            Some(Ok(())) => {}
            Some(Err(e)) => setup_errors.push(e),
            None => {
                setup_errors.push("a worker thread died".into());
                break;
            }
        }
    }
    if !setup_errors.is_empty() {
        let _ = phase_tx.send(Phase::Abort);
        join(handles);
        finish_log(log)?;
        bail!("{}", setup_errors.join("; "));
    }

    let start = Instant::now();
    let timing = Timing {
        ramp_end: start + a.ramp,
        end: start + a.ramp + a.runtime,
    };
    let _ = phase_tx.send(Phase::Go(timing));
    let show = !a.json && std::io::stdout().is_terminal();
    let mut cpu0 = None;
    let mut tick = tokio::time::interval_at(
        (start + Duration::from_secs(1)).into(),
        Duration::from_secs(1),
    );
    let (mut last_ios, mut last_bytes) = (0u64, 0u64);
    // A job that ends before the run does has lost its connection: stop the whole run there,
    // so that the figures cover only the time the target was answering.
    let mut results: Vec<JobResult> = Vec::new();
    let mut stopped_at: Option<Instant> = None;
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(timing.ramp_end.into()), if cpu0.is_none() => cpu0 = Some(Cpu::now()),
            _ = tokio::time::sleep_until(timing.end.into()) => break,
            Some(j) = done_rx.recv() => {
                let now = Instant::now();
                // A job that issued its --passes budget is done, not lost: the run ends when
                // the last one is.
                if a.passes.is_some() && j.transport_error.is_none() {
                    results.push(j);
                    if results.len() == queues {
                        stopped_at = Some(now);
                        break;
                    }
                    continue;
                }
                // A job that ends with the run (the timer fires up to a tick late) is normal;
                // one that ends before it lost its connection.
                if now < timing.end {
                    progress.stop.store(true, Ordering::Relaxed);
                    if !a.json {
                        eprintln!(
                            "perf: stopping after {:.1} s: queue {} ended early{}",
                            now.duration_since(start).as_secs_f64(),
                            j.qid,
                            j.transport_error.as_deref().map(|e| format!(" ({e})")).unwrap_or_default()
                        );
                    }
                    stopped_at = Some(now);
                }
                results.push(j);
                break;
            }
            _ = tick.tick() => {
                let ios = progress.ios.load(Ordering::Relaxed);
                let bytes = progress.bytes.load(Ordering::Relaxed);
                let errors = progress.errors.load(Ordering::Relaxed);
                if show {
                    let el = start.elapsed().as_secs();
                    let tag = if Instant::now() < timing.ramp_end { " (ramp)" } else { "" };
                    println!(
                        "[{el:>4}s] {:>9.0} IOPS {:>9.1} MiB/s  errors {errors}{tag}",
                        ios.saturating_sub(last_ios) as f64,
                        bytes.saturating_sub(last_bytes) as f64 / (1 << 20) as f64,
                    );
                }
                (last_ios, last_bytes) = (ios, bytes);
            }
        }
    }
    let cpu1 = Cpu::now();
    let cpu = cpu1.since(cpu0.unwrap_or(cpu1));
    // The measured window: from the end of the ramp to the end, or to the failure.
    let window = match stopped_at {
        Some(t) => t.min(timing.end).saturating_duration_since(timing.ramp_end),
        None => a.runtime,
    };

    while let Some(j) = done_rx.recv().await {
        results.push(j);
    }
    join(handles);
    finish_log(log)?;
    if results.len() != queues {
        bail!(
            "{} of {queues} perf jobs did not finish",
            queues - results.len()
        );
    }
    results.sort_by_key(|j| j.qid);
    Ok(Report::new(workload, window, &results, cpu))
}

fn nanos_now() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
}

fn join(handles: Vec<std::thread::JoinHandle<()>>) {
    for h in handles {
        let _ = h.join();
    }
}

/// A worker thread: pin, start a current-thread runtime, run its jobs as tasks.
fn worker(
    core: Option<usize>,
    specs: Vec<JobSpec>,
    connector: IoConnector,
    progress: Arc<Progress>,
    ready: mpsc::UnboundedSender<Result<(), String>>,
    done: mpsc::UnboundedSender<JobResult>,
    phase: watch::Receiver<Phase>,
) {
    let fail_all = |e: String| {
        for _ in &specs {
            let _ = ready.send(Err(e.clone()));
        }
    };
    if let Some(c) = core
        && let Err(e) = affinity::pin_current_thread(c)
    {
        return fail_all(e);
    }
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => return fail_all(format!("{e:#}")),
    };
    rt.block_on(async {
        let handles: Vec<_> = specs
            .into_iter()
            .map(|s| {
                let job = job::run(
                    s,
                    connector.clone(),
                    progress.clone(),
                    ready.clone(),
                    phase.clone(),
                );
                let done = done.clone();
                // Each job reports as soon as it ends (a job that loses its connection ends
                // early, and the orchestrator stops the run there). Setup failures were
                // already reported through `ready`; a panic shows as a job that did not finish.
                tokio::spawn(async move {
                    if let Ok(j) = job.await {
                        let _ = done.send(j);
                    }
                })
            })
            .collect();
        for h in handles {
            let _ = h.await;
        }
    });
}
