//! DH-HMAC-CHAP keys of one host on one subsystem: `PUT
//! /v1/subsystems/{nqn}/hosts/{hostnqn}/dhchap` ([`HostKeyRequest`]) and `DELETE` on the same
//! route, answered with a [`HostKeyView`]. What the CSI controller uses to give each (volume,
//! node) pair its own secret.
//!
//! The keys travel only in the request body. They are never returned (answers say whether a
//! key is set), and `Debug` does not show them.

use serde::{Deserialize, Serialize};
use std::fmt;

/// `PUT …/hosts/{hostnqn}/dhchap`: the host's DH-HMAC-CHAP secret on this subsystem, and the
/// controller's for bidirectional authentication. Replaces what was set before.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostKeyRequest {
    /// The host's secret, `DHHC-1:NN:<base64>:` (as `nvme gen-dhchap-key` makes).
    pub dhchap_key: String,
    /// The controller's secret (the host's `--dhchap-ctrl-secret`), if the controller must
    /// authenticate to the host too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dhchap_ctrl_key: Option<String>,
}

impl fmt::Debug for HostKeyRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostKeyRequest")
            .field("dhchap_key", &"<redacted>")
            .field(
                "dhchap_ctrl_key",
                &self.dhchap_ctrl_key.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

/// What a host must present on a subsystem, without the keys.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostKeyView {
    /// The subsystem.
    pub subsystem: String,
    /// The host.
    pub hostnqn: String,
    /// The host must authenticate with DH-HMAC-CHAP on this subsystem.
    pub dhchap: bool,
    /// The controller authenticates to the host too.
    pub bidirectional: bool,
}
