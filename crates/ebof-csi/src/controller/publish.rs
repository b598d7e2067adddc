//! Publishing a volume to a node and unpublishing it: the node's host NQN on the volume's
//! subsystem, with its own DH-HMAC-CHAP keys (ADR 0025).

use super::checks::{check_capability, single_node};
use super::{Controller, api_code};
use crate::keys::AuthMode;
use crate::names::{self, ctx};
use crate::pb;
use crate::rpc::{invalid, ok, required};
use tonic::{Request, Response, Status};

impl Controller {
    /// ControllerPublishVolume: the node's DH-HMAC-CHAP keys on the volume's box (unless
    /// `auth: none`), then the node on the volume's host list.
    pub(super) async fn publish(
        &self,
        req: Request<pb::ControllerPublishVolumeRequest>,
    ) -> Result<Response<pb::ControllerPublishVolumeResponse>, Status> {
        let r = req.into_inner();
        required(&r.volume_id, "volume_id")?;
        required(&r.node_id, "node_id")?;
        let cap = r
            .volume_capability
            .as_ref()
            .ok_or_else(|| invalid("volume_capability is required"))?;
        check_capability(cap).map_err(|e| invalid(format!("volume_capability: {e}")))?;
        tracing::info!(volume = %r.volume_id, node = %r.node_id, "ControllerPublishVolume");
        let (b, sub) = self.locate(&r.volume_id).await?;
        if !r.node_id.starts_with("nqn.") || r.node_id.len() > 223 {
            return Err(Status::not_found(format!(
                "node {:?} does not exist: node IDs are host NQNs",
                r.node_id
            )));
        }
        let auth = match r.volume_context.get(ctx::AUTH) {
            None => AuthMode::DEFAULT,
            Some(v) => AuthMode::parse(v)
                .map_err(|e| invalid(format!("volume_context.{}: {e}", ctx::AUTH)))?,
        };
        let published = sub.hosts.contains(&r.node_id);
        if !published && single_node(Some(cap)) && !sub.hosts.is_empty() {
            return Err(Status::failed_precondition(format!(
                "volume {} is published to {} and its access mode allows one node",
                r.volume_id,
                sub.hosts.join(", ")
            )));
        }
        let _busy = self.busy.hold(&r.volume_id)?;
        // The node's keys first, then the node on the host list: the host list never admits
        // it without them. Set again on a repeated publish: the same keys (derived), so a
        // node already connected keeps reconnecting with what it has.
        let mut publish_context = std::collections::HashMap::new();
        if auth == AuthMode::Dhchap {
            let pair = self.boxes[b.idx].key_seed.dhchap(&r.volume_id, &r.node_id);
            let req = ebof_api::HostKeyRequest {
                dhchap_key: pair.host.to_string(),
                dhchap_ctrl_key: Some(pair.ctrl.to_string()),
            };
            let (n, h) = (r.volume_id.clone(), r.node_id.clone());
            match self
                .on_box(b.idx, move |c| c.set_host_key(&n, &h, &req))
                .await
            {
                Ok(_) => {}
                Err(e) if api_code(&e) == Some("unknown-subsystem") => {
                    return Err(Status::not_found(format!(
                        "volume {} does not exist",
                        r.volume_id
                    )));
                }
                Err(e) => {
                    return Err(self.box_error(
                        b.idx,
                        "installing the node's DH-HMAC-CHAP key",
                        &e,
                    ));
                }
            }
            publish_context.insert(
                names::publish::DHCHAP_SECRET.to_string(),
                pair.host.to_string(),
            );
            publish_context.insert(
                names::publish::DHCHAP_CTRL_SECRET.to_string(),
                pair.ctrl.to_string(),
            );
        }
        let answer = pb::ControllerPublishVolumeResponse { publish_context };
        if published {
            return ok(answer);
        }
        let (n, h) = (r.volume_id.clone(), r.node_id.clone());
        match self.on_box(b.idx, move |c| c.allow_host(&n, &h)).await {
            Ok(_) => {}
            Err(e) if api_code(&e) == Some("duplicate-host") => {}
            Err(e) if api_code(&e) == Some("unknown-subsystem") => {
                return Err(Status::not_found(format!(
                    "volume {} does not exist",
                    r.volume_id
                )));
            }
            Err(e) => return Err(self.box_error(b.idx, "allowing the node's host NQN", &e)),
        }
        ok(answer)
    }

    /// ControllerUnpublishVolume: the node (or every node) off the host list, its keys
    /// removed and its controllers disconnected.
    pub(super) async fn unpublish(
        &self,
        req: Request<pb::ControllerUnpublishVolumeRequest>,
    ) -> Result<Response<pb::ControllerUnpublishVolumeResponse>, Status> {
        let r = req.into_inner();
        required(&r.volume_id, "volume_id")?;
        tracing::info!(volume = %r.volume_id, node = %r.node_id, "ControllerUnpublishVolume");
        let (b, sub) = match self.locate(&r.volume_id).await {
            Ok(x) => x,
            Err(e) if e.code() == tonic::Code::NotFound => {
                return ok(pb::ControllerUnpublishVolumeResponse {});
            }
            Err(e) => return Err(e),
        };
        let _busy = self.busy.hold(&r.volume_id)?;
        let hosts: Vec<String> = if r.node_id.is_empty() {
            sub.hosts.clone()
        } else {
            vec![r.node_id.clone()]
        };
        for h in hosts {
            let (n, hh) = (r.volume_id.clone(), h.clone());
            self.settle(
                b.idx,
                "denying the node's host NQN",
                &["unknown-host", "unknown-subsystem"],
                move |c| c.deny_host(&n, &hh),
            )
            .await?;
            // Its keys go with it (whatever the volume's auth: removing none is no error).
            let (n, hh) = (r.volume_id.clone(), h.clone());
            self.settle(
                b.idx,
                "removing the node's DH-HMAC-CHAP key",
                &["unknown-host", "unknown-subsystem"],
                move |c| c.remove_host_key(&n, &hh),
            )
            .await?;

            // Its controllers on this subsystem go too: unpublished means no access.
            for c in b
                .state
                .controllers
                .iter()
                .filter(|c| c.subsystem == r.volume_id && c.hostnqn == h)
            {
                let id = c.cntlid.to_string();
                self.settle(
                    b.idx,
                    "disconnecting the node",
                    &["unknown-controller"],
                    move |cl| cl.disconnect(&id),
                )
                .await?;
            }
        }
        ok(pb::ControllerUnpublishVolumeResponse {})
    }
}
