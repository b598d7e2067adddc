//! Listeners, and the ANA state of each group on each of them.

use serde::{Deserialize, Serialize};

/// A listener as `GET /v1/state` and the listener requests report it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListenerView {
    /// `ADDR:PORT`.
    pub address: String,
    /// Port ID in the discovery log (0 for the dedicated discovery listener).
    pub portid: u16,
    /// The dedicated discovery listener.
    #[serde(default)]
    pub discovery: bool,
    /// NVMe/TCP TLS: "off", "optional" or "required".
    #[serde(default = "tls_off")]
    pub tls: String,
    /// "tcp" or "rdma".
    #[serde(default = "tcp")]
    pub transport: String,
}

fn tls_off() -> String {
    "off".into()
}

fn tcp() -> String {
    "tcp".into()
}

/// `POST /v1/listeners`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenerRequest {
    /// `ADDR:PORT` (or `ADDR`, port 4420; 8009 for discovery).
    pub address: String,
    /// A dedicated discovery listener (only the discovery subsystem is reachable on it).
    #[serde(default)]
    pub discovery: bool,
}

/// Query of `DELETE /v1/listeners/{address}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenerRemoveQuery {
    /// Also disconnect the controllers whose hosts came in through this listener.
    #[serde(default)]
    pub disconnect: bool,
}

/// Answer of `DELETE /v1/listeners/{address}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListenerRemoved {
    /// The listener that was removed.
    pub listener: ListenerView,
    /// Controllers disconnected with it (only when asked).
    pub disconnected: Vec<u16>,
}

/// The ANA state of one group on one listener.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnaView {
    /// `ADDR:PORT` of the listener.
    pub listener: String,
    /// ANA group ID (1..=1024).
    pub group: u32,
    /// `optimized`, `non-optimized`, `inaccessible`, `persistent-loss` or `change`.
    pub state: String,
}

/// `PUT /v1/ana`: set the state of ANA `group` on `listener`; hosts connected through it get
/// an ANA Change event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnaRequest {
    /// `ADDR:PORT` of an NVMe listener.
    pub listener: String,
    /// 1..=1024.
    pub group: u32,
    /// The state to set: `optimized`, `non-optimized`, `inaccessible`, `persistent-loss` or
    /// `change`.
    pub state: String,
}

/// Answer of `PUT /v1/ana`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnaChanged {
    /// The group's state on the listener now.
    pub ana: AnaView,
    /// False when the group was in that state already.
    pub changed: bool,
    /// The ANA log page's change count after the request.
    pub change_count: u64,
}
