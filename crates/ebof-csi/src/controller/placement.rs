//! Where volumes go and how they are described: placement over the boxes' pools (zones,
//! free bytes, a rendezvous weight to break ties alike in every controller), of one copy or
//! of the two copies of a replicated volume ([`super::mirror`]), and a volume's paths,
//! topology and context.

use super::checks::Params;
use super::{BoxState, Controller, Found};
use crate::names::{self, ctx};
use crate::pb;
use ebof_api::SubsystemView;
use tonic::Status;

/// Where a copy goes: a box and its pool.
pub(super) type Spot = (usize, String);

/// Rendezvous weight of (`name`, box `api`): breaks placement ties the same way in every
/// controller.
pub(super) fn weight(name: &str, api: &str) -> u64 {
    use sha2::{Digest, Sha256};
    let d = Sha256::digest(format!("{name}\0{api}").as_bytes());
    u64::from_be_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]])
}

/// The address of the host of a box's API address `api` (`HOST:PORT`, `https://HOST:PORT`,
/// `[V6]:PORT`): the literal, else the first the resolver gives. Blocking: call it off the
/// async threads (it runs with each read of the box's state).
pub(super) fn api_host_ip(api: &str) -> Option<std::net::IpAddr> {
    let authority = api
        .strip_prefix("https://")
        .or_else(|| api.strip_prefix("http://"))
        .unwrap_or(api)
        .trim_end_matches('/');
    let host = authority
        .rsplit_once(':')
        .map(|(h, _)| h.trim_start_matches('[').trim_end_matches(']'))?;
    host.parse().ok().or_else(|| {
        use std::net::ToSocketAddrs;
        (host, 0)
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .map(|a| a.ip())
    })
}

impl Controller {
    /// The NVMe/TCP paths of a box, for the node: its TCP listeners (not the discovery
    /// one), with a wildcard address replaced by the API's host.
    pub(super) fn paths(&self, b: &BoxState) -> Vec<names::Path> {
        let api_ip = b.api_ip;
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

    /// The zones of boxes `idxs`, each once, in that order.
    pub(super) fn topology(&self, idxs: &[usize]) -> Vec<pb::Topology> {
        let mut zones: Vec<&String> = Vec::new();
        for z in idxs.iter().filter_map(|&i| self.boxes[i].zone.as_ref()) {
            if !zones.contains(&z) {
                zones.push(z);
            }
        }
        zones
            .into_iter()
            .map(|z| pb::Topology {
                segments: [(crate::ZONE_KEY.to_string(), z.clone())].into(),
            })
            .collect()
    }

    /// Volume `sub` of box `b` as CSI describes it (`None`: it has no namespace yet); a
    /// replicated volume with the box of its other copy, `partner`: the paths of both, the
    /// zones of both.
    pub(super) fn volume(
        &self,
        b: &BoxState,
        sub: &SubsystemView,
        partner: Option<&BoxState>,
    ) -> Option<pb::Volume> {
        let ns = sub.namespaces.iter().find(|n| n.nsid == names::NSID)?;
        let mut context = std::collections::HashMap::new();
        context.insert(ctx::NQN.to_string(), sub.nqn.clone());
        context.insert(ctx::UUID.to_string(), ns.uuid.clone());
        let mut paths = self.paths(b);
        let mut idxs = vec![b.idx];
        let mut box_names = self.boxes[b.idx].name.clone();
        if let Some(p) = partner {
            for path in self.paths(p) {
                if !paths.contains(&path) {
                    paths.push(path);
                }
            }
            idxs.push(p.idx);
            box_names = format!("{box_names},{}", self.boxes[p.idx].name);
            context.insert(ctx::REPLICAS.to_string(), "2".to_string());
        }
        context.insert(ctx::LISTENERS.to_string(), names::format_listeners(&paths));
        context.insert(ctx::BOX.to_string(), box_names);
        Some(pb::Volume {
            capacity_bytes: ns.size as i64,
            volume_id: sub.nqn.clone(),
            volume_context: context,
            content_source: None,
            accessible_topology: self.topology(&idxs),
        })
    }

    /// The volume whose subsystems are `found` (read in `all`), as CSI describes it: its
    /// serving copy, and its peer's box for a replicated volume.
    pub(super) fn volume_of(&self, all: &[BoxState], found: &[Found]) -> Option<pb::Volume> {
        let main = Self::complete(found)?;
        let b = all.iter().find(|b| b.idx == main.idx)?;
        let partner = main.peer.and_then(|p| all.iter().find(|b| b.idx == p));
        self.volume(b, &main.sub, partner)
    }

    /// The box (among those read, `all`) that listens at `addr` (`ADDR:PORT`, a copy's
    /// mirror peer).
    pub(super) fn box_at(&self, all: &[BoxState], addr: &str) -> Option<usize> {
        let want: std::net::SocketAddr = addr.parse().ok()?;
        all.iter()
            .find(|b| {
                b.state.listeners.iter().any(|l| l.address == addr)
                    || self.paths(b).iter().any(|p| {
                        p.port == want.port()
                            && p.addr.parse::<std::net::IpAddr>().ok() == Some(want.ip())
                    })
            })
            .map(|b| b.idx)
    }

    /// The one box other than `not` whose management API is at the IP address of `addr`
    /// (`ADDR:PORT`): how the peer of a copy is known when its box does not answer. None when
    /// no box or several are there.
    pub(super) fn box_by_host(&self, addr: &str, not: usize) -> Option<usize> {
        let want: std::net::SocketAddr = addr.parse().ok()?;
        let at = |b: &crate::boxes::Box| {
            let a = b
                .api
                .trim_start_matches("https://")
                .trim_start_matches("http://");
            a.trim_end_matches('/').rsplit_once(':').and_then(|(h, _)| {
                h.trim_start_matches('[')
                    .trim_end_matches(']')
                    .parse::<std::net::IpAddr>()
                    .ok()
            })
        };
        let mut hits =
            (0..self.boxes.len()).filter(|&i| i != not && at(&self.boxes[i]) == Some(want.ip()));
        match (hits.next(), hits.next()) {
            (Some(i), None) => Some(i),
            _ => None,
        }
    }

    /// The NVMe/TCP listener of box `b` a peer box reaches the volume's copy on (its first
    /// path), `ADDR:PORT`.
    pub(super) fn listener_of(&self, b: &BoxState) -> Option<String> {
        self.paths(b).first().map(|p| {
            if p.addr.contains(':') {
                format!("[{}]:{}", p.addr, p.port)
            } else {
                format!("{}:{}", p.addr, p.port)
            }
        })
    }

    /// The box the boxes file's witness listens on, if it is one of the boxes read.
    fn witness_box(&self, all: &[BoxState]) -> Option<usize> {
        self.witness.and_then(|w| self.box_at(all, &w.to_string()))
    }

    /// Where the two copies of a new replicated volume of `size` go: (box, pool) of the
    /// primary and of the secondary, or why nowhere (see [`super::mirror`]: distinct boxes,
    /// both in the zones allowed, different zones first, not the witness's box, then the
    /// primary in a preferred zone, free bytes and rendezvous weight). With `primary`, the
    /// primary's box is that one.
    pub(super) fn place_pair(
        &self,
        all: &[BoxState],
        name: &str,
        size: u64,
        params: &Params,
        topo: &(Vec<String>, Vec<String>),
        primary: Option<usize>,
    ) -> Result<(Spot, Spot), Status> {
        let (requisite, preferred) = topo;
        // Per box: the pool with the most free bytes that holds the size.
        let mut cands: Vec<(usize, String, u64, usize)> = Vec::new(); // idx, pool, free, rank
        let mut seen = Vec::new();
        for b in all {
            let bx = &self.boxes[b.idx];
            if !requisite.is_empty() && !bx.zone.as_ref().is_some_and(|z| requisite.contains(z)) {
                continue;
            }
            if self.paths(b).is_empty() {
                seen.push(format!("{}: no NVMe/TCP listener", bx.name));
                continue;
            }
            let rank = bx
                .zone
                .as_ref()
                .and_then(|z| preferred.iter().position(|p| p == z))
                .unwrap_or(usize::MAX);
            let best = b
                .state
                .pools
                .iter()
                .filter(|p| params.fits_pool(p))
                .inspect(|p| {
                    seen.push(format!(
                        "{}/{}: {} bytes free",
                        bx.name, p.name, p.free_bytes
                    ))
                })
                .filter(|p| p.free_bytes >= size)
                .max_by_key(|p| (p.free_bytes, std::cmp::Reverse(p.name.clone())));
            if let Some(p) = best {
                cands.push((b.idx, p.name.clone(), p.free_bytes, rank));
            }
        }
        let witness = self.witness_box(all);
        let zone = |i: usize| self.boxes[i].zone.as_ref();
        let mut best = None;
        for a in cands.iter().filter(|a| primary.is_none_or(|p| p == a.0)) {
            for b in cands.iter().filter(|b| b.0 != a.0) {
                let cross = zone(a.0).is_some() && zone(b.0).is_some() && zone(a.0) != zone(b.0);
                let clear = witness.is_none_or(|w| w != a.0 && w != b.0);
                let key = (
                    cross,
                    clear,
                    usize::MAX - a.3,
                    a.2.min(b.2),
                    weight(name, &self.boxes[a.0].api),
                    weight(name, &self.boxes[b.0].api),
                );
                if best.as_ref().is_none_or(|(k, _, _)| key > *k) {
                    best = Some((key, a, b));
                }
            }
        }
        let Some(((cross, clear, ..), a, b)) = best else {
            let zones = if requisite.is_empty() {
                String::new()
            } else {
                format!(" in zones {requisite:?}")
            };
            return Err(Status::resource_exhausted(format!(
                "replicas 2 needs two boxes{zones} that can hold {size} bytes{}; {} can ({})",
                params
                    .pool
                    .as_ref()
                    .map(|p| format!(" in a pool named {p}"))
                    .unwrap_or_default(),
                cands.len(),
                seen.join("; ")
            )));
        };
        if !cross {
            tracing::warn!(volume = %name, primary = %self.boxes[a.0].name, secondary = %self.boxes[b.0].name, zone = ?zone(a.0), "no two boxes in different zones can hold the volume: both copies are in one zone (or the boxes have no zone), and that zone's loss loses both");
        }
        if !clear {
            tracing::warn!(volume = %name, primary = %self.boxes[a.0].name, secondary = %self.boxes[b.0].name, "no pair without the witness's box can hold the volume: a copy is on the witness's box, so its loss leaves the other copy without a lease (promote it by hand)");
        }
        Ok(((a.0, a.1.clone()), (b.0, b.1.clone())))
    }
    /// The home box of volume `name` while boxes `down` do not answer: of the boxes the
    /// request fits (zones `requisite`; for a box that answers, a pool of `params` with
    /// `size` bytes free; a box that does not answer may fit), the one of highest rendezvous
    /// weight of (name, box). `None`: no box fits.
    pub(super) fn rendezvous_home(
        &self,
        all: &[BoxState],
        down: &[usize],
        name: &str,
        size: u64,
        params: &Params,
        requisite: &[String],
    ) -> Option<usize> {
        (0..self.boxes.len())
            .filter(|&i| {
                let bx = &self.boxes[i];
                requisite.is_empty() || bx.zone.as_ref().is_some_and(|z| requisite.contains(z))
            })
            .filter(|&i| {
                down.contains(&i)
                    || all.iter().find(|b| b.idx == i).is_some_and(|b| {
                        b.state
                            .pools
                            .iter()
                            .any(|p| params.fits_pool(p) && p.free_bytes >= size)
                    })
            })
            .max_by_key(|&i| weight(name, &self.boxes[i].api))
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
                if !params.fits_pool(p) {
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
                "no box has {}pool{}{}: nowhere to put the volume",
                if params.encrypted {
                    "an encrypted "
                } else {
                    "a "
                },
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

/// The pool of box `box_name` (its `pools`) a clone of a snapshot whose origin's file is
/// `origin_path` is made in. A snapshot of a volume in an encrypted pool opens only with that
/// pool's key (its data key is derived from it, ADR 0029): its clone goes to that pool,
/// whatever the StorageClass says. A snapshot of an unencrypted volume cannot make an
/// encrypted clone (its data is plaintext): INVALID_ARGUMENT with `encrypted: "true"`.
/// Otherwise the named pool, or the fitting pool with the most room.
pub(super) fn clone_pool(
    params: &Params,
    pools: &[ebof_api::PoolView],
    origin_path: &str,
    box_name: &str,
    label: &str,
) -> Result<String, Status> {
    let parent = std::path::Path::new(origin_path).parent();
    let origin = pools
        .iter()
        .find(|p| parent == Some(std::path::Path::new(&p.directory)));
    match origin {
        Some(o) if o.encrypted => return Ok(o.name.clone()),
        _ if params.encrypted && !origin.is_some_and(|o| o.encrypted) => {
            return Err(Status::invalid_argument(format!(
                "{label} is of a volume that is not encrypted at rest: its clone cannot be \
                 (encrypted: \"true\"); make it with a StorageClass without `encrypted`"
            )));
        }
        _ => {}
    }
    if let Some(p) = &params.pool {
        return Ok(p.clone());
    }
    pools
        .iter()
        .filter(|p| params.fits_pool(p))
        .max_by_key(|p| p.free_bytes)
        .map(|p| p.name.clone())
        .ok_or_else(|| Status::resource_exhausted(format!("box {box_name} has no pool")))
}

#[cfg(test)]
mod tests {
    use super::api_host_ip;
    use super::clone_pool;
    use crate::controller::checks::parse_params;
    use std::collections::HashMap;

    fn pool(name: &str, dir: &str, encrypted: bool, free: u64) -> ebof_api::PoolView {
        ebof_api::PoolView {
            name: name.into(),
            directory: dir.into(),
            size_limit: None,
            capacity_bytes: free,
            provisioned_bytes: 0,
            used_bytes: 0,
            free_bytes: free,
            namespaces: 0,
            filesystem: None,
            encrypted,
        }
    }

    #[test]
    fn a_clone_of_an_encrypted_volume_stays_in_its_pool() {
        let pools = [
            pool("sec", "/srv/sec", true, 1),
            pool("big", "/srv/big", false, 1 << 40),
        ];
        let params = |kv: &[(&str, &str)]| {
            let m: HashMap<String, String> = kv
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            parse_params(&m).unwrap()
        };
        let pick = |kv: &[(&str, &str)], origin: &str| {
            clone_pool(&params(kv), &pools, origin, "box0", "snapshot s")
        };
        // Of an encrypted volume: its pool, with or without `encrypted`, even if another named.
        for kv in [&[][..], &[("encrypted", "true")], &[("pool", "big")]] {
            assert_eq!(pick(kv, "/srv/sec/v.img").unwrap(), "sec", "{kv:?}");
        }
        // Of a plain volume: the pool with the most room, or the one named…
        assert_eq!(pick(&[], "/srv/big/v.img").unwrap(), "big");
        // …but never an encrypted clone of plaintext.
        let e = pick(&[("encrypted", "true")], "/srv/big/v.img").unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
        assert!(e.message().contains("not encrypted at rest"), "{e:?}");
    }

    #[test]
    fn api_hosts_resolve_with_or_without_a_scheme() {
        let v4: std::net::IpAddr = "10.0.0.11".parse().unwrap();
        assert_eq!(api_host_ip("10.0.0.11:9651"), Some(v4));
        assert_eq!(api_host_ip("https://10.0.0.11:9651"), Some(v4));
        assert_eq!(api_host_ip("http://10.0.0.11:9651/"), Some(v4));
        assert_eq!(
            api_host_ip("https://[fd00::1]:9651"),
            Some("fd00::1".parse().unwrap())
        );
        assert!(api_host_ip("localhost:9651").is_some_and(|ip| ip.is_loopback()));
        assert_eq!(api_host_ip("no-port"), None);
    }
}
