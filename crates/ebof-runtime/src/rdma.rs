//! NVMe/RDMA: per-core RDMA pollers beside the TCP reactors (ADR 0017).
//!
//! One thread per configured core, pinned to it, each a mio loop over: its RDMA CM event
//! channel, one completion channel + CQ per device (shared by all its queue pairs: one poll
//! drains every queue on the core), its I/O engine (the same as a TCP reactor's: io_uring or
//! the worker pool, for file and block namespaces) and a mailbox. The first thread also owns the
//! listeners' CM ids: a connect request is checked (NVMe/RDMA private data: RECFMT, QID,
//! HSQSIZE, HRQSIZE; a bad one is rejected with the spec's status) and handed round-robin to a
//! thread, which moves the CM id to its own channel, makes the QP on its CQ, posts the receive
//! buffers and accepts. Each queue's commands then run through [`RdmaQueueCore`] (sans-IO);
//! this file only moves its work requests to the verbs and completions back.
//!
//! Memory: receive buffers are per queue (entries × (64 + in-capsule size)), registered once;
//! staging buffers come from a per-thread pool of 128 KiB chunks registered in 4 MiB slabs
//! (grown on demand, never shrunk); every RAM namespace present at the first connection on a
//! device is registered whole (pinned) so reads and writes move straight between the wire and
//! the namespace. Namespaces added later use staging.

use crate::duties::{self, Close};
use crate::engine::{Done, Engine, EngineConfig};
use crate::mailbox::Mailbox;
use crate::pace::Pace;
use crate::rdma_core::{Buf, Local, Memory, Op, RdmaQueueConfig, RdmaQueueCore};
use crate::timers::Timers;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use nvmf_rdma::verbs::{
    self, CmEvent, CmEventKind, CmId, CompChannel, ConnParams, Cq, Device, EventChannel, Mr,
    QpCaps, RecvWr, SendOp, SendWr, Sge, Wc,
};
use nvmf_rdma::wire::{self, CmLimits, CmRequest};
use nvmf_target::Target;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

const CM: Token = Token(usize::MAX);
const WAKER: Token = Token(usize::MAX - 1);
const ENGINE: Token = Token(usize::MAX - 2);
/// Tokens from here down are completion channels (one per device).
const COMP_BASE: usize = usize::MAX - 64;
/// The listeners' CM channel (first thread only).
const LISTEN: usize = COMP_BASE - 1;

/// Longest sleep in the poll (the stop flag is checked on the tick).
const MAX_SLEEP: Duration = Duration::from_millis(100);
/// Staging chunk: MDTS (the largest transfer a command may have).
const CHUNK: usize = 128 * 1024;
/// Chunks registered at once when the pool runs dry.
const SLAB_CHUNKS: usize = 32;
/// CQ sizes tried per device per thread, largest first.
const CQ_SIZES: [i32; 4] = [65536, 32767, 16384, 8192];
/// RDMA READs a queue may have in flight (and the host against us: IRD/ORD we accept).
const RD_ATOM: u8 = 16;
/// A disconnected queue waits this long for its flushed work requests before it is freed.
const DRAIN: Duration = Duration::from_secs(5);

/// RDMA settings of a server.
#[derive(Clone, Debug, Default)]
pub struct RdmaConfig {
    /// RDMA listeners (discovery is served on each).
    pub listeners: Vec<SocketAddr>,
    /// A dedicated RDMA discovery listener.
    pub discovery: Option<SocketAddr>,
}

/// How the pollers run (from the server's settings).
#[derive(Clone, Copy, Debug)]
pub struct RdmaRun {
    /// Keep polling the CQs without sleeping for this long after work (0: event-driven).
    pub spin: Duration,
    /// The I/O engine for file and block namespaces.
    pub engine: EngineConfig,
    /// A queue that has not completed Fabrics Connect this long after it was accepted is
    /// disconnected (`[target] handshake_timeout_ms`).
    pub handshake_timeout: Duration,
}

/// Why RDMA could not start.
#[derive(Debug, thiserror::Error)]
pub enum RdmaStartError {
    /// No RDMA device is usable (or rdma-core could not be loaded); the text says which.
    #[error("RDMA: {0}")]
    NoDevice(String),
    /// Binding or listening on an RDMA CM id failed.
    #[error("RDMA listener {addr}: {source}")]
    Listen {
        /// The address the listener was to use.
        addr: SocketAddr,
        /// The verb that failed.
        source: verbs::Error,
    },
    /// Another verb failed while setting up (event channel, device, completion queues).
    #[error("RDMA: {0}")]
    Verbs(#[from] verbs::Error),
    /// A poller thread could not be spawned.
    #[error("RDMA: cannot start a thread: {0}")]
    Thread(std::io::Error),
}

/// A connect request handed to a thread.
struct Incoming {
    id: CmId,
    req: CmRequest,
    local: SocketAddr,
    peer: Option<SocketAddr>,
    discovery_only: bool,
    ird: u8,
    ord: u8,
}

/// Running RDMA threads.
pub struct RdmaHandle {
    threads: Vec<std::thread::JoinHandle<()>>,
    mailboxes: Vec<Arc<Mailbox>>,
}

impl RdmaHandle {
    /// Wake every thread (they check the shared stop flag) and wait for them.
    pub fn join(mut self) {
        for m in &self.mailboxes {
            m.wake();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Start the RDMA threads on `cores`; listeners are bound before this returns (errors are the
/// caller's: no RDMA device, address not on an RDMA device).
pub fn start(
    target: Arc<Target>,
    cfg: &RdmaConfig,
    cores: &[usize],
    run: RdmaRun,
    stop: Arc<AtomicBool>,
) -> Result<RdmaHandle, RdmaStartError> {
    verbs::devices().map_err(RdmaStartError::NoDevice)?;
    raise_memlock();
    let listen_ch = EventChannel::new()?;
    let mut listeners = Vec::new();
    for (addr, disc) in cfg
        .listeners
        .iter()
        .map(|a| (*a, false))
        .chain(cfg.discovery.map(|a| (a, true)))
    {
        let id = CmId::new(&listen_ch)?;
        id.set_token(listeners.len() as u64);
        id.listen(addr, 1024)
            .map_err(|source| RdmaStartError::Listen { addr, source })?;
        tracing::info!(local = %addr, discovery_only = disc, "listening (NVMe/RDMA)");
        listeners.push((id, addr, disc));
    }
    let mut pollers = Vec::new();
    let mut mailboxes = Vec::new();
    for &core in cores {
        let poll = Poll::new().map_err(RdmaStartError::Thread)?;
        let mailbox =
            Arc::new(Mailbox::new(poll.registry(), WAKER).map_err(RdmaStartError::Thread)?);
        mailboxes.push(mailbox.clone());
        pollers.push((core, poll, mailbox));
    }
    let inboxes: Vec<Inbox> = cores
        .iter()
        .map(|_| Arc::new(Mutex::new(Vec::new())))
        .collect();
    let mut threads = Vec::new();
    let mut listen = Some((listen_ch, listeners));
    for (i, (core, poll, mailbox)) in pollers.into_iter().enumerate() {
        let t = RdmaThread {
            core,
            target: target.clone(),
            poll,
            mailbox,
            inbox: inboxes[i].clone(),
            peers: (inboxes.clone(), mailboxes.clone()),
            next_peer: 0,
            stop: stop.clone(),
            listen: listen.take(),
            engine_cfg: run.engine,
            spin: run.spin,
            handshake_timeout: run.handshake_timeout,
        };
        let th = std::thread::Builder::new()
            .name(format!("ebof-rdma{core}"))
            .spawn(move || t.run())
            .map_err(RdmaStartError::Thread)?;
        threads.push(th);
    }
    Ok(RdmaHandle { threads, mailboxes })
}

/// Pinning registered memory counts against RLIMIT_MEMLOCK: raise it as far as allowed.
fn raise_memlock() {
    // SAFETY: getrlimit/setrlimit on our own process with a valid struct.
    unsafe {
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut r) == 0 && r.rlim_cur != r.rlim_max {
            r.rlim_cur = r.rlim_max;
            let _ = libc::setrlimit(libc::RLIMIT_MEMLOCK, &r);
        }
    }
}

/// RAM namespaces registered on a device, shared by every thread (registered once).
struct NsRegistry {
    /// Each registration with the backend whose memory it pins (kept alive with it).
    mrs: Vec<(Mr, Arc<dyn ebof_backend::Backend>)>,
}

fn ns_registry(dev: &Arc<Device>, target: &Target) -> Arc<NsRegistry> {
    static T: OnceLock<Mutex<HashMap<usize, Arc<NsRegistry>>>> = OnceLock::new();
    let t = T.get_or_init(|| Mutex::new(HashMap::new()));
    let mut t = t.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(r) = t.get(&dev.id()) {
        return r.clone();
    }
    let mut mrs = Vec::new();
    for s in target.subsystems().iter() {
        for ns in &s.namespaces {
            let b = &ns.backend;
            // From here on the backend zeroes in place instead of dropping pages.
            let Some((p, len)) = b.pin_for_dma() else {
                continue;
            };
            // SAFETY: a RAM backend's memory stays mapped while the backend lives; the
            // registration keeps the backend (an Arc beside the MR) as long as the MR.
            match unsafe { dev.register(p.as_ptr(), len) } {
                Ok(mr) => {
                    tracing::info!(
                        nsid = ns.nsid,
                        bytes = len,
                        "RAM namespace registered for RDMA (zero copy)"
                    );
                    mrs.push((mr, b.clone()));
                }
                Err(e) => {
                    tracing::warn!(nsid = ns.nsid, error = %e, "cannot register RAM namespace for RDMA; its data goes through staging buffers")
                }
            }
        }
    }
    let r = Arc::new(NsRegistry { mrs });
    t.insert(dev.id(), r.clone());
    r
}

/// Per-thread, per-device memory: staging pool + the namespace registrations.
struct DevMem {
    dev: Arc<Device>,
    slabs: Vec<(Mr, Box<[u8]>)>,
    free: Vec<Buf>,
    ns: Arc<NsRegistry>,
}

impl Memory for DevMem {
    fn staging(&mut self, len: usize) -> Option<Buf> {
        if len > CHUNK {
            return None;
        }
        if self.free.is_empty() {
            let mut slab = vec![0u8; CHUNK * SLAB_CHUNKS].into_boxed_slice();
            // SAFETY: the slab lives in `self.slabs` as long as its MR (dropped together, MR
            // first by field order of the tuple? no: we drop MRs explicitly before slabs).
            let mr = match unsafe { self.dev.register(slab.as_mut_ptr(), slab.len()) } {
                Ok(m) => m,
                Err(e) => {
                    nvmf_target::warn_every!(error = %e, "cannot register RDMA staging memory");
                    return None;
                }
            };
            for i in 0..SLAB_CHUNKS {
                // SAFETY: in bounds of the slab.
                let p = unsafe { slab.as_mut_ptr().add(i * CHUNK) };
                self.free.push(Buf {
                    ptr: NonNull::new(p)?,
                    len: CHUNK,
                    lkey: mr.lkey(),
                });
            }
            self.slabs.push((mr, slab));
        }
        self.free.pop()
    }
    fn release(&mut self, b: Buf) {
        self.free.push(b);
    }
    fn lkey(&self, p: *const u8, len: usize) -> Option<u32> {
        self.ns
            .mrs
            .iter()
            .find(|(m, _)| m.contains(p, len))
            .map(|(m, _)| m.lkey())
    }
}

impl Drop for DevMem {
    fn drop(&mut self) {
        // Deregister before the memory goes.
        for (mr, slab) in self.slabs.drain(..) {
            drop(mr);
            drop(slab);
        }
    }
}

/// Per device on a thread: its CQ, completion channel and memory (dropped in that order: a
/// channel cannot go while a CQ uses it).
struct DevCtx {
    cq: Cq,
    ch: CompChannel,
    mem: DevMem,
    /// A notification is requested (re-armed before the thread sleeps).
    armed: bool,
    /// CQ entries the queue pairs on it may need at once.
    cq_used: usize,
    cq_size: usize,
}

struct RdmaConn {
    span: tracing::Span,
    id: CmId,
    core: RdmaQueueCore,
    /// CQ entries this queue pair counts for.
    cq_need: usize,
    dev: usize,
    generation: u32,
    recv_mr: Option<Mr>,
    recv_buf: Box<[u8]>,
    recv_size: usize,
    ending: Option<Instant>,
    offloaded: usize,
    /// In the thread's list of queues whose deadline has come (`Queues::hot`).
    hot: bool,
    /// The queue's deadline armed in `Queues::timers` ([`RdmaQueueCore::poll_timeout`]).
    timer: Option<Instant>,
}

/// Where a thread receives connect requests handed to it.
type Inbox = Arc<Mutex<Vec<Incoming>>>;
/// The listeners' event channel and CM ids (address, discovery only), on the first thread.
type Listeners = (Arc<EventChannel>, Vec<(CmId, SocketAddr, bool)>);

struct RdmaThread {
    core: usize,
    target: Arc<Target>,
    poll: Poll,
    mailbox: Arc<Mailbox>,
    inbox: Inbox,
    peers: (Vec<Inbox>, Vec<Arc<Mailbox>>),
    next_peer: usize,
    stop: Arc<AtomicBool>,
    listen: Option<Listeners>,
    engine_cfg: EngineConfig,
    spin: Duration,
    handshake_timeout: Duration,
}

/// wr_id: connection index (24 bits) | generation (8 bits) | kind (2 bits) | tag (30 bits).
fn wr_id(conn: usize, generation: u32, kind: u64, tag: u32) -> u64 {
    ((conn as u64 & 0xFF_FFFF) << 40)
        | (u64::from(generation & 0xFF) << 32)
        | (kind << 30)
        | u64::from(tag & 0x3FFF_FFFF)
}
const K_RECV: u64 = 0;
const K_READ: u64 = 1;
const K_SEND: u64 = 2;
const K_WRITE: u64 = 3;

/// The queues of one RDMA thread and the devices they use.
#[derive(Default)]
struct Queues {
    devs: Vec<(usize, DevCtx)>,
    conns: Vec<Option<RdmaConn>>,
    /// Queues whose deadline has come ([`RdmaQueueCore::poll_timeout`]): serviced every round
    /// ([`Queues::run_hot`]); the thread does not sleep while any stays (commands deferred at
    /// a namespace gate).
    hot: Vec<usize>,
    /// Every other queue's one deadline, earliest first.
    timers: Timers,
    /// Bumped per admitted queue (tags its work requests and CM events).
    generation: u32,
}

/// Which of a thread's file descriptors fired (edge-triggered: each is drained whole when
/// seen).
struct Ready {
    cm: bool,
    listen: bool,
    mail: bool,
    comp: bool,
}

impl Queues {
    /// The device context of a queue's device (always there while the queue lives).
    fn mem_of(devs: &mut [(usize, DevCtx)], dev: usize) -> Option<&mut DevCtx> {
        devs.iter_mut().find(|(id, _)| *id == dev).map(|(_, d)| d)
    }

    /// About to sleep: arm every CQ that is not. True if any was (what completed before the
    /// arm must be taken now, else it would wait for the next completion's notification).
    fn arm_all(&mut self) -> bool {
        let mut armed_now = false;
        for (_, d) in self.devs.iter_mut() {
            if !d.armed {
                let _ = d.cq.arm();
                d.armed = true;
                armed_now = true;
            }
        }
        armed_now
    }

    /// Connection events on the thread's CM channel. True if there were any.
    fn cm_events(&mut self, ch: &EventChannel) -> bool {
        let mut work = false;
        while let Ok(Some(ev)) = ch.next_event() {
            work = true;
            let i = (ev.token >> 8) as usize;
            let g = (ev.token & 0xFF) as u32;
            let Some(Some(c)) = self.conns.get_mut(i) else {
                continue;
            };
            if c.generation & 0xFF != g {
                continue;
            }
            let _e = c.span.clone().entered();
            match ev.kind {
                CmEventKind::Established => tracing::debug!("RDMA queue established"),
                CmEventKind::Disconnected | CmEventKind::DeviceRemoval => {
                    if c.ending.is_none() {
                        tracing::debug!("RDMA queue disconnected by the host");
                        c.ending = Some(Instant::now());
                        let _ = c.id.disconnect();
                    }
                }
                CmEventKind::TimewaitExit => {}
                k => tracing::debug!(event = ?k, "RDMA CM event"),
            }
        }
        work
    }

    /// Completions, per device: polled every round while spinning (no syscall: the CQ is in
    /// shared memory on RNICs and rxe alike); the channel is read only when it `fired`, and
    /// the CQ re-armed only before sleeping. True if there were any.
    fn completions(
        &mut self,
        fired: bool,
        now: Instant,
        wcs: &mut [Wc],
        engine: &mut Engine,
    ) -> bool {
        let Queues {
            devs,
            conns,
            hot,
            timers,
            ..
        } = self;
        let mut work = false;
        for (_, d) in devs.iter_mut() {
            if fired && d.ch.drain(&mut d.cq) > 0 {
                d.armed = false;
            }
            loop {
                let n = match d.cq.poll(wcs) {
                    Ok(n) => n,
                    Err(e) => {
                        tracing::error!(error = %e, "CQ poll failed");
                        0
                    }
                };
                if n == 0 {
                    break;
                }
                work = true;
                for wc in &wcs[..n] {
                    complete(
                        wc,
                        now,
                        conns,
                        &mut d.mem,
                        engine,
                        (&mut *hot, &mut *timers),
                    );
                }
            }
        }
        work
    }

    /// Queues whose deadline has come at `now` join `hot`.
    fn expire(&mut self, now: Instant) {
        let Queues {
            conns, hot, timers, ..
        } = self;
        timers.expire(now, |i, generation, at| {
            let Some(Some(c)) = conns.get_mut(i) else {
                return;
            };
            if u64::from(c.generation) != generation || c.timer != Some(at) {
                return;
            }
            c.timer = None;
            if c.ending.is_none() && !c.hot {
                c.hot = true;
                hot.push(i);
            }
        });
    }

    /// Do what is due for every queue in `hot` ([`RdmaQueueCore::handle_timeout`]: deferred
    /// and throttled commands, periodic timers, deadlines; a queue that must close is
    /// disconnected). A queue whose deadline is still due (deferred commands) stays; the
    /// others are armed. True if a deferred or throttled command ran.
    fn run_hot(&mut self, now: Instant, engine: &mut Engine, target: &Target) -> bool {
        let mut work = false;
        let mut k = 0;
        while k < self.hot.len() {
            let i = self.hot[k];
            let keep = match self.conns.get_mut(i) {
                Some(Some(c)) if c.ending.is_none() => {
                    if c.core.poll_timeout().is_some_and(|at| at <= now)
                        && let Some(d) = Self::mem_of(&mut self.devs, c.dev)
                    {
                        let _e = c.span.clone().entered();
                        if c.timer.is_some_and(|at| at <= now) {
                            c.timer = None;
                        }
                        let mut off = engine.offloader(i, u64::from(c.generation));
                        let r = c.core.handle_timeout(now, &mut d.mem, &mut off);
                        c.offloaded += off.started;
                        post(c, i);
                        match r {
                            Ok(ran) => work |= ran,
                            Err(why) => {
                                log_close(why, target);
                                c.ending = Some(now);
                                let _ = c.id.disconnect();
                            }
                        }
                    }
                    match c.core.poll_timeout() {
                        _ if c.ending.is_some() => false,
                        Some(at) if at <= now => true,
                        Some(at) => {
                            let g = u64::from(c.generation);
                            self.timers.arm(at, i, g, &mut c.timer);
                            false
                        }
                        None => false,
                    }
                }
                _ => false,
            };
            if keep {
                k += 1;
            } else {
                if let Some(Some(c)) = self.conns.get_mut(i) {
                    c.hot = false;
                }
                self.hot.swap_remove(k);
            }
        }
        work
    }

    /// Offloaded I/O that finished goes back to its queue (if it is still the one that
    /// started it). True if any did.
    fn reap(&mut self, engine: &mut Engine) -> bool {
        let mut work = false;
        let mut now = None;
        engine.reap(|done: Done| {
            work = true;
            if let Some(Some(c)) = self.conns.get_mut(done.conn)
                && u64::from(c.generation) == done.generation
                && let Some(d) = Self::mem_of(&mut self.devs, c.dev)
            {
                c.offloaded = c.offloaded.saturating_sub(1);
                c.core
                    .complete_io(done.slot, done.status, done.buf, &mut d.mem);
                post(c, done.conn);
                let now = *now.get_or_insert_with(Instant::now);
                settle(c, done.conn, now, (&mut self.hot, &mut self.timers));
            }
        });
        work
    }

    /// Free queues that ended and whose work requests have flushed (or waited [`DRAIN`]).
    fn free_ended(&mut self, now: Instant, target: &Target) {
        for (i, slot) in self.conns.iter_mut().enumerate() {
            let done = matches!(slot, Some(c) if c.ending.is_some_and(|t| {
                (c.core.in_flight() == 0 && c.offloaded == 0) || now.duration_since(t) > DRAIN
            }));
            if done && let Some(c) = slot.take() {
                if c.hot {
                    self.hot.retain(|&h| h != i);
                }
                let d = Self::mem_of(&mut self.devs, c.dev);
                drop_conn(c, d, target);
            }
        }
    }

    /// The thread stops: disconnect and free every queue, then the devices (CQs before their
    /// channels: `DevCtx` field order).
    fn close_all(mut self, target: &Target) {
        for c in std::mem::take(&mut self.conns).into_iter().flatten() {
            let _ = c.id.disconnect();
            let d = Self::mem_of(&mut self.devs, c.dev);
            drop_conn(c, d, target);
        }
        drop(self.devs);
    }
}

impl RdmaThread {
    /// Register the thread's descriptors; `None` (logged) if it cannot start.
    fn setup(&mut self) -> Option<(Engine, Arc<EventChannel>)> {
        if let Err(e) = crate::affinity::pin_current_thread(self.core) {
            tracing::warn!(core = self.core, error = %e, "RDMA thread unpinned");
        }
        let mut engine = Engine::new(self.engine_cfg, self.core, self.mailbox.clone());
        if let Err(e) = engine.register(self.poll.registry(), ENGINE) {
            tracing::warn!(core = self.core, error = %e, "cannot watch the I/O engine's eventfd");
        }
        let ch = match EventChannel::new() {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(core = self.core, error = %e, "RDMA thread cannot start");
                return None;
            }
        };
        let _ = self
            .poll
            .registry()
            .register(&mut SourceFd(&ch.fd()), CM, Interest::READABLE);
        if let Some((lc, _)) = &self.listen {
            let _ = self.poll.registry().register(
                &mut SourceFd(&lc.fd()),
                Token(LISTEN),
                Interest::READABLE,
            );
        }
        tracing::info!(core = self.core, "RDMA poller started");
        Some((engine, ch))
    }

    fn run(mut self) {
        let Some((mut engine, ch)) = self.setup() else {
            return;
        };
        let listen_ch = self.listen.as_ref().map(|(c, _)| c.clone());
        let listen_addrs: Vec<(SocketAddr, bool)> = self
            .listen
            .as_ref()
            .map(|(_, ls)| ls.iter().map(|(_, a, d)| (*a, *d)).collect())
            .unwrap_or_default();
        let mut qs = Queues::default();
        let mut events = Events::with_capacity(256);
        let mut wcs = [Wc::default(); 32];
        let mut now = Instant::now();
        let load = self
            .target
            .loads
            .register(self.core, nvmf_target::load::LoopKind::Rdma);
        let mut pace = Pace::new(self.spin, now, load);
        let mut ready = Ready {
            cm: true,
            listen: listen_ch.is_some(),
            mail: true,
            comp: false,
        };
        loop {
            let timeout = if pace.spinning(now, !qs.hot.is_empty()) {
                Duration::ZERO
            } else if qs.arm_all() || ready.comp {
                ready.comp = true;
                Duration::ZERO
            } else {
                let t = pace.sleep(now, MAX_SLEEP);
                qs.timers
                    .next()
                    .map_or(t, |w| t.min(w.saturating_duration_since(now)))
            };
            let slept = !timeout.is_zero();
            if let Err(e) = self.poll.poll(&mut events, Some(timeout))
                && e.kind() != std::io::ErrorKind::Interrupted
            {
                tracing::error!(error = %e, "RDMA poll failed; thread stops");
                break;
            }
            for ev in events.iter() {
                match ev.token() {
                    CM => ready.cm = true,
                    WAKER => ready.mail = true,
                    ENGINE => {}
                    Token(LISTEN) => ready.listen = true,
                    Token(_) => ready.comp = true,
                }
            }
            let woke = Instant::now();
            let mut work = false;
            // Listener events (first thread only).
            if std::mem::take(&mut ready.listen)
                && let Some(lc) = &listen_ch
            {
                while let Ok(Some(ev)) = lc.next_event() {
                    work = true;
                    self.listener_event(ev, &listen_addrs);
                }
            }
            // Handed-over connections.
            if std::mem::take(&mut ready.mail) {
                let incoming =
                    std::mem::take(&mut *self.inbox.lock().unwrap_or_else(|e| e.into_inner()));
                for inc in incoming {
                    work = true;
                    qs.generation = qs.generation.wrapping_add(1);
                    self.admit(inc, &ch, &mut qs);
                }
            }
            if std::mem::take(&mut ready.cm) {
                work |= qs.cm_events(&ch);
            }
            now = Instant::now();
            let fired = std::mem::take(&mut ready.comp);
            work |= qs.completions(fired, now, &mut wcs, &mut engine);
            // Fresh: a capsule just received may have left commands deferred (due at once).
            now = Instant::now();
            qs.expire(now);
            work |= qs.run_hot(now, &mut engine, &self.target);
            // Offloaded I/O started this round goes to the kernel; what finished comes back.
            engine.submit();
            work |= qs.reap(&mut engine);
            now = Instant::now();
            pace.turn(woke, now, work, slept);
            if pace.chores_due(now) && self.stop.load(Ordering::Acquire) {
                break;
            }
            qs.free_ended(now, &self.target);
        }
        qs.close_all(&self.target);
        // Listener ids before their channel.
        if let Some((lc, ids)) = self.listen.take() {
            drop(ids);
            drop(lc);
        }
        drop(engine);
    }

    /// A CM event on the listeners' channel: connect requests are checked and handed out.
    fn listener_event(&mut self, ev: CmEvent, ls: &[(SocketAddr, bool)]) {
        if ev.kind != CmEventKind::ConnectRequest {
            tracing::debug!(event = ?ev.kind, "RDMA listener event");
            return;
        }
        let Some(id) = ev.new_id else { return };
        let (local, disc) = ls.get(ev.token as usize).copied().unwrap_or((
            id.local_addr().unwrap_or_else(|| ([0, 0, 0, 0], 0).into()),
            false,
        ));
        let peer = id.peer_addr();
        let limits = &self.target.limits;
        let lim = CmLimits {
            admin_entries: nvmf_target::ADMIN_QUEUE_MAX,
            io_entries: u32::from(limits.max_queue_size),
            max_qid: limits.max_io_queues,
        };
        let req = match CmRequest::decode(&ev.private_data) {
            Ok(r) => r
                .check(&lim)
                .map(|()| r)
                .map_err(|s| wire::CmRequestError { status: s }),
            Err(e) => Err(e),
        };
        let req = match req {
            Ok(r) => r,
            Err(e) => {
                nvmf_target::warn_every!(?peer, %local, "RDMA connect refused: {e}");
                self.target
                    .events
                    .connections_refused
                    .fetch_add(1, Ordering::Relaxed);
                let _ = id.reject(&wire::encode_reject(e.status));
                return;
            }
        };
        self.target
            .events
            .connections_accepted
            .fetch_add(1, Ordering::Relaxed);
        let (inboxes, mbs) = &self.peers;
        let k = self.next_peer % inboxes.len();
        self.next_peer = self.next_peer.wrapping_add(1);
        inboxes[k]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Incoming {
                id,
                req,
                local,
                peer,
                discovery_only: disc,
                ird: ev.responder_resources,
                ord: ev.initiator_depth,
            });
        mbs[k].wake();
    }

    /// The index in `devs` of `dev`'s context on this thread, made (CQ, completion channel,
    /// memory) the first time a queue uses the device.
    fn device_ctx(
        &mut self,
        dev: &Arc<Device>,
        devs: &mut Vec<(usize, DevCtx)>,
    ) -> Result<usize, verbs::Error> {
        if let Some(i) = devs.iter().position(|(i, _)| *i == dev.id()) {
            return Ok(i);
        }
        let ch = dev.comp_channel()?;
        // The largest CQ the device makes (rxe: 32767 entries; RNICs more); the error of the
        // smallest size is the one reported.
        let (larger, smallest) = CQ_SIZES.split_at(CQ_SIZES.len() - 1);
        let made = larger
            .iter()
            .find_map(|&size| Some((dev.cq(size, Some(&ch)).ok()?, size as usize)));
        let (cq, cq_size) = match made {
            Some(m) => m,
            None => (dev.cq(smallest[0], Some(&ch))?, smallest[0] as usize),
        };
        cq.arm()?;
        let ctx = DevCtx {
            cq,
            ch,
            mem: DevMem {
                dev: dev.clone(),
                slabs: Vec::new(),
                free: Vec::new(),
                ns: ns_registry(dev, &self.target),
            },
            armed: true,
            cq_used: 0,
            cq_size,
        };
        let tok = Token(COMP_BASE - 2 - devs.len());
        let _ = self
            .poll
            .registry()
            .register(&mut SourceFd(&ctx.ch.fd()), tok, Interest::READABLE);
        devs.push((dev.id(), ctx));
        Ok(devs.len() - 1)
    }

    /// Make the queue of a connect request on this thread and accept it.
    fn admit(&mut self, inc: Incoming, ch: &Arc<EventChannel>, qs: &mut Queues) {
        let Queues {
            devs,
            conns,
            generation,
            timers,
            ..
        } = qs;
        let Incoming {
            mut id,
            req,
            local,
            peer,
            discovery_only,
            ird,
            ord,
        } = inc;
        let span =
            tracing::info_span!("rdma", peer = ?peer, %local, qid = req.qid, core = self.core);
        let _e = span.enter();
        let refuse = |id: &CmId, why: &dyn std::fmt::Display| {
            nvmf_target::warn_every!("RDMA connect refused: {why}");
            let _ = id.reject(&wire::encode_reject(wire::RejectStatus::NoResources));
        };
        if let Err(e) = id.migrate(ch) {
            return refuse(&id, &e);
        }
        let dev = match id.device() {
            Ok(d) => d,
            Err(e) => return refuse(&id, &e),
        };
        let di = match self.device_ctx(&dev, devs) {
            Ok(i) => i,
            Err(e) => return refuse(&id, &e),
        };
        let d = &mut devs[di].1;
        let entries = req.entries() as usize;
        // Every work request of the QP may complete at once: the shared CQ must hold them all.
        let cq_need = entries * 4 + 8;
        if d.cq_used + cq_need > d.cq_size {
            nvmf_target::warn_every!(
                cq_size = d.cq_size,
                "RDMA connect refused: this core's completion queue is full (too many queues)"
            );
            let _ = id.reject(&wire::encode_reject(wire::RejectStatus::NoResources));
            return;
        }
        let recv_size = 64 + self.target.limits.io_inline_data as usize;
        let caps = QpCaps {
            max_send_wr: (entries * 3 + 8) as u32,
            max_recv_wr: entries as u32,
            max_send_sge: 1,
            max_inline_data: 64,
        };
        if let Err(e) = id.create_qp(&dev, &d.cq, &d.cq, caps) {
            return refuse(&id, &e);
        }
        let mut recv_buf = vec![0u8; entries * recv_size].into_boxed_slice();
        // SAFETY: the buffer lives in the connection beside its MR, which is dropped first.
        let recv_mr = match unsafe { dev.register(recv_buf.as_mut_ptr(), recv_buf.len()) } {
            Ok(m) => m,
            Err(e) => return refuse(&id, &e),
        };
        let i = conns.iter().position(Option::is_none).unwrap_or_else(|| {
            conns.push(None);
            conns.len() - 1
        });
        let generation = *generation & 0xFF;
        id.set_token(((i as u64) << 8) | u64::from(generation));
        let wrs: Vec<RecvWr> = (0..entries)
            .map(|k| RecvWr {
                wr_id: wr_id(i, generation, K_RECV, k as u32),
                // SAFETY: in bounds of the receive buffer.
                addr: unsafe { recv_buf.as_mut_ptr().add(k * recv_size) },
                len: recv_size as u32,
                lkey: recv_mr.lkey(),
            })
            .collect();
        if let Err(e) = id.post_recv(&wrs) {
            return refuse(&id, &e);
        }
        let depth = ord.clamp(1, RD_ATOM);
        let params = ConnParams {
            responder_resources: ird.min(RD_ATOM),
            initiator_depth: depth,
            retry_count: 7,
            rnr_retry_count: 7,
        };
        if let Err(e) = id.accept(&wire::encode_accept(entries as u16), params) {
            nvmf_target::warn_every!(error = %e, "RDMA accept failed");
            return;
        }
        d.cq_used += cq_need;
        let now = Instant::now();
        let mut core = RdmaQueueCore::new(
            self.target.clone(),
            local,
            now,
            RdmaQueueConfig {
                max_reads: u32::from(params.responder_resources.max(1))
                    .min(u32::from(depth.max(1))),
                handshake_timeout: self.handshake_timeout,
            },
        );
        core.queue.set_discovery_only(discovery_only);
        core.set_clock(Instant::now);
        let mut timer = None;
        if let Some(at) = core.poll_timeout() {
            timers.arm(at, i, u64::from(generation), &mut timer);
        }
        tracing::debug!(entries, hrqsize = req.hrqsize, "RDMA queue accepted");
        drop(_e);
        conns[i] = Some(RdmaConn {
            span,
            id,
            core,
            cq_need,
            dev: dev.id(),
            generation,
            recv_mr: Some(recv_mr),
            recv_buf,
            recv_size,
            ending: None,
            offloaded: 0,
            hot: false,
            timer,
        });
    }
}

/// Free a queue: the QP first (destroying the id destroys it: no DMA touches lent memory
/// after this), then the staging buffers it still held, then its receive memory.
fn drop_conn(c: RdmaConn, dev: Option<&mut DevCtx>, target: &Target) {
    let RdmaConn {
        span,
        id,
        mut core,
        recv_mr,
        recv_buf,
        cq_need,
        ..
    } = c;
    drop(id);
    if let Some(d) = dev {
        core.release_all(&mut d.mem);
        d.cq_used = d.cq_used.saturating_sub(cq_need);
    }
    drop(recv_mr);
    drop(recv_buf);
    target
        .events
        .connections_closed
        .fetch_add(1, Ordering::Relaxed);
    tracing::debug!(parent: &span, "RDMA queue freed");
}

/// Why the tick closed a queue, for the log and the event counters.
fn log_close(why: Close, target: &Target) {
    match why {
        Close::ControllerGone => tracing::debug!("RDMA queue closed: controller torn down"),
        Close::HandshakeTimeout(t) => nvmf_target::warn_every!(
            timeout_ms = t.as_millis() as u64,
            "RDMA queue closed: no Fabrics Connect within the handshake deadline"
        ),
        Close::AuthTimeout => nvmf_target::warn_every!(
            timeout_s = duties::AUTH_TIMEOUT.as_secs(),
            "RDMA queue closed: DH-HMAC-CHAP not completed in time after Connect"
        ),
    }
    if matches!(why, Close::HandshakeTimeout(_) | Close::AuthTimeout) {
        target
            .events
            .handshake_timeouts
            .fetch_add(1, Ordering::Relaxed);
    }
}

/// One completion: find its queue, hand it to the core, post what follows; a queue whose
/// deadline has come joins `hot`, else its deadline is armed ([`settle`]).
fn complete(
    wc: &Wc,
    mut now: Instant,
    conns: &mut [Option<RdmaConn>],
    mem: &mut DevMem,
    engine: &mut Engine,
    clock: (&mut Vec<usize>, &mut Timers),
) {
    let i = (wc.wr_id >> 40) as usize;
    let g = ((wc.wr_id >> 32) & 0xFF) as u32;
    let kind = (wc.wr_id >> 30) & 3;
    let tag = (wc.wr_id & 0x3FFF_FFFF) as u32;
    let Some(Some(c)) = conns.get_mut(i) else {
        return;
    };
    if c.generation != g {
        return;
    }
    let span = c.span.clone();
    let _e = span.enter();
    let mut offload = engine.offloader(i, u64::from(c.generation));
    match (kind, wc.opcode) {
        (K_RECV, _) => {
            if !wc.ok() {
                if c.ending.is_none() && wc.status != 5 {
                    tracing::debug!(status = %wc.status_str(), "RDMA receive failed");
                }
                return;
            }
            let k = tag as usize;
            let start = k * c.recv_size;
            let len = (wc.byte_len as usize).min(c.recv_size);
            let bytes = &c.recv_buf[start..start + len];
            now = Instant::now();
            if let Err(e) = c.core.on_recv(bytes, now, mem, &mut offload) {
                nvmf_target::warn_every!(error = %e, "NVMe/RDMA protocol error; disconnecting");
                c.ending.get_or_insert_with(Instant::now);
                let _ = c.id.disconnect();
            }
            // The capsule was consumed (in-capsule data copied): post the buffer again.
            if c.ending.is_none()
                && let Some(mr) = &c.recv_mr
            {
                let w = RecvWr {
                    wr_id: wc.wr_id,
                    addr: c.recv_buf[start..].as_mut_ptr(),
                    len: c.recv_size as u32,
                    lkey: mr.lkey(),
                };
                if let Err(e) = c.id.post_recv(&[w]) {
                    tracing::debug!(error = %e, "cannot repost a receive buffer");
                }
            }
        }
        (K_READ, _) => {
            if !wc.ok() && c.ending.is_none() {
                nvmf_target::warn_every!(status = %wc.status_str(), "RDMA READ of host data failed");
            }
            now = Instant::now();
            c.core.on_read_done(tag, wc.ok(), now, mem, &mut offload);
        }
        (K_SEND, _) => {
            if !wc.ok() && c.ending.is_none() {
                tracing::debug!(status = %wc.status_str(), "RDMA SEND failed");
            }
            c.core.on_send_done(tag, mem);
        }
        _ => {}
    }
    c.offloaded += offload.started;
    post(c, i);
    settle(c, i, now, clock);
}

/// After a queue's state changed at `now`: if its deadline has come it joins `hot` (serviced
/// this round), else its deadline is armed.
fn settle(c: &mut RdmaConn, i: usize, now: Instant, (hot, timers): (&mut Vec<usize>, &mut Timers)) {
    if c.ending.is_some() || c.hot {
        return;
    }
    match c.core.poll_timeout() {
        Some(at) if at <= now => {
            c.hot = true;
            hot.push(i);
        }
        Some(at) => timers.arm(at, i, u64::from(c.generation), &mut c.timer),
        None => {}
    }
}

/// Post the queue's pending work requests.
fn post(c: &mut RdmaConn, i: usize) {
    if !c.core.has_ops() {
        return;
    }
    let ops: Vec<Op> = c.core.take_ops().collect();
    if c.ending.is_some() {
        return;
    }
    let g = c.generation;
    let sge = |l: &Local| Sge {
        addr: l.ptr,
        len: l.len,
        lkey: l.lkey,
    };
    let wrs: Vec<SendWr> = ops
        .iter()
        .map(|o| match o {
            Op::Read {
                tag,
                addr,
                rkey,
                local,
            } => SendWr {
                wr_id: wr_id(i, g, K_READ, *tag),
                op: SendOp::Read {
                    addr: *addr,
                    rkey: *rkey,
                },
                sge: sge(local),
                signaled: true,
                inline: false,
            },
            Op::Write { addr, rkey, local } => SendWr {
                wr_id: wr_id(i, g, K_WRITE, 0),
                op: SendOp::Write {
                    addr: *addr,
                    rkey: *rkey,
                },
                sge: sge(local),
                signaled: false,
                inline: false,
            },
            // An inline SEND's bytes are copied by the provider during post_send: the CQE in
            // `ops` only has to outlive the call.
            Op::Send {
                tag,
                cqe,
                invalidate,
            } => SendWr {
                wr_id: wr_id(i, g, K_SEND, *tag),
                op: match invalidate {
                    Some(key) => SendOp::SendInvalidate(*key),
                    None => SendOp::Send,
                },
                sge: Sge {
                    addr: cqe.as_ptr(),
                    len: 16,
                    lkey: 0,
                },
                signaled: true,
                inline: true,
            },
        })
        .collect();
    if let Err(e) = c.id.post_send(&wrs) {
        nvmf_target::warn_every!(error = %e, "RDMA post failed; disconnecting");
        c.ending = Some(Instant::now());
        let _ = c.id.disconnect();
    }
}
