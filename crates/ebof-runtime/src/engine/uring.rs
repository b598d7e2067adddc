//! The io_uring engine: one ring per reactor, used only from the reactor's thread.
//!
//! **Buffer ownership.** Every operation in the ring is an [`Op`] in the in-flight table
//! (`ops`), indexed by the SQE's `user_data`. The `Op` owns the job (its request, whose
//! `Arc` keeps the backend and so its descriptor alive) and the memory the kernel reads or
//! writes: the slot buffer, or for `O_DIRECT` an aligned bounce buffer. Neither is touched,
//! moved (only the `Op` record moves; the heap memory stays) or freed until the operation's
//! last CQE has been reaped: not when the connection closes (the `Done` is then dropped by
//! the reactor's generation check, after the kernel is finished with it), and not when the
//! ring is dropped (it waits for the kernel, and leaks what never completes).
//!
//! **Short transfers** are resubmitted for the rest. A read that returns 0 before the end
//! (past the end of a file truncated under us) fails with `UnexpectedEof`, as the synchronous
//! path's `read_exact_at` does; a write that returns 0 fails with `WriteZero`; a negative
//! result is the errno, as `BackendError::Io`. All go through `nvmf_target::io_status`, the
//! same mapping as the synchronous path.

use super::{Done, Job};
use ebof_backend::{AlignedBuf, BackendError, RawIo};
use io_uring::{IoUring, opcode, squeue, types};
use nvmf_target::{IoOp, io_status};
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// Submission queue entries (SQEs are handed to the kernel every loop iteration).
const SQ_ENTRIES: u32 = 256;
/// Completion queue entries.
const CQ_ENTRIES: u32 = 1024;
/// Operations in the kernel at once: never more than the completion queue holds, so it cannot
/// overflow; more wait in the backlog.
const MAX_IN_KERNEL: usize = CQ_ENTRIES as usize;
/// Resubmissions of an operation the kernel interrupted (`EINTR`, `EAGAIN`) before it fails.
const MAX_RETRIES: u8 = 8;
/// How long dropping the ring waits for operations still in the kernel.
const DROP_DRAIN: Duration = Duration::from_secs(30);
/// Bounce buffers kept for reuse (O_DIRECT).
const BOUNCE_KEEP: usize = 64;

/// One operation in the ring (or waiting for an SQE).
struct Op {
    job: Job,
    raw: RawIo,
    /// Bytes transferred so far; a short read or write is resubmitted for the rest.
    done: u64,
    /// O_DIRECT: the aligned memory the kernel reads into or writes from.
    bounce: Option<AlignedBuf>,
    retries: u8,
}

pub(super) struct Uring {
    ring: IoUring,
    eventfd: OwnedFd,
    /// The in-flight table; an SQE's `user_data` is its index.
    ops: Vec<Option<Op>>,
    free: Vec<usize>,
    /// Operations waiting for an SQE (new, or the rest of a short transfer).
    backlog: VecDeque<usize>,
    /// Operations with an SQE in the kernel.
    in_kernel: usize,
    /// Jobs finished without reaching the kernel (bad range, empty transfer).
    finished: Vec<Done>,
    bounces: Vec<AlignedBuf>,
}

impl Uring {
    /// A ring whose kernel workers are capped at `io_threads` (bounded and unbounded, per NUMA
    /// node). Fails if the kernel refuses io_uring or the cap (Linux < 5.15): the caller then
    /// uses the worker pool, so that the thread count stays bounded either way.
    pub fn new(io_threads: usize) -> io::Result<Uring> {
        let ring = IoUring::builder()
            .setup_cqsize(CQ_ENTRIES)
            .build(SQ_ENTRIES)?;
        let cap = u32::try_from(io_threads).unwrap_or(u32::MAX);
        ring.submitter()
            .register_iowq_max_workers(&mut [cap, cap])
            .map_err(|e| io::Error::new(e.kind(), format!("cannot cap io_uring workers: {e}")))?;
        // SAFETY: eventfd has no memory arguments; the result is checked below.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        let eventfd = unsafe { OwnedFd::from_raw_fd(fd) };
        ring.submitter().register_eventfd(eventfd.as_raw_fd())?;
        Ok(Uring {
            ring,
            eventfd,
            ops: Vec::new(),
            free: Vec::new(),
            backlog: VecDeque::new(),
            in_kernel: 0,
            finished: Vec::new(),
            bounces: Vec::new(),
        })
    }

    /// The eventfd is signalled for every completion; edge-triggered epoll reports each
    /// signal, so it is never read (its counter cannot overflow in practice: 2^64 - 1).
    pub fn register(&mut self, registry: &mio::Registry, token: mio::Token) -> io::Result<()> {
        let fd = self.eventfd.as_raw_fd();
        registry.register(
            &mut mio::unix::SourceFd(&fd),
            token,
            mio::Interest::READABLE,
        )
    }

    /// Queue `job` (a read, write or flush of a backend with a descriptor).
    pub fn push(&mut self, mut job: Job) {
        // An encrypted backend (ADR 0029) has no `raw_io`: its descriptor comes with the cipher.
        let (raw, crypt) = match job.req.ns.backend.raw_io() {
            Some(raw) => (raw, false),
            None => match job.req.ns.backend.crypt_io() {
                Some(c) => (c.raw, true),
                None => return self.fail(job, io::ErrorKind::Unsupported.into()),
            },
        };
        let (offset, len) = (job.req.offset, job.req.len);
        let transfer = matches!(job.req.op, IoOp::Read | IoOp::Write { .. });
        if transfer {
            let size = job.req.ns.backend.size();
            if offset.checked_add(len).is_none_or(|end| end > size) {
                let e = BackendError::OutOfRange { offset, len, size };
                let status = io_status(&job.req, Err(e));
                return self.finished.push(job.done(status));
            }
            let misaligned = raw
                .direct
                .is_some_and(|a| offset % u64::from(a) != 0 || len % u64::from(a) != 0);
            if misaligned || u32::try_from(len).is_err() {
                return self.fail(job, io::Error::from_raw_os_error(libc::EINVAL));
            }
            if len == 0 {
                return self.finished.push(job.done(nvme_spec::Status::SUCCESS));
            }
        }
        let len = len as usize;
        let mut bounce = None;
        match job.req.op {
            IoOp::Read if raw.direct.is_some() => bounce = Some(self.bounce(len)),
            IoOp::Read => job.buf.resize(len, 0),
            IoOp::Write { .. } => {
                let Some(data) = job.buf.get(..len) else {
                    return self.fail(job, io::Error::from_raw_os_error(libc::EINVAL));
                };
                if raw.direct.is_some() {
                    let mut b = self.bounce(len);
                    b.as_mut_slice().copy_from_slice(data);
                    bounce = Some(b);
                }
                // Encrypted: the data is sealed in the memory the kernel writes from (the slot
                // buffer is not read again after the write).
                if crypt && let Err(e) = Self::seal(&mut job, bounce.as_mut(), len) {
                    return self.fail(job, e);
                }
            }
            IoOp::Flush => {}
            IoOp::FlushAll(_)
            | IoOp::WriteZeroes { .. }
            | IoOp::Deallocate { .. }
            | IoOp::Compare
            | IoOp::Verify
            | IoOp::Copy { .. }
            | IoOp::CompareWrite { .. } => {
                return self.fail(job, io::ErrorKind::Unsupported.into());
            }
        }
        let op = Op {
            job,
            raw,
            done: 0,
            bounce,
            retries: 0,
        };
        let idx = match self.free.pop() {
            Some(i) => {
                self.ops[i] = Some(op);
                i
            }
            None => {
                self.ops.push(Some(op));
                self.ops.len() - 1
            }
        };
        self.backlog.push_back(idx);
    }

    /// Encrypts a write's data where the kernel will read it (ADR 0029).
    fn seal(job: &mut Job, bounce: Option<&mut AlignedBuf>, len: usize) -> io::Result<()> {
        let offset = job.req.offset;
        let Some(c) = job.req.ns.backend.crypt_io() else {
            return Err(io::ErrorKind::Unsupported.into());
        };
        let data = match bounce {
            Some(b) => b.as_mut_slice(),
            None => job.buf.get_mut(..len).ok_or(io::ErrorKind::InvalidInput)?,
        };
        ebof_backend::crypt::seal_write(c.cipher, offset, data).map_err(io::Error::other)
    }

    fn fail(&mut self, job: Job, e: io::Error) {
        let status = io_status(&job.req, Err(BackendError::Io(e)));
        self.finished.push(job.done(status));
    }

    fn bounce(&mut self, len: usize) -> AlignedBuf {
        match self.bounces.pop() {
            Some(mut b) => {
                b.set_len(len);
                b
            }
            None => AlignedBuf::zeroed(len),
        }
    }

    /// Move backlog operations into the submission queue while the kernel has room for them.
    fn fill(&mut self) {
        let mut entered = false;
        while self.in_kernel < MAX_IN_KERNEL {
            let Some(&idx) = self.backlog.front() else {
                break;
            };
            let Some(Some(op)) = self.ops.get_mut(idx) else {
                self.backlog.pop_front();
                continue;
            };
            let sqe = op.sqe(idx);
            // SAFETY: every address in `sqe` points into memory owned by `ops[idx]` (the slot
            // buffer or the bounce buffer, at least `len - done` bytes past the address) and
            // its descriptor is kept open by the job's namespace `Arc`; the `Op` stays in the
            // table, its buffers neither moved nor freed, until the CQE for this SQE is reaped
            // (`reap`), or forever if the ring is dropped first (`Drop`).
            if unsafe { self.ring.submission().push(&sqe) }.is_err() {
                if entered {
                    break;
                }
                // The submission queue is full: hand it to the kernel and try once more.
                entered = true;
                self.enter();
                continue;
            }
            self.backlog.pop_front();
            self.in_kernel += 1;
        }
    }

    /// Hand queued SQEs to the kernel.
    pub fn submit(&mut self) {
        self.fill();
        if !self.ring.submission().is_empty() {
            self.enter();
        }
    }

    fn enter(&mut self) {
        match self.ring.submit() {
            Ok(_) => {}
            // Transient (completion queue busy, interrupted): the SQEs stay queued for the
            // next iteration.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EAGAIN | libc::EBUSY | libc::EINTR)
                ) => {}
            Err(e) => tracing::error!(error = %e, "io_uring_enter failed"),
        }
    }

    /// Every finished operation; resubmits the rest of short transfers.
    pub fn reap(&mut self, f: &mut impl FnMut(Done)) {
        for d in self.finished.drain(..) {
            f(d);
        }
        let mut again = false;
        for cqe in self.ring.completion() {
            self.in_kernel = self.in_kernel.saturating_sub(1);
            let Ok(idx) = usize::try_from(cqe.user_data()) else {
                continue;
            };
            let Some(slot) = self.ops.get_mut(idx) else {
                continue;
            };
            let Some(op) = slot.as_mut() else {
                continue;
            };
            let Some(result) = op.complete(cqe.result()) else {
                self.backlog.push_back(idx);
                again = true;
                continue;
            };
            let Some(op) = slot.take() else {
                continue;
            };
            self.free.push(idx);
            let Op {
                mut job, bounce, ..
            } = op;
            let mut result = result;
            if let Some(b) = bounce {
                if result.is_ok() && matches!(job.req.op, IoOp::Read) {
                    job.buf.clear();
                    job.buf.extend_from_slice(b.as_slice());
                }
                if self.bounces.len() < BOUNCE_KEEP {
                    self.bounces.push(b);
                }
            }
            // Encrypted (ADR 0029): the ciphertext read is decrypted here, on the reactor.
            if result.is_ok()
                && matches!(job.req.op, IoOp::Read)
                && let Some(c) = job.req.ns.backend.crypt_io()
            {
                let len = job.req.len as usize;
                result = match job.buf.get_mut(..len) {
                    Some(data) => ebof_backend::crypt::open_read(c.cipher, job.req.offset, data),
                    None => Err(BackendError::Io(io::ErrorKind::InvalidInput.into())),
                };
            }
            let status = io_status(&job.req, result);
            f(job.done(status));
        }
        if again {
            self.submit();
        }
    }
}

impl Op {
    /// The SQE for what is left of this operation.
    fn sqe(&mut self, idx: usize) -> squeue::Entry {
        let fd = types::Fd(self.raw.fd);
        let at = self.done as usize;
        let offset = self.job.req.offset + self.done;
        // `push` checked that the length fits u32.
        let rest = u32::try_from(self.job.req.len - self.done).unwrap_or(0);
        let entry = match self.job.req.op {
            IoOp::Read => {
                let base = match &mut self.bounce {
                    Some(b) => b.as_mut_ptr(),
                    None => self.job.buf.as_mut_ptr(),
                };
                opcode::Read::new(fd, base.wrapping_add(at), rest)
                    .offset(offset)
                    .build()
            }
            IoOp::Write { fua } => {
                let base: *const u8 = match &mut self.bounce {
                    Some(b) => b.as_mut_ptr(),
                    None => self.job.buf.as_ptr(),
                };
                // FUA (or a disabled write cache): write-through, like a write followed by
                // fdatasync of its range.
                let flags = if fua { libc::RWF_DSYNC } else { 0 };
                opcode::Write::new(fd, base.wrapping_add(at), rest)
                    .offset(offset)
                    .rw_flags(flags)
                    .build()
            }
            _ => opcode::Fsync::new(fd)
                .flags(types::FsyncFlags::DATASYNC)
                .build(),
        };
        entry.user_data(idx as u64)
    }

    /// Account for a CQE's result: `Some(result)` when the operation is finished, `None` when
    /// the rest must be submitted again.
    fn complete(&mut self, res: i32) -> Option<Result<(), BackendError>> {
        if res < 0 {
            let errno = -res;
            if matches!(errno, libc::EINTR | libc::EAGAIN) && self.retries < MAX_RETRIES {
                self.retries += 1;
                return None;
            }
            return Some(Err(BackendError::Io(io::Error::from_raw_os_error(errno))));
        }
        match self.job.req.op {
            IoOp::Read | IoOp::Write { .. } => {
                if res == 0 {
                    let e = if matches!(self.job.req.op, IoOp::Read) {
                        io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "read past the end of the file (truncated under the target?)",
                        )
                    } else {
                        io::Error::from(io::ErrorKind::WriteZero)
                    };
                    return Some(Err(BackendError::Io(e)));
                }
                self.done += u64::from(res.unsigned_abs());
                (self.done >= self.job.req.len).then_some(Ok(()))
            }
            _ => Some(Ok(())),
        }
    }
}

impl Drop for Uring {
    /// Wait for what the kernel still holds; what it never returns is leaked, never freed.
    fn drop(&mut self) {
        let deadline = Instant::now() + DROP_DRAIN;
        while self.in_kernel > 0 && Instant::now() < deadline {
            let ts = types::Timespec::new().sec(1);
            let args = types::SubmitArgs::new().timespec(&ts);
            if let Err(e) = self.ring.submitter().submit_with_args(1, &args)
                && !matches!(
                    e.raw_os_error(),
                    Some(libc::ETIME | libc::EINTR | libc::EBUSY)
                )
            {
                break;
            }
            for cqe in self.ring.completion() {
                self.in_kernel = self.in_kernel.saturating_sub(1);
                if let Some(slot) = usize::try_from(cqe.user_data())
                    .ok()
                    .and_then(|i| self.ops.get_mut(i))
                {
                    *slot = None;
                }
            }
        }
        if self.in_kernel > 0 {
            tracing::warn!(
                operations = self.in_kernel,
                "io_uring operations did not complete; their buffers are leaked"
            );
            for op in self.ops.drain(..).flatten() {
                std::mem::forget(op);
            }
        }
    }
}
