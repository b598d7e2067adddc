//! The typed, validated configuration: what `ebof serve` and the management
//! API work with. Every field here has its final type; defaults are already
//! resolved (serials and UUIDs derived, NSIDs numbered).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

use uuid::Uuid;

use crate::parse::SERIAL_MAX_LEN;

/// NQN of the subsystem of the embedded default configuration.
pub const DEFAULT_NQN: &str = "nqn.2026-11.io.ebof:default";
/// The well-known discovery subsystem NQN (NVMe-oF 1.1, 7.1); no I/O
/// subsystem may use it.
pub const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";
/// IANA port of NVMe/TCP I/O controllers (NVMe/TCP 1.0, 7.4.9.1).
pub const DEFAULT_PORT: u16 = 4420;
/// IANA port of the NVMe/TCP discovery service (NVMe/TCP 1.0, 7.4.9.1).
pub const DEFAULT_DISCOVERY_PORT: u16 = 8009;
/// Model number reported when a subsystem does not set one.
pub const DEFAULT_MODEL: &str = "ebof";
/// Prefix of derived serial numbers when `[target] serial_prefix` is unset.
pub const DEFAULT_SERIAL_PREFIX: &str = "EBOF";
/// Logical block size when a namespace does not set one.
pub const DEFAULT_BLOCK_SIZE: u32 = 512;
/// Size of the RAM namespace of the embedded default and of the subsystem
/// that `--nqn` creates when the configuration has none: 1 GiB.
pub const DEFAULT_RAM_SIZE: u64 = 1 << 30;
/// Size a `file` namespace without `size` gets when its file does not exist
/// yet (the backend creates it): 1 GiB. An existing file keeps its size.
pub const DEFAULT_FILE_SIZE: u64 = 1 << 30;
/// Highest valid NSID (0xFFFFFFFF is the broadcast value; NVMe Base 2.0, 3.2.1.2).
pub const NSID_MAX: u32 = 0xFFFF_FFFE;

/// Name-space UUID under which namespace UUIDs are derived (RFC 4122 v5).
/// Changing it changes every derived namespace UUID: never do.
const NAMESPACE_UUID_BASE: Uuid = Uuid::from_u128(0x6562_6f66_2d6e_4973_a164_5d3c_0e5a_7b21);
/// Name-space UUID under which serial numbers are derived. Never change.
const SERIAL_UUID_BASE: Uuid = Uuid::from_u128(0x6562_6f66_2d73_4e5f_9b0c_22d8_41f6_c3e7);

/// The whole configuration of `ebof serve`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Global tuning (`[target]`).
    pub target: TargetTuning,
    /// Where I/O controllers are served (`[[listeners]]`); discovery is
    /// served on each of them too. At least one.
    pub listeners: Vec<Listener>,
    /// Optional dedicated discovery listener (`[discovery]`), usually port 8009.
    pub discovery: Option<Listener>,
    /// The discovery service's settings (`[discovery] mdns`, `referrals`).
    pub discovery_settings: DiscoverySettings,
    /// The exported NVM subsystems (`[[subsystems]]`). May be empty (a pool box, provisioned
    /// at run time through the management API, or a Central Discovery Controller).
    pub subsystems: Vec<Subsystem>,
    /// The management API (`[management]`).
    pub management: Management,
    /// Prometheus endpoint (`[metrics] listen = "ADDR:PORT"`); none by default.
    pub metrics: Option<Listener>,
    /// ANA states that are not optimized (`[[ana]]`), see [`crate::AnaSetting`].
    pub ana: Vec<crate::AnaSetting>,
    /// Per-host secrets (`[[hosts]]`): DH-HMAC-CHAP keys and TLS PSKs.
    pub hosts: Vec<crate::HostSecurity>,
    /// Listeners whose TLS mode is not `off` (`[[listeners]] tls = …`).
    pub listener_tls: Vec<(Listener, crate::TlsMode)>,
    /// Listeners on NVMe/RDMA (`transport = "rdma"`); every other listener is NVMe/TCP.
    pub rdma_listeners: Vec<Listener>,
    /// `[cdc]`: run as a Central Discovery Controller over these members (TP 8010).
    pub cdc: Option<Cdc>,
    /// Storage pools (`[[pools]]`): directories the management API makes file namespaces in.
    pub pools: Vec<crate::Pool>,
    /// `[metrics] host_labels = true`: per-host series (labelled with host NQNs) on
    /// `/metrics`. Off by default: a host NQN is the only credential of hosts that use neither
    /// DH-HMAC-CHAP nor TLS, and `/metrics` needs no token.
    pub metrics_host_labels: bool,
    /// `[metrics] per_host_io = true`: count reads and writes per host NQN (operations,
    /// bytes, latency histograms), shown by `GET /v1/stats`, `ebof ctl top --hosts` and on
    /// `/metrics` (label `hostnqn`). Off by default, for the reason of `host_labels`; off
    /// costs nothing on the data path.
    pub metrics_per_host_io: bool,
    /// `[mirror]`: the replication links of mirrored namespaces (ADR 0028).
    pub mirror: crate::mirror::MirrorSettings,
    /// `[witness]`: this box keeps leases for other boxes' mirrors; `None`: it does not.
    pub witness: Option<crate::mirror::WitnessSettings>,
}

/// `[cdc]`: this box is a Central Discovery Controller: its discovery service shows each host
/// the NVM subsystems every member's discovery service would show that host.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cdc {
    /// The members' discovery services (`members = ["ADDR[:PORT]", …]`, port 8009 by default).
    pub members: Vec<Listener>,
    /// The host NQN of the CDC's own persistent connections to its members (`hostnqn`);
    /// `None`: derived from the machine (see the CDC runtime).
    pub hostnqn: Option<String>,
    /// Discovery controllers allowed to announce themselves by pull registration (DIM with
    /// entity type DDC): `trusted = ["ADDR", "NQN", …]`, matched against the source address of
    /// the registering connection or its host NQN. Empty (the default): only members listed in
    /// `members` and DDCs that authenticated with DH-HMAC-CHAP may register.
    pub trusted: Vec<TrustedAnnouncer>,
}

/// One entry of `[cdc] trusted`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TrustedAnnouncer {
    /// A source IP address of the discovery connection.
    Address(std::net::IpAddr),
    /// A host NQN the registering discovery controller connects with.
    Nqn(String),
}

impl fmt::Display for TrustedAnnouncer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrustedAnnouncer::Address(a) => write!(f, "{a}"),
            TrustedAnnouncer::Nqn(n) => f.write_str(n),
        }
    }
}

impl TrustedAnnouncer {
    /// Parses `ADDR` (an IP literal) or an NQN.
    pub fn parse(s: &str) -> Result<TrustedAnnouncer, crate::ConfigError> {
        if let Ok(a) = s.parse::<std::net::IpAddr>() {
            return Ok(TrustedAnnouncer::Address(a));
        }
        if s.starts_with("nqn.") {
            crate::parse::check_nqn(s)?;
            return Ok(TrustedAnnouncer::Nqn(s.to_owned()));
        }
        Err(crate::ConfigError::new(
            crate::codes::INVALID_ADDRESS,
            "",
            format!("{s:?} is neither an IP address nor an NQN"),
        ))
    }
}

/// The discovery service's settings (`[discovery]` keys other than the listener's).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DiscoverySettings {
    /// Publish discovery listeners over mDNS (`mdns = true|false`); `None`: every listener
    /// not on a loopback address.
    pub mdns: Option<bool>,
    /// Discovery services hosts are referred to (`referrals`), served as discovery log
    /// entries of subtype 1.
    pub referrals: Vec<Listener>,
    /// A Central Discovery Controller this box announces its discovery service to (`cdc`,
    /// TP 8010 pull registration with DIM).
    pub cdc: Option<Listener>,
}

/// Default of `[target] tls_rekey_records`: 2^24 full-size records.
pub const DEFAULT_TLS_REKEY_RECORDS: u64 = 1 << 24;

/// Default port of `[metrics] listen` when only an address is given.
pub const DEFAULT_METRICS_PORT: u16 = 9650;
/// Default port of `[management] listen` when only an address is given.
pub const DEFAULT_MANAGEMENT_PORT: u16 = 9651;

/// The management API of `ebof serve` (`[management]`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Management {
    /// Unix socket path (`socket`); `None`: the default (`/run/ebof/ebof.sock` for root, else
    /// `$XDG_RUNTIME_DIR/ebof.sock`, chosen by `ebof serve`).
    pub socket: Option<PathBuf>,
    /// `enabled = false` serves no management API at all.
    pub disabled: bool,
    /// `autosave = true`: each change made through the management API is written back to the
    /// configuration file `ebof serve` was started with (atomically), as `ebof ctl save` does.
    pub autosave: bool,
    /// `listen = "ADDR:PORT"`: also serve the whole API (and `/metrics`) over TCP, each request
    /// authenticated with `Authorization: Bearer TOKEN`. Requires `token_file`.
    pub listen: Option<Listener>,
    /// `token_file = "PATH"`: the file holding the bearer token of `listen` (never the token
    /// itself in the configuration). `ebof serve` refuses to start unless the file exists, is
    /// not empty and is not accessible by group or others (`chmod 600`).
    pub token_file: Option<PathBuf>,
    /// `tls_cert = "PATH"` and `tls_key = "PATH"` (PEM): serve `listen` over HTTPS. Both or
    /// neither.
    pub tls_cert: Option<PathBuf>,
    /// See [`Management::tls_cert`].
    pub tls_key: Option<PathBuf>,
    /// `data_dirs = ["DIR", …]`: directories (absolute) inside which the management API may
    /// create or open `file` namespaces, besides the `[[pools]]` directories, and `save` the
    /// configuration. The configuration file itself is not restricted.
    pub data_dirs: Vec<PathBuf>,
    /// `block_devices = ["PATH", …]`: the block devices (absolute paths) the management API
    /// may open as `block` namespaces. Empty (the default): none.
    pub block_devices: Vec<PathBuf>,
}

/// Global tuning of the target (`[target]`). Every field has a default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetTuning {
    /// CPU cores to run reactors on, sorted as given; `None`: all online
    /// cores. Whether the cores exist is checked by the runtime, not here.
    pub cores: Option<Vec<usize>>,
    /// In-capsule data limit of I/O queues in bytes (advertised as IOCCSZ,
    /// NVMe-oF 1.1, 4.2): 4096..=131072, a multiple of 16. Default 8192.
    pub io_inline_data: u32,
    /// MAXH2CDATA advertised in ICResp (NVMe/TCP 1.0, 3.6.2.3): the largest
    /// H2CData PDU payload we accept. 4096..=16 MiB, a multiple of 4.
    /// Default 131072.
    pub max_h2c_data: u32,
    /// Largest payload of one C2HData PDU we send: 4096..=16 MiB.
    /// Default 131072.
    pub c2h_data_max: u32,
    /// Largest data transfer of one command over NVMe/TCP (`max_transfer`, Identify
    /// Controller MDTS): a power of two from 4096 to 8 MiB. Default 1 MiB. NVMe/RDMA
    /// controllers report at most 128 KiB (their staging buffers' size).
    pub max_transfer: u32,
    /// I/O queues per controller: 1..=1024. Default 32.
    pub max_io_queues: u16,
    /// Namespaces per subsystem: 1..=1024. Default 1024 (as the Linux target). Identify
    /// Controller NN reports it (or the highest NSID in use, if larger), so a namespace can be
    /// hot-added at any NSID up to it without the host re-reading Identify Controller.
    pub max_namespaces: u32,
    /// Entries per queue, MQES+1 (CAP.MQES is 0's based): 16..=4096.
    /// Default 1024, as the Linux target (the ODCC test plan runs QD 256 per job). A queue
    /// only grows to what its host asks for at Connect.
    pub max_queue_size: u16,
    /// Controller IDs this box hands out, `cntlid_min..=cntlid_max` within 1..=65519 (FFEFh).
    /// Default the whole range. Boxes serving one subsystem together (a mirrored namespace,
    /// ADR 0028) must take disjoint ranges: a host refuses a duplicate CNTLID in a subsystem.
    pub cntlid_min: u16,
    /// Last controller ID this box hands out (see `cntlid_min`). Default 65519.
    pub cntlid_max: u16,
    /// A new connection must send its ICReq and complete Fabrics Connect within this many
    /// milliseconds, or it is closed: 100..=600000. Default 5000.
    pub handshake_timeout_ms: u32,
    /// Connections open at once, all hosts together: 1..=1048576. Default 16384 (and never
    /// more than the open-file limit allows; ebof serve raises its soft limit to the hard one).
    pub max_connections: u32,
    /// Connections open at once from one source IP address: 1..=1048576. Default 4096 (a
    /// host with 1024 I/O queues on each of two paths fits).
    pub max_connections_per_address: u32,
    /// Prefix of derived serial numbers: at most 12 printable ASCII
    /// characters without spaces, so at least 8 hex digits of the hash fit
    /// in the 20-byte SN field. Default `"EBOF"`.
    pub serial_prefix: String,
    /// Back RAM namespaces with transparent huge pages (`madvise(MADV_HUGEPAGE)`): fewer TLB
    /// misses, about 1.2-1.4x the 4K random read IOPS measured, at the cost of memory being
    /// taken in 2 MiB steps. `false` keeps 4 KiB pages (sparse namespaces). Default `true`.
    pub ram_huge_pages: bool,
    /// How file and block namespaces do their I/O (`io_engine`): [`IoEngine::IoUring`] (the
    /// default; falls back to the worker pool, with a log line, where the kernel refuses
    /// io_uring) or [`IoEngine::Threads`].
    pub io_engine: IoEngine,
    /// Worker threads per reactor core for file and block I/O (`io_threads`): the pool of the
    /// `threads` engine (and, under io_uring, of Write Zeroes, deallocation and Flush of all
    /// namespaces), and the cap on io_uring's kernel workers per core. 1..=256. Default 4.
    /// The number of threads no longer grows with the load.
    pub io_threads: u16,
    /// Directory for state that must survive a restart (`state_dir`): reservations of
    /// namespaces with Persist Through Power Loss on, one file per namespace
    /// (`ns-<uuid>.resv`). `None`: a file namespace keeps its state beside its file
    /// (`<path>.resv`); RAM and block namespaces then cannot persist reservations (RESCAP
    /// does not advertise PTPL). The directory is created when missing.
    pub state_dir: Option<PathBuf>,
    /// TLS records sent under one key, counted in full-size-record equivalents (16 KiB of
    /// plaintext each, RFC 8446 §5.5), before the key is updated (`tls_rekey_records`):
    /// 16..=2^24. Default 2^24 (below AES-GCM's 2^24.5 limit). Lower values are for tests.
    pub tls_rekey_records: u64,
    /// Which peers the target initiates a TLS KeyUpdate towards (`tls_key_update`).
    pub tls_key_update: TlsKeyUpdate,
}

/// `[target] tls_key_update`: whom the record layer sends a KeyUpdate of its own to when
/// `tls_rekey_records` is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TlsKeyUpdate {
    /// `"peer"` (default): only to a peer that has sent a KeyUpdate itself (and so shown that it
    /// takes one). Linux hosts read NVMe/TCP through kTLS, which takes no post-handshake
    /// handshake record: towards them the key is kept past the threshold, as the Linux target
    /// does.
    #[default]
    Peer,
    /// `"always"`: to every peer (for peers known to take KeyUpdates, and for tests).
    Always,
}

impl TlsKeyUpdate {
    /// The values accepted in the file.
    pub const NAMES: [&'static str; 2] = ["peer", "always"];

    /// The name used in the file.
    pub fn name(self) -> &'static str {
        match self {
            TlsKeyUpdate::Peer => "peer",
            TlsKeyUpdate::Always => "always",
        }
    }
}

/// The engine that runs file and block I/O (`[target] io_engine`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IoEngine {
    /// `"io_uring"`: one ring per reactor core.
    #[default]
    IoUring,
    /// `"threads"`: a fixed-size worker pool per reactor core.
    Threads,
}

impl IoEngine {
    /// The values accepted in the file and on the command line.
    pub const NAMES: [&'static str; 2] = ["io_uring", "threads"];

    /// The name used in the file.
    pub fn name(self) -> &'static str {
        match self {
            IoEngine::IoUring => "io_uring",
            IoEngine::Threads => "threads",
        }
    }
}

impl fmt::Display for IoEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Default of `[target] max_transfer` (bytes): 1 MiB.
pub const DEFAULT_MAX_TRANSFER: u32 = 1 << 20;

/// Lowest controller ID (`[target] cntlid_min`'s default and floor).
pub const CNTLID_MIN: u16 = 1;
/// Highest controller ID a controller may have (FFEFh; `[target] cntlid_max`'s default).
pub const CNTLID_MAX: u16 = 0xFFEF;

impl Default for TargetTuning {
    fn default() -> Self {
        TargetTuning {
            cores: None,
            io_inline_data: 8192,
            max_h2c_data: 131_072,
            c2h_data_max: 131_072,
            max_transfer: DEFAULT_MAX_TRANSFER,
            max_io_queues: 32,
            max_namespaces: 1024,
            max_queue_size: 1024,
            cntlid_min: CNTLID_MIN,
            cntlid_max: CNTLID_MAX,
            handshake_timeout_ms: 5000,
            max_connections: 16_384,
            max_connections_per_address: 4096,
            serial_prefix: DEFAULT_SERIAL_PREFIX.to_owned(),
            ram_huge_pages: true,
            io_engine: IoEngine::IoUring,
            io_threads: 4,
            state_dir: None,
            tls_rekey_records: DEFAULT_TLS_REKEY_RECORDS,
            tls_key_update: TlsKeyUpdate::Peer,
        }
    }
}

/// A TCP listening address (`[[listeners]]`, `[discovery]`, `--listen`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Listener {
    /// IPv4 or IPv6 literal to bind; `0.0.0.0` / `::` bind every address.
    pub address: IpAddr,
    /// TCP port; 0 lets the OS choose one (tests).
    pub port: u16,
}

impl Listener {
    /// The address to bind.
    pub fn socket_addr(&self) -> SocketAddr {
        SocketAddr::new(self.address, self.port)
    }
}

impl fmt::Display for Listener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.socket_addr().fmt(f)
    }
}

/// The fabric of a listener (`[[listeners]] transport`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Transport {
    /// NVMe/TCP.
    #[default]
    Tcp,
    /// NVMe/RDMA (RoCEv2, InfiniBand, iWARP), through librdmacm.
    Rdma,
}

impl Transport {
    /// The configuration name: "tcp" or "rdma".
    pub fn name(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Rdma => "rdma",
        }
    }

    /// Parse a configuration name.
    pub fn parse(s: &str) -> Option<Transport> {
        match s {
            "tcp" => Some(Transport::Tcp),
            "rdma" => Some(Transport::Rdma),
            _ => None,
        }
    }
}

impl Config {
    /// The transport of listener `l` (the I/O listeners and `[discovery]`).
    pub fn transport(&self, l: &Listener) -> Transport {
        if self.rdma_listeners.contains(l) {
            Transport::Rdma
        } else {
            Transport::Tcp
        }
    }
}

/// An exported NVM subsystem (`[[subsystems]]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subsystem {
    /// Subsystem NQN, unique, not [`DISCOVERY_NQN`].
    pub nqn: String,
    /// Serial number (Identify Controller SN): at most 20 printable ASCII
    /// characters. Derived from the NQN when not configured, see
    /// [`derived_serial`].
    pub serial: String,
    /// Model number (Identify Controller MN): 1..=40 printable ASCII
    /// characters. Default [`DEFAULT_MODEL`].
    pub model: String,
    /// Whether any host may connect; when false only `hosts` may.
    /// Default: true when `hosts` is empty, false otherwise.
    pub allow_any_host: bool,
    /// Host NQNs allowed to connect (ignored when `allow_any_host`, which is
    /// why the two together are an error).
    pub hosts: Vec<String>,
    /// Namespaces, in configuration order.
    pub namespaces: Vec<Namespace>,
}

/// A namespace of a subsystem (`[[subsystems.namespaces]]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Namespace {
    /// Namespace ID, 1..=[`NSID_MAX`], unique within the subsystem.
    pub nsid: u32,
    /// Where the data lives.
    pub backend: BackendChoice,
    /// Logical block size in bytes: 512 or 4096.
    pub block_size: u32,
    /// Namespace UUID (Identify Namespace Identification Descriptor, type 3),
    /// never nil. Derived from (subsystem NQN, NSID) when not configured,
    /// see [`derived_uuid`], so it is stable across restarts.
    pub uuid: [u8; 16],
    /// File and block namespaces: bypass the page cache (`O_DIRECT`). Every I/O then reaches
    /// the device; `block_size` must be at least its logical block size (checked when the
    /// backend is opened). Default false. Not accepted for RAM.
    pub direct: bool,
    /// ANA group (`ana_group`, 1..=[`crate::ANA_GROUP_MAX`]). Default 1.
    pub ana_group: u32,
    /// Per-host masking (`hosts`): `None` (absent) makes the namespace visible to every host
    /// the subsystem admits; `Some(list)` only to the host NQNs listed (none for an empty
    /// list). Each an NQN, none twice. A listed host the subsystem does not admit is allowed
    /// (it simply never connects).
    pub hosts: Option<Vec<String>>,
    /// QoS limits (`qos = { … }`, [`crate::Qos`]); default: unlimited.
    pub qos: crate::qos::Qos,
    /// The storage pool that owns the namespace's file (`pool = "NAME"`, file namespaces
    /// only; the file is inside the pool's directory). The pool counts it, and removing the
    /// namespace through the management API deletes the file. `None`: not in a pool.
    pub pool: Option<String>,
    /// `mirror = { peer, role }`: the namespace is mirrored synchronously with the same
    /// namespace on the peer box (ADR 0028); `None`: not mirrored.
    pub mirror: Option<crate::mirror::NamespaceMirror>,
    /// `encryption = { key_file }` on a file or block namespace outside pools (ADR 0029): its
    /// data is encrypted with that key. A namespace in an encrypted pool has `None` here (the
    /// pool's setting applies). `None`: not encrypted by its own key.
    pub encryption: Option<crate::crypt::Encryption>,
}

/// The storage behind a namespace. Opening it is the backend crate's job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendChoice {
    /// Volatile memory of `size` bytes (a positive multiple of the block size).
    Ram {
        /// Capacity in bytes.
        size: u64,
    },
    /// A regular file.
    File {
        /// The file; relative paths are relative to the working directory of
        /// `ebof serve`.
        path: PathBuf,
        /// `Some(n)`: the namespace has `n` bytes; the file is created or
        /// extended to that size, never truncated. `None`: the file's current
        /// size (rounded down to the block size); a missing file is created
        /// with [`DEFAULT_FILE_SIZE`] bytes.
        size: Option<u64>,
    },
    /// A block device; its size is the device's.
    Block {
        /// The device node, e.g. `/dev/nvme0n1`.
        path: PathBuf,
    },
}

impl BackendChoice {
    /// The name used in the file: `"ram"`, `"file"` or `"block"`.
    pub fn kind(&self) -> &'static str {
        match self {
            BackendChoice::Ram { .. } => "ram",
            BackendChoice::File { .. } => "file",
            BackendChoice::Block { .. } => "block",
        }
    }

    /// The configured size, if any.
    pub fn size(&self) -> Option<u64> {
        match self {
            BackendChoice::Ram { size } => Some(*size),
            BackendChoice::File { size, .. } => *size,
            BackendChoice::Block { .. } => None,
        }
    }

    /// The file or device path, if any.
    pub fn path(&self) -> Option<&Path> {
        match self {
            BackendChoice::Ram { .. } => None,
            BackendChoice::File { path, .. } | BackendChoice::Block { path } => Some(path),
        }
    }
}

/// The UUID a namespace gets when none is configured: an RFC 4122 version 5
/// (name-based, SHA-1) UUID of `nqn`, a NUL byte and the big-endian NSID,
/// under a fixed ebof name space. Same inputs, same UUID, on every run and
/// every release.
pub fn derived_uuid(nqn: &str, nsid: u32) -> [u8; 16] {
    let mut name = Vec::with_capacity(nqn.len() + 5);
    name.extend_from_slice(nqn.as_bytes());
    name.push(0);
    name.extend_from_slice(&nsid.to_be_bytes());
    *Uuid::new_v5(&NAMESPACE_UUID_BASE, &name).as_bytes()
}

/// The serial number a subsystem gets when none is configured: `prefix`
/// followed by upper-case hex digits of a name-based hash of `nqn`, 20
/// characters in all (the SN field's size). Deterministic.
pub fn derived_serial(prefix: &str, nqn: &str) -> String {
    let hash = Uuid::new_v5(&SERIAL_UUID_BASE, nqn.as_bytes());
    let hex = format!("{:032X}", hash.as_u128());
    let mut serial: String = prefix.chars().take(SERIAL_MAX_LEN).collect();
    let room = SERIAL_MAX_LEN.saturating_sub(serial.len()).min(hex.len());
    serial.push_str(&hex[..room]);
    serial
}

impl Subsystem {
    /// A subsystem with every optional field at its default: derived serial
    /// (with `serial_prefix`), model [`DEFAULT_MODEL`], any host allowed.
    pub fn with_defaults(nqn: &str, serial_prefix: &str, namespaces: Vec<Namespace>) -> Self {
        Subsystem {
            nqn: nqn.to_owned(),
            serial: derived_serial(serial_prefix, nqn),
            model: DEFAULT_MODEL.to_owned(),
            allow_any_host: true,
            hosts: Vec::new(),
            namespaces,
        }
    }
}

impl Namespace {
    /// A namespace with the default block size and the derived UUID.
    pub fn with_defaults(subsystem_nqn: &str, nsid: u32, backend: BackendChoice) -> Self {
        Namespace {
            nsid,
            backend,
            block_size: DEFAULT_BLOCK_SIZE,
            uuid: derived_uuid(subsystem_nqn, nsid),
            direct: false,
            ana_group: crate::DEFAULT_ANA_GROUP,
            hosts: None,
            qos: crate::qos::Qos::default(),
            pool: None,
            mirror: None,
            encryption: None,
        }
    }
}

impl Config {
    /// The embedded default: subsystem [`DEFAULT_NQN`], one 1 GiB RAM
    /// namespace (nsid 1, 512 B blocks), listener 127.0.0.1:4420, allow any
    /// host, and a dedicated discovery listener on 127.0.0.1:8009 so that
    /// `nvme discover` / `ebof discover` work with their default port.
    pub fn embedded_default() -> Config {
        let target = TargetTuning::default();
        let ns = Namespace::with_defaults(
            DEFAULT_NQN,
            1,
            BackendChoice::Ram {
                size: DEFAULT_RAM_SIZE,
            },
        );
        let subsystem = Subsystem::with_defaults(DEFAULT_NQN, &target.serial_prefix, vec![ns]);
        Config {
            target,
            listeners: vec![Listener {
                address: IpAddr::V4(Ipv4Addr::LOCALHOST),
                port: DEFAULT_PORT,
            }],
            discovery_settings: DiscoverySettings::default(),
            discovery: Some(Listener {
                address: IpAddr::V4(Ipv4Addr::LOCALHOST),
                port: DEFAULT_DISCOVERY_PORT,
            }),
            subsystems: vec![subsystem],
            management: Management::default(),
            metrics: None,
            ana: Vec::new(),
            hosts: Vec::new(),
            listener_tls: Vec::new(),
            rdma_listeners: Vec::new(),
            cdc: None,
            pools: Vec::new(),
            metrics_host_labels: false,
            metrics_per_host_io: false,
            mirror: crate::mirror::MirrorSettings::default(),
            witness: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_ids_are_pinned() {
        // Hosts remember namespace UUIDs and serials: these values must never
        // change from one release to the next.
        let uuid = Uuid::from_bytes(derived_uuid(DEFAULT_NQN, 1));
        assert_eq!(uuid.get_version_num(), 5);
        assert_eq!(uuid.get_variant(), uuid::Variant::RFC4122);
        assert_eq!(uuid.to_string(), PINNED_UUID);
        assert_eq!(derived_serial("EBOF", DEFAULT_NQN), PINNED_SERIAL);
        assert_ne!(derived_uuid(DEFAULT_NQN, 1), derived_uuid(DEFAULT_NQN, 2));
        assert_ne!(
            derived_uuid(DEFAULT_NQN, 1),
            derived_uuid("nqn.2026-11.io.ebof:other", 1)
        );
    }

    // Cross-checked with Python: uuid.uuid5(base, nqn + "\0\0\0\0\x01").
    const PINNED_UUID: &str = "a1b23a33-6fd8-5064-a0b6-590344646bf8";
    const PINNED_SERIAL: &str = "EBOFE67DB76E432F5B33";

    #[test]
    fn derived_serial_lengths() {
        assert_eq!(derived_serial("EBOF", "nqn.x").len(), 20);
        assert_eq!(derived_serial("", "nqn.x").len(), 20);
        assert_eq!(derived_serial(&"P".repeat(12), "nqn.x").len(), 20);
        assert_eq!(derived_serial(&"P".repeat(30), "nqn.x"), "P".repeat(20));
        assert_eq!(derived_serial("é", "nqn.x").chars().count(), 19);
    }

    #[test]
    fn backend_accessors() {
        let f = BackendChoice::File {
            path: "/a".into(),
            size: None,
        };
        assert_eq!(f.kind(), "file");
        assert_eq!(f.size(), None);
        assert_eq!(f.path(), Some(Path::new("/a")));
        assert_eq!(BackendChoice::Ram { size: 5 }.size(), Some(5));
        assert_eq!(BackendChoice::Block { path: "/b".into() }.kind(), "block");
    }

    #[test]
    fn listener_display() {
        let l = Listener {
            address: "::1".parse().unwrap(),
            port: 4420,
        };
        assert_eq!(l.to_string(), "[::1]:4420");
    }
}
