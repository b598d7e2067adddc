//! Reactor threads and listeners.
//!
//! One thread per configured core, pinned, each running a [`Reactor`] (an epoll loop with
//! adaptive polling). Listeners are accepted on the first reactor; each accepted connection is
//! handed, round-robin, to a reactor and stays there for life (an NVMe queue never migrates
//! between cores). Backends that may block run on each reactor's own I/O engine (io_uring, or a
//! fixed-size worker pool; [`crate::engine`]).

use crate::affinity;
use crate::engine::EngineConfig;
use crate::reactor::{Mailbox, Reactor};
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
    /// The I/O engine for file and block namespaces (per reactor).
    pub engine: EngineConfig,
}

/// Errors starting the server.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot listen on {addr}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot start reactor thread: {0}")]
    Thread(std::io::Error),
    #[error("no cores to run on")]
    NoCores,
}

/// A running server.
pub struct Server;

/// Handle to stop a running server.
pub struct ServerHandle {
    stop: Arc<AtomicBool>,
    mailboxes: Vec<Arc<Mailbox>>,
    threads: Vec<std::thread::JoinHandle<()>>,
    /// Addresses actually bound (port 0 resolved), I/O listeners first, then discovery.
    pub bound: Vec<SocketAddr>,
}

impl ServerHandle {
    /// Stop accepting and end every reactor (open connections are dropped).
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Release);
        for m in &self.mailboxes {
            m.wake();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
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
        for (addr, disc) in cfg
            .listeners
            .iter()
            .map(|a| (*a, false))
            .chain(cfg.discovery.map(|a| (a, true)))
        {
            let l = StdListener::bind(addr).map_err(|source| ServerError::Bind { addr, source })?;
            l.set_nonblocking(true)
                .map_err(|source| ServerError::Bind { addr, source })?;
            let local = l.local_addr().unwrap_or(addr);
            tracing::info!(%local, discovery_only = disc, "listening (NVMe/TCP)");
            listeners.push((l, disc));
        }
        let bound: Vec<SocketAddr> = listeners
            .iter()
            .filter_map(|(l, _)| l.local_addr().ok())
            .collect();
        let stop = Arc::new(AtomicBool::new(false));
        let mut reactors = Vec::new();
        let mut mailboxes = Vec::new();
        for &core in &cfg.cores {
            let (r, m) = Reactor::new(
                core,
                target.clone(),
                cfg.tcp,
                cfg.poll,
                stop.clone(),
                cfg.engine,
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
            bound,
        })
    }
}
