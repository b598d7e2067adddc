//! One perf job: one I/O queue (= one TCP connection) driven by one task, at a fixed queue depth.
//!
//! The loop, per round: submit until QD commands are outstanding (all capsules of the round go
//! out in one write, with one timestamp), then poll: every completion that has arrived is handled
//! in bulk with one clock read. Buffers are the queue's preallocated slot buffers; nothing is
//! allocated per I/O.
//!
//! Flush (`--flush-every N`, `--flush-at-end`): after every N successful writes the job submits
//! a Flush on its queue. NVMe: a Flush covers every command completed before it was submitted,
//! so at submission the job hands the units written since the last Flush to the verify log as
//! "acknowledged, flush s pending", and when Flush s completes logs "flush s done" (see
//! [`super::vlog`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nvme_spec::NamespaceId;
use nvmf_host::{Completion, HostError, IoConnector, IoQueue, IoQueueOptions};
use tokio::sync::{mpsc, watch};

use super::report::{JobResult, MAX_REPORTED_MISMATCHES};
use super::verify::{self, GenMap, UNKNOWN};
use super::vlog::{self, Kind, Record};

/// User tag of a Flush (a write's tag is `generation << 32 | unit`, a read's `unit`; verify
/// ranges hold far fewer than 2^32 units, so no write or read has this tag).
const FLUSH_TAG: u64 = u64::MAX;

/// Open loop: an idle job sleeps only when the next command is due later than this (tokio's
/// timer wakes up to a millisecond late); otherwise it polls.
const OPEN_LOOP_SLEEP_MIN: Duration = Duration::from_millis(2);

/// Access pattern of a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pattern {
    /// Sequential through the job's region, wrapping.
    Sequential,
    /// Uniformly random units of the job's region.
    Random,
}

/// Everything a job needs to know, fixed before it starts.
#[derive(Clone, Debug)]
pub struct JobSpec {
    pub qid: u16,
    pub nsid: NamespaceId,
    pub lba_size: usize,
    /// Bytes per I/O (a multiple of `lba_size`).
    pub bs: usize,
    pub qd: usize,
    /// First LBA of the job's region.
    pub region_lba: u64,
    /// Units (of `bs`) in the region.
    pub units: u64,
    pub pattern: Pattern,
    /// Percentage of reads (0 = all writes, 100 = all reads).
    pub read_pct: u8,
    pub verify: bool,
    /// Write the whole region before the run (verify of workloads that read).
    pub prefill: bool,
    /// Read the whole region back after the run (verify of workloads that write).
    pub readback: bool,
    pub seed: u64,
    pub run_id: u32,
    pub dissqfc: bool,
    /// Poll the socket without sleeping while I/O is in flight.
    pub busy_poll: bool,
    /// Submit a Flush after every this many successful writes (0: never).
    pub flush_every: u64,
    /// Submit a Flush when the run ends (before the read-back).
    pub flush_at_end: bool,
    /// Writes carry Force Unit Access (durable when they complete).
    pub fua: bool,
    /// Where to record what was written and flushed (`--verify-log`; needs `verify`).
    pub log: Option<vlog::Sink>,
    /// Open loop: commands per second this job submits, evenly spaced (`None`: closed loop,
    /// always `qd` in flight).
    pub rate: Option<f64>,
    /// Stop submitting after this many commands (`None`: run until the end).
    pub budget: Option<u64>,
}

/// Start and stop times of the measured run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// Completions of commands submitted before this are not measured.
    pub ramp_end: Instant,
    /// No command is submitted after this; completions after it are not measured.
    pub end: Instant,
}

/// What the orchestrator tells the jobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Wait,
    Go(Timing),
    Abort,
}

/// Counters shared with the progress display (updated once per poll, not per I/O).
#[derive(Debug, Default)]
pub struct Progress {
    pub ios: AtomicU64,
    pub bytes: AtomicU64,
    pub errors: AtomicU64,
    /// Set by the orchestrator when the run stops early (a queue lost its connection): jobs
    /// stop submitting, and completions from then on are not measured.
    pub stop: AtomicBool,
}

/// xorshift64*: fast, good enough to spread offsets.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in 0..n (multiply-shift, no modulo).
    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
    }
}

/// What an outstanding command is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Read,
    Write,
    /// Flush number `seq` of this queue.
    Flush {
        seq: u64,
    },
}

/// Per outstanding command (indexed by CID).
#[derive(Clone, Copy)]
struct Meta {
    start: Instant,
    unit: u64,
    op: Op,
    generation: u32,
    measured: bool,
}

struct Job {
    spec: JobSpec,
    q: IoQueue,
    rng: Rng,
    seq_next: u64,
    meta: Vec<Meta>,
    /// Flushes submitted: the sequence number of the last one.
    flush_seq: u64,
    books: Books,
}

/// What completions change: the job's result, the generation map, counters, and the log
/// records gathered during a poll.
struct Books {
    map: Option<GenMap>,
    res: JobResult,
    /// Completions and errors not yet published to `Progress`.
    pending_ios: u64,
    pending_errors: u64,
    /// Successful writes since the last Flush was submitted.
    writes_since_flush: u64,
    /// With `--verify-log`: the job's first range unit, and the records gathered during a
    /// poll, sent after it: failed writes and completed FUA writes (range unit, generation),
    /// and completed flushes.
    log_base: Option<u32>,
    failed_writes: Vec<(u32, u32)>,
    fua_writes: Vec<(u32, u32)>,
    flushed: Vec<u64>,
}

/// Run one job: connect, prefill, report ready, wait for the start, run, read back.
/// `Err` only for failures before the start (the run's own failures are in the result).
pub async fn run(
    spec: JobSpec,
    connector: IoConnector,
    progress: Arc<Progress>,
    ready: mpsc::UnboundedSender<Result<(), String>>,
    mut phase: watch::Receiver<Phase>,
) -> Result<JobResult, String> {
    let setup = setup(spec, &connector).await;
    let mut job = match setup {
        Ok(j) => j,
        Err(e) => {
            let _ = ready.send(Err(e.clone()));
            return Err(e);
        }
    };
    let _ = ready.send(Ok(()));
    let timing = match phase.wait_for(|p| *p != Phase::Wait).await.map(|p| *p) {
        Ok(Phase::Go(t)) => t,
        Ok(Phase::Wait | Phase::Abort) | Err(_) => {
            // The prefill's writes were acknowledged: the log must know them.
            job.close_log();
            return Err("aborted".into());
        }
    };
    job.run(timing, &progress).await;
    if job.spec.flush_at_end && job.books.res.transport_error.is_none() {
        job.flush_now(&progress).await;
    }
    if job.spec.readback && job.books.res.transport_error.is_none() {
        job.sweep(false, &progress).await;
    }
    job.publish(&progress);
    job.close_log();
    Ok(job.books.res)
}

async fn setup(spec: JobSpec, connector: &IoConnector) -> Result<Job, String> {
    let entries =
        u16::try_from(spec.qd + 1).map_err(|_| format!("queue depth {} too large", spec.qd))?;
    let opts = IoQueueOptions::new(spec.qid, entries)
        .dissqfc(spec.dissqfc)
        .busy_poll(spec.busy_poll)
        .max_io(spec.bs)
        .prealloc(spec.bs);
    let q = connector
        .connect(&opts)
        .await
        .map_err(|e| format!("I/O queue {}: {e}", spec.qid))?;
    let now = Instant::now();
    let meta = vec![
        Meta {
            start: now,
            unit: 0,
            op: Op::Read,
            generation: 0,
            measured: false
        };
        q.capacity()
    ];
    let books = Books {
        map: spec.verify.then(|| GenMap::new(spec.units as usize)),
        res: JobResult::new(spec.qid),
        pending_ios: 0,
        pending_errors: 0,
        writes_since_flush: 0,
        log_base: spec.log.as_ref().map(|l| l.unit_base),
        failed_writes: Vec::new(),
        fua_writes: Vec::new(),
        flushed: Vec::new(),
    };
    let mut job = Job {
        rng: Rng(spec.seed | 1),
        q,
        seq_next: 0,
        meta,
        flush_seq: 0,
        books,
        spec,
    };
    if job.spec.prefill {
        let quiet = Progress::default();
        job.sweep(true, &quiet).await;
        if let Some(e) = job.books.res.transport_error.clone() {
            job.close_log();
            return Err(format!("I/O queue {}: prefill failed: {e}", job.spec.qid));
        }
        let failed: u64 = job.books.res.status_errors.values().sum();
        if failed > 0 {
            return Err(format!(
                "I/O queue {}: prefill failed: {failed} writes failed ({:?})",
                job.spec.qid, job.books.res.status_errors
            ));
        }
    }
    Ok(job)
}

impl Job {
    /// Pick the unit of the next command; with `--verify` never one with a command in flight
    /// (regions hold more units than the queue depth, so a free one always exists).
    fn pick_unit(&mut self) -> u64 {
        let units = self.spec.units;
        let busy = |m: &Option<GenMap>, u| m.as_ref().is_some_and(|m| m.is_busy(u));
        match self.spec.pattern {
            Pattern::Sequential => {
                for _ in 0..units {
                    let u = self.seq_next;
                    self.seq_next = if u + 1 == units { 0 } else { u + 1 };
                    if !busy(&self.books.map, u) {
                        return u;
                    }
                }
                self.seq_next
            }
            Pattern::Random => {
                let mut u = self.rng.below(units);
                for _ in 0..8 {
                    if !busy(&self.books.map, u) {
                        return u;
                    }
                    u = self.rng.below(units);
                }
                for _ in 0..units {
                    if !busy(&self.books.map, u) {
                        return u;
                    }
                    u = if u + 1 == units { 0 } else { u + 1 };
                }
                u
            }
        }
    }

    /// Submit one command on `unit`. `Ok(false)`: the queue is full.
    fn submit(
        &mut self,
        unit: u64,
        write: bool,
        now: Instant,
        measured: bool,
    ) -> Result<bool, HostError> {
        let s = &self.spec;
        let nlb = (s.bs / s.lba_size) as u32;
        let slba = s.region_lba + unit * u64::from(nlb);
        let (lba_size, run, verify) = (s.lba_size, s.run_id, s.verify);
        let generation = match &mut self.books.map {
            Some(m) if write => m.next_gen(),
            Some(m) => m.expected(unit),
            None => UNKNOWN,
        };
        let r = if write {
            let tag = (u64::from(generation) << 32) | unit;
            let fill = |b: &mut [u8]| {
                if verify {
                    verify::fill_blocks(b, slba, lba_size, generation, run);
                } else {
                    // Not verifying: only stamp each block with its LBA (cheap, and the data is
                    // not all zeros, which a backend might special-case).
                    for (i, sec) in b.chunks_exact_mut(lba_size).enumerate() {
                        sec[..8].copy_from_slice(&(slba + i as u64).to_le_bytes());
                    }
                }
            };
            self.q
                .submit_write_fua(s.nsid, slba, nlb, s.bs, tag, s.fua, fill)?
        } else {
            self.q.submit_read(s.nsid, slba, nlb, s.bs, unit)?
        };
        let Some(cid) = r else { return Ok(false) };
        self.meta[usize::from(cid.0)] = Meta {
            start: now,
            unit,
            op: if write { Op::Write } else { Op::Read },
            generation,
            measured,
        };
        if let Some(m) = &mut self.books.map {
            m.set_busy(unit, true);
        }
        Ok(true)
    }

    /// Poll once and account every completion. `end`: completions after it are not measured.
    async fn poll(&mut self, end: Instant, progress: &Progress) -> Result<(), HostError> {
        self.poll_inner(end, progress, true).await
    }

    /// [`Job::poll`]; `wait: false` handles only what has already arrived (open loop: the next
    /// submission may be due before the next completion).
    async fn poll_inner(
        &mut self,
        end: Instant,
        progress: &Progress,
        wait: bool,
    ) -> Result<(), HostError> {
        let mut clock: Option<Instant> = None;
        let Job {
            q,
            meta,
            books,
            spec,
            ..
        } = self;
        let mut account = |c: Completion<'_>| {
            let now = *clock.get_or_insert_with(Instant::now);
            books.complete(&c, &meta[usize::from(c.cid.0)], now, end, spec);
        };
        let r = if wait {
            q.poll_completions(&mut account).await
        } else {
            q.try_poll_completions(&mut account)
        };
        self.send_log();
        if self.books.pending_ios >= 64 {
            self.publish(progress);
        }
        r.map(|_| ())
    }

    /// Send the records gathered during the last poll to the verify log.
    fn send_log(&mut self) {
        let Some(log) = &self.spec.log else { return };
        let qid = self.spec.qid;
        for (kind, pairs) in [
            (Kind::Failed, &mut self.books.failed_writes),
            (Kind::Durable, &mut self.books.fua_writes),
        ] {
            if !pairs.is_empty() {
                log.send(Record {
                    kind,
                    qid,
                    seq: 0,
                    pairs: std::mem::take(pairs),
                });
            }
        }
        for seq in self.books.flushed.drain(..) {
            log.send(Record {
                kind: Kind::Flushed,
                qid,
                seq,
                pairs: Vec::new(),
            });
        }
    }

    /// Log the units written since the last Flush was submitted as acknowledged, covered by
    /// flush `seq` once it completes.
    fn log_acked(&mut self, seq: u64) {
        if let (Some(log), Some(map)) = (&self.spec.log, &mut self.books.map) {
            let pairs = map.take_dirty(log.unit_base);
            if !pairs.is_empty() {
                log.send(Record {
                    kind: Kind::Acked,
                    qid: self.spec.qid,
                    seq,
                    pairs,
                });
            }
        }
    }

    /// The job is over: what was acknowledged since the last Flush stays acknowledged only
    /// (logged under a flush number that will never complete).
    fn close_log(&mut self) {
        self.log_acked(self.flush_seq + 1);
        self.spec.log = None;
    }

    /// Submit a Flush if `--flush-every` writes completed since the last one. `None`: not due;
    /// `Some(false)`: the queue is full.
    fn flush_if_due(&mut self, now: Instant) -> Option<Result<bool, HostError>> {
        let every = self.spec.flush_every;
        (every > 0 && self.books.writes_since_flush >= every).then(|| self.submit_flush(now))
    }

    fn submit_flush(&mut self, now: Instant) -> Result<bool, HostError> {
        let Some(cid) = self.q.submit_flush(self.spec.nsid, FLUSH_TAG)? else {
            return Ok(false);
        };
        self.flush_seq += 1;
        self.books.writes_since_flush = 0;
        self.meta[usize::from(cid.0)] = Meta {
            start: now,
            unit: 0,
            op: Op::Flush {
                seq: self.flush_seq,
            },
            generation: UNKNOWN,
            measured: false,
        };
        self.log_acked(self.flush_seq);
        Ok(true)
    }

    /// Flush now and wait for it (`--flush-at-end`; nothing else is in flight).
    async fn flush_now(&mut self, progress: &Progress) {
        let far = Instant::now() + std::time::Duration::from_secs(365 * 24 * 3600);
        match self.submit_flush(Instant::now()) {
            Ok(_) => {}
            Err(e) => return self.fail(e),
        }
        while self.q.in_flight() > 0 {
            if let Err(e) = self.poll(far, progress).await {
                return self.fail(e);
            }
        }
    }

    fn publish(&mut self, progress: &Progress) {
        progress
            .ios
            .fetch_add(self.books.pending_ios, Ordering::Relaxed);
        progress.bytes.fetch_add(
            self.books.pending_ios * self.spec.bs as u64,
            Ordering::Relaxed,
        );
        progress
            .errors
            .fetch_add(self.books.pending_errors, Ordering::Relaxed);
        self.books.pending_ios = 0;
        self.books.pending_errors = 0;
    }

    /// The connection failed: record it and count what was in flight as lost (and log the
    /// writes among them: their units may hold the old or the new content).
    fn fail(&mut self, e: HostError) {
        let mut lost = 0;
        let mut writes = Vec::new();
        let base = self.spec.log.as_ref().map(|l| l.unit_base);
        self.q.fail_in_flight(|tag| {
            lost += 1;
            let (unit, generation) = (tag as u32, (tag >> 32) as u32);
            if let Some(base) = base
                && tag != FLUSH_TAG
                && generation != UNKNOWN
            {
                writes.push((base + unit, generation));
            }
        });
        if let Some(log) = &self.spec.log
            && !writes.is_empty()
        {
            log.send(Record {
                kind: Kind::InFlight,
                qid: self.spec.qid,
                seq: 0,
                pairs: writes,
            });
        }
        self.books.res.lost += lost;
        self.books.res.transport_error = Some(e.to_string());
    }

    /// The timed run.
    async fn run(&mut self, t: Timing, progress: &Progress) {
        let mut end = t.end;
        // Open loop: the time the next command is due, and the spacing.
        let interval = self
            .spec
            .rate
            .filter(|r| r.is_finite() && *r > 0.0)
            .map(|r| Duration::from_secs_f64(1.0 / r));
        let mut due = Instant::now();
        let mut issued = 0u64;
        loop {
            let now = Instant::now();
            if now < end && progress.stop.load(Ordering::Relaxed) {
                end = now;
            }
            let spent = self.spec.budget.is_some_and(|b| issued >= b);
            if spent && self.q.in_flight() == 0 {
                return;
            }
            if now < end && !spent {
                let measured = now >= t.ramp_end;
                while self.q.in_flight() < self.spec.qd
                    && self.spec.budget.is_none_or(|b| issued < b)
                {
                    // Open loop: a command counts from when it was due, so time spent
                    // waiting for a free slot is part of its latency (no coordinated omission).
                    let (start, measured) = match interval {
                        Some(_) if due > now => break,
                        Some(_) => (due, due >= t.ramp_end),
                        None => (now, measured),
                    };
                    match self.flush_if_due(now) {
                        None => {}
                        Some(Ok(true)) => continue,
                        Some(Ok(false)) => break,
                        Some(Err(e)) => return self.fail(e),
                    }
                    let write = match self.spec.read_pct {
                        100 => false,
                        0 => true,
                        p => self.rng.below(100) >= u64::from(p),
                    };
                    let unit = self.pick_unit();
                    match self.submit(unit, write, start, measured) {
                        Ok(true) => {
                            issued += 1;
                            if let Some(i) = interval {
                                due += i;
                            }
                        }
                        Ok(false) => break,
                        Err(e) => return self.fail(e),
                    }
                }
            } else if self.q.in_flight() == 0 {
                return;
            }
            let r = match interval {
                None => self.poll(end, progress).await,
                Some(_) => {
                    let r = self.poll_inner(end, progress, false).await;
                    let idle = self.q.in_flight() == 0;
                    let wait = due.saturating_duration_since(Instant::now());
                    if idle && wait > OPEN_LOOP_SLEEP_MIN && now < end {
                        // Nothing in flight and the next command not due soon: sleep (less
                        // than the whole gap: timers are coarse).
                        tokio::time::sleep(wait - OPEN_LOOP_SLEEP_MIN).await;
                    } else {
                        tokio::task::yield_now().await;
                    }
                    r
                }
            };
            if let Err(e) = r {
                return self.fail(e);
            }
        }
    }

    /// Write (prefill) or read back and check (readback) every unit of the region at QD.
    /// Readback skips units whose content is unknown.
    async fn sweep(&mut self, write: bool, progress: &Progress) {
        let mut next = 0u64;
        let far = Instant::now() + std::time::Duration::from_secs(365 * 24 * 3600);
        loop {
            let now = Instant::now();
            while next < self.spec.units && self.q.in_flight() < self.spec.qd {
                match self.flush_if_due(now) {
                    None => {}
                    Some(Ok(true)) => continue,
                    Some(Ok(false)) => break,
                    Some(Err(e)) => return self.fail(e),
                }
                let skip = !write
                    && self
                        .books
                        .map
                        .as_ref()
                        .is_some_and(|m| m.expected(next) == UNKNOWN);
                if !skip {
                    match self.submit(next, write, now, false) {
                        Ok(true) => {}
                        Ok(false) => break,
                        Err(e) => return self.fail(e),
                    }
                }
                next += 1;
            }
            if self.q.in_flight() == 0 && next >= self.spec.units {
                return;
            }
            if let Err(e) = self.poll(far, progress).await {
                return self.fail(e);
            }
        }
    }
}

impl Books {
    /// Account one completion.
    fn complete(
        &mut self,
        c: &Completion<'_>,
        m: &Meta,
        now: Instant,
        end: Instant,
        spec: &JobSpec,
    ) {
        let ns = now.saturating_duration_since(m.start).as_nanos() as u64;
        if !c.is_success() {
            self.pending_errors += 1;
            *self
                .res
                .status_errors
                .entry(c.status().to_string())
                .or_insert(0) += 1;
        }
        let write = match m.op {
            Op::Flush { seq } => {
                if c.is_success() {
                    self.res.flush.record(0, ns);
                    if self.log_base.is_some() {
                        self.flushed.push(seq);
                    }
                }
                return;
            }
            Op::Write => true,
            Op::Read => false,
        };
        self.pending_ios += 1;
        if let Some(map) = self.map.as_mut() {
            map.set_busy(m.unit, false);
        }
        if !c.is_success() {
            if write && let Some(map) = self.map.as_mut() {
                map.set_expected(m.unit, UNKNOWN);
                if let Some(base) = self.log_base {
                    self.failed_writes
                        .push((base + m.unit as u32, m.generation));
                }
            }
            return;
        }
        if write {
            self.writes_since_flush += 1;
        }
        if let Some(map) = self.map.as_mut() {
            if write {
                map.set_expected(m.unit, m.generation);
                match self.log_base {
                    Some(base) if spec.fua => {
                        self.fua_writes.push((base + m.unit as u32, m.generation));
                    }
                    Some(_) => map.mark_dirty(m.unit),
                    None => {}
                }
            } else if m.generation != UNKNOWN {
                let v = &mut self.res.verify;
                let slba = spec.region_lba + m.unit * (spec.bs / spec.lba_size) as u64;
                let before = v.mismatches.len();
                verify::check_blocks(
                    c.data,
                    slba,
                    spec.lba_size,
                    m.generation,
                    spec.run_id,
                    &mut v.mismatches,
                );
                v.checked_blocks += (c.data.len() / spec.lba_size) as u64;
                v.mismatch_count += (v.mismatches.len() - before) as u64;
                v.mismatches.truncate(MAX_REPORTED_MISMATCHES);
            }
        }
        if m.measured && now <= end {
            let d = if write {
                &mut self.res.write
            } else {
                &mut self.res.read
            };
            d.record(spec.bs as u64, ns);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rng_below_is_in_range_and_spread() {
        let mut r = Rng(12345);
        let mut seen = [0u32; 10];
        for _ in 0..10_000 {
            let v = r.below(10);
            assert!(v < 10);
            seen[v as usize] += 1;
        }
        assert!(seen.iter().all(|&n| n > 800), "{seen:?}");
    }
}
