//! How the box makes itself known: discovery referrals, DIM registrations (TP 8010), mDNS
//! (TP 8009) and the Central Discovery Controller.

use serde::{Deserialize, Serialize};

/// `POST /v1/discovery/referrals`: refer hosts to another discovery service.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReferralRequest {
    /// `ADDR:PORT` or `ADDR` (port 8009) of the other discovery controller (NVMe/TCP).
    pub address: String,
}

/// The referrals served, answer of `GET`, `POST` and `DELETE` on the referral routes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Referrals {
    /// `ADDR:PORT` of each, in discovery log order.
    pub referrals: Vec<String>,
    /// False when the request changed nothing (a `GET`).
    pub changed: bool,
    /// The discovery log's generation counter after the request.
    pub genctr: u64,
}

/// One discovery information entry of a registration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DimEntryView {
    /// `tcp`, `rdma`, `fc` or the TRTYPE number.
    pub transport: String,
    /// TRADDR (the connection's source address when the host left it empty).
    pub address: String,
    /// TRSVCID (often empty for a host).
    pub service: String,
    /// The entry's NQN.
    pub nqn: String,
}

/// A DIM registration as `GET /v1/discovery/registrations` and `GET /v1/state` show it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DimRegistrationView {
    /// HOSTNQN of the connection that registered.
    pub host: String,
    /// Its HOSTID (UUID form).
    pub hostid: String,
    /// `host`, `ddc` or `cdc`.
    pub entity_type: String,
    /// The entity's NQN.
    pub entity: String,
    /// Entity name (e.g. the host name).
    pub name: String,
    /// Entity version (e.g. the OS).
    pub version: String,
    /// Symbolic name, when sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub symname: Option<String>,
    /// Transport entries.
    pub entries: Vec<DimEntryView>,
    /// The discovery listener address it came in on.
    pub local: String,
    /// The host's address on that connection, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<String>,
    /// Seconds since the first registration.
    pub registered_secs_ago: u64,
    /// Seconds since the last registration or update.
    pub updated_secs_ago: u64,
}

/// `PUT /v1/mdns`: publish the discovery listeners over mDNS (`on`: every one, loopback ones
/// too), none of them (`off`), or every one not on a loopback address (`auto`, the default).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MdnsRequest {
    /// `on`, `off` or `auto` (`[discovery] mdns = true`, `false`, or absent).
    pub mode: String,
}

/// What the mDNS responder publishes (`GET /v1/mdns`, `state.mdns`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MdnsView {
    /// `on`, `off` or `auto`.
    pub mode: String,
    /// One record per discovery listener the mode selects (in `off` mode: none).
    #[serde(default)]
    pub records: Vec<MdnsRecordView>,
    /// The responder's own failure (its socket, its thread), if any: publishing is best
    /// effort, NVMe is served regardless.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One DNS-SD service instance (TP 8009) for one discovery listener.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MdnsRecordView {
    /// `ADDR:PORT` of the listener.
    pub listener: String,
    /// `tcp` or `rdma`.
    pub transport: String,
    /// Service type, e.g. `_nvme-disc._tcp.local.`.
    pub service: String,
    /// Service instance name (unique per machine, address and port).
    pub instance: String,
    /// Host name of the SRV record (unique per machine, address and port).
    pub host: String,
    /// The addresses in the host's A/AAAA records, with the interface each is published on
    /// (`ADDR%IFACE`).
    #[serde(default)]
    pub addresses: Vec<String>,
    /// TXT record, `key=value` strings.
    #[serde(default)]
    pub txt: Vec<String>,
    /// `announced` (on the wire), `probing` (registered, not yet announced), `skipped`
    /// (the mode leaves it out) or `failed`.
    pub state: String,
    /// Why it is skipped or failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `GET /v1/cdc`: the Central Discovery Controller and its members.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CdcView {
    /// The host NQN of its connections to the members.
    pub hostnqn: String,
    /// Hosts it keeps a view for.
    pub hosts: usize,
    /// Its members, in address order.
    pub members: Vec<CdcMemberView>,
}

/// One member of the Central Discovery Controller.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CdcMemberView {
    /// `ADDR:PORT` of the member's discovery service.
    pub address: String,
    /// The persistent discovery connection is up.
    pub connected: bool,
    /// Why the last connection attempt or read failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Distinct NVM subsystem entries it shows over every known host.
    pub entries: usize,
    /// When what it shows some host last changed (seconds since the Unix epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_change: Option<u64>,
    /// It announced itself by DIM (pull registration) rather than being configured.
    #[serde(default)]
    pub announced: bool,
}

/// `GET` and `PUT /v1/cdc/trusted`: who may announce itself (DIM pull registration) besides
/// the configured members and DH-HMAC-CHAP authenticated connections.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CdcTrusted {
    /// Source IP addresses and host NQNs (`[cdc] trusted`), in order.
    pub trusted: Vec<String>,
}

/// `POST /v1/cdc/members`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CdcMemberRequest {
    /// `ADDR[:PORT]` of the member's discovery service (port 8009 by default).
    pub address: String,
}
