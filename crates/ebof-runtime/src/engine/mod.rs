//! The per-reactor I/O engine for backends that may block (file, block device).
//!
//! Each reactor owns one [`Engine`]: I/O the reactor cannot run inline is handed to it as a
//! [`Job`] (the prepared request and its slot buffer) and comes back as a [`Done`] (status and
//! buffer), which the reactor gives to the connection's queue if the connection is still the
//! same one (`generation`).
//!
//! * **io_uring** ([`uring`]), the default: reads, writes (FUA as `RWF_DSYNC`) and Flush
//!   (`IORING_FSYNC_DATASYNC`) are submitted from the reactor thread as SQEs on the reactor's
//!   own ring; completions are reaped every loop iteration, and an eventfd registered with the
//!   ring wakes a sleeping reactor. Kernel worker threads (io-wq, used when an operation cannot
//!   complete without blocking) are capped at `io_threads` per NUMA node.
//! * **Worker pool** ([`pool`]): `io_threads` threads per reactor, started on demand, running
//!   the backend's synchronous calls ([`nvmf_target::execute_io`]). Used for everything when
//!   the engine is `threads` or io_uring is unavailable (old kernel, seccomp,
//!   `kernel.io_uring_disabled`), and under io_uring for Write Zeroes, Dataset Management
//!   deallocate and Flush of all namespaces, which go through the backend's zeroing logic
//!   (fallocate modes, `BLKZEROOUT` and their fallbacks).
//!
//! Either way the number of threads is fixed by the configuration, not by the load: a job
//! waits in a queue (the pool's, or the ring's backlog) instead of getting a thread.

mod pool;
mod uring;

use crate::duties::Offload;
use crate::mailbox::Mailbox;
use nvme_spec::Status;
use nvmf_target::{IoOp, IoRequest, Queue};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};

/// Which engine runs file and block I/O.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IoEngineKind {
    /// io_uring, one ring per reactor; falls back to [`IoEngineKind::Threads`] when the kernel
    /// refuses io_uring.
    #[default]
    IoUring,
    /// A fixed-size worker pool per reactor.
    Threads,
}

/// Engine settings (the same for every reactor).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineConfig {
    /// Which engine to try.
    pub kind: IoEngineKind,
    /// Worker threads per reactor (the pool), and the cap on io_uring's kernel workers per
    /// ring and NUMA node. At least 1.
    pub io_threads: usize,
}

impl EngineConfig {
    /// Default `io_threads`.
    pub const DEFAULT_IO_THREADS: usize = 4;
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            kind: IoEngineKind::IoUring,
            io_threads: Self::DEFAULT_IO_THREADS,
        }
    }
}

/// One I/O handed to the engine: where its completion goes, the request and the slot buffer.
pub(crate) struct Job {
    pub conn: usize,
    pub generation: u64,
    pub slot: u16,
    pub req: IoRequest,
    pub buf: Vec<u8>,
}

/// A finished [`Job`]: its status and the slot buffer (read data for a successful read).
pub(crate) struct Done {
    pub conn: usize,
    pub generation: u64,
    pub slot: u16,
    pub status: Status,
    pub buf: Vec<u8>,
}

impl Job {
    fn done(self, status: Status) -> Done {
        Done {
            conn: self.conn,
            generation: self.generation,
            slot: self.slot,
            status,
            buf: self.buf,
        }
    }
}

/// One reactor's engine: the ring (if io_uring runs) and the worker pool.
pub(crate) struct Engine {
    uring: Option<uring::Uring>,
    pool: pool::Pool,
    pool_done: mpsc::Receiver<Done>,
    /// Where asynchronous writes ([`ebof_backend::AsyncWrites`]) report, like the pool's
    /// threads: the same channel, and the reactor's mailbox to wake it.
    async_done: mpsc::Sender<Done>,
    mailbox: Arc<Mailbox>,
    /// Backends that started asynchronous writes this round: [`AsyncWrites::push_started`]
    /// at the next [`Engine::submit`].
    ///
    /// [`AsyncWrites::push_started`]: ebof_backend::AsyncWrites::push_started
    started_async: Vec<Arc<dyn ebof_backend::Backend>>,
    /// Jobs started and not yet reaped: while zero (RAM-only traffic) `submit` and `reap` cost
    /// one comparison.
    outstanding: usize,
}

/// One connection's offload to its run loop's engine ([`Offload`]): each prepared I/O becomes a
/// [`Job`] tagged with the connection (`conn`, its index in the run loop's table, and
/// `generation`, so a completion for a closed connection whose index was reused is
/// recognised). `started` counts the jobs started.
pub(crate) struct Offloader<'a> {
    engine: &'a mut Engine,
    conn: usize,
    generation: u64,
    /// Jobs started through this offloader.
    pub started: usize,
}

impl Offload for Offloader<'_> {
    fn offload(&mut self, q: &mut Queue, slot: u16) {
        let Some(req) = q.io_request(slot).cloned() else {
            return;
        };
        let buf = q.take_io_buffer(slot);
        let job = Job {
            conn: self.conn,
            generation: self.generation,
            slot,
            req,
            buf,
        };
        match self.engine.start(job) {
            // Finished without waiting (a replicated namespace's secondary copy).
            Some(done) => q.complete_io(done.slot, done.status, done.buf),
            None => self.started += 1,
        }
    }
}

/// The io_uring fallback is logged once per process, not once per reactor.
static FALLBACK_LOGGED: AtomicBool = AtomicBool::new(false);

impl Engine {
    /// The engine of the reactor on `core`; `mailbox` wakes that reactor when a worker thread
    /// finishes a job.
    pub fn new(cfg: EngineConfig, core: usize, mailbox: Arc<Mailbox>) -> Engine {
        let io_threads = cfg.io_threads.max(1);
        let uring = match cfg.kind {
            IoEngineKind::Threads => None,
            IoEngineKind::IoUring => match uring::Uring::new(io_threads) {
                Ok(u) => Some(u),
                Err(e) => {
                    if !FALLBACK_LOGGED.swap(true, Ordering::Relaxed) {
                        tracing::warn!(
                            error = %e,
                            io_threads,
                            "io_uring unavailable; file and block I/O runs on a fixed pool of \
                             io_threads worker threads per core instead"
                        );
                    }
                    None
                }
            },
        };
        let (tx, rx) = mpsc::channel();
        Engine {
            uring,
            pool: pool::Pool::new(core, io_threads, tx.clone(), mailbox.clone()),
            pool_done: rx,
            async_done: tx,
            mailbox,
            started_async: Vec::new(),
            outstanding: 0,
        }
    }

    /// What runs, for the log: `io_uring` or `threads`.
    pub fn name(&self) -> &'static str {
        if self.uring.is_some() {
            "io_uring"
        } else {
            "threads"
        }
    }

    /// Register what wakes the reactor when the ring has completions (the ring's eventfd).
    pub fn register(&mut self, registry: &mio::Registry, token: mio::Token) -> std::io::Result<()> {
        match &mut self.uring {
            Some(u) => u.register(registry, token),
            None => Ok(()),
        }
    }

    /// The offload of connection `conn` (of `generation`) to this engine.
    pub fn offloader(&mut self, conn: usize, generation: u64) -> Offloader<'_> {
        Offloader {
            engine: self,
            conn,
            generation,
            started: 0,
        }
    }

    /// Start `job`: as SQEs on the ring when it can (reads, writes, Flush of one namespace
    /// whose backend is a descriptor), else on the pool. Its [`Done`] comes from
    /// [`Engine::reap`]. SQEs reach the kernel at the next [`Engine::submit`]. `Some`: the job
    /// finished at once (an asynchronous backend's write that needed no waiting), and nothing
    /// will come from [`Engine::reap`] for it.
    pub fn start(&mut self, job: Job) -> Option<Done> {
        let job = match self.start_async(job) {
            Async::Not(job) => job,
            Async::Now(done) => return Some(done),
            Async::Started => {
                self.outstanding += 1;
                return None;
            }
        };
        self.outstanding += 1;
        match &mut self.uring {
            Some(u) if uring_op(&job.req) => u.push(job),
            _ => self.pool.spawn(job),
        }
        None
    }

    /// A plain write (no FUA) to a backend with asynchronous writes is started here; its
    /// [`Done`] arrives like a pool thread's. Gives the job back when it is not one, or the
    /// backend declined it (then it runs the blocking way).
    fn start_async(&mut self, job: Job) -> Async {
        let IoOp::Write { fua: false } = job.req.op else {
            return Async::Not(job);
        };
        let (offset, len) = (job.req.offset, job.req.len as usize);
        let Some(data) = job.buf.get(..len) else {
            return Async::Not(job);
        };
        let now = match job.req.ns.backend.async_writes() {
            None => return Async::Not(job),
            Some(w) => w.write_now(offset, data),
        };
        if let Some(res) = now {
            let status = nvmf_target::io_status(&job.req, res);
            return Async::Now(job.done(status));
        }
        let Job {
            conn,
            generation,
            slot,
            req,
            buf,
        } = job;
        let (tx, mailbox, ns) = (
            self.async_done.clone(),
            self.mailbox.clone(),
            req.ns.clone(),
        );
        let done: ebof_backend::WriteDone = Box::new(move |buf, res| {
            let status = nvmf_target::io_status(&req, res);
            let _ = tx.send(Done {
                conn,
                generation,
                slot,
                status,
                buf,
            });
            mailbox.notify();
        });
        let declined = match ns.backend.async_writes() {
            Some(w) => w.start_write(offset, len, buf, done),
            None => Err((buf, done)),
        };
        if declined.is_ok()
            && !self
                .started_async
                .iter()
                .any(|b| Arc::ptr_eq(b, &ns.backend))
        {
            self.started_async.push(ns.backend.clone());
        }
        if let Err((buf, done)) = declined {
            // Declined (it would block now): run on a worker thread, which may block.
            self.pool
                .spawn_call(Box::new(move || match ns.backend.async_writes() {
                    Some(w) if buf.len() >= len => w.run_declined(offset, len, buf, done),
                    _ => {
                        let res = match buf.get(..len) {
                            Some(data) => ns.backend.write(offset, data),
                            None => Err(ebof_backend::BackendError::Io(std::io::Error::other(
                                "write buffer shorter than the command",
                            ))),
                        };
                        done(buf, res);
                    }
                }));
        }
        Async::Started
    }

    /// Hand the SQEs queued since the last call to the kernel (one `io_uring_enter`), and the
    /// asynchronous writes started since then to their backends' threads.
    pub fn submit(&mut self) {
        for b in self.started_async.drain(..) {
            if let Some(w) = b.async_writes() {
                w.push_started();
            }
        }
        if self.outstanding == 0 {
            return;
        }
        if let Some(u) = &mut self.uring {
            u.submit();
        }
    }

    /// Every finished job, ring and pool; cheap when there are none (the ring's completion
    /// queue is shared memory, the pool's channel an atomic check), free when nothing is
    /// outstanding.
    pub fn reap(&mut self, mut f: impl FnMut(Done)) {
        if self.outstanding == 0 {
            return;
        }
        let mut reaped = 0usize;
        let mut f = |d: Done| {
            reaped += 1;
            f(d);
        };
        if let Some(u) = &mut self.uring {
            u.reap(&mut f);
        }
        while let Ok(d) = self.pool_done.try_recv() {
            f(d);
        }
        self.outstanding = self.outstanding.saturating_sub(reaped);
    }
}

/// What [`Engine::start_async`] did with a job.
enum Async {
    /// Not an asynchronous write: the job, to run the usual way.
    Not(Job),
    /// Finished at once.
    Now(Done),
    /// Started (or declined and queued on the pool): its [`Done`] comes through the channel.
    Started,
}

/// Whether the ring runs `req` itself.
fn uring_op(req: &IoRequest) -> bool {
    matches!(req.op, IoOp::Read | IoOp::Write { .. } | IoOp::Flush)
        && (req.ns.backend.raw_io().is_some() || req.ns.backend.crypt_io().is_some())
}
