//! `ebof ctl`: the management API's command line (wiring: the client and the types are in
//! `ebof-mgmt`), and `ebof serve`'s start of the management server.

use anyhow::{Context, Result};
use ebof_config::{Config, format_size};
use ebof_mgmt::api::{State, Stats, SubsystemView};
use ebof_mgmt::{Client, ClientError, MgmtServer, Token};
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
    /// Talk to the management API on TCP instead (`ebof serve --mgmt-listen ADDR:PORT`), with
    /// the bearer token of --token-file or $EBOF_TOKEN: `https://HOST:PORT` when the server
    /// has `[management] tls_cert`/`tls_key`, else `ADDR:PORT` (plain HTTP: loopback only,
    /// unless --insecure-http).
    #[arg(
        long,
        value_name = "[https://]HOST:PORT",
        global = true,
        conflicts_with = "socket"
    )]
    pub api: Option<String>,
    /// File holding the bearer token for --api (else $EBOF_TOKEN).
    #[arg(long, value_name = "PATH", global = true, requires = "api")]
    pub token_file: Option<PathBuf>,
    /// CA certificates (PEM) that sign the server's certificate, for `--api https://…` (else
    /// the system's).
    #[arg(long, value_name = "PATH", global = true, requires = "api")]
    pub ca_file: Option<PathBuf>,
    /// Send the token over plain HTTP to an address that is not loopback (anyone on the path
    /// can read it; else $EBOF_ALLOW_PLAIN_HTTP=1). Use HTTPS instead where you can.
    #[arg(long, global = true, requires = "api")]
    pub insecure_http: bool,
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
    /// Add, remove or resize namespaces of a running subsystem (connected hosts see the change
    /// without reconnecting).
    Ns {
        #[command(subcommand)]
        cmd: NsCmd,
    },
    /// Add or remove listeners (existing connections stay when their listener goes).
    Listener {
        #[command(subcommand)]
        cmd: ListenerCmd,
    },
    /// Asymmetric Namespace Access: the state of an ANA group on a listener (multipath hosts
    /// use the optimized paths, and retry elsewhere when a path is inaccessible).
    Ana {
        #[command(subcommand)]
        cmd: AnaCmd,
    },
    /// mDNS (TP 8009): show what is published, or publish every discovery listener (on),
    /// none (off), or every one not on a loopback address (auto, the default). Saved as
    /// `[discovery] mdns` by `ebof ctl save`.
    Mdns {
        #[arg(value_parser = ["on", "off", "auto"])]
        mode: Option<String>,
    },
    /// Referrals: other discovery services the discovery log points hosts to (SUBTYPE 1
    /// entries; persistent discovery connections get a Discovery Log Page Change event).
    Referral {
        #[command(subcommand)]
        cmd: ReferralCmd,
    },
    /// Discovery Information Management: what hosts registered (`nvme dim`, nvme-stas).
    Dim {
        #[command(subcommand)]
        cmd: DimCmd,
    },
    /// Write the running configuration as TOML (default: the file `ebof serve` was started
    /// with), atomically; a restart with it serves the same.
    Save {
        /// Where to write.
        file: Option<PathBuf>,
    },
    /// Central Discovery Controller (a box with `[cdc]`): its members, the discovery services
    /// whose subsystems it shows each host.
    Cdc {
        #[command(subcommand)]
        cmd: CdcCmd,
    },
    /// Snapshots of file namespaces (take one with `ebof ctl ns snapshot`, clone one with
    /// `ebof ctl ns add NQN --from-snapshot NAME`).
    Snapshot {
        #[command(subcommand)]
        cmd: SnapshotCmd,
    },
    /// Storage pools (`[[pools]]`): directories namespaces are made in with
    /// `ebof ctl ns add NQN --pool NAME --size SIZE`.
    Pool {
        #[command(subcommand)]
        cmd: PoolCmd,
    },
}

#[derive(clap::Subcommand, Debug)]
pub enum PoolCmd {
    /// Every pool: directory, capacity, provisioned, used, free, namespaces.
    List,
}

#[derive(clap::Subcommand, Debug)]
pub enum SnapshotCmd {
    /// Every snapshot: name, origin, size, block size, when, how (reflink or copy), file.
    List,
    /// Delete snapshot NAME (its file and manifest; clones made from it stay).
    Delete { name: String },
}

#[derive(clap::Subcommand, Debug)]
pub enum CdcCmd {
    /// The members: connected or not, last error, entries, last change.
    List,
    /// Add the discovery service at ADDR[:PORT] (port 8009 by default) as a member.
    Add { address: String },
    /// Remove member ADDR[:PORT]: its subsystems leave every host's view.
    Remove { address: String },
    /// Who may announce itself by DIM (`[cdc] trusted`: source addresses and host NQNs)
    /// besides the configured members and DH-HMAC-CHAP authenticated discovery connections.
    /// Without arguments: print it; with ENTRY…: replace it (saved with the configuration).
    Trusted {
        /// IP addresses and NQNs; replaces the list.
        #[arg(value_name = "ENTRY")]
        entries: Vec<String>,
        /// Empty the list: only configured members and authenticated connections announce.
        #[arg(long, conflicts_with = "entries")]
        clear: bool,
    },
}

#[derive(clap::Subcommand, Debug)]
pub enum NsCmd {
    /// Add a namespace to subsystem NQN: RAM, a file (created if missing) or a block device.
    Add {
        nqn: String,
        /// Volatile RAM namespace of SIZE (e.g. 4G).
        #[arg(long, value_name = "SIZE", group = "backend")]
        ram: Option<String>,
        /// File namespace (created with --size, or 1G, if missing).
        #[arg(long, value_name = "PATH", group = "backend")]
        file: Option<PathBuf>,
        /// Block device namespace.
        #[arg(long, value_name = "DEV", group = "backend")]
        block: Option<PathBuf>,
        /// A file namespace in storage pool NAME, with --size (the box names the file, and
        /// deletes it when the namespace is removed); with --from-snapshot, the clone's file
        /// is made in the pool.
        #[arg(long, value_name = "NAME", conflicts_with_all = ["ram", "file", "block"])]
        pool: Option<String>,
        /// Size of a --file namespace (created or extended to it, never truncated) or of a
        /// --pool one (required).
        #[arg(long, value_name = "SIZE")]
        size: Option<String>,
        /// Namespace ID (default: the lowest free one).
        #[arg(long)]
        nsid: Option<u32>,
        /// Logical block size.
        #[arg(long, value_parser = ["512", "4096"])]
        block_size: Option<String>,
        /// Namespace UUID (default: derived from NQN and NSID).
        #[arg(long)]
        uuid: Option<String>,
        /// Bypass the page cache (O_DIRECT) for a file or block namespace.
        #[arg(long)]
        direct: bool,
        /// ANA group, 1 to 32 (default 1).
        #[arg(long, value_name = "GROUP")]
        ana_group: Option<u32>,
        /// Only this host sees the namespace (repeat for more hosts; default: every host the
        /// subsystem admits). No other host ever sees it, not even briefly.
        #[arg(long = "host", value_name = "HOSTNQN")]
        hosts: Vec<String>,
        /// A writable clone of snapshot NAME (a new file, reflinked where the file system
        /// can; --file says where, default beside the snapshot's directory; never an
        /// existing file).
        #[arg(
            long,
            value_name = "NAME",
            conflicts_with_all = ["ram", "block", "size", "block_size", "direct"]
        )]
        from_snapshot: Option<String>,
    },
    /// Restrict namespace NSID of NQN to exactly the hosts HOSTNQN… (none: hidden from every
    /// host). Hosts that lose or gain it get a Namespace Attribute Changed event.
    Mask {
        nqn: String,
        nsid: String,
        hostnqns: Vec<String>,
    },
    /// Make namespace NSID of NQN visible to every host the subsystem admits again.
    Unmask { nqn: String, nsid: String },
    /// Let HOSTNQN see masked namespace NSID of NQN too.
    Attach {
        nqn: String,
        nsid: String,
        hostnqn: String,
    },
    /// Hide masked namespace NSID of NQN from HOSTNQN (its I/O there fails with Invalid
    /// Namespace, as for a namespace that does not exist).
    Detach {
        nqn: String,
        nsid: String,
        hostnqn: String,
    },
    /// Remove namespace NSID of NQN (commands in flight on it fail with Invalid Namespace).
    Remove { nqn: String, nsid: String },
    /// Change the size of namespace NSID of NQN while it serves.
    Resize {
        nqn: String,
        nsid: String,
        /// New size (e.g. 8G).
        size: String,
        /// Allow making it smaller (the data past the new end is discarded).
        #[arg(long)]
        shrink: bool,
    },
    /// Set the QoS limits of namespace NSID of NQN, live, for the namespace as a whole (every
    /// queue, core and host). The limits given replace the whole set: a limit not given is
    /// unlimited, 0 is unlimited, and no limit at all (or --clear) removes QoS. Commands over
    /// a limit wait in the target; none fails. MB are 10^6 bytes.
    Qos {
        nqn: String,
        nsid: String,
        /// Commands per second, reads and writes together.
        #[arg(long, value_name = "N", allow_negative_numbers = true)]
        iops: Option<i64>,
        /// MB/s, reads and writes together.
        #[arg(long, value_name = "N", allow_negative_numbers = true)]
        mbps: Option<i64>,
        /// Read commands per second.
        #[arg(long, value_name = "N", allow_negative_numbers = true)]
        read_iops: Option<i64>,
        /// Write commands per second.
        #[arg(long, value_name = "N", allow_negative_numbers = true)]
        write_iops: Option<i64>,
        /// MB/s read.
        #[arg(long, value_name = "N", allow_negative_numbers = true)]
        read_mbps: Option<i64>,
        /// MB/s written.
        #[arg(long, value_name = "N", allow_negative_numbers = true)]
        write_mbps: Option<i64>,
        /// Remove every limit.
        #[arg(long, conflicts_with_all = ["iops", "mbps", "read_iops", "write_iops", "read_mbps", "write_mbps"])]
        clear: bool,
    },
    /// Take snapshot NAME of file namespace NSID of NQN: a crash-consistent point-in-time copy
    /// (every command acknowledged before is in it), by reflink where the file system can
    /// (XFS reflink=1, btrfs), else by a copy during which writes wait.
    Snapshot {
        nqn: String,
        nsid: String,
        /// Unique in the target: A-Z a-z 0-9 . _ -, a letter or digit first, at most 64.
        name: String,
    },
}

#[derive(clap::Subcommand, Debug)]
pub enum ListenerCmd {
    /// Listen on ADDR:PORT (NVMe/TCP; with --discovery the dedicated discovery listener).
    Add {
        address: String,
        #[arg(long)]
        discovery: bool,
    },
    /// Stop listening on ADDR:PORT (hosts connected through it stay unless --disconnect).
    Remove {
        address: String,
        /// Also disconnect the controllers whose hosts came in through this listener.
        #[arg(long)]
        disconnect: bool,
    },
}

#[derive(clap::Subcommand, Debug)]
pub enum ReferralCmd {
    /// Refer hosts to the discovery service at ADDR[:PORT] (port 8009 by default).
    Add { address: String },
    /// Stop referring hosts to ADDR[:PORT].
    Remove { address: String },
    /// The referrals served.
    List,
}

#[derive(clap::Subcommand, Debug)]
pub enum DimCmd {
    /// The registrations hosts made with DIM (they last until the host deregisters or ebof
    /// restarts).
    List,
}

#[derive(clap::Subcommand, Debug)]
pub enum AnaCmd {
    /// Set the state of ANA group GROUP on listener ADDR:PORT; hosts connected through it get
    /// an ANA Change event and re-read the ANA log.
    Set {
        /// The NVMe listener (the path), as `ebof ctl show` lists it.
        #[arg(long, value_name = "ADDR:PORT")]
        listener: String,
        /// ANA group, 1 to 32 (namespaces are in group 1 unless configured otherwise).
        #[arg(long, default_value_t = 1)]
        group: u32,
        #[arg(long, value_parser = ["optimized", "non-optimized", "inaccessible", "persistent-loss", "change"])]
        state: String,
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

/// The environment variable `ebof ctl --api` takes the token from without --token-file.
pub const TOKEN_ENV: &str = "EBOF_TOKEN";
/// `EBOF_ALLOW_PLAIN_HTTP=1`: what `ebof ctl --insecure-http` says.
pub const PLAIN_HTTP_ENV: &str = "EBOF_ALLOW_PLAIN_HTTP";

/// The client `ebof ctl` talks through: TCP with a token (`--api`), else the Unix socket.
fn client(a: &CtlArgs) -> Result<Client> {
    let Some(addr) = &a.api else {
        let path = a
            .socket
            .clone()
            .unwrap_or_else(ebof_mgmt::default_socket_path);
        return Ok(Client::new(path));
    };
    let token = match &a.token_file {
        Some(p) => Some(ebof_mgmt::read_token_file(p)?),
        None => match std::env::var(TOKEN_ENV) {
            Ok(t) => Some(Token::new(&t).map_err(|e| anyhow::anyhow!("{TOKEN_ENV}: {e}"))?),
            Err(std::env::VarError::NotPresent) => None,
            Err(std::env::VarError::NotUnicode(_)) => {
                anyhow::bail!("{TOKEN_ENV}: the token must be printable ASCII")
            }
        },
    };
    let plain = a.insecure_http || std::env::var_os(PLAIN_HTTP_ENV).is_some_and(|v| v == "1");
    Ok(Client::api(addr, a.ca_file.as_deref(), token)
        .map_err(err)?
        .allow_plain_http(plain))
}

pub fn run(a: CtlArgs) -> Result<()> {
    let c = client(&a)?;
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
        CtlCmd::Ns { cmd } => ns(&c, json, cmd)?,
        CtlCmd::Pool { cmd: PoolCmd::List } => {
            let l = c.pools().map_err(err)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&l)?);
            } else {
                print!("{}", pools_text(&l));
            }
        }
        CtlCmd::Snapshot {
            cmd: SnapshotCmd::List,
        } => {
            let l = c.snapshots().map_err(err)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&l)?);
            } else {
                print!("{}", snapshots_text(&l));
            }
        }
        CtlCmd::Snapshot {
            cmd: SnapshotCmd::Delete { name },
        } => {
            let r = c.delete_snapshot(&name).map_err(err)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                println!("snapshot {} deleted ({} removed)", r.name, r.path);
            }
        }
        CtlCmd::Listener { cmd } => {
            let kind = |l: &ebof_mgmt::api::ListenerView| {
                if l.discovery { "discovery" } else { "NVMe/TCP" }
            };
            match cmd {
                ListenerCmd::Add { address, discovery } => {
                    let l = c
                        .add_listener(&ebof_mgmt::api::ListenerRequest { address, discovery })
                        .map_err(err)?;
                    if json {
                        println!("{}", serde_json::to_string_pretty(&l)?);
                    } else {
                        println!("listening on {} ({})", l.address, kind(&l));
                    }
                }
                ListenerCmd::Remove {
                    address,
                    disconnect,
                } => {
                    let r = c.remove_listener(&address, disconnect).map_err(err)?;
                    if json {
                        println!("{}", serde_json::to_string_pretty(&r)?);
                    } else {
                        println!(
                            "stopped listening on {} ({}); {} controller(s) disconnected",
                            r.listener.address,
                            kind(&r.listener),
                            r.disconnected.len()
                        );
                    }
                }
            }
        }
        CtlCmd::Ana {
            cmd:
                AnaCmd::Set {
                    listener,
                    group,
                    state,
                },
        } => {
            let req = ebof_mgmt::api::AnaRequest {
                listener,
                group,
                state,
            };
            let r = c.set_ana(&req).map_err(err)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                println!(
                    "ANA group {} on {} is {}{} (change count {})",
                    r.ana.group,
                    r.ana.listener,
                    r.ana.state,
                    if r.changed { "" } else { " already" },
                    r.change_count
                );
            }
        }
        CtlCmd::Mdns { mode } => {
            let v = match mode {
                Some(mode) => c
                    .set_mdns(&ebof_mgmt::api::MdnsRequest { mode })
                    .map_err(err)?,
                None => c.mdns().map_err(err)?,
            };
            if json {
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                print!("{}", mdns_text(&v));
            }
        }
        CtlCmd::Referral { cmd } => {
            let r = match cmd {
                ReferralCmd::Add { address } => c.add_referral(&address),
                ReferralCmd::Remove { address } => c.remove_referral(&address),
                ReferralCmd::List => c.referrals(),
            }
            .map_err(err)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                print!("{}", referrals_text(&r.referrals));
                if r.changed {
                    println!("discovery log generation {}", r.genctr);
                }
            }
        }
        CtlCmd::Dim { cmd: DimCmd::List } => {
            let r = c.registrations().map_err(err)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                print!("{}", registrations_text(&r));
            }
        }
        CtlCmd::Save { file } => {
            let req = ebof_mgmt::api::SaveRequest {
                path: file.map(|f| absolute(&f).display().to_string()),
            };
            let r = c.save(&req).map_err(err)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                println!(
                    "running configuration saved to {} ({} bytes)",
                    r.path, r.bytes
                );
            }
        }
        CtlCmd::Cdc { cmd } => match cmd {
            CdcCmd::List => {
                let v = c.cdc().map_err(err)?;
                if json {
                    println!("{}", serde_json::to_string_pretty(&v)?);
                } else {
                    print!("{}", cdc_text(&v));
                }
            }
            CdcCmd::Add { address } => {
                let m = c.add_cdc_member(&address).map_err(err)?;
                if json {
                    println!("{}", serde_json::to_string_pretty(&m)?);
                } else {
                    println!("{} is a member", m.address);
                }
            }
            CdcCmd::Trusted { entries, clear } => {
                let v = if clear || !entries.is_empty() {
                    c.set_cdc_trusted(&entries).map_err(err)?
                } else {
                    c.cdc_trusted().map_err(err)?
                };
                if json {
                    println!("{}", serde_json::to_string_pretty(&v)?);
                } else if v.trusted.is_empty() {
                    println!(
                        "trusted: nobody (configured members and authenticated connections only)"
                    );
                } else {
                    for t in &v.trusted {
                        println!("{t}");
                    }
                }
            }
            CdcCmd::Remove { address } => {
                let v = c.remove_cdc_member(&address).map_err(err)?;
                if json {
                    println!("{}", serde_json::to_string_pretty(&v)?);
                } else {
                    println!("{address} is no longer a member ({} left)", v.members.len());
                }
            }
        },
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

/// `ebof ctl ns …`.
fn ns(c: &Client, json: bool, cmd: NsCmd) -> Result<()> {
    let size = |s: &str, what: &str| -> Result<u64> {
        ebof_config::parse_size(s).map_err(|e| anyhow::anyhow!("{what}: {}", e.message))
    };
    match cmd {
        NsCmd::Add {
            nqn,
            ram,
            file,
            block,
            size: file_size,
            nsid,
            block_size,
            uuid,
            direct,
            ana_group,
            hosts,
            from_snapshot,
            pool,
        } => {
            if file_size.is_some() && file.is_none() && pool.is_none() {
                anyhow::bail!("--size goes with --file PATH or --pool NAME");
            }
            if let Some(name) = from_snapshot {
                let req = ebof_mgmt::api::CloneRequest {
                    subsystem: nqn,
                    nsid,
                    path: file.map(|f| absolute(&f).display().to_string()),
                    uuid,
                    ana_group,
                    hosts: (!hosts.is_empty()).then_some(hosts),
                    pool,
                };
                let r = c.clone_snapshot(&name, &req).map_err(err)?;
                if json {
                    println!("{}", serde_json::to_string_pretty(&r)?);
                } else {
                    println!(
                        "namespace {} added to {} from snapshot {} ({}, {} in {:.3} s, file {})",
                        r.added.namespace.nsid,
                        r.added.subsystem,
                        r.snapshot,
                        format_size(r.added.namespace.size),
                        r.method,
                        r.duration_us as f64 / 1e6,
                        r.added.namespace.path.clone().unwrap_or_default()
                    );
                }
                return Ok(());
            }
            let mut req = ebof_mgmt::api::NamespaceRequest {
                ana_group,
                hosts: (!hosts.is_empty()).then_some(hosts),
                nsid,
                block_size: block_size.and_then(|b| b.parse().ok()),
                uuid,
                direct: direct.then_some(true),
                ..Default::default()
            };
            match (ram, file, block) {
                (None, None, None) if pool.is_some() => {
                    req.backend = "file".into();
                    req.pool = pool;
                    req.size = Some(size(
                        file_size.as_deref().ok_or_else(|| {
                            anyhow::anyhow!("--pool needs --size SIZE (e.g. 10G)")
                        })?,
                        "--size",
                    )?);
                }
                (Some(r), None, None) => {
                    req.backend = "ram".into();
                    req.size = Some(size(&r, "--ram")?);
                }
                (None, Some(f), None) => {
                    req.backend = "file".into();
                    req.path = Some(absolute(&f).display().to_string());
                    req.size = file_size.map(|s| size(&s, "--size")).transpose()?;
                }
                (None, None, Some(b)) => {
                    req.backend = "block".into();
                    req.path = Some(absolute(&b).display().to_string());
                }
                _ => anyhow::bail!(
                    "say what backs the namespace: --ram SIZE, --file PATH, --block DEV, --pool NAME or --from-snapshot NAME"
                ),
            }
            let in_pool = req.pool.clone();
            let r = c.add_namespace(&nqn, &req).map_err(err)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                println!(
                    "namespace {} added to {} ({} {}, {} B blocks{})",
                    r.namespace.nsid,
                    r.subsystem,
                    r.namespace.backend,
                    format_size(r.namespace.size),
                    r.namespace.block_size,
                    match in_pool {
                        Some(p) => format!(
                            ", pool {p}, file {}",
                            r.namespace.path.clone().unwrap_or_default()
                        ),
                        None => String::new(),
                    }
                );
            }
        }
        NsCmd::Mask {
            nqn,
            nsid,
            hostnqns,
        } => {
            let r = c.set_namespace_hosts(&nqn, &nsid, &hostnqns).map_err(err)?;
            print_ns_hosts(json, &r)?;
        }
        NsCmd::Unmask { nqn, nsid } => {
            let r = c.unmask_namespace(&nqn, &nsid).map_err(err)?;
            print_ns_hosts(json, &r)?;
        }
        NsCmd::Attach { nqn, nsid, hostnqn } => {
            let r = c
                .attach_namespace_host(&nqn, &nsid, &hostnqn)
                .map_err(err)?;
            print_ns_hosts(json, &r)?;
        }
        NsCmd::Detach { nqn, nsid, hostnqn } => {
            let r = c
                .detach_namespace_host(&nqn, &nsid, &hostnqn)
                .map_err(err)?;
            print_ns_hosts(json, &r)?;
        }
        NsCmd::Remove { nqn, nsid } => {
            let r = c.remove_namespace(&nqn, &nsid).map_err(err)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                println!("namespace {} removed from {}", r.nsid, r.subsystem);
            }
        }
        NsCmd::Snapshot { nqn, nsid, name } => {
            let v = c.snapshot_namespace(&nqn, &nsid, &name).map_err(err)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                println!(
                    "snapshot {} of namespace {} of {} taken ({}, {}: I/O held {:.3} ms, {:.3} s \
                     in all) in {}",
                    v.name,
                    v.origin.nsid,
                    v.origin.subsystem,
                    format_size(v.size),
                    v.method,
                    v.pause_us as f64 / 1e3,
                    v.duration_us as f64 / 1e6,
                    v.path
                );
            }
        }
        NsCmd::Resize {
            nqn,
            nsid,
            size: new,
            shrink,
        } => {
            let req = ebof_mgmt::api::ResizeRequest {
                size: size(&new, "SIZE")?,
                shrink,
            };
            let r = c.resize_namespace(&nqn, &nsid, &req).map_err(err)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                println!(
                    "namespace {} of {} is now {}",
                    r.namespace.nsid,
                    r.subsystem,
                    format_size(r.namespace.size)
                );
            }
        }
        NsCmd::Qos {
            nqn,
            nsid,
            iops,
            mbps,
            read_iops,
            write_iops,
            read_mbps,
            write_mbps,
            clear,
        } => {
            let req = ebof_mgmt::api::QosRequest {
                iops,
                mbps,
                read_iops,
                write_iops,
                read_mbps,
                write_mbps,
            };
            let r = if clear {
                c.clear_namespace_qos(&nqn, &nsid).map_err(err)?
            } else {
                c.set_namespace_qos(&nqn, &nsid, &req).map_err(err)?
            };
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                println!(
                    "namespace {} of {}: QoS {}",
                    r.namespace.nsid,
                    r.subsystem,
                    qos_text(r.namespace.qos.as_ref())
                );
            }
        }
    }
    Ok(())
}

/// A namespace's QoS limits as `ebof ctl show` and `ebof ctl ns qos` print them.
fn qos_text(q: Option<&ebof_mgmt::api::QosView>) -> String {
    let Some(q) = q else {
        return "unlimited".to_string();
    };
    let set: Vec<String> = [
        ("iops", q.iops),
        ("mbps", q.mbps),
        ("read_iops", q.read_iops),
        ("write_iops", q.write_iops),
        ("read_mbps", q.read_mbps),
        ("write_mbps", q.write_mbps),
    ]
    .iter()
    .filter(|(_, v)| *v > 0)
    .map(|(k, v)| format!("{k} {v}"))
    .collect();
    let limits = if set.is_empty() {
        "unlimited".to_string()
    } else {
        set.join(", ")
    };
    if q.waited == 0 {
        return limits;
    }
    format!(
        "{limits} ({} commands waited, {:.3} s in all)",
        q.waited,
        q.wait_us as f64 / 1e6
    )
}

/// Who sees a namespace after a masking change, as `ebof ctl ns mask/unmask/attach/detach`
/// report it.
fn print_ns_hosts(json: bool, r: &ebof_mgmt::api::NamespaceChanged) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(r)?);
    } else {
        println!(
            "namespace {} of {} is visible to {}",
            r.namespace.nsid,
            r.subsystem,
            ns_hosts_text(r.namespace.hosts.as_deref())
        );
    }
    Ok(())
}

/// A namespace's host list in words.
fn ns_hosts_text(hosts: Option<&[String]>) -> String {
    match hosts {
        None => "every host of the subsystem".to_string(),
        Some([]) => "no host".to_string(),
        Some(h) => h.join(", "),
    }
}

/// Paths are resolved by the server, whose working directory may differ: send them absolute.
fn absolute(p: &std::path::Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
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

/// The USED column: what a thin namespace holds, with its share of the size (`-` for a
/// namespace that is not thin: it always holds its whole size).
fn used_text(n: &ebof_mgmt::api::NamespaceView) -> String {
    if !n.thin {
        return "-".into();
    }
    let pct = if n.size == 0 {
        0.0
    } else {
        n.allocated_bytes.min(n.size) as f64 * 100.0 / n.size as f64
    };
    format!("{} ({pct:.0}%)", approx_size(n.allocated_bytes))
}

/// `bytes` to three significant figures with a binary suffix (`33.5M`, `912K`, `0`): for
/// figures that are not configured sizes (allocation, free space).
fn approx_size(bytes: u64) -> String {
    // A round figure as the configuration writes it (`1G`, `256M`), else rounded.
    let exact = format_size(bytes);
    if exact.len() <= 5 {
        return exact;
    }
    const UNITS: [&str; 7] = ["", "K", "M", "G", "T", "P", "E"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        bytes.to_string()
    } else if v < 10.0 {
        format!("{v:.2}{}", UNITS[u])
    } else if v < 100.0 {
        format!("{v:.1}{}", UNITS[u])
    } else {
        format!("{v:.0}{}", UNITS[u])
    }
}

/// One line per file system under file namespaces: its free space, shared by every namespace
/// on it (a thin namespace can grow only into that).
fn filesystems_text(s: &State, out: &mut String) {
    let mut rows = vec![row(&[
        "NAMESPACES",
        "FS SIZE",
        "FS FREE",
        "PROVISIONED",
        "USED",
    ])];
    let mut groups: Vec<(ebof_mgmt::api::FsSpaceView, Vec<String>, u64, u64)> = Vec::new();
    for sub in &s.subsystems {
        for n in &sub.namespaces {
            let Some(fs) = n.filesystem else { continue };
            let who = format!("{}:{}", sub.nqn, n.nsid);
            // One row per file system (some report no id: their size tells them apart).
            match groups
                .iter_mut()
                .find(|g| (g.0.fsid, g.0.total_bytes) == (fs.fsid, fs.total_bytes))
            {
                Some(g) => {
                    g.1.push(who);
                    g.2 += n.size;
                    g.3 += n.allocated_bytes;
                }
                None => groups.push((fs, vec![who], n.size, n.allocated_bytes)),
            }
        }
    }
    if groups.is_empty() {
        return;
    }
    out.push_str("file systems\n");
    for (fs, who, provisioned, used) in groups {
        rows.push(vec![
            who.join(", "),
            approx_size(fs.total_bytes),
            approx_size(fs.available_bytes),
            approx_size(provisioned),
            approx_size(used),
        ]);
    }
    table(out, "  ", &rows);
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
        let mut rows = vec![row(&[
            "NSID", "BACKEND", "SIZE", "USED", "BLOCK", "ANAGRP", "UUID", "PATH",
        ])];
        for n in &sub.namespaces {
            rows.push(vec![
                n.nsid.to_string(),
                n.backend.clone(),
                format_size(n.size),
                used_text(n),
                n.block_size.to_string(),
                n.ana_group.to_string(),
                n.uuid.clone(),
                n.path.clone().unwrap_or_default(),
            ]);
        }
        table(&mut out, "  ", &rows);
        for n in &sub.namespaces {
            if let Some(h) = &n.hosts {
                out.push_str(&format!(
                    "  nsid {} masked: visible to {}\n",
                    n.nsid,
                    ns_hosts_text(Some(h))
                ));
            }
        }
        for n in &sub.namespaces {
            if n.qos.is_some() {
                out.push_str(&format!(
                    "  nsid {} qos: {}\n",
                    n.nsid,
                    qos_text(n.qos.as_ref())
                ));
            }
        }
        for n in &sub.namespaces {
            if let Some(r) = &n.reservation {
                out.push_str(&format!(
                    "  nsid {} reservation: type {}{}, generation {}, ptpl {}, registrants {}\n",
                    n.nsid,
                    r.rtype,
                    r.holder
                        .as_ref()
                        .map(|h| format!(" held by {h}"))
                        .unwrap_or_default(),
                    r.generation,
                    if r.ptpl { "on" } else { "off" },
                    r.registrants
                        .iter()
                        .map(|g| format!("{} key {}", g.hostid, g.key))
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        }
    }
    filesystems_text(s, &mut out);
    if !s.pools.is_empty() {
        out.push_str(&pools_text(&s.pools));
    }
    out.push_str("listeners\n");
    let mut rows = vec![row(&["ADDRESS", "PORTID", "KIND", "TRANSPORT", "TLS"])];
    for l in &s.listeners {
        let (portid, kind) = if l.discovery {
            ("-".to_string(), "discovery")
        } else {
            (l.portid.to_string(), "nvme")
        };
        rows.push(vec![
            l.address.clone(),
            portid,
            kind.to_string(),
            l.transport.clone(),
            l.tls.clone(),
        ]);
    }
    table(&mut out, "  ", &rows);
    if s.ana.is_empty() {
        out.push_str("ana: every group optimized on every listener\n");
    } else {
        out.push_str("ana (groups not listed are optimized)\n");
        let mut rows = vec![row(&["LISTENER", "GROUP", "STATE"])];
        for a in &s.ana {
            rows.push(vec![
                a.listener.clone(),
                a.group.to_string(),
                a.state.clone(),
            ]);
        }
        table(&mut out, "  ", &rows);
    }
    if let Some(m) = &s.mdns {
        out.push_str(&mdns_text(m));
    }
    if let Some(v) = &s.cdc {
        out.push_str(&cdc_text(v));
    }
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
            "LISTENER",
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
                c.listener.clone().unwrap_or_else(|| "-".into()),
                c.hostnqn.clone(),
            ]);
        }
        table(&mut out, "  ", &rows);
    }
    out.push_str(&referrals_text(&s.referrals));
    out.push_str(&registrations_text(&s.registrations));
    if !s.snapshots.is_empty() {
        out.push_str(&snapshots_text(&s.snapshots));
    }
    out
}

/// The storage pools as a table (`ebof ctl pool list`, `ebof ctl show`).
pub fn pools_text(l: &[ebof_mgmt::api::PoolView]) -> String {
    if l.is_empty() {
        return "pools: none\n".into();
    }
    let mut out = "pools\n".to_string();
    let mut rows = vec![row(&[
        "NAME",
        "DIRECTORY",
        "CAPACITY",
        "PROVISIONED",
        "USED",
        "FREE",
        "NAMESPACES",
    ])];
    for p in l {
        rows.push(vec![
            p.name.clone(),
            p.directory.clone(),
            match p.size_limit {
                Some(_) => approx_size(p.capacity_bytes),
                None => format!("{} (fs)", approx_size(p.capacity_bytes)),
            },
            approx_size(p.provisioned_bytes),
            approx_size(p.used_bytes),
            approx_size(p.free_bytes),
            p.namespaces.to_string(),
        ]);
    }
    table(&mut out, "  ", &rows);
    out
}

/// The snapshots as a table (`ebof ctl snapshot list`, `ebof ctl show`).
pub fn snapshots_text(l: &[ebof_mgmt::api::SnapshotView]) -> String {
    if l.is_empty() {
        return "snapshots: none\n".into();
    }
    let mut out = "snapshots\n".to_string();
    let mut rows = vec![row(&[
        "NAME",
        "SUBSYSTEM",
        "NSID",
        "UUID",
        "SIZE",
        "BLOCK",
        "CREATED",
        "METHOD",
        "PATH",
    ])];
    for v in l {
        rows.push(vec![
            v.name.clone(),
            v.origin.subsystem.clone(),
            v.origin.nsid.to_string(),
            v.origin.uuid.clone(),
            format_size(v.size),
            v.block_size.to_string(),
            utc_text(v.created),
            v.method.clone(),
            v.path.clone(),
        ]);
    }
    table(&mut out, "  ", &rows);
    out
}

/// Seconds since the Unix epoch as `YYYY-MM-DDTHH:MM:SSZ` (UTC); the number itself if it is
/// past what a date can hold.
pub fn utc_text(secs: u64) -> String {
    i64::try_from(secs)
        .ok()
        .and_then(|s| chrono::DateTime::from_timestamp(s, 0))
        .map_or_else(
            || secs.to_string(),
            |d| d.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        )
}

/// The referrals, one line each.
pub fn referrals_text(r: &[String]) -> String {
    if r.is_empty() {
        return "referrals: none\n".into();
    }
    let mut out = "referrals (discovery log SUBTYPE 1)\n".to_string();
    for a in r {
        out.push_str(&format!("  {a}\n"));
    }
    out
}

/// The DIM registrations as a table.
pub fn registrations_text(r: &[ebof_mgmt::api::DimRegistrationView]) -> String {
    if r.is_empty() {
        return "dim registrations: none\n".into();
    }
    let mut out = "dim registrations\n".to_string();
    let mut rows = vec![row(&[
        "HOSTNQN",
        "TYPE",
        "ENTITY",
        "NAME",
        "VERSION",
        "ADDRESSES",
        "AGE",
    ])];
    for g in r {
        let addrs: Vec<String> = g
            .entries
            .iter()
            .map(|e| {
                let a = if e.service.is_empty() {
                    e.address.clone()
                } else {
                    format!("{}:{}", e.address, e.service)
                };
                format!("{} {a}", e.transport)
            })
            .collect();
        let entity = if g.entity == g.host {
            "=".to_string()
        } else {
            g.entity.clone()
        };
        let name = match &g.symname {
            Some(s) => format!("{} ({s})", g.name),
            None => g.name.clone(),
        };
        rows.push(vec![
            g.host.clone(),
            g.entity_type.clone(),
            entity,
            name,
            g.version.clone(),
            addrs.join(", "),
            format!("{}s", g.updated_secs_ago),
        ]);
    }
    table(&mut out, "  ", &rows);
    out
}

/// The mDNS section of `ebof ctl show` (and `ebof ctl mdns`).
pub fn mdns_text(m: &ebof_mgmt::api::MdnsView) -> String {
    let mut out = format!("mdns: {}", m.mode);
    if let Some(e) = &m.error {
        out.push_str(&format!("  error: {e}"));
    }
    out.push('\n');
    if m.records.is_empty() {
        return out;
    }
    let mut rows = vec![row(&[
        "LISTENER",
        "STATE",
        "SERVICE",
        "INSTANCE",
        "ADDRESSES",
        "TXT",
    ])];
    for r in &m.records {
        rows.push(vec![
            r.listener.clone(),
            r.state.clone(),
            r.service.clone(),
            r.instance.clone(),
            if r.addresses.is_empty() {
                "-".into()
            } else {
                r.addresses.join(",")
            },
            r.txt.join(" "),
        ]);
    }
    table(&mut out, "  ", &rows);
    for r in m.records.iter().filter(|r| r.reason.is_some()) {
        out.push_str(&format!(
            "  {} {}: {}\n",
            r.listener,
            r.state,
            r.reason.as_deref().unwrap_or_default()
        ));
    }
    out
}

/// The Central Discovery Controller's members as `ebof ctl cdc list` and `show` print them.
pub fn cdc_text(v: &ebof_mgmt::api::CdcView) -> String {
    let mut out = format!(
        "central discovery controller (host NQN {}, {} host view(s))\n",
        v.hostnqn, v.hosts
    );
    if v.members.is_empty() {
        out.push_str("  no members\n");
        return out;
    }
    let mut rows = vec![row(&[
        "MEMBER",
        "STATE",
        "ENTRIES",
        "LAST CHANGE",
        "LAST ERROR",
    ])];
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    for m in &v.members {
        rows.push(vec![
            m.address.clone(),
            if m.connected { "connected" } else { "down" }.to_string(),
            m.entries.to_string(),
            m.last_change.map_or_else(
                || "-".to_string(),
                |t| format!("{}s ago", now.saturating_sub(t)),
            ),
            m.last_error.clone().unwrap_or_else(|| "-".into()),
        ]);
    }
    table(&mut out, "  ", &rows);
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
        "READ p50/p99/p99.99 us",
        "WRITE p50/p99/p99.99 us",
    ])];
    let lat = |l: &Option<ebof_mgmt::api::LatencyPercentiles>| {
        l.as_ref().map_or_else(
            || "-".to_string(),
            |l| format!("{:.0}/{:.0}/{:.0}", l.p50_us, l.p99_us, l.p9999_us),
        )
    };
    for n in &s.namespaces {
        rows.push(vec![
            n.subsystem.clone(),
            n.nsid.to_string(),
            n.read_commands.to_string(),
            n.write_commands.to_string(),
            format_size(n.bytes_read),
            format_size(n.bytes_written),
            n.media_errors.to_string(),
            lat(&n.read_latency),
            lat(&n.write_latency),
        ]);
    }
    table(&mut out, "", &rows);
    out.push_str(&format!(
        "controllers {}  io queues {}  connections {} open ({} refused)  protocol errors {}  \
         keep-alive expiries {}  disconnects {}\n",
        s.controllers,
        s.io_queues,
        s.connections_open,
        s.connections_refused,
        s.protocol_errors,
        s.keep_alive_expiries,
        s.admin_disconnects
    ));
    for n in s.namespaces.iter().filter(|n| !n.backend_errors.is_empty()) {
        let e: Vec<String> = n
            .backend_errors
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        out.push_str(&format!(
            "backend errors {} nsid {}: {}\n",
            n.subsystem,
            n.nsid,
            e.join(", ")
        ));
    }
    out
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
        config_file.map(|p| absolute(&p)),
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

#[cfg(test)]
mod tests {
    #[test]
    fn utc_text_is_iso_8601() {
        assert_eq!(super::utc_text(0), "1970-01-01T00:00:00Z");
        assert_eq!(super::utc_text(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(super::utc_text(1_790_000_000), "2026-09-21T14:13:20Z");
    }
}
