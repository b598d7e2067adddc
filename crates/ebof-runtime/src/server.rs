//! Reactor threads and listeners.
//!
//! One thread per configured core, pinned, each running a [`Reactor`] (an epoll loop with
//! adaptive polling). Listeners are accepted on the first reactor; each accepted connection is
//! handed, round-robin, to a reactor and stays there for life (an NVMe queue never migrates
//! between cores). Backends that may block run on each reactor's own I/O engine (io_uring, or a
//! fixed-size worker pool; [`crate::engine`]).

use crate::affinity;
use crate::engine::EngineConfig;
use crate::limits::{Admission, ConnCaps};
use crate::mailbox::{Command, Mailbox};
use crate::reactor::Reactor;
use nvmf_target::Target;
use nvmf_tcp::TargetConnConfig;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Runtime settings.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// I/O listeners (discovery is also served on each).
    pub listeners: Vec<SocketAddr>,
    /// Dedicated discovery listener.
    pub discovery: Option<SocketAddr>,
    /// Cores to run reactors on.
    pub cores: Vec<usize>,
    /// Transport limits.
    pub tcp: TargetConnConfig,
    /// Adaptive-polling window: a reactor keeps polling without sleeping for this long after
    /// its last work (zero: purely event-driven, sleeps whenever nothing is ready).
    pub poll: std::time::Duration,
    /// A connection must complete ICReq and Fabrics Connect within this time of being
    /// accepted, or it is closed.
    pub handshake_timeout: std::time::Duration,
    /// Caps on open connections (total and per source address); further connections are
    /// closed as soon as they are accepted. The total is also kept below the open-file limit.
    pub caps: ConnCaps,
    /// Listen backlog; `None`: the kernel's maximum (`net.core.somaxconn`).
    pub backlog: Option<u32>,
    /// The I/O engine for file and block namespaces (per reactor).
    pub engine: EngineConfig,
    /// TLS sessions for listeners whose mode is not off ([`crate::tls`]); `None`: a TLS
    /// ClientHello is refused.
    pub tls: Option<std::sync::Arc<dyn crate::tls::TlsAcceptor>>,
    /// NVMe/RDMA listeners ([`crate::rdma`]); none: no RDMA library is ever loaded.
    #[cfg(feature = "rdma")]
    pub rdma: crate::rdma::RdmaConfig,
}

impl ServerConfig {
    /// Defaults for everything but where to listen and which cores to run on.
    pub fn new(listeners: Vec<SocketAddr>, cores: Vec<usize>) -> ServerConfig {
        ServerConfig {
            listeners,
            discovery: None,
            cores,
            tcp: TargetConnConfig::default(),
            poll: std::time::Duration::from_micros(100),
            handshake_timeout: crate::conn::DEFAULT_HANDSHAKE_TIMEOUT,
            caps: ConnCaps {
                total: 16_384,
                per_address: 4_096,
            },
            backlog: None,
            engine: EngineConfig::default(),
            tls: None,
            #[cfg(feature = "rdma")]
            rdma: Default::default(),
        }
    }
}

/// Errors starting the server.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// A TCP listener could not be bound or listened on.
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The socket error.
        source: std::io::Error,
    },
    /// A reactor could not be set up (epoll, waker) or its thread spawned.
    #[error("cannot start reactor thread: {0}")]
    Thread(std::io::Error),
    /// The configuration left no core to run a reactor on.
    #[error("no cores to run on")]
    NoCores,
    /// The NVMe/RDMA side failed to start.
    #[cfg(feature = "rdma")]
    #[error(transparent)]
    Rdma(#[from] crate::rdma::RdmaStartError),
    /// A listener change sent to the accepting reactor got no answer within the wait.
    #[error("the accepting reactor did not answer in time")]
    Unresponsive,
}

/// A running server.
pub struct Server;

/// Handle to stop a running server.
pub struct ServerHandle {
    stop: Arc<AtomicBool>,
    mailboxes: Vec<Arc<Mailbox>>,
    threads: Vec<std::thread::JoinHandle<()>>,
    backlog: u32,
    /// Addresses actually bound (port 0 resolved), I/O listeners first, then discovery.
    pub bound: Vec<SocketAddr>,
    #[cfg(feature = "rdma")]
    rdma: Option<crate::rdma::RdmaHandle>,
}

/// Adds and removes listeners of a running server (the management API's `listener add/remove`).
/// Listeners live on the first reactor, which accepts for all of them.
#[derive(Clone)]
pub struct ListenerControl {
    acceptor: Arc<Mailbox>,
    backlog: u32,
}

impl std::fmt::Debug for ListenerControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListenerControl")
            .field("backlog", &self.backlog)
            .finish()
    }
}

/// How long a control request waits for the accepting reactor.
const CONTROL_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

impl ListenerControl {
    /// Bind `addr` (errors are the caller's: address in use, not local…) and start accepting
    /// on it. Returns the bound address (port 0 resolved).
    pub fn add(&self, addr: SocketAddr, discovery_only: bool) -> Result<SocketAddr, ServerError> {
        let l = listen(addr, self.backlog).map_err(|source| ServerError::Bind { addr, source })?;
        let local = l.local_addr().unwrap_or(addr);
        let (tx, rx) = std::sync::mpsc::channel();
        self.acceptor
            .command(Command::AddListener(l, discovery_only, tx));
        match rx.recv_timeout(CONTROL_WAIT) {
            Ok(Ok(())) => {
                tracing::info!(%local, discovery_only, "listening (NVMe/TCP), added at run time");
                Ok(local)
            }
            Ok(Err(source)) => Err(ServerError::Bind { addr, source }),
            Err(_) => Err(ServerError::Unresponsive),
        }
    }

    /// Stop accepting on `addr` and close its socket. Connections made through it are kept.
    /// Returns false if no listener had that address.
    pub fn remove(&self, addr: SocketAddr) -> Result<bool, ServerError> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.acceptor.command(Command::RemoveListener(addr, tx));
        rx.recv_timeout(CONTROL_WAIT)
            .map_err(|_| ServerError::Unresponsive)
    }
}

impl ServerHandle {
    /// Where to add and remove listeners while the server runs.
    pub fn listener_control(&self) -> ListenerControl {
        ListenerControl {
            acceptor: self.mailboxes[0].clone(),
            backlog: self.backlog,
        }
    }

    /// Stop accepting and end every reactor (open connections are dropped).
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Release);
        for m in &self.mailboxes {
            m.wake();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        #[cfg(feature = "rdma")]
        if let Some(r) = self.rdma.take() {
            r.join();
        }
    }
}

impl Server {
    /// Bind every listener (all-or-nothing), start the reactors, and return once every reactor
    /// is up, so that what the caller logs next ("ready") comes after the reactors' own lines.
    pub fn start(target: Arc<Target>, cfg: ServerConfig) -> Result<ServerHandle, ServerError> {
        if cfg.cores.is_empty() {
            return Err(ServerError::NoCores);
        }
        let mut listeners = Vec::new();
        let backlog = cfg.backlog.unwrap_or_else(somaxconn);
        let bind =
            |addr| listen(addr, backlog).map_err(|source| ServerError::Bind { addr, source });
        // The discovery listener first: a caller that may do without it (the embedded
        // default's) can retry when its port was taken meanwhile, and no I/O listener has
        // answered a connect in between.
        let discovery = cfg.discovery.map(bind).transpose()?;
        for &addr in &cfg.listeners {
            listeners.push((bind(addr)?, false));
        }
        listeners.extend(discovery.map(|l| (l, true)));
        for (l, disc) in &listeners {
            if let Ok(local) = l.local_addr() {
                tracing::info!(%local, discovery_only = disc, backlog, "listening (NVMe/TCP)");
            }
        }
        let stop = Arc::new(AtomicBool::new(false));
        // RDMA first: a missing device or an address no RDMA device serves is a start error
        // before any thread runs.
        #[cfg(feature = "rdma")]
        let rdma = if cfg.rdma.listeners.is_empty() && cfg.rdma.discovery.is_none() {
            None
        } else {
            Some(crate::rdma::start(
                target.clone(),
                &cfg.rdma,
                &cfg.cores,
                crate::rdma::RdmaRun {
                    spin: cfg.poll,
                    engine: cfg.engine,
                    handshake_timeout: cfg.handshake_timeout,
                },
                stop.clone(),
            )?)
        };
        let caps = fit_caps(cfg.caps);
        let admission = Admission::new(caps);
        let bound: Vec<SocketAddr> = listeners
            .iter()
            .filter_map(|(l, _)| l.local_addr().ok())
            .collect();
        let mut reactors = Vec::new();
        let mut mailboxes = Vec::new();
        for &core in &cfg.cores {
            let (r, m) = Reactor::new(
                core,
                target.clone(),
                cfg.tcp,
                cfg.poll,
                cfg.handshake_timeout,
                stop.clone(),
                cfg.engine,
                admission.clone(),
                cfg.tls.clone(),
            )
            .map_err(ServerError::Thread)?;
            reactors.push(r);
            mailboxes.push(m);
        }
        // Listeners are accepted on the first reactor.
        if let Some(first) = reactors.first_mut() {
            for (l, disc) in listeners {
                let addr = l.local_addr().map_err(ServerError::Thread)?;
                first
                    .add_listener(l, disc)
                    .map_err(|source| ServerError::Bind { addr, source })?;
            }
            first.set_peers(mailboxes.clone());
        }
        let mut threads = Vec::new();
        // Each reactor sends one message once it is pinned; a reactor thread that dies drops
        // its sender instead, so the wait below always ends.
        let (up_tx, up_rx) = std::sync::mpsc::channel::<()>();
        for (r, core) in reactors.into_iter().zip(cfg.cores.iter().copied()) {
            let poll = cfg.poll;
            let up = up_tx.clone();
            let t = std::thread::Builder::new()
                .name(format!("ebof-core{core}"))
                .spawn(move || {
                    let mut r = r;
                    let pinned = affinity::pin_current_thread(core);
                    let io_engine = r.start_engine();
                    match pinned {
                        Ok(()) if poll.is_zero() => {
                            tracing::info!(core, %io_engine, "reactor started (epoll, event-driven)")
                        }
                        Ok(()) => tracing::info!(
                            core,
                            spin_us = poll.as_micros() as u64,
                            %io_engine,
                            "reactor started (epoll, adaptive polling)"
                        ),
                        Err(e) => {
                            tracing::warn!(core, %io_engine, error = %e, "reactor started unpinned")
                        }
                    }
                    let _ = up.send(());
                    drop(up);
                    r.run()
                })
                .map_err(ServerError::Thread)?;
            threads.push(t);
        }
        drop(up_tx);
        for _ in &threads {
            if up_rx.recv().is_err() {
                break;
            }
        }
        Ok(ServerHandle {
            stop,
            mailboxes,
            threads,
            backlog,
            bound,
            #[cfg(feature = "rdma")]
            rdma,
        })
    }
}

/// The kernel's listen backlog maximum (`net.core.somaxconn`); 4096 (Linux's default since
/// 5.4) if it cannot be read.
fn somaxconn() -> u32 {
    std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(4096)
}

/// A non-blocking listening socket on `addr` with `backlog` (std's `bind` fixes it at 128,
/// which makes a burst of connects wait for SYN retries).
fn listen(addr: SocketAddr, backlog: u32) -> std::io::Result<StdListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    s.set_reuse_address(true)?;
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
    }
    s.bind(&addr.into())?;
    s.listen(i32::try_from(backlog).unwrap_or(i32::MAX))?;
    s.set_nonblocking(true)?;
    Ok(s.into())
}

/// Raise the open-file limit to its hard maximum and keep the connection cap below it (each
/// connection is a descriptor; the rest — backends, epoll, listeners — gets a reserve).
fn fit_caps(mut caps: ConnCaps) -> ConnCaps {
    const RESERVE: u64 = 256;
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read/write the struct we pass.
    let files = unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return caps;
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim.rlim_cur = lim.rlim_max;
            }
        }
        lim.rlim_cur
    };
    let room = usize::try_from(files.saturating_sub(RESERVE))
        .unwrap_or(usize::MAX)
        .max(1);
    if caps.total == 0 {
        caps.total = room;
    } else if caps.total > room {
        tracing::warn!(
            configured = caps.total,
            open_file_limit = files,
            cap = room,
            "max_connections lowered to fit the open-file limit"
        );
        caps.total = room;
    }
    tracing::debug!(
        total = caps.total,
        per_address = caps.per_address,
        "connection caps"
    );
    caps
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpStream;
    use std::time::Duration;

    /// Connects that nobody accepts yet until one does not complete (bounded by `max`).
    fn queued_connects(l: &StdListener, max: usize) -> usize {
        let addr = l.local_addr().unwrap();
        let mut held = Vec::new();
        while held.len() < max {
            match TcpStream::connect_timeout(&addr, Duration::from_millis(1500)) {
                Ok(s) => held.push(s),
                Err(_) => break,
            }
        }
        held.len()
    }

    /// The listener takes a burst of connects while the reactor is busy; std's fixed backlog
    /// of 128 makes the rest wait for SYN retries (and, here, fail).
    #[test]
    fn backlog_comes_from_somaxconn() {
        let max = somaxconn() as usize;
        let burst = 600;
        if max < burst + 10 {
            eprintln!("skipped: net.core.somaxconn is {max}, below the burst of {burst}");
            return;
        }
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let l = listen(any, somaxconn()).unwrap();
        assert_eq!(queued_connects(&l, burst), burst);
        // The contrast that makes the check mean something: a backlog of 128 does not.
        let small = listen(any, 128).unwrap();
        assert!(queued_connects(&small, burst) < burst);
    }

    #[test]
    fn caps_fit_the_open_file_limit() {
        let c = fit_caps(ConnCaps {
            total: usize::MAX,
            per_address: 10,
        });
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes the struct we pass.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
        assert!(c.total as u64 <= lim.rlim_cur.max(257));
        assert_eq!(c.per_address, 10);
    }
}
