//! The typed configuration of `ebof serve`: schema, validation and
//! command-line overrides.
//!
//! **What it is.** The one schema of the target's configuration: the TOML
//! file (`--config FILE`), the command-line options that override it, and
//! — later — the management API all produce and consume the same typed
//! [`Config`]. Every error is a [`ConfigError`] with a stable
//! [`code`](codes), the field path (`subsystems[1].namespaces[0].path`, or the
//! option such as `--listen`) and a message naming the offending value.
//!
//! **What it is not.** It does no I/O beyond reading the configuration
//! file: it does not open backends, check that files, devices or CPU cores
//! exist, resolve host names or bind sockets. Backends are opened by
//! `ebof-backend`, listeners and reactors are started by the runtime.
//!
//! **Where it sits.** First step of `ebof serve`:
//! file text → [`Config::from_toml_str`] (or [`Config::embedded_default`]
//! when there is no file) → [`Config::apply_overrides`] → the runtime
//! builds listeners, subsystems and backends from the validated `Config`.
//!
//! # Layout
//! - `model` — the typed values ([`Config`], [`Subsystem`], [`Namespace`],
//!   [`BackendChoice`], …), defaults and derived identifiers.
//! - `raw` — serde mirror of the file (`deny_unknown_fields`), converted to
//!   the typed values with error paths; [`NamespaceFields`] and
//!   [`Namespace::from_fields`] also serve the management API's namespace add.
//! - `validate` — [`Config::validate`]: ranges, names, uniqueness.
//! - `parse` — notations shared by file and command line: [`parse_size`],
//!   [`parse_core_list`], [`parse_listener`], [`check_nqn`].
//! - `overrides` — [`Overrides`] and [`Config::apply_overrides`].
//! - `emit` — [`Config::to_toml_string`], the inverse of parsing.
//! - `pool` — storage pools ([`Pool`], `[[pools]]`) and [`pool_file_name`].
//! - `error` — [`ConfigError`] and the stable [`codes`].
//!
//! # File format
//! A commented example is in `examples/ebof.toml` of this crate. In short:
//!
//! ```toml
//! [target]                        # optional tuning, see TargetTuning
//! cores = [0, 1]                  # or "0-1"; default: all online cores
//!
//! [[listeners]]                   # one or more; discovery is served on each
//! address = "127.0.0.1"
//! port = 4420                     # default 4420
//!
//! [discovery]                     # optional dedicated discovery listener
//! address = "127.0.0.1"           # port defaults to 8009
//!
//! [[subsystems]]
//! nqn = "nqn.2026-11.io.ebof:default"
//!
//! [[subsystems.namespaces]]
//! backend = "ram"                 # "ram" | "file" | "block"
//! size = "1G"                     # bytes, or K/M/G/T (1024-based)
//! ```
//!
//! # Example
//!
//! A file as an operator writes it, then `ebof serve --listen 0.0.0.0:4420 --ram 8G` on top;
//! a mistake comes back with its field path and a stable code.
//!
//! ```
//! use ebof_config::{BackendChoice, Config, Overrides, codes};
//!
//! let mut config = Config::from_toml_str(
//!     r#"
//!     [[listeners]]
//!     address = "192.168.10.5"
//!
//!     [[subsystems]]
//!     nqn = "nqn.2026-11.io.example:disk1"
//!
//!     [[subsystems.namespaces]]
//!     backend = "file"
//!     path = "/var/lib/ebof/disk1.img"
//!     size = "100G"
//!     "#,
//! )?;
//! assert_eq!(config.listeners[0].port, 4420); // the default port
//! assert_eq!(config.subsystems[0].namespaces[0].nsid, 1); // numbered in order
//!
//! config.apply_overrides(&Overrides {
//!     listen: vec!["0.0.0.0:4420".into()],
//!     ram: Some("8G".into()),
//!     ..Overrides::default()
//! })?;
//! assert_eq!(config.listeners[0].to_string(), "0.0.0.0:4420");
//! assert_eq!(
//!     config.subsystems[0].namespaces[0].backend,
//!     BackendChoice::Ram { size: 8 << 30 }
//! );
//!
//! let err = Config::from_toml_str(
//!     "[[listeners]]\naddress = \"127.0.0.1\"\n\
//!      [[subsystems]]\nnqn = \"nqn.2026-11.io.example:a\"\n\
//!      [[subsystems.namespaces]]\nbackend = \"ram\"\nsize = \"1G\"\nblock_size = 520\n",
//! )
//! .unwrap_err();
//! assert_eq!(err.code, codes::INVALID_BLOCK_SIZE);
//! assert_eq!(err.path, "subsystems[0].namespaces[0].block_size");
//! # Ok::<(), ebof_config::ConfigError>(())
//! ```
//!
//! # Derived identifiers
//! A subsystem without `serial` gets [`derived_serial`] of its NQN; a
//! namespace without `uuid` gets [`derived_uuid`] of (NQN, NSID), an RFC
//! 4122 version-5 UUID. Both are pure functions of the configuration, so
//! hosts see the same identifiers after a restart.

#![forbid(unsafe_code)]

mod ana;
mod crypt;
mod emit;
mod error;
mod mirror;
mod model;
mod overrides;
mod parse;
mod pool;
mod qos;
mod raw;
mod security;
mod validate;

use std::path::Path;

pub use ana::{
    ANA_GROUP_MAX, AnaSetting, AnaState, DEFAULT_ANA_GROUP, check_ana_group, parse_ana_state,
};
pub use crypt::{Encryption, EncryptionFields};
pub use error::{ConfigError, codes};
pub use mirror::{
    DEFAULT_LEASE_MAX_MS, DEFAULT_LEASE_MS, DEFAULT_LINK_HOSTNQN, DEFAULT_LINK_QUEUES,
    DEFAULT_REGION_KIB, LEASE_MS_MAX, LEASE_MS_MIN, LINK_QUEUES_MAX, MirrorFields, MirrorRole,
    MirrorSettings, NamespaceMirror, WitnessSettings,
};
pub use model::{
    BackendChoice, Cdc, Config, DEFAULT_BLOCK_SIZE, DEFAULT_DISCOVERY_PORT, DEFAULT_FILE_SIZE,
    DEFAULT_MANAGEMENT_PORT, DEFAULT_MAX_TRANSFER, DEFAULT_METRICS_PORT, DEFAULT_MODEL,
    DEFAULT_NQN, DEFAULT_PORT, DEFAULT_RAM_SIZE, DEFAULT_SERIAL_PREFIX, DEFAULT_TLS_REKEY_RECORDS,
    DISCOVERY_NQN, DiscoverySettings, IoEngine, Listener, Management, NSID_MAX, Namespace,
    Subsystem, TargetTuning, TlsKeyUpdate, Transport, TrustedAnnouncer, derived_serial,
    derived_uuid,
};
pub use overrides::Overrides;
pub use parse::{
    MAX_CORE_ID, MODEL_MAX_LEN, NQN_MAX_LEN, SERIAL_MAX_LEN, check_id_text, check_nqn, format_size,
    parse_core_list, parse_io_engine, parse_listener, parse_size,
};
pub use pool::{POOL_FILE_NAME_MAX, POOL_NAME_MAX, Pool, check_pool_name, pool_file_name};
pub use qos::{QOS_IOPS_MAX, QOS_MBPS_MAX, Qos, QosFields, check_qos_value};
pub use raw::{NamespaceFields, SizeField};
pub use security::{HostSecurity, SecretSource, TlsMode, parse_tls_mode};
pub use validate::{SERIAL_PREFIX_MAX_LEN, check_ns_hosts};

impl Config {
    /// Parses and validates a configuration written in TOML. Defaults are
    /// resolved (see the field docs), so the result is complete.
    pub fn from_toml_str(s: &str) -> Result<Config, ConfigError> {
        let config = raw::parse_raw(s)?.into_config()?;
        config.validate()?;
        Ok(config)
    }

    /// Reads, parses and validates the configuration file at `path`. Every
    /// error names the file (in [`ConfigError::file`]).
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigError::new(codes::IO, "", format!("cannot read the file: {e}")).in_file(path)
        })?;
        Config::from_toml_str(&text).map_err(|e| e.in_file(path))
    }
}
