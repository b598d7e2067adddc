//! One reactor per core: an epoll loop (mio) that owns its connections for life and polls
//! adaptively.
//!
//! While traffic flows the reactor spins: it asks epoll for ready sockets without sleeping
//! (`epoll_wait` with a zero timeout) and yields the core between empty rounds, so a
//! request that arrives is picked up within a syscall instead of a wake-up. When no socket has
//! had anything for the spin window (`--poll-us`), it sleeps in `epoll_wait` until the next
//! event or timer, so an idle target costs nothing. A window of zero never spins.
//!
//! Per round: every ready connection reads all the socket holds (until `EAGAIN` or a full
//! buffer), decodes and executes (`ConnCore::process`), drains its completions into one
//! output and sends it with one `sendmsg` (iovecs: the send buffer and, for RAM reads, the
//! namespace's memory itself). A connection whose output does not fit the socket waits for
//! `EPOLLOUT` and reads nothing more until it is sent (backpressure). Backends that may block
//! (file, block) go to the reactor's own I/O engine ([`crate::engine`]: io_uring, or a
//! fixed-size worker pool); their completions are reaped every round, and the ring's eventfd
//! (or the pool's waker) wakes a sleeping reactor.

use crate::conn::{ConnCore, ConnEnd, Step};
use crate::duties::{self, Close};
use crate::engine::{Done, Engine, EngineConfig};
use crate::limits::{Admission, Admitted};
use crate::mailbox::{Command, Inbox, Mailbox, NewConn};
use crate::pace::Pace;
use crate::timers::Timers;
use crate::tls::{ConnTls, TlsAcceptor};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use nvmf_target::{TIMER_PERIOD, Target};
use nvmf_tcp::TargetConnConfig;
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Longest sleep in `epoll_wait` (the stop flag is also checked this often).
const MAX_SLEEP: Duration = Duration::from_millis(100);
/// Grace period after a C2HTermReq before the socket is closed.
const TERM_GRACE: Duration = Duration::from_millis(200);
/// How long a closed connection waits for its offloaded I/O before its buffers are dropped.
const OFFLOAD_DRAIN: Duration = Duration::from_secs(30);
/// iovecs per `sendmsg` (below IOV_MAX).
const IOV_BATCH: usize = 512;

const WAKER: Token = Token(usize::MAX);
/// The I/O engine's completion notification (io_uring eventfd).
const ENGINE: Token = Token(usize::MAX - 1);
const LISTENER_BASE: usize = usize::MAX / 2;

/// Everything a reactor thread needs; built on the spawning thread, run on the reactor.
pub(crate) struct Reactor {
    core: usize,
    poll: Poll,
    mailbox: Arc<Mailbox>,
    target: Arc<Target>,
    tcp: TargetConnConfig,
    spin: Duration,
    handshake_timeout: Duration,
    stop: Arc<AtomicBool>,
    engine_cfg: EngineConfig,
    /// Built on the reactor's own thread ([`Reactor::start_engine`]): a ring is used by one
    /// thread.
    engine: Option<Engine>,
    /// Connection caps, checked when this reactor accepts.
    admission: Arc<Admission>,
    /// Listeners accepted on this reactor, with their discovery-only flag (`None`: removed; the
    /// index is the token).
    listeners: Vec<Option<(TcpListener, SocketAddr, bool)>>,
    /// Where accepted connections go (round-robin), this reactor included.
    peers: Vec<Arc<Mailbox>>,
    next_peer: usize,
    /// Makes the TLS sessions of connections on TLS listeners.
    tls: Option<Arc<dyn TlsAcceptor>>,
}

/// One live connection: its log span and its state.
struct Conn {
    span: tracing::Span,
    s: ConnState,
}

struct ConnState {
    stream: TcpStream,
    core: ConnCore,
    generation: u64,
    /// Edge-triggered readiness not yet consumed.
    readable: bool,
    /// Bytes of the current output already sent.
    sent: usize,
    /// Output did not fit the socket: wait for EPOLLOUT.
    blocked: bool,
    offloaded: usize,
    /// Set when the connection has ended; it lingers until `until` (term grace, offload drain).
    ending: Option<(ConnEnd, Instant)>,
    /// Counted in the reactor's number of ending connections.
    end_counted: bool,
    in_ready: bool,
    /// The connection's deadline armed in `Table::timers` ([`ConnCore::poll_timeout`]).
    timer: Option<Instant>,
    /// Plain, TLS, or not decided yet ([`crate::tls`]).
    tls: ConnTls,
    /// This connection's place under the connection caps (given back on drop).
    _admitted: Admitted,
}

/// A reactor's connections.
#[derive(Default)]
struct Table {
    /// By token (`None`: free).
    conns: Vec<Option<Conn>>,
    /// Free indexes of `conns`.
    free: Vec<usize>,
    /// Connections to service this round (readable, writable, output or deferred commands).
    ready: Vec<usize>,
    /// Connections that have ended and wait to be retired.
    ending: usize,
    /// Each connection's one deadline ([`ConnCore::poll_timeout`]), earliest first.
    timers: Timers,
    /// Bumped per registered connection (tags its offloaded I/O).
    generation: u64,
}

impl Table {
    /// Readiness of connection `i` from epoll: service it this round.
    fn mark(&mut self, i: usize, ev: &mio::event::Event) {
        let Some(Some(c)) = self.conns.get_mut(i) else {
            return;
        };
        let c = &mut c.s;
        if c.ending.is_some() {
            return;
        }
        if ev.is_writable() {
            c.blocked = false;
        }
        if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
            c.readable = true;
        }
        if !c.in_ready {
            c.in_ready = true;
            self.ready.push(i);
        }
    }

    /// How long to sleep: `until`, or less when a connection's deadline comes first or an ended
    /// connection's linger runs out first.
    fn sleep(&self, until: Duration, now: Instant) -> Duration {
        let mut t = until;
        if let Some(at) = self.timers.next() {
            t = t.min(at.saturating_duration_since(now));
        }
        if self.ending == 0 {
            return t;
        }
        for c in self.conns.iter().flatten() {
            if let Some((_, until)) = &c.s.ending {
                // Waiting for offloaded I/O: its completions wake us (waker); only the drain
                // deadline needs a timer.
                let deadline = if c.s.offloaded > 0 {
                    *until + OFFLOAD_DRAIN
                } else {
                    *until
                };
                t = t.min(deadline.saturating_duration_since(now));
            }
        }
        t
    }

    /// Connections whose deadline has come join the ready list: [`Reactor::service`] does what
    /// is due ([`ConnCore::handle_timeout`]).
    fn expire(&mut self, now: Instant) {
        let Table {
            conns,
            ready,
            timers,
            ..
        } = self;
        timers.expire(now, |i, generation, at| {
            let Some(Some(c)) = conns.get_mut(i) else {
                return;
            };
            let c = &mut c.s;
            if c.generation != generation || c.timer != Some(at) || c.ending.is_some() {
                return;
            }
            c.timer = None;
            if !c.in_ready {
                c.in_ready = true;
                ready.push(i);
            }
        });
    }

    /// After a service: a connection whose deadline has already come stays in the ready list
    /// (`keep`: commands deferred at a namespace gate are retried every round); else its
    /// deadline is armed. A connection waiting for `EPOLLOUT` is not spun for: its due
    /// deadline is looked at again a period later, or when the socket drains.
    fn rearm(&mut self, i: usize, now: Instant, keep: bool) {
        let Some(Some(c)) = self.conns.get_mut(i) else {
            return;
        };
        let c = &mut c.s;
        if c.ending.is_some() {
            return;
        }
        let Some(at) = c.core.poll_timeout() else {
            return;
        };
        if at <= now {
            if keep {
                return;
            }
            if c.blocked {
                self.timers
                    .arm(now + TIMER_PERIOD, i, c.generation, &mut c.timer);
                return;
            }
        }
        self.timers.arm(at, i, c.generation, &mut c.timer);
    }
}

impl Reactor {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        core: usize,
        target: Arc<Target>,
        tcp: TargetConnConfig,
        spin: Duration,
        handshake_timeout: Duration,
        stop: Arc<AtomicBool>,
        engine_cfg: EngineConfig,
        admission: Arc<Admission>,
        tls: Option<Arc<dyn TlsAcceptor>>,
    ) -> io::Result<(Reactor, Arc<Mailbox>)> {
        let poll = Poll::new()?;
        let mailbox = Arc::new(Mailbox::new(poll.registry(), WAKER)?);
        Ok((
            Reactor {
                core,
                poll,
                mailbox: mailbox.clone(),
                target,
                tcp,
                spin,
                handshake_timeout,
                stop,
                engine_cfg,
                engine: None,
                admission,
                listeners: Vec::new(),
                peers: Vec::new(),
                next_peer: 0,
                tls,
            },
            mailbox,
        ))
    }

    /// Accept on `l` in this reactor and place connections on `peers` round-robin.
    pub fn add_listener(
        &mut self,
        l: std::net::TcpListener,
        discovery_only: bool,
    ) -> io::Result<()> {
        let local = l.local_addr()?;
        let mut l = TcpListener::from_std(l);
        let i = self
            .listeners
            .iter()
            .position(Option::is_none)
            .unwrap_or(self.listeners.len());
        self.poll
            .registry()
            .register(&mut l, Token(LISTENER_BASE + i), Interest::READABLE)?;
        if i == self.listeners.len() {
            self.listeners.push(None);
        }
        self.listeners[i] = Some((l, local, discovery_only));
        Ok(())
    }

    /// Stop accepting on `addr` and close its socket; connections made through it stay.
    fn remove_listener(&mut self, addr: SocketAddr) -> bool {
        let Some(slot) = self
            .listeners
            .iter_mut()
            .find(|l| l.as_ref().is_some_and(|(_, a, _)| *a == addr))
        else {
            return false;
        };
        if let Some((mut l, local, disc)) = slot.take() {
            let _ = self.poll.registry().deregister(&mut l);
            tracing::info!(%local, discovery_only = disc, "listener closed");
        }
        true
    }

    fn run_command(&mut self, c: Command) {
        match c {
            Command::AddListener(l, disc, done) => {
                let r = self.add_listener(l, disc);
                let _ = done.send(r);
            }
            Command::RemoveListener(addr, done) => {
                let r = self.remove_listener(addr);
                let _ = done.send(r);
            }
        }
    }

    pub fn set_peers(&mut self, peers: Vec<Arc<Mailbox>>) {
        self.peers = peers;
    }

    /// Build the I/O engine; call on the reactor's thread before [`Reactor::run`]. Returns its
    /// name for the log (`io_uring` or `threads`).
    pub fn start_engine(&mut self) -> &'static str {
        let mut engine = Engine::new(self.engine_cfg, self.core, self.mailbox.clone());
        if let Err(e) = engine.register(self.poll.registry(), ENGINE) {
            // Completions are still reaped every round; only a sleeping reactor would not
            // notice them before its next timer.
            tracing::warn!(core = self.core, error = %e, "cannot watch the I/O engine's eventfd");
        }
        let name = engine.name();
        self.engine = Some(engine);
        name
    }

    /// Run until the stop flag is set.
    pub fn run(mut self) {
        if self.engine.is_none() {
            self.start_engine();
        }
        let Some(mut engine) = self.engine.take() else {
            return;
        };
        let mut events = Events::with_capacity(1024);
        let mut t = Table::default();
        let mut iov: Vec<libc::iovec> = Vec::with_capacity(IOV_BATCH);
        let mut now = Instant::now();
        let load = self
            .target
            .loads
            .register(self.core, nvmf_target::load::LoopKind::Tcp);
        let mut pace = Pace::new(self.spin, now, load);
        // Connections were retired since the last chores: hand freed memory back to the OS.
        let mut trim_due = false;
        loop {
            let spinning = pace.spinning(now, !t.ready.is_empty());
            let mut timeout = if spinning {
                Duration::ZERO
            } else {
                t.sleep(pace.sleep(now, MAX_SLEEP), now)
            };
            if !timeout.is_zero() {
                // Completions from other threads wake us from here on; one that came before
                // is reaped now, and then we do not sleep.
                self.mailbox.going_to_sleep();
                let mut found = false;
                engine.reap(|done| found |= deliver(done, &mut t.conns, &mut t.ready));
                if found {
                    timeout = Duration::ZERO;
                }
            }
            let polled = self.poll.poll(&mut events, Some(timeout));
            self.mailbox.awake();
            if let Err(e) = polled {
                if e.kind() != io::ErrorKind::Interrupted {
                    tracing::error!(core = self.core, error = %e, "epoll failed; reactor stops");
                    break;
                }
                continue;
            }
            for ev in events.iter() {
                match ev.token() {
                    WAKER | ENGINE => {}
                    Token(i) if i >= LISTENER_BASE => self.accept(i - LISTENER_BASE),
                    Token(i) => t.mark(i, ev),
                }
            }
            self.take_inbox(&mut t);
            now = Instant::now();
            let woke = now;
            t.expire(now);
            // Offloaded completions, then every ready connection.
            let mut work = false;
            engine.reap(|done| work |= deliver(done, &mut t.conns, &mut t.ready));
            work |= self.service_ready(&mut t, now, &mut iov, &mut engine);
            // Offloaded I/O started this round goes to the kernel now; what completed at once
            // (page-cache hits) is delivered now too.
            engine.submit();
            engine.reap(|done| work |= deliver(done, &mut t.conns, &mut t.ready));
            now = Instant::now();
            pace.turn(woke, now, work, !timeout.is_zero());
            if !work && spinning {
                // Nothing this round: let anything else runnable on this core go first.
                // SAFETY: sched_yield has no preconditions.
                unsafe { libc::sched_yield() };
            }
            if pace.chores_due(now) {
                if std::mem::take(&mut trim_due) {
                    release_freed_memory();
                }
                if self.stop.load(Ordering::Acquire) {
                    break;
                }
            } else if !spinning && self.stop.load(Ordering::Acquire) {
                break;
            }
            if t.ending > 0 {
                trim_due |= self.retire(&mut t, now);
            }
        }
        for mut c in t.conns.into_iter().flatten() {
            let _ = self.poll.registry().deregister(&mut c.s.stream);
            if c.s.ending.is_none() {
                c.s.ending = Some((ConnEnd::Stopped, Instant::now()));
            }
            log_end(&c, &self.target.events);
        }
        // The engine waits for what the kernel still holds (see `engine::uring`).
        drop(engine);
    }

    /// New connections (tried at once: the ICReq is usually there) and control-plane commands
    /// from other threads.
    fn take_inbox(&mut self, t: &mut Table) {
        let Inbox {
            new_conns: new,
            commands,
        } = self.mailbox.take();
        for c in commands {
            self.run_command(c);
        }
        for nc in new {
            t.generation += 1;
            if let Some(i) = self.register(nc, &mut t.conns, &mut t.free, t.generation) {
                t.ready.push(i);
            }
        }
    }

    /// Service every ready connection; keep those that still have input pending or deferred
    /// commands. True if any did work.
    fn service_ready(
        &self,
        t: &mut Table,
        now: Instant,
        iov: &mut Vec<libc::iovec>,
        engine: &mut Engine,
    ) -> bool {
        let mut work = false;
        let mut k = 0;
        while k < t.ready.len() {
            let i = t.ready[k];
            let keep = match t.conns.get_mut(i) {
                Some(Some(c)) => {
                    let (did, keep, at) = self.service(c, i, now, iov, engine);
                    work |= did;
                    if c.s.ending.is_some() && !c.s.end_counted {
                        c.s.end_counted = true;
                        t.ending += 1;
                    }
                    if !keep {
                        c.s.in_ready = false;
                    }
                    t.rearm(i, at, keep);
                    keep
                }
                _ => false,
            };
            if keep {
                k += 1;
            } else {
                t.ready.swap_remove(k);
            }
        }
        work
    }

    /// Close ended connections whose linger (term grace, offloaded I/O) is over. Returns
    /// whether any was closed.
    fn retire(&self, t: &mut Table, now: Instant) -> bool {
        let Table {
            conns,
            free,
            ready,
            ending,
            ..
        } = t;
        let mut retired = false;
        for (i, slot) in conns.iter_mut().enumerate() {
            let done = match slot {
                Some(c) => match &c.s.ending {
                    Some((_, until)) => {
                        now >= *until && (c.s.offloaded == 0 || now >= *until + OFFLOAD_DRAIN)
                    }
                    None => false,
                },
                None => false,
            };
            if done && let Some(mut c) = slot.take() {
                let _ = self.poll.registry().deregister(&mut c.s.stream);
                log_end(&c, &self.target.events);
                ready.retain(|&r| r != i);
                free.push(i);
                *ending = ending.saturating_sub(1);
                retired = true;
            }
        }
        retired
    }

    fn accept(&mut self, idx: usize) {
        let Some(Some((l, local, disc))) = self.listeners.get(idx) else {
            return;
        };
        let (local, disc) = (*local, *disc);
        loop {
            match l.accept() {
                Ok((s, peer)) => {
                    // mio streams are non-blocking; hand over a std stream and let the owning
                    // reactor register it.
                    let std = {
                        use std::os::fd::{FromRawFd, IntoRawFd};
                        // SAFETY: the fd comes straight from the mio stream we own and give up.
                        unsafe { std::net::TcpStream::from_raw_fd(s.into_raw_fd()) }
                    };
                    if self.peers.is_empty() {
                        continue;
                    }
                    let admitted = match self.admission.admit(peer.ip()) {
                        Ok(a) => a,
                        Err(why) => {
                            self.target
                                .events
                                .connections_refused
                                .fetch_add(1, Ordering::Relaxed);
                            nvmf_target::warn_every!(%peer, %local, "connection refused: {why}");
                            continue; // `std` is dropped: closed
                        }
                    };
                    self.target
                        .events
                        .connections_accepted
                        .fetch_add(1, Ordering::Relaxed);
                    let i = self.next_peer % self.peers.len();
                    self.next_peer = self.next_peer.wrapping_add(1);
                    self.peers[i].deliver(NewConn {
                        stream: std,
                        admitted,
                        local,
                        peer,
                        discovery_only: disc,
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    nvmf_target::warn_every!(%local, error = %e, "accept failed");
                    break;
                }
            }
        }
    }

    fn register(
        &mut self,
        nc: NewConn,
        conns: &mut Vec<Option<Conn>>,
        free: &mut Vec<usize>,
        generation: u64,
    ) -> Option<usize> {
        let NewConn {
            stream,
            admitted,
            local,
            peer,
            discovery_only,
        } = nc;
        let core = self.core;
        let span = tracing::info_span!("conn", %peer, %local, core);
        if let Err(e) = stream.set_nonblocking(true) {
            tracing::warn!(parent: &span, error = %e, "cannot set the socket non-blocking");
            return None;
        }
        let _ = stream.set_nodelay(true);
        let mut stream = TcpStream::from_std(stream);
        let i = free.pop().unwrap_or_else(|| {
            conns.push(None);
            conns.len() - 1
        });
        if let Err(e) = self.poll.registry().register(
            &mut stream,
            Token(i),
            Interest::READABLE | Interest::WRITABLE,
        ) {
            tracing::warn!(parent: &span, error = %e, "cannot register connection");
            free.push(i);
            return None;
        }
        tracing::debug!(parent: &span, "connection accepted");
        let mode = self
            .target
            .listeners()
            .iter()
            .find(|l| l.addr == local)
            .map_or(nvmf_target::ListenerTls::Off, |l| l.tls);
        let tls = ConnTls::for_listener(mode);
        let now = Instant::now();
        let mut core = ConnCore::new(self.target.clone(), self.tcp, local, now);
        core.set_clock(Instant::now);
        core.set_handshake_timeout(now, self.handshake_timeout);
        core.queue.set_discovery_only(discovery_only);
        core.queue.set_peer(peer);
        conns[i] = Some(Conn {
            span,
            s: ConnState {
                stream,
                core,
                generation,
                readable: true,
                sent: 0,
                blocked: false,
                offloaded: 0,
                ending: None,
                end_counted: false,
                in_ready: true,
                timer: None,
                tls,
                _admitted: admitted,
            },
        });
        Some(i)
    }

    /// Move one connection forward: do what its deadline has made due, send pending output,
    /// read, process, send. Returns (did any work, keep it in the ready list, the latest
    /// instant read).
    fn service(
        &self,
        conn: &mut Conn,
        idx: usize,
        mut now: Instant,
        iov: &mut Vec<libc::iovec>,
        engine: &mut Engine,
    ) -> (bool, bool, Instant) {
        let Conn { span, s: c } = conn;
        if c.ending.is_some() {
            return (false, false, now);
        }
        let _g = span.enter();
        let mut work = false;
        // The one clock: deferred and throttled commands, periodic timers, deadlines.
        if c.core.poll_timeout().is_some_and(|at| at <= now) {
            if c.timer.is_some_and(|at| at <= now) {
                c.timer = None;
            }
            let mut off = engine.offloader(idx, c.generation);
            let r = c.core.handle_timeout(now, &mut off);
            c.offloaded += off.started;
            match r {
                Ok(ran) => work |= ran,
                Err(why) => {
                    end(c, ConnEnd::from(why));
                    return (true, false, now);
                }
            }
        }
        if has_output(c) {
            match send(c, iov) {
                Ok(true) => work = true,
                Ok(false) => return (work, false, now),
                Err(e) => {
                    end(c, ConnEnd::Io(e));
                    return (true, false, now);
                }
            }
        }
        // A deadline already due (commands deferred at a namespace gate) keeps the connection
        // in the ready list: the loop does not sleep while they wait (a Compare-and-Write
        // waits only for commands already running).
        if !c.readable {
            if c.core.queue.should_close() {
                end(c, ConnEnd::ControllerGone);
            }
            return (work, due(c, now) && !c.blocked, now);
        }
        let input = read_available(c, self.tls.as_ref());
        let closed = match input {
            Input::Nothing => false,
            Input::Error(e) => {
                end(c, ConnEnd::Io(e));
                return (true, false, now);
            }
            Input::Tls(e) => {
                // An alert, if the session made one, goes out before the close.
                last_words(c);
                end(c, ConnEnd::Tls(e));
                return (true, false, now);
            }
            Input::Closed => {
                if !c.tls.is_plain() {
                    // TLS close_notify: what is left, and ours, go out first.
                    last_words(c);
                }
                end(c, ConnEnd::PeerClosed);
                return (true, false, now);
            }
            Input::Data => false,
            Input::DataThenClosed => true,
        };
        if let ConnTls::On {
            session,
            peer_told: told @ false,
        } = &mut c.tls
            && let Some((hostnqn, subnqn)) = session.peer()
        {
            *told = true;
            tracing::debug!(%hostnqn, %subnqn, "TLS handshake done");
            c.core.queue.set_tls_peer(hostnqn, subnqn);
        }
        if !matches!(input, Input::Nothing) {
            work = true;
            now = Instant::now();
            let mut off = engine.offloader(idx, c.generation);
            let step = c.core.process(now, &mut off);
            c.offloaded += off.started;
            if let Step::Close(e) = step {
                last_words(c);
                let linger = matches!(e, ConnEnd::Protocol(_));
                end(c, e);
                if linger && let Some((_, until)) = &mut c.ending {
                    *until = Instant::now() + TERM_GRACE;
                }
                return (true, false, now);
            }
            if closed {
                last_words(c);
                end(c, ConnEnd::PeerClosed);
                return (true, false, now);
            }
        }
        if let Err(e) = send_pending(c, iov) {
            end(c, ConnEnd::Io(e));
            return (true, false, now);
        }
        if c.core.queue.should_close() {
            end(c, ConnEnd::ControllerGone);
            return (true, false, now);
        }
        (work, (c.readable || due(c, now)) && !c.blocked, now)
    }
}

impl From<Close> for ConnEnd {
    fn from(c: Close) -> ConnEnd {
        match c {
            Close::ControllerGone => ConnEnd::ControllerGone,
            Close::HandshakeTimeout(t) => ConnEnd::HandshakeTimeout(t),
            Close::AuthTimeout => ConnEnd::AuthTimeout,
        }
    }
}

/// Give memory freed by closed connections back to the OS: glibc keeps freed heap pages in
/// its arenas (and raises its mmap threshold after large frees), so a burst of thousands of
/// connections would otherwise leave the process at its peak size.
fn release_freed_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim has no preconditions; it only returns free memory to the kernel.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Give a finished offloaded I/O to its connection, if that connection is still the one that
/// started it (same index and generation); else its buffer is dropped here. True if delivered.
fn deliver(done: Done, conns: &mut [Option<Conn>], ready: &mut Vec<usize>) -> bool {
    let Some(Some(c)) = conns.get_mut(done.conn) else {
        return false;
    };
    let c = &mut c.s;
    if c.generation != done.generation {
        return false;
    }
    c.offloaded = c.offloaded.saturating_sub(1);
    if c.ending.is_some() {
        // Nothing more is sent: only the slot (and its gate) is released.
        c.core.queue.complete_io(done.slot, done.status, done.buf);
        return true;
    }
    duties::io_done(&mut c.core, &mut (), done.slot, done.status, done.buf);
    if !c.in_ready {
        c.in_ready = true;
        ready.push(done.conn);
    }
    true
}

/// The connection's deadline has come at `now` (commands deferred: always).
#[inline]
fn due(c: &ConnState, now: Instant) -> bool {
    c.core.poll_timeout().is_some_and(|at| at <= now)
}

fn end(c: &mut ConnState, why: ConnEnd) {
    if c.ending.is_none() {
        c.ending = Some((why, Instant::now()));
    }
}

/// Best-effort blocking-free send of what is left on a closing connection (over TLS then our
/// close_notify), then half-close so the host sees the C2HTermReq before the socket goes.
fn last_words(c: &mut ConnState) {
    let mut iov = Vec::with_capacity(IOV_BATCH);
    let _ = send(c, &mut iov);
    if let ConnTls::On { session, .. } = &mut c.tls {
        session.close_notify();
        let _ = send(c, &mut iov);
    }
    let _ = c.stream.shutdown(std::net::Shutdown::Write);
}

fn log_end(c: &Conn, events: &nvmf_target::EventCounters) {
    let _g = c.span.enter();
    let count = |a: &std::sync::atomic::AtomicU64| {
        a.fetch_add(1, Ordering::Relaxed);
    };
    count(&events.connections_closed);
    match &c.s.ending {
        Some((ConnEnd::Protocol(_), _)) => count(&events.protocol_errors),
        Some((ConnEnd::HostTerminated { .. }, _)) => count(&events.host_terminations),
        Some((ConnEnd::HandshakeTimeout(_) | ConnEnd::AuthTimeout, _)) => {
            count(&events.handshake_timeouts)
        }
        Some((ConnEnd::Tls(_), _)) => count(&events.tls_failures),
        _ => {}
    }
    match &c.s.ending {
        Some((ConnEnd::PeerClosed, _)) => tracing::debug!("connection closed by peer"),
        Some((ConnEnd::Protocol(e), _)) => {
            tracing::debug!(error = %e, "connection terminated (protocol error)")
        }
        Some((ConnEnd::HostTerminated { fes, fei }, _)) => {
            nvmf_target::warn_every!(fes, fei, "host sent H2CTermReq")
        }
        // The controller-level line (removed, keep-alive expired) says it for every queue.
        Some((ConnEnd::ControllerGone, _)) => {
            tracing::debug!("connection closed: controller torn down")
        }
        Some((ConnEnd::Io(e), _)) => tracing::debug!(error = %e, "connection I/O error"),
        Some((ConnEnd::Stopped, _)) => tracing::debug!("connection closed: server stopping"),
        Some((ConnEnd::HandshakeTimeout(t), _)) => nvmf_target::warn_every!(
            timeout_ms = t.as_millis() as u64,
            "connection closed: no ICReq and Fabrics Connect within the handshake deadline"
        ),
        Some((ConnEnd::AuthTimeout, _)) => nvmf_target::warn_every!(
            timeout_s = duties::AUTH_TIMEOUT.as_secs(),
            "connection closed: DH-HMAC-CHAP not completed in time after Connect"
        ),
        Some((ConnEnd::Tls(e), _)) => nvmf_target::warn_every!("TLS: connection refused: {e}"),
        None => {}
    }
}

/// [`send`] if there is output.
fn send_pending(c: &mut ConnState, iov: &mut Vec<libc::iovec>) -> io::Result<()> {
    if has_output(c) {
        send(c, iov)?;
    }
    Ok(())
}

/// Output to send: the connection's, or TLS records (handshake, alerts) not yet sent.
fn has_output(c: &ConnState) -> bool {
    c.core.has_output() || c.tls.has_pending()
}

/// TLS: encrypt the whole output of the round at once (every PDU and the zero-copy read
/// segments, gathered), then send the records. Ok(true): all sent; Ok(false): the socket is
/// full.
fn send_tls(c: &mut ConnState, iov: &mut Vec<libc::iovec>) -> io::Result<bool> {
    let ConnTls::On { session, .. } = &mut c.tls else {
        return Ok(true);
    };
    if c.core.has_output() {
        iov.clear();
        c.core.iovecs(0, iov, usize::MAX);
        // SAFETY: every iovec points into the connection's send buffer or into backend memory
        // kept alive by the ConnCore until `consume`, which comes after this use.
        let bufs: Vec<&[u8]> = iov
            .iter()
            .map(|v| unsafe { std::slice::from_raw_parts(v.iov_base as *const u8, v.iov_len) })
            .collect();
        let r = session.write_plain(&bufs);
        drop(bufs);
        iov.clear();
        r.map_err(|e| io::Error::other(e.0))?;
        c.core.consume();
    }
    loop {
        let pending = session.pending_cipher();
        if pending.is_empty() {
            return Ok(true);
        }
        // std's (and so mio's) `write` sends with MSG_NOSIGNAL; the socket is non-blocking.
        match std::io::Write::write(&mut c.stream, pending) {
            Ok(n) => session.consume_cipher(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                c.blocked = true;
                return Ok(false);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Send as much of the output as the socket takes. Ok(true): all sent; Ok(false): the
/// socket is full (wait for EPOLLOUT).
fn send(c: &mut ConnState, iov: &mut Vec<libc::iovec>) -> io::Result<bool> {
    if !c.tls.is_plain() {
        return send_tls(c, iov);
    }
    let fd = c.stream.as_raw_fd();
    loop {
        let total = c.core.output_len();
        if c.sent >= total {
            c.core.consume();
            c.sent = 0;
            return Ok(true);
        }
        iov.clear();
        c.core.iovecs(c.sent, iov, IOV_BATCH);
        // SAFETY: a zeroed msghdr is valid; we fill in the iovec array, which stays alive
        // and unchanged for the duration of the call.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = iov.as_mut_ptr();
        msg.msg_iovlen = iov.len() as _;
        // SAFETY: `fd` is the connection's open socket; every iovec points into the output
        // buffer or backend memory kept alive by the ConnCore until `consume`.
        let n = unsafe { libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT) };
        if n < 0 {
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::WouldBlock => {
                    c.blocked = true;
                    return Ok(false);
                }
                io::ErrorKind::Interrupted => continue,
                _ => return Err(e),
            }
        }
        c.sent += n as usize;
    }
}

/// What one read attempt produced.
enum Input {
    Nothing,
    Data,
    DataThenClosed,
    Closed,
    Error(io::Error),
    /// TLS refused or failed.
    Tls(crate::tls::TlsError),
}

/// Read what the socket has, in bulk, until it is drained (clears `readable`) or the buffer
/// is full (stays readable).
fn read_available(c: &mut ConnState, acceptor: Option<&Arc<dyn TlsAcceptor>>) -> Input {
    if let ConnTls::Sniff { required } = c.tls {
        let mut first = [0u8; 1];
        // SAFETY: a one-byte buffer we own; MSG_PEEK leaves the byte in the socket.
        let n = unsafe {
            libc::recv(
                c.stream.as_raw_fd(),
                first.as_mut_ptr() as *mut libc::c_void,
                1,
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock => {
                    c.readable = false;
                    Input::Nothing
                }
                io::ErrorKind::Interrupted => Input::Nothing,
                _ => Input::Error(e),
            };
        }
        if n == 0 {
            c.readable = false;
            return Input::Closed;
        }
        match crate::tls::sniff(first[0], required, acceptor) {
            Ok(t) => c.tls = t,
            Err(e) => return Input::Tls(e),
        }
    }
    if c.tls.is_plain() {
        read_plain(c)
    } else {
        read_tls(c)
    }
}

/// TLS: plaintext the session already holds first (a full receive buffer left some there),
/// then ciphertext from the socket, decrypted into the receive buffer.
fn read_tls(c: &mut ConnState) -> Input {
    use std::io::Read;
    let ConnTls::On { session, .. } = &mut c.tls else {
        return Input::Nothing;
    };
    let mut got = false;
    let mut acked = false;
    thread_local! {
        /// Ciphertext read from a socket, before the session takes it (one per reactor).
        static CIPHER: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0u8; 256 * 1024]);
    }
    loop {
        // Drain the plaintext the session has.
        let mut full = false;
        loop {
            if c.core.recv_space().is_empty() && !c.core.grow_recv() {
                full = true;
                break;
            }
            match session.read_plain(c.core.recv_space()) {
                Ok(0) => break,
                Ok(n) => {
                    c.core.received(n);
                    got = true;
                }
                Err(e) => return Input::Tls(e),
            }
        }
        if full {
            // Stay readable: the decoder makes room, and the next round takes the rest.
            c.readable = true;
            break;
        }
        if session.peer_closed() {
            // close_notify: the session discards whatever follows; the connection ends
            // (RFC 8446 §6.1) once what was received is processed.
            c.readable = false;
            return if got {
                Input::DataThenClosed
            } else {
                Input::Closed
            };
        }
        if session.read_paused() {
            // The session bounded its work (records without plaintext, KeyUpdate answers not
            // yet sent): send, serve the other connections, and come back next round.
            c.readable = true;
            break;
        }
        // Into the session's own buffer when it has one (its records are opened in place
        // there), else through ours and a copy.
        let r = if let Some(space) = session.cipher_space() {
            match c.stream.read(space) {
                Ok(n) if n > 0 => session.cipher_filled(n).map(|()| Ok(n)),
                other => Ok(other),
            }
        } else {
            CIPHER.with(|b| {
                let mut b = b.borrow_mut();
                match c.stream.read(&mut b) {
                    Ok(n) if n > 0 => session.feed(&b[..n]).map(|()| Ok(n)),
                    other => Ok(other),
                }
            })
        };
        let r = match r {
            Ok(r) => r,
            Err(e) => return Input::Tls(e),
        };
        match r {
            Ok(0) => {
                c.readable = false;
                return if got {
                    Input::DataThenClosed
                } else {
                    Input::Closed
                };
            }
            Ok(_) => {
                // Handshake messages count as activity even without plaintext.
                got |= !session.pending_cipher().is_empty() || !session.handshake_done();
                if !acked {
                    // ACK what came in now rather than after the 40 ms delayed-ACK timer: a
                    // TLS peer that writes a PDU as several small records without TCP_NODELAY
                    // (SPDK's initiator: H2CData header and data) holds its next segment back
                    // (Nagle) until this ACK. Without it each 128K write over TLS waited ~40
                    // ms at QD1. Linux clears the flag by itself, hence once per turn.
                    let _ = socket2::SockRef::from(&c.stream).set_tcp_quickack(true);
                    acked = true;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                c.readable = false;
                break;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Input::Error(e),
        }
    }
    if got { Input::Data } else { Input::Nothing }
}

/// Plain NVMe/TCP: read what the socket has, in bulk.
fn read_plain(c: &mut ConnState) -> Input {
    use std::io::Read;
    let mut got = false;
    loop {
        if c.core.recv_space().is_empty() && !c.core.grow_recv() {
            break;
        }
        match c.stream.read(c.core.recv_space()) {
            Ok(0) => {
                c.readable = false;
                return if got {
                    Input::DataThenClosed
                } else {
                    Input::Closed
                };
            }
            Ok(n) => {
                c.core.received(n);
                got = true;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                c.readable = false;
                break;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Input::Error(e),
        }
    }
    if got { Input::Data } else { Input::Nothing }
}
