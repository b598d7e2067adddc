//! The management API's vocabulary, shared by the server and the client: routes, request and
//! response bodies, and [`ApiError`] with its stable [`codes`].
//!
//! Version 1 (`/v1/…`). Requests and responses are JSON objects; an error is always an
//! [`ApiError`] body with an HTTP status that matches its code. Adding a field to a response
//! is compatible; renaming or removing one needs `/v2`.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Path prefix of this API version.
pub const PREFIX: &str = "/v1";

/// Routes, as the server mounts them and the client builds them.
pub mod routes {
    /// `GET`: the running state ([`super::State`]).
    pub const STATE: &str = "/v1/state";
    /// `GET`: counters ([`super::Stats`]).
    pub const STATS: &str = "/v1/stats";
    /// `GET`: Prometheus text exposition (also on `--metrics-listen`).
    pub const METRICS: &str = "/metrics";
    /// `POST` [`super::SubsystemRequest`]: add a subsystem (no namespaces yet).
    pub const SUBSYSTEMS: &str = "/v1/subsystems";
    /// `DELETE`: remove a subsystem (its controllers are disconnected).
    pub const SUBSYSTEM: &str = "/v1/subsystems/{nqn}";
    /// `POST` [`super::HostRequest`]: allow a host; `DELETE …/hosts/{hostnqn}`: deny it.
    pub const HOSTS: &str = "/v1/subsystems/{nqn}/hosts";
    /// `DELETE`: deny a host.
    pub const HOST: &str = "/v1/subsystems/{nqn}/hosts/{hostnqn}";
    /// `PUT` [`crate::hostkeys::HostKeyRequest`]: the host's DH-HMAC-CHAP keys on this
    /// subsystem (live, never shown); `DELETE`: remove them.
    pub const HOST_DHCHAP: &str = "/v1/subsystems/{nqn}/hosts/{hostnqn}/dhchap";
    /// `PUT` [`super::AllowAnyHostRequest`].
    pub const ALLOW_ANY_HOST: &str = "/v1/subsystems/{nqn}/allow_any_host";
    /// `DELETE`: disconnect a controller (all its queues close).
    pub const CONTROLLER: &str = "/v1/controllers/{cntlid}";
    /// `POST` [`super::NamespaceRequest`]: add a namespace to a running subsystem.
    pub const NAMESPACES: &str = "/v1/subsystems/{nqn}/namespaces";
    /// `DELETE`: remove a namespace; `PUT` [`super::ResizeRequest`] …`/size`: resize it.
    pub const NAMESPACE: &str = "/v1/subsystems/{nqn}/namespaces/{nsid}";
    /// `PUT` [`super::ResizeRequest`]: change a namespace's size.
    pub const NAMESPACE_SIZE: &str = "/v1/subsystems/{nqn}/namespaces/{nsid}/size";
    /// `POST` [`super::ListenerRequest`]: start listening.
    pub const LISTENERS: &str = "/v1/listeners";
    /// `DELETE`: stop listening on `ADDR:PORT` (connections made through it stay).
    pub const LISTENER: &str = "/v1/listeners/{address}";
    /// `POST` [`super::SaveRequest`]: write the running configuration as TOML.
    pub const SAVE: &str = "/v1/save";
    /// `PUT` [`super::AnaRequest`]: set the ANA state of a group on a listener.
    pub const ANA: &str = "/v1/ana";
    /// `GET`: what is published over mDNS ([`super::MdnsView`]); `PUT`
    /// [`super::MdnsRequest`]: switch publishing on, off or to auto.
    pub const MDNS: &str = "/v1/mdns";
    /// Per-host namespace masking: `PUT` [`super::NamespaceHostsRequest`] restricts the
    /// namespace to exactly those hosts; `POST` [`super::HostRequest`] attaches one more host;
    /// `DELETE` makes it visible to every host the subsystem admits again.
    pub const NAMESPACE_HOSTS: &str = "/v1/subsystems/{nqn}/namespaces/{nsid}/hosts";
    /// `DELETE`: detach a host from a namespace (the namespace disappears from its view).
    pub const NAMESPACE_HOST: &str = "/v1/subsystems/{nqn}/namespaces/{nsid}/hosts/{hostnqn}";
    /// `PUT`: set a namespace's QoS limits ([`super::QosRequest`]); `DELETE`: remove them.
    pub const NAMESPACE_QOS: &str = "/v1/subsystems/{nqn}/namespaces/{nsid}/qos";
    /// `GET`: the referrals served ([`super::Referrals`]); `POST` [`super::ReferralRequest`]:
    /// add one.
    pub const REFERRALS: &str = "/v1/discovery/referrals";
    /// `DELETE`: stop referring hosts to `ADDR:PORT`.
    pub const REFERRAL: &str = "/v1/discovery/referrals/{address}";
    /// `GET`: the DIM registrations hosts made (`Vec<`[`super::DimRegistrationView`]`>`).
    pub const REGISTRATIONS: &str = "/v1/discovery/registrations";
    /// `GET`: the Central Discovery Controller's members ([`super::CdcView`]).
    pub const CDC: &str = "/v1/cdc";
    /// `POST` [`super::CdcMemberRequest`]: add a member to the Central Discovery Controller.
    pub const CDC_MEMBERS: &str = "/v1/cdc/members";
    /// `DELETE`: remove member `{address}` (`ADDR:PORT`) from the Central Discovery Controller.
    pub const CDC_MEMBER: &str = "/v1/cdc/members/{address}";
    /// `GET`: who may announce itself to the Central Discovery Controller
    /// ([`super::CdcTrusted`]); `PUT` [`super::CdcTrusted`]: replace the list (saved as
    /// `[cdc] trusted`).
    pub const CDC_TRUSTED: &str = "/v1/cdc/trusted";
    /// `POST` [`super::SnapshotRequest`]: take a snapshot of a file namespace
    /// ([`super::SnapshotView`]).
    pub const NAMESPACE_SNAPSHOTS: &str = "/v1/subsystems/{nqn}/namespaces/{nsid}/snapshots";
    /// `GET`: every snapshot the target knows (`Vec<`[`super::SnapshotView`]`>`).
    pub const SNAPSHOTS: &str = "/v1/snapshots";
    /// `DELETE`: delete a snapshot (its file and manifest; clones made from it stay).
    pub const SNAPSHOT: &str = "/v1/snapshots/{name}";
    /// `POST` [`super::CloneRequest`]: a writable clone of the snapshot, added as a new file
    /// namespace ([`super::CloneMade`]).
    pub const SNAPSHOT_CLONES: &str = "/v1/snapshots/{name}/clones";
    /// `GET`: the storage pools (`Vec<`[`super::PoolView`]`>`).
    pub const POOLS: &str = "/v1/pools";

    /// `route` with each `{name}` replaced by the percent-encoded value, in order.
    pub fn fill(route: &str, values: &[&str]) -> String {
        let mut out = String::with_capacity(route.len() + 64);
        let mut rest = route;
        let mut values = values.iter();
        while let Some(open) = rest.find('{') {
            out.push_str(&rest[..open]);
            let Some(close) = rest[open..].find('}') else {
                break;
            };
            out.push_str(&super::percent_encode(values.next().copied().unwrap_or("")));
            rest = &rest[open + close + 1..];
        }
        out.push_str(rest);
        out
    }
}

/// Percent-encode a path segment (RFC 3986: everything but unreserved characters and `:`,
/// `@`, which NQNs use and paths allow).
pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b':' | b'@' => {
                out.push(char::from(b))
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

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
            | codes::NOT_A_CDC => 404,
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
            | codes::SHRINK_NOT_CONFIRMED => 409,
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

/// A storage pool as `GET /v1/pools` and `GET /v1/state` show it. Sizes in bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolView {
    /// Its name.
    pub name: String,
    /// The directory its namespaces' files are made in.
    pub directory: String,
    /// `size` of `[[pools]]`: the most it hands out; absent: no cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_limit: Option<u64>,
    /// `size_limit`, else the file system's total bytes.
    pub capacity_bytes: u64,
    /// The sizes of its namespaces added up (clones made into it included).
    pub provisioned_bytes: u64,
    /// What their files hold now (thin files: the blocks written).
    pub used_bytes: u64,
    /// What can still be provisioned: the file system's available bytes less the unwritten
    /// part of the pool's namespaces (`provisioned - used`, reserved so the pool never
    /// over-commits the file system), and at most `size_limit - provisioned`; never below 0.
    pub free_bytes: u64,
    /// How many namespaces it holds.
    pub namespaces: u32,
    /// The file system under the directory (absent when the directory cannot be read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filesystem: Option<FsSpaceView>,
}

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

/// The ANA state of one group on one listener.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnaView {
    /// `ADDR:PORT` of the listener.
    pub listener: String,
    /// ANA group ID (1..=32).
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
    /// 1..=32.
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

/// A namespace as `GET /v1/state` and the namespace requests report it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamespaceView {
    /// Namespace ID.
    pub nsid: u32,
    /// `ram`, `file` or `block`.
    pub backend: String,
    /// Bytes.
    pub size: u64,
    /// Logical block size, bytes (512 or 4096).
    pub block_size: u32,
    /// RFC 4122 text form.
    pub uuid: String,
    /// NGUID as Identify reports it, 32 hex digits.
    #[serde(default)]
    pub nguid: String,
    /// IEEE EUI-64 as Identify reports it, 16 hex digits.
    #[serde(default)]
    pub eui64: String,
    /// File or device path (file and block namespaces).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// ANA group.
    #[serde(default = "default_ana_group")]
    pub ana_group: u32,
    /// Reservations (NVMe Base 2.0 8.19), when a host registered or PTPL is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation: Option<ReservationView>,
    /// Per-host masking: the host NQNs that see the namespace (possibly none); absent when
    /// every host the subsystem admits sees it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosts: Option<Vec<String>>,
    /// Thin provisioned (Identify Namespace NSFEAT bit 0): space is taken as blocks are
    /// written and given back on deallocate (file namespaces; RAM ones not pinned for RDMA).
    #[serde(default)]
    pub thin: bool,
    /// Bytes the backend holds now (NUSE × block size for a thin namespace; a block device
    /// counts its whole size); `size` is the capacity (NSZE, NCAP, NVMCAP).
    #[serde(default)]
    pub allocated_bytes: u64,
    /// The file system under a file namespace (what the namespace can still grow into).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filesystem: Option<FsSpaceView>,
    /// QoS limits and how much commands waited for them; absent when the namespace has no
    /// limit and nothing ever waited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos: Option<QosView>,
}

/// A namespace's QoS limits (0: unlimited; MB are 10^6 bytes) and their effect so far.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QosView {
    /// Commands per second, both directions.
    #[serde(default)]
    pub iops: u64,
    /// MB/s, both directions.
    #[serde(default)]
    pub mbps: u64,
    /// Read commands per second.
    #[serde(default)]
    pub read_iops: u64,
    /// Write commands per second.
    #[serde(default)]
    pub write_iops: u64,
    /// MB/s read.
    #[serde(default)]
    pub read_mbps: u64,
    /// MB/s written.
    #[serde(default)]
    pub write_mbps: u64,
    /// Commands that waited for the limits since the target started (published by each queue
    /// at least every 500 ms).
    #[serde(default)]
    pub waited: u64,
    /// Their total wait, in microseconds.
    #[serde(default)]
    pub wait_us: u64,
}

/// Size and free space of the file system holding a file namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsSpaceView {
    /// Bytes in all.
    pub total_bytes: u64,
    /// Bytes still available to allocate.
    pub available_bytes: u64,
    /// The file system's id (`statvfs` f_fsid), the same for namespaces that share it.
    pub fsid: u64,
}

/// A namespace's reservation state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReservationView {
    /// Reservation generation (PRGEN).
    pub generation: u32,
    /// Reservation type held (1..=6), 0 for none.
    pub rtype: u8,
    /// Host identifier (32 hex digits) of the host holding it (All Registrants types: the one
    /// that acquired it; every registrant holds such a reservation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
    /// Persist Through Power Loss state.
    pub ptpl: bool,
    /// Registered hosts with their keys, in registration order.
    pub registrants: Vec<RegistrantView>,
}

/// One registrant of a namespace's reservation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegistrantView {
    /// Host identifier, 32 hex digits.
    pub hostid: String,
    /// Registration key, `0x` and 16 hex digits.
    pub key: String,
}

fn default_ana_group() -> u32 {
    1
}

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

/// `GET /v1/stats`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// Counters per namespace.
    pub namespaces: Vec<NamespaceStats>,
    /// Live controllers (I/O and discovery).
    pub controllers: usize,
    /// Connected I/O queues over all controllers.
    pub io_queues: usize,
    /// Controllers torn down because their keep-alive timer expired.
    pub keep_alive_expiries: u64,
    /// Controllers torn down through the management API (`ebof ctl disconnect`).
    pub admin_disconnects: u64,
    /// TCP connections open now (accepted and not yet closed).
    #[serde(default)]
    pub connections_open: u64,
    /// Connections accepted under the connection caps since start (TCP and RDMA).
    #[serde(default)]
    pub connections_accepted: u64,
    /// Refused at accept by the connection caps.
    #[serde(default)]
    pub connections_refused: u64,
    /// Connections terminated for a protocol error.
    #[serde(default)]
    pub protocol_errors: u64,
    /// Connections the host ended with H2CTermReq.
    #[serde(default)]
    pub host_terminations: u64,
    /// Connections closed for missing the ICReq / Connect deadline.
    #[serde(default)]
    pub handshake_timeouts: u64,
    /// Failed DH-HMAC-CHAP authentications (per queue).
    #[serde(default)]
    pub auth_failures: u64,
    /// Connections refused or ended by TLS.
    #[serde(default)]
    pub tls_failures: u64,
}

/// Latency percentiles of a namespace's successful reads or writes since the start, in
/// microseconds (upper bounds of the histogram buckets they fall in: at most 25 % high).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LatencyPercentiles {
    /// Commands counted.
    pub count: u64,
    /// Mean latency, µs.
    pub mean_us: f64,
    /// Median latency, µs.
    pub p50_us: f64,
    /// 99th percentile, µs.
    pub p99_us: f64,
    /// 99.9th percentile, µs.
    pub p999_us: f64,
    /// 99.99th percentile, µs.
    pub p9999_us: f64,
}

/// Counters of one namespace (summed over all controllers, published by queues in batches:
/// at most about a second behind).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NamespaceStats {
    /// NQN of the namespace's subsystem.
    pub subsystem: String,
    /// Namespace ID.
    pub nsid: u32,
    /// Read commands completed.
    pub read_commands: u64,
    /// Write commands completed.
    pub write_commands: u64,
    /// Bytes read by hosts.
    pub bytes_read: u64,
    /// Bytes written by hosts.
    pub bytes_written: u64,
    /// Commands failed with a media error (SMART Media and Data Integrity Errors).
    pub media_errors: u64,
    /// Read latency (absent before the first read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_latency: Option<LatencyPercentiles>,
    /// Write latency (absent before the first write).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_latency: Option<LatencyPercentiles>,
    /// Backend failures by class (`no_space`, `media`, …); only classes that happened.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub backend_errors: std::collections::BTreeMap<String, u64>,
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

/// `POST /v1/subsystems/{nqn}/namespaces`: a namespace as the configuration file's
/// `[[subsystems.namespaces]]` describes one (`backend` = `ram` with `size`, `file` with `path`
/// and optional `size`, `block` with `path`). Absent fields take the file's defaults: the
/// lowest free NSID, 512-byte blocks, the UUID derived from NQN and NSID, buffered I/O.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamespaceRequest {
    /// NSID; default the lowest free one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nsid: Option<u32>,
    /// `ram`, `file` or `block` (required; may be left out, empty, with `pool`: `file`).
    #[serde(default)]
    pub backend: String,
    /// Bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// File or device path (`file` and `block`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Logical block size in bytes, 512 or 4096; default 512.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_size: Option<u32>,
    /// UUID in text form; default derived from the subsystem NQN and NSID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// Bypass the page cache (`O_DIRECT`; `file` and `block` only); default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direct: Option<bool>,
    /// ANA group (1..=32; default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ana_group: Option<u32>,
    /// Only these host NQNs see the namespace (from the moment it is added); absent: every
    /// host the subsystem admits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosts: Option<Vec<String>>,
    /// QoS limits from the moment it is added (as `PUT …/qos` takes them); absent: unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos: Option<QosRequest>,
    /// Make the namespace in this storage pool: a sparse file of `size` (required) that the
    /// box names itself (`path` must be absent; see `ebof_config::pool_file_name`), counted
    /// against the pool's free bytes (`pool-full` beyond them) and deleted when the namespace
    /// is removed. `backend` may be left out (it is `file`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
}

/// `PUT /v1/subsystems/{nqn}/namespaces/{nsid}/hosts`: the hosts that may see the namespace
/// (an empty list hides it from every host).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamespaceHostsRequest {
    /// Host NQNs, each once.
    pub hosts: Vec<String>,
}

/// `PUT /v1/subsystems/{nqn}/namespaces/{nsid}/qos`: the namespace's QoS limits, as a whole
/// (a key not given is unlimited; 0 is unlimited; MB are 10^6 bytes). The keys of the
/// configuration's `qos = { … }`, checked the same way (code `invalid-qos`, field the key).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QosRequest {
    /// Commands per second, both directions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iops: Option<i64>,
    /// MB/s, both directions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mbps: Option<i64>,
    /// Read commands per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_iops: Option<i64>,
    /// Write commands per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_iops: Option<i64>,
    /// MB/s read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_mbps: Option<i64>,
    /// MB/s written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_mbps: Option<i64>,
}

/// Answer of `POST …/namespaces` and `PUT …/size`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamespaceChanged {
    /// NQN of the namespace's subsystem.
    pub subsystem: String,
    /// The namespace as it is now.
    pub namespace: NamespaceView,
}

/// `PUT /v1/subsystems/{nqn}/namespaces/{nsid}/size`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResizeRequest {
    /// New size in bytes (a positive multiple of the block size).
    pub size: u64,
    /// Must be true to make the namespace smaller (the data past the new end is discarded).
    #[serde(default)]
    pub shrink: bool,
}

/// Answer of `DELETE /v1/subsystems/{nqn}/namespaces/{nsid}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamespaceRemoved {
    /// NQN of the subsystem it was removed from.
    pub subsystem: String,
    /// NSID of the removed namespace.
    pub nsid: u32,
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

/// Lower-case hex digits of `b`, as `nvme id-ns` prints NGUID and EUI-64.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Text form of a UUID.
pub fn uuid_string(u: &[u8; 16]) -> String {
    uuid::Uuid::from_bytes(*u).hyphenated().to_string()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_fill_encodes_segments() {
        assert_eq!(
            routes::fill(routes::HOST, &["nqn.2026-11.io.ebof:a", "nqn.x y/z"]),
            "/v1/subsystems/nqn.2026-11.io.ebof:a/hosts/nqn.x%20y%2Fz"
        );
        assert_eq!(
            routes::fill(routes::CONTROLLER, &["7"]),
            "/v1/controllers/7"
        );
        assert_eq!(routes::fill(routes::STATE, &[]), routes::STATE);
    }

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

    #[test]
    fn uuid_text() {
        let u = [
            0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab,
            0xcd, 0xef,
        ];
        assert_eq!(uuid_string(&u), "12345678-9abc-def0-0123-456789abcdef");
    }
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

/// `POST /v1/subsystems/{nqn}/namespaces/{nsid}/snapshots`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnapshotRequest {
    /// Name, unique in the target: `[A-Za-z0-9._-]`, a letter or digit first, 1 to 64
    /// characters.
    pub name: String,
}

/// Where a snapshot was taken from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotOrigin {
    /// Subsystem NQN.
    pub subsystem: String,
    /// Namespace ID.
    pub nsid: u32,
    /// Namespace UUID (text form).
    pub uuid: String,
    /// The namespace's file when the snapshot was taken.
    pub path: String,
}

/// A snapshot, as listed and as answered when taken.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotView {
    /// Its name.
    pub name: String,
    /// The namespace it is a copy of.
    pub origin: SnapshotOrigin,
    /// Bytes.
    pub size: u64,
    /// Logical block size of the origin, bytes.
    pub block_size: u32,
    /// When it was taken, seconds since the Unix epoch.
    pub created: u64,
    /// `reflink` (extents shared with the origin) or `copy` (no reflink on that file system).
    pub method: String,
    /// The snapshot's data file (read-only by convention; clones are made from it).
    pub path: String,
    /// How long the origin's I/O was held while the snapshot was made, microseconds.
    #[serde(default)]
    pub pause_us: u64,
    /// How long taking the snapshot took in all (flush, hold, clone, sync), microseconds.
    #[serde(default)]
    pub duration_us: u64,
}

/// Answer of `DELETE /v1/snapshots/{name}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotDeleted {
    /// Its name.
    pub name: String,
    /// The data file removed.
    pub path: String,
}

/// `POST /v1/snapshots/{name}/clones`: a new file namespace whose data starts as the
/// snapshot's.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CloneRequest {
    /// The subsystem that gets the namespace.
    pub subsystem: String,
    /// NSID; default the lowest free one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nsid: Option<u32>,
    /// The clone's file (never overwritten); default beside the snapshot's directory, named
    /// after the subsystem, NSID and snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// UUID in text form; default derived from the subsystem NQN and NSID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// ANA group (1..=32; default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ana_group: Option<u32>,
    /// Only these host NQNs see the namespace; absent: every host the subsystem admits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosts: Option<Vec<String>>,
    /// Make the clone's file in this storage pool (named by the box, as a namespace added to
    /// the pool; `path` must be absent), counted against its free bytes (`pool-full`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
}

/// Answer of `POST /v1/snapshots/{name}/clones`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CloneMade {
    /// The snapshot it was made from.
    pub snapshot: String,
    /// `reflink` or `copy`.
    pub method: String,
    /// How long making the file took, microseconds.
    pub duration_us: u64,
    /// The namespace added.
    pub added: NamespaceChanged,
}
