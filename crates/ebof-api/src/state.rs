//! The whole box at a glance (`GET /v1/state`), saving the running configuration, and the
//! text forms of identifiers the views use.

use crate::{
    AnaView, CdcView, ControllerView, DimRegistrationView, ListenerView, MdnsView, PoolView,
    SnapshotView, SubsystemView,
};
use serde::{Deserialize, Serialize};

/// `GET /v1/state`: what the target serves now, and who is connected.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    /// `ebof` version of the server.
    pub version: String,
    /// Subsystems served, with their namespaces.
    pub subsystems: Vec<SubsystemView>,
    /// Listeners, NVMe and discovery.
    pub listeners: Vec<ListenerView>,
    /// Controllers live now.
    pub controllers: Vec<ControllerView>,
    /// ANA states that are not optimized, by listener and group (every other pair is).
    #[serde(default)]
    pub ana: Vec<AnaView>,
    /// mDNS (TP 8009): the mode and the records published.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mdns: Option<MdnsView>,
    /// Discovery services hosts are referred to (`ADDR:PORT`, in discovery log order).
    #[serde(default)]
    pub referrals: Vec<String>,
    /// What hosts registered with Discovery Information Management (TP 8010).
    #[serde(default)]
    pub registrations: Vec<DimRegistrationView>,
    /// The Central Discovery Controller, when this box is one (`[cdc]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cdc: Option<CdcView>,
    /// Snapshots of namespaces (by name).
    #[serde(default)]
    pub snapshots: Vec<SnapshotView>,
    /// Storage pools (`[[pools]]`), in configuration order.
    #[serde(default)]
    pub pools: Vec<PoolView>,
}

/// `POST /v1/save`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SaveRequest {
    /// Where to write; default: the file `ebof serve` was started with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// Answer of `POST /v1/save`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Saved {
    /// The file written.
    pub path: String,
    /// Bytes written.
    pub bytes: u64,
}

/// `GET /v1/support`: what a support bundle (`ebof ctl dump`) needs from the box itself.
/// Nothing secret: inline keys of the configuration are replaced by [`REDACTED`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SupportView {
    /// `ebof` version of the server.
    pub version: String,
    /// The box's kernel, as `uname -srvm` prints it.
    pub kernel: String,
    /// The running configuration as TOML (`ebof ctl save` writes the same), every inline
    /// secret (DH-HMAC-CHAP keys, TLS PSKs) replaced by [`REDACTED`]; paths of key and token
    /// files stay.
    pub config: String,
    /// How many secrets were redacted from `config`.
    pub redacted: usize,
}

/// What stands in for a secret in [`SupportView::config`].
pub const REDACTED: &str = "<redacted>";

/// Lower-case hex digits of `b`, as `nvme id-ns` prints NGUID and EUI-64.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Text form of a UUID.
pub fn uuid_string(u: &[u8; 16]) -> String {
    uuid::Uuid::from_bytes(*u).hyphenated().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_text() {
        let u = [
            0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab,
            0xcd, 0xef,
        ];
        assert_eq!(uuid_string(&u), "12345678-9abc-def0-0123-456789abcdef");
    }
}
