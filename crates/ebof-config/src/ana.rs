//! Asymmetric Namespace Access settings: a namespace's ANA group
//! (`[[subsystems.namespaces]] ana_group = 2`, default 1) and the state of a
//! group on a listener (`[[ana]]`), every pair not listed being optimized:
//!
//! ```toml
//! [[ana]]
//! listener = "10.0.0.1:4421"      # one of the [[listeners]], exactly
//! group = 2                       # 1..=1024
//! state = "inaccessible"          # optimized | non-optimized | inaccessible
//!                                 # | persistent-loss | change
//! ```
//!
//! Groups are target-wide: group 2 is inaccessible on that listener for the
//! namespaces of every subsystem that are in group 2.

use std::fmt::Write;

use serde::Deserialize;

use crate::error::{ConfigError, codes, quote};
use crate::model::{Config, DEFAULT_PORT, Listener};
use crate::parse::parse_listener;

/// Highest ANA group id (Identify Controller ANAGRPMAX).
pub const ANA_GROUP_MAX: u32 = 1024;
/// The group of a namespace that does not name one.
pub const DEFAULT_ANA_GROUP: u32 = 1;

/// An ANA state, by the name used in the file, the management API and `ebof ctl`
/// ([`AnaState::name`]).
pub use nvme_spec::ana::AnaState;

/// Parse a state name (error code `invalid-ana-state`, path left empty).
pub fn parse_ana_state(s: &str) -> Result<AnaState, ConfigError> {
    AnaState::from_name(s.trim()).ok_or_else(|| {
        let names: Vec<&str> = AnaState::ALL.iter().map(|a| a.name()).collect();
        ConfigError::new(
            codes::INVALID_ANA_STATE,
            "",
            format!(
                "unknown ANA state {} (expected {})",
                quote(s),
                names.join(", ")
            ),
        )
    })
}

/// Check an ANA group id (error code `invalid-ana-group`, path left empty).
pub fn check_ana_group(g: i64) -> Result<u32, ConfigError> {
    u32::try_from(g)
        .ok()
        .filter(|g| (1..=ANA_GROUP_MAX).contains(g))
        .ok_or_else(|| {
            ConfigError::new(
                codes::INVALID_ANA_GROUP,
                "",
                format!("ANA group {g} is out of range (1..={ANA_GROUP_MAX})"),
            )
        })
}

/// One `[[ana]]` entry: the state of `group` on `listener`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnaSetting {
    /// The listener (address and port) the state applies to.
    pub listener: Listener,
    /// ANA group ID (1..=[`ANA_GROUP_MAX`]).
    pub group: u32,
    /// The group's ANA state as seen through that listener.
    pub state: AnaState,
}

/// `[[ana]]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAna {
    listener: Option<String>,
    group: Option<i64>,
    state: Option<String>,
}

pub(crate) fn convert(raw: Vec<RawAna>) -> Result<Vec<AnaSetting>, ConfigError> {
    raw.into_iter()
        .enumerate()
        .map(|(i, a)| {
            let at = |f: &str| format!("ana[{i}].{f}");
            let missing = |f: &str, what: &str| {
                ConfigError::new(codes::MISSING_FIELD, at(f), format!("{what} is required"))
            };
            let listener = a
                .listener
                .ok_or_else(|| missing("listener", "listener (\"ADDR:PORT\")"))?;
            let listener =
                parse_listener(&listener, DEFAULT_PORT).map_err(|e| e.at(at("listener")))?;
            let group = a
                .group
                .ok_or_else(|| missing("group", "group (1..=1024)"))?;
            let group = check_ana_group(group).map_err(|e| e.at(at("group")))?;
            let state = a.state.ok_or_else(|| missing("state", "state"))?;
            let state = parse_ana_state(&state).map_err(|e| e.at(at("state")))?;
            Ok(AnaSetting {
                listener,
                group,
                state,
            })
        })
        .collect()
}

/// Groups in range, each `[[ana]]` naming a configured listener, no pair twice.
pub(crate) fn validate(cfg: &Config) -> Result<(), ConfigError> {
    for (i, s) in cfg.subsystems.iter().enumerate() {
        for (j, ns) in s.namespaces.iter().enumerate() {
            check_ana_group(i64::from(ns.ana_group))
                .map_err(|e| e.at(format!("subsystems[{i}].namespaces[{j}].ana_group")))?;
        }
    }
    for (i, a) in cfg.ana.iter().enumerate() {
        check_ana_group(i64::from(a.group)).map_err(|e| e.at(format!("ana[{i}].group")))?;
        if !cfg.listeners.contains(&a.listener) {
            return Err(ConfigError::new(
                codes::UNKNOWN_ANA_LISTENER,
                format!("ana[{i}].listener"),
                format!(
                    "{} is not one of the [[listeners]] (ANA states are per listener: name its address and port exactly)",
                    a.listener
                ),
            ));
        }
        if let Some(k) = cfg.ana[..i]
            .iter()
            .position(|b| b.listener == a.listener && b.group == a.group)
        {
            return Err(ConfigError::new(
                codes::DUPLICATE_ANA,
                format!("ana[{i}]"),
                format!(
                    "group {} on {} is already set by ana[{k}]",
                    a.group, a.listener
                ),
            ));
        }
    }
    Ok(())
}

pub(crate) fn emit(out: &mut String, cfg: &Config) {
    for a in &cfg.ana {
        out.push_str("\n[[ana]]\n");
        let _ = writeln!(
            out,
            "listener = {}",
            toml::Value::String(a.listener.to_string())
        );
        let _ = writeln!(out, "group = {}", a.group);
        let _ = writeln!(
            out,
            "state = {}",
            toml::Value::String(a.state.name().into())
        );
    }
}

impl Config {
    /// The configured state of `group` on `listener` (optimized when not listed).
    pub fn ana_state(&self, listener: &Listener, group: u32) -> AnaState {
        self.ana
            .iter()
            .find(|a| a.listener == *listener && a.group == group)
            .map_or(AnaState::Optimized, |a| a.state)
    }

    /// Set the state of `group` on `listener`: an optimized pair is dropped from
    /// [`Config::ana`] (it is the default), any other replaces or adds its entry.
    pub fn set_ana_state(&mut self, listener: Listener, group: u32, state: AnaState) {
        let at = self
            .ana
            .iter()
            .position(|a| a.listener == listener && a.group == group);
        match (at, state) {
            (Some(i), AnaState::Optimized) => {
                self.ana.remove(i);
            }
            (Some(i), s) => self.ana[i].state = s,
            (None, AnaState::Optimized) => {}
            (None, s) => self.ana.push(AnaSetting {
                listener,
                group,
                state: s,
            }),
        }
    }
}
