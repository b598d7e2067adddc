//! `ebof ctl`'s command line: the clap definitions of every subcommand and its arguments.

use std::path::PathBuf;

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
    /// Every box of a fleet instead of one: the boxes file of `ebof csi --boxes` (each box's
    /// `api`, `token_file`, `ca_file`, `insecure_http`). `show` and `top` print one table with
    /// a BOX column; a box that does not answer is shown as unreachable, with the error.
    #[arg(long, value_name = "FILE", global = true, conflicts_with_all = ["socket", "api"])]
    pub boxes: Option<PathBuf>,
    /// With --boxes: how long to wait for each box, in seconds (default 3; for dump, 20 for
    /// its whole bundle), before showing it as unreachable; the boxes are asked at the same
    /// time.
    #[arg(long, value_name = "SECS", global = true, requires = "boxes")]
    pub box_timeout: Option<f64>,
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
    /// What is busy now: per namespace, IOPS and bandwidth (read/write), latency percentiles
    /// and the average number of commands in the target (queue depth) over each interval,
    /// busiest first, refreshed until interrupted (or --count/--once). With --json, one
    /// object per view, a line each. --hosts: per host NQN instead (boxes with
    /// `[metrics] per_host_io = true`).
    Top(TopArgs),
    /// Write a support bundle (a .tar.gz): state, counters, the running configuration with
    /// every secret redacted, a metrics scrape, versions, logs where they can be had, and a
    /// MANIFEST listing them. With --boxes: one bundle, a directory per box, and a top-level
    /// MANIFEST naming the boxes that could not be collected and why.
    Dump {
        /// The bundle to write (e.g. ebof-dump.tar.gz; created mode 0600).
        #[arg(short = 'o', long, value_name = "FILE.tar.gz")]
        output: PathBuf,
    },
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

// `ebof ctl top`'s arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct TopArgs {
    /// Seconds between two readings: each view shows the rates over one interval.
    #[arg(long, short = 'd', value_name = "SECS", default_value_t = 2.0)]
    pub interval: f64,
    /// Print one view (after one interval) and stop.
    #[arg(long, conflicts_with = "count")]
    pub once: bool,
    /// Stop after this many views.
    #[arg(long, short = 'n', value_name = "N")]
    pub count: Option<u32>,
    /// What "busiest" means: iops (default), bw (bytes per second), qd (commands in the
    /// target) or lat (p99 latency).
    #[arg(long, value_parser = ["iops", "bw", "qd", "lat"], default_value = "iops")]
    pub sort: String,
    /// One line per host NQN instead of per namespace (the box counts I/O per host only
    /// with `[metrics] per_host_io = true`).
    #[arg(long)]
    pub hosts: bool,
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
    Add(Box<NsAddArgs>),
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
    Qos(NsQosArgs),
    /// Replicated namespaces (`mirror = { peer, role }`): their state, and manual promotion.
    Mirror {
        #[command(subcommand)]
        cmd: NsMirrorCmd,
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
pub enum NsMirrorCmd {
    /// Role, epoch, peer state (in-sync, degraded, resyncing with progress, connecting),
    /// dirty regions, lease and fence of mirrored namespace NSID of NQN.
    Status { nqn: String, nsid: String },
    /// Make the copy on this box the primary (epoch + 1; the peer gets a full copy when it is
    /// back). With a witness the witness decides: --force overrides it, and is safe only when
    /// the old primary is known to be dead.
    Promote {
        nqn: String,
        nsid: String,
        #[arg(long)]
        force: bool,
    },
}

// `ebof ctl ns add`'s arguments.
#[derive(clap::Args, Debug)]
pub struct NsAddArgs {
    pub nqn: String,
    /// Volatile RAM namespace of SIZE (e.g. 4G).
    #[arg(long, value_name = "SIZE", group = "backend")]
    pub ram: Option<String>,
    /// File namespace (created with --size, or 1G, if missing).
    #[arg(long, value_name = "PATH", group = "backend")]
    pub file: Option<PathBuf>,
    /// Block device namespace.
    #[arg(long, value_name = "DEV", group = "backend")]
    pub block: Option<PathBuf>,
    /// A file namespace in storage pool NAME, with --size (the box names the file, and
    /// deletes it when the namespace is removed); with --from-snapshot, the clone's file
    /// is made in the pool.
    #[arg(long, value_name = "NAME", conflicts_with_all = ["ram", "file", "block"])]
    pub pool: Option<String>,
    /// Size of a --file namespace (created or extended to it, never truncated) or of a
    /// --pool one (required).
    #[arg(long, value_name = "SIZE")]
    pub size: Option<String>,
    /// Namespace ID (default: the lowest free one).
    #[arg(long)]
    pub nsid: Option<u32>,
    /// Logical block size.
    #[arg(long, value_parser = ["512", "4096"])]
    pub block_size: Option<String>,
    /// Namespace UUID (default: derived from NQN and NSID).
    #[arg(long)]
    pub uuid: Option<String>,
    /// Bypass the page cache (O_DIRECT) for a file or block namespace.
    #[arg(long)]
    pub direct: bool,
    /// ANA group, 1 to 1024 (default 1).
    #[arg(long, value_name = "GROUP")]
    pub ana_group: Option<u32>,
    /// Only this host sees the namespace (repeat for more hosts; default: every host the
    /// subsystem admits). No other host ever sees it, not even briefly.
    #[arg(long = "host", value_name = "HOSTNQN")]
    pub hosts: Vec<String>,
    /// A writable clone of snapshot NAME (a new file, reflinked where the file system
    /// can; --file says where, default beside the snapshot's directory; never an
    /// existing file).
    #[arg(
        long,
        value_name = "NAME",
        conflicts_with_all = ["ram", "block", "size", "block_size", "direct"]
    )]
    pub from_snapshot: Option<String>,
    /// Mirror the namespace synchronously with the same namespace (same NQN, NSID, UUID and
    /// size) on the box whose NVMe/TCP listener is ADDR:PORT; needs --mirror-role and an ANA
    /// group of its own (--ana-group).
    #[arg(long, value_name = "ADDR:PORT", requires = "mirror_role")]
    pub mirror_peer: Option<String>,
    /// The role on first start: primary or secondary.
    #[arg(long, value_parser = ["primary", "secondary"], requires = "mirror_peer")]
    pub mirror_role: Option<String>,
    /// Encrypt the file or block namespace at rest with the 64-byte key in PATH (mode 0600;
    /// ADR 0029). A namespace in an encrypted pool is encrypted by the pool.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["ram", "pool", "from_snapshot"])]
    pub key_file: Option<PathBuf>,
}

// `ebof ctl ns qos`'s arguments.
#[derive(clap::Args, Debug)]
pub struct NsQosArgs {
    pub nqn: String,
    pub nsid: String,
    /// Commands per second, reads and writes together.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub iops: Option<i64>,
    /// MB/s, reads and writes together.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub mbps: Option<i64>,
    /// Read commands per second.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub read_iops: Option<i64>,
    /// Write commands per second.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub write_iops: Option<i64>,
    /// MB/s read.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub read_mbps: Option<i64>,
    /// MB/s written.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub write_mbps: Option<i64>,
    /// Remove every limit.
    #[arg(long, conflicts_with_all = ["iops", "mbps", "read_iops", "write_iops", "read_mbps", "write_mbps"])]
    pub clear: bool,
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
        /// ANA group, 1 to 1024 (namespaces are in group 1 unless configured otherwise).
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
