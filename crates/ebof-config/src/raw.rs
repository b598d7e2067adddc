//! The file as written: serde structs that mirror the TOML one to one, every
//! field optional and loosely typed, then converted field by field into the
//! typed [`Config`] so that each error can name its path.
//!
//! Numbers are read as `i64` and strings as `String` on purpose: a port of
//! 70000 or a size of "1X" then becomes an error with our code and path
//! instead of serde's generic "invalid value".

use std::fmt;
use std::path::PathBuf;

use serde::Deserialize;
use serde::de::{self, Deserializer, SeqAccess, Visitor};

use crate::error::{ConfigError, codes, quote};
use crate::model::{
    BackendChoice, Config, DEFAULT_BLOCK_SIZE, DEFAULT_DISCOVERY_PORT, DEFAULT_MANAGEMENT_PORT,
    DEFAULT_METRICS_PORT, DEFAULT_MODEL, DEFAULT_PORT, Listener, Management, Namespace, Subsystem,
    TargetTuning, Transport, derived_serial, derived_uuid,
};
use crate::parse::{
    MAX_CORE_ID, parse_core_list, parse_io_engine, parse_ip, parse_listener, parse_size,
};
use crate::validate::{TuningRule, rules};

/// The whole file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawConfig {
    /// `[target]`: global tuning; every key optional.
    target: Option<RawTarget>,
    /// `[[listeners]]`: I/O (and discovery) listeners.
    #[serde(default)]
    listeners: Vec<RawListener>,
    /// `[discovery]`: optional dedicated discovery listener, mDNS and referrals.
    discovery: Option<RawDiscovery>,
    /// `[[subsystems]]`: exported subsystems.
    #[serde(default)]
    subsystems: Vec<RawSubsystem>,
    /// `[management]`: the management API socket.
    management: Option<RawManagement>,
    /// `[metrics]`: the Prometheus endpoint.
    metrics: Option<RawMetrics>,
    /// `[[ana]]`: ANA states per listener and group.
    #[serde(default)]
    ana: Vec<crate::ana::RawAna>,
    /// `[[hosts]]`: per-host secrets.
    #[serde(default)]
    hosts: Vec<crate::security::RawHost>,
    /// `[cdc]`: run as a Central Discovery Controller.
    cdc: Option<RawCdc>,
    /// `[[pools]]`: storage pools.
    #[serde(default)]
    pools: Vec<crate::pool::RawPool>,
    /// `[mirror]`: replication link settings.
    mirror: Option<crate::mirror::RawMirror>,
    /// `[witness]`: keep leases for other boxes' mirrors.
    witness: Option<crate::mirror::RawWitness>,
}

/// `[cdc]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCdc {
    /// The members' discovery services, `ADDR[:PORT]` (port 8009 by default).
    members: Option<Vec<String>>,
    /// The host NQN of the CDC's connections to its members.
    hostnqn: Option<String>,
    /// Discovery controllers that may announce themselves (addresses or host NQNs).
    trusted: Option<Vec<String>>,
}

/// `[cdc]` as typed values: every member parsed (`cdc.members[i]`), none twice.
fn convert_cdc(c: RawCdc) -> Result<crate::model::Cdc, ConfigError> {
    let mut members = Vec::new();
    for (i, m) in c.members.unwrap_or_default().iter().enumerate() {
        let at = format!("cdc.members[{i}]");
        let l = parse_listener(m, DEFAULT_DISCOVERY_PORT).map_err(|e| e.at(at.clone()))?;
        if members.contains(&l) {
            return Err(ConfigError::new(
                codes::INVALID_ADDRESS,
                at,
                format!("member {l} is listed twice"),
            ));
        }
        members.push(l);
    }
    if let Some(n) = &c.hostnqn {
        crate::parse::check_nqn(n).map_err(|e| e.at("cdc.hostnqn"))?;
    }
    let mut trusted = Vec::new();
    for (i, t) in c.trusted.unwrap_or_default().iter().enumerate() {
        let at = format!("cdc.trusted[{i}]");
        let t = crate::model::TrustedAnnouncer::parse(t).map_err(|e| e.at(at.clone()))?;
        if trusted.contains(&t) {
            return Err(ConfigError::new(
                codes::INVALID_ADDRESS,
                at,
                format!("{t} is listed twice"),
            ));
        }
        trusted.push(t);
    }
    Ok(crate::model::Cdc {
        members,
        hostnqn: c.hostnqn,
        trusted,
    })
}

/// `[management]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawManagement {
    /// Unix socket path.
    socket: Option<String>,
    /// `false`: no management API.
    enabled: Option<bool>,
    /// `true`: every change made through the API is saved to the configuration file.
    autosave: Option<bool>,
    /// `ADDR:PORT` of the API over TCP (bearer token required).
    listen: Option<String>,
    /// The file holding the bearer token of `listen`.
    token_file: Option<String>,
    /// PEM certificate chain and key: `listen` speaks HTTPS.
    tls_cert: Option<String>,
    tls_key: Option<String>,
    /// Directories the API may put file namespaces and saved configurations in.
    data_dirs: Option<Vec<String>>,
    /// Block devices the API may open.
    block_devices: Option<Vec<String>>,
}

/// `[metrics]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMetrics {
    /// `ADDR:PORT` of the Prometheus endpoint.
    listen: Option<String>,
    /// Per-host series labelled with host NQNs.
    host_labels: Option<bool>,
    /// Count reads and writes per host NQN.
    per_host_io: Option<bool>,
}

/// `[target]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTarget {
    /// Reactor cores: `[0, 1]` or `"0-1,4"`; absent: all online cores.
    cores: Option<RawCores>,
    /// In-capsule data limit for I/O queues, bytes.
    io_inline_data: Option<i64>,
    /// MAXH2CDATA advertised in ICResp, bytes.
    max_h2c_data: Option<i64>,
    /// Largest C2HData PDU payload we send, bytes.
    c2h_data_max: Option<i64>,
    /// Largest transfer of one command (MDTS), bytes.
    max_transfer: Option<i64>,
    /// I/O queues per controller.
    max_io_queues: Option<i64>,
    /// Namespaces per subsystem.
    max_namespaces: Option<i64>,
    /// Entries per queue (MQES+1).
    max_queue_size: Option<i64>,
    /// Controller ID range of this box.
    cntlid_min: Option<i64>,
    cntlid_max: Option<i64>,
    /// ICReq + Connect deadline, milliseconds.
    handshake_timeout_ms: Option<i64>,
    /// Connection caps.
    max_connections: Option<i64>,
    max_connections_per_address: Option<i64>,
    /// Prefix of derived serial numbers.
    serial_prefix: Option<String>,
    /// Back RAM namespaces with transparent huge pages.
    ram_huge_pages: Option<bool>,
    /// "io_uring" | "threads".
    io_engine: Option<String>,
    /// Worker threads per core for file and block I/O.
    io_threads: Option<i64>,
    /// Directory for persisted state (reservations with PTPL).
    state_dir: Option<String>,
    /// Full-size-record equivalents under one TLS key before a KeyUpdate.
    tls_rekey_records: Option<i64>,
    /// "peer" | "always".
    tls_key_update: Option<String>,
}

/// `[[listeners]]` and `[discovery]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawListener {
    /// IP literal; required.
    address: Option<String>,
    /// TCP port; default 4420 (8009 for `[discovery]`).
    port: Option<i64>,
    /// "off" | "optional" | "required" (`[[listeners]]` only).
    tls: Option<String>,
    /// "tcp" (default) | "rdma".
    transport: Option<String>,
}

/// `[discovery]`: a dedicated discovery listener (when `address` is set) and the discovery
/// service's settings.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDiscovery {
    /// IP literal of a dedicated discovery listener.
    address: Option<String>,
    /// Its TCP port; default 8009.
    port: Option<i64>,
    /// Not allowed here (discovery is answered on every listener).
    tls: Option<String>,
    /// "tcp" (default) | "rdma".
    transport: Option<String>,
    /// Publish the discovery listeners over mDNS (TP 8009); absent: every listener that is
    /// not on a loopback address.
    mdns: Option<bool>,
    /// Other discovery services to refer hosts to, `ADDR[:PORT]` (port 8009 by default).
    referrals: Option<Vec<String>>,
    /// A Central Discovery Controller to announce this box's discovery service to (DIM pull
    /// registration), `ADDR[:PORT]` (port 8009 by default).
    cdc: Option<String>,
}

/// `[discovery]`: the dedicated listener (if any, RDMA ones also pushed on `rdma`) and the
/// discovery settings.
fn convert_discovery(
    d: RawDiscovery,
    rdma: &mut Vec<Listener>,
) -> Result<(Option<Listener>, crate::model::DiscoverySettings), ConfigError> {
    if d.tls.is_some() {
        return Err(ConfigError::new(
            codes::INVALID_TLS_MODE,
            "discovery.tls",
            "set tls on a [[listeners]] entry (discovery is answered on every listener)",
        ));
    }
    let mut referrals = Vec::new();
    for (i, r) in d.referrals.unwrap_or_default().iter().enumerate() {
        let at = format!("discovery.referrals[{i}]");
        let l = parse_listener(r, DEFAULT_DISCOVERY_PORT).map_err(|e| e.at(at.clone()))?;
        if referrals.contains(&l) {
            return Err(ConfigError::new(
                codes::INVALID_ADDRESS,
                at,
                format!("referral {l} is listed twice"),
            ));
        }
        referrals.push(l);
    }
    let cdc = match &d.cdc {
        Some(c) => {
            Some(parse_listener(c, DEFAULT_DISCOVERY_PORT).map_err(|e| e.at("discovery.cdc"))?)
        }
        None => None,
    };
    let settings = crate::model::DiscoverySettings {
        mdns: d.mdns,
        referrals,
        cdc,
    };
    let listener = match d.address {
        None if d.port.is_some() || d.transport.is_some() => {
            return Err(ConfigError::new(
                codes::INVALID_ADDRESS,
                "discovery.address",
                "a dedicated discovery listener needs an address (port and transport alone do not make one)",
            ));
        }
        None => None,
        Some(address) => {
            let mut l = RawListener {
                address: Some(address),
                port: d.port,
                tls: None,
                transport: d.transport,
            };
            let transport = take_transport(&mut l, "discovery")?;
            let l = convert_listener(l, "discovery", DEFAULT_DISCOVERY_PORT)?;
            if transport == Transport::Rdma {
                rdma.push(l);
            }
            Some(l)
        }
    };
    Ok((listener, settings))
}

/// The transport of a raw listener at `path`; an RDMA listener may not ask for TLS (TLS is
/// NVMe/TCP's).
fn take_transport(l: &mut RawListener, path: &str) -> Result<Transport, ConfigError> {
    let t = match l.transport.take() {
        None => Transport::Tcp,
        Some(s) => Transport::parse(&s).ok_or_else(|| {
            ConfigError::new(
                codes::INVALID_TRANSPORT,
                format!("{path}.transport"),
                format!("{s:?} is not a transport: use \"tcp\" or \"rdma\""),
            )
        })?,
    };
    if t == Transport::Rdma && l.tls.as_deref().is_some_and(|m| m != "off") {
        return Err(ConfigError::new(
            codes::INVALID_TRANSPORT,
            format!("{path}.tls"),
            "TLS is for NVMe/TCP: an RDMA listener cannot use it",
        ));
    }
    Ok(t)
}

/// `[[subsystems]]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSubsystem {
    /// Subsystem NQN; required.
    nqn: Option<String>,
    /// Serial number; default derived from the NQN.
    serial: Option<String>,
    /// Model number; default "ebof".
    model: Option<String>,
    /// Default: true when `hosts` is empty.
    allow_any_host: Option<bool>,
    /// Allowed host NQNs.
    #[serde(default)]
    hosts: Vec<String>,
    /// `[[subsystems.namespaces]]`.
    #[serde(default)]
    namespaces: Vec<NamespaceFields>,
}

/// The fields of one namespace as written: a `[[subsystems.namespaces]]` table of the file, or
/// what a management API request to add a namespace says. Every field optional and loosely
/// typed; [`Namespace::from_fields`] turns them into a [`Namespace`] for both, so the file and
/// the API accept the same namespaces and refuse the same ones with the same codes and field
/// paths.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamespaceFields {
    /// NSID; default: position + 1.
    pub nsid: Option<i64>,
    /// "ram" | "file" | "block"; required.
    pub backend: Option<String>,
    /// Integer bytes or "1G"-style string.
    pub size: Option<SizeField>,
    /// File or device path.
    pub path: Option<String>,
    /// 512 or 4096; default 512.
    pub block_size: Option<i64>,
    /// Namespace UUID; default derived from (nqn, nsid).
    pub uuid: Option<String>,
    /// O_DIRECT for file and block backends; default false.
    pub direct: Option<bool>,
    /// ANA group; default 1.
    pub ana_group: Option<i64>,
    /// Host NQNs that may see the namespace; absent: every host the subsystem admits.
    pub hosts: Option<Vec<String>>,
    /// QoS limits (`qos = { iops = …, mbps = … }`); absent: unlimited.
    pub qos: Option<crate::qos::QosFields>,
    /// The storage pool owning the file (`file` only); absent: none.
    pub pool: Option<String>,
    /// `mirror = { peer = "ADDR:PORT", role = "primary" | "secondary" }`; absent: not mirrored.
    pub mirror: Option<crate::mirror::MirrorFields>,
    /// `encryption = { key_file = "PATH" }` (ADR 0029); absent: not encrypted by its own key.
    pub encryption: Option<crate::crypt::EncryptionFields>,
}

/// A size as written: an integer or a string with a unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SizeField {
    /// Bytes (a negative number is refused).
    Int(i64),
    /// `4096`, `512M`, `1G`, … as [`crate::parse_size`] reads it.
    Str(String),
}

impl From<u64> for SizeField {
    /// Bytes as the TOML reader gives them: beyond `i64`, the digits, for `parse_size` to judge.
    fn from(v: u64) -> SizeField {
        i64::try_from(v).map_or_else(|_| SizeField::Str(v.to_string()), SizeField::Int)
    }
}

impl<'de> Deserialize<'de> for SizeField {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = SizeField;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a size: integer bytes or a string such as \"1G\"")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<SizeField, E> {
                Ok(SizeField::Int(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<SizeField, E> {
                Ok(SizeField::from(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<SizeField, E> {
                Ok(SizeField::Str(v.to_owned()))
            }
        }
        d.deserialize_any(V)
    }
}

/// A core list as written: an array of integers or a string such as "0-3".
#[derive(Debug)]
enum RawCores {
    List(Vec<i64>),
    Str(String),
}

impl<'de> Deserialize<'de> for RawCores {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawCores;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a core list: an array of integers or a string such as \"0-1,4\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RawCores, E> {
                Ok(RawCores::Str(v.to_owned()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RawCores, A::Error> {
                let mut cores = Vec::new();
                while let Some(core) = seq.next_element::<i64>()? {
                    cores.push(core);
                }
                Ok(RawCores::List(cores))
            }
        }
        d.deserialize_any(V)
    }
}

/// Parses TOML text into the raw structs, mapping serde/TOML errors to a
/// code, the field path serde was at, and a line/column.
pub(crate) fn parse_raw(text: &str) -> Result<RawConfig, ConfigError> {
    let de = toml::Deserializer::new(text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = match e.path().to_string() {
            p if p == "." => String::new(),
            p => p,
        };
        let inner = e.into_inner();
        let detail = inner.message().trim().replace('\n', "; ");
        let code = if detail.starts_with("unknown field") {
            codes::UNKNOWN_FIELD
        } else if detail.starts_with("invalid type")
            || detail.starts_with("invalid value")
            || detail.starts_with("invalid length")
        {
            codes::INVALID_TYPE
        } else if detail.starts_with("missing field") {
            codes::MISSING_FIELD
        } else {
            codes::PARSE
        };
        let message = match inner.span() {
            Some(span) => {
                let (line, column) = line_column(text, span.start);
                format!("line {line}, column {column}: {detail}")
            }
            None => detail,
        };
        ConfigError::new(code, path, message)
    })
}

/// 1-based line and column (in characters) of byte offset `at`.
fn line_column(text: &str, at: usize) -> (usize, usize) {
    let mut at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    let before = &text[..at];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

fn int<T: TryFrom<i64>>(
    v: i64,
    path: &str,
    code: &'static str,
    range: &str,
) -> Result<T, ConfigError> {
    let field = path.rsplit('.').next().unwrap_or(path);
    T::try_from(v).map_err(|_| {
        ConfigError::new(
            code,
            path,
            format!("{field} = {v} is out of range ({range})"),
        )
    })
}

fn required<T>(v: Option<T>, path: &str, what: &str) -> Result<T, ConfigError> {
    v.ok_or_else(|| ConfigError::new(codes::MISSING_FIELD, path, format!("{what} is required")))
}

impl RawConfig {
    /// Converts to typed values and resolves defaults. Checks only what the
    /// typed values cannot express (notation, representability, which
    /// fields a backend takes); [`Config::validate`] checks the rest.
    pub(crate) fn into_config(self) -> Result<Config, ConfigError> {
        let target = convert_target(self.target.unwrap_or_default())?;
        let mut listeners = Vec::new();
        let mut listener_tls = Vec::new();
        let mut rdma_listeners = Vec::new();
        for (i, mut l) in self.listeners.into_iter().enumerate() {
            let path = format!("listeners[{i}]");
            let transport = take_transport(&mut l, &path)?;
            let tls = l.tls.take();
            let listener = convert_listener(l, &path, DEFAULT_PORT)?;
            if transport == Transport::Rdma {
                rdma_listeners.push(listener);
            }
            if let Some(t) = tls {
                let mode =
                    crate::security::parse_tls_mode(&t).map_err(|e| e.at(format!("{path}.tls")))?;
                if mode != crate::TlsMode::Off {
                    listener_tls.push((listener, mode));
                }
            }
            listeners.push(listener);
        }
        let (discovery, discovery_settings) = match self.discovery {
            Some(d) => convert_discovery(d, &mut rdma_listeners)?,
            None => (None, crate::model::DiscoverySettings::default()),
        };
        let subsystems = self
            .subsystems
            .into_iter()
            .enumerate()
            .map(|(i, s)| convert_subsystem(s, &format!("subsystems[{i}]"), &target))
            .collect::<Result<_, _>>()?;
        let management = convert_management(self.management.unwrap_or_default())?;
        let metrics_host_labels = self
            .metrics
            .as_ref()
            .and_then(|m| m.host_labels)
            .unwrap_or(false);
        let metrics_per_host_io = self
            .metrics
            .as_ref()
            .and_then(|m| m.per_host_io)
            .unwrap_or(false);
        let metrics = match self.metrics.and_then(|m| m.listen) {
            None => None,
            Some(l) => {
                Some(parse_listener(&l, DEFAULT_METRICS_PORT).map_err(|e| e.at("metrics.listen"))?)
            }
        };
        let ana = crate::ana::convert(self.ana)?;
        let hosts = crate::security::convert(self.hosts)?;
        let cdc = self.cdc.map(convert_cdc).transpose()?;
        let pools = crate::pool::convert(self.pools)?;
        let mirror = crate::mirror::convert_mirror(self.mirror)?;
        let witness = self
            .witness
            .map(crate::mirror::convert_witness)
            .transpose()?;
        Ok(Config {
            target,
            listeners,
            discovery,
            discovery_settings,
            subsystems,
            management,
            metrics,
            ana,
            hosts,
            listener_tls,
            rdma_listeners,
            cdc,
            pools,
            metrics_host_labels,
            metrics_per_host_io,
            mirror,
            witness,
        })
    }
}

fn convert_target(raw: RawTarget) -> Result<TargetTuning, ConfigError> {
    let d = TargetTuning::default();
    let cores = match raw.cores {
        None => None,
        Some(RawCores::Str(s)) => Some(parse_core_list(&s).map_err(|e| e.at("target.cores"))?),
        Some(RawCores::List(list)) => Some(
            list.into_iter()
                .enumerate()
                .map(|(i, c)| {
                    usize::try_from(c)
                        .ok()
                        .filter(|c| *c <= MAX_CORE_ID)
                        .ok_or_else(|| {
                            ConfigError::new(
                                codes::INVALID_CORES,
                                format!("target.cores[{i}]"),
                                format!("core id {c} is out of range (0..={MAX_CORE_ID})"),
                            )
                        })
                })
                .collect::<Result<_, _>>()?,
        ),
    };
    // Range-check first (in i64) so that the error is the same as the one
    // `validate` gives; the narrowing below then cannot fail.
    fn field<T: TryFrom<i64>>(
        v: Option<i64>,
        rule: &TuningRule,
        default: T,
    ) -> Result<T, ConfigError> {
        match v {
            None => Ok(default),
            Some(v) => {
                rule.check(i128::from(v))?;
                T::try_from(v).map_err(|_| rule.error(format!("{v} does not fit")))
            }
        }
    }
    Ok(TargetTuning {
        cores,
        io_inline_data: field(raw.io_inline_data, &rules::IO_INLINE_DATA, d.io_inline_data)?,
        max_h2c_data: field(raw.max_h2c_data, &rules::MAX_H2C_DATA, d.max_h2c_data)?,
        c2h_data_max: field(raw.c2h_data_max, &rules::C2H_DATA_MAX, d.c2h_data_max)?,
        max_transfer: field(raw.max_transfer, &rules::MAX_TRANSFER, d.max_transfer)?,
        max_io_queues: field(raw.max_io_queues, &rules::MAX_IO_QUEUES, d.max_io_queues)?,
        max_namespaces: field(raw.max_namespaces, &rules::MAX_NAMESPACES, d.max_namespaces)?,
        max_queue_size: field(raw.max_queue_size, &rules::MAX_QUEUE_SIZE, d.max_queue_size)?,
        cntlid_min: field(raw.cntlid_min, &rules::CNTLID_MIN, d.cntlid_min)?,
        cntlid_max: field(raw.cntlid_max, &rules::CNTLID_MAX, d.cntlid_max)?,
        handshake_timeout_ms: field(
            raw.handshake_timeout_ms,
            &rules::HANDSHAKE_TIMEOUT_MS,
            d.handshake_timeout_ms,
        )?,
        max_connections: field(
            raw.max_connections,
            &rules::MAX_CONNECTIONS,
            d.max_connections,
        )?,
        max_connections_per_address: field(
            raw.max_connections_per_address,
            &rules::MAX_CONNECTIONS_PER_ADDRESS,
            d.max_connections_per_address,
        )?,
        serial_prefix: raw.serial_prefix.unwrap_or(d.serial_prefix),
        ram_huge_pages: raw.ram_huge_pages.unwrap_or(d.ram_huge_pages),
        io_engine: match raw.io_engine {
            None => d.io_engine,
            Some(s) => parse_io_engine(&s).map_err(|e| e.at("target.io_engine"))?,
        },
        io_threads: field(raw.io_threads, &rules::IO_THREADS, d.io_threads)?,
        state_dir: match raw.state_dir {
            None => None,
            Some(s) if s.is_empty() || s.contains('\0') => {
                return Err(ConfigError::new(
                    codes::INVALID_PATH,
                    "target.state_dir",
                    "the state directory must be a non-empty path without NUL bytes",
                ));
            }
            Some(s) => Some(PathBuf::from(s)),
        },
        tls_rekey_records: field(
            raw.tls_rekey_records,
            &rules::TLS_REKEY_RECORDS,
            d.tls_rekey_records,
        )?,
        tls_key_update: match raw.tls_key_update.as_deref() {
            None => d.tls_key_update,
            Some("peer") => crate::model::TlsKeyUpdate::Peer,
            Some("always") => crate::model::TlsKeyUpdate::Always,
            Some(other) => {
                return Err(rules::TLS_REKEY_RECORDS.error_at(
                    "tls_key_update",
                    format!("tls_key_update = {other:?}: expected \"peer\" or \"always\""),
                ));
            }
        },
    })
}

fn convert_management(raw: RawManagement) -> Result<Management, ConfigError> {
    let path = |v: Option<String>, field: &str, what: &str| match v {
        None => Ok(None),
        Some(s) if s.is_empty() || s.contains('\0') => Err(ConfigError::new(
            codes::INVALID_PATH,
            format!("management.{field}"),
            format!("the {what} path must be a non-empty path without NUL bytes"),
        )),
        Some(s) => Ok(Some(PathBuf::from(s))),
    };
    let listen = match raw.listen {
        None => None,
        Some(l) => Some(
            parse_listener(&l, DEFAULT_MANAGEMENT_PORT).map_err(|e| e.at("management.listen"))?,
        ),
    };
    let absolute_list = |v: Option<Vec<String>>, field: &str, what: &str| {
        let mut out: Vec<PathBuf> = Vec::new();
        for (i, s) in v.unwrap_or_default().into_iter().enumerate() {
            let at = format!("management.{field}[{i}]");
            if s.is_empty() || s.contains('\0') || !s.starts_with('/') {
                return Err(ConfigError::new(
                    codes::INVALID_PATH,
                    at,
                    format!("{s:?}: a {what} must be an absolute path without NUL bytes"),
                ));
            }
            let p = PathBuf::from(s);
            if out.contains(&p) {
                return Err(ConfigError::new(
                    codes::DUPLICATE_PATH,
                    at,
                    format!("{} is listed twice", p.display()),
                ));
            }
            out.push(p);
        }
        Ok(out)
    };
    Ok(Management {
        socket: path(raw.socket, "socket", "socket")?,
        disabled: raw.enabled == Some(false),
        autosave: raw.autosave == Some(true),
        listen,
        token_file: path(raw.token_file, "token_file", "token file")?,
        tls_cert: path(raw.tls_cert, "tls_cert", "certificate")?,
        tls_key: path(raw.tls_key, "tls_key", "private key")?,
        data_dirs: absolute_list(raw.data_dirs, "data_dirs", "data directory")?,
        block_devices: absolute_list(raw.block_devices, "block_devices", "block device")?,
    })
}

fn convert_listener(
    raw: RawListener,
    path: &str,
    default_port: u16,
) -> Result<Listener, ConfigError> {
    let address_path = format!("{path}.address");
    let address = required(raw.address, &address_path, "address")?;
    let address = parse_ip(&address).map_err(|e| e.at(address_path))?;
    let port = match raw.port {
        None => default_port,
        Some(p) => int(p, &format!("{path}.port"), codes::INVALID_PORT, "0..=65535")?,
    };
    Ok(Listener { address, port })
}

fn convert_subsystem(
    raw: RawSubsystem,
    path: &str,
    target: &TargetTuning,
) -> Result<Subsystem, ConfigError> {
    let nqn = required(raw.nqn, &format!("{path}.nqn"), "nqn")?;
    let namespaces = raw
        .namespaces
        .into_iter()
        .enumerate()
        .map(|(j, ns)| Namespace::from_fields(ns, &format!("{path}.namespaces[{j}]"), j, &nqn))
        .collect::<Result<_, _>>()?;
    Ok(Subsystem {
        serial: raw
            .serial
            .unwrap_or_else(|| derived_serial(&target.serial_prefix, &nqn)),
        model: raw.model.unwrap_or_else(|| DEFAULT_MODEL.to_owned()),
        allow_any_host: raw.allow_any_host.unwrap_or(raw.hosts.is_empty()),
        hosts: raw.hosts,
        namespaces,
        nqn,
    })
}

impl Namespace {
    /// The one constructor of a namespace from what was written, for the configuration file and
    /// the management API alike: notation, representability and which fields a backend takes
    /// are checked here (errors name `{path}.{field}`, e.g. `subsystems[0].namespaces[1].size`),
    /// ranges and uniqueness by [`Config::validate`] once the namespace is in a configuration.
    /// Without `nsid` the namespace is numbered `position + 1`; without `uuid` it gets
    /// [`derived_uuid`] of (`nqn`, NSID).
    pub fn from_fields(
        raw: NamespaceFields,
        path: &str,
        position: usize,
        nqn: &str,
    ) -> Result<Namespace, ConfigError> {
        let nsid = match raw.nsid {
            Some(n) => int(
                n,
                &format!("{path}.nsid"),
                codes::INVALID_NSID,
                "1..=4294967294",
            )?,
            None => u32::try_from(position + 1).map_err(|_| {
                ConfigError::new(
                    codes::INVALID_NSID,
                    format!("{path}.nsid"),
                    "too many namespaces",
                )
            })?,
        };
        let block_size = match raw.block_size {
            Some(b) => int(
                b,
                &format!("{path}.block_size"),
                codes::INVALID_BLOCK_SIZE,
                "512 or 4096",
            )?,
            None => DEFAULT_BLOCK_SIZE,
        };
        let size_path = format!("{path}.size");
        let size = raw
            .size
            .map(|s| match s {
                SizeField::Int(v) => u64::try_from(v).map_err(|_| {
                    ConfigError::new(
                        codes::INVALID_SIZE,
                        &size_path,
                        format!("size {v} is negative"),
                    )
                }),
                SizeField::Str(s) => parse_size(&s).map_err(|e| e.at(&size_path)),
            })
            .transpose()?;
        let path_path = format!("{path}.path");
        let backend_path = format!("{path}.backend");
        let backend = required(
            raw.backend,
            &backend_path,
            "backend (\"ram\", \"file\" or \"block\")",
        )?;
        let forbidden = |field: &str, why: &str| {
            ConfigError::new(
                codes::FORBIDDEN_FIELD,
                format!("{path}.{field}"),
                format!("backend \"{backend}\" does not take `{field}`: {why}"),
            )
        };
        if raw.pool.is_some() && backend != "file" {
            return Err(forbidden("pool", "pools hold file namespaces"));
        }
        let backend = match backend.as_str() {
            "ram" => {
                if raw.path.is_some() {
                    return Err(forbidden("path", "RAM namespaces have no backing file"));
                }
                if raw.direct.is_some() {
                    return Err(forbidden(
                        "direct",
                        "RAM namespaces have no page cache to bypass",
                    ));
                }
                let size = required(size, &size_path, "size (for backend \"ram\")")?;
                BackendChoice::Ram { size }
            }
            "file" => BackendChoice::File {
                path: PathBuf::from(required(
                    raw.path,
                    &path_path,
                    "path (for backend \"file\")",
                )?),
                size,
            },
            "block" => {
                if size.is_some() {
                    return Err(forbidden("size", "the size is the block device's"));
                }
                BackendChoice::Block {
                    path: PathBuf::from(required(
                        raw.path,
                        &path_path,
                        "path (for backend \"block\")",
                    )?),
                }
            }
            other => {
                return Err(ConfigError::new(
                    codes::INVALID_BACKEND,
                    backend_path,
                    format!(
                        "unknown backend {} (expected \"ram\", \"file\" or \"block\")",
                        quote(other)
                    ),
                ));
            }
        };
        let uuid = match raw.uuid {
            Some(u) => *uuid::Uuid::parse_str(u.trim())
                .map_err(|e| {
                    ConfigError::new(
                        codes::INVALID_UUID,
                        format!("{path}.uuid"),
                        format!("{} is not a UUID: {e}", quote(&u)),
                    )
                })?
                .as_bytes(),
            None => derived_uuid(nqn, nsid),
        };
        let ana_group = match raw.ana_group {
            Some(g) => {
                crate::ana::check_ana_group(g).map_err(|e| e.at(format!("{path}.ana_group")))?
            }
            None => crate::ana::DEFAULT_ANA_GROUP,
        };
        Ok(Namespace {
            nsid,
            backend,
            block_size,
            uuid,
            direct: raw.direct.unwrap_or(false),
            ana_group,
            hosts: raw.hosts,
            qos: match &raw.qos {
                Some(q) => q.check(&format!("{path}.qos"))?,
                None => crate::qos::Qos::default(),
            },
            pool: match raw.pool {
                Some(p) => {
                    crate::pool::check_pool_name(&p).map_err(|e| e.at(format!("{path}.pool")))?;
                    Some(p)
                }
                None => None,
            },
            mirror: raw
                .mirror
                .as_ref()
                .map(|m| m.check(&format!("{path}.mirror")))
                .transpose()?,
            encryption: raw
                .encryption
                .as_ref()
                .map(|e| e.check(&format!("{path}.encryption")))
                .transpose()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_column_counts() {
        let t = "a\nbc\né";
        assert_eq!(line_column(t, 0), (1, 1));
        assert_eq!(line_column(t, 3), (2, 2));
        assert_eq!(line_column(t, 5), (3, 1));
        assert_eq!(line_column(t, 6), (3, 1)); // inside 'é'
        assert_eq!(line_column(t, 999), (3, 2));
    }
}
