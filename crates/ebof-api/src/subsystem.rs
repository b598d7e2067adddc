//! Subsystems, the hosts they admit, and live controllers.

use crate::NamespaceView;
use serde::{Deserialize, Serialize};

/// A subsystem as `GET /v1/state` and the subsystem requests report it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubsystemView {
    /// NVM Subsystem NQN.
    pub nqn: String,
    /// Serial number (Identify Controller SN).
    pub serial: String,
    /// Model number (Identify Controller MN).
    pub model: String,
    /// Any host may connect (`hosts` is then not consulted).
    pub allow_any_host: bool,
    /// Host NQNs allowed to connect.
    pub hosts: Vec<String>,
    /// Namespaces, by NSID.
    pub namespaces: Vec<NamespaceView>,
}

/// A live controller as `GET /v1/state` reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControllerView {
    /// Controller ID (what `DELETE /v1/controllers/{cntlid}` takes).
    pub cntlid: u16,
    /// `io` or `discovery`.
    pub kind: String,
    /// Subsystem NQN (the discovery NQN for a discovery controller).
    pub subsystem: String,
    /// Host NQN from the admin queue's Connect.
    pub hostnqn: String,
    /// Keep-alive timeout in milliseconds; `None` when disabled.
    pub kato_ms: Option<u64>,
    /// I/O queues connected now.
    pub io_queues: usize,
    /// The listener address the host connected to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listener: Option<String>,
}

/// `POST /v1/subsystems`: a new subsystem, with no namespaces. Absent fields take the
/// configuration file's defaults (derived serial, model `ebof`, allow any host).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubsystemRequest {
    /// NQN of the new subsystem.
    pub nqn: String,
    /// Serial number (at most 20 ASCII characters); default derived from `[target]
    /// serial_prefix` and the NQN.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial: Option<String>,
    /// Model number (at most 40 ASCII characters); default `ebof`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Let any host connect; default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_any_host: Option<bool>,
}

/// Answer of `DELETE /v1/subsystems/{nqn}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubsystemRemoved {
    /// NQN of the removed subsystem.
    pub nqn: String,
    /// Controllers that were connected to it and are now disconnected.
    pub disconnected: Vec<u16>,
}

/// `POST /v1/subsystems/{nqn}/hosts`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostRequest {
    /// Host NQN to allow.
    pub hostnqn: String,
}

/// `PUT /v1/subsystems/{nqn}/allow_any_host`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AllowAnyHostRequest {
    /// Let any host connect (true) or only the allowed hosts (false).
    pub allow_any_host: bool,
}

/// Answer of `DELETE /v1/controllers/{cntlid}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Disconnected {
    /// Controller ID of the disconnected controller.
    pub cntlid: u16,
    /// Its host's NQN.
    pub hostnqn: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_reject_unknown_fields() {
        let e = serde_json::from_str::<HostRequest>(r#"{"hostnqn":"a","x":1}"#).unwrap_err();
        assert!(e.to_string().contains("unknown field `x`"), "{e}");
        assert!(
            serde_json::from_str::<AllowAnyHostRequest>(r#"{"allow_any_host":"yes"}"#).is_err()
        );
        let ok: HostRequest = serde_json::from_str(r#"{"hostnqn":"nqn.a:b"}"#).unwrap();
        assert_eq!(ok.hostnqn, "nqn.a:b");
    }
}
