//! The orchestrator of a perf run, in the order it happens: [`Layout`] (what the namespace and
//! the controller allow: queue depth, queues, regions, threads), the verify log and the
//! [`JobSpec`]s, the [`Crew`] of worker threads and their readiness, the measuring loop
//! ([`measure`]) and the summary ([`summarize`]).
//!
//! None of it is on the data path: each job (`job.rs`) runs its own loop on its own queue and
//! meets the orchestrator only through the `Progress` atomics (once per poll) and channels
//! (once per job).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use ebof_affinity as affinity;
use nvmf_host::{Controller, IoConnector};
use tokio::sync::{mpsc, watch};

use super::job::{self, JobSpec, Pattern, Phase, Progress, Timing};
use super::report::{Cpu, JobResult, Report, Workload};
use super::vlog;
use super::{Event, Geometry, PerfOptions, geometry};
use crate::Endpoint;

/// Most `bs` units `verify` tracks (5 bytes each: generation + in-flight flag), 80 MiB.
const MAX_VERIFY_UNITS: u64 = 16 << 20;

/// Run the workload `opts` describes on `ctrl` (connected with at least the run's queues).
pub(super) async fn run(
    opts: &PerfOptions,
    ctrl: &Controller,
    ep: &Endpoint,
    events: &mut dyn FnMut(Event<'_>),
) -> Result<Report> {
    opts.check()?;
    let queues = opts.queue_count()?;
    let g = geometry(opts, ctrl).await?;
    let connector = ctrl.io_connector();
    let layout = Layout::new(opts, ctrl, &connector, g, queues)?;
    let log = open_log(opts, &layout)?;
    let specs = job_specs(opts, &layout, log.as_ref());
    let workload = workload(opts, ep, &layout, log.as_ref());
    if opts.verify && layout.read_pct > 0 {
        let (start, end) = layout.g.range;
        events(Event::Prefilling {
            mib: (end - start) >> 20,
        });
    }
    let progress = Arc::new(Progress::default());
    // The jobs own the log sinks from here: the log ends when the last job has.
    let mut crew = Crew::start(&layout, opts.cores.as_deref(), specs, connector, &progress)?;
    if let Err(e) = crew.wait_ready(queues).await {
        let _ = crew.phase.send(Phase::Abort);
        join(crew.handles);
        finish_log(log)?;
        return Err(e);
    }
    let measured = measure(opts, queues, &progress, &mut crew, events).await;
    summarize(opts, workload, measured, crew, log).await
}

/// Sizes and counts of the run, checked against the controller.
struct Layout {
    g: Geometry,
    queues: usize,
    qd: usize,
    /// Worker threads.
    threads: usize,
    /// Each queue has its own slice of the range (else every queue roams all of it).
    private: bool,
    /// Units per queue's slice (the last queue also takes the remainder).
    per_queue: u64,
    /// Tells this run's blocks from an earlier run's.
    run_id: u32,
    bs: usize,
    read_pct: u8,
}

impl Layout {
    fn new(
        opts: &PerfOptions,
        ctrl: &Controller,
        connector: &IoConnector,
        g: Geometry,
        queues: usize,
    ) -> Result<Layout> {
        let qd = usize::from(opts.qd);
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
        let private = opts.verify || opts.rw.pattern() == Pattern::Sequential;
        if opts.verify && g.units > MAX_VERIFY_UNITS {
            bail!(
                "--verify over {} blocks of {} B needs too much memory; narrow --range",
                g.units,
                opts.bs
            );
        }
        let per_queue = g.units / queues as u64;
        if private && per_queue == 0 {
            bail!(
                "--range holds {} blocks of {} B, fewer than --queues {queues}",
                g.units,
                opts.bs
            );
        }
        if opts.verify && per_queue <= qd as u64 {
            bail!(
                "--verify needs more than --qd ({qd}) blocks of {} B per queue; the range gives {per_queue}",
                opts.bs
            );
        }
        if opts.verify_log.is_some() && g.units > u64::from(u32::MAX) {
            bail!("--verify-log supports at most 2^32 units; narrow --range");
        }
        let threads = match &opts.cores {
            Some(c) => c.len().min(queues),
            None => queues.min(std::thread::available_parallelism().map_or(1, |n| n.get())),
        };
        Ok(Layout {
            g,
            queues,
            qd,
            threads,
            private,
            per_queue,
            run_id: (std::process::id().rotate_left(16) ^ nanos_now()) | 1,
            bs: opts.bs as usize,
            read_pct: opts.rw.read_pct(opts.mix),
        })
    }

    /// Blocks per I/O.
    fn nlb(&self) -> u64 {
        (self.bs / self.g.lba_size) as u64
    }

    /// First LBA of the range.
    fn first_lba(&self) -> u64 {
        self.g.range.0 / self.g.lba_size as u64
    }

    /// Queue `i`'s region: its first LBA and its number of units.
    fn region(&self, i: usize) -> (u64, u64) {
        if !self.private {
            return (self.first_lba(), self.g.units);
        }
        let first = i as u64 * self.per_queue;
        let last = if i + 1 == self.queues {
            self.g.units
        } else {
            first + self.per_queue
        };
        (self.first_lba() + first * self.nlb(), last - first)
    }
}

/// The verify log, if asked for, with its header written.
fn open_log(opts: &PerfOptions, l: &Layout) -> Result<Option<vlog::LogWriter>> {
    let Some(p) = &opts.verify_log else {
        return Ok(None);
    };
    let header = vlog::LogHeader {
        run_id: l.run_id,
        nsid: l.g.nsid.0,
        lba_size: l.g.lba_size as u32,
        bs: l.bs as u32,
        queues: l.queues as u32,
        first_lba: l.first_lba(),
        units: l.g.units,
        created: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    };
    vlog::LogWriter::create(p, &header).map(Some)
}

fn finish_log(log: Option<vlog::LogWriter>) -> Result<()> {
    match log {
        Some(l) => l.finish(),
        None => Ok(()),
    }
}

/// One job per queue.
fn job_specs(opts: &PerfOptions, l: &Layout, log: Option<&vlog::LogWriter>) -> Vec<JobSpec> {
    let queues = l.queues;
    (0..queues)
        .map(|i| {
            let (region_lba, units) = l.region(i);
            JobSpec {
                qid: (i + 1) as u16,
                nsid: l.g.nsid,
                lba_size: l.g.lba_size,
                bs: l.bs,
                qd: l.qd,
                region_lba,
                units,
                pattern: opts.rw.pattern(),
                read_pct: l.read_pct,
                verify: opts.verify,
                prefill: opts.verify && l.read_pct > 0,
                readback: opts.verify && l.read_pct < 100,
                seed: u64::from(l.run_id).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (i as u64 + 1),
                run_id: l.run_id,
                dissqfc: opts.dissqfc,
                busy_poll: opts.busy_poll,
                flush_every: opts.flush_every,
                flush_at_end: opts.flush_at_end,
                fua: opts.fua,
                log: log.map(|w| w.sink(((region_lba - l.first_lba()) / l.nlb()) as u32)),
                rate: opts.rate_iops.map(|r| r / queues as f64),
                budget: opts
                    .passes
                    .map(|p| ((l.g.units as f64 * p) / queues as f64).ceil().max(1.0) as u64),
            }
        })
        .collect()
}

/// The workload as the report echoes it.
fn workload(
    opts: &PerfOptions,
    ep: &Endpoint,
    l: &Layout,
    log: Option<&vlog::LogWriter>,
) -> Workload {
    Workload {
        target: ep.addr.to_string(),
        subnqn: ep.subnqn.clone(),
        nsid: l.g.nsid.0,
        lba_size: l.g.lba_size,
        rw: opts.rw.name(),
        read_pct: l.read_pct,
        bs: l.bs,
        qd: l.qd,
        queues: l.queues,
        cores: opts.cores.clone(),
        threads: l.threads,
        runtime_s: opts.runtime.as_secs_f64(),
        ramp_s: opts.ramp.as_secs_f64(),
        range: l.g.range,
        verify: opts.verify,
        hdr_digest: ep.host.hdr_digest,
        data_digest: ep.host.data_digest,
        flush_every: opts.flush_every,
        flush_at_end: opts.flush_at_end,
        fua: opts.fua,
        verify_log: log.map(|w| w.path().display().to_string()),
    }
}

/// The worker threads and the orchestrator's ends of their channels.
struct Crew {
    handles: Vec<JoinHandle<()>>,
    /// One message per job: connected (and prefilled), or why not.
    ready: mpsc::UnboundedReceiver<Result<(), String>>,
    /// Each job's result, as soon as it ends.
    done: mpsc::UnboundedReceiver<JobResult>,
    phase: watch::Sender<Phase>,
}

impl Crew {
    /// Start `layout.threads` workers; thread `t` runs jobs `t`, `t + threads`, … (round
    /// robin), pinned to `cores[t]` if given.
    fn start(
        layout: &Layout,
        cores: Option<&[usize]>,
        specs: Vec<JobSpec>,
        connector: IoConnector,
        progress: &Arc<Progress>,
    ) -> Result<Crew> {
        let threads = layout.threads;
        let mut per_thread: Vec<Vec<JobSpec>> = (0..threads).map(|_| Vec::new()).collect();
        for (i, s) in specs.into_iter().enumerate() {
            per_thread[i % threads].push(s);
        }
        let (ready_tx, ready) = mpsc::unbounded_channel();
        let (done_tx, done) = mpsc::unbounded_channel();
        let (phase, phase_rx) = watch::channel(Phase::Wait);
        let mut handles = Vec::new();
        for (t, mine) in per_thread.into_iter().enumerate() {
            let worker = Worker {
                core: cores.map(|c| c[t]),
                specs: mine,
                connector: connector.clone(),
                progress: progress.clone(),
                ready: ready_tx.clone(),
                done: done_tx.clone(),
                phase: phase_rx.clone(),
            };
            let h = std::thread::Builder::new()
                .name(format!("perf-{t}"))
                .spawn(move || worker.run())
                .context("cannot start a worker thread")?;
            handles.push(h);
        }
        Ok(Crew {
            handles,
            ready,
            done,
            phase,
        })
    }

    /// Wait until every queue is connected (and prefilled); `Err`: every setup failure.
    async fn wait_ready(&mut self, queues: usize) -> Result<()> {
        let mut setup_errors = Vec::new();
        for _ in 0..queues {
            match self.ready.recv().await {
                Some(Ok(())) => {}
                Some(Err(e)) => setup_errors.push(e),
                None => {
                    setup_errors.push("a worker thread died".into());
                    break;
                }
            }
        }
        if !setup_errors.is_empty() {
            bail!("{}", setup_errors.join("; "));
        }
        Ok(())
    }
}

fn nanos_now() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
}

fn join(handles: Vec<JoinHandle<()>>) {
    for h in handles {
        let _ = h.join();
    }
}

/// A worker thread's share: its core, its jobs and its ends of the channels.
struct Worker {
    core: Option<usize>,
    specs: Vec<JobSpec>,
    connector: IoConnector,
    progress: Arc<Progress>,
    ready: mpsc::UnboundedSender<Result<(), String>>,
    done: mpsc::UnboundedSender<JobResult>,
    phase: watch::Receiver<Phase>,
}

impl Worker {
    /// Pin, start a current-thread runtime, run the jobs as tasks.
    fn run(self) {
        let fail_all = |e: String| {
            for _ in &self.specs {
                let _ = self.ready.send(Err(e.clone()));
            }
        };
        if let Some(c) = self.core
            && let Err(e) = affinity::pin_current_thread(c)
        {
            return fail_all(e);
        }
        let rt = match crate::runtime() {
            Ok(rt) => rt,
            Err(e) => return fail_all(format!("{e:#}")),
        };
        rt.block_on(self.jobs());
    }

    async fn jobs(self) {
        let handles: Vec<_> = self
            .specs
            .into_iter()
            .map(|s| {
                let job = job::run(
                    s,
                    self.connector.clone(),
                    self.progress.clone(),
                    self.ready.clone(),
                    self.phase.clone(),
                );
                let done = self.done.clone();
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
    }
}

/// What the measuring loop saw.
struct Measured {
    timing: Timing,
    /// Results of the jobs that ended during the loop.
    results: Vec<JobResult>,
    /// When the run stopped before its end (a queue lost, or every `passes` budget spent).
    stopped_at: Option<Instant>,
    /// CPU time of the measured window.
    cpu: Cpu,
}

/// Start the jobs and watch them: a tick a second for `events`, the CPU clock at the end of
/// the ramp, and the first job that ends. A job that ends before the run does has lost its
/// connection: stop the whole run there, so that the figures cover only the time the target
/// was answering. With `passes`, jobs that spent their budget end the run when the last does.
async fn measure(
    opts: &PerfOptions,
    queues: usize,
    progress: &Progress,
    crew: &mut Crew,
    events: &mut dyn FnMut(Event<'_>),
) -> Measured {
    let start = Instant::now();
    let timing = Timing {
        ramp_end: start + opts.ramp,
        end: start + opts.ramp + opts.runtime,
    };
    let _ = crew.phase.send(Phase::Go(timing));
    let mut cpu0 = None;
    let mut tick = tokio::time::interval_at(
        (start + Duration::from_secs(1)).into(),
        Duration::from_secs(1),
    );
    let (mut last_ios, mut last_bytes) = (0u64, 0u64);
    let mut results: Vec<JobResult> = Vec::new();
    let mut stopped_at: Option<Instant> = None;
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(timing.ramp_end.into()), if cpu0.is_none() => cpu0 = Some(Cpu::now()),
            _ = tokio::time::sleep_until(timing.end.into()) => break,
            Some(j) = crew.done.recv() => {
                let now = Instant::now();
                // A job that issued its --passes budget is done, not lost: the run ends when
                // the last one is.
                if opts.passes.is_some() && j.transport_error.is_none() {
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
                    events(Event::StoppedEarly {
                        after_s: now.duration_since(start).as_secs_f64(),
                        qid: j.qid,
                        error: j.transport_error.as_deref(),
                    });
                    stopped_at = Some(now);
                }
                results.push(j);
                break;
            }
            _ = tick.tick() => {
                let ios = progress.ios.load(Ordering::Relaxed);
                let bytes = progress.bytes.load(Ordering::Relaxed);
                events(Event::Tick {
                    elapsed_s: start.elapsed().as_secs(),
                    ios: ios.saturating_sub(last_ios),
                    bytes: bytes.saturating_sub(last_bytes),
                    errors: progress.errors.load(Ordering::Relaxed),
                    ramp: Instant::now() < timing.ramp_end,
                });
                (last_ios, last_bytes) = (ios, bytes);
            }
        }
    }
    let cpu1 = Cpu::now();
    Measured {
        timing,
        results,
        stopped_at,
        cpu: cpu1.since(cpu0.unwrap_or(cpu1)),
    }
}

/// Collect the remaining results, stop the workers and the log, and merge the report over the
/// measured window: from the end of the ramp to the end, or to the failure.
async fn summarize(
    opts: &PerfOptions,
    workload: Workload,
    m: Measured,
    mut crew: Crew,
    log: Option<vlog::LogWriter>,
) -> Result<Report> {
    let queues = workload.queues;
    let window = match m.stopped_at {
        Some(t) => t
            .min(m.timing.end)
            .saturating_duration_since(m.timing.ramp_end),
        None => opts.runtime,
    };
    let mut results = m.results;
    while let Some(j) = crew.done.recv().await {
        results.push(j);
    }
    join(crew.handles);
    finish_log(log)?;
    if results.len() != queues {
        bail!(
            "{} of {queues} perf jobs did not finish",
            queues - results.len()
        );
    }
    results.sort_by_key(|j| j.qid);
    Ok(Report::new(workload, window, &results, m.cpu))
}
