//! Clones of volumes (`CLONE_VOLUME`): CreateVolume with a volume content source.
//!
//! The box has no namespace-to-namespace copy, but its snapshots are reflinks (ADR 0021): the
//! clone is made from a **temporary snapshot** of the source's namespace 1, taken on the
//! source's box and named after the clone's volume ID ([`names::clone_point_name`]: a retried
//! CreateVolume finds it; ListSnapshots never shows it). From there it is a volume from a
//! snapshot (ADR 0023 6): a clone into a pool of that box, grown when a larger size is asked;
//! the temporary snapshot is deleted when CreateVolume ends, whatever its outcome (and by
//! DeleteVolume of the clone, if it was left behind by a box that stopped answering). The
//! source keeps serving I/O: a snapshot holds its writes only for the reflink (the copy, on a
//! file system without reflinks). On a file system with reflinks the clone shares the
//! source's extents until either is written; it outlives its source.
//!
//! Errors: a source that is not a volume of this driver, or that no box holds (all boxes
//! answering), is NOT_FOUND; a `limit_bytes` below the source's size is OUT_OF_RANGE (a
//! `required_bytes` below it gets a clone of the source's size, which the range allows). A
//! clone into a `replicas: "2"` volume is made as a restore into two copies is
//! ([`super::mirror`]).

use super::{BoxState, Controller, api_code};
use crate::names;
use ebof_api::SnapshotView;
use tonic::Status;

impl Controller {
    /// The temporary snapshot the clone `clone_id` of volume `source` is made from, taken now
    /// if it is not there yet (`all`: every box read): its box and view.
    pub(super) async fn clone_point(
        &self,
        all: &[BoxState],
        source: &str,
        clone_id: &str,
    ) -> Result<(usize, SnapshotView), Status> {
        let missing = || Status::not_found(format!("source volume {source} does not exist"));
        if !names::is_volume_id(source) {
            return Err(missing());
        }
        let found = self.find(all, source);
        let idx = Self::complete(&found).ok_or_else(missing)?.idx;
        let name = names::clone_point_name(clone_id);
        if let Some(s) = self.point_on(all, idx, &name) {
            if s.origin.subsystem == source {
                return Ok((idx, s));
            }
            // Left by a request that named another source: not this clone's point.
            self.drop_clone_point(clone_id).await;
        }
        let (src, n) = (source.to_string(), name.clone());
        match self
            .on_box(idx, move |c| c.snapshot_namespace(&src, "1", &n))
            .await
        {
            Ok(s) => Ok((idx, s)),
            Err(e) if api_code(&e) == Some("duplicate-snapshot") => {
                let b = self.read_box(idx).await?;
                self.point_on(std::slice::from_ref(&b), idx, &name)
                    .map(|s| (idx, s))
                    .ok_or_else(|| {
                        Status::aborted(format!(
                            "the snapshot of {source} for the clone went while it was taken; retry"
                        ))
                    })
            }
            Err(e) => Err(self.box_error(idx, "taking the snapshot to clone the volume from", &e)),
        }
    }

    /// Snapshot `name` on box `idx` as read in `all`.
    fn point_on(&self, all: &[BoxState], idx: usize, name: &str) -> Option<SnapshotView> {
        all.iter()
            .find(|b| b.idx == idx)?
            .state
            .snapshots
            .iter()
            .find(|s| s.name == name)
            .cloned()
    }

    /// Delete the temporary snapshot of the clone `clone_id` from every box that answers and
    /// has it. Best effort: what cannot be deleted now is logged, and deleted by the next
    /// CreateVolume or DeleteVolume of the clone.
    pub(super) async fn drop_clone_point(&self, clone_id: &str) {
        let name = names::clone_point_name(clone_id);
        let (all, _) = self.scan_split().await;
        self.drop_clone_point_in(&all, &name).await;
    }

    /// [`Self::drop_clone_point`] on the boxes read in `all`, for the point named `name`.
    pub(super) async fn drop_clone_point_in(&self, all: &[BoxState], name: &str) {
        for b in all {
            if !b.state.snapshots.iter().any(|s| s.name == name) {
                continue;
            }
            let n = name.to_string();
            if let Err(e) = self
                .settle(
                    b.idx,
                    "deleting a clone's temporary snapshot",
                    &["unknown-snapshot"],
                    move |c| c.delete_snapshot(&n),
                )
                .await
            {
                tracing::warn!(snapshot = %name, error = %e.message(), "a clone's temporary snapshot stays for now");
            }
        }
    }
}
