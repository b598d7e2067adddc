//! Storage pools, snapshots and clones.

use crate::{FsSpaceView, NamespaceChanged};
use serde::{Deserialize, Serialize};

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
    /// The pool is encrypted at rest (`encryption` on `[[pools]]`; ADR 0029). Never the key.
    /// Absent (old boxes, plain pools): false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub encrypted: bool,
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
    /// ANA group (1..=1024; default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ana_group: Option<u32>,
    /// Only these host NQNs see the namespace; absent: every host the subsystem admits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosts: Option<Vec<String>>,
    /// Make the clone's file in this storage pool (named by the box, as a namespace added to
    /// the pool; `path` must be absent), counted against its free bytes (`pool-full`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// Mirror the clone with the same namespace on a peer box (as a namespace's `mirror`,
    /// ADR 0028): a primary copies itself whole to its new secondary. Absent: not mirrored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror: Option<ebof_config::MirrorFields>,
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
