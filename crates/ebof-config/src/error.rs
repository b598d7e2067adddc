//! The one error type of this crate: a stable code, the field path, a message.

use std::fmt;
use std::path::{Path, PathBuf};

/// Stable error codes carried in [`ConfigError::code`].
///
/// These strings are part of the interface (scripts and the management API
/// match on them); never rename one, only add.
pub mod codes {
    /// The configuration file could not be read.
    pub const IO: &str = "io";
    /// TOML syntax error (the message gives line and column).
    pub const PARSE: &str = "parse";
    /// A key that the schema does not know (misspelt or misplaced).
    pub const UNKNOWN_FIELD: &str = "unknown-field";
    /// A value of the wrong TOML type (a string where a number belongs, …).
    pub const INVALID_TYPE: &str = "invalid-type";
    /// A required field is absent.
    pub const MISSING_FIELD: &str = "missing-field";
    /// A field that the chosen backend does not accept (e.g. `path` on `ram`).
    pub const FORBIDDEN_FIELD: &str = "forbidden-field";
    /// `[target]` tuning value out of range or of the wrong granularity.
    pub const INVALID_TUNING: &str = "invalid-tuning";
    /// Malformed core list, or a core id out of range / listed twice.
    pub const INVALID_CORES: &str = "invalid-cores";
    /// No `[[listeners]]` at all.
    pub const NO_LISTENERS: &str = "no-listeners";
    /// Not an IP literal, or a malformed `ADDR:PORT`.
    pub const INVALID_ADDRESS: &str = "invalid-address";
    /// Port out of `0..=65535`.
    pub const INVALID_PORT: &str = "invalid-port";
    /// Two listeners that would bind the same address and port.
    pub const DUPLICATE_LISTENER: &str = "duplicate-listener";
    /// No `[[subsystems]]` at all (no longer an error: kept for compatibility of the code list).
    pub const NO_SUBSYSTEMS: &str = "no-subsystems";
    /// A subsystem or host NQN that is not a valid NVMe Qualified Name.
    pub const INVALID_NQN: &str = "invalid-nqn";
    /// A subsystem using the well-known discovery NQN.
    pub const RESERVED_NQN: &str = "reserved-nqn";
    /// Two subsystems with the same NQN.
    pub const DUPLICATE_NQN: &str = "duplicate-nqn";
    /// Serial number (or `serial_prefix`) too long or not printable ASCII.
    pub const INVALID_SERIAL: &str = "invalid-serial";
    /// Two subsystems with the same serial number.
    pub const DUPLICATE_SERIAL: &str = "duplicate-serial";
    /// Model number too long, empty or not printable ASCII.
    pub const INVALID_MODEL: &str = "invalid-model";
    /// A host NQN listed twice in one subsystem, or in one namespace's `hosts`.
    pub const DUPLICATE_HOST: &str = "duplicate-host";
    /// `allow_any_host = true` together with a non-empty `hosts` list.
    pub const CONFLICTING_HOSTS: &str = "conflicting-hosts";
    /// NSID out of `1..=0xFFFFFFFE`.
    pub const INVALID_NSID: &str = "invalid-nsid";
    /// Two namespaces of one subsystem with the same NSID.
    pub const DUPLICATE_NSID: &str = "duplicate-nsid";
    /// More namespaces in a subsystem than `[target] max_namespaces`.
    pub const TOO_MANY_NAMESPACES: &str = "too-many-namespaces";
    /// Unknown backend name.
    pub const INVALID_BACKEND: &str = "invalid-backend";
    /// Block size other than 512 or 4096.
    pub const INVALID_BLOCK_SIZE: &str = "invalid-block-size";
    /// Malformed size, zero, overflowing, or not a multiple of the block size.
    pub const INVALID_SIZE: &str = "invalid-size";
    /// Empty path, or a path containing a NUL byte.
    pub const INVALID_PATH: &str = "invalid-path";
    /// Two file/block namespaces on the same path.
    pub const DUPLICATE_PATH: &str = "duplicate-path";
    /// Malformed or nil namespace UUID.
    pub const INVALID_UUID: &str = "invalid-uuid";
    /// Two namespaces with the same UUID.
    pub const DUPLICATE_UUID: &str = "duplicate-uuid";
    /// Command-line options that cannot be combined (`--ram` with `--file`).
    pub const CONFLICTING_OVERRIDES: &str = "conflicting-overrides";
    /// ANA group id outside 1..=1024 (`ana_group`, `[[ana]] group`).
    pub const INVALID_ANA_GROUP: &str = "invalid-ana-group";
    /// Unknown ANA state name.
    pub const INVALID_ANA_STATE: &str = "invalid-ana-state";
    /// `[[ana]] listener` is not one of the `[[listeners]]`.
    pub const UNKNOWN_ANA_LISTENER: &str = "unknown-ana-listener";
    /// Two `[[ana]]` entries for the same listener and group.
    pub const DUPLICATE_ANA: &str = "duplicate-ana";
    /// A listener's `tls` is not off, optional or required (or set on `[discovery]`).
    pub const INVALID_TLS_MODE: &str = "invalid-tls-mode";
    /// A listener's `transport` is not tcp or rdma, or an RDMA listener asks for TLS.
    pub const INVALID_TRANSPORT: &str = "invalid-transport";
    /// A DH-HMAC-CHAP or TLS secret that is not in its interchange format.
    pub const INVALID_SECRET: &str = "invalid-secret";
    /// A secret given both inline and as a file.
    pub const CONFLICTING_SECRETS: &str = "conflicting-secrets";
    /// A QoS limit (`qos = { iops = … }`) that is negative or too large.
    pub const INVALID_QOS: &str = "invalid-qos";
    /// A pool name outside `[A-Za-z0-9._-]` (1 to 64 characters).
    pub const INVALID_POOL: &str = "invalid-pool";
    /// Two `[[pools]]` with the same name.
    pub const DUPLICATE_POOL: &str = "duplicate-pool";
    /// A namespace's `pool` (or a request's) names no configured pool.
    pub const UNKNOWN_POOL: &str = "unknown-pool";
    /// A replicated namespace, `[mirror]` or `[witness]` setting is unusable.
    pub const INVALID_MIRROR: &str = "invalid-mirror";
    /// An `encryption` setting is unusable (ADR 0029).
    pub const INVALID_ENCRYPTION: &str = "invalid-encryption";

    /// Every code above (for checks that a refusal carries a known code).
    pub const ALL: &[&str] = &[
        IO,
        PARSE,
        UNKNOWN_FIELD,
        INVALID_TYPE,
        MISSING_FIELD,
        FORBIDDEN_FIELD,
        INVALID_TUNING,
        INVALID_CORES,
        NO_LISTENERS,
        INVALID_ADDRESS,
        INVALID_PORT,
        DUPLICATE_LISTENER,
        NO_SUBSYSTEMS,
        INVALID_NQN,
        RESERVED_NQN,
        DUPLICATE_NQN,
        INVALID_SERIAL,
        DUPLICATE_SERIAL,
        INVALID_MODEL,
        DUPLICATE_HOST,
        CONFLICTING_HOSTS,
        INVALID_NSID,
        DUPLICATE_NSID,
        TOO_MANY_NAMESPACES,
        INVALID_BACKEND,
        INVALID_BLOCK_SIZE,
        INVALID_SIZE,
        INVALID_PATH,
        DUPLICATE_PATH,
        INVALID_UUID,
        DUPLICATE_UUID,
        CONFLICTING_OVERRIDES,
        INVALID_ANA_GROUP,
        INVALID_ANA_STATE,
        UNKNOWN_ANA_LISTENER,
        DUPLICATE_ANA,
        INVALID_TLS_MODE,
        INVALID_TRANSPORT,
        INVALID_SECRET,
        CONFLICTING_SECRETS,
        INVALID_QOS,
        INVALID_POOL,
        DUPLICATE_POOL,
        UNKNOWN_POOL,
        INVALID_MIRROR,
        INVALID_ENCRYPTION,
    ];
}

/// A configuration error: what is wrong, where, and a stable code to match on.
///
/// Displays as
/// `config error at subsystems[1].namespaces[0].size: size 1000 is not a multiple of block_size 512 (invalid-size)`
/// and, when the configuration came from a file,
/// `config error in /etc/ebof.toml at …`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// Stable machine-readable code, one of [`codes`].
    pub code: &'static str,
    /// Where: a field path such as `subsystems[1].namespaces[0].path`, a
    /// command-line option such as `--listen`, or empty when the error
    /// concerns the whole document (I/O, TOML syntax).
    pub path: String,
    /// Human-readable explanation; names the offending value.
    pub message: String,
    /// The configuration file, when the configuration was loaded from one.
    pub file: Option<PathBuf>,
}

impl ConfigError {
    /// An error with `code` at `path`.
    pub fn new(code: &'static str, path: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError {
            code,
            path: path.into(),
            message: message.into(),
            file: None,
        }
    }

    /// The same error, reported at `path` (used to re-anchor the errors of
    /// the path-less parsing helpers).
    pub fn at(mut self, path: impl Into<String>) -> Self {
        self.path = path.into();
        self
    }

    /// The same error, attributed to the configuration file `file`.
    pub fn in_file(mut self, file: &Path) -> Self {
        self.file = Some(file.to_path_buf());
        self
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("config error")?;
        if let Some(file) = &self.file {
            write!(f, " in {}", file.display())?;
        }
        if !self.path.is_empty() {
            write!(f, " at {}", self.path)?;
        }
        write!(f, ": {} ({})", self.message, self.code)
    }
}

impl std::error::Error for ConfigError {}

/// Quotes a user-supplied value for an error message, cut to a sane length so
/// that a megabyte of garbage does not become a megabyte of error.
pub(crate) fn quote(s: &str) -> String {
    const MAX: usize = 64;
    if s.chars().count() <= MAX {
        format!("{s:?}")
    } else {
        let head: String = s.chars().take(MAX).collect();
        format!("{head:?}…")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_with_and_without_path_and_file() {
        let e = ConfigError::new(
            codes::INVALID_SIZE,
            "subsystems[1].namespaces[0].size",
            "size 1000 is not a multiple of block_size 512",
        );
        assert_eq!(
            e.to_string(),
            "config error at subsystems[1].namespaces[0].size: size 1000 is not a multiple of block_size 512 (invalid-size)"
        );
        let e = ConfigError::new(codes::IO, "", "cannot read: gone").in_file(Path::new("/x.toml"));
        assert_eq!(
            e.to_string(),
            "config error in /x.toml: cannot read: gone (io)"
        );
    }

    #[test]
    fn quote_truncates() {
        assert_eq!(quote("ab"), "\"ab\"");
        let long = "x".repeat(1000);
        assert!(quote(&long).len() < 80);
    }
}
