//! Where volumes go and how they are described: placement over the boxes' pools (zones,
//! free bytes, a rendezvous weight to break ties alike in every controller), and a volume's
//! paths, topology and context.

use super::checks::Params;
use super::{BoxState, Controller};
use crate::names::{self, ctx};
use crate::pb;
use ebof_api::SubsystemView;
use tonic::Status;

/// Rendezvous weight of (`name`, box `api`): breaks placement ties the same way in every
/// controller.
pub(super) fn weight(name: &str, api: &str) -> u64 {
    use sha2::{Digest, Sha256};
    let d = Sha256::digest(format!("{name}\0{api}").as_bytes());
    u64::from_be_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]])
}

impl Controller {
    /// The NVMe/TCP paths of a box, for the node: its TCP listeners (not the discovery
    /// one), with a wildcard address replaced by the API's host.
    pub(super) fn paths(&self, b: &BoxState) -> Vec<names::Path> {
        let api_host = self.boxes[b.idx]
            .api
            .rsplit_once(':')
            .map(|(h, _)| h.trim_start_matches('[').trim_end_matches(']').to_string())
            .unwrap_or_default();
        let api_ip: Option<std::net::IpAddr> = api_host.parse().ok().or_else(|| {
            use std::net::ToSocketAddrs;
            (api_host.as_str(), 0)
                .to_socket_addrs()
                .ok()
                .and_then(|mut a| a.next())
                .map(|a| a.ip())
        });
        b.state
            .listeners
            .iter()
            .filter(|l| !l.discovery && l.transport == "tcp" && l.tls != "required")
            .filter_map(|l| {
                let sa: std::net::SocketAddr = l.address.parse().ok()?;
                let ip = if sa.ip().is_unspecified() {
                    api_ip?
                } else {
                    sa.ip()
                };
                Some(names::Path {
                    addr: ip.to_string(),
                    port: sa.port(),
                })
            })
            .collect()
    }

    pub(super) fn topology(&self, idx: usize) -> Vec<pb::Topology> {
        self.boxes[idx]
            .zone
            .iter()
            .map(|z| pb::Topology {
                segments: [(crate::ZONE_KEY.to_string(), z.clone())].into(),
            })
            .collect()
    }

    /// Volume `sub` of box `b` as CSI describes it (`None`: it has no namespace yet).
    pub(super) fn volume(&self, b: &BoxState, sub: &SubsystemView) -> Option<pb::Volume> {
        let ns = sub.namespaces.iter().find(|n| n.nsid == names::NSID)?;
        let mut context = std::collections::HashMap::new();
        context.insert(ctx::NQN.to_string(), sub.nqn.clone());
        context.insert(ctx::UUID.to_string(), ns.uuid.clone());
        context.insert(
            ctx::LISTENERS.to_string(),
            names::format_listeners(&self.paths(b)),
        );
        context.insert(ctx::BOX.to_string(), self.boxes[b.idx].name.clone());
        Some(pb::Volume {
            capacity_bytes: ns.size as i64,
            volume_id: sub.nqn.clone(),
            volume_context: context,
            content_source: None,
            accessible_topology: self.topology(b.idx),
        })
    }

    /// Where a new volume of `size` goes: (box index, pool), or why nowhere.
    pub(super) fn place(
        &self,
        all: &[BoxState],
        name: &str,
        size: u64,
        params: &Params,
        topo: &(Vec<String>, Vec<String>),
    ) -> Result<(usize, String), Status> {
        let (requisite, preferred) = topo;
        let mut best: Option<(usize, u64, u64, usize, String)> = None; // rank, free, weight, idx, pool
        let mut seen = Vec::new();
        for b in all {
            let bx = &self.boxes[b.idx];
            if !requisite.is_empty() && !bx.zone.as_ref().is_some_and(|z| requisite.contains(z)) {
                continue;
            }
            let rank = bx
                .zone
                .as_ref()
                .and_then(|z| preferred.iter().position(|p| p == z))
                .unwrap_or(usize::MAX);
            for p in &b.state.pools {
                if params.pool.as_ref().is_some_and(|want| *want != p.name) {
                    continue;
                }
                seen.push(format!(
                    "{}/{}: {} bytes free",
                    bx.name, p.name, p.free_bytes
                ));
                if p.free_bytes < size {
                    continue;
                }
                let w = weight(name, &bx.api);
                let key = (usize::MAX - rank, p.free_bytes, w);
                let better = match &best {
                    None => true,
                    Some((r, f, bw, _, _)) => key > (usize::MAX - *r, *f, *bw),
                };
                if better {
                    best = Some((rank, p.free_bytes, w, b.idx, p.name.clone()));
                }
            }
        }
        match best {
            Some((_, _, _, idx, pool)) => Ok((idx, pool)),
            None if seen.is_empty() => Err(Status::resource_exhausted(format!(
                "no box has a pool{}{}: nowhere to put the volume",
                params
                    .pool
                    .as_ref()
                    .map(|p| format!(" named {p}"))
                    .unwrap_or_default(),
                if requisite.is_empty() {
                    String::new()
                } else {
                    format!(" in zones {requisite:?}")
                }
            ))),
            None => Err(Status::resource_exhausted(format!(
                "no pool can hold {size} bytes ({})",
                seen.join("; ")
            ))),
        }
    }
}
