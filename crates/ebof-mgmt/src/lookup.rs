//! Finding a request's subject in the running configuration and the target, and the checks
//! every change shares: the leaf that feature modules use instead of reaching into
//! [`crate::control`].
//!
//! - [`check`]: validate a changed configuration as the configuration file is validated;
//! - [`subsystem_index`], [`namespace_index`], [`live_namespace`]: the subsystem or namespace a
//!   request names, or `unknown-subsystem` / `unknown-namespace`;
//! - [`parse_nsid`]: an NSID from a request path;
//! - [`update_error`]: a refused [`nvmf_target::Target::update_subsystem`] as an API error.

use crate::api::{ApiError, codes};
use ebof_config::{Config, codes as cfg_codes};
use nvmf_target::{Namespace, Target, UpdateError};
use std::sync::Arc;

/// Validate a changed configuration as a configuration file is validated. One difference: a
/// running target may serve no subsystem for a while (the last one removed, the next one not
/// yet added); only `save` insists on one, as a file must have it.
pub(crate) fn check(cfg: &Config) -> Result<(), ApiError> {
    match cfg.validate() {
        Err(e) if e.code == cfg_codes::NO_SUBSYSTEMS && cfg.subsystems.is_empty() => Ok(()),
        r => r.map_err(|e| ApiError::from_config(&e, "")),
    }
}

/// The position of subsystem `nqn` in `cfg`, or `unknown-subsystem`.
pub(crate) fn subsystem_index(cfg: &Config, nqn: &str) -> Result<usize, ApiError> {
    cfg.subsystems
        .iter()
        .position(|s| s.nqn == nqn)
        .ok_or_else(|| unknown_subsystem(nqn))
}

/// The position of namespace `nsid` in subsystem `si` of `cfg`, or `unknown-namespace`.
pub(crate) fn namespace_index(cfg: &Config, si: usize, nsid: u32) -> Result<usize, ApiError> {
    cfg.subsystems[si]
        .namespaces
        .iter()
        .position(|n| n.nsid == nsid)
        .ok_or_else(|| unknown_namespace(&cfg.subsystems[si].nqn, nsid))
}

/// The running namespace `nsid` of `nqn` (what hosts use now), or `unknown-namespace`.
pub(crate) fn live_namespace(
    target: &Target,
    nqn: &str,
    nsid: u32,
) -> Result<Arc<Namespace>, ApiError> {
    target
        .subsystem(nqn)
        .and_then(|s| s.namespace(nsid).cloned())
        .ok_or_else(|| unknown_namespace(nqn, nsid))
}

/// `unknown-subsystem` for `nqn`.
pub(crate) fn unknown_subsystem(nqn: &str) -> ApiError {
    ApiError::new(
        codes::UNKNOWN_SUBSYSTEM,
        "nqn",
        format!("no subsystem {nqn:?} (see `ebof ctl show`)"),
    )
}

/// `unknown-namespace` for namespace `nsid` of `nqn`.
pub(crate) fn unknown_namespace(nqn: &str, nsid: u32) -> ApiError {
    ApiError::new(
        codes::UNKNOWN_NAMESPACE,
        "nsid",
        format!("{nqn} has no namespace {nsid} (see `ebof ctl show`)"),
    )
}

/// A namespace id from a request path (1 to [`ebof_config::NSID_MAX`]), or `invalid-nsid`.
pub(crate) fn parse_nsid(s: &str) -> Result<u32, ApiError> {
    s.parse::<u32>()
        .ok()
        .filter(|n| (1..=ebof_config::NSID_MAX).contains(n))
        .ok_or_else(|| {
            ApiError::new(
                cfg_codes::INVALID_NSID,
                "nsid",
                format!(
                    "{s:?} is not a namespace id (1 to {})",
                    ebof_config::NSID_MAX
                ),
            )
        })
}

/// A refused subsystem update as the API error it is.
pub(crate) fn update_error(nqn: &str, e: UpdateError<ApiError>) -> ApiError {
    match e {
        UpdateError::UnknownSubsystem => unknown_subsystem(nqn),
        UpdateError::Rejected(e) => e,
    }
}
