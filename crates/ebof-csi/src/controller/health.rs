//! Volume health and lookups (`VOLUME_CONDITION`, `GET_VOLUME`, `GET_SNAPSHOT`):
//! ControllerGetVolume, the condition ListVolumes' entries carry, and GetSnapshot.
//!
//! A volume's condition is what the controller sees from the boxes, the first of:
//! - **its box does not answer**: the volume is on no box that answers and some box does not
//!   (ControllerGetVolume answers the volume ID with this condition rather than an error, so
//!   the external-health-monitor reports it on the claim);
//! - **its namespace is missing**: a box holds the volume's subsystem without namespace 1 (an
//!   unfinished CreateVolume, or the namespace removed by hand);
//! - **its pool is full**: the file system under the volume's file has less room than the
//!   part of the volume not written yet (writes may fail with no space), or the pool's
//!   written bytes reached its capacity;
//! - for a replicated volume, **one copy**: the box of its other copy does not answer or has
//!   no copy, or the copy reports a replication state other than `in-sync`, or lost its lease.
//!
//! Anything else is normal ("volume ok on box …").

use super::{BoxState, Controller, Found};
use crate::names;
use crate::pb;
use crate::rpc::{ok, required};
use ebof_api::NamespaceView;
use tonic::{Request, Response, Status};

/// A condition.
pub(super) fn condition(abnormal: bool, message: impl Into<String>) -> pb::VolumeCondition {
    pb::VolumeCondition {
        abnormal,
        message: message.into(),
    }
}

/// Why the pool under namespace `ns` (of box state `b`) is full, if it is.
fn pool_full(b: &BoxState, ns: &NamespaceView) -> Option<String> {
    let pool = ns.path.as_deref().and_then(|path| {
        b.state.pools.iter().find(|p| {
            let dir = p.directory.trim_end_matches('/');
            path.strip_prefix(dir)
                .is_some_and(|rest| rest.starts_with('/'))
        })
    });
    let unwritten = ns.size.saturating_sub(ns.allocated_bytes);
    let fs = ns.filesystem.or_else(|| pool.and_then(|p| p.filesystem));
    let name = pool.map_or_else(|| "its pool".to_string(), |p| format!("pool {}", p.name));
    if let Some(fs) = fs
        && ns.thin
        && fs.available_bytes < unwritten
    {
        return Some(format!(
            "{name} is full: its file system has {} bytes free, less than the {unwritten} bytes of the volume not written yet (writes may fail with no space)",
            fs.available_bytes
        ));
    }
    match pool {
        Some(p) if p.capacity_bytes > 0 && p.used_bytes >= p.capacity_bytes => Some(format!(
            "{name} is full: {} of its {} bytes are written",
            p.used_bytes, p.capacity_bytes
        )),
        _ => None,
    }
}

impl Controller {
    /// The condition of the volume whose subsystems are `found` on the boxes that answered
    /// (`all`); `down`: the boxes that did not, with why.
    pub(super) fn condition_of(
        &self,
        all: &[BoxState],
        found: &[Found],
        down: &[(usize, Status)],
    ) -> pb::VolumeCondition {
        let Some(main) = Self::complete(found) else {
            if let Some(f) = found.first() {
                return condition(
                    true,
                    format!(
                        "box {} holds the volume's subsystem without its namespace {} (an unfinished CreateVolume, or the namespace was removed)",
                        self.boxes[f.idx].name,
                        names::NSID
                    ),
                );
            }
            return match down.first() {
                Some((_, e)) => condition(
                    true,
                    format!("the volume is on no box that answers: {}", e.message()),
                ),
                None => condition(true, "the volume is on no box"),
            };
        };
        let bname = &self.boxes[main.idx].name;
        let ns = main.sub.namespaces.iter().find(|n| n.nsid == names::NSID);
        if let (Some(b), Some(ns)) = (all.iter().find(|b| b.idx == main.idx), ns)
            && let Some(why) = pool_full(b, ns)
        {
            return condition(true, format!("box {bname}: {why}"));
        }
        if let Some(m) = &main.mirror {
            let peer = main
                .peer
                .or_else(|| self.box_by_host(&m.peer, main.idx))
                .filter(|&p| p != main.idx);
            let Some(p) = peer else {
                return condition(
                    true,
                    format!(
                        "one copy: its copy on box {bname} names peer {}, which is no box of the boxes file",
                        m.peer
                    ),
                );
            };
            let pname = &self.boxes[p].name;
            if let Some((_, e)) = down.iter().find(|(i, _)| *i == p) {
                return condition(
                    true,
                    format!(
                        "one copy: box {pname} of its other copy does not answer ({})",
                        e.message()
                    ),
                );
            }
            let complete = |f: &&Found| f.sub.namespaces.iter().any(|n| n.nsid == names::NSID);
            if !found.iter().filter(complete).any(|f| f.idx == p) {
                return condition(
                    true,
                    format!(
                        "one copy: box {pname} has no copy of it (CreateVolume completes a half-created volume)"
                    ),
                );
            }
            let (state, fenced) = &m.state;
            if *fenced {
                return condition(
                    true,
                    format!("its copy on box {bname} lost its lease (fenced): writes wait"),
                );
            }
            if !state.is_empty() && state != "in-sync" {
                return condition(
                    true,
                    format!("replication between boxes {bname} and {pname} is {state}"),
                );
            }
        }
        condition(false, format!("volume ok on box {bname}"))
    }

    /// ControllerGetVolume: the volume, its nodes and its condition. A volume on no box that
    /// answers while some box does not is answered with its ID and an abnormal condition.
    pub(super) async fn get_volume(
        &self,
        req: Request<pb::ControllerGetVolumeRequest>,
    ) -> Result<Response<pb::ControllerGetVolumeResponse>, Status> {
        let r = req.into_inner();
        required(&r.volume_id, "volume_id")?;
        let missing = || Status::not_found(format!("volume {} does not exist", r.volume_id));
        if !names::is_volume_id(&r.volume_id) {
            return Err(missing());
        }
        let (all, down) = self.scan_split().await;
        let found = self.find(&all, &r.volume_id);
        if found.is_empty() && down.is_empty() {
            return Err(missing());
        }
        let cond = self.condition_of(&all, &found, &down);
        let volume = self.volume_of(&all, &found).unwrap_or_else(|| pb::Volume {
            volume_id: r.volume_id.clone(),
            ..Default::default()
        });
        let published = Self::complete(&found)
            .map(|f| names::nodes(&f.sub.hosts))
            .unwrap_or_default();
        ok(pb::ControllerGetVolumeResponse {
            volume: Some(volume),
            status: Some(pb::controller_get_volume_response::VolumeStatus {
                published_node_ids: published,
                volume_condition: Some(cond),
            }),
        })
    }

    /// GetSnapshot: the snapshot, NOT_FOUND when no box has it and every box answered,
    /// UNAVAILABLE when it is on no box that answered and some box did not.
    pub(super) async fn snapshot_get(
        &self,
        req: Request<pb::GetSnapshotRequest>,
    ) -> Result<Response<pb::GetSnapshotResponse>, Status> {
        let r = req.into_inner();
        required(&r.snapshot_id, "snapshot_id")?;
        if !names::is_snapshot_id(&r.snapshot_id) {
            return Err(Status::not_found(format!(
                "snapshot {} does not exist",
                r.snapshot_id
            )));
        }
        let (all, down) = self.scan_split().await;
        match self.find_snapshot(&all, &r.snapshot_id) {
            Ok((_, s)) => ok(pb::GetSnapshotResponse {
                snapshot: Some(Self::snapshot_message(&s)),
            }),
            Err(e) => Err(down.into_iter().next().map_or(e, |(_, d)| d)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ebof_api::State;

    fn ns(path: &str, size: u64, allocated: u64, fs_free: Option<u64>) -> NamespaceView {
        let mut v = serde_json::json!({
            "nsid": 1, "backend": "file", "size": size, "block_size": 512, "uuid": "",
            "thin": true, "allocated_bytes": allocated, "path": path,
        });
        if let Some(f) = fs_free {
            v["filesystem"] =
                serde_json::json!({"total_bytes": 1u64 << 40, "available_bytes": f, "fsid": 1});
        }
        serde_json::from_value(v).unwrap()
    }

    fn boxed(pools: serde_json::Value) -> BoxState {
        let state: State = serde_json::from_value(serde_json::json!({
            "version": "t", "subsystems": [], "listeners": [], "controllers": [], "pools": pools,
        }))
        .unwrap();
        BoxState {
            idx: 0,
            state,
            mirrors: Default::default(),
            api_ip: None,
        }
    }

    #[test]
    fn a_pool_is_full_when_its_file_system_cannot_hold_the_rest_of_the_volume() {
        let b = boxed(serde_json::json!([{
            "name": "fast", "directory": "/pool/", "capacity_bytes": 1000,
            "provisioned_bytes": 800, "used_bytes": 100, "free_bytes": 200,
            "namespaces": 1,
            "filesystem": {"total_bytes": 4000, "available_bytes": 50, "fsid": 1},
        }]));
        let why = pool_full(&b, &ns("/pool/v1", 800, 100, None)).unwrap();
        assert!(why.contains("pool fast is full"), "{why}");
        assert!(pool_full(&b, &ns("/pool/v1", 800, 790, None)).is_none());
        assert!(pool_full(&b, &ns("/elsewhere/v1", 800, 100, None)).is_none());
        assert!(pool_full(&b, &ns("/poolx/v1", 800, 100, Some(10))).is_some());
        let written = boxed(serde_json::json!([{
            "name": "fast", "directory": "/pool", "capacity_bytes": 1000,
            "provisioned_bytes": 1000, "used_bytes": 1000, "free_bytes": 0, "namespaces": 1,
        }]));
        let why = pool_full(&written, &ns("/pool/v1", 1000, 1000, None)).unwrap();
        assert!(why.contains("1000 of its 1000 bytes"), "{why}");
    }
}
