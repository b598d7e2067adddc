//! Reactor threads and listeners.
//!
//! One thread per configured core, pinned, each running a current-thread tokio runtime.
//! Listeners are accepted on the first reactor; each accepted connection is handed, round-robin,
//! to a reactor and stays there for life (an NVMe queue never migrates between cores).

use crate::affinity;
use crate::conn::{ConnEnd, drive};
use nvmf_target::Target;
use nvmf_tcp::TargetConnConfig;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::mpsc;
use tracing::Instrument;

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
    /// Busy-poll window after each batch (zero: purely event-driven).
    pub poll: std::time::Duration,
}

/// A connection handed to a reactor.
struct NewConn {
    stream: std::net::TcpStream,
    local: SocketAddr,
    peer: SocketAddr,
    discovery_only: bool,
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
    threads: Vec<std::thread::JoinHandle<()>>,
    /// Addresses actually bound (port 0 resolved), I/O listeners first, then discovery.
    pub bound: Vec<SocketAddr>,
}

impl ServerHandle {
    /// Stop accepting and end every reactor (open connections are dropped).
    pub fn stop(self) {
        self.stop.store(true, Ordering::Release);
        for t in self.threads {
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
        let mut senders = Vec::new();
        let mut receivers = Vec::new();
        for _ in &cfg.cores {
            let (tx, rx) = mpsc::unbounded_channel::<NewConn>();
            senders.push(tx);
            receivers.push(rx);
        }
        let mut threads = Vec::new();
        let mut listeners = Some(listeners);
        // Each reactor sends one message once it is pinned and has its runtime; a reactor that
        // fails drops its sender instead, so the wait below always ends.
        let (up_tx, up_rx) = std::sync::mpsc::channel::<()>();
        for (i, (core, rx)) in cfg.cores.iter().copied().zip(receivers).enumerate() {
            let target = target.clone();
            let cfg = cfg.clone();
            let stop = stop.clone();
            let up = up_tx.clone();
            let accept = if i == 0 {
                listeners.take().map(|l| (l, senders.clone()))
            } else {
                None
            };
            let t = std::thread::Builder::new()
                .name(format!("ebof-core{core}"))
                .spawn(move || reactor(core, target, cfg, rx, accept, stop, up))
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
            threads,
            bound,
        })
    }
}

type Acceptor = (
    Vec<(StdListener, bool)>,
    Vec<mpsc::UnboundedSender<NewConn>>,
);

fn reactor(
    core: usize,
    target: Arc<Target>,
    cfg: ServerConfig,
    mut rx: mpsc::UnboundedReceiver<NewConn>,
    accept: Option<Acceptor>,
    stop: Arc<AtomicBool>,
    up: std::sync::mpsc::Sender<()>,
) {
    let (tcp, poll) = (cfg.tcp, cfg.poll);
    match affinity::pin_current_thread(core) {
        Ok(()) if poll.is_zero() => tracing::info!(core, "reactor started (epoll, event-driven)"),
        Ok(()) => tracing::info!(
            core,
            poll_us = poll.as_micros() as u64,
            "reactor started (epoll + busy-poll window)"
        ),
        Err(e) => tracing::warn!(core, error = %e, "reactor started unpinned"),
    }
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(core, error = %e, "cannot build reactor runtime");
            return;
        }
    };
    let _ = up.send(());
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        if let Some((listeners, senders)) = accept {
            for (l, disc) in listeners {
                let senders = senders.clone();
                let stop = stop.clone();
                tokio::task::spawn_local(accept_loop(l, disc, senders, stop));
            }
        }
        let mut stop_check = tokio::time::interval(std::time::Duration::from_millis(100));
        loop {
            tokio::select! {
                c = rx.recv() => {
                    let Some(c) = c else { break };
                    let target = target.clone();
                    tokio::task::spawn_local(async move {
                        let NewConn { stream, local, peer, discovery_only } = c;
                        let stream = match tokio::net::TcpStream::from_std(stream) {
                            Ok(s) => s,
                            Err(e) => {
                                tracing::warn!(%peer, error = %e, "cannot register connection");
                                return;
                            }
                        };
                        let span = tracing::info_span!("conn", %peer, %local, core);
                        let end = async {
                            tracing::debug!("connection accepted");
                            drive(stream, target, tcp, local, discovery_only, poll).await
                        }
                        .instrument(span.clone())
                        .await;
                        let _g = span.enter();
                        match end {
                            ConnEnd::PeerClosed => tracing::debug!("connection closed by peer"),
                            ConnEnd::Protocol(e) => tracing::warn!(error = %e, "connection terminated (protocol error)"),
                            ConnEnd::HostTerminated { fes, fei } => tracing::warn!(fes, fei, "host sent H2CTermReq"),
                            ConnEnd::ControllerGone => tracing::info!("connection closed: controller torn down"),
                            ConnEnd::Io(e) => tracing::debug!(error = %e, "connection I/O error"),
                        }
                    });
                }
                _ = stop_check.tick() => {
                    if stop.load(Ordering::Acquire) {
                        break;
                    }
                }
            }
        }
    });
}

async fn accept_loop(
    l: StdListener,
    discovery_only: bool,
    senders: Vec<mpsc::UnboundedSender<NewConn>>,
    stop: Arc<AtomicBool>,
) {
    let local = match l.local_addr() {
        Ok(a) => a,
        Err(_) => return,
    };
    let l = match tokio::net::TcpListener::from_std(l) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(%local, error = %e, "cannot register listener");
            return;
        }
    };
    let mut next = 0usize;
    while !stop.load(Ordering::Acquire) {
        match tokio::time::timeout(std::time::Duration::from_millis(200), l.accept()).await {
            Err(_) => continue,
            Ok(Ok((s, peer))) => {
                let std = match s.into_std() {
                    Ok(s) => s,
                    Err(_) => continue,
                };
                let i = next % senders.len();
                next = next.wrapping_add(1);
                let _ = senders[i].send(NewConn {
                    stream: std,
                    local,
                    peer,
                    discovery_only,
                });
            }
            Ok(Err(e)) => {
                tracing::warn!(%local, error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
}
