//! [`ApiError`]: what every refused request answers, with its stable [`codes`].

use serde::{Deserialize, Serialize};
use std::fmt;

/// Stable error codes of [`ApiError::code`]. Validation failures of request fields use the
/// configuration's codes (`ebof_config::codes`, e.g. `invalid-nqn`, `duplicate-host`,
/// `conflicting-hosts`) so that the file and the API speak one language; these are the rest.
/// Never rename one, only add.
pub mod codes {
    /// The body is not JSON, or not the request's shape (the message says which field).
    pub const BAD_REQUEST: &str = "bad-request";
    /// No such route (or the API version is unknown).
    pub const UNKNOWN_ENDPOINT: &str = "unknown-endpoint";
    /// The route exists but not with this HTTP method.
    pub const METHOD_NOT_ALLOWED: &str = "method-not-allowed";
    /// No subsystem with this NQN.
    pub const UNKNOWN_SUBSYSTEM: &str = "unknown-subsystem";
    /// The host is not in the subsystem's list.
    pub const UNKNOWN_HOST: &str = "unknown-host";
    /// No live controller with this id.
    pub const UNKNOWN_CONTROLLER: &str = "unknown-controller";
    /// A controller id that is not a number in 1..=65519.
    pub const INVALID_CNTLID: &str = "invalid-cntlid";
    /// No namespace with this NSID in the subsystem.
    pub const UNKNOWN_NAMESPACE: &str = "unknown-namespace";
    /// No listener on this address.
    pub const UNKNOWN_LISTENER: &str = "unknown-listener";
    /// The namespace's storage could not be opened, created or resized (the message says why).
    pub const BACKEND_FAILED: &str = "backend-failed";
    /// Shrinking a namespace discards the data past its new end: the request must say so.
    pub const SHRINK_NOT_CONFIRMED: &str = "shrink-not-confirmed";
    /// The address cannot be listened on (in use, not local…).
    pub const LISTEN_FAILED: &str = "listen-failed";
    /// This server cannot add or remove listeners (it was started without reactors to ask).
    pub const UNSUPPORTED: &str = "unsupported";
    /// The configuration could not be written (the message names the file and the error).
    pub const SAVE_FAILED: &str = "save-failed";
    /// `save` without a path on a server started without a configuration file.
    pub const NO_CONFIG_FILE: &str = "no-config-file";
    /// The server failed on its side (a bug: please report).
    pub const INTERNAL: &str = "internal";
    /// The management API on TCP: no `Authorization: Bearer TOKEN`, or not the right token.
    pub const UNAUTHORIZED: &str = "unauthorized";
    /// Attach or detach of one host on a namespace that is visible to every host (restrict it
    /// to a host list first: `PUT …/namespaces/{nsid}/hosts`, `ebof ctl ns mask`).
    pub const NAMESPACE_NOT_MASKED: &str = "namespace-not-masked";
    /// The referral is served already.
    pub const DUPLICATE_REFERRAL: &str = "duplicate-referral";
    /// No referral to this address.
    pub const UNKNOWN_REFERRAL: &str = "unknown-referral";
    /// As many referrals as the discovery log serves (`nvmf_target::MAX_REFERRALS`).
    pub const TOO_MANY_REFERRALS: &str = "too-many-referrals";
    /// A Central Discovery Controller request to a box that is not one (no `[cdc]`).
    pub const NOT_A_CDC: &str = "not-a-cdc";
    /// No Central Discovery Controller member with this address.
    pub const UNKNOWN_MEMBER: &str = "unknown-member";
    /// The address is already a member of the Central Discovery Controller.
    pub const DUPLICATE_MEMBER: &str = "duplicate-member";
    /// A snapshot name outside the allowed alphabet (`[A-Za-z0-9._-]`, starting with a letter
    /// or digit, at most 64 characters).
    pub const INVALID_SNAPSHOT_NAME: &str = "invalid-snapshot-name";
    /// A snapshot with this name exists already (names are unique in a target).
    pub const DUPLICATE_SNAPSHOT: &str = "duplicate-snapshot";
    /// No snapshot with this name.
    pub const UNKNOWN_SNAPSHOT: &str = "unknown-snapshot";
    /// The namespace cannot be snapshotted: RAM and block namespaces (only file namespaces).
    pub const SNAPSHOT_UNSUPPORTED: &str = "snapshot-unsupported";
    /// The namespace's commands in flight did not drain in time for the snapshot (nothing made).
    pub const SNAPSHOT_BUSY: &str = "snapshot-busy";
    /// The file system is full (`ENOSPC`/`EDQUOT`) while copying or cloning (nothing made).
    pub const NO_SPACE: &str = "no-space";
    /// The snapshot or clone file could not be written (the message names the file and error).
    pub const SNAPSHOT_FAILED: &str = "snapshot-failed";
    /// The clone's file exists already (it is never overwritten).
    pub const FILE_EXISTS: &str = "file-exists";
    /// A storage pool cannot hold the size asked (a namespace added or cloned into it, or one
    /// of its namespaces grown): the message names the pool, the size and the free bytes.
    pub const POOL_FULL: &str = "pool-full";
    /// A `file` namespace (or clone) path outside every `[[pools]]` directory and
    /// `[management] data_dirs` directory, after resolving `..` and symbolic links.
    pub const PATH_NOT_ALLOWED: &str = "path-not-allowed";
    /// A `block` namespace on a device that `[management] block_devices` does not list.
    pub const DEVICE_NOT_ALLOWED: &str = "device-not-allowed";
    /// `save` to a path that is neither the running configuration's file nor inside
    /// `[management] data_dirs`.
    pub const SAVE_PATH_NOT_ALLOWED: &str = "save-path-not-allowed";
    /// A mirror request on a namespace that is not mirrored.
    pub const NOT_MIRRORED: &str = "not-mirrored";
    /// A promotion refused (already primary; a witness decides and `force` was not given; the
    /// namespace's commands did not drain).
    pub const PROMOTE_REFUSED: &str = "promote-refused";
}

/// An API error: a stable code, the field path of the request that is wrong (empty when the
/// request as a whole is), and a message for a person.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiError {
    /// Stable machine-readable code (see [`codes`] and `ebof_config::codes`).
    pub code: String,
    /// Field path of the request that is wrong, e.g. `namespaces[0].size`; empty when the
    /// request as a whole is.
    #[serde(default)]
    pub path: String,
    /// What went wrong, for a person.
    pub message: String,
}

impl ApiError {
    /// An error with `code`, field `path` (may be empty) and `message`.
    pub fn new(code: &str, path: impl Into<String>, message: impl Into<String>) -> ApiError {
        ApiError {
            code: code.to_string(),
            path: path.into(),
            message: message.into(),
        }
    }

    /// A configuration validation error, re-rooted at `path` of the request.
    pub fn from_config(e: &ebof_config::ConfigError, path: &str) -> ApiError {
        let p = if e.path.is_empty() {
            path.to_string()
        } else {
            e.path.clone()
        };
        ApiError::new(e.code, p, e.message.clone())
    }

    /// The HTTP status that carries this error.
    pub fn http_status(&self) -> u16 {
        match self.code.as_str() {
            codes::UNKNOWN_ENDPOINT
            | codes::UNKNOWN_SUBSYSTEM
            | codes::UNKNOWN_HOST
            | codes::UNKNOWN_CONTROLLER
            | codes::UNKNOWN_NAMESPACE
            | codes::UNKNOWN_LISTENER
            | codes::UNKNOWN_MEMBER
            | codes::UNKNOWN_SNAPSHOT
            | ebof_config::codes::UNKNOWN_POOL
            | codes::NOT_A_CDC
            | codes::NOT_MIRRORED => 404,
            codes::NO_SPACE | codes::POOL_FULL => 507,
            codes::SNAPSHOT_BUSY => 503,
            codes::SNAPSHOT_FAILED => 500,
            codes::UNAUTHORIZED => 401,
            codes::PATH_NOT_ALLOWED | codes::DEVICE_NOT_ALLOWED | codes::SAVE_PATH_NOT_ALLOWED => {
                403
            }
            codes::METHOD_NOT_ALLOWED => 405,
            codes::INTERNAL | codes::SAVE_FAILED => 500,
            codes::UNSUPPORTED => 501,
            ebof_config::codes::DUPLICATE_HOST
            | ebof_config::codes::CONFLICTING_HOSTS
            | ebof_config::codes::DUPLICATE_NSID
            | ebof_config::codes::DUPLICATE_PATH
            | ebof_config::codes::DUPLICATE_UUID
            | ebof_config::codes::DUPLICATE_LISTENER
            | codes::LISTEN_FAILED
            | codes::NAMESPACE_NOT_MASKED
            | codes::DUPLICATE_MEMBER
            | codes::DUPLICATE_SNAPSHOT
            | codes::FILE_EXISTS
            | codes::SHRINK_NOT_CONFIRMED
            | codes::PROMOTE_REFUSED => 409,
            _ => 400,
        }
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        write!(f, "{} ({})", self.message, self.code)
    }
}

impl std::error::Error for ApiError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_round_trips_and_maps_status() {
        let e = ApiError::new(codes::UNKNOWN_SUBSYSTEM, "nqn", "no subsystem nqn.x");
        let j = serde_json::to_string(&e).unwrap();
        assert_eq!(serde_json::from_str::<ApiError>(&j).unwrap(), e);
        assert_eq!(e.http_status(), 404);
        assert_eq!(e.to_string(), "nqn: no subsystem nqn.x (unknown-subsystem)");
        let c = ebof_config::check_nqn("bogus").unwrap_err();
        let a = ApiError::from_config(&c, "hostnqn");
        assert_eq!(a.code, ebof_config::codes::INVALID_NQN);
        assert_eq!(a.path, "hostnqn");
        assert_eq!(a.http_status(), 400);
        assert_eq!(
            ApiError::new(codes::UNAUTHORIZED, "", "no token").http_status(),
            401
        );
    }
}
