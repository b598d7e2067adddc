//! `perf --verify-only --verify-log FILE`: read every block of an earlier `--verify` run's range
//! and judge it against what that run's log says the target owes. No writes.
//!
//! Each block (logical block, LBA) is one of:
//! - **intact**: this run's block for this LBA, of a generation the log allows: the one covered
//!   by the last completed Flush (*flushed*), or a newer acknowledged one (*acknowledged*), or
//!   the one of a write in flight when the run ended (*in flight*);
//! - **never written**: no block of this run, and no flushed write owed;
//! - **stale** (durability violation): older than the flushed generation, or missing where a
//!   flushed generation is owed;
//! - **corrupt** (violation): a verify header whose checksum fails (a torn or corrupted block),
//!   which names another LBA (misdirected), or a generation this unit was never given.
//!
//! A write's blocks are not atomic together (only each block is, NVMe AWUPF), so a unit with a
//! write in flight (or, after a power loss, an unflushed one) may legally hold a mix of
//! generations; such units are counted as *torn units* for information, and are a violation
//! only through their blocks' classes.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use nvme_spec::NamespaceId;
use nvmf_host::{Completion, Controller, IoConnector, IoQueueOptions};
use serde_json::json;

use crate::Endpoint;

use super::report::MAX_REPORTED_MISMATCHES;
use super::verify::{self, SectorView, UNKNOWN};
use super::vlog::{LogState, UnitLog};

/// Which write an intact block's content comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The generation the last completed Flush covered.
    Flushed,
    /// A newer write that was acknowledged (or an older acknowledged one: an acknowledged write
    /// that was never flushed did not land).
    Acked,
    /// A write in flight when the run ended, or newer than an incomplete log.
    InFlight,
}

/// The verdict on one block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// A block of this run the log allows, and where it comes from.
    Intact(Source),
    /// No block of this run, and nothing flushed owed.
    NeverWritten,
    /// A durability violation, and why.
    Stale(&'static str),
    /// A torn, corrupted or misdirected block, and why.
    Corrupt(&'static str),
}

impl Class {
    /// Stale or corrupt.
    pub fn is_violation(self) -> bool {
        matches!(self, Class::Stale(_) | Class::Corrupt(_))
    }
    fn name(self) -> &'static str {
        match self {
            Class::Intact(_) => "intact",
            Class::NeverWritten => "never written",
            Class::Stale(_) => "stale",
            Class::Corrupt(_) => "corrupt",
        }
    }
}

/// Judge one block read at `lba` against the log's view of its unit. `log_complete`: the log
/// ends with `END` (otherwise generations newer than the log's are possible and allowed).
pub fn classify(sec: &[u8], lba: u64, run: u32, u: &UnitLog, log_complete: bool) -> Class {
    let owed = u.owed();
    let found = match verify::inspect(sec) {
        SectorView::Foreign => None,
        SectorView::Torn => return Class::Corrupt("checksum mismatch (torn or corrupted block)"),
        SectorView::Block {
            lba: l,
            run: r,
            generation,
        } => {
            if l != lba {
                return Class::Corrupt("block carries another LBA (misdirected write)");
            }
            (r == run).then_some(generation)
        }
    };
    let Some(g) = found else {
        return if owed == UNKNOWN {
            Class::NeverWritten
        } else {
            Class::Stale("a flushed block is missing (no block of this run)")
        };
    };
    if g == UNKNOWN || (log_complete && g > u.newest()) {
        return Class::Corrupt("generation never written to this block");
    }
    if g < owed {
        return Class::Stale("older than the flushed generation (a flushed write was lost)");
    }
    if g == owed {
        Class::Intact(Source::Flushed)
    } else if g <= u.acked {
        Class::Intact(Source::Acked)
    } else {
        Class::Intact(Source::InFlight)
    }
}

/// One bad block, for the report.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Finding {
    /// The block.
    pub lba: u64,
    /// `stale` or `corrupt`.
    pub class: &'static str,
    /// Why.
    pub reason: &'static str,
    /// Generation a completed Flush covered (0 = none).
    pub flushed_gen: u32,
    /// Newest acknowledged generation (0 = none).
    pub acked_gen: u32,
}

/// Counts over the blocks read.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Tally {
    /// Blocks read.
    pub blocks: u64,
    /// Intact blocks.
    pub intact: u64,
    /// Intact: the flushed generation.
    pub intact_flushed: u64,
    /// Intact: a newer acknowledged generation.
    pub intact_acked: u64,
    /// Intact: a write in flight at the end.
    pub intact_in_flight: u64,
    /// Never written.
    pub never_written: u64,
    /// Stale (violations).
    pub stale: u64,
    /// Corrupt (violations).
    pub corrupt: u64,
    /// Blocks for which a completed Flush owes a generation, and how many of them are intact.
    pub flushed_blocks: u64,
    /// Of `flushed_blocks`, the intact ones.
    pub flushed_intact: u64,
    /// Blocks (not violations) that do not hold their newest acknowledged generation: an
    /// acknowledged, unflushed write that did not survive (allowed by the write-cache contract).
    pub acked_not_found: u64,
    /// Units whose blocks do not all hold the same generation (see the module docs).
    pub torn_units: u64,
    /// Units that could not be read (command failed).
    pub unreadable_units: u64,
    #[serde(skip)]
    /// The first violations.
    pub findings: Vec<Finding>,
}

impl Tally {
    /// Judge one unit's blocks (`data` = the unit, read from `slba`).
    pub fn unit(
        &mut self,
        data: &[u8],
        slba: u64,
        lba_size: usize,
        run: u32,
        u: &UnitLog,
        complete: bool,
    ) {
        let mut first_gen: Option<Option<u32>> = None;
        let mut torn = false;
        for (i, sec) in data.chunks_exact(lba_size).enumerate() {
            let lba = slba + i as u64;
            let c = classify(sec, lba, run, u, complete);
            let g = match verify::inspect(sec) {
                SectorView::Block {
                    run: r, generation, ..
                } if r == run => Some(generation),
                _ => None,
            };
            match first_gen {
                None => first_gen = Some(g),
                Some(f) if f != g => torn = true,
                Some(_) => {}
            }
            self.block(lba, c, u, g);
        }
        self.torn_units += u64::from(torn);
    }

    fn block(&mut self, lba: u64, c: Class, u: &UnitLog, found_gen: Option<u32>) {
        self.blocks += 1;
        let owed = u.owed() != UNKNOWN;
        self.flushed_blocks += u64::from(owed);
        match c {
            Class::Intact(s) => {
                self.intact += 1;
                self.flushed_intact += u64::from(owed);
                match s {
                    Source::Flushed => self.intact_flushed += 1,
                    Source::Acked => self.intact_acked += 1,
                    Source::InFlight => self.intact_in_flight += 1,
                }
            }
            Class::NeverWritten => self.never_written += 1,
            Class::Stale(_) => self.stale += 1,
            Class::Corrupt(_) => self.corrupt += 1,
        }
        if !c.is_violation() && found_gen.unwrap_or(UNKNOWN) < u.acked {
            self.acked_not_found += 1;
        }
        if let Class::Stale(reason) | Class::Corrupt(reason) = c
            && self.findings.len() < MAX_REPORTED_MISMATCHES
        {
            self.findings.push(Finding {
                lba,
                class: c.name(),
                reason,
                flushed_gen: u.owed(),
                acked_gen: u.acked,
            });
        }
    }

    fn merge(&mut self, o: Tally) {
        self.blocks += o.blocks;
        self.intact += o.intact;
        self.intact_flushed += o.intact_flushed;
        self.intact_acked += o.intact_acked;
        self.intact_in_flight += o.intact_in_flight;
        self.never_written += o.never_written;
        self.stale += o.stale;
        self.corrupt += o.corrupt;
        self.flushed_blocks += o.flushed_blocks;
        self.flushed_intact += o.flushed_intact;
        self.acked_not_found += o.acked_not_found;
        self.torn_units += o.torn_units;
        self.unreadable_units += o.unreadable_units;
        let room = MAX_REPORTED_MISMATCHES.saturating_sub(self.findings.len());
        self.findings.extend(o.findings.into_iter().take(room));
    }

    /// Stale and corrupt blocks.
    pub fn violations(&self) -> u64 {
        self.stale + self.corrupt
    }
}

/// `perf --verify-only`: connect, read the whole range of the logged run, report.
/// What a read-only check reads, and how.
#[derive(Clone, Debug)]
pub struct Options {
    /// The namespace to read (`None`: the logged run's).
    pub nsid: Option<u32>,
    /// I/O queues reading in parallel (at least 1), each a slice of the range.
    pub queues: u16,
    /// Reads in flight per queue (1..65535; capped by the controller's queue size).
    pub qd: u16,
    /// Ask the target to disable SQ flow control on the I/O queues.
    pub dissqfc: bool,
}

/// The outcome of a read-only check: the log it used and the verdict on every block.
pub struct Checked {
    /// The log file, as given.
    pub log_path: PathBuf,
    /// The log, as read.
    pub log: Arc<LogState>,
    /// The target's address.
    pub target: String,
    /// The subsystem NQN.
    pub subnqn: String,
    /// The namespace read.
    pub nsid: u32,
    /// Counts and the first violations.
    pub tally: Tally,
}

/// Connect to `ep`, read the whole range of the run `log` (read from `log_path`) recorded,
/// and judge every block. Blocks the calling thread (it runs its own current-thread runtime).
pub fn run(ep: &Endpoint, opts: &Options, log_path: &Path, log: LogState) -> Result<Checked> {
    super::check_qd(opts.qd)?;
    let log = Arc::new(log);
    let queues = opts.queues.max(1);
    let rt = crate::runtime()?;
    let tally = rt.block_on(ep.with_controller(queues, async |ctrl| {
        read_all(opts, ctrl, &log, queues).await
    }))?;
    Ok(Checked {
        log_path: log_path.to_path_buf(),
        nsid: opts.nsid.unwrap_or(log.header.nsid),
        log,
        target: ep.addr.to_string(),
        subnqn: ep.subnqn.clone(),
        tally,
    })
}

impl Checked {
    /// The check as one JSON object (`ebof perf --verify-only --json`).
    pub fn to_json(&self) -> serde_json::Value {
        let (h, tally) = (&self.log.header, &self.tally);
        json!({
            "verify_only": {
                "log": self.log_path.display().to_string(),
                "run_id": format!("{:#010x}", h.run_id),
                "target": self.target,
                "subnqn": self.subnqn,
                "nsid": self.nsid,
                "lba_size": h.lba_size,
                "bs": h.bs,
                "range": [h.first_lba * u64::from(h.lba_size),
                          (h.first_lba + h.units * h.nlb()) * u64::from(h.lba_size)],
                "units": h.units,
            },
            "log": self.log.summary,
            "blocks": tally,
            "violations": tally.violations(),
            "findings": tally.findings,
        })
    }

    /// The check as text: the log's summary, a table of the classes, the first violations.
    pub fn to_text(&self) -> String {
        text(&self.tally, &self.log, &self.log_path, self.nsid)
    }

    /// `Ok` unless units could not be read or blocks are stale or corrupt.
    pub fn verdict(&self) -> Result<()> {
        let tally = &self.tally;
        if tally.unreadable_units > 0 {
            bail!("{} units could not be read", tally.unreadable_units);
        }
        if tally.violations() > 0 {
            bail!(
                "durability check failed: {} stale and {} corrupt blocks (first at LBA {})",
                tally.stale,
                tally.corrupt,
                tally.findings.first().map_or(0, |f| f.lba)
            );
        }
        Ok(())
    }
}

fn text(t: &Tally, log: &LogState, path: &Path, nsid: u32) -> String {
    let h = &log.header;
    let s = &log.summary;
    let start = h.first_lba * u64::from(h.lba_size);
    let end = (h.first_lba + h.units * h.nlb()) * u64::from(h.lba_size);
    let mut o = format!(
        "ebof perf --verify-only: run {:#010x}, nsid {nsid}, range {start}-{end} ({} units of {} B, {} B blocks)\n",
        h.run_id, h.units, h.bs, h.lba_size
    );
    o += &format!(
        "  log {}: {}; {} acknowledged writes{}, {} flushes completed, {} in flight at the end, {} failed\n",
        path.display(),
        if s.complete {
            "complete".to_string()
        } else if s.torn_tail_bytes > 0 {
            format!(
                "INCOMPLETE (perf died while writing it; {} torn bytes at the end)",
                s.torn_tail_bytes
            )
        } else {
            "INCOMPLETE (no end record: perf did not finish)".to_string()
        },
        s.acked_writes,
        if s.fua_writes > 0 {
            format!(" ({} with FUA)", s.fua_writes)
        } else {
            String::new()
        },
        s.flushes,
        s.in_flight_writes,
        s.failed_writes
    );
    let row = |name: &str, n: u64, note: String| format!("  {name:<14} {n:>12}{note}\n");
    o += &format!("  {:<14} {:>12}\n", "blocks", "count");
    o += &row(
        "intact",
        t.intact,
        format!(
            "  (flushed {}, acknowledged {}, in flight {})",
            t.intact_flushed, t.intact_acked, t.intact_in_flight
        ),
    );
    o += &row("never written", t.never_written, String::new());
    o += &row(
        "stale",
        t.stale,
        if t.stale > 0 {
            "  DURABILITY VIOLATION".into()
        } else {
            String::new()
        },
    );
    o += &row(
        "corrupt",
        t.corrupt,
        if t.corrupt > 0 {
            "  TORN OR CORRUPTED".into()
        } else {
            String::new()
        },
    );
    o += &row("total", t.blocks, String::new());
    o += &format!(
        "  flushed blocks intact: {} of {}; acknowledged but unflushed writes not found: {}; torn units: {}\n",
        t.flushed_intact, t.flushed_blocks, t.acked_not_found, t.torn_units
    );
    if t.unreadable_units > 0 {
        o += &format!("  units that could not be read: {}\n", t.unreadable_units);
    }
    for f in &t.findings {
        o += &format!(
            "    {} lba {}: {} (flushed generation {}, acknowledged generation {})\n",
            f.class.to_uppercase(),
            f.lba,
            f.reason,
            f.flushed_gen,
            f.acked_gen
        );
    }
    if t.violations() > t.findings.len() as u64 {
        o += &format!(
            "    ... {} more\n",
            t.violations() - t.findings.len() as u64
        );
    }
    o += &format!(
        "  durability: {}\n",
        if t.violations() == 0 && t.unreadable_units == 0 {
            "OK, every flushed block is intact and no block is torn"
        } else {
            "FAILED"
        }
    );
    o
}

async fn read_all(
    opts: &Options,
    ctrl: &Controller,
    log: &Arc<LogState>,
    queues: u16,
) -> Result<Tally> {
    let h = &log.header;
    let nsid = NamespaceId(opts.nsid.unwrap_or(h.nsid));
    let ns = super::active_namespace(ctrl, nsid).await?;
    if ns.lba_size() != h.lba_size {
        bail!(
            "namespace {} has {}-byte blocks; the logged run used {}",
            nsid.0,
            ns.lba_size(),
            h.lba_size
        );
    }
    let end_lba = h.first_lba + h.units * h.nlb();
    if end_lba > ns.nsze {
        bail!(
            "the logged range ends at LBA {end_lba}, beyond namespace {} ({} blocks)",
            nsid.0,
            ns.nsze
        );
    }
    let connector = ctrl.io_connector();
    let qd = opts
        .qd
        .min(u16::try_from(connector.max_entries().saturating_sub(1)).unwrap_or(u16::MAX));
    let per = h.units.div_ceil(u64::from(queues));
    let mut tasks = Vec::new();
    for i in 0..u64::from(queues) {
        let (from, to) = ((i * per).min(h.units), ((i + 1) * per).min(h.units));
        let (connector, log) = (connector.clone(), log.clone());
        let qopts = IoQueueOptions::new((i + 1) as u16, qd + 1)
            .dissqfc(opts.dissqfc)
            .busy_poll(false)
            .max_io(h.bs as usize)
            .prealloc(h.bs as usize);
        tasks.push(tokio::spawn(async move {
            read_units(connector, qopts, nsid, log, from, to).await
        }));
    }
    let mut t = Tally::default();
    for task in tasks {
        t.merge(task.await.context("a reader task failed")??);
    }
    Ok(t)
}

/// Read units `from..to` at the queue's depth, judging each as it arrives.
async fn read_units(
    connector: IoConnector,
    opts: IoQueueOptions,
    nsid: NamespaceId,
    log: Arc<LogState>,
    from: u64,
    to: u64,
) -> Result<Tally> {
    let qid = opts.qid;
    let mut q = connector
        .connect(&opts)
        .await
        .with_context(|| format!("I/O queue {qid}"))?;
    let h = &log.header;
    let (lba_size, nlb) = (h.lba_size as usize, h.nlb());
    let complete = log.summary.complete;
    let mut t = Tally::default();
    let mut next = from;
    while next < to || q.in_flight() > 0 {
        while next < to && q.in_flight() < usize::from(opts.entries - 1) {
            let slba = h.first_lba + next * nlb;
            match q.submit_read(nsid, slba, nlb as u32, h.bs as usize, next)? {
                Some(_) => next += 1,
                None => break,
            }
        }
        q.poll_completions(|c: Completion<'_>| {
            let unit = c.user;
            if !c.is_success() || c.data.len() != h.bs as usize {
                t.unreadable_units += 1;
                return;
            }
            let u = log.unit(unit as u32);
            t.unit(
                c.data,
                h.first_lba + unit * nlb,
                lba_size,
                h.run_id,
                &u,
                complete,
            );
        })
        .await
        .with_context(|| format!("I/O queue {qid}: reading the range"))?;
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::verify::fill_sector;

    const RUN: u32 = 42;

    fn block(lba: u64, generation: u32, run: u32) -> Vec<u8> {
        let mut b = vec![0u8; 512];
        fill_sector(&mut b, lba, generation, run);
        b
    }

    fn unit(durable: u32, acked: u32, in_flight: u32, failed: u32) -> UnitLog {
        UnitLog {
            durable,
            acked,
            in_flight,
            failed,
        }
    }

    #[test]
    fn every_class() {
        let flushed = unit(5, 9, 0, 0);
        // Intact: the flushed generation, a newer acknowledged one, an in-flight one.
        assert_eq!(
            classify(&block(10, 5, RUN), 10, RUN, &flushed, true),
            Class::Intact(Source::Flushed)
        );
        assert_eq!(
            classify(&block(10, 7, RUN), 10, RUN, &flushed, true),
            Class::Intact(Source::Acked)
        );
        let flying = unit(5, 9, 11, 0);
        assert_eq!(
            classify(&block(10, 11, RUN), 10, RUN, &flying, true),
            Class::Intact(Source::InFlight)
        );
        // Never written: zeroes, or an earlier run's block, where nothing flushed is owed.
        let nothing = unit(0, 3, 0, 0);
        assert_eq!(
            classify(&[0u8; 512], 10, RUN, &nothing, true),
            Class::NeverWritten
        );
        assert_eq!(
            classify(&block(10, 3, RUN + 1), 10, RUN, &nothing, true),
            Class::NeverWritten
        );
        // Stale: older than flushed, or missing where a flush covered a write.
        assert!(matches!(
            classify(&block(10, 4, RUN), 10, RUN, &flushed, true),
            Class::Stale(_)
        ));
        assert!(matches!(
            classify(&[0u8; 512], 10, RUN, &flushed, true),
            Class::Stale(_)
        ));
        assert!(matches!(
            classify(&block(10, 5, RUN + 1), 10, RUN, &flushed, true),
            Class::Stale(_)
        ));
        // A later failed write voids the claim: anything of this run, or nothing, is fine.
        let failed = unit(5, 5, 0, 6);
        assert_eq!(
            classify(&[0u8; 512], 10, RUN, &failed, true),
            Class::NeverWritten
        );
        // Corrupt: torn (checksum), misdirected, a generation never given.
        let mut torn = block(10, 5, RUN);
        torn[300] ^= 4;
        assert!(matches!(
            classify(&torn, 10, RUN, &flushed, true),
            Class::Corrupt(r) if r.contains("checksum")
        ));
        assert!(matches!(
            classify(&block(11, 5, RUN), 10, RUN, &flushed, true),
            Class::Corrupt(r) if r.contains("LBA")
        ));
        assert!(matches!(
            classify(&block(10, 12, RUN), 10, RUN, &flushed, true),
            Class::Corrupt(_)
        ));
        // ... unless the log is incomplete: newer writes may be missing from it.
        assert_eq!(
            classify(&block(10, 12, RUN), 10, RUN, &flushed, false),
            Class::Intact(Source::InFlight)
        );
    }

    #[test]
    fn tally_counts_units_blocks_and_torn_units() {
        let u = unit(5, 9, 0, 0);
        let mut data = Vec::new();
        for (i, generation) in [5u32, 9, 9, 9].iter().enumerate() {
            data.extend(block(100 + i as u64, *generation, RUN));
        }
        let mut t = Tally::default();
        t.unit(&data, 100, 512, RUN, &u, true);
        assert_eq!(
            (t.blocks, t.intact, t.intact_flushed, t.intact_acked),
            (4, 4, 1, 3)
        );
        assert_eq!((t.flushed_blocks, t.flushed_intact), (4, 4));
        assert_eq!((t.torn_units, t.acked_not_found, t.violations()), (1, 1, 0));
        // Two stale blocks in a second unit.
        data[..512].copy_from_slice(&block(100, 4, RUN));
        data[1536..].fill(0);
        t.unit(&data, 100, 512, RUN, &u, true);
        assert_eq!((t.stale, t.violations(), t.findings.len()), (2, 2, 2));
        assert_eq!(t.findings[0].lba, 100);
        assert_eq!(t.findings[1].lba, 103);
        assert_eq!(t.flushed_intact, 6);
    }
}
