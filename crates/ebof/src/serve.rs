//! `ebof serve`: flags → configuration → [`Node::start`] (the box, `ebof-mgmt`: checks,
//! target, servers, control plane, services) → "ready" → wait for SIGINT/SIGTERM →
//! [`Node::stop`].

use anyhow::Result;
use ebof_config::{Config, Overrides};
use ebof_mgmt::{Node, NodeOptions};
use std::ffi::OsStr;
use std::path::PathBuf;

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
        let l = ebof_config::parse_listener(m, ebof_fleet::DEFAULT_MEMBER_PORT)
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
    let cfg = effective_config(&a)?;
    if a.print_config {
        print!("{}", cfg.to_toml_string());
        return Ok(());
    }
    let opts = NodeOptions {
        config_file: a.config.clone(),
        // The embedded default's discovery listener is a convenience: serve without it when
        // its port is taken.
        optional_discovery: a.config.is_none() && a.discovery_listen.is_none(),
        poll: std::time::Duration::from_micros(a.poll_us),
    };
    let node = Node::start(cfg, opts)?;
    tracing::info!(
        listeners = %join(node.listeners()),
        cores = %join(node.cores()),
        "ebof serve ready"
    );
    wait_for_signal()?;
    tracing::info!("shutting down: flushing namespaces");
    node.stop();
    tracing::info!("stopped");
    Ok(())
}

/// Until SIGINT or SIGTERM.
fn wait_for_signal() -> Result<()> {
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
    })
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
}
