//! `perf --verify-log FILE`: the durable record of what a `--verify` run wrote, so that
//! `perf --verify-only` can later tell, block by block, what the target owes.
//!
//! Why a log and not only the seed: the seed fixes *which* unit each write picks, but not which
//! writes had completed when a Flush was submitted, nor which were in flight when the target
//! died; that depends on timing. The log records exactly that, compactly: one (unit, generation)
//! pair per unit written in each flush interval (not per write, not per block), and one small
//! record per completed Flush.
//!
//! Format (all integers little-endian; append-only; `fdatasync`ed after every batch, so the log
//! survives the host as far as the host's own storage does):
//!
//! ```text
//! header, 64 bytes:
//!   0..8   magic "EBOFVLG1"       8..12  version (1)        12..16 run id
//!  16..20  NSID                  20..24  LBA size          24..28 I/O unit size (--bs)
//!  28..32  queues                32..40  first LBA of the range
//!  40..48  units (of --bs) in the range                     48..56 creation time (Unix s)
//!  56..60  zero                  60..64  CRC32C of bytes 0..60
//! record, 16 + 8 × count + 4 bytes:
//!   0      kind                   1      zero               2..4   queue id
//!   4..8   count                  8..16  flush sequence number (per queue)
//!  16..    count × (unit u32, generation u32)   - unit: index of the --bs unit in the range
//!   end    CRC32C of the record's bytes before it
//! ```
//!
//! Kinds and what they mean for the verifier:
//! - `ACKED` (seq s): these writes completed successfully before Flush number s of that queue
//!   was submitted (or, for the last record of a queue, before the run ended). Their content was
//!   acknowledged: visible to reads, not yet known durable.
//! - `FLUSHED` (seq s): Flush number s completed successfully. NVMe: a Flush covers every
//!   command completed before it was submitted, so every `ACKED` record of that queue with a
//!   sequence number ≤ s is now durable.
//! - `DURABLE`: FUA writes that completed successfully: durable on completion.
//! - `FAILED`: writes that completed with an error status; NVMe leaves their range undefined,
//!   so the unit's earlier durable content is no longer owed.
//! - `IN_FLIGHT`: writes outstanding when the queue's connection failed: the unit may hold the
//!   old or the new content (or, across blocks, a mix), each block whole.
//! - `END`: perf finished writing the log (a log without it was cut short: perf itself died,
//!   so writes newer than the log's may exist).
//!
//! A record cut short or failing its CRC ends the log (a torn tail: perf died while appending);
//! everything before it stands.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread::JoinHandle;

use anyhow::{Context, Result, bail};

use super::verify::UNKNOWN;

const MAGIC: [u8; 8] = *b"EBOFVLG1";
const VERSION: u32 = 1;
const HEADER_LEN: usize = 64;
const RECORD_HDR: usize = 16;
/// Largest pair count accepted in one record when reading (a unit appears at most once per
/// record; ranges hold at most this many units).
const MAX_PAIRS: u32 = 1 << 26;

/// What a record says; see the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Units acknowledged since the previous Flush, covered by flush `seq` once it completes.
    Acked,
    /// Flush `seq` completed.
    Flushed,
    /// FUA writes completed: durable.
    Durable,
    /// Writes that failed: their units are undefined.
    Failed,
    /// Writes in flight when the connection failed.
    InFlight,
    /// The run finished: the log is complete.
    End,
}

impl Kind {
    fn code(self) -> u8 {
        match self {
            Kind::Acked => 1,
            Kind::Flushed => 2,
            Kind::Failed => 3,
            Kind::InFlight => 4,
            Kind::End => 5,
            Kind::Durable => 6,
        }
    }
    fn from_code(c: u8) -> Option<Kind> {
        match c {
            1 => Some(Kind::Acked),
            2 => Some(Kind::Flushed),
            3 => Some(Kind::Failed),
            4 => Some(Kind::InFlight),
            5 => Some(Kind::End),
            6 => Some(Kind::Durable),
            _ => None,
        }
    }
}

/// The run a log describes (its header).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogHeader {
    /// The run's id (in every block it wrote).
    pub run_id: u32,
    /// Namespace.
    pub nsid: u32,
    /// Block size in bytes.
    pub lba_size: u32,
    /// Bytes per I/O unit (`--bs`).
    pub bs: u32,
    /// I/O queues of the run.
    pub queues: u32,
    /// First LBA of the range.
    pub first_lba: u64,
    /// Units (of `bs`) in the range.
    pub units: u64,
    /// Unix seconds when the log was created.
    pub created: u64,
}

impl LogHeader {
    fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&self.run_id.to_le_bytes());
        b[16..20].copy_from_slice(&self.nsid.to_le_bytes());
        b[20..24].copy_from_slice(&self.lba_size.to_le_bytes());
        b[24..28].copy_from_slice(&self.bs.to_le_bytes());
        b[28..32].copy_from_slice(&self.queues.to_le_bytes());
        b[32..40].copy_from_slice(&self.first_lba.to_le_bytes());
        b[40..48].copy_from_slice(&self.units.to_le_bytes());
        b[48..56].copy_from_slice(&self.created.to_le_bytes());
        let c = nvmf_tcp::digest::crc32c(&b[..60]);
        b[60..64].copy_from_slice(&c.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> Result<LogHeader> {
        if b.len() < HEADER_LEN || b[0..8] != MAGIC {
            bail!("not an ebof perf verify log (bad magic)");
        }
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u64_at = |o: usize| u64::from(u32_at(o)) | (u64::from(u32_at(o + 4)) << 32);
        if nvmf_tcp::digest::crc32c(&b[..60]) != u32_at(60) {
            bail!("verify log header checksum mismatch");
        }
        if u32_at(8) != VERSION {
            bail!(
                "verify log version {} (this ebof reads {VERSION})",
                u32_at(8)
            );
        }
        let h = LogHeader {
            run_id: u32_at(12),
            nsid: u32_at(16),
            lba_size: u32_at(20),
            bs: u32_at(24),
            queues: u32_at(28),
            first_lba: u64_at(32),
            units: u64_at(40),
            created: u64_at(48),
        };
        if h.lba_size < 512
            || h.bs == 0
            || !h.bs.is_multiple_of(h.lba_size)
            || h.units == 0
            || h.units > u64::from(u32::MAX)
        {
            bail!("verify log header describes an impossible geometry: {h:?}");
        }
        Ok(h)
    }

    /// LBAs per unit.
    pub fn nlb(&self) -> u64 {
        u64::from(self.bs / self.lba_size)
    }
}

/// One record to append.
#[derive(Debug)]
pub struct Record {
    /// What the record says.
    pub kind: Kind,
    /// The queue it is about.
    pub qid: u16,
    /// Flush sequence number (`Acked`, `Flushed`; else 0).
    pub seq: u64,
    /// (unit, generation) pairs.
    pub pairs: Vec<(u32, u32)>,
}

fn encode_record(r: &Record, out: &mut Vec<u8>) {
    let start = out.len();
    out.push(r.kind.code());
    out.push(0);
    out.extend_from_slice(&r.qid.to_le_bytes());
    out.extend_from_slice(&(r.pairs.len() as u32).to_le_bytes());
    out.extend_from_slice(&r.seq.to_le_bytes());
    for (u, g) in &r.pairs {
        out.extend_from_slice(&u.to_le_bytes());
        out.extend_from_slice(&g.to_le_bytes());
    }
    let c = nvmf_tcp::digest::crc32c(&out[start..]);
    out.extend_from_slice(&c.to_le_bytes());
}

/// Where a job sends its records: the log writer's channel, and the job's place in the range.
#[derive(Clone, Debug)]
pub struct Sink {
    tx: mpsc::Sender<Record>,
    /// Range unit of the job's unit 0.
    pub unit_base: u32,
}

impl Sink {
    /// Queue a record for the writer (never blocks; a writer that failed is reported at
    /// [`LogWriter::finish`]).
    pub fn send(&self, r: Record) {
        let _ = self.tx.send(r);
    }
}

/// The log file and the thread that appends to it (group commit: every record that arrived
/// while the last `fdatasync` ran goes out in the next write, then one `fdatasync`).
pub struct LogWriter {
    tx: mpsc::Sender<Record>,
    thread: JoinHandle<Result<()>>,
    path: PathBuf,
}

impl LogWriter {
    /// Create `path` (refusing to overwrite an existing log) and write the header.
    pub fn create(path: &Path, h: &LogHeader) -> Result<LogWriter> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .with_context(|| {
                format!(
                    "--verify-log {}: cannot create it (an existing log is never overwritten)",
                    path.display()
                )
            })?;
        f.write_all(&h.encode())
            .and_then(|()| f.sync_all())
            .with_context(|| format!("--verify-log {}: cannot write", path.display()))?;
        // The new name must survive too: sync its directory.
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
        let (tx, rx) = mpsc::channel();
        let p = path.to_path_buf();
        let thread = std::thread::Builder::new()
            .name("perf-vlog".into())
            .spawn(move || append_loop(f, rx, &p))
            .context("cannot start the verify log thread")?;
        Ok(LogWriter {
            tx,
            thread,
            path: path.to_path_buf(),
        })
    }

    /// A sink for the job whose unit 0 is range unit `unit_base`.
    pub fn sink(&self, unit_base: u32) -> Sink {
        Sink {
            tx: self.tx.clone(),
            unit_base,
        }
    }

    /// The log file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Append `END`, wait until everything is on disk. Call after every job has ended (their
    /// sinks are dropped), so that `END` is the last record.
    pub fn finish(self) -> Result<()> {
        let _ = self.tx.send(Record {
            kind: Kind::End,
            qid: 0,
            seq: 0,
            pairs: Vec::new(),
        });
        drop(self.tx);
        match self.thread.join() {
            Ok(r) => r,
            Err(_) => bail!("the verify log thread panicked"),
        }
    }
}

fn append_loop(f: File, rx: mpsc::Receiver<Record>, path: &Path) -> Result<()> {
    let mut w = BufWriter::with_capacity(1 << 20, f);
    let mut buf = Vec::new();
    while let Ok(first) = rx.recv() {
        buf.clear();
        encode_record(&first, &mut buf);
        while let Ok(more) = rx.try_recv() {
            encode_record(&more, &mut buf);
        }
        w.write_all(&buf)
            .and_then(|()| w.flush())
            .and_then(|()| w.get_ref().sync_data())
            .with_context(|| format!("--verify-log {}: cannot append", path.display()))?;
    }
    Ok(())
}

/// What a log says about one unit. Generations of one unit only grow (one queue writes it, and
/// a queue's generations count up), so "newer" is a comparison. (A queue would have to complete
/// 2^32 writes in one run for its generations to wrap.)
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UnitLog {
    /// Newest generation covered by a completed Flush (`UNKNOWN`: none).
    pub durable: u32,
    /// Newest generation acknowledged (`UNKNOWN`: none).
    pub acked: u32,
    /// Generation of a write in flight when the connection failed (`UNKNOWN`: none).
    pub in_flight: u32,
    /// Newest generation whose write failed (`UNKNOWN`: none).
    pub failed: u32,
}

impl UnitLog {
    /// The durable generation still owed: none if a later write failed (its range is undefined).
    pub fn owed(&self) -> u32 {
        if self.failed > self.durable {
            UNKNOWN
        } else {
            self.durable
        }
    }
    /// Newest generation the unit can hold according to the log.
    pub fn newest(&self) -> u32 {
        self.acked.max(self.in_flight).max(self.failed)
    }
}

/// Totals of a log, for the report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct LogSummary {
    /// (unit, generation) pairs acknowledged (a unit rewritten within one flush interval
    /// counts once).
    pub acked_writes: u64,
    /// Flushes completed.
    pub flushes: u64,
    /// Of `acked_writes`, those written with FUA (durable on completion).
    pub fua_writes: u64,
    /// Writes that failed.
    pub failed_writes: u64,
    /// Writes in flight when a connection failed.
    pub in_flight_writes: u64,
    /// Units with a durable generation owed.
    pub durable_units: u64,
    /// `END` present: perf wrote the whole log.
    pub complete: bool,
    /// Bytes after the last valid record (perf died mid-append).
    pub torn_tail_bytes: u64,
}

/// A whole log, read back: the header and per-unit expectations.
pub struct LogState {
    /// The run the log describes.
    pub header: LogHeader,
    /// Dense per unit: durable and acknowledged generations.
    durable: Vec<u32>,
    acked: Vec<u32>,
    /// Sparse: few writes fail or are in flight at the end.
    in_flight: HashMap<u32, u32>,
    failed: HashMap<u32, u32>,
    /// Totals.
    pub summary: LogSummary,
}

impl LogState {
    /// Read and parse the log at `path`.
    pub fn read(path: &Path) -> Result<LogState> {
        let mut bytes = Vec::new();
        File::open(path)
            .and_then(|mut f| f.read_to_end(&mut bytes))
            .with_context(|| format!("--verify-log {}: cannot read", path.display()))?;
        LogState::parse(&bytes).with_context(|| format!("--verify-log {}", path.display()))
    }

    /// Parse a whole log (a torn tail ends it; anything else malformed is an error).
    pub fn parse(bytes: &[u8]) -> Result<LogState> {
        let header = LogHeader::decode(bytes)?;
        let units = usize::try_from(header.units).context("too many units")?;
        let mut s = LogState {
            header,
            durable: vec![UNKNOWN; units],
            acked: vec![UNKNOWN; units],
            in_flight: HashMap::new(),
            failed: HashMap::new(),
            summary: LogSummary::default(),
        };
        // ACKED records waiting for their queue's Flush: (qid, seq) → pairs.
        let mut pending: BTreeMap<(u16, u64), Vec<(u32, u32)>> = BTreeMap::new();
        let mut at = HEADER_LEN;
        while at < bytes.len() {
            let Some((kind, qid, seq, pairs, len)) = parse_record(&bytes[at..], units)? else {
                s.summary.torn_tail_bytes = (bytes.len() - at) as u64;
                break;
            };
            at += len;
            match kind {
                Kind::Acked => {
                    for &(u, g) in &pairs {
                        let a = &mut s.acked[u as usize];
                        *a = (*a).max(g);
                    }
                    s.summary.acked_writes += pairs.len() as u64;
                    pending.entry((qid, seq)).or_default().extend(pairs);
                }
                Kind::Flushed => {
                    s.summary.flushes += 1;
                    let covered: Vec<(u16, u64)> = pending
                        .range((qid, 0)..=(qid, seq))
                        .map(|(k, _)| *k)
                        .collect();
                    for k in covered {
                        for (u, g) in pending.remove(&k).unwrap_or_default() {
                            let d = &mut s.durable[u as usize];
                            *d = (*d).max(g);
                        }
                    }
                }
                Kind::Durable => {
                    s.summary.acked_writes += pairs.len() as u64;
                    s.summary.fua_writes += pairs.len() as u64;
                    for (u, g) in pairs {
                        let a = &mut s.acked[u as usize];
                        *a = (*a).max(g);
                        let d = &mut s.durable[u as usize];
                        *d = (*d).max(g);
                    }
                }
                Kind::Failed => {
                    s.summary.failed_writes += pairs.len() as u64;
                    for (u, g) in pairs {
                        let f = s.failed.entry(u).or_insert(UNKNOWN);
                        *f = (*f).max(g);
                    }
                }
                Kind::InFlight => {
                    s.summary.in_flight_writes += pairs.len() as u64;
                    for (u, g) in pairs {
                        let f = s.in_flight.entry(u).or_insert(UNKNOWN);
                        *f = (*f).max(g);
                    }
                }
                Kind::End => s.summary.complete = true,
            }
        }
        s.summary.durable_units = (0..units as u32)
            .filter(|&u| s.unit(u).owed() != UNKNOWN)
            .count() as u64;
        Ok(s)
    }

    /// What the log says about `unit` (an index below `header.units`).
    pub fn unit(&self, unit: u32) -> UnitLog {
        let i = unit as usize;
        UnitLog {
            durable: self.durable.get(i).copied().unwrap_or(UNKNOWN),
            acked: self.acked.get(i).copied().unwrap_or(UNKNOWN),
            in_flight: self.in_flight.get(&unit).copied().unwrap_or(UNKNOWN),
            failed: self.failed.get(&unit).copied().unwrap_or(UNKNOWN),
        }
    }
}

type Parsed = (Kind, u16, u64, Vec<(u32, u32)>, usize);

/// One record at the start of `b`: `Ok(None)` if it is cut short or fails its CRC (the torn
/// tail), `Err` if it is well formed but impossible (unknown kind, unit out of range).
fn parse_record(b: &[u8], units: usize) -> Result<Option<Parsed>> {
    if b.len() < RECORD_HDR + 4 {
        return Ok(None);
    }
    let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
    let count = u32_at(4);
    if count > MAX_PAIRS {
        return Ok(None);
    }
    let body = RECORD_HDR + 8 * count as usize;
    if b.len() < body + 4 {
        return Ok(None);
    }
    if nvmf_tcp::digest::crc32c(&b[..body]) != u32_at(body) {
        return Ok(None);
    }
    let Some(kind) = Kind::from_code(b[0]) else {
        bail!("record of unknown kind {}", b[0]);
    };
    let qid = u16::from_le_bytes([b[2], b[3]]);
    let seq = u64::from(u32_at(8)) | (u64::from(u32_at(12)) << 32);
    let mut pairs = Vec::with_capacity(count as usize);
    for i in 0..count as usize {
        let (u, g) = (u32_at(RECORD_HDR + 8 * i), u32_at(RECORD_HDR + 8 * i + 4));
        if u as usize >= units {
            bail!("record names unit {u}, beyond the {units} units of the range");
        }
        pairs.push((u, g));
    }
    Ok(Some((kind, qid, seq, pairs, body + 4)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> LogHeader {
        LogHeader {
            run_id: 7,
            nsid: 1,
            lba_size: 512,
            bs: 4096,
            queues: 2,
            first_lba: 0,
            units: 16,
            created: 1,
        }
    }

    fn log(records: &[Record]) -> Vec<u8> {
        let mut b = header().encode().to_vec();
        for r in records {
            encode_record(r, &mut b);
        }
        b
    }

    fn rec(kind: Kind, qid: u16, seq: u64, pairs: &[(u32, u32)]) -> Record {
        Record {
            kind,
            qid,
            seq,
            pairs: pairs.to_vec(),
        }
    }

    #[test]
    fn a_flush_covers_its_queues_earlier_acks_only() {
        let b = log(&[
            rec(Kind::Acked, 1, 1, &[(0, 1), (1, 2)]),
            rec(Kind::Acked, 2, 1, &[(8, 1)]),
            rec(Kind::Acked, 1, 2, &[(0, 3)]),
            rec(Kind::Flushed, 1, 1, &[]),
            rec(Kind::Acked, 1, 3, &[(2, 4)]),
            rec(Kind::Flushed, 1, 2, &[]),
            rec(Kind::InFlight, 1, 0, &[(3, 5)]),
            rec(Kind::Failed, 2, 0, &[(9, 2)]),
            rec(Kind::Durable, 2, 0, &[(10, 3)]),
            rec(Kind::End, 0, 0, &[]),
        ]);
        let s = LogState::parse(&b).unwrap();
        assert_eq!(s.header, header());
        let u = |i| s.unit(i);
        assert_eq!((u(0).durable, u(0).acked), (3, 3)); // flush 2 covers the rewrite
        assert_eq!((u(1).durable, u(1).acked), (2, 2));
        assert_eq!((u(2).durable, u(2).acked), (UNKNOWN, 4)); // flush 3 never completed
        assert_eq!((u(8).durable, u(8).acked), (UNKNOWN, 1)); // queue 2 never flushed
        assert_eq!(u(3).in_flight, 5);
        assert_eq!((u(10).durable, u(10).acked), (3, 3)); // FUA
        assert_eq!((u(9).failed, u(9).owed()), (2, UNKNOWN));
        assert_eq!(
            s.summary,
            LogSummary {
                acked_writes: 6,
                flushes: 2,
                fua_writes: 1,
                failed_writes: 1,
                in_flight_writes: 1,
                durable_units: 3,
                complete: true,
                torn_tail_bytes: 0,
            }
        );
    }

    #[test]
    fn a_torn_tail_ends_the_log_and_bad_input_is_refused() {
        let mut b = log(&[
            rec(Kind::Acked, 1, 1, &[(0, 1)]),
            rec(Kind::Flushed, 1, 1, &[]),
        ]);
        let whole = b.len();
        let mut torn = b.clone();
        encode_record(&rec(Kind::Acked, 1, 2, &[(0, 2)]), &mut torn);
        torn.truncate(torn.len() - 3);
        let s = LogState::parse(&torn).unwrap();
        assert_eq!(s.unit(0).durable, 1);
        assert_eq!(s.unit(0).acked, 1);
        assert!(!s.summary.complete);
        assert_eq!(s.summary.torn_tail_bytes, (torn.len() - whole) as u64);
        // A flipped bit in the last record: that record is the torn tail.
        b[whole - 6] ^= 1;
        assert_eq!(LogState::parse(&b).unwrap().unit(0).durable, UNKNOWN);
        // Unit beyond the range, bad header.
        let bad = log(&[rec(Kind::Acked, 1, 1, &[(16, 1)])]);
        assert!(LogState::parse(&bad).is_err());
        let mut h = header().encode();
        h[20] = 1;
        assert!(LogHeader::decode(&h).is_err());
        assert!(LogHeader::decode(b"short").is_err());
    }
}
