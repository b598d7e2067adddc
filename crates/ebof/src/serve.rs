//! `ebof serve`: load configuration, open backends, start the reactors, log what is served.

use anyhow::{Result, bail};
use ebof_backend::BackendSpec;
use ebof_config::{BackendChoice, Config, Overrides};
use ebof_runtime::{Server, ServerConfig, affinity};
use nvmf_target::{ListenerInfo, Namespace, Subsystem, Target, TargetLimits};
use nvmf_tcp::TargetConnConfig;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

/// Largest transfer (MDTS) we advertise.
const MAX_TRANSFER: u32 = 128 * 1024;

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// TOML configuration file (without it: the embedded default, a 1 GiB RAM namespace on
    /// 127.0.0.1:4420).
    #[arg(long, short = 'c', value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Listen on ADDR:PORT (repeatable; replaces the configured listeners).
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
    /// Print the effective configuration as TOML and exit.
    #[arg(long)]
    pub print_config: bool,
}

/// Build the effective configuration from file/default plus overrides.
pub fn effective_config(a: &ServeArgs) -> Result<Config> {
    let mut cfg = match &a.config {
        Some(p) => Config::load(p).map_err(|e| anyhow::anyhow!("{e}"))?,
        None => Config::embedded_default(),
    };
    let o = Overrides {
        listen: a.listen.clone(),
        discovery_listen: a.discovery_listen.clone(),
        ram: a.ram.clone(),
        file: a.file.clone(),
        nqn: a.nqn.clone(),
        cores: a.cores.clone(),
    };
    cfg.apply_overrides(&o)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(cfg)
}

fn backend_spec(b: &BackendChoice) -> BackendSpec {
    match b {
        BackendChoice::Ram { size } => BackendSpec::Ram { size: *size },
        // A file named without a size is used at its current size, or created with the
        // default size when missing.
        BackendChoice::File { path, size } => BackendSpec::File {
            path: path.clone(),
            size: size.or_else(|| (!path.exists()).then_some(ebof_config::DEFAULT_FILE_SIZE)),
        },
        BackendChoice::Block { path } => BackendSpec::Block { path: path.clone() },
    }
}

/// Open every backend and build the target model. Nothing is started on failure.
pub fn build_target(cfg: &Config) -> Result<Target> {
    let mut subsystems = Vec::new();
    for (si, s) in cfg.subsystems.iter().enumerate() {
        let mut namespaces = Vec::new();
        for (ni, n) in s.namespaces.iter().enumerate() {
            let backend = ebof_backend::open(&backend_spec(&n.backend)).map_err(|e| {
                anyhow::anyhow!(
                    "subsystems[{si}].namespaces[{ni}] (nsid {}): cannot open backend: {e}",
                    n.nsid
                )
            })?;
            if backend.size() % u64::from(n.block_size) != 0 || backend.size() == 0 {
                bail!(
                    "subsystems[{si}].namespaces[{ni}]: backend size {} is not a positive multiple of block_size {}",
                    backend.size(),
                    n.block_size
                );
            }
            namespaces.push(Arc::new(Namespace::new(
                n.nsid,
                backend,
                n.block_size,
                n.uuid,
            )));
        }
        subsystems.push(Subsystem {
            nqn: s.nqn.clone(),
            serial: s.serial.clone(),
            model: s.model.clone(),
            allow_any_host: s.allow_any_host,
            hosts: s.hosts.clone(),
            namespaces,
        });
    }
    let listeners = cfg
        .listeners
        .iter()
        .enumerate()
        .map(|(i, l)| ListenerInfo {
            addr: l.socket_addr(),
            portid: (i + 1) as u16,
        })
        .collect();
    let t = &cfg.target;
    let limits = TargetLimits {
        io_inline_data: t.io_inline_data,
        max_io_queues: t.max_io_queues,
        max_queue_size: t.max_queue_size,
        max_transfer: MAX_TRANSFER,
    };
    Ok(Target::new(subsystems, listeners, limits, Instant::now()))
}

pub fn run(a: ServeArgs) -> Result<()> {
    init_tracing();
    let cfg = effective_config(&a)?;
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
    let target = Arc::new(build_target(&cfg)?);
    for s in target.subsystems.iter() {
        tracing::info!(
            nqn = %s.nqn,
            serial = %s.serial,
            allow_any_host = s.allow_any_host,
            hosts = ?s.hosts,
            "subsystem"
        );
        for n in &s.namespaces {
            tracing::info!(
                subsystem = %s.nqn,
                nsid = n.nsid,
                backend = ?n.backend.kind(),
                bytes = n.backend.size(),
                block_size = n.block_size,
                "namespace"
            );
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
    let server_cfg = ServerConfig {
        listeners: cfg.listeners.iter().map(|l| l.socket_addr()).collect(),
        discovery: cfg.discovery.as_ref().map(|l| l.socket_addr()),
        cores: cores.clone(),
        tcp,
        poll: std::time::Duration::from_micros(a.poll_us),
    };
    let handle = Server::start(target.clone(), server_cfg)?;
    tracing::info!(cores = ?cores, listeners = ?handle.bound, "ebof serve ready");
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
    handle.stop();
    for s in target.subsystems.iter() {
        for n in &s.namespaces {
            if let Err(e) = n.backend.flush() {
                tracing::error!(subsystem = %s.nqn, nsid = n.nsid, error = %e, "flush at shutdown failed");
            }
        }
    }
    tracing::info!("stopped");
    Ok(())
}

fn init_tracing() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("EBOF_LOG")
        .or_else(|_| EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
