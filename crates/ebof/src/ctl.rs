//! `ebof ctl`: the management API's command line (wiring: the client and the types are in
//! `ebof-mgmt`), and `ebof serve`'s start of the management server.

use anyhow::{Context, Result};
use ebof_config::{Config, format_size};
use ebof_mgmt::api::{State, Stats, SubsystemView};
use ebof_mgmt::{Client, ClientError, MgmtServer};
use nvmf_target::Target;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct CtlArgs {
    /// Management socket of the `ebof serve` to talk to (default: where `ebof serve` puts it,
    /// /run/ebof/ebof.sock for root, else $XDG_RUNTIME_DIR/ebof.sock).
    #[arg(long, short = 's', value_name = "PATH", global = true)]
    pub socket: Option<PathBuf>,
    /// Print JSON (the API's answer as is) instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub cmd: CtlCmd,
}

#[derive(clap::Subcommand, Debug)]
pub enum CtlCmd {
    /// Subsystems, namespaces, listeners, hosts and connected controllers.
    Show,
    /// Per-namespace command and byte counters, controllers and queues.
    Stats {
        /// Print again every second (until interrupted, or COUNT times with --count).
        #[arg(long)]
        watch: bool,
        /// With --watch: stop after this many refreshes.
        #[arg(long, value_name = "COUNT", requires = "watch")]
        count: Option<u32>,
    },
    /// The Prometheus exposition, as `GET /metrics` serves it.
    Metrics,
    /// Add or remove subsystems.
    Subsystem {
        #[command(subcommand)]
        cmd: SubsystemCmd,
    },
    /// Which hosts may connect to a subsystem.
    Host {
        #[command(subcommand)]
        cmd: HostCmd,
    },
    /// Tear a controller down (all its queues close; the host may reconnect if allowed).
    Disconnect {
        /// Controller id, as `ebof ctl show` lists it.
        cntlid: String,
    },
}

#[derive(clap::Subcommand, Debug)]
pub enum SubsystemCmd {
    /// Add subsystem NQN, with no namespaces (serial derived from the NQN unless given).
    Add {
        nqn: String,
        #[arg(long)]
        serial: Option<String>,
        #[arg(long)]
        model: Option<String>,
        /// Accept only hosts allowed with `ebof ctl host allow` (default: any host).
        #[arg(long)]
        no_allow_any_host: bool,
    },
    /// Remove subsystem NQN; its controllers are disconnected.
    Remove { nqn: String },
}

#[derive(clap::Subcommand, Debug)]
pub enum HostCmd {
    /// Allow HOSTNQN to connect to subsystem NQN.
    Allow { nqn: String, hostnqn: String },
    /// Remove HOSTNQN from the host list of NQN (connected controllers stay; see `disconnect`).
    Deny { nqn: String, hostnqn: String },
    /// Allow any host (on) or only the host list (off).
    AllowAny {
        nqn: String,
        #[arg(value_parser = ["on", "off"])]
        state: String,
    },
}

pub fn run(a: CtlArgs) -> Result<()> {
    let path = a.socket.unwrap_or_else(ebof_mgmt::default_socket_path);
    let c = Client::new(path);
    let json = a.json;
    match a.cmd {
        CtlCmd::Show => {
            let s = c.state().map_err(err)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&s)?);
            } else {
                print!("{}", show_text(&s));
            }
        }
        CtlCmd::Stats { watch, count } => {
            let rounds = if watch { count.unwrap_or(u32::MAX) } else { 1 };
            for i in 0..rounds {
                if i > 0 {
                    std::thread::sleep(Duration::from_secs(1));
                }
                let s = c.stats().map_err(err)?;
                if json {
                    println!("{}", serde_json::to_string(&s)?);
                } else {
                    if watch && rounds == u32::MAX {
                        // Clear the screen, as `watch` does.
                        print!("\x1b[H\x1b[2J");
                    }
                    print!("{}", stats_text(&s));
                }
            }
        }
        CtlCmd::Metrics => print!("{}", c.metrics().map_err(err)?),
        CtlCmd::Subsystem {
            cmd:
                SubsystemCmd::Add {
                    nqn,
                    serial,
                    model,
                    no_allow_any_host,
                },
        } => {
            let req = ebof_mgmt::api::SubsystemRequest {
                nqn,
                serial,
                model,
                allow_any_host: Some(!no_allow_any_host),
            };
            let s = c.add_subsystem(&req).map_err(err)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&s)?);
            } else {
                println!("subsystem {} added (serial {})", s.nqn, s.serial);
            }
        }
        CtlCmd::Subsystem {
            cmd: SubsystemCmd::Remove { nqn },
        } => {
            let r = c.remove_subsystem(&nqn).map_err(err)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                println!(
                    "subsystem {} removed ({} controller(s) disconnected)",
                    r.nqn,
                    r.disconnected.len()
                );
            }
        }
        CtlCmd::Host { cmd } => {
            let (s, what) = match cmd {
                HostCmd::Allow { nqn, hostnqn } => (
                    c.allow_host(&nqn, &hostnqn),
                    format!("{hostnqn} may connect to {nqn}"),
                ),
                HostCmd::Deny { nqn, hostnqn } => (
                    c.deny_host(&nqn, &hostnqn),
                    format!("{hostnqn} removed from the hosts of {nqn}"),
                ),
                HostCmd::AllowAny { nqn, state } => {
                    let on = state == "on";
                    let what = if on {
                        format!("{nqn} allows any host")
                    } else {
                        format!("{nqn} allows only its host list")
                    };
                    (c.set_allow_any_host(&nqn, on), what)
                }
            };
            let s: SubsystemView = s.map_err(err)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&s)?);
            } else {
                println!("{what}");
            }
        }
        CtlCmd::Disconnect { cntlid } => {
            let d = c.disconnect(&cntlid).map_err(err)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&d)?);
            } else {
                println!("controller {} ({}) disconnected", d.cntlid, d.hostnqn);
            }
        }
    }
    Ok(())
}

/// A client error as the CLI reports it (the API's message already says what and where).
fn err(e: ClientError) -> anyhow::Error {
    anyhow::anyhow!("{e}")
}

/// Columns padded to their widest cell, two spaces apart.
fn table(out: &mut String, indent: &str, rows: &[Vec<String>]) {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for r in rows {
        let mut line = indent.to_string();
        for (c, cell) in r.iter().enumerate() {
            if c + 1 == r.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<w$}  ", w = widths[c]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
}

fn row(cells: &[&str]) -> Vec<String> {
    cells.iter().map(|s| s.to_string()).collect()
}

pub fn show_text(s: &State) -> String {
    let mut out = String::new();
    for sub in &s.subsystems {
        let hosts = if sub.allow_any_host {
            "any".to_string()
        } else if sub.hosts.is_empty() {
            "none".to_string()
        } else {
            sub.hosts.join(", ")
        };
        out.push_str(&format!(
            "subsystem {}  serial {}  model {}\n  hosts: {hosts}\n",
            sub.nqn, sub.serial, sub.model
        ));
        let mut rows = vec![row(&["NSID", "BACKEND", "SIZE", "BLOCK", "UUID"])];
        for n in &sub.namespaces {
            rows.push(vec![
                n.nsid.to_string(),
                n.backend.clone(),
                format_size(n.size),
                n.block_size.to_string(),
                n.uuid.clone(),
            ]);
        }
        table(&mut out, "  ", &rows);
    }
    out.push_str("listeners\n");
    let mut rows = vec![row(&["ADDRESS", "PORTID"])];
    for l in &s.listeners {
        rows.push(vec![l.address.clone(), l.portid.to_string()]);
    }
    table(&mut out, "  ", &rows);
    if s.controllers.is_empty() {
        out.push_str("controllers: none connected\n");
    } else {
        out.push_str("controllers\n");
        let mut rows = vec![row(&[
            "CNTLID",
            "KIND",
            "SUBSYSTEM",
            "KATO",
            "IOQ",
            "HOSTNQN",
        ])];
        for c in &s.controllers {
            rows.push(vec![
                c.cntlid.to_string(),
                c.kind.clone(),
                c.subsystem.clone(),
                c.kato_ms
                    .map_or_else(|| "off".to_string(), |ms| format!("{ms}ms")),
                c.io_queues.to_string(),
                c.hostnqn.clone(),
            ]);
        }
        table(&mut out, "  ", &rows);
    }
    out
}

pub fn stats_text(s: &Stats) -> String {
    let mut out = String::new();
    let mut rows = vec![row(&[
        "SUBSYSTEM",
        "NSID",
        "READS",
        "WRITES",
        "READ",
        "WRITTEN",
        "ERRORS",
    ])];
    for n in &s.namespaces {
        rows.push(vec![
            n.subsystem.clone(),
            n.nsid.to_string(),
            n.read_commands.to_string(),
            n.write_commands.to_string(),
            format_size(n.bytes_read),
            format_size(n.bytes_written),
            n.media_errors.to_string(),
        ]);
    }
    table(&mut out, "", &rows);
    out.push_str(&format!(
        "controllers {}  io queues {}  keep-alive expiries {}  disconnects {}\n",
        s.controllers, s.io_queues, s.keep_alive_expiries, s.admin_disconnects
    ));
    out
}

/// `ebof serve`: bind the management socket and the metrics listener (before anything else is
/// started, so a conflict fails at once) and serve them on their own thread.
///
/// The default socket is a convenience, like the default discovery listener: when another
/// `ebof serve` holds it, serve without a management API and say so. A configured socket that
/// is in use is an error.
pub fn start_management(cfg: &Config, target: Arc<Target>) -> Result<Option<MgmtServer>> {
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
    if socket.is_none() && metrics.is_none() {
        return Ok(None);
    }
    let path = socket.as_ref().map(|s| s.path().display().to_string());
    let server = ebof_mgmt::start(target, &cfg.target.serial_prefix, socket, metrics)?;
    tracing::info!(
        socket = path.as_deref().unwrap_or("none"),
        metrics = %server
            .metrics_addr
            .map_or_else(|| "none".to_string(), |a| format!("http://{a}/metrics")),
        "management API"
    );
    Ok(Some(server))
}
