//! Snapshots: CreateSnapshot, DeleteSnapshot and ListSnapshots over the boxes, and how a
//! snapshot is found and described. A replicated volume's snapshot is asked of its primary,
//! which takes it on both copies at one point in time (see [`super::mirror`]).

use super::checks::page;
use super::{BoxState, Controller, api_code};
use crate::names;
use crate::pb;
use crate::rpc::{invalid, ok, required};
use ebof_api::SnapshotView;
use std::collections::BTreeMap;
use tonic::{Request, Response, Status};

impl Controller {
    /// The box and view of snapshot `id`, or NOT_FOUND.
    pub(super) fn find_snapshot(
        &self,
        all: &[BoxState],
        id: &str,
    ) -> Result<(usize, SnapshotView), Status> {
        all.iter()
            .find_map(|b| {
                b.state
                    .snapshots
                    .iter()
                    .find(|s| s.name == id)
                    .map(|s| (b.idx, s.clone()))
            })
            .ok_or_else(|| Status::not_found(format!("snapshot {id} does not exist")))
    }

    pub(super) fn snapshot_message(v: &SnapshotView) -> pb::Snapshot {
        pb::Snapshot {
            size_bytes: v.size as i64,
            snapshot_id: v.name.clone(),
            source_volume_id: v.origin.subsystem.clone(),
            creation_time: Some(prost_types::Timestamp {
                seconds: v.created as i64,
                nanos: 0,
            }),
            ready_to_use: true,
        }
    }

    /// CreateSnapshot: idempotent by name; a name taken by a snapshot of another volume is
    /// ALREADY_EXISTS.
    pub(super) async fn snapshot_create(
        &self,
        req: Request<pb::CreateSnapshotRequest>,
    ) -> Result<Response<pb::CreateSnapshotResponse>, Status> {
        let r = req.into_inner();
        names::check_name(&r.name).map_err(|e| invalid(format!("name: {e}")))?;
        required(&r.source_volume_id, "source_volume_id")?;
        tracing::info!(name = %r.name, volume = %r.source_volume_id, "CreateSnapshot");
        let id = names::snapshot_name(&r.name);
        let _busy = self.busy.hold(&id)?;
        let all = self.scan_all().await?;
        if let Ok((_, s)) = self.find_snapshot(&all, &id) {
            if s.origin.subsystem == r.source_volume_id {
                return ok(pb::CreateSnapshotResponse {
                    snapshot: Some(Self::snapshot_message(&s)),
                });
            }
            return Err(Status::already_exists(format!(
                "snapshot {} exists, of volume {}",
                r.name, s.origin.subsystem
            )));
        }
        let found = self.find(&all, &r.source_volume_id);
        let f = Self::complete(&found).ok_or_else(|| {
            Status::not_found(format!("volume {} does not exist", r.source_volume_id))
        })?;
        let (idx, n, sid) = (f.idx, r.source_volume_id.clone(), id.clone());
        let s = match self
            .on_box(idx, move |c| c.snapshot_namespace(&n, "1", &sid))
            .await
        {
            Ok(s) => s,
            Err(e) if api_code(&e) == Some("duplicate-snapshot") => {
                let all = self.scan_all().await?;
                self.find_snapshot(&all, &id)?.1
            }
            // A replicated volume whose copies are not in sync (degraded, resyncing, failing
            // over): retryable, the sidecar asks again.
            Err(e) if api_code(&e) == Some("snapshot-busy") => {
                return Err(Status::unavailable(format!(
                    "taking the snapshot: {e} (retried)"
                )));
            }
            Err(e) => return Err(self.box_error(idx, "taking the snapshot", &e)),
        };
        ok(pb::CreateSnapshotResponse {
            snapshot: Some(Self::snapshot_message(&s)),
        })
    }

    /// DeleteSnapshot: from every box that has it; an unknown one is no error.
    pub(super) async fn snapshot_delete(
        &self,
        req: Request<pb::DeleteSnapshotRequest>,
    ) -> Result<Response<pb::DeleteSnapshotResponse>, Status> {
        let r = req.into_inner();
        required(&r.snapshot_id, "snapshot_id")?;
        tracing::info!(snapshot = %r.snapshot_id, "DeleteSnapshot");
        if !names::is_snapshot_id(&r.snapshot_id) {
            return ok(pb::DeleteSnapshotResponse {});
        }
        let _busy = self.busy.hold(&r.snapshot_id)?;
        let all = self.scan_all().await?;
        for b in &all {
            if b.state.snapshots.iter().any(|s| s.name == r.snapshot_id) {
                let id = r.snapshot_id.clone();
                self.settle(
                    b.idx,
                    "deleting the snapshot",
                    &["unknown-snapshot"],
                    move |c| c.delete_snapshot(&id),
                )
                .await?;
            }
        }
        ok(pb::DeleteSnapshotResponse {})
    }

    /// ListSnapshots: every box's, by name, filtered and paged. A box that does not answer
    /// makes it UNAVAILABLE (the list would miss its snapshots), except for a lookup by
    /// `snapshot_id` that a box that answers has.
    pub(super) async fn snapshot_list(
        &self,
        req: Request<pb::ListSnapshotsRequest>,
    ) -> Result<Response<pb::ListSnapshotsResponse>, Status> {
        let r = req.into_inner();
        let (all, down) = self.scan_split().await;
        if !down.is_empty() {
            let found =
                !r.snapshot_id.is_empty() && self.find_snapshot(&all, &r.snapshot_id).is_ok();
            if !found {
                return Err(self.silent_boxes("ListSnapshots", &down));
            }
        }
        let mut snaps: BTreeMap<String, pb::list_snapshots_response::Entry> = BTreeMap::new();
        for s in all.iter().flat_map(|b| b.state.snapshots.iter()) {
            if !names::is_snapshot_id(&s.name)
                || (!r.snapshot_id.is_empty() && s.name != r.snapshot_id)
                || (!r.source_volume_id.is_empty() && s.origin.subsystem != r.source_volume_id)
            {
                continue;
            }
            snaps.insert(
                s.name.clone(),
                pb::list_snapshots_response::Entry {
                    snapshot: Some(Self::snapshot_message(s)),
                },
            );
        }
        let all: Vec<_> = snaps.into_values().collect();
        let (entries, next_token) = page(&all, r.max_entries, &r.starting_token)?;
        ok(pb::ListSnapshotsResponse {
            entries,
            next_token,
        })
    }
}
