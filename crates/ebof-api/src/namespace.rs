//! Namespaces: adding, resizing and removing them, per-host masking and QoS limits.

use serde::{Deserialize, Serialize};

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
    /// Replication state of a mirrored namespace (ADR 0028); absent when not mirrored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror: Option<MirrorView>,
    /// Whether the data is encrypted at rest (ADR 0029; by its own key or its pool's). The
    /// key itself is never in the API.
    #[serde(default)]
    pub encrypted: bool,
}

/// A mirrored namespace's replication state (`GET …/namespaces/{nsid}/mirror`,
/// `ebof ctl --json ns mirror status`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MirrorView {
    /// `primary` or `secondary`.
    pub role: String,
    /// The volume's epoch (raised by every promotion).
    pub epoch: u64,
    /// The peer box's listener.
    pub peer: String,
    /// `in-sync`, `degraded`, `resyncing` or `connecting` (a secondary says `connecting`: it
    /// has no link of its own).
    pub state: String,
    /// Bytes copied by the resync in progress.
    pub resync_done: u64,
    /// Bytes the resync in progress copies in all.
    pub resync_total: u64,
    /// Bytes the peer still lacks (dirty regions × region size).
    pub resync_bytes_left: u64,
    /// Regions marked in the write-intent bitmap.
    pub dirty_regions: u64,
    /// Replicated operations in flight.
    pub in_flight: u64,
    /// Milliseconds left of the primary's lease (null without a witness).
    pub lease_ms_left: Option<u64>,
    /// The primary lost its lease: it completes no write until it has it again.
    pub fenced: bool,
}

/// `POST /v1/subsystems/{nqn}/namespaces/{nsid}/mirror/promote`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MirrorPromoteRequest {
    /// Promote although a witness decides (an operator override: the old primary must be
    /// known dead, or two primaries may write).
    #[serde(default)]
    pub force: bool,
}

/// A namespace's QoS limits (0: unlimited; MB are 10^6 bytes) and their effect so far. The
/// limits are the configuration's [`ebof_config::Qos`], their keys inline in the JSON object
/// (`iops`, `mbps`, `read_iops`, `write_iops`, `read_mbps`, `write_mbps`, then `waited`,
/// `wait_us`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QosView {
    /// The limits.
    #[serde(flatten)]
    pub limits: ebof_config::Qos,
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
    /// ANA group (1..=1024; default 1).
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
    /// Mirror the namespace with the same namespace on a peer box (the configuration's
    /// `mirror = { peer, role }`, code `invalid-mirror`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror: Option<ebof_config::MirrorFields>,
    /// Encrypt a file or block namespace outside pools with the 64-byte key in this key file
    /// (the configuration's `encryption = { key_file }`, ADR 0029; codes
    /// `invalid-encryption`, `key-file-*`, `wrong-key`). A namespace in an encrypted pool is
    /// encrypted by the pool: leave it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption: Option<ebof_config::EncryptionFields>,
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
/// (a key not given is unlimited; 0 is unlimited; MB are 10^6 bytes). It is the
/// configuration's `qos = { … }` itself ([`ebof_config::QosFields`]: the same keys, checked the
/// same way, code `invalid-qos`, field the key); absent keys are left out of the JSON.
pub type QosRequest = ebof_config::QosFields;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qos_json_is_what_it_was() {
        let v = QosView {
            limits: ebof_config::Qos {
                iops: 1,
                mbps: 2,
                read_iops: 3,
                write_iops: 4,
                read_mbps: 5,
                write_mbps: 6,
            },
            waited: 7,
            wait_us: 8,
        };
        let j = r#"{"iops":1,"mbps":2,"read_iops":3,"write_iops":4,"read_mbps":5,"write_mbps":6,"waited":7,"wait_us":8}"#;
        assert_eq!(serde_json::to_string(&v).unwrap(), j);
        assert_eq!(serde_json::from_str::<QosView>(j).unwrap(), v);
        let sparse: QosView = serde_json::from_str(r#"{"write_iops":4}"#).unwrap();
        assert_eq!(sparse.limits.write_iops, 4);
        assert_eq!((sparse.limits.iops, sparse.waited), (0, 0));
        let req = QosRequest {
            iops: Some(10),
            write_mbps: Some(0),
            ..Default::default()
        };
        let j = r#"{"iops":10,"write_mbps":0}"#;
        assert_eq!(serde_json::to_string(&req).unwrap(), j);
        assert_eq!(serde_json::from_str::<QosRequest>(j).unwrap(), req);
        assert!(serde_json::from_str::<QosRequest>(r#"{"iops":1,"x":2}"#).is_err());
    }
}
