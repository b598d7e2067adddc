//! Command-line overrides of `ebof serve`, applied on top of the file (or
//! the embedded default) and validated together with it.

use std::path::PathBuf;

use crate::error::{ConfigError, codes};
use crate::model::{
    BackendChoice, Config, DEFAULT_DISCOVERY_PORT, DEFAULT_NQN, DEFAULT_PORT, DEFAULT_RAM_SIZE,
    DISCOVERY_NQN, Namespace, Subsystem, derived_serial, derived_uuid,
};
use crate::parse::{check_nqn, parse_core_list, parse_io_engine, parse_listener, parse_size};

/// The options of
/// `ebof serve [--config FILE] [--listen ADDR:PORT]... [--discovery-listen ADDR:PORT] [--ram SIZE | --file PATH] [--nqn NQN] [--cores LIST]`
/// that change the configuration, as the user typed them (`--config` is
/// handled by the caller: it picks the file to [`Config::load`]).
///
/// Errors name the option (`--listen`, …) as their path.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    /// `--listen ADDR:PORT`, repeatable: replaces every `[[listeners]]`.
    /// `1.2.3.4:4420`, `[::1]:4420`, or a bare address (port 4420).
    pub listen: Vec<String>,
    /// `--discovery-listen ADDR:PORT`: sets `[discovery]`; a bare address
    /// gets port 8009.
    pub discovery_listen: Option<String>,
    /// `--ram SIZE` (e.g. `4G`): the first subsystem's namespaces become a
    /// single RAM namespace, nsid 1, 512-byte blocks.
    pub ram: Option<String>,
    /// `--file PATH`: the first subsystem's namespaces become a single file
    /// namespace, nsid 1, 512-byte blocks, sized by the file; a missing file
    /// is created with 1 GiB ([`crate::DEFAULT_FILE_SIZE`]).
    /// Excludes `--ram`.
    pub file: Option<PathBuf>,
    /// `--nqn NQN`: renames the first subsystem (its derived serial and
    /// namespace UUIDs follow the new name; configured ones are kept), or
    /// creates one with a 1 GiB RAM namespace when there is none.
    pub nqn: Option<String>,
    /// `--cores LIST`: `0,1`, `0-3` or `0-1,4`; replaces `[target] cores`.
    pub cores: Option<String>,
    /// `--io-engine io_uring|threads`: replaces `[target] io_engine`.
    pub io_engine: Option<String>,
}

impl Overrides {
    /// Whether no option was given.
    pub fn is_empty(&self) -> bool {
        *self == Overrides::default()
    }
}

impl Config {
    /// Applies command-line overrides then re-validates. On error `self` is
    /// left unchanged.
    pub fn apply_overrides(&mut self, o: &Overrides) -> Result<(), ConfigError> {
        let mut c = self.clone();
        c.apply_unvalidated(o)?;
        c.validate().map_err(|e| blame_option(e, o))?;
        *self = c;
        Ok(())
    }

    fn apply_unvalidated(&mut self, o: &Overrides) -> Result<(), ConfigError> {
        if o.ram.is_some() && o.file.is_some() {
            return Err(ConfigError::new(
                codes::CONFLICTING_OVERRIDES,
                "--ram",
                "--ram and --file are mutually exclusive",
            ));
        }
        if !o.listen.is_empty() {
            let discovery_rdma = self
                .discovery
                .as_ref()
                .is_some_and(|d| self.rdma_listeners.contains(d));
            self.rdma_listeners.clear();
            let mut listeners = Vec::new();
            for s in &o.listen {
                let (t, rest) = split_transport(s);
                let l = parse_listener(rest, DEFAULT_PORT).map_err(|e| e.at("--listen"))?;
                if t == crate::Transport::Rdma {
                    self.rdma_listeners.push(l);
                }
                listeners.push(l);
            }
            if discovery_rdma && let Some(d) = self.discovery {
                self.rdma_listeners.push(d);
            }
            self.listeners = listeners;
            // ANA states of listeners that are no longer served go with them.
            let kept = &self.listeners;
            self.ana.retain(|a| kept.contains(&a.listener));
        }
        if let Some(s) = &o.discovery_listen {
            self.discovery = Some(
                parse_listener(s, DEFAULT_DISCOVERY_PORT)
                    .map_err(|e| e.at("--discovery-listen"))?,
            );
        }
        if let Some(s) = &o.cores {
            self.target.cores = Some(parse_core_list(s).map_err(|e| e.at("--cores"))?);
        }
        if let Some(s) = &o.io_engine {
            self.target.io_engine = parse_io_engine(s).map_err(|e| e.at("--io-engine"))?;
        }
        if let Some(nqn) = &o.nqn {
            self.rename_first_subsystem(nqn)?;
        }
        let backend = if let Some(s) = &o.ram {
            let size = parse_size(s).map_err(|e| e.at("--ram"))?;
            if size == 0 || size % 512 != 0 {
                return Err(ConfigError::new(
                    codes::INVALID_SIZE,
                    "--ram",
                    format!("size {size} must be a positive multiple of 512"),
                ));
            }
            Some(BackendChoice::Ram { size })
        } else if let Some(path) = &o.file {
            if path.as_os_str().is_empty() {
                return Err(ConfigError::new(
                    codes::INVALID_PATH,
                    "--file",
                    "path is empty",
                ));
            }
            Some(BackendChoice::File {
                path: path.clone(),
                size: None,
            })
        } else {
            None
        };
        if let Some(backend) = backend {
            if self.subsystems.is_empty() {
                self.subsystems.push(Subsystem::with_defaults(
                    DEFAULT_NQN,
                    &self.target.serial_prefix,
                    Vec::new(),
                ));
            }
            let first = &mut self.subsystems[0];
            first.namespaces = vec![Namespace::with_defaults(&first.nqn, 1, backend)];
        }
        Ok(())
    }

    fn rename_first_subsystem(&mut self, nqn: &str) -> Result<(), ConfigError> {
        check_nqn(nqn).map_err(|e| e.at("--nqn"))?;
        if nqn == DISCOVERY_NQN {
            return Err(ConfigError::new(
                codes::RESERVED_NQN,
                "--nqn",
                format!("{DISCOVERY_NQN} is the discovery subsystem's NQN; choose another"),
            ));
        }
        if let Some(k) = self.subsystems.iter().skip(1).position(|s| s.nqn == nqn) {
            return Err(ConfigError::new(
                codes::DUPLICATE_NQN,
                "--nqn",
                format!("NQN {nqn} is already used by subsystems[{}]", k + 1),
            ));
        }
        let prefix = self.target.serial_prefix.clone();
        let Some(first) = self.subsystems.first_mut() else {
            let ns = Namespace::with_defaults(
                nqn,
                1,
                BackendChoice::Ram {
                    size: DEFAULT_RAM_SIZE,
                },
            );
            self.subsystems
                .push(Subsystem::with_defaults(nqn, &prefix, vec![ns]));
            return Ok(());
        };
        // Identifiers that were derived from the old name are re-derived, so
        // `--nqn X` gives the same serial and UUIDs as a file saying
        // `nqn = X`. A configured value that happens to equal the derived
        // one is indistinguishable from it, and follows too.
        let old = std::mem::replace(&mut first.nqn, nqn.to_owned());
        if first.serial == derived_serial(&prefix, &old) {
            first.serial = derived_serial(&prefix, nqn);
        }
        for ns in &mut first.namespaces {
            if ns.uuid == derived_uuid(&old, ns.nsid) {
                ns.uuid = derived_uuid(nqn, ns.nsid);
            }
        }
        Ok(())
    }
}

/// `rdma:ADDR[:PORT]` or `tcp:ADDR[:PORT]` (a bare address is NVMe/TCP).
fn split_transport(s: &str) -> (crate::Transport, &str) {
    if let Some(r) = s.strip_prefix("rdma:") {
        (crate::Transport::Rdma, r)
    } else if let Some(r) = s.strip_prefix("tcp:") {
        (crate::Transport::Tcp, r)
    } else {
        (crate::Transport::Tcp, s)
    }
}

/// Re-anchors a validation error on the option that caused it, when the
/// offending part of the configuration came from the command line.
fn blame_option(e: ConfigError, o: &Overrides) -> ConfigError {
    let from = |prefix: &str| e.path == prefix || e.path.starts_with(&format!("{prefix}["));
    let from_field = |prefix: &str| e.path == prefix || e.path.starts_with(&format!("{prefix}."));
    let option = if !o.listen.is_empty() && from("listeners") {
        Some("--listen")
    } else if o.discovery_listen.is_some() && from_field("discovery") {
        Some("--discovery-listen")
    } else if o.cores.is_some() && from("target.cores") {
        Some("--cores")
    } else if o.ram.is_some() && from("subsystems[0].namespaces") {
        Some("--ram")
    } else if o.file.is_some() && from("subsystems[0].namespaces") {
        Some("--file")
    } else if o.nqn.is_some() && from_field("subsystems[0].nqn") {
        Some("--nqn")
    } else {
        None
    };
    match option {
        Some(option) => e.at(option),
        None => e,
    }
}
