//! `ebof perf`'s engine: generate I/O against a namespace and report IOPS, bandwidth, latency
//! percentiles, the tool's CPU cost per I/O and errors.
//!
//! Layout: one admin connection on the caller's thread (keep-alive runs there), and
//! [`PerfOptions::queues`] I/O queues, each its own TCP connection driven by one task (`job`).
//! Queues are spread round-robin over worker threads, one per [`PerfOptions::cores`] entry
//! (pinned, each with a current-thread tokio runtime) or, without cores, one per queue up to
//! the number of CPUs (unpinned). The orchestration (setup of the queues, the worker threads,
//! the measuring loop, the summary) is in `run`.
//!
//! Regions: random workloads without `verify` let every queue roam the whole range;
//! sequential workloads and every `verify` run give each queue its own slice of it (verify
//! needs a single writer per block to know what a block must contain).
//!
//! `verify` (see [`verify`]): writes self-describing blocks and checks every read. Workloads
//! that read (read, randread, randrw) first prefill each queue's slice (not timed); workloads
//! that write (write, randwrite, randrw) read everything back after the run. Mismatches are in
//! the report with their LBA; [`Report::verdict`] turns them and failed commands into an error.
//!
//! Durability (`flush_every`, `flush_at_end`, `verify_log`, [`verify_only`]): a `verify` run
//! can Flush as it goes and record in a log ([`vlog`]) which blocks were acknowledged, which a
//! completed Flush made durable and which were in flight when it ended; a later read-only run
//! ([`verify_only`]) reads the range without writing and checks it against that log, e.g.
//! after the target was killed and restarted.

mod job;
pub mod report;
mod run;
pub mod verify;
pub mod verify_only;
pub mod vlog;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use nvme_spec::NamespaceId;
use nvmf_host::Controller;

use crate::Endpoint;
use job::Pattern;
pub use report::Report;

/// Access pattern and direction (fio's `rw=` names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RwMode {
    /// Sequential reads.
    Read,
    /// Sequential writes.
    Write,
    /// Random reads.
    RandRead,
    /// Random writes.
    RandWrite,
    /// Random reads and writes, [`PerfOptions::mix`] percent reads.
    RandRw,
}

impl RwMode {
    /// fio's name of the workload (`randread`, …), as the report shows it.
    pub fn name(self) -> &'static str {
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

/// What a perf run does: the workload, its size and timing, and the verify and durability
/// options. [`Default`] is `ebof perf`'s defaults (randread, 4 KiB, QD32, 10 s, the whole
/// namespace, busy polling).
#[derive(Clone, Debug)]
pub struct PerfOptions {
    /// Namespace (`None`: the first active one).
    pub nsid: Option<u32>,
    /// Workload.
    pub rw: RwMode,
    /// Percentage of reads for [`RwMode::RandRw`] (0..=100).
    pub mix: u8,
    /// Bytes per I/O: a multiple of the namespace's block size.
    pub bs: u64,
    /// Commands in flight per queue (1..65535).
    pub qd: u16,
    /// I/O queues (TCP connections); `None`: one per [`PerfOptions::cores`] entry, else 1.
    pub queues: Option<u16>,
    /// Cores for the worker threads, one pinned thread per core (`None`: unpinned threads).
    pub cores: Option<Vec<usize>>,
    /// Measured duration.
    pub runtime: Duration,
    /// Warm-up before measuring.
    pub ramp: Duration,
    /// Byte range `[start, end)` of the namespace to use (`None`: all of it).
    pub range: Option<(u64, u64)>,
    /// Ask the target to disable SQ flow control on the I/O queues (Connect CATTR.DISSQFC).
    pub dissqfc: bool,
    /// Write self-checking blocks and check every read (see the module docs).
    pub verify: bool,
    /// Send a Flush on each queue after every this many successful writes (0: never).
    pub flush_every: u64,
    /// Send a Flush on each queue when the run ends (before the read-back).
    pub flush_at_end: bool,
    /// Write with Force Unit Access.
    pub fua: bool,
    /// With `verify`: record the run in this log file (created; never overwritten).
    pub verify_log: Option<PathBuf>,
    /// Poll the sockets without sleeping while I/O is in flight (`false`: wait in epoll).
    pub busy_poll: bool,
    /// Open loop: submit at this many commands per second over all queues (evenly spaced,
    /// each queue its share), never more than `qd` in flight; latency counts from when a
    /// command was due.
    pub rate_iops: Option<f64>,
    /// Stop once the queues together have issued this many passes over the range (fio's
    /// `loops=`), or at `runtime`, whichever comes first.
    pub passes: Option<f64>,
}

impl Default for PerfOptions {
    fn default() -> PerfOptions {
        PerfOptions {
            nsid: None,
            rw: RwMode::RandRead,
            mix: 50,
            bs: 4096,
            qd: 32,
            queues: None,
            cores: None,
            runtime: Duration::from_secs(10),
            ramp: Duration::ZERO,
            range: None,
            dissqfc: false,
            verify: false,
            flush_every: 0,
            flush_at_end: false,
            fua: false,
            verify_log: None,
            busy_poll: true,
            rate_iops: None,
            passes: None,
        }
    }
}

/// The queue depth must leave room for the extra queue entry NVMe needs.
pub fn check_qd(qd: u16) -> Result<()> {
    if qd == 0 || qd == u16::MAX {
        bail!("--qd must be 1..{}", u16::MAX - 1);
    }
    Ok(())
}

impl PerfOptions {
    /// Check the options that need no namespace, in `ebof perf`'s order: queue depth, verify
    /// log, block size, runtime. (The number of queues is [`PerfOptions::queue_count`].)
    pub fn check(&self) -> Result<()> {
        check_qd(self.qd)?;
        if self.verify_log.is_some() && !self.verify {
            bail!("--verify-log needs --verify (or --verify-only to check an existing log)");
        }
        if self.bs == 0 {
            bail!("--bs must be > 0");
        }
        if self.runtime.is_zero() {
            bail!("--runtime must be > 0");
        }
        Ok(())
    }

    /// The number of I/O queues: [`PerfOptions::queues`], else one per core, else 1.
    pub fn queue_count(&self) -> Result<usize> {
        let queues = usize::from(
            self.queues.unwrap_or(
                self.cores
                    .as_ref()
                    .map_or(1, |c| c.len().min(usize::from(u16::MAX)) as u16),
            ),
        );
        if queues == 0 {
            bail!("--queues must be ≥ 1");
        }
        Ok(queues)
    }
}

/// What a run tells its caller while it goes (for a progress display; nothing here prints).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Event<'a> {
    /// `verify` of a workload that reads: the range is being written first (not timed).
    Prefilling {
        /// Size of the range in MiB.
        mib: u64,
    },
    /// Once a second of the run: what completed since the previous tick.
    Tick {
        /// Whole seconds since the start (ramp included).
        elapsed_s: u64,
        /// I/Os completed since the previous tick.
        ios: u64,
        /// Bytes transferred since the previous tick.
        bytes: u64,
        /// Failed commands since the start.
        errors: u64,
        /// Still in the ramp (not measured).
        ramp: bool,
    },
    /// A queue ended before the run did (it lost its connection): the run stops here and the
    /// report covers the time measured until now.
    StoppedEarly {
        /// Seconds since the start.
        after_s: f64,
        /// The queue that ended.
        qid: u16,
        /// Its connection error, if it had one.
        error: Option<&'a str>,
    },
}

/// Run the workload `opts` describes on `ctrl`, a controller of `ep` connected with at least
/// the run's number of I/O queues. `events` hears the run's progress.
pub async fn run(
    opts: &PerfOptions,
    ctrl: &Controller,
    ep: &Endpoint,
    events: &mut dyn FnMut(Event<'_>),
) -> Result<Report> {
    run::run(opts, ctrl, ep, events).await
}

/// Connect to `ep` with the run's number of I/O queues, [`run`], shut the controller down.
/// Blocks the calling thread (it runs its own current-thread runtime).
pub fn connect_and_run(
    ep: &Endpoint,
    opts: &PerfOptions,
    events: &mut dyn FnMut(Event<'_>),
) -> Result<Report> {
    opts.check()?;
    let queues = opts.queue_count()?;
    let rt = crate::runtime()?;
    rt.block_on(ep.with_controller(queues as u16, async |ctrl| {
        run(opts, ctrl, ep, events).await
    }))
}

/// Sizes derived from the namespace and the options.
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

/// Check `opts`' block size and range against namespace [`PerfOptions::nsid`] and the
/// controller, and derive the run's sizes.
async fn geometry(opts: &PerfOptions, ctrl: &Controller) -> Result<Geometry> {
    let (nsid, ns) = namespace(ctrl, opts.nsid).await?;
    let lba_size = ns.lba_size() as usize;
    let bs = opts.bs as usize;
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
    let (start, end) = opts.range.unwrap_or((0, ns_bytes));
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
