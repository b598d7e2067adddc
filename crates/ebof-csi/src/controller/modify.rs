//! ControllerModifyVolume (`MODIFY_VOLUME`, Kubernetes' VolumeAttributesClass): the
//! StorageClass's QoS keys (`iops`, `mbps`, `readIops`, `writeIops`, `readMbps`, `writeMbps`)
//! as mutable parameters, applied live through the box's namespace QoS API
//! (`PUT /v1/subsystems/{nqn}/namespaces/1/qos`).
//!
//! The keys given replace those the volume has; keys not given keep their limit (`"0"` lifts
//! one). Every key and value is checked before anything is changed (an unknown key, a key that
//! cannot change such as `pool`, `auth` or `replicas`, or a limit the box would refuse:
//! INVALID_ARGUMENT). No parameter at all changes nothing (answered once the volume is found:
//! csi-sanity and resizers send an empty map). A replicated volume's two copies both get the limits, the secondary
//! first (the limits follow a promotion); both boxes must answer. A call cut short between
//! the two leaves the copies with different limits until it is repeated (the resizer
//! retries until it succeeds), and a repeated call is harmless.

use super::checks::{overlay, parse_mutable};
use super::{Controller, api_code};
use crate::names;
use crate::pb;
use crate::rpc::{invalid, ok, required};
use ebof_api::{QosRequest, SubsystemView};
use tonic::{Request, Response, Status};

/// The QoS limits namespace 1 of `sub` has now (`None`: none), as a request would set them.
pub(super) fn qos_of(sub: &SubsystemView) -> Option<QosRequest> {
    let l = &sub
        .namespaces
        .iter()
        .find(|n| n.nsid == names::NSID)?
        .qos
        .as_ref()?
        .limits;
    let f = |v: u64| (v > 0).then(|| v.min(i64::MAX as u64) as i64);
    Some(QosRequest {
        iops: f(l.iops),
        mbps: f(l.mbps),
        read_iops: f(l.read_iops),
        write_iops: f(l.write_iops),
        read_mbps: f(l.read_mbps),
        write_mbps: f(l.write_mbps),
    })
}

impl Controller {
    /// ControllerModifyVolume: the mutable parameters' limits on every copy of the volume.
    pub(super) async fn modify(
        &self,
        req: Request<pb::ControllerModifyVolumeRequest>,
    ) -> Result<Response<pb::ControllerModifyVolumeResponse>, Status> {
        let r = req.into_inner();
        required(&r.volume_id, "volume_id")?;
        let over = parse_mutable(&r.mutable_parameters)?;
        tracing::info!(volume = %r.volume_id, qos = ?over, "ControllerModifyVolume");
        let _busy = self.busy.hold(&r.volume_id)?;
        let loc = self.locate(&r.volume_id).await?;
        let Some(over) = over else {
            return ok(pb::ControllerModifyVolumeResponse {});
        };
        let copies = self.copies_to_change(&r.volume_id, &loc, "take the new limits")?;
        let limits = overlay(qos_of(&loc.sub).as_ref(), &over);
        for (idx, _) in copies {
            let (n, q) = (r.volume_id.clone(), limits.clone());
            self.on_box(idx, move |c| c.set_namespace_qos(&n, "1", &q))
                .await
                .map_err(|e| {
                    if api_code(&e) == Some("invalid-qos") {
                        invalid(format!(
                            "box {} refused the limits: {e}",
                            self.boxes[idx].name
                        ))
                    } else {
                        self.box_error(idx, "setting the volume's QoS limits", &e)
                    }
                })?;
        }
        ok(pb::ControllerModifyVolumeResponse {})
    }
}
