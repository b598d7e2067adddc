//! Publishing a volume to a node and unpublishing it: the node's host NQN on the volume's
//! subsystem, with its own DH-HMAC-CHAP keys (ADR 0025); on both boxes of a replicated
//! volume (one key pair for both: [`super::mirror`]).
//!
//! A read-only publication (`readonly`, `PUBLISH_READONLY`) is recorded on the box beside the
//! node: a marker host NQN derived from the node's ([`names::ro_marker`]) on the volume's host list,
//! with DH-HMAC-CHAP keys no host has. A second publish to the same node with `readonly`
//! flipped finds it and answers ALREADY_EXISTS (CSI spec); the marker is never reported as a
//! node and goes with the node's unpublish.

use super::checks::{check_capability, single_node};
use super::{Controller, Located, api_code};
use crate::keys::{AuthMode, DhchapPair};
use crate::names::{self, ctx};
use crate::pb;
use crate::rpc::{invalid, ok, required};
use tonic::{Code, Request, Response, Status};

impl Controller {
    /// The box whose key seed derives the volume's DH-HMAC-CHAP keys: its box, or of a
    /// replicated volume's two, the one whose API address sorts first (the same whichever
    /// copy serves now: the node connects every path with one secret).
    fn key_box(&self, loc: &Located) -> usize {
        let main = loc.main.idx;
        match &loc.partner {
            Some((p, _)) if self.boxes[*p].api < self.boxes[main].api => *p,
            _ => main,
        }
    }

    /// The node `node` on volume `id`'s subsystem on box `idx`: its keys (`pair`), then its
    /// host NQN (unless `listed` already).
    async fn publish_on(
        &self,
        idx: usize,
        id: &str,
        node: &str,
        pair: Option<&DhchapPair>,
        listed: bool,
    ) -> Result<(), Status> {
        let gone = || Status::not_found(format!("volume {id} does not exist"));
        if let Some(pair) = pair {
            let req = ebof_api::HostKeyRequest {
                dhchap_key: pair.host.to_string(),
                dhchap_ctrl_key: Some(pair.ctrl.to_string()),
            };
            let (n, h) = (id.to_string(), node.to_string());
            match self
                .on_box(idx, move |c| c.set_host_key(&n, &h, &req))
                .await
            {
                Ok(_) => {}
                Err(e) if api_code(&e) == Some("unknown-subsystem") => return Err(gone()),
                Err(e) => {
                    return Err(self.box_error(idx, "installing the node's DH-HMAC-CHAP key", &e));
                }
            }
        }
        if listed {
            return Ok(());
        }
        let (n, h) = (id.to_string(), node.to_string());
        match self.on_box(idx, move |c| c.allow_host(&n, &h)).await {
            Ok(_) => Ok(()),
            Err(e) if api_code(&e) == Some("duplicate-host") => Ok(()),
            Err(e) if api_code(&e) == Some("unknown-subsystem") => Err(gone()),
            Err(e) => Err(self.box_error(idx, "allowing the node's host NQN", &e)),
        }
    }

    /// ControllerPublishVolume: the node's DH-HMAC-CHAP keys on the volume's box (unless
    /// `auth: none`), then the node on the volume's host list; on both boxes of a replicated
    /// volume (its peer's box may fail to answer: the node gets the copy that does).
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
        let loc = self.locate(&r.volume_id).await?;
        if !r.node_id.starts_with("nqn.")
            || r.node_id.len() > 223
            || r.node_id.starts_with(names::RO_MARKER)
        {
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
        let sub = &loc.sub;
        let published = sub.hosts.contains(&r.node_id);
        let nodes = names::nodes(&sub.hosts);
        if !published && single_node(Some(cap)) && !nodes.is_empty() {
            return Err(Status::failed_precondition(format!(
                "volume {} is published to {} and its access mode allows one node",
                r.volume_id,
                nodes.join(", ")
            )));
        }
        let marker = names::ro_marker(&r.node_id);
        let was_ro = sub.hosts.contains(&marker);
        if published && was_ro != r.readonly {
            let how = |ro: bool| if ro { "read-only" } else { "read-write" };
            return Err(Status::already_exists(format!(
                "volume {} is published to node {} {}; unpublish it before publishing it {}",
                r.volume_id,
                r.node_id,
                how(was_ro),
                how(r.readonly)
            )));
        }
        let _busy = self.busy.hold(&r.volume_id)?;
        if !published {
            // The marker first (or a stale one of an unfinished publish away): the node is on
            // the host list only once its marker says how it has the volume.
            self.mark(loc.main.idx, &r.volume_id, &marker, was_ro, r.readonly)
                .await?;
        }
        // The node's keys first, then the node on the host list: the host list never admits
        // it without them. Set again on a repeated publish: the same keys (derived), so a
        // node already connected keeps reconnecting with what it has.
        let mut publish_context = std::collections::HashMap::new();
        let pair = (auth == AuthMode::Dhchap).then(|| {
            self.boxes[self.key_box(&loc)]
                .key_seed
                .dhchap(&r.volume_id, &r.node_id)
        });
        if let Some(pair) = &pair {
            publish_context.insert(
                names::publish::DHCHAP_SECRET.to_string(),
                pair.host.to_string(),
            );
            publish_context.insert(
                names::publish::DHCHAP_CTRL_SECRET.to_string(),
                pair.ctrl.to_string(),
            );
        }
        self.publish_on(
            loc.main.idx,
            &r.volume_id,
            &r.node_id,
            pair.as_ref(),
            published,
        )
        .await?;
        if let Some((p, seen)) = &loc.partner {
            let hosts = seen
                .as_ref()
                .and_then(|(_, s)| s.as_ref())
                .map(|s| s.hosts.as_slice())
                .unwrap_or_default();
            let listed = hosts.contains(&r.node_id);
            let marked = hosts.contains(&marker);
            let step = async {
                if !listed {
                    self.mark(*p, &r.volume_id, &marker, marked, r.readonly)
                        .await?;
                }
                self.publish_on(*p, &r.volume_id, &r.node_id, pair.as_ref(), listed)
                    .await
            };
            match step.await {
                Ok(()) => {}
                Err(e) if matches!(e.code(), Code::Unavailable | Code::NotFound) => {
                    tracing::warn!(volume = %r.volume_id, node = %r.node_id, box_ = %self.boxes[*p].name, error = %e.message(), "the replicated volume's other copy did not take the node; it is published on one copy");
                }
                Err(e) => return Err(e),
            }
        }
        ok(pb::ControllerPublishVolumeResponse { publish_context })
    }

    /// ControllerUnpublishVolume: the node (or every node) off the host list, its keys
    /// removed and its controllers disconnected; on both boxes of a replicated volume (a box
    /// that does not answer is said in the log: it cannot serve the node either).
    pub(super) async fn unpublish(
        &self,
        req: Request<pb::ControllerUnpublishVolumeRequest>,
    ) -> Result<Response<pb::ControllerUnpublishVolumeResponse>, Status> {
        let r = req.into_inner();
        required(&r.volume_id, "volume_id")?;
        tracing::info!(volume = %r.volume_id, node = %r.node_id, "ControllerUnpublishVolume");
        let loc = match self.locate(&r.volume_id).await {
            Ok(x) => x,
            Err(e) if e.code() == Code::NotFound => {
                return ok(pb::ControllerUnpublishVolumeResponse {});
            }
            Err(e) => return Err(e),
        };
        let _busy = self.busy.hold(&r.volume_id)?;
        let mut copies = vec![(&loc.main, Some(&loc.sub))];
        match &loc.partner {
            Some((_, Some((b, s)))) => copies.push((b, s.as_ref())),
            Some((p, None)) => {
                tracing::warn!(volume = %r.volume_id, node = %r.node_id, box_ = %self.boxes[*p].name, "the replicated volume's other box does not answer: the node stays on its host list there");
            }
            None => {}
        }
        for (b, sub) in copies {
            let Some(sub) = sub else { continue };
            let hosts: Vec<String> = if r.node_id.is_empty() {
                // Every node; the replication link's host stays (the box requires it).
                sub.hosts
                    .iter()
                    .filter(|h| h.as_str() != names::MIRROR_LINK_NQN)
                    .cloned()
                    .collect()
            } else {
                let marker = names::ro_marker(&r.node_id);
                let mut h = vec![r.node_id.clone()];
                if sub.hosts.contains(&marker) {
                    h.push(marker);
                }
                h
            };
            for h in hosts {
                self.unpublish_on(b, &r.volume_id, &h).await?;
            }
        }
        ok(pb::ControllerUnpublishVolumeResponse {})
    }

    /// The read-only marker `marker` on volume `id`'s host list on box `idx` when `readonly`
    /// (with keys no host has, so no host connects as it), off it otherwise; `present`: on
    /// it now.
    async fn mark(
        &self,
        idx: usize,
        id: &str,
        marker: &str,
        present: bool,
        readonly: bool,
    ) -> Result<(), Status> {
        if readonly == present {
            return Ok(());
        }
        if readonly {
            let pair = self.boxes[idx].key_seed.dhchap(id, marker);
            return self.publish_on(idx, id, marker, Some(&pair), false).await;
        }
        let (n, m) = (id.to_string(), marker.to_string());
        self.settle(
            idx,
            "removing a stale read-only marker",
            &["unknown-host", "unknown-subsystem"],
            move |c| c.deny_host(&n, &m),
        )
        .await
    }

    /// Host `h` off volume `id` on box `b`: its host NQN, its keys, its controllers.
    async fn unpublish_on(&self, b: &super::BoxState, id: &str, h: &str) -> Result<(), Status> {
        let (n, hh) = (id.to_string(), h.to_string());
        self.settle(
            b.idx,
            "denying the node's host NQN",
            &["unknown-host", "unknown-subsystem"],
            move |c| c.deny_host(&n, &hh),
        )
        .await?;
        // Its keys go with it (whatever the volume's auth: removing none is no error).
        let (n, hh) = (id.to_string(), h.to_string());
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
            .filter(|c| c.subsystem == id && c.hostnqn == h)
        {
            let cid = c.cntlid.to_string();
            self.settle(
                b.idx,
                "disconnecting the node",
                &["unknown-controller"],
                move |cl| cl.disconnect(&cid),
            )
            .await?;
        }
        Ok(())
    }
}
