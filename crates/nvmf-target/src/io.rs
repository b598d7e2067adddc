//! NVM I/O against the namespace backend: the prepared request ([`IoRequest`]), the one
//! place backend errors map to NVMe status ([`backend_status`]; its execution,
//! [`crate::execute_io`], is in `cmds.rs`), and the queue's SMART counter batch. The
//! commands themselves are prepared in `io_cmd.rs`.

use crate::error::CmdError;
use crate::log_limit::RateLimit;
use crate::model::{Namespace, Subsystem};
use ebof_backend::BackendError;
use nvme_spec::Status;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// What to do on the backend.
#[derive(Clone, Debug)]
pub enum IoOp {
    /// Read `len` bytes at `offset` into the slot buffer (or stream them from the backend).
    Read,
    /// Write the slot buffer's `len` bytes at `offset`.
    Write {
        /// Flush after writing (FUA set, or the volatile write cache is off).
        fua: bool,
    },
    /// Flush this namespace's backend.
    Flush,
    /// Flush every namespace of the subsystem (NSID FFFFFFFFh).
    FlushAll(Arc<Subsystem>),
    /// Write zeroes over the range.
    WriteZeroes {
        /// The host allows deallocation instead (DEAC, CDW12 bit 25).
        deallocate: bool,
        /// Flush before completing (FUA, or the volatile write cache is off).
        fua: bool,
    },
    /// Dataset Management deallocate; `nr` 16-byte ranges are in the slot buffer.
    Deallocate {
        /// Number of ranges (NR + 1).
        nr: u32,
    },
    /// Compare the range with the host data in the slot buffer ([`crate::cmds`]).
    Compare,
    /// Check that the range is readable; no data moves.
    Verify,
    /// Copy: `nr` validated 32-byte source range descriptors (format 0) are in the slot buffer;
    /// `offset`/`len` are the destination.
    Copy {
        /// Number of source ranges (NR + 1).
        nr: u32,
        /// Flush after writing (FUA set, or the volatile write cache is off).
        fua: bool,
    },
    /// Fused Compare-and-Write under the namespace gate: the slot buffer holds the Compare's
    /// data then the Write's ([`crate::cmds::compare_and_write`]).
    CompareWrite {
        /// Flush after writing (FUA set, or the volatile write cache is off).
        fua: bool,
    },
}

impl IoOp {
    /// True for commands that touch namespace data and so pass the namespace gate
    /// ([`crate::gate`]) that makes fused Compare-and-Write atomic.
    pub fn gated(&self) -> bool {
        matches!(
            self,
            IoOp::Read
                | IoOp::Write { .. }
                | IoOp::WriteZeroes { .. }
                | IoOp::Deallocate { .. }
                | IoOp::Compare
                | IoOp::Copy { .. }
        )
    }

    /// True for commands that only read the namespace (their failures map to read errors).
    fn reads_only(&self) -> bool {
        matches!(self, IoOp::Read | IoOp::Compare | IoOp::Verify)
    }
}

/// One queue's own handle on a namespace (made at Connect). Commands clone this `Arc`, whose
/// refcount only the queue's core touches, instead of the namespace's shared one: nothing on
/// the per-command path is written by two cores.
#[derive(Debug)]
pub struct NsRef(pub Arc<Namespace>);

impl std::ops::Deref for NsRef {
    type Target = Namespace;
    fn deref(&self) -> &Namespace {
        &self.0
    }
}

/// A prepared backend operation; `offset`/`len` in bytes, validated against the namespace.
#[derive(Clone, Debug)]
pub struct IoRequest {
    /// What to do.
    pub op: IoOp,
    /// The queue's handle on the namespace it runs on.
    pub ns: Arc<NsRef>,
    /// Byte offset in the namespace (SLBA × block size; for Copy, the destination's; 0 for
    /// flushes and deallocation).
    pub offset: u64,
    /// Byte length (block count × block size; for Copy, the destination's; 0 for flushes and
    /// deallocation).
    pub len: u64,
}

impl IoRequest {
    /// True if the backend may block (the driver then runs it on a worker thread).
    pub fn may_block(&self) -> bool {
        match &self.op {
            IoOp::FlushAll(s) => s.namespaces.iter().any(|n| n.backend.writes_block()),
            IoOp::Read | IoOp::Compare | IoOp::Verify => self.ns.backend.may_block(),
            _ => self.ns.backend.writes_block(),
        }
    }
    /// First LBA (for the Error log).
    pub fn slba(&self) -> u64 {
        self.offset / u64::from(self.ns.block_size)
    }
}

pub use crate::failure::FailureClass;

/// Map a backend error to an NVMe status, deliberately per class (the choices follow the
/// Linux target's `errno_to_nvme_status` where it has one):
///
/// | class | write / flush / zeroes | read | DNR |
/// |---|---|---|---|
/// | out of range | LBA Out of Range (00/80h) | same | yes |
/// | no space | Capacity Exceeded (00/81h) | Unrecovered Read Error (02/81h) | yes |
/// | truncated file | Write Fault (02/80h) | Unrecovered Read Error (02/81h) | yes |
/// | read-only, permission | Namespace is Write Protected (00/20h) | Access Denied (02/86h) | yes |
/// | unsupported | Internal Error (00/06h) | same | yes |
/// | transient | Command Interrupted (00/21h) | same | no |
/// | device gone | Write Fault | Unrecovered Read Error | yes |
/// | media (EIO, other) | Write Fault | Unrecovered Read Error | no |
pub fn backend_status(e: &BackendError, write: bool) -> Status {
    let media = if write {
        Status::WRITE_FAULT
    } else {
        Status::UNRECOVERED_READ
    };
    match FailureClass::of(e) {
        FailureClass::OutOfRange => Status::LBA_RANGE,
        FailureClass::NoSpace if write => Status::CAP_EXCEEDED,
        FailureClass::NoSpace | FailureClass::Truncated | FailureClass::Gone => {
            media.with_dnr(true)
        }
        FailureClass::ReadOnly if write => Status::NS_WRITE_PROTECTED,
        FailureClass::ReadOnly => Status::ACCESS_DENIED.with_dnr(true),
        FailureClass::Unsupported => Status::INTERNAL,
        FailureClass::Transient => Status::CMD_INTERRUPTED,
        FailureClass::PathInaccessible => Status::ANA_INACCESSIBLE,
        FailureClass::Media => media.with_dnr(false),
    }
}

/// The NVMe status of `req` whose backend operation a driver ran itself (the runtime's
/// io_uring engine) instead of through [`crate::execute_io`]: success, or the failure logged and
/// mapped exactly as [`crate::execute_io`] maps it.
pub fn io_status(req: &IoRequest, result: Result<(), BackendError>) -> Status {
    match result {
        Ok(()) => Status::SUCCESS,
        Err(e) => failed(req, &e),
    }
}

/// Log a backend failure of `req` and map it to its NVMe status (also for a streamed read,
/// see [`crate::C2hData::Read`], whose failure shows only when the transport reads).
///
/// The warning is rate-limited per failure class ([`crate::log_limit`]): a full disk or a
/// truncated file under load writes one line per class every few seconds, with the number of
/// failures in between.
pub(crate) fn failed(req: &IoRequest, e: &BackendError) -> Status {
    failed_as(req, e, !req.op.reads_only())
}

/// [`failed`] for a failure whose kind (a read or a write) the operation does not tell alone
/// (the phases of Copy and Compare-and-Write).
pub(crate) fn failed_as(req: &IoRequest, e: &BackendError, write: bool) -> Status {
    let class = FailureClass::of(e);
    req.ns.stats.backend_errors[class as usize].fetch_add(1, Ordering::Relaxed);
    let status = backend_status(e, write);
    // One limiter per class: a flood of one cause does not hide the first of another.
    static LIMITS: [RateLimit; FailureClass::COUNT] =
        [const { RateLimit::new(crate::log_limit::WINDOW) }; FailureClass::COUNT];
    if let Some(suppressed) = LIMITS[class as usize].allow() {
        tracing::warn!(nsid = req.ns.nsid, op = ?req.op, offset = req.offset, len = req.len,
            error = %e, ?class, %status, suppressed, "backend I/O failed");
    }
    status
}

/// SMART counters gathered by one queue and added to the namespaces' shared counters in
/// batches (when the queue goes idle, every [`StatsBatch::LIMIT`] commands, on its timer tick
/// and when it closes), so that the per-command path touches no memory shared between cores.
#[derive(Debug, Default)]
pub(crate) struct StatsBatch {
    per_ns: Vec<(Arc<NsRef>, Counts)>,
    pending: u32,
    /// The host's counters, when per-host counting is on ([`crate::host_io`]): published
    /// into with the namespaces' (never per command).
    host: Option<Arc<crate::host_io::HostIo>>,
}

/// One namespace's share of a [`StatsBatch`]; the fields of [`crate::model::NsStats`].
#[derive(Debug, Default)]
struct Counts {
    read_cmds: u64,
    bytes_read: u64,
    write_cmds: u64,
    bytes_written: u64,
    media_errors: u64,
    read_latency: crate::latency::LatencyBatch,
    write_latency: crate::latency::LatencyBatch,
}

impl StatsBatch {
    /// Commands after which the batch is published even under sustained load.
    pub const LIMIT: u32 = 1024;

    /// Count a finished command that took `latency_ns` in the target.
    pub fn add(&mut self, req: &IoRequest, status: Status, latency_ns: u64) {
        if !matches!(req.op, IoOp::Read | IoOp::Write { .. }) {
            return;
        }
        let slot = match self
            .per_ns
            .iter()
            .position(|(n, _)| Arc::ptr_eq(n, &req.ns))
        {
            Some(p) => p,
            None => {
                self.per_ns.push((req.ns.clone(), Counts::default()));
                self.per_ns.len() - 1
            }
        };
        let c = &mut self.per_ns[slot].1;
        match (&req.op, status.is_success()) {
            (_, false) => c.media_errors += 1,
            (IoOp::Read, true) => {
                c.read_cmds += 1;
                c.bytes_read += req.len;
                c.read_latency.record(latency_ns);
            }
            (_, true) => {
                c.write_cmds += 1;
                c.bytes_written += req.len;
                c.write_latency.record(latency_ns);
            }
        }
        self.pending += 1;
    }

    /// Drop the (published) per-namespace entries, so no removed namespace is kept alive.
    pub fn forget_all(&mut self) {
        if self.pending == 0 {
            self.per_ns.clear();
        }
    }

    /// True when the batch should be published now.
    pub fn full(&self) -> bool {
        self.pending >= Self::LIMIT
    }

    /// Count into the host's counters `h` too from now on (set at Connect).
    pub fn set_host(&mut self, h: Option<Arc<crate::host_io::HostIo>>) {
        self.host = h;
    }

    /// Add everything gathered to the namespaces' counters (and to the host's).
    pub fn publish(&mut self) {
        if self.pending == 0 {
            return;
        }
        let host = self.host.as_deref();
        for (ns, c) in &mut self.per_ns {
            let s = &ns.stats;
            c.read_latency
                .publish_to(&s.read_latency, host.map(|h| &h.read_latency));
            c.write_latency
                .publish_to(&s.write_latency, host.map(|h| &h.write_latency));
            for (counter, hc, v) in [
                (&s.read_cmds, host.map(|h| &h.read_cmds), &mut c.read_cmds),
                (
                    &s.bytes_read,
                    host.map(|h| &h.bytes_read),
                    &mut c.bytes_read,
                ),
                (
                    &s.write_cmds,
                    host.map(|h| &h.write_cmds),
                    &mut c.write_cmds,
                ),
                (
                    &s.bytes_written,
                    host.map(|h| &h.bytes_written),
                    &mut c.bytes_written,
                ),
                (
                    &s.media_errors,
                    host.map(|h| &h.media_errors),
                    &mut c.media_errors,
                ),
            ] {
                let v = std::mem::take(v);
                if v > 0 {
                    counter.fetch_add(v, Ordering::Relaxed);
                    if let Some(hc) = hc {
                        hc.fetch_add(v, Ordering::Relaxed);
                    }
                }
            }
        }
        self.pending = 0;
    }
}

/// Validate an LBA range of `ns`; returns (byte offset, byte length).
pub(crate) fn lba_range(ns: &Namespace, slba: u64, nlb: u64) -> Result<(u64, u64), CmdError> {
    match slba.checked_add(nlb) {
        Some(end) if end <= ns.blocks() => {}
        _ => return Err(CmdError::at(Status::LBA_RANGE, 40)),
    }
    let bs = u64::from(ns.block_size);
    Ok((slba * bs, nlb * bs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;

    fn errno(n: i32) -> BackendError {
        BackendError::Io(io::Error::from_raw_os_error(n))
    }

    /// Every errno class maps to the status the table in [`backend_status`] promises, for
    /// writes and reads, with DNR set exactly where retrying cannot help.
    #[test]
    fn each_errno_class_has_its_status() {
        let cases: [(BackendError, FailureClass, Status, Status); 11] = [
            (
                BackendError::path_inaccessible(),
                FailureClass::PathInaccessible,
                Status::ANA_INACCESSIBLE,
                Status::ANA_INACCESSIBLE,
            ),
            (
                errno(libc::ENOSPC),
                FailureClass::NoSpace,
                Status::CAP_EXCEEDED,
                Status::UNRECOVERED_READ.with_dnr(true),
            ),
            (
                errno(libc::EDQUOT),
                FailureClass::NoSpace,
                Status::CAP_EXCEEDED,
                Status::UNRECOVERED_READ.with_dnr(true),
            ),
            (
                errno(libc::EFBIG),
                FailureClass::NoSpace,
                Status::CAP_EXCEEDED,
                Status::UNRECOVERED_READ.with_dnr(true),
            ),
            (
                errno(libc::EIO),
                FailureClass::Media,
                Status::WRITE_FAULT,
                Status::UNRECOVERED_READ,
            ),
            (
                errno(libc::EROFS),
                FailureClass::ReadOnly,
                Status::NS_WRITE_PROTECTED,
                Status::ACCESS_DENIED.with_dnr(true),
            ),
            (
                errno(libc::EACCES),
                FailureClass::ReadOnly,
                Status::NS_WRITE_PROTECTED,
                Status::ACCESS_DENIED.with_dnr(true),
            ),
            (
                errno(libc::EOPNOTSUPP),
                FailureClass::Unsupported,
                Status::INTERNAL,
                Status::INTERNAL,
            ),
            (
                errno(libc::ENOMEM),
                FailureClass::Transient,
                Status::CMD_INTERRUPTED,
                Status::CMD_INTERRUPTED,
            ),
            (
                errno(libc::ENXIO),
                FailureClass::Gone,
                Status::WRITE_FAULT.with_dnr(true),
                Status::UNRECOVERED_READ.with_dnr(true),
            ),
            (
                BackendError::Io(io::Error::new(io::ErrorKind::UnexpectedEof, "short read")),
                FailureClass::Truncated,
                Status::WRITE_FAULT.with_dnr(true),
                Status::UNRECOVERED_READ.with_dnr(true),
            ),
        ];
        for (e, class, write, read) in cases {
            assert_eq!(FailureClass::of(&e), class, "{e}");
            assert_eq!(backend_status(&e, true), write, "write: {e}");
            assert_eq!(backend_status(&e, false), read, "read: {e}");
        }
        let oor = BackendError::OutOfRange {
            offset: 1,
            len: 2,
            size: 2,
        };
        assert_eq!(backend_status(&oor, true), Status::LBA_RANGE);
        // DNR where retrying cannot help, not where it may.
        assert!(backend_status(&errno(libc::ENOSPC), true).dnr);
        assert!(backend_status(&errno(libc::EROFS), true).dnr);
        assert!(!backend_status(&errno(libc::EAGAIN), true).dnr);
        // EIO may be transient on real media: the host may retry.
        assert!(!backend_status(&errno(libc::EIO), true).dnr);
    }
}
