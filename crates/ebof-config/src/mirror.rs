//! Replicated volumes (ADR 0028): a namespace's `mirror = { peer, role }`, the box-wide
//! `[mirror]` settings of its replication links, and `[witness]`, which makes the box a lease
//! witness for other boxes' mirrors.
//!
//! This module holds the typed values, their conversion from what was written, their checks
//! (code `invalid-mirror`) and their emission; running a mirror is `ebof-mirror`'s and the
//! management plane's.

use std::fmt::Write as _;
use std::net::SocketAddr;

use serde::Deserialize;

use crate::error::{ConfigError, codes, quote};
use crate::model::{BackendChoice, Config, DEFAULT_PORT};
use crate::parse::{check_nqn, parse_listener};

/// The host NQN replication links connect with by default (`[mirror] link_hostnqn`).
pub const DEFAULT_LINK_HOSTNQN: &str = "nqn.2026-11.io.ebof:mirror-link";
/// Default lease length (`[mirror] lease_ms`).
pub const DEFAULT_LEASE_MS: u32 = 4000;
/// Shortest lease accepted.
pub const LEASE_MS_MIN: u32 = 100;
/// Longest lease accepted (the witness's own bound).
pub const LEASE_MS_MAX: u32 = 60_000;
/// Default I/O queues of a replication link.
pub const DEFAULT_LINK_QUEUES: u16 = 2;
/// Most I/O queues of a replication link.
pub const LINK_QUEUES_MAX: u16 = 16;
/// Default write-intent bitmap granularity (`[mirror] region_kib`).
pub const DEFAULT_REGION_KIB: u32 = 1024;
/// Default longest lease a witness grants (`[witness] lease_max_ms`).
pub const DEFAULT_LEASE_MAX_MS: u32 = 10_000;

/// The role a mirrored namespace takes on its first start (afterwards the persisted epoch and
/// the witness decide, see ADR 0028).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MirrorRole {
    /// Serves host I/O and replicates writes to the peer.
    Primary,
    /// Takes only the primary's replication writes; its paths are ANA inaccessible.
    Secondary,
}

impl MirrorRole {
    /// `"primary"` or `"secondary"`.
    pub fn as_str(self) -> &'static str {
        match self {
            MirrorRole::Primary => "primary",
            MirrorRole::Secondary => "secondary",
        }
    }

    /// The role named `s` (`"primary"` or `"secondary"`).
    pub fn parse(s: &str) -> Option<MirrorRole> {
        match s.trim() {
            "primary" => Some(MirrorRole::Primary),
            "secondary" => Some(MirrorRole::Secondary),
            _ => None,
        }
    }
}

/// A namespace's `mirror = { peer = "ADDR:PORT", role = "primary" | "secondary" }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NamespaceMirror {
    /// The other box's NVMe/TCP listener (port 4420 when not written).
    pub peer: SocketAddr,
    /// The role on the first start.
    pub role: MirrorRole,
}

/// `mirror = { … }` as written (a namespace table of the file or an API request).
#[derive(Debug, Default, Clone, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct MirrorFields {
    /// `ADDR[:PORT]` of the peer's NVMe/TCP listener; required.
    pub peer: Option<String>,
    /// `"primary"` or `"secondary"`; required.
    pub role: Option<String>,
}

impl MirrorFields {
    /// The typed value; errors name `{path}.peer` / `{path}.role`.
    pub fn check(&self, path: &str) -> Result<NamespaceMirror, ConfigError> {
        let missing = |f: &str| {
            ConfigError::new(
                codes::MISSING_FIELD,
                format!("{path}.{f}"),
                format!("a mirror needs `{f}`"),
            )
        };
        let peer = self.peer.as_deref().ok_or_else(|| missing("peer"))?;
        let peer = parse_listener(peer, DEFAULT_PORT)
            .map_err(|e| e.at(format!("{path}.peer")))?
            .socket_addr();
        if peer.ip().is_unspecified() || peer.port() == 0 {
            return Err(ConfigError::new(
                codes::INVALID_MIRROR,
                format!("{path}.peer"),
                format!("{peer} is not an address a box can connect to"),
            ));
        }
        let role = self.role.as_deref().ok_or_else(|| missing("role"))?;
        let role = MirrorRole::parse(role).ok_or_else(|| {
            ConfigError::new(
                codes::INVALID_MIRROR,
                format!("{path}.role"),
                format!(
                    "{} is not a role: use \"primary\" or \"secondary\"",
                    quote(role)
                ),
            )
        })?;
        Ok(NamespaceMirror { peer, role })
    }

    /// What a typed value is written as.
    pub fn from_mirror(m: &NamespaceMirror) -> MirrorFields {
        MirrorFields {
            peer: Some(m.peer.to_string()),
            role: Some(m.role.as_str().to_owned()),
        }
    }
}

/// `[mirror]`: how this box runs the replication links of its mirrored namespaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorSettings {
    /// `witness = "ADDR:PORT"`: a box with `[witness]` that decides who may be primary; `None`:
    /// promotion is manual (`ebof ctl ns mirror promote`).
    pub witness: Option<SocketAddr>,
    /// `lease_ms`: the primary's lease, [`LEASE_MS_MIN`]..=[`LEASE_MS_MAX`] (default 4000).
    pub lease_ms: u32,
    /// `resync_mbps`: resync rate limit in MB/s (10^6 bytes); 0 (default): unlimited.
    pub resync_mbps: u32,
    /// `link_hostnqn`: the host NQN of replication links and witness requests.
    pub link_hostnqn: String,
    /// `link_queues`: I/O queues of a replication link, 1..=[`LINK_QUEUES_MAX`] (default 2).
    /// The link uses one queue today (issue 34: more with the write-path work).
    pub link_queues: u16,
    /// `region_kib`: write-intent bitmap granularity in KiB, a power of two 4..=1048576
    /// (default 1024).
    pub region_kib: u32,
}

impl Default for MirrorSettings {
    fn default() -> Self {
        MirrorSettings {
            witness: None,
            lease_ms: DEFAULT_LEASE_MS,
            resync_mbps: 0,
            link_hostnqn: DEFAULT_LINK_HOSTNQN.to_owned(),
            link_queues: DEFAULT_LINK_QUEUES,
            region_kib: DEFAULT_REGION_KIB,
        }
    }
}

/// `[witness]`: this box keeps leases for other boxes' mirrors (subsystem
/// `nqn.2026-11.io.ebof:witness`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WitnessSettings {
    /// `lease_max_ms`: the longest lease granted, [`LEASE_MS_MIN`]..=[`LEASE_MS_MAX`]; also how
    /// long a freshly started witness grants nothing (it remembers no lease).
    pub lease_max_ms: u32,
    /// `hosts`: the host NQNs that may ask for leases (default: [`DEFAULT_LINK_HOSTNQN`]
    /// only). Pair them with `[[hosts]]` DH-HMAC-CHAP keys: a lease decides which box writes.
    pub hosts: Vec<String>,
}

impl Default for WitnessSettings {
    fn default() -> Self {
        WitnessSettings {
            lease_max_ms: DEFAULT_LEASE_MAX_MS,
            hosts: vec![DEFAULT_LINK_HOSTNQN.to_owned()],
        }
    }
}

/// `[mirror]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMirror {
    witness: Option<String>,
    lease_ms: Option<i64>,
    resync_mbps: Option<i64>,
    link_hostnqn: Option<String>,
    link_queues: Option<i64>,
    region_kib: Option<i64>,
}

/// `[witness]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawWitness {
    lease_max_ms: Option<i64>,
    hosts: Option<Vec<String>>,
}

fn range<T: TryFrom<i64>>(v: i64, path: &str, lo: i64, hi: i64) -> Result<T, ConfigError> {
    if v < lo || v > hi {
        return Err(ConfigError::new(
            codes::INVALID_MIRROR,
            path,
            format!("{v} is out of range ({lo}..={hi})"),
        ));
    }
    T::try_from(v)
        .map_err(|_| ConfigError::new(codes::INVALID_MIRROR, path, format!("{v} is too large")))
}

pub(crate) fn convert_mirror(raw: Option<RawMirror>) -> Result<MirrorSettings, ConfigError> {
    let d = MirrorSettings::default();
    let Some(raw) = raw else { return Ok(d) };
    let witness = match raw.witness {
        None => None,
        Some(w) => Some(
            parse_listener(&w, DEFAULT_PORT)
                .map_err(|e| e.at("mirror.witness"))?
                .socket_addr(),
        ),
    };
    let (lo, hi) = (i64::from(LEASE_MS_MIN), i64::from(LEASE_MS_MAX));
    let region_kib = match raw.region_kib {
        None => d.region_kib,
        Some(v) => {
            let r: u32 = range(v, "mirror.region_kib", 4, 1 << 20)?;
            if !r.is_power_of_two() {
                return Err(ConfigError::new(
                    codes::INVALID_MIRROR,
                    "mirror.region_kib",
                    format!("{r} is not a power of two"),
                ));
            }
            r
        }
    };
    let link_hostnqn = match raw.link_hostnqn {
        None => d.link_hostnqn,
        Some(n) => {
            check_nqn(&n).map_err(|e| e.at("mirror.link_hostnqn"))?;
            n
        }
    };
    Ok(MirrorSettings {
        witness,
        lease_ms: raw
            .lease_ms
            .map_or(Ok(d.lease_ms), |v| range(v, "mirror.lease_ms", lo, hi))?,
        resync_mbps: raw.resync_mbps.map_or(Ok(0), |v| {
            range(v, "mirror.resync_mbps", 0, i64::from(u32::MAX))
        })?,
        link_hostnqn,
        link_queues: raw.link_queues.map_or(Ok(d.link_queues), |v| {
            range(v, "mirror.link_queues", 1, i64::from(LINK_QUEUES_MAX))
        })?,
        region_kib,
    })
}

pub(crate) fn convert_witness(raw: RawWitness) -> Result<WitnessSettings, ConfigError> {
    let d = WitnessSettings::default();
    let lease_max_ms = raw.lease_max_ms.map_or(Ok(d.lease_max_ms), |v| {
        range(
            v,
            "witness.lease_max_ms",
            i64::from(LEASE_MS_MIN),
            i64::from(LEASE_MS_MAX),
        )
    })?;
    let hosts = match raw.hosts {
        None => d.hosts,
        Some(h) => {
            for (i, n) in h.iter().enumerate() {
                check_nqn(n).map_err(|e| e.at(format!("witness.hosts[{i}]")))?;
                if h[..i].contains(n) {
                    return Err(ConfigError::new(
                        codes::DUPLICATE_HOST,
                        format!("witness.hosts[{i}]"),
                        format!("{} is listed twice", quote(n)),
                    ));
                }
            }
            h
        }
    };
    Ok(WitnessSettings {
        lease_max_ms,
        hosts,
    })
}

/// Checks across the configuration: a mirrored namespace has an ANA group of its own (no other
/// namespace in it and no `[[ana]]` entry for it: the mirror drives that group's state), and
/// its peer is not one of this box's own listeners.
pub(crate) fn validate(cfg: &Config) -> Result<(), ConfigError> {
    for (i, s) in cfg.subsystems.iter().enumerate() {
        for (j, ns) in s.namespaces.iter().enumerate() {
            let Some(m) = &ns.mirror else { continue };
            let at = format!("subsystems[{i}].namespaces[{j}].mirror");
            let shared = cfg.subsystems.iter().enumerate().any(|(k, o)| {
                o.namespaces
                    .iter()
                    .enumerate()
                    .any(|(l, n)| (k, l) != (i, j) && n.ana_group == ns.ana_group)
            });
            if shared {
                return Err(ConfigError::new(
                    codes::INVALID_MIRROR,
                    format!("subsystems[{i}].namespaces[{j}].ana_group"),
                    format!(
                        "a mirrored namespace needs an ANA group of its own: group {} is used by \
                         another namespace (set `ana_group` to an unused group)",
                        ns.ana_group
                    ),
                ));
            }
            if cfg.ana.iter().any(|a| a.group == ns.ana_group) {
                return Err(ConfigError::new(
                    codes::INVALID_MIRROR,
                    format!("subsystems[{i}].namespaces[{j}].ana_group"),
                    format!(
                        "ANA group {} is driven by the mirror: remove its [[ana]] entries",
                        ns.ana_group
                    ),
                ));
            }
            let link = &cfg.mirror.link_hostnqn;
            if !s.allow_any_host && !s.hosts.contains(link) {
                return Err(ConfigError::new(
                    codes::INVALID_MIRROR,
                    format!("subsystems[{i}].hosts"),
                    format!(
                        "subsystem {} has a mirrored namespace: its hosts must include the \
                         replication link's host NQN {} ([mirror] link_hostnqn)",
                        s.nqn, link
                    ),
                ));
            }
            if ns.hosts.as_ref().is_some_and(|h| !h.contains(link)) {
                return Err(ConfigError::new(
                    codes::INVALID_MIRROR,
                    format!("subsystems[{i}].namespaces[{j}].hosts"),
                    format!(
                        "a mirrored namespace must be visible to the replication link's host NQN \
                         {link} ([mirror] link_hostnqn)"
                    ),
                ));
            }
            if cfg.target.state_dir.is_none() && !matches!(ns.backend, BackendChoice::File { .. }) {
                return Err(ConfigError::new(
                    codes::INVALID_MIRROR,
                    at.clone(),
                    format!(
                        "a mirrored {} namespace keeps its epoch in [target] state_dir: set it \
                         (without it a restarted box could not know it must not be primary)",
                        ns.backend.kind()
                    ),
                ));
            }
            if cfg.listeners.iter().any(|l| l.socket_addr() == m.peer) {
                return Err(ConfigError::new(
                    codes::INVALID_MIRROR,
                    format!("{at}.peer"),
                    format!("{} is this box's own listener", m.peer),
                ));
            }
        }
    }
    Ok(())
}

/// Emit `[mirror]` (when not default) and `[witness]`.
pub(crate) fn emit(out: &mut String, cfg: &Config) {
    let m = &cfg.mirror;
    if *m != MirrorSettings::default() {
        out.push_str("\n[mirror]\n");
        if let Some(w) = m.witness {
            let _ = writeln!(out, "witness = {}", crate::emit::string(&w.to_string()));
        }
        let _ = writeln!(out, "lease_ms = {}", m.lease_ms);
        let _ = writeln!(out, "resync_mbps = {}", m.resync_mbps);
        let _ = writeln!(
            out,
            "link_hostnqn = {}",
            crate::emit::string(&m.link_hostnqn)
        );
        let _ = writeln!(out, "link_queues = {}", m.link_queues);
        let _ = writeln!(out, "region_kib = {}", m.region_kib);
    }
    if let Some(w) = &cfg.witness {
        out.push_str("\n[witness]\n");
        let _ = writeln!(out, "lease_max_ms = {}", w.lease_max_ms);
        let hosts: Vec<String> = w.hosts.iter().map(|h| crate::emit::string(h)).collect();
        let _ = writeln!(out, "hosts = [{}]", hosts.join(", "));
    }
}

/// Emit a namespace's `mirror = { … }` line.
pub(crate) fn emit_ns(out: &mut String, m: &Option<NamespaceMirror>) {
    if let Some(m) = m {
        let _ = writeln!(
            out,
            "mirror = {{ peer = {}, role = {} }}",
            crate::emit::string(&m.peer.to_string()),
            crate::emit::string(m.role.as_str())
        );
    }
}
