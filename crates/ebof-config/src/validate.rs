//! Validation of the typed [`Config`]: ranges, names, uniqueness. Runs after
//! every conversion from a file, after command-line overrides, and is the
//! check the management API will run before applying a change.
//!
//! Reports the first error, in document order (target, listeners,
//! discovery, subsystems), so the result is deterministic.

use std::collections::HashMap;
use std::path::Path;

use crate::error::{ConfigError, codes, quote};
use crate::model::{
    BackendChoice, Config, DISCOVERY_NQN, Listener, Management, NSID_MAX, Subsystem, TargetTuning,
};
use crate::parse::{MAX_CORE_ID, MODEL_MAX_LEN, SERIAL_MAX_LEN, check_id_text, check_nqn};

/// Longest `[target] serial_prefix`: leaves at least 8 hex digits of the
/// hash in a 20-byte serial number.
pub const SERIAL_PREFIX_MAX_LEN: usize = 12;

/// Range and granularity of one numeric `[target]` field.
pub(crate) struct TuningRule {
    field: &'static str,
    min: i128,
    max: i128,
    multiple_of: i128,
}

impl TuningRule {
    pub(crate) fn error(&self, message: String) -> ConfigError {
        ConfigError::new(
            codes::INVALID_TUNING,
            format!("target.{}", self.field),
            message,
        )
    }

    /// An error about another field of `[target]` (one whose rule is not numeric).
    pub(crate) fn error_at(&self, field: &str, message: String) -> ConfigError {
        ConfigError::new(codes::INVALID_TUNING, format!("target.{field}"), message)
    }

    pub(crate) fn check(&self, v: i128) -> Result<(), ConfigError> {
        if v < self.min || v > self.max {
            return Err(self.error(format!(
                "{} = {v} is out of range {}..={}",
                self.field, self.min, self.max
            )));
        }
        if v % self.multiple_of != 0 {
            return Err(self.error(format!(
                "{} = {v} is not a multiple of {}",
                self.field, self.multiple_of
            )));
        }
        Ok(())
    }
}

/// The `[target]` rules; see [`TargetTuning`] for the reasons.
pub(crate) mod rules {
    use super::TuningRule;

    /// IOCCSZ is in 16-byte units (NVMe-oF 1.1, 4.2).
    pub(crate) const IO_INLINE_DATA: TuningRule = TuningRule {
        field: "io_inline_data",
        min: 4096,
        max: 131_072,
        multiple_of: 16,
    };
    /// MAXH2CDATA: at least 4096 and dword-aligned (NVMe/TCP 1.0, 3.6.2.3);
    /// capped so one PDU cannot demand an unbounded receive buffer.
    pub(crate) const MAX_H2C_DATA: TuningRule = TuningRule {
        field: "max_h2c_data",
        min: 4096,
        max: 16 << 20,
        multiple_of: 4,
    };
    pub(crate) const C2H_DATA_MAX: TuningRule = TuningRule {
        field: "c2h_data_max",
        min: 4096,
        max: 16 << 20,
        multiple_of: 1,
    };
    /// MDTS is a power of two of 4 KiB pages (checked apart); 8 MiB bounds what one command
    /// may make a slot buffer hold.
    pub(crate) const MAX_TRANSFER: TuningRule = TuningRule {
        field: "max_transfer",
        min: 4096,
        max: 8 << 20,
        multiple_of: 4096,
    };
    pub(crate) const MAX_IO_QUEUES: TuningRule = TuningRule {
        field: "max_io_queues",
        min: 1,
        max: 1024,
        multiple_of: 1,
    };
    pub(crate) const MAX_NAMESPACES: TuningRule = TuningRule {
        field: "max_namespaces",
        min: 1,
        max: 1024,
        multiple_of: 1,
    };
    pub(crate) const MAX_QUEUE_SIZE: TuningRule = TuningRule {
        field: "max_queue_size",
        min: 16,
        max: 4096,
        multiple_of: 1,
    };
    pub(crate) const CNTLID_MIN: TuningRule = TuningRule {
        field: "cntlid_min",
        min: crate::model::CNTLID_MIN as i128,
        max: crate::model::CNTLID_MAX as i128,
        multiple_of: 1,
    };
    pub(crate) const CNTLID_MAX: TuningRule = TuningRule {
        field: "cntlid_max",
        min: crate::model::CNTLID_MIN as i128,
        max: crate::model::CNTLID_MAX as i128,
        multiple_of: 1,
    };
    pub(crate) const HANDSHAKE_TIMEOUT_MS: TuningRule = TuningRule {
        field: "handshake_timeout_ms",
        min: 100,
        max: 600_000,
        multiple_of: 1,
    };
    pub(crate) const MAX_CONNECTIONS: TuningRule = TuningRule {
        field: "max_connections",
        min: 1,
        max: 1 << 20,
        multiple_of: 1,
    };
    pub(crate) const MAX_CONNECTIONS_PER_ADDRESS: TuningRule = TuningRule {
        field: "max_connections_per_address",
        min: 1,
        max: 1 << 20,
        multiple_of: 1,
    };
    /// At least one thread; at most what a core can usefully keep busy with blocking I/O.
    pub(crate) const IO_THREADS: TuningRule = TuningRule {
        field: "io_threads",
        min: 1,
        max: 256,
        multiple_of: 1,
    };
    /// At least 16 records (tests cross it in milliseconds); at most 2^24 full-size records,
    /// under AES-GCM's 2^24.5 (RFC 8446 §5.5).
    pub(crate) const TLS_REKEY_RECORDS: TuningRule = TuningRule {
        field: "tls_rekey_records",
        min: 16,
        max: 1 << 24,
        multiple_of: 1,
    };
}

impl Config {
    /// Checks everything the types do not: ranges, name formats, backend
    /// sizes, and uniqueness of listeners, NQNs, serials, NSIDs, paths and
    /// UUIDs. Returns the first problem found, in document order.
    pub fn validate(&self) -> Result<(), ConfigError> {
        validate_target(&self.target)?;
        validate_listeners(&self.listeners, self.discovery.as_ref())?;
        if self.listeners.is_empty() && !self.subsystems.is_empty() {
            return Err(ConfigError::new(
                codes::NO_LISTENERS,
                "listeners",
                "subsystems are configured but no [[listeners]] entry serves them (a box with \
                 only a [discovery] listener serves discovery only)",
            ));
        }
        validate_subsystems(&self.subsystems, self.target.max_namespaces)?;
        crate::ana::validate(self)?;
        crate::security::validate(self)?;
        validate_management(&self.management)?;
        crate::pool::validate(self)?;
        validate_encryption(self)?;
        crate::mirror::validate(self)
    }
}

/// A management API on TCP is only ever served with a bearer token: `listen` needs
/// `token_file`. (The file itself is checked by `ebof serve` when it starts: it must exist,
/// hold a token and be owner-only.)
fn validate_management(m: &Management) -> Result<(), ConfigError> {
    match (&m.tls_cert, &m.tls_key) {
        (Some(_), None) | (None, Some(_)) => {
            let missing = if m.tls_cert.is_none() {
                "tls_cert"
            } else {
                "tls_key"
            };
            return Err(ConfigError::new(
                codes::MISSING_FIELD,
                format!("management.{missing}"),
                "HTTPS needs both tls_cert and tls_key (PEM files)",
            ));
        }
        (Some(_), Some(_)) if m.listen.is_none() => {
            return Err(ConfigError::new(
                codes::MISSING_FIELD,
                "management.listen",
                "tls_cert and tls_key are for the API on TCP: set listen too",
            ));
        }
        _ => {}
    }
    if let Some(l) = &m.listen
        && m.token_file.is_none()
    {
        return Err(ConfigError::new(
            codes::MISSING_FIELD,
            "management.token_file",
            format!(
                "the management API on TCP ({l}) requires a bearer token: set token_file (or --mgmt-token-file) to a file that holds it, mode 0600"
            ),
        ));
    }
    Ok(())
}

fn validate_target(t: &TargetTuning) -> Result<(), ConfigError> {
    if let Some(cores) = &t.cores {
        if cores.is_empty() {
            return Err(ConfigError::new(
                codes::INVALID_CORES,
                "target.cores",
                "the core list is empty; leave `cores` out to use all online cores",
            ));
        }
        for (i, &core) in cores.iter().enumerate() {
            let path = || format!("target.cores[{i}]");
            if core > MAX_CORE_ID {
                return Err(ConfigError::new(
                    codes::INVALID_CORES,
                    path(),
                    format!("core id {core} is out of range (0..={MAX_CORE_ID})"),
                ));
            }
            if cores[..i].contains(&core) {
                return Err(ConfigError::new(
                    codes::INVALID_CORES,
                    path(),
                    format!("core {core} is listed twice"),
                ));
            }
        }
    }
    rules::IO_INLINE_DATA.check(t.io_inline_data.into())?;
    rules::MAX_H2C_DATA.check(t.max_h2c_data.into())?;
    rules::C2H_DATA_MAX.check(t.c2h_data_max.into())?;
    rules::MAX_TRANSFER.check(t.max_transfer.into())?;
    if !t.max_transfer.is_power_of_two() {
        return Err(rules::MAX_TRANSFER.error(format!(
            "{} is not a power of two (MDTS counts 4 KiB pages in powers of two)",
            t.max_transfer
        )));
    }
    rules::MAX_IO_QUEUES.check(t.max_io_queues.into())?;
    rules::MAX_NAMESPACES.check(t.max_namespaces.into())?;
    rules::MAX_QUEUE_SIZE.check(t.max_queue_size.into())?;
    rules::CNTLID_MIN.check(t.cntlid_min.into())?;
    rules::CNTLID_MAX.check(t.cntlid_max.into())?;
    if t.cntlid_min > t.cntlid_max {
        return Err(rules::CNTLID_MIN.error(format!(
            "cntlid_min = {} is above cntlid_max = {}: the range of controller IDs is empty",
            t.cntlid_min, t.cntlid_max
        )));
    }
    rules::HANDSHAKE_TIMEOUT_MS.check(t.handshake_timeout_ms.into())?;
    rules::MAX_CONNECTIONS.check(t.max_connections.into())?;
    rules::MAX_CONNECTIONS_PER_ADDRESS.check(t.max_connections_per_address.into())?;
    rules::IO_THREADS.check(t.io_threads.into())?;
    rules::TLS_REKEY_RECORDS.check(t.tls_rekey_records.into())?;
    let prefix = &t.serial_prefix;
    if prefix.len() > SERIAL_PREFIX_MAX_LEN || !prefix.chars().all(|c| c.is_ascii_graphic()) {
        return Err(ConfigError::new(
            codes::INVALID_SERIAL,
            "target.serial_prefix",
            format!(
                "serial_prefix {} must be at most {SERIAL_PREFIX_MAX_LEN} printable ASCII characters without spaces",
                quote(prefix)
            ),
        ));
    }
    Ok(())
}

/// Whether binding `a` and `b` would collide: same port and the same
/// address, or a wildcard address of the same family. Port 0 (the OS picks)
/// never collides.
fn listeners_collide(a: &Listener, b: &Listener) -> bool {
    a.port == b.port
        && a.port != 0
        && (a.address == b.address
            || (a.address.is_ipv4() == b.address.is_ipv4()
                && (a.address.is_unspecified() || b.address.is_unspecified())))
}

fn validate_listeners(
    listeners: &[Listener],
    discovery: Option<&Listener>,
) -> Result<(), ConfigError> {
    if listeners.is_empty() && discovery.is_none() {
        return Err(ConfigError::new(
            codes::NO_LISTENERS,
            "listeners",
            "at least one [[listeners]] entry (or a [discovery] listener, for a box that serves \
             discovery only, such as a CDC) is required",
        ));
    }
    for (i, l) in listeners.iter().enumerate() {
        if let Some(other) = listeners[..i].iter().find(|o| listeners_collide(l, o)) {
            return Err(ConfigError::new(
                codes::DUPLICATE_LISTENER,
                format!("listeners[{i}]"),
                format!("listener {l} would bind the same address and port as listener {other}"),
            ));
        }
    }
    if let Some(d) = discovery
        && let Some(other) = listeners.iter().find(|o| listeners_collide(d, o))
    {
        return Err(ConfigError::new(
            codes::DUPLICATE_LISTENER,
            "discovery",
            format!(
                "discovery listener {d} would bind the same address and port as listener {other} (discovery is served on every listener anyway)"
            ),
        ));
    }
    Ok(())
}

fn validate_subsystems(subsystems: &[Subsystem], max_namespaces: u32) -> Result<(), ConfigError> {
    // No subsystem is fine: a pool box provisioned at run time, or a Central Discovery
    // Controller.
    let mut nqns: HashMap<&str, usize> = HashMap::new();
    let mut serials: HashMap<&str, usize> = HashMap::new();
    let mut paths: HashMap<&Path, String> = HashMap::new();
    let mut uuids: HashMap<[u8; 16], String> = HashMap::new();
    for (i, s) in subsystems.iter().enumerate() {
        let at = |field: &str| format!("subsystems[{i}].{field}");
        check_nqn(&s.nqn).map_err(|e| e.at(at("nqn")))?;
        if s.nqn == DISCOVERY_NQN {
            return Err(ConfigError::new(
                codes::RESERVED_NQN,
                at("nqn"),
                format!("{DISCOVERY_NQN} is the discovery subsystem's NQN; choose another"),
            ));
        }
        if let Some(k) = nqns.insert(&s.nqn, i) {
            return Err(ConfigError::new(
                codes::DUPLICATE_NQN,
                at("nqn"),
                format!("NQN {} is already used by subsystems[{k}]", quote(&s.nqn)),
            ));
        }
        check_id_text("serial", &s.serial, SERIAL_MAX_LEN, codes::INVALID_SERIAL)
            .map_err(|e| e.at(at("serial")))?;
        if let Some(k) = serials.insert(&s.serial, i) {
            return Err(ConfigError::new(
                codes::DUPLICATE_SERIAL,
                at("serial"),
                format!(
                    "serial {} is already used by subsystems[{k}]",
                    quote(&s.serial)
                ),
            ));
        }
        check_id_text("model", &s.model, MODEL_MAX_LEN, codes::INVALID_MODEL)
            .map_err(|e| e.at(at("model")))?;
        for (h, host) in s.hosts.iter().enumerate() {
            let path = format!("subsystems[{i}].hosts[{h}]");
            check_nqn(host).map_err(|e| e.at(&path))?;
            if s.hosts[..h].contains(host) {
                return Err(ConfigError::new(
                    codes::DUPLICATE_HOST,
                    path,
                    format!("host {} is listed twice", quote(host)),
                ));
            }
        }
        if s.allow_any_host && !s.hosts.is_empty() {
            return Err(ConfigError::new(
                codes::CONFLICTING_HOSTS,
                at("allow_any_host"),
                "allow_any_host = true would ignore the `hosts` list; set it to false or remove `hosts`",
            ));
        }
        if s.namespaces.len() > max_namespaces as usize {
            return Err(ConfigError::new(
                codes::TOO_MANY_NAMESPACES,
                format!("subsystems[{i}].namespaces"),
                format!(
                    "{} namespaces, more than [target] max_namespaces = {max_namespaces}",
                    s.namespaces.len()
                ),
            ));
        }
        let mut nsids: HashMap<u32, usize> = HashMap::new();
        for (j, ns) in s.namespaces.iter().enumerate() {
            let at = |field: &str| format!("subsystems[{i}].namespaces[{j}].{field}");
            if ns.nsid == 0 || ns.nsid > NSID_MAX {
                return Err(ConfigError::new(
                    codes::INVALID_NSID,
                    at("nsid"),
                    format!("nsid {} is out of range 1..={NSID_MAX}", ns.nsid),
                ));
            }
            if let Some(k) = nsids.insert(ns.nsid, j) {
                return Err(ConfigError::new(
                    codes::DUPLICATE_NSID,
                    at("nsid"),
                    format!(
                        "nsid {} is already used by subsystems[{i}].namespaces[{k}]",
                        ns.nsid
                    ),
                ));
            }
            if let Some(hosts) = &ns.hosts {
                check_ns_hosts(&at("hosts"), hosts)?;
            }
            if ns.block_size != 512 && ns.block_size != 4096 {
                return Err(ConfigError::new(
                    codes::INVALID_BLOCK_SIZE,
                    at("block_size"),
                    format!("block_size {} is not 512 or 4096", ns.block_size),
                ));
            }
            if let Some(size) = ns.backend.size() {
                if size == 0 {
                    return Err(ConfigError::new(
                        codes::INVALID_SIZE,
                        at("size"),
                        "size must be positive",
                    ));
                }
                if size % u64::from(ns.block_size) != 0 {
                    return Err(ConfigError::new(
                        codes::INVALID_SIZE,
                        at("size"),
                        format!(
                            "size {size} is not a multiple of block_size {}",
                            ns.block_size
                        ),
                    ));
                }
            }
            if let BackendChoice::File { path, .. } | BackendChoice::Block { path } = &ns.backend {
                if path.as_os_str().is_empty() {
                    return Err(ConfigError::new(
                        codes::INVALID_PATH,
                        at("path"),
                        "path is empty",
                    ));
                }
                if path.as_os_str().as_encoded_bytes().contains(&0) {
                    return Err(ConfigError::new(
                        codes::INVALID_PATH,
                        at("path"),
                        "path contains a NUL byte",
                    ));
                }
                if let Some(other) = paths.insert(path, format!("subsystems[{i}].namespaces[{j}]"))
                {
                    return Err(ConfigError::new(
                        codes::DUPLICATE_PATH,
                        at("path"),
                        format!("{} is already used by {other}", path.display()),
                    ));
                }
            }
            if ns.direct && matches!(ns.backend, BackendChoice::Ram { .. }) {
                return Err(ConfigError::new(
                    codes::FORBIDDEN_FIELD,
                    at("direct"),
                    "backend \"ram\" does not take `direct`: RAM namespaces have no page cache to bypass",
                ));
            }
            if ns.uuid == [0; 16] {
                return Err(ConfigError::new(
                    codes::INVALID_UUID,
                    at("uuid"),
                    "the nil UUID means \"no UUID\" to hosts; leave `uuid` out to get a derived one",
                ));
            }
            if let Some(other) = uuids.insert(ns.uuid, format!("subsystems[{i}].namespaces[{j}]")) {
                return Err(ConfigError::new(
                    codes::DUPLICATE_UUID,
                    at("uuid"),
                    format!(
                        "UUID {} is already used by {other}",
                        uuid::Uuid::from_bytes(ns.uuid)
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Check a namespace's host list (`[[subsystems.namespaces]] hosts`, or the hosts an API
/// request attaches): each entry an NQN, none twice. Errors name `{path}[H]`, the offending
/// entry (`path` is the list's own path, e.g. `subsystems[0].namespaces[1].hosts`).
pub fn check_ns_hosts(path: &str, hosts: &[String]) -> Result<(), ConfigError> {
    for (h, host) in hosts.iter().enumerate() {
        let at = format!("{path}[{h}]");
        check_nqn(host).map_err(|e| e.at(&at))?;
        if hosts[..h].contains(host) {
            return Err(ConfigError::new(
                codes::DUPLICATE_HOST,
                at,
                format!("host {} is listed twice", quote(host)),
            ));
        }
    }
    Ok(())
}

/// Where `encryption` may be: file and block namespaces (not RAM: nothing is at rest), not on
/// a namespace in a pool (the pool's setting decides). A mirrored namespace may be encrypted,
/// on its own key or its pool's: each box encrypts its copy under its own key, and the
/// replication link carries what the host wrote (ADR 0029).
fn validate_encryption(cfg: &Config) -> Result<(), ConfigError> {
    for (si, s) in cfg.subsystems.iter().enumerate() {
        for (ni, n) in s.namespaces.iter().enumerate() {
            let Some(_) = &n.encryption else { continue };
            let at = format!("subsystems[{si}].namespaces[{ni}].encryption");
            let why = if matches!(n.backend, BackendChoice::Ram { .. }) {
                "a RAM namespace holds nothing at rest: encryption is for file and block namespaces"
            } else if n.pool.is_some() {
                "a namespace in a pool is encrypted by its pool's `encryption`, not its own"
            } else {
                continue;
            };
            return Err(ConfigError::new(codes::INVALID_ENCRYPTION, at, why));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(s: &str) -> Listener {
        crate::parse::parse_listener(s, 4420).unwrap()
    }

    #[test]
    fn collisions() {
        assert!(listeners_collide(&l("1.2.3.4:1"), &l("1.2.3.4:1")));
        assert!(listeners_collide(&l("0.0.0.0:1"), &l("1.2.3.4:1")));
        assert!(listeners_collide(&l("1.2.3.4:1"), &l("0.0.0.0:1")));
        assert!(listeners_collide(&l("[::]:1"), &l("[::1]:1")));
        assert!(!listeners_collide(&l("[::]:1"), &l("1.2.3.4:1")));
        assert!(!listeners_collide(&l("1.2.3.4:1"), &l("1.2.3.4:2")));
        assert!(!listeners_collide(&l("1.2.3.4:0"), &l("1.2.3.4:0")));
        assert!(!listeners_collide(&l("1.2.3.4:1"), &l("1.2.3.5:1")));
    }

    #[test]
    fn tuning_rule_messages() {
        let e = rules::IO_INLINE_DATA.check(4100).unwrap_err();
        assert_eq!(e.path, "target.io_inline_data");
        assert!(e.message.contains("multiple of 16"), "{e}");
        let e = rules::MAX_IO_QUEUES.check(0).unwrap_err();
        assert!(e.message.contains("1..=1024"), "{e}");
    }
}
