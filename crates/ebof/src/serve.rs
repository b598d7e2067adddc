//! `ebof serve`: load configuration, check the listeners can be bound, open backends, start the
//! reactors, log what is served, and say "ready" last.

use anyhow::{Context, Result, bail};
use ebof_config::{BackendChoice, Config, IoEngine, Overrides, format_size};
use ebof_mgmt::{MgmtServer, Token};
use ebof_runtime::{EngineConfig, IoEngineKind, Server, ServerConfig, affinity};
use nvmf_target::Target;
use nvmf_tcp::TargetConnConfig;
use std::ffi::OsStr;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// TOML configuration file (without it: the embedded default, a 1 GiB RAM namespace on
    /// 127.0.0.1:4420, discovery also on 127.0.0.1:8009).
    #[arg(long, short = 'c', value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Listen on ADDR:PORT, or rdma:ADDR:PORT for NVMe/RDMA (repeatable; replaces the configured listeners, and the embedded
    /// default's discovery listener unless --discovery-listen is given).
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: Vec<String>,
    /// Dedicated discovery listener (conventionally port 8009).
    #[arg(long, value_name = "ADDR:PORT")]
    pub discovery_listen: Option<String>,
    /// Serve one RAM namespace of SIZE (e.g. 4G) in the first subsystem.
    #[arg(long, value_name = "SIZE", conflicts_with = "file")]
    pub ram: Option<String>,
    /// Serve one file-backed namespace (created with 1 GiB if missing) in the first subsystem.
    #[arg(long, value_name = "PATH")]
    pub file: Option<PathBuf>,
    /// NQN of the first subsystem.
    #[arg(long, value_name = "NQN")]
    pub nqn: Option<String>,
    /// Cores to run on, e.g. "0,1" or "0-3".
    #[arg(long, value_name = "LIST")]
    pub cores: Option<String>,
    /// Adaptive polling: a reactor keeps polling its sockets without sleeping for this many
    /// microseconds after its last work, then sleeps in epoll (an idle target costs nothing; a
    /// loaded one spins). 0 = purely event-driven (sleep whenever nothing is ready).
    #[arg(long, value_name = "USEC", default_value_t = 100, value_parser = clap::value_parser!(u64).range(0..=10_000))]
    pub poll_us: u64,
    /// Management API socket for `ebof ctl` (default: /run/ebof/ebof.sock for root, else
    /// $XDG_RUNTIME_DIR/ebof.sock; `[management] socket` in the file).
    #[arg(long, value_name = "PATH")]
    pub mgmt_socket: Option<PathBuf>,
    /// Also serve the management API on TCP at ADDR:PORT (`[management] listen`); every request
    /// must bring the bearer token of --mgmt-token-file (`ebof ctl --api ADDR:PORT --token-file`).
    #[arg(long, value_name = "ADDR:PORT")]
    pub mgmt_listen: Option<String>,
    /// File holding the bearer token of the management API on TCP, owner-only (chmod 600)
    /// (`[management] token_file`).
    #[arg(long, value_name = "PATH")]
    pub mgmt_token_file: Option<PathBuf>,
    /// A directory the management API may make or open file namespaces in and save the
    /// configuration to (repeatable; adds to `[management] data_dirs`).
    #[arg(long, value_name = "DIR")]
    pub mgmt_data_dir: Vec<PathBuf>,
    /// Serve Prometheus metrics at http://ADDR:PORT/metrics (`[metrics] listen`).
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics_listen: Option<String>,
    /// How file and block namespaces do their I/O: io_uring (one ring per core; falls back to
    /// threads, with a log line, where the kernel refuses it) or threads (a fixed pool of
    /// `[target] io_threads` per core). Replaces `[target] io_engine`.
    #[arg(long, value_name = "ENGINE", value_parser = ebof_config::IoEngine::NAMES)]
    pub io_engine: Option<String>,
    /// Print the effective configuration as TOML and exit.
    #[arg(long)]
    pub print_config: bool,
    /// A pool box: start without the embedded default's subsystem (subsystems are added at
    /// run time with `ebof ctl subsystem add`). Without --config only.
    #[arg(long, conflicts_with = "config")]
    pub pool: bool,
    /// Run as a Central Discovery Controller over the discovery service at ADDR[:PORT] (port
    /// 8009 by default; repeatable; adds to `[cdc] members`). Without --config, implies
    /// --pool unless a namespace is asked for.
    #[arg(long, value_name = "ADDR[:PORT]")]
    pub cdc_member: Vec<String>,
}

/// Build the effective configuration from file/default plus overrides.
pub fn effective_config(a: &ServeArgs) -> Result<Config> {
    let mut cfg = match &a.config {
        Some(p) => Config::load(p).map_err(|e| anyhow::anyhow!("{e}"))?,
        None => {
            let mut c = Config::embedded_default();
            // The default discovery listener sits beside the default I/O listener; once
            // `--listen` moves the target elsewhere it would be a stray port on 127.0.0.1
            // (and two targets on one machine would fight over it). Discovery is still
            // answered on every `--listen` address.
            if !a.listen.is_empty() {
                c.discovery = None;
            }
            // A pool box or a CDC is no storage box unless a namespace is asked for.
            if a.pool || (!a.cdc_member.is_empty() && a.ram.is_none() && a.file.is_none()) {
                c.subsystems.clear();
            }
            c
        }
    };
    for m in &a.cdc_member {
        let l = ebof_config::parse_listener(m, ebof_cdc::DEFAULT_MEMBER_PORT)
            .map_err(|e| anyhow::anyhow!("{}", e.at("--cdc-member")))?;
        let c = cfg.cdc.get_or_insert_with(Default::default);
        if !c.members.contains(&l) {
            c.members.push(l);
        }
    }
    let o = Overrides {
        listen: a.listen.clone(),
        discovery_listen: a.discovery_listen.clone(),
        ram: a.ram.clone(),
        file: a.file.clone(),
        nqn: a.nqn.clone(),
        cores: a.cores.clone(),
        io_engine: a.io_engine.clone(),
    };
    cfg.apply_overrides(&o)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    if let Some(p) = &a.mgmt_socket {
        cfg.management.socket = Some(p.clone());
        cfg.management.disabled = false;
    }
    for d in &a.mgmt_data_dir {
        let d = std::path::absolute(d).unwrap_or_else(|_| d.clone());
        if !cfg.management.data_dirs.contains(&d) {
            cfg.management.data_dirs.push(d);
        }
    }
    if let Some(l) = &a.metrics_listen {
        cfg.metrics = Some(
            ebof_config::parse_listener(l, ebof_config::DEFAULT_METRICS_PORT)
                .map_err(|e| anyhow::anyhow!("{}", e.at("--metrics-listen")))?,
        );
    }
    if let Some(l) = &a.mgmt_listen {
        cfg.management.listen = Some(
            ebof_config::parse_listener(l, ebof_config::DEFAULT_MANAGEMENT_PORT)
                .map_err(|e| anyhow::anyhow!("{}", e.at("--mgmt-listen")))?,
        );
        cfg.management.disabled = false;
    }
    if let Some(p) = &a.mgmt_token_file {
        if p.as_os_str().is_empty() {
            anyhow::bail!(
                "{}",
                ebof_config::ConfigError::new(
                    ebof_config::codes::INVALID_PATH,
                    "--mgmt-token-file",
                    "the token file path is empty",
                )
            );
        }
        // Absolute: `ebof ctl save` writes it into a file that may be read from elsewhere.
        cfg.management.token_file = Some(std::path::absolute(p).unwrap_or_else(|_| p.clone()));
    }
    cfg.validate().map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(cfg)
}

/// Check, before any backend is opened or file created, that every listener can be bound, so a
/// port in use fails at once with nothing left behind. The probe sockets are bound but never
/// listen (a client that connects meanwhile is refused, not accepted by a socket about to
/// close: a readiness check would otherwise take the probe for the server), and they are
/// closed again at once; SO_REUSEADDR as on the real listener, so its bind follows without
/// delay.
///
/// The embedded default's discovery listener is a convenience: when its port is taken (another
/// target on this machine), serve without it, say so, and keep answering discovery on the I/O
/// listeners.
fn check_listeners(cfg: &mut Config, optional_discovery: bool) -> Result<()> {
    for l in &cfg.listeners {
        if cfg.transport(l) == ebof_config::Transport::Rdma {
            // RDMA CM ports are not TCP ports: librdmacm checks them when serve binds.
            if l.port == 0 {
                anyhow::bail!("RDMA listener {l}: give a port (0 is for NVMe/TCP listeners only)");
            }
            continue;
        }
        probe_bind(l.socket_addr())?;
    }
    if let Some(d) = &cfg.discovery
        && cfg.transport(d) == ebof_config::Transport::Tcp
    {
        let addr = d.socket_addr();
        match probe_bind(addr) {
            Ok(()) => {}
            Err(e) if optional_discovery => {
                tracing::warn!(
                    %addr,
                    error = %e.root_cause(),
                    "no dedicated discovery listener: discovery is still answered on {}",
                    join(cfg.listeners.iter().map(|l| l.socket_addr()))
                );
                cfg.discovery = None;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn probe_bind(addr: SocketAddr) -> Result<()> {
    use socket2::{Domain, Protocol, Socket, Type};
    let probe = || -> std::io::Result<()> {
        let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        s.set_reuse_address(true)?;
        if addr.is_ipv6() {
            s.set_only_v6(true)?;
        }
        s.bind(&addr.into())
    };
    probe().with_context(|| format!("cannot listen on {addr}"))
}

/// `a, b, c` for a log line.
fn join<T: std::fmt::Display>(items: impl IntoIterator<Item = T>) -> String {
    items
        .into_iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

pub fn run(a: ServeArgs) -> Result<()> {
    init_tracing();
    // A file size limit (`ulimit -f`) must fail the write that crosses it (EFBIG → Capacity
    // Exceeded for the host), not kill the target with SIGXFSZ.
    // SAFETY: setting a signal's disposition to SIG_IGN has no preconditions.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
    let mut cfg = effective_config(&a)?;
    if a.print_config {
        print!("{}", cfg.to_toml_string());
        return Ok(());
    }
    let cores = match &cfg.target.cores {
        Some(c) => {
            let allowed = affinity::allowed_cores();
            if let Some(bad) = c.iter().find(|c| !allowed.contains(c)) {
                bail!(
                    "target.cores: core {bad} is not available to this process (allowed: {allowed:?})"
                );
            }
            c.clone()
        }
        None => affinity::allowed_cores(),
    };
    let default_discovery = a.config.is_none() && a.discovery_listen.is_none();
    check_listeners(&mut cfg, default_discovery)?;
    // A bad token file fails before any backend is opened.
    let mgmt_token = management_token(&cfg)?;
    let target = Arc::new(ebof_mgmt::build::build_target(&cfg).map_err(anyhow::Error::msg)?);
    let auth = ebof_mgmt::security::auth_policy(&cfg).map_err(anyhow::Error::msg)?;
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
    let tls = ebof_mgmt::security::tls_acceptor(&cfg).map_err(anyhow::Error::msg)?;
    // The CDC first: the discovery service is central from the first host on.
    let cdc = match &cfg.cdc {
        Some(c) => Some(Arc::new(start_cdc(&target, &cfg, c)?)),
        None => None,
    };
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
    let t = &cfg.target;
    let tcp = TargetConnConfig {
        maxh2cdata: t.max_h2c_data,
        max_icd: t.io_inline_data.max(8192),
        c2h_max: t.c2h_data_max,
        max_ttags: 256,
        cpda: 0,
    };
    let is_tcp = |l: &&ebof_config::Listener| cfg.transport(l) == ebof_config::Transport::Tcp;
    let rdma = ebof_runtime::rdma::RdmaConfig {
        listeners: cfg
            .listeners
            .iter()
            .filter(|l| !is_tcp(l))
            .map(|l| l.socket_addr())
            .collect(),
        discovery: cfg
            .discovery
            .as_ref()
            .filter(|l| !is_tcp(l))
            .map(|l| l.socket_addr()),
    };
    let server_cfg = ServerConfig {
        listeners: cfg
            .listeners
            .iter()
            .filter(is_tcp)
            .map(|l| l.socket_addr())
            .collect(),
        discovery: cfg
            .discovery
            .as_ref()
            .filter(is_tcp)
            .map(|l| l.socket_addr()),
        rdma,
        cores: cores.clone(),
        tcp,
        poll: std::time::Duration::from_micros(a.poll_us),
        handshake_timeout: std::time::Duration::from_millis(t.handshake_timeout_ms.into()),
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
    };
    // The management API first: a socket conflict fails before any host can connect.
    let mgmt = start_management(&cfg, target.clone(), a.config.clone(), mgmt_token)?;
    let handle = match Server::start(target.clone(), server_cfg) {
        Ok(h) => h,
        Err(e) => {
            if let Some((m, _)) = mgmt {
                m.stop();
            }
            return Err(e.into());
        }
    };
    // Every listener in configuration order (the TCP ones as bound: port 0 resolved).
    let mut tcp_bound = handle.bound.iter();
    let bound: Vec<SocketAddr> = cfg
        .listeners
        .iter()
        .chain(cfg.discovery.iter())
        .filter_map(|l| {
            if cfg.transport(l) == ebof_config::Transport::Tcp {
                tcp_bound.next().copied()
            } else {
                Some(l.socket_addr())
            }
        })
        .collect();
    if let (Some((_, control)), Some(cdc)) = (&mgmt, &cdc) {
        control.attach_cdc(cdc.clone());
    }
    match &mgmt {
        Some((_, control)) => control.attach_server(handle.listener_control(), &bound),
        None => ebof_mgmt::build::settle_bound_ports(&mut cfg, &bound, &target),
    }
    // mDNS (TP 8009): best effort, NVMe is served whatever it says. With the management API
    // the control plane keeps it in step with listener and mode changes.
    let mdns = Arc::new(ebof_mgmt::mdns::Responder::new());
    match &mgmt {
        Some((_, control)) => control.attach_mdns(mdns.clone()),
        None => {
            mdns.apply_config(|| cfg.clone());
        }
    }
    let announcer = match &cfg.discovery_settings.cdc {
        Some(c) => Some(start_announcer(&cfg, c.socket_addr(), &handle.bound)?),
        None => None,
    };
    tracing::info!(
        listeners = %join(&bound),
        cores = %join(&cores),
        "ebof serve ready"
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        anyhow::Ok(())
    })?;
    tracing::info!("shutting down: flushing namespaces");
    if let Some((m, _)) = mgmt {
        m.stop();
    }
    // Goodbye packets before the listeners close, so hosts forget them first.
    mdns.shutdown();
    if let Some(a) = &announcer {
        a.stop();
    }
    if let Some(c) = &cdc {
        c.stop();
    }
    handle.stop();
    for s in target.subsystems().iter() {
        for n in &s.namespaces {
            if let Err(e) = n.backend.flush() {
                tracing::error!(subsystem = %s.nqn, nsid = n.nsid, error = %e, "flush at shutdown failed");
            }
        }
    }
    tracing::info!("stopped");
    Ok(())
}

/// Start the Central Discovery Controller of `[cdc]` on `target`.
fn start_cdc(
    target: &Arc<nvmf_target::Target>,
    cfg: &Config,
    c: &ebof_config::Cdc,
) -> Result<ebof_cdc::Cdc> {
    let members: Vec<SocketAddr> = c.members.iter().map(|m| m.socket_addr()).collect();
    let hostnqn = c.hostnqn.clone().unwrap_or_else(ebof_cdc::default_hostnqn);
    tracing::info!(
        members = %join(&members),
        %hostnqn,
        trusted = c.trusted.len(),
        "central discovery controller"
    );
    let mut cdc = ebof_cdc::CdcConfig::new(members, hostnqn);
    cdc.trusted = ebof_mgmt::cdc::trusted(&c.trusted);
    cdc.host_keys = ebof_mgmt::cdc::host_keys(cfg).map_err(|e| anyhow::anyhow!("{e}"))?;
    ebof_cdc::Cdc::start(target, cdc).context("central discovery controller")
}

/// Announce this box's discovery service to the CDC at `cdc` (`[discovery] cdc`): the bound
/// dedicated discovery listener if there is one (NVMe/TCP), else every NVMe/TCP listener.
fn start_announcer(
    cfg: &Config,
    cdc: SocketAddr,
    tcp_bound: &[SocketAddr],
) -> Result<ebof_cdc::Announcer> {
    let tcp_io = cfg
        .listeners
        .iter()
        .filter(|l| cfg.transport(l) == ebof_config::Transport::Tcp)
        .count();
    let addrs: Vec<SocketAddr> = match tcp_bound.get(tcp_io) {
        Some(d) => vec![*d],
        None => tcp_bound.to_vec(),
    };
    let Some(first) = addrs.first() else {
        bail!("[discovery] cdc: no NVMe/TCP discovery listener to announce");
    };
    let nqn = format!("nqn.2026-11.io.ebof:ddc:{first}");
    let name = std::fs::read_to_string("/etc/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "ebof".into());
    // A `[[hosts]]` DH-HMAC-CHAP key for the announcer's NQN authenticates it to the CDC
    // (which admits authenticated announcers, ADR 0025).
    let dhchap = ebof_mgmt::cdc::host_keys(cfg)
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .remove(&nqn);
    tracing::info!(%cdc, addresses = %join(&addrs), %nqn, authenticated = dhchap.is_some(), "announcing to the central discovery controller");
    ebof_cdc::Announcer::start(ebof_cdc::AnnounceConfig {
        cdc,
        nqn,
        addrs,
        name,
        backoff_max: std::time::Duration::from_secs(10),
        dhchap,
    })
    .context("announcing to the central discovery controller")
}

/// `ebof serve`: the bearer token of the management API on TCP, read and checked (owner-only,
/// not empty) before anything is opened or started, so a bad token file fails at once. `None`
/// when the API is not served on TCP.
pub fn management_token(cfg: &Config) -> Result<Option<Token>> {
    let m = &cfg.management;
    if m.disabled || m.listen.is_none() {
        return Ok(None);
    }
    let Some(path) = &m.token_file else {
        // Config::validate refuses `listen` without `token_file`; never serve without one.
        anyhow::bail!(
            "management.token_file: the management API on TCP requires a token file (--mgmt-token-file)"
        );
    };
    Ok(Some(ebof_mgmt::load_token_file(path)?))
}

/// `ebof serve`: bind the management socket and the metrics listener (before anything else is
/// started, so a conflict fails at once) and serve them on their own thread.
///
/// The default socket is a convenience, like the default discovery listener: when another
/// `ebof serve` holds it, serve without a management API and say so. A configured socket that
/// is in use is an error.
pub fn start_management(
    cfg: &Config,
    target: Arc<Target>,
    config_file: Option<PathBuf>,
    token: Option<Token>,
) -> Result<Option<(MgmtServer, Arc<ebof_mgmt::Control>)>> {
    let socket = if cfg.management.disabled {
        None
    } else {
        let (path, explicit) = match &cfg.management.socket {
            Some(p) => (p.clone(), true),
            None => (ebof_mgmt::default_socket_path(), false),
        };
        match ebof_mgmt::bind_socket(&path) {
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
            Err(e) => return Err(e).context("management API"),
        }
    };
    let metrics = match &cfg.metrics {
        Some(l) => Some(ebof_mgmt::bind_metrics(l.socket_addr())?),
        None => None,
    };
    let api_tcp = match (&cfg.management.listen, token) {
        (Some(l), Some(token)) if !cfg.management.disabled => {
            let api = ebof_mgmt::bind_api_tcp(l.socket_addr(), token)?;
            match (&cfg.management.tls_cert, &cfg.management.tls_key) {
                (Some(cert), Some(key)) => Some(api.with_tls(cert, key)?),
                _ => Some(api),
            }
        }
        _ => None,
    };
    let https = api_tcp.as_ref().is_some_and(|a| a.is_tls());
    if let Some(l) = &cfg.management.listen
        && api_tcp.is_some()
        && !https
        && !l.socket_addr().ip().is_loopback()
    {
        tracing::warn!(
            address = %l.socket_addr(),
            "the management API on TCP speaks plain HTTP: its token travels in clear \
             (set [management] tls_cert and tls_key for HTTPS)"
        );
    }
    if socket.is_none() && metrics.is_none() && api_tcp.is_none() {
        return Ok(None);
    }
    let path = socket.as_ref().map(|s| s.path().display().to_string());
    let control = Arc::new(ebof_mgmt::Control::new(
        target,
        cfg.clone(),
        config_file.map(|p| std::path::absolute(&p).unwrap_or(p)),
    ));
    let server = ebof_mgmt::start(control.clone(), socket, metrics, api_tcp)?;
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
    Ok(Some((server, control)))
}

pub(crate) fn init_tracing() {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("EBOF_LOG")
        .or_else(|_| EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let colour = colour_wanted(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    );
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(colour)
        .try_init();
}

/// Colour codes only on a terminal, and never when `NO_COLOR` is set to a non-empty value
/// (no-color.org): logs redirected to a file or a journal stay plain text.
fn colour_wanted(stderr_is_terminal: bool, no_color: Option<&OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|v| v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(colour_wanted(true, None));
        assert!(colour_wanted(true, Some(OsStr::new(""))));
        assert!(!colour_wanted(true, Some(OsStr::new("1"))));
        assert!(!colour_wanted(false, None));
        assert!(!colour_wanted(false, Some(OsStr::new(""))));
    }

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
        assert!(
            format!("{err:#}").starts_with(&format!("cannot listen on 127.0.0.1:{port}: ")),
            "{err:#}"
        );

        let mut cfg = config();
        cfg.listeners[0].port = port;
        cfg.discovery = None;
        assert!(
            check_listeners(&mut cfg, true).is_err(),
            "I/O listeners are never optional"
        );
    }
}
