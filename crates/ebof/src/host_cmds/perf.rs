//! `ebof perf`: the flags, their conversion into `ebof_perf::perf`'s options, and the output
//! (a progress line a second on a terminal, the report as text or JSON, the exit status). The
//! load generator, the verify log and the reports are the `ebof-perf` library.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Result;
use ebof_affinity as affinity;
use ebof_perf::Endpoint;
use ebof_perf::perf::{self, Event, PerfOptions, RwMode, verify_only, vlog};

use super::common::{
    SecurityArgs, SubsystemArgs, apply_transport, parse_duration, parse_range, parse_size, resolve,
};

/// Access pattern and direction (fio's `rw=` names).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum RwArg {
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

impl From<RwArg> for RwMode {
    fn from(a: RwArg) -> RwMode {
        match a {
            RwArg::Read => RwMode::Read,
            RwArg::Write => RwMode::Write,
            RwArg::RandRead => RwMode::RandRead,
            RwArg::RandWrite => RwMode::RandWrite,
            RwArg::RandRw => RwMode::RandRw,
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct PerfArgs {
    #[command(flatten)]
    pub target: SubsystemArgs,
    /// Namespace (default: the first active one).
    #[arg(long, value_name = "N")]
    pub nsid: Option<u32>,
    /// Workload.
    #[arg(long, value_enum, default_value_t = RwArg::RandRead)]
    pub rw: RwArg,
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
    #[arg(short = 'g', long)]
    pub hdr_digest: bool,
    /// Ask for the NVMe/TCP data digest.
    #[arg(short = 'G', long)]
    pub data_digest: bool,
    /// Keep SQ flow control on the I/O queues. By default `ebof perf` asks the target to
    /// disable it (Connect CATTR.DISSQFC, NVMe/TCP 1.0 3.3.8.1), so that a read can complete
    /// with its last C2HData PDU (SUCCESS flag) and no CapsuleResp: the host then hands the data
    /// over straight from its receive buffer. A target may refuse; nothing else changes.
    #[arg(long, conflicts_with = "dissqfc")]
    pub sqfc: bool,
    /// Accepted for compatibility: disabling SQ flow control is the default (see --sqfc).
    #[arg(long, hide = true)]
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
    #[command(flatten)]
    pub host: super::common::HostIdArgs,
    #[command(flatten)]
    pub security: SecurityArgs,
    /// Wait for completions in epoll instead of polling the sockets (by default each worker
    /// polls without sleeping while I/O is in flight, as spdk_nvme_perf does).
    #[arg(long)]
    pub no_busy_poll: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Output format, as nvme-cli's `-o`: `normal` or `json` (the same as `--json`).
    #[arg(short = 'o', long = "output-format", value_name = "FMT", value_enum)]
    pub output_format: Option<super::common::OutputFormat>,
}

pub fn perf(mut a: PerfArgs) -> Result<()> {
    a.json = super::common::wants_json(a.json, a.output_format);
    perf::check_qd(a.qd)?;
    if let (true, Some(log)) = (a.verify_only, &a.verify_log) {
        return verify_only(&a, log);
    }
    let opts = options(&a)?;
    let ep = endpoint(&a)?;
    let show = !a.json && std::io::stdout().is_terminal();
    let report = perf::connect_and_run(&ep, &opts, &mut |e| print_event(e, a.json, show))?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report.to_json())?);
    } else {
        print!("{}", report.to_text());
    }
    report.verdict()
}

/// The run's options, checked as far as they can be without a target (in the order the
/// flags' errors have always been reported: --qd, --verify-log, --bs, --runtime, --cores,
/// --queues).
fn options(a: &PerfArgs) -> Result<PerfOptions> {
    let mut opts = PerfOptions {
        nsid: a.nsid,
        rw: a.rw.into(),
        mix: a.mix,
        bs: a.bs,
        qd: a.qd,
        queues: a.queues,
        cores: None,
        runtime: a.runtime,
        ramp: a.ramp,
        range: a.range,
        dissqfc: !a.sqfc,
        verify: a.verify,
        flush_every: a.flush_every,
        flush_at_end: a.flush_at_end,
        fua: a.fua,
        verify_log: a.verify_log.clone(),
        busy_poll: !a.no_busy_poll,
        rate_iops: None,
        passes: None,
    };
    opts.check()?;
    opts.cores = a
        .cores
        .as_deref()
        .map(affinity::parse_core_list)
        .transpose()
        .map_err(|e| anyhow::anyhow!("--cores: {e}"))?;
    opts.queue_count()?;
    Ok(opts)
}

/// The target and the host's side: address, host NQN, secrets, digests, transport (the
/// library sets the number of I/O queues).
fn endpoint(a: &PerfArgs) -> Result<Endpoint> {
    let addr = resolve(&a.target.traddr, a.target.trsvcid)?;
    let mut cfg = a.host.config()?;
    a.security.apply(&mut cfg)?;
    cfg.hdr_digest = a.hdr_digest;
    cfg.data_digest = a.data_digest;
    apply_transport(a.target.transport, &mut cfg)?;
    Ok(Endpoint {
        addr,
        subnqn: a.target.nqn.clone(),
        host: cfg,
    })
}

/// Progress of a run: a line a second on a terminal (`show`), notices on stderr (not with
/// `--json`).
fn print_event(e: Event<'_>, json: bool, show: bool) {
    match e {
        Event::Prefilling { mib } if !json => {
            eprintln!("perf: prefilling {mib} MiB for --verify");
        }
        Event::Tick {
            elapsed_s: el,
            ios,
            bytes,
            errors,
            ramp,
        } if show => {
            let tag = if ramp { " (ramp)" } else { "" };
            println!(
                "[{el:>4}s] {:>9.0} IOPS {:>9.1} MiB/s  errors {errors}{tag}",
                ios as f64,
                bytes as f64 / (1 << 20) as f64,
            );
        }
        Event::StoppedEarly {
            after_s,
            qid,
            error,
        } if !json => {
            eprintln!(
                "perf: stopping after {after_s:.1} s: queue {qid} ended early{}",
                error.map(|e| format!(" ({e})")).unwrap_or_default()
            );
        }
        _ => {}
    }
}

/// `--verify-only`: read the log, check the range against it, print the verdict.
fn verify_only(a: &PerfArgs, log_path: &Path) -> Result<()> {
    let log = vlog::LogState::read(log_path)?;
    let ep = endpoint(a)?;
    let opts = verify_only::Options {
        nsid: a.nsid,
        queues: a.queues.unwrap_or(1).max(1),
        qd: a.qd,
        dissqfc: !a.sqfc,
    };
    let checked = verify_only::run(&ep, &opts, log_path, log)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&checked.to_json())?);
    } else {
        print!("{}", checked.to_text());
    }
    checked.verdict()
}
