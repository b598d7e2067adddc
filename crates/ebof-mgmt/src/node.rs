//! One box, started and stopped as a whole: [`Node`].
//!
//! [`Node::start`] takes a validated configuration to a serving box, in one order:
//!
//! 1. **checks** that fail before anything is opened or created: the cores are ours, every
//!    listener can be bound (the default discovery listener is optional), the management token
//!    file is good;
//! 2. **the target**: namespaces opened, the appliers run from nothing to the file
//!    ([`crate::build::build_target`]), DH-HMAC-CHAP and TLS set up;
//! 3. **the Central Discovery Controller** (`[cdc]`), before any host connects, so the
//!    discovery service is central from the first host on;
//! 4. **the management sockets** bound (a conflict fails before any host can connect);
//! 5. **the NVMe/TCP and NVMe/RDMA servers**;
//! 6. **the control plane** ([`Control`], always, with or without an API socket), given the
//!    listeners' control, the CDC and the mDNS responder at construction; it settles ports
//!    bound as 0 and publishes the discovery listeners over mDNS;
//! 7. **the management API** served on the sockets of step 4;
//! 8. **the DIM announcer** (`[discovery] cdc`).
//!
//! [`Node::stop`] (or drop) stops them in the reverse order (the announcer deregisters first;
//! mDNS says goodbye before the listeners close) and flushes every namespace. A start that
//! fails part-way stops what it had started.

use crate::control::{Control, Services};
use crate::mdns::Responder;
use crate::server::{ApiListener, BoundSocket, MgmtServer, ServerError};
use crate::{Token, TokenFileError};
use ebof_config::{BackendChoice, Config, IoEngine, Transport, format_size};
use ebof_runtime::{EngineConfig, IoEngineKind, Server, ServerConfig, ServerHandle, affinity};
use nvmf_target::Target;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// What a box is started with besides its configuration.
#[derive(Clone, Debug)]
pub struct NodeOptions {
    /// The configuration file the box was started from: where `save` and autosave write.
    pub config_file: Option<PathBuf>,
    /// The dedicated discovery listener is a convenience (the embedded default's): when its
    /// port is taken, serve without it and say so.
    pub optional_discovery: bool,
    /// Adaptive polling: how long a reactor keeps polling after its last work.
    pub poll: Duration,
}

/// Why a box did not start. The messages are the operator's: each names what failed.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// `[target] cores` names a core this process may not run on.
    #[error("target.cores: core {core} is not available to this process (allowed: {allowed:?})")]
    Cores {
        /// The core asked for.
        core: usize,
        /// The cores this process may run on.
        allowed: Vec<usize>,
    },
    /// An NVMe/RDMA listener with port 0.
    #[error("RDMA listener {0}: give a port (0 is for NVMe/TCP listeners only)")]
    RdmaPort(ebof_config::Listener),
    /// A listener's address cannot be bound.
    #[error("cannot listen on {addr}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The management API on TCP without a token file (validation refuses it; never served).
    #[error(
        "management.token_file: the management API on TCP requires a token file (--mgmt-token-file)"
    )]
    NoTokenFile,
    /// The token file could not be used.
    #[error(transparent)]
    Token(#[from] TokenFileError),
    /// The configured management socket could not be bound.
    #[error("management API")]
    Management(#[source] ServerError),
    /// A management listener (metrics, API on TCP, HTTPS) could not be set up or served.
    #[error(transparent)]
    Server(#[from] ServerError),
    /// The NVMe servers did not start.
    #[error(transparent)]
    Transport(#[from] ebof_runtime::server::ServerError),
    /// The Central Discovery Controller did not start.
    #[error("central discovery controller")]
    Cdc(#[source] std::io::Error),
    /// `[discovery] cdc` with no NVMe/TCP discovery listener to announce.
    #[error("[discovery] cdc: no NVMe/TCP discovery listener to announce")]
    NothingToAnnounce,
    /// The announcer did not start.
    #[error("announcing to the central discovery controller")]
    Announce(#[source] std::io::Error),
    /// The target, its security or the CDC's keys could not be set up (the message says what).
    #[error("{0}")]
    Setup(String),
}

/// A running box: the target, its servers and services, and the control plane over them.
#[derive(Debug)]
pub struct Node {
    control: Arc<Control>,
    cores: Vec<usize>,
    listeners: Vec<SocketAddr>,
    parts: Parts,
}

/// What is running, in the order it started; [`Parts::shutdown`] (or drop: a start that fails
/// part-way) stops it in the reverse order.
struct Parts {
    target: Arc<Target>,
    cdc: Option<Arc<ebof_fleet::Cdc>>,
    server: Option<ServerHandle>,
    mdns: Option<Arc<Responder>>,
    mgmt: Option<MgmtServer>,
    announcer: Option<ebof_fleet::Announcer>,
}

impl std::fmt::Debug for Parts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Parts")
            .field("cdc", &self.cdc.is_some())
            .field("server", &self.server.is_some())
            .field("mgmt", &self.mgmt)
            .field("announcer", &self.announcer.is_some())
            .finish_non_exhaustive()
    }
}

/// The management sockets, bound and not yet served.
struct MgmtSockets {
    socket: Option<BoundSocket>,
    metrics: Option<std::net::TcpListener>,
    api_tcp: Option<ApiListener>,
}

impl Node {
    /// Start the box `cfg` describes (valid, as [`Config::validate`] leaves it), in the order
    /// of the module docs; on error, what had started is stopped again.
    pub fn start(mut cfg: Config, opts: NodeOptions) -> Result<Node, NodeError> {
        let cores = cores(&cfg)?;
        check_listeners(&mut cfg, opts.optional_discovery)?;
        // A bad token file fails before any backend is opened.
        let token = management_token(&cfg)?;
        let target = open_target(&cfg)?;
        let tls = crate::security::tls_acceptor(&cfg).map_err(NodeError::Setup)?;
        let mut parts = Parts {
            target: target.clone(),
            cdc: None,
            server: None,
            mdns: None,
            mgmt: None,
            announcer: None,
        };
        if let Some(c) = &cfg.cdc {
            parts.cdc = Some(Arc::new(start_cdc(&target, &cfg, c)?));
        }
        log_served(&target, &cfg);
        let sockets = bind_management(&cfg, token)?;
        let handle = match start_server(&mut cfg, &cores, &opts, tls, &target) {
            Ok(h) => h,
            Err(e) => {
                sockets.close();
                return Err(e.into());
            }
        };
        let listeners = bound_listeners(&cfg, &handle.bound);
        crate::build::settle_bound_ports(&mut cfg, &listeners, &target);
        let tcp_bound = handle.bound.clone();
        let listener_control = handle.listener_control();
        parts.server = Some(handle);
        // mDNS (TP 8009): best effort, NVMe is served whatever it says; the control plane keeps
        // it in step with listener and mode changes.
        let mdns = Arc::new(Responder::new());
        parts.mdns = Some(mdns.clone());
        let services = Services {
            listeners: Some(listener_control),
            mdns: Some(mdns),
            cdc: parts.cdc.clone(),
        };
        let config_file = opts
            .config_file
            .map(|p| std::path::absolute(&p).unwrap_or(p));
        let control = Arc::new(Control::with_services(
            target,
            cfg.clone(),
            config_file,
            services,
        ));
        parts.mgmt = serve_management(control.clone(), sockets)?;
        if let Some(c) = &cfg.discovery_settings.cdc {
            parts.announcer = Some(start_announcer(&cfg, c.socket_addr(), &tcp_bound)?);
        }
        Ok(Node {
            control,
            cores,
            listeners,
            parts,
        })
    }

    /// The target served.
    pub fn target(&self) -> &Arc<Target> {
        &self.parts.target
    }

    /// The control plane (the management API's request surface).
    pub fn control(&self) -> &Arc<Control> {
        &self.control
    }

    /// The cores the reactors run on.
    pub fn cores(&self) -> &[usize] {
        &self.cores
    }

    /// Every listener in configuration order, I/O then discovery (the NVMe/TCP ones as bound:
    /// port 0 resolved).
    pub fn listeners(&self) -> &[SocketAddr] {
        &self.listeners
    }

    /// Stop everything in the reverse order of the start, then flush every namespace.
    pub fn stop(mut self) {
        self.parts.shutdown();
    }
}

impl Parts {
    /// Stop what runs, last started first; once the servers are stopped, flush every
    /// namespace.
    fn shutdown(&mut self) {
        if let Some(a) = self.announcer.take() {
            a.stop();
        }
        if let Some(m) = self.mgmt.take() {
            m.stop();
        }
        // Goodbye packets before the listeners close, so hosts forget them first.
        if let Some(m) = self.mdns.take() {
            m.shutdown();
        }
        let served = match self.server.take() {
            Some(h) => {
                h.stop();
                true
            }
            None => false,
        };
        if let Some(c) = self.cdc.take() {
            c.stop();
        }
        crate::mirror::stop_all(&self.target);
        if !served {
            return;
        }
        for s in self.target.subsystems().iter() {
            for n in &s.namespaces {
                if let Err(e) = n.backend.flush() {
                    tracing::error!(subsystem = %s.nqn, nsid = n.nsid, error = %e, "flush at shutdown failed");
                }
            }
        }
    }
}

impl Drop for Parts {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl MgmtSockets {
    /// Give the sockets up unserved (the socket file is removed if it is still ours).
    fn close(self) {
        if let Some(s) = self.socket {
            s.close();
        }
    }
}

/// The cores to run on: `[target] cores` if set (each must be ours), else every core this
/// process may run on.
fn cores(cfg: &Config) -> Result<Vec<usize>, NodeError> {
    let allowed = affinity::allowed_cores();
    match &cfg.target.cores {
        Some(c) => match c.iter().find(|c| !allowed.contains(c)) {
            Some(&core) => Err(NodeError::Cores { core, allowed }),
            None => Ok(c.clone()),
        },
        None => Ok(allowed),
    }
}

/// Check, before any backend is opened or file created, that every listener can be bound, so a
/// port in use fails at once with nothing left behind. The probe sockets are bound but never
/// listen (a client that connects meanwhile is refused, not accepted by a socket about to
/// close: a readiness check would otherwise take the probe for the server), and they are
/// closed again at once; SO_REUSEADDR as on the real listener, so its bind follows without
/// delay.
///
/// With `optional_discovery` (the embedded default's discovery listener, a convenience), a
/// discovery port that is taken (another target on this machine) is dropped with a warning:
/// discovery is still answered on the I/O listeners.
pub fn check_listeners(cfg: &mut Config, optional_discovery: bool) -> Result<(), NodeError> {
    for l in &cfg.listeners {
        if cfg.transport(l) == Transport::Rdma {
            // RDMA CM ports are not TCP ports: librdmacm checks them when serve binds.
            if l.port == 0 {
                return Err(NodeError::RdmaPort(*l));
            }
            continue;
        }
        probe_bind(l.socket_addr())?;
    }
    if let Some(d) = &cfg.discovery
        && cfg.transport(d) == Transport::Tcp
    {
        let addr = d.socket_addr();
        match probe_bind(addr) {
            Ok(()) => {}
            Err(NodeError::Listen { source, .. }) if optional_discovery => {
                drop_discovery(cfg, addr, &source);
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Start the transport servers. An optional discovery listener whose port another target
/// took after [`check_listeners`] looked (two default serves starting together) is dropped as
/// that check would have dropped it; the server binds it first, so nothing else was bound.
fn start_server(
    cfg: &mut Config,
    cores: &[usize],
    opts: &NodeOptions,
    tls: Option<Arc<dyn ebof_runtime::tls::TlsAcceptor>>,
    target: &Arc<Target>,
) -> Result<ServerHandle, ebof_runtime::server::ServerError> {
    use ebof_runtime::server::ServerError as E;
    match Server::start(
        target.clone(),
        server_config(cfg, cores, opts.poll, tls.clone()),
    ) {
        Err(E::Bind { addr, source })
            if opts.optional_discovery
                && source.kind() == std::io::ErrorKind::AddrInUse
                && cfg.discovery.is_some_and(|d| d.socket_addr() == addr) =>
        {
            drop_discovery(cfg, addr, &source);
            Server::start(target.clone(), server_config(cfg, cores, opts.poll, tls))
        }
        r => r,
    }
}

/// Serve without the optional discovery listener at `addr`, which could not be bound.
fn drop_discovery(cfg: &mut Config, addr: SocketAddr, source: &std::io::Error) {
    tracing::warn!(
        %addr,
        error = %source,
        "no dedicated discovery listener: discovery is still answered on {}",
        join(cfg.listeners.iter().map(|l| l.socket_addr()))
    );
    cfg.discovery = None;
}

fn probe_bind(addr: SocketAddr) -> Result<(), NodeError> {
    use socket2::{Domain, Protocol, Socket, Type};
    let probe = || -> std::io::Result<()> {
        let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        s.set_reuse_address(true)?;
        if addr.is_ipv6() {
            s.set_only_v6(true)?;
        }
        s.bind(&addr.into())
    };
    probe().map_err(|source| NodeError::Listen { addr, source })
}

/// `a, b, c` for a log line.
fn join<T: std::fmt::Display>(items: impl IntoIterator<Item = T>) -> String {
    items
        .into_iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The bearer token of the management API on TCP, read and checked (owner-only, not empty)
/// before anything is opened or started, so a bad token file fails at once. `None` when the
/// API is not served on TCP.
fn management_token(cfg: &Config) -> Result<Option<Token>, NodeError> {
    let m = &cfg.management;
    if m.disabled || m.listen.is_none() {
        return Ok(None);
    }
    // Config::validate refuses `listen` without `token_file`; never serve without one.
    let path = m.token_file.as_ref().ok_or(NodeError::NoTokenFile)?;
    Ok(Some(crate::load_token_file(path)?))
}

/// The target of `cfg` (namespaces opened, the appliers run), with its DH-HMAC-CHAP policy.
fn open_target(cfg: &Config) -> Result<Arc<Target>, NodeError> {
    let target = Arc::new(crate::build::build_target(cfg).map_err(NodeError::Setup)?);
    crate::mirror::bind(&target);
    let auth = crate::security::auth_policy(cfg).map_err(NodeError::Setup)?;
    if auth.is_some() {
        let hosts: Vec<&str> = cfg
            .hosts
            .iter()
            .filter(|h| h.dhchap_key.is_some())
            .map(|h| h.nqn.as_str())
            .collect();
        tracing::info!(hosts = %join(&hosts), "DH-HMAC-CHAP required of these hosts");
    }
    target.set_auth_policy(auth);
    Ok(target)
}

/// Log each subsystem and namespace served (or that there are none).
fn log_served(target: &Target, cfg: &Config) {
    if cfg.subsystems.is_empty() {
        tracing::info!(
            "no subsystems: add them at run time (`ebof ctl subsystem add`, `ebof ctl ns add`)"
        );
    }
    for (s, sc) in target.subsystems().iter().zip(&cfg.subsystems) {
        let hosts = if s.allow_any_host {
            "any".to_string()
        } else {
            join(&s.hosts)
        };
        tracing::info!(nqn = %s.nqn, serial = %s.serial, hosts = %hosts, "subsystem");
        for (n, nc) in s.namespaces.iter().zip(&sc.namespaces) {
            let size = format_size(n.backend.size());
            match &nc.backend {
                BackendChoice::Ram { .. } => tracing::info!(
                    subsystem = %s.nqn,
                    nsid = n.nsid,
                    backend = %n.backend.kind(),
                    size = %size,
                    block_size = n.block_size,
                    "namespace"
                ),
                BackendChoice::File { path, .. } | BackendChoice::Block { path } => tracing::info!(
                    subsystem = %s.nqn,
                    nsid = n.nsid,
                    backend = %n.backend.kind(),
                    path = %path.display(),
                    size = %size,
                    block_size = n.block_size,
                    direct = nc.direct,
                    "namespace"
                ),
            }
        }
    }
}

/// The NVMe/TCP and NVMe/RDMA servers' configuration from `cfg`.
fn server_config(
    cfg: &Config,
    cores: &[usize],
    poll: Duration,
    tls: Option<Arc<dyn ebof_runtime::tls::TlsAcceptor>>,
) -> ServerConfig {
    let t = &cfg.target;
    let tcp = nvmf_tcp::TargetConnConfig {
        maxh2cdata: t.max_h2c_data,
        max_icd: t.io_inline_data.max(8192),
        c2h_max: t.c2h_data_max,
        max_ttags: 256,
        cpda: 0,
    };
    let on = |tr: Transport| move |l: &&ebof_config::Listener| cfg.transport(l) == tr;
    let addrs = |tr: Transport| -> Vec<SocketAddr> {
        cfg.listeners
            .iter()
            .filter(on(tr))
            .map(|l| l.socket_addr())
            .collect()
    };
    let discovery = |tr: Transport| {
        cfg.discovery
            .as_ref()
            .filter(on(tr))
            .map(|l| l.socket_addr())
    };
    ServerConfig {
        listeners: addrs(Transport::Tcp),
        discovery: discovery(Transport::Tcp),
        rdma: ebof_runtime::rdma::RdmaConfig {
            listeners: addrs(Transport::Rdma),
            discovery: discovery(Transport::Rdma),
        },
        cores: cores.to_vec(),
        tcp,
        poll,
        handshake_timeout: Duration::from_millis(t.handshake_timeout_ms.into()),
        caps: ebof_runtime::limits::ConnCaps {
            total: t.max_connections as usize,
            per_address: t.max_connections_per_address as usize,
        },
        backlog: None,
        engine: EngineConfig {
            kind: match t.io_engine {
                IoEngine::IoUring => IoEngineKind::IoUring,
                IoEngine::Threads => IoEngineKind::Threads,
            },
            io_threads: usize::from(t.io_threads),
        },
        tls,
    }
}

/// Every listener in configuration order, I/O then discovery; the NVMe/TCP ones as `tcp_bound`
/// says (port 0 resolved).
fn bound_listeners(cfg: &Config, tcp_bound: &[SocketAddr]) -> Vec<SocketAddr> {
    let mut tcp_bound = tcp_bound.iter();
    cfg.listeners
        .iter()
        .chain(cfg.discovery.iter())
        .filter_map(|l| {
            if cfg.transport(l) == Transport::Tcp {
                tcp_bound.next().copied()
            } else {
                Some(l.socket_addr())
            }
        })
        .collect()
}

/// Start the Central Discovery Controller of `[cdc]` on `target`.
fn start_cdc(
    target: &Arc<Target>,
    cfg: &Config,
    c: &ebof_config::Cdc,
) -> Result<ebof_fleet::Cdc, NodeError> {
    let members: Vec<SocketAddr> = c.members.iter().map(|m| m.socket_addr()).collect();
    let hostnqn = c
        .hostnqn
        .clone()
        .unwrap_or_else(ebof_fleet::default_hostnqn);
    tracing::info!(
        members = %join(&members),
        %hostnqn,
        trusted = c.trusted.len(),
        "central discovery controller"
    );
    let mut cdc = ebof_fleet::CdcConfig::new(members, hostnqn);
    cdc.trusted = crate::cdc::trusted(&c.trusted);
    cdc.host_keys = crate::cdc::host_keys(cfg).map_err(|e| NodeError::Setup(e.to_string()))?;
    ebof_fleet::Cdc::start(target, cdc).map_err(NodeError::Cdc)
}

/// Announce this box's discovery service to the CDC at `cdc` (`[discovery] cdc`): the bound
/// dedicated discovery listener if there is one (NVMe/TCP), else every NVMe/TCP listener.
fn start_announcer(
    cfg: &Config,
    cdc: SocketAddr,
    tcp_bound: &[SocketAddr],
) -> Result<ebof_fleet::Announcer, NodeError> {
    let tcp_io = cfg
        .listeners
        .iter()
        .filter(|l| cfg.transport(l) == Transport::Tcp)
        .count();
    let addrs: Vec<SocketAddr> = match tcp_bound.get(tcp_io) {
        Some(d) => vec![*d],
        None => tcp_bound.to_vec(),
    };
    let first = addrs.first().ok_or(NodeError::NothingToAnnounce)?;
    let nqn = format!("nqn.2026-11.io.ebof:ddc:{first}");
    let name = std::fs::read_to_string("/etc/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "ebof".into());
    // A `[[hosts]]` DH-HMAC-CHAP key for the announcer's NQN authenticates it to the CDC
    // (which admits authenticated announcers, ADR 0025).
    let dhchap = crate::cdc::host_keys(cfg)
        .map_err(|e| NodeError::Setup(e.to_string()))?
        .remove(&nqn);
    tracing::info!(%cdc, addresses = %join(&addrs), %nqn, authenticated = dhchap.is_some(), "announcing to the central discovery controller");
    ebof_fleet::Announcer::start(ebof_fleet::AnnounceConfig {
        cdc,
        nqn,
        addrs,
        name,
        backoff_max: Duration::from_secs(10),
        dhchap,
    })
    .map_err(NodeError::Announce)
}

/// Bind the management socket, the metrics listener and the API's TCP listener (before any
/// host can connect, so a conflict fails at once).
///
/// The default socket is a convenience, like the default discovery listener: when another
/// `ebof serve` holds it, serve without a management socket and say so. A configured socket
/// that is in use is an error.
fn bind_management(cfg: &Config, token: Option<Token>) -> Result<MgmtSockets, NodeError> {
    let m = &cfg.management;
    let socket = if m.disabled {
        None
    } else {
        let (path, explicit) = match &m.socket {
            Some(p) => (p.clone(), true),
            None => (crate::default_socket_path(), false),
        };
        match crate::bind_socket(&path) {
            Ok(s) => Some(s),
            // Taken by another serve, or not usable by us: run without it, and say so.
            Err(e) if !explicit => {
                tracing::warn!(
                    error = %e,
                    "no management API (`ebof ctl`) on the default socket; \
                     set --mgmt-socket to serve one"
                );
                None
            }
            Err(e) => return Err(NodeError::Management(e)),
        }
    };
    let metrics = match &cfg.metrics {
        Some(l) => Some(crate::bind_metrics(l.socket_addr())?),
        None => None,
    };
    let api_tcp = match (&m.listen, token) {
        (Some(l), Some(token)) if !m.disabled => {
            let api = crate::bind_api_tcp(l.socket_addr(), token)?;
            match (&m.tls_cert, &m.tls_key) {
                (Some(cert), Some(key)) => Some(api.with_tls(cert, key)?),
                _ => Some(api),
            }
        }
        _ => None,
    };
    if let Some(l) = &m.listen
        && api_tcp.as_ref().is_some_and(|a| !a.is_tls())
        && !l.socket_addr().ip().is_loopback()
    {
        tracing::warn!(
            address = %l.socket_addr(),
            "the management API on TCP speaks plain HTTP: its token travels in clear \
             (set [management] tls_cert and tls_key for HTTPS)"
        );
    }
    Ok(MgmtSockets {
        socket,
        metrics,
        api_tcp,
    })
}

/// Serve the management API and metrics on `sockets` (none bound: nothing served).
fn serve_management(
    control: Arc<Control>,
    sockets: MgmtSockets,
) -> Result<Option<MgmtServer>, NodeError> {
    let MgmtSockets {
        socket,
        metrics,
        api_tcp,
    } = sockets;
    if socket.is_none() && metrics.is_none() && api_tcp.is_none() {
        return Ok(None);
    }
    let https = api_tcp.as_ref().is_some_and(|a| a.is_tls());
    let path = socket.as_ref().map(|s| s.path().display().to_string());
    let server = crate::start(control, socket, metrics, api_tcp)?;
    tracing::info!(
        socket = path.as_deref().unwrap_or("none"),
        tcp = %server
            .api_addr
            .map_or_else(|| "none".to_string(), |a| if https {
                format!("https://{a} (bearer token)")
            } else {
                format!("{a} (bearer token, plain HTTP)")
            }),
        metrics = %server
            .metrics_addr
            .map_or_else(|| "none".to_string(), |a| format!("http://{a}/metrics")),
        "management API"
    );
    Ok(Some(server))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_taken_port_fails_the_check_but_not_for_the_default_discovery() {
        let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = busy.local_addr().unwrap().port();
        // I/O listener on a free port, discovery listener on the taken one.
        let config = || {
            let mut cfg = Config::embedded_default();
            cfg.listeners[0].port = 0;
            cfg.discovery = Some(ebof_config::Listener {
                address: cfg.listeners[0].address,
                port,
            });
            cfg
        };
        let mut cfg = config();
        check_listeners(&mut cfg, true).unwrap();
        assert_eq!(
            cfg.discovery, None,
            "the optional discovery listener is dropped"
        );

        let mut cfg = config();
        let err = check_listeners(&mut cfg, false).unwrap_err();
        let text = format!("{err}: {}", std::error::Error::source(&err).unwrap());
        assert!(
            text.starts_with(&format!("cannot listen on 127.0.0.1:{port}: ")),
            "{text}"
        );

        let mut cfg = config();
        cfg.listeners[0].port = port;
        cfg.discovery = None;
        assert!(
            check_listeners(&mut cfg, true).is_err(),
            "I/O listeners are never optional"
        );
    }

    /// Two default serves starting together both find the discovery port free; the one that
    /// binds it second serves without it (and binds no I/O listener before knowing).
    #[test]
    fn a_discovery_port_taken_after_the_check_is_dropped_when_optional() {
        let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut cfg = Config::embedded_default();
        cfg.listeners[0].port = 0;
        cfg.target.cores = Some(vec![affinity::allowed_cores()[0]]);
        cfg.discovery = Some(ebof_config::Listener {
            address: cfg.listeners[0].address,
            port: busy.local_addr().unwrap().port(),
        });
        let target = open_target(&cfg).unwrap();
        let cores = cores(&cfg).unwrap();
        let opts = |optional_discovery| NodeOptions {
            config_file: None,
            optional_discovery,
            poll: Duration::ZERO,
        };

        let mut strict = cfg.clone();
        match start_server(&mut strict, &cores, &opts(false), None, &target) {
            Err(ebof_runtime::server::ServerError::Bind { addr, .. }) => {
                assert_eq!(addr, busy.local_addr().unwrap())
            }
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("a configured discovery port that is taken must fail the start"),
        }

        let h = start_server(&mut cfg, &cores, &opts(true), None, &target).unwrap();
        assert_eq!(cfg.discovery, None);
        assert_eq!(h.bound.len(), 1, "{:?}", h.bound);
        assert_ne!(h.bound[0], busy.local_addr().unwrap());
        h.stop();
    }
}
