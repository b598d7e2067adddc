//! ControllerExpandVolume: the volume's namespace grown on its box; a replicated volume's
//! two copies, the secondary first (why: [`super::mirror`]).

use super::checks::size_for;
use super::mirror::Role;
use super::{Controller, Located};
use crate::names;
use crate::pb;
use crate::pb::volume_capability::AccessType;
use crate::rpc::{invalid, ok, required};
use ebof_api::{ResizeRequest, SubsystemView};
use tonic::{Request, Response, Status};

/// The size of namespace 1 of `sub` (0 when it has none).
fn size_of(sub: &SubsystemView) -> u64 {
    sub.namespaces
        .iter()
        .find(|n| n.nsid == names::NSID)
        .map_or(0, |n| n.size)
}

impl Controller {
    /// The copies to change (`what` says how, for messages), in order, with their sizes now:
    /// one box's, or a replicated volume's secondary and then its primary (both must answer).
    pub(super) fn copies_to_change(
        &self,
        id: &str,
        loc: &Located,
        what: &str,
    ) -> Result<Vec<(usize, u64)>, Status> {
        let main = (loc.main.idx, size_of(&loc.sub));
        let Some(m) = &loc.mirror else {
            return Ok(vec![main]);
        };
        let (p, seen) = loc.partner.as_ref().ok_or_else(|| {
            Status::unavailable(format!(
                "volume {id}: the box of its other copy ({}) is not known: both copies must {what}",
                m.peer
            ))
        })?;
        let (_, sub) = seen.as_ref().ok_or_else(|| {
            Status::unavailable(format!(
                "volume {id}: box {} of its other copy does not answer: both copies must {what}",
                self.boxes[*p].name
            ))
        })?;
        let other = (*p, sub.as_ref().map_or(0, size_of));
        if sub.is_none() {
            return Err(Status::failed_precondition(format!(
                "volume {id}: box {} has no copy of it (a half-created volume: CreateVolume completes it)",
                self.boxes[*p].name
            )));
        }
        Ok(if m.role == Role::Primary {
            vec![other, main]
        } else {
            vec![main, other]
        })
    }

    /// ControllerExpandVolume: grow every copy that is smaller than the size asked.
    pub(super) async fn expand(
        &self,
        req: Request<pb::ControllerExpandVolumeRequest>,
    ) -> Result<Response<pb::ControllerExpandVolumeResponse>, Status> {
        let r = req.into_inner();
        required(&r.volume_id, "volume_id")?;
        let range = r
            .capacity_range
            .as_ref()
            .ok_or_else(|| invalid("capacity_range is required"))?;
        let size = size_for(Some(range))?;
        tracing::info!(volume = %r.volume_id, size, "ControllerExpandVolume");
        let _busy = self.busy.hold(&r.volume_id)?;
        let loc = self.locate(&r.volume_id).await?;
        let node_expansion_required = !matches!(
            r.volume_capability
                .as_ref()
                .and_then(|c| c.access_type.as_ref()),
            Some(AccessType::Block(_))
        );
        let copies = self.copies_to_change(&r.volume_id, &loc, "grow")?;
        let mut capacity = size_of(&loc.sub);
        for (idx, current) in copies {
            if current >= size {
                continue;
            }
            let n = r.volume_id.clone();
            let changed = self
                .on_box(idx, move |c| {
                    c.resize_namespace(
                        &n,
                        "1",
                        &ResizeRequest {
                            size,
                            shrink: false,
                        },
                    )
                })
                .await
                .map_err(|e| self.box_error(idx, "growing the volume", &e))?;
            if idx == loc.main.idx {
                capacity = changed.namespace.size;
            }
        }
        ok(pb::ControllerExpandVolumeResponse {
            capacity_bytes: capacity as i64,
            node_expansion_required,
        })
    }
}
