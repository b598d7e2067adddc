//! The CSI Controller service: volumes and snapshots on a fleet of ebof pool boxes, through
//! each box's management API.
//!
//! A volume is one subsystem (NQN = volume ID, derived from the CSI name) with namespace 1 in
//! a pool of one box. The controller keeps no state: every call reads the boxes. Creation is
//! made safe against crashes and against a second controller racing on the same name by
//! these rules (ADR 0023):
//! 1. look on every box first; a box that cannot be read stops the call (UNAVAILABLE), since
//!    the volume might be there;
//! 2. create the subsystem (no namespace yet), then look at every other box again: if another
//!    box has the same NQN, this attempt yields: it deletes its own subsystem and retries;
//! 3. only then add the namespace. A subsystem with its namespace therefore passed step 2 with
//!    no rival, and it is the volume; subsystems without a namespace are unfinished attempts
//!    (a crash, or a racing controller before step 3) that a retry finishes or removes.

use crate::boxes::Box as EBox;
use crate::keys::AuthMode;
use crate::names::{self, ctx};
use crate::pb;
use crate::pb::volume_capability::{AccessType, access_mode::Mode};
use crate::rpc::{BusySet, invalid, ok, required};
use ebof_api::{
    ApiError, ClientError, CloneRequest, NamespaceRequest, QosRequest, ResizeRequest, SnapshotView,
    State, SubsystemRequest, SubsystemView,
};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tonic::{Request, Response, Status};

/// Size of a volume whose CreateVolume gives no capacity.
pub const DEFAULT_SIZE: u64 = 1 << 30;
/// Smallest volume (what a file system needs to be useful).
pub const MIN_SIZE: u64 = 1 << 20;
/// Volume sizes are multiples of this.
pub const GRANULE: u64 = 4096;
/// Attempts of the create protocol before ABORTED (the CO retries later).
const CREATE_ATTEMPTS: u32 = 6;

/// The Controller service over `boxes`.
#[derive(Debug, Clone)]
pub struct Controller {
    boxes: Arc<Vec<EBox>>,
    busy: BusySet,
}

/// What one box holds now, as far as the controller cares.
struct BoxState {
    idx: usize,
    state: State,
}

/// A volume found on a box.
struct Found {
    idx: usize,
    sub: SubsystemView,
}

fn api_code(e: &ClientError) -> Option<&str> {
    match e {
        ClientError::Api(ApiError { code, .. }) => Some(code.as_str()),
        _ => None,
    }
}

/// Round `n` up to the granule.
fn granule(n: u64) -> u64 {
    n.div_ceil(GRANULE).saturating_mul(GRANULE)
}

/// The size to provision for a capacity range, or why none fits.
pub fn size_for(range: Option<&pb::CapacityRange>) -> Result<u64, Status> {
    let (req, lim) = range.map_or((0, 0), |r| (r.required_bytes, r.limit_bytes));
    if req < 0 || lim < 0 {
        return Err(Status::out_of_range(
            "capacity_range: required_bytes and limit_bytes must not be negative",
        ));
    }
    let (req, lim) = (req as u64, lim as u64);
    if lim > 0 && req > lim {
        return Err(Status::out_of_range(format!(
            "capacity_range: required_bytes {req} is above limit_bytes {lim}"
        )));
    }
    let size = if req == 0 {
        if lim == 0 {
            DEFAULT_SIZE
        } else {
            (lim.min(DEFAULT_SIZE) / GRANULE) * GRANULE
        }
    } else {
        granule(req.max(MIN_SIZE))
    };
    if size < MIN_SIZE || (lim > 0 && size > lim) {
        return Err(Status::out_of_range(format!(
            "capacity_range: volumes are multiples of {GRANULE} bytes from {MIN_SIZE}; none fits required {req}, limit {lim}"
        )));
    }
    Ok(size)
}

/// Whether an existing size satisfies a capacity range.
fn size_fits(size: u64, range: Option<&pb::CapacityRange>) -> bool {
    let (req, lim) = range.map_or((0, 0), |r| (r.required_bytes.max(0), r.limit_bytes.max(0)));
    size >= req as u64 && (lim == 0 || size <= lim as u64)
}

/// Check one capability: supported access type, file system and mode.
fn check_capability(c: &pb::VolumeCapability) -> Result<(), String> {
    let mode = c
        .access_mode
        .as_ref()
        .ok_or("access_mode is required")?
        .mode;
    let mode = Mode::try_from(mode).map_err(|_| format!("access mode {mode} is unknown"))?;
    if mode == Mode::Unknown {
        return Err("access mode is UNKNOWN".into());
    }
    match &c.access_type {
        Some(AccessType::Block(_)) => Ok(()),
        Some(AccessType::Mount(m)) => {
            crate::rpc::fs_type(&m.fs_type)?;
            if matches!(
                mode,
                Mode::MultiNodeMultiWriter | Mode::MultiNodeSingleWriter
            ) {
                return Err(format!(
                    "{} is only for block volumes: ext4 and xfs cannot be mounted on two nodes",
                    mode.as_str_name()
                ));
            }
            Ok(())
        }
        None => Err("access_type (block or mount) is required".into()),
    }
}

fn check_capabilities(caps: &[pb::VolumeCapability]) -> Result<(), Status> {
    if caps.is_empty() {
        return Err(invalid("volume_capabilities is required"));
    }
    for (i, c) in caps.iter().enumerate() {
        check_capability(c).map_err(|e| invalid(format!("volume_capabilities[{i}]: {e}")))?;
    }
    Ok(())
}

/// Whether a capability lets a volume be published on one node only.
fn single_node(c: Option<&pb::VolumeCapability>) -> bool {
    c.and_then(|c| c.access_mode.as_ref())
        .and_then(|m| Mode::try_from(m.mode).ok())
        .is_some_and(|m| {
            matches!(
                m,
                Mode::SingleNodeWriter
                    | Mode::SingleNodeReaderOnly
                    | Mode::SingleNodeSingleWriter
                    | Mode::SingleNodeMultiWriter
            )
        })
}

/// StorageClass parameters the driver understands.
#[derive(Debug)]
struct Params {
    pool: Option<String>,
    qos: Option<QosRequest>,
    auth: AuthMode,
}

impl Default for Params {
    fn default() -> Params {
        Params {
            pool: None,
            qos: None,
            auth: AuthMode::DEFAULT,
        }
    }
}

fn parse_params(p: &std::collections::HashMap<String, String>) -> Result<Params, Status> {
    let mut out = Params::default();
    let mut qos = QosRequest::default();
    let mut any_qos = false;
    let mut keys: Vec<&String> = p.keys().collect();
    keys.sort();
    for k in keys {
        let v = &p[k];
        if k.starts_with("csi.storage.k8s.io/") {
            continue;
        }
        let num = || {
            v.parse::<i64>().ok().filter(|&n| n >= 0).ok_or_else(|| {
                invalid(format!(
                    "parameter {k}: {v:?} is not a non-negative integer"
                ))
            })
        };
        match k.as_str() {
            "pool" => {
                if !crate::boxes::valid_label(v) {
                    return Err(invalid(format!("parameter pool: {v:?} is not a pool name")));
                }
                out.pool = Some(v.clone());
            }
            "iops" => (qos.iops, any_qos) = (Some(num()?), true),
            "mbps" => (qos.mbps, any_qos) = (Some(num()?), true),
            "readIops" | "read_iops" => (qos.read_iops, any_qos) = (Some(num()?), true),
            "writeIops" | "write_iops" => (qos.write_iops, any_qos) = (Some(num()?), true),
            "readMbps" | "read_mbps" => (qos.read_mbps, any_qos) = (Some(num()?), true),
            "writeMbps" | "write_mbps" => (qos.write_mbps, any_qos) = (Some(num()?), true),
            "auth" => out.auth = AuthMode::parse(v).map_err(invalid)?,
            _ => {
                return Err(invalid(format!(
                    "unknown parameter {k:?}: the driver takes pool, iops, mbps, readIops, writeIops, readMbps, writeMbps, auth"
                )));
            }
        }
    }
    if any_qos {
        out.qos = Some(qos);
    }
    Ok(out)
}

/// The zones a topology requirement allows (requisite), in preference order; empty: any.
fn zones(req: Option<&pb::TopologyRequirement>) -> (Vec<String>, Vec<String>) {
    let pick = |v: &[pb::Topology]| -> Vec<String> {
        v.iter()
            .filter_map(|t| t.segments.get(crate::ZONE_KEY).cloned())
            .collect()
    };
    match req {
        Some(r) => (pick(&r.requisite), pick(&r.preferred)),
        None => (Vec::new(), Vec::new()),
    }
}

/// Rendezvous weight of (`name`, box `api`): breaks placement ties the same way in every
/// controller.
fn weight(name: &str, api: &str) -> u64 {
    use sha2::{Digest, Sha256};
    let d = Sha256::digest(format!("{name}\0{api}").as_bytes());
    u64::from_be_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]])
}

/// A token for list pagination: the index of the next entry.
fn page<T: Clone>(all: &[T], max: i32, token: &str) -> Result<(Vec<T>, String), Status> {
    if max < 0 {
        return Err(invalid("max_entries must not be negative"));
    }
    let start = if token.is_empty() {
        0
    } else {
        token
            .parse::<usize>()
            .ok()
            .filter(|&s| s <= all.len())
            .ok_or_else(|| Status::aborted(format!("starting_token {token:?} is not valid")))?
    };
    let end = if max == 0 {
        all.len()
    } else {
        (start + max as usize).min(all.len())
    };
    let next = if end < all.len() {
        end.to_string()
    } else {
        String::new()
    };
    Ok((all[start..end].to_vec(), next))
}

impl Controller {
    /// The Controller service over `boxes`.
    pub fn new(boxes: Vec<EBox>) -> Controller {
        Controller {
            boxes: Arc::new(boxes),
            busy: BusySet::default(),
        }
    }

    /// Whether any box has a zone (then volumes carry topology).
    pub fn has_zones(&self) -> bool {
        self.boxes.iter().any(|b| b.zone.is_some())
    }

    /// Describe a failed box call without its token: which box, what failed.
    fn box_error(&self, idx: usize, what: &str, e: &ClientError) -> Status {
        let b = &self.boxes[idx];
        let msg = format!("box {} ({}): {what}: {e}", b.name, b.api);
        match e {
            ClientError::Api(a) => match a.code.as_str() {
                "pool-full" | "no-space" => Status::resource_exhausted(msg),
                "unknown-pool" | "snapshot-unsupported" => Status::failed_precondition(msg),
                "unauthorized" => Status::unavailable(format!(
                    "{msg} (check the box's token file in the boxes file)"
                )),
                _ => Status::internal(msg),
            },
            _ => Status::unavailable(msg),
        }
    }

    /// Run blocking management-API work for box `idx` off the async threads.
    async fn on_box<T, F>(&self, idx: usize, f: F) -> Result<T, ClientError>
    where
        T: Send + 'static,
        F: FnOnce(&ebof_api::Client) -> Result<T, ClientError> + Send + 'static,
    {
        let client = self.boxes[idx].client.clone();
        let name = self.boxes[idx].name.clone();
        tokio::task::spawn_blocking(move || f(&client))
            .await
            .unwrap_or_else(|e| {
                Err(ClientError::Transport {
                    endpoint: name,
                    message: format!("worker failed: {e}"),
                })
            })
    }

    /// Run `f` on box `idx` for its effect: an API error whose code is in `done` means the
    /// effect is already there (an idempotent retry); any other error names the box and `what`.
    async fn settle<T, F>(&self, idx: usize, what: &str, done: &[&str], f: F) -> Result<(), Status>
    where
        T: Send + 'static,
        F: FnOnce(&ebof_api::Client) -> Result<T, ClientError> + Send + 'static,
    {
        match self.on_box(idx, f).await {
            Ok(_) => Ok(()),
            Err(e) if api_code(&e).is_some_and(|c| done.contains(&c)) => Ok(()),
            Err(e) => Err(self.box_error(idx, what, &e)),
        }
    }

    /// Read every box's state, in parallel.
    async fn scan(&self) -> Vec<(usize, Result<State, ClientError>)> {
        let mut tasks = Vec::new();
        for i in 0..self.boxes.len() {
            let c = self.clone();
            tasks.push(tokio::spawn(async move {
                (i, c.on_box(i, |cl| cl.state()).await)
            }));
        }
        let mut out = Vec::new();
        for t in tasks {
            if let Ok(r) = t.await {
                out.push(r);
            }
        }
        out
    }

    /// Box `idx`'s state, or UNAVAILABLE naming it.
    async fn read_box(&self, idx: usize) -> Result<BoxState, Status> {
        self.on_box(idx, |c| c.state())
            .await
            .map(|state| BoxState { idx, state })
            .map_err(|e| self.box_error(idx, "reading its state", &e))
    }

    /// Every box's state, or UNAVAILABLE naming the first box that cannot be read.
    async fn scan_all(&self) -> Result<Vec<BoxState>, Status> {
        let mut out = Vec::new();
        for (idx, r) in self.scan().await {
            match r {
                Ok(state) => out.push(BoxState { idx, state }),
                Err(e) => return Err(self.box_error(idx, "reading its state", &e)),
            }
        }
        Ok(out)
    }

    fn find(all: &[BoxState], nqn: &str) -> Vec<Found> {
        all.iter()
            .filter_map(|b| {
                b.state
                    .subsystems
                    .iter()
                    .find(|s| s.nqn == nqn)
                    .map(|s| Found {
                        idx: b.idx,
                        sub: s.clone(),
                    })
            })
            .collect()
    }

    /// The scanned state of box `idx` (every hit of [`Self::find`] comes from one).
    fn state_of(all: &[BoxState], idx: usize) -> Result<&BoxState, Status> {
        all.iter()
            .find(|b| b.idx == idx)
            .ok_or_else(|| Status::internal(format!("box {idx} missing from its own scan")))
    }

    /// The volume `nqn` where it is complete (has its namespace), first by box order.
    fn complete(found: &[Found]) -> Option<&Found> {
        found
            .iter()
            .find(|f| f.sub.namespaces.iter().any(|n| n.nsid == names::NSID))
    }

    /// The NVMe/TCP paths of a box, for the node: its TCP listeners (not the discovery
    /// one), with a wildcard address replaced by the API's host.
    fn paths(&self, b: &BoxState) -> Vec<names::Path> {
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

    fn topology(&self, idx: usize) -> Vec<pb::Topology> {
        self.boxes[idx]
            .zone
            .iter()
            .map(|z| pb::Topology {
                segments: [(crate::ZONE_KEY.to_string(), z.clone())].into(),
            })
            .collect()
    }

    fn volume(&self, b: &BoxState, sub: &SubsystemView) -> Option<pb::Volume> {
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

    async fn remove_subsystem(&self, idx: usize, nqn: &str) -> Result<(), Status> {
        let n = nqn.to_string();
        let what = format!("removing subsystem {nqn}");
        self.settle(idx, &what, &["unknown-subsystem"], move |c| {
            c.remove_subsystem(&n)
        })
        .await
    }

    /// Remove an unfinished attempt at `nqn` on box `idx` (a subsystem without its namespace),
    /// unless it got its namespace meanwhile: then it is the volume, nothing is removed, and
    /// the answer is false (the caller starts over and finds it).
    async fn remove_unfinished(&self, idx: usize, nqn: &str) -> Result<bool, Status> {
        let complete = self
            .read_box(idx)
            .await?
            .state
            .subsystems
            .iter()
            .any(|s| s.nqn == nqn && s.namespaces.iter().any(|n| n.nsid == names::NSID));
        if complete {
            return Ok(false);
        }
        self.remove_subsystem(idx, nqn).await?;
        Ok(true)
    }

    /// Where a new volume of `size` goes: (box index, pool), or why nowhere.
    fn place(
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

    async fn create_volume_inner(&self, r: &pb::CreateVolumeRequest) -> Result<pb::Volume, Status> {
        names::check_name(&r.name).map_err(|e| invalid(format!("name: {e}")))?;
        check_capabilities(&r.volume_capabilities)?;
        let params = parse_params(&r.parameters)?;
        let size = size_for(r.capacity_range.as_ref())?;
        let topo = zones(r.accessibility_requirements.as_ref());
        let snapshot = match r
            .volume_content_source
            .as_ref()
            .and_then(|s| s.r#type.as_ref())
        {
            None => None,
            Some(pb::volume_content_source::Type::Snapshot(s)) => {
                if s.snapshot_id.is_empty() {
                    return Err(invalid(
                        "volume_content_source.snapshot.snapshot_id is required",
                    ));
                }
                Some(s.snapshot_id.clone())
            }
            Some(pb::volume_content_source::Type::Volume(_)) => {
                return Err(invalid(
                    "cloning from a volume is not supported (CLONE_VOLUME is not advertised): take a snapshot and create from it",
                ));
            }
        };
        let nqn = names::volume_nqn(&r.name);
        let uuid = names::volume_uuid(&r.name);
        let _busy = self.busy.hold(&nqn)?;
        for attempt in 0..CREATE_ATTEMPTS {
            if attempt > 0 {
                // Rivals must not retry in lockstep: the jitter differs per process and call.
                let nanos = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.subsec_nanos());
                let seed = format!("{attempt}:{}:{nanos}", std::process::id());
                let jitter = weight(&r.name, &seed) % 200;
                tokio::time::sleep(Duration::from_millis(50 + jitter)).await;
            }
            let all = self.scan_all().await?;
            let found = Self::find(&all, &nqn);
            if let Some(f) = Self::complete(&found) {
                let b = Self::state_of(&all, f.idx)?;
                let v = self
                    .volume(b, &f.sub)
                    .ok_or_else(|| Status::internal("volume without namespace"))?;
                // Unfinished rivals (a crash or a racing attempt): remove them.
                for o in found.iter().filter(|o| o.idx != f.idx) {
                    if !o.sub.namespaces.iter().any(|n| n.nsid == names::NSID) {
                        self.remove_unfinished(o.idx, &nqn).await?;
                    }
                }
                if !size_fits(v.capacity_bytes as u64, r.capacity_range.as_ref()) {
                    return Err(Status::already_exists(format!(
                        "volume {} exists with {} bytes, which the capacity range asked does not allow",
                        r.name, v.capacity_bytes
                    )));
                }
                return Ok(self.with_source(v, snapshot.as_deref(), params.auth));
            }
            // Where: an unfinished attempt's box, else a placement.
            let (idx, pool, snap) = if let Some(s) = &snapshot {
                let (sidx, view) = self.find_snapshot(&all, s)?;
                if let Some(cr) = &r.capacity_range
                    && cr.limit_bytes > 0
                    && view.size > cr.limit_bytes as u64
                {
                    return Err(Status::out_of_range(format!(
                        "snapshot {s} is {} bytes, above limit_bytes {}",
                        view.size, cr.limit_bytes
                    )));
                }
                let bx = &self.boxes[sidx];
                if !topo.0.is_empty() && !bx.zone.as_ref().is_some_and(|z| topo.0.contains(z)) {
                    return Err(Status::resource_exhausted(format!(
                        "snapshot {s} is on box {} (zone {:?}), outside the zones asked {:?}",
                        bx.name, bx.zone, topo.0
                    )));
                }
                let b = Self::state_of(&all, sidx)?;
                let pool = match &params.pool {
                    Some(p) => p.clone(),
                    None => b
                        .state
                        .pools
                        .iter()
                        .max_by_key(|p| p.free_bytes)
                        .map(|p| p.name.clone())
                        .ok_or_else(|| {
                            Status::resource_exhausted(format!("box {} has no pool", bx.name))
                        })?,
                };
                (sidx, pool, Some((s.clone(), view)))
            } else if let Some(f) = found.first() {
                let b = Self::state_of(&all, f.idx)?;
                let (i, p) = self
                    .place(std::slice::from_ref(b), &r.name, size, &params, &topo)
                    .or_else(|_| self.place(&all, &r.name, size, &params, &topo))?;
                (i, p, None)
            } else {
                let (i, p) = self.place(&all, &r.name, size, &params, &topo)?;
                (i, p, None)
            };
            // Step 2: the subsystem, then look for a rival.
            if !found.iter().any(|f| f.idx == idx) {
                let req = SubsystemRequest {
                    nqn: nqn.clone(),
                    serial: None,
                    model: Some("ebof-csi".into()),
                    allow_any_host: Some(false),
                };
                match self.on_box(idx, move |c| c.add_subsystem(&req)).await {
                    Ok(_) => {}
                    Err(e) if api_code(&e) == Some("duplicate-nqn") => continue,
                    Err(e) => {
                        return Err(self.box_error(idx, "creating the volume's subsystem", &e));
                    }
                }
            }
            // Unfinished attempts elsewhere go (ours cannot pass the check below beside them),
            // unless one got its namespace meanwhile: then it is the volume; start over.
            let mut finished_elsewhere = false;
            for o in found.iter().filter(|f| f.idx != idx) {
                if !self.remove_unfinished(o.idx, &nqn).await? {
                    finished_elsewhere = true;
                }
            }
            if finished_elsewhere {
                continue;
            }
            let again = self.scan_all().await?;
            if Self::find(&again, &nqn).iter().any(|f| f.idx != idx) {
                tracing::info!(volume = %r.name, box_ = %self.boxes[idx].name, "another attempt made the same volume elsewhere; yielding");
                self.remove_subsystem(idx, &nqn).await?;
                continue;
            }
            // Step 3: the namespace.
            let added = match snap {
                Some((sname, view)) => {
                    let req = CloneRequest {
                        subsystem: nqn.clone(),
                        nsid: Some(names::NSID),
                        uuid: Some(uuid.clone()),
                        pool: Some(pool.clone()),
                        ..Default::default()
                    };
                    let res = self
                        .on_box(idx, move |c| c.clone_snapshot(&sname, &req))
                        .await
                        .map(|_| ());
                    match res {
                        Ok(())
                            if size > view.size
                                && r.capacity_range
                                    .as_ref()
                                    .is_some_and(|c| c.required_bytes > 0) =>
                        {
                            let n = nqn.clone();
                            self.on_box(idx, move |c| {
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
                            .map(|_| ())
                        }
                        other => other,
                    }
                    .map(|()| params.qos.clone())
                }
                None => {
                    let req = NamespaceRequest {
                        nsid: Some(names::NSID),
                        backend: "file".into(),
                        size: Some(size),
                        uuid: Some(uuid.clone()),
                        qos: params.qos.clone(),
                        pool: Some(pool.clone()),
                        ..Default::default()
                    };
                    let n = nqn.clone();
                    self.on_box(idx, move |c| c.add_namespace(&n, &req))
                        .await
                        .map(|_| None)
                }
            };
            match added {
                Ok(qos_after) => {
                    if let Some(q) = qos_after {
                        let n = nqn.clone();
                        self.on_box(idx, move |c| c.set_namespace_qos(&n, "1", &q))
                            .await
                            .map_err(|e| self.box_error(idx, "setting QoS", &e))?;
                    }
                }
                Err(e)
                    if matches!(
                        api_code(&e),
                        Some("duplicate-nsid") | Some("unknown-subsystem")
                    ) =>
                {
                    continue;
                }
                Err(e) if matches!(api_code(&e), Some("pool-full") | Some("no-space")) => {
                    self.remove_subsystem(idx, &nqn).await?;
                    if attempt + 1 < CREATE_ATTEMPTS && snapshot.is_none() {
                        continue;
                    }
                    return Err(self.box_error(idx, "adding the volume's namespace", &e));
                }
                Err(e) => {
                    let st = self.box_error(idx, "adding the volume's namespace", &e);
                    self.remove_subsystem(idx, &nqn).await?;
                    return Err(st);
                }
            }
            // The answer: the volume as its box reports it now (the other boxes were read
            // by the check above).
            let b = self.read_box(idx).await?;
            let v = b
                .state
                .subsystems
                .iter()
                .find(|s| s.nqn == nqn)
                .and_then(|sub| self.volume(&b, sub))
                .ok_or_else(|| Status::aborted("the volume vanished while it was made; retry"))?;
            tracing::info!(volume = %r.name, id = %v.volume_id, box_ = %self.boxes[idx].name, size = v.capacity_bytes, "volume created");
            return Ok(self.with_source(v, snapshot.as_deref(), params.auth));
        }
        Err(Status::aborted(format!(
            "volume {}: creation raced with other attempts {CREATE_ATTEMPTS} times; retry",
            r.name
        )))
    }

    /// The volume as CreateVolume answers it: its source, and how its nodes authenticate.
    fn with_source(&self, mut v: pb::Volume, snapshot: Option<&str>, auth: AuthMode) -> pb::Volume {
        v.volume_context
            .insert(ctx::AUTH.to_string(), auth.name().to_string());
        v.content_source = snapshot.map(|s| pb::VolumeContentSource {
            r#type: Some(pb::volume_content_source::Type::Snapshot(
                pb::volume_content_source::SnapshotSource {
                    snapshot_id: s.to_string(),
                },
            )),
        });
        v
    }

    fn find_snapshot(&self, all: &[BoxState], id: &str) -> Result<(usize, SnapshotView), Status> {
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

    /// The box and subsystem of volume `id`: NOT_FOUND when no box has it and every box
    /// answered; UNAVAILABLE when it is on no box that answered but some box did not.
    async fn locate(&self, id: &str) -> Result<(BoxState, SubsystemView), Status> {
        if !names::is_volume_id(id) {
            return Err(Status::not_found(format!("volume {id} does not exist")));
        }
        let mut unreachable = None;
        let mut hit = None;
        for (idx, r) in self.scan().await {
            match r {
                Ok(state) => {
                    if hit.is_none()
                        && let Some(s) = state.subsystems.iter().find(|s| {
                            s.nqn == id && s.namespaces.iter().any(|n| n.nsid == names::NSID)
                        })
                    {
                        let s = s.clone();
                        hit = Some((BoxState { idx, state }, s));
                    }
                }
                Err(e) => unreachable = Some(self.box_error(idx, "reading its state", &e)),
            }
        }
        match (hit, unreachable) {
            (Some(h), _) => Ok(h),
            (None, Some(u)) => Err(u),
            (None, None) => Err(Status::not_found(format!("volume {id} does not exist"))),
        }
    }

    fn snapshot_message(v: &SnapshotView) -> pb::Snapshot {
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
}

#[tonic::async_trait]
impl pb::controller_server::Controller for Controller {
    async fn create_volume(
        &self,
        req: Request<pb::CreateVolumeRequest>,
    ) -> Result<Response<pb::CreateVolumeResponse>, Status> {
        let r = req.into_inner();
        tracing::info!(name = %r.name, "CreateVolume");
        let v = self.create_volume_inner(&r).await.inspect_err(|e| {
            tracing::warn!(name = %r.name, code = ?e.code(), error = %e.message(), "CreateVolume failed")
        })?;
        ok(pb::CreateVolumeResponse { volume: Some(v) })
    }

    async fn delete_volume(
        &self,
        req: Request<pb::DeleteVolumeRequest>,
    ) -> Result<Response<pb::DeleteVolumeResponse>, Status> {
        let r = req.into_inner();
        required(&r.volume_id, "volume_id")?;
        tracing::info!(volume = %r.volume_id, "DeleteVolume");
        if !names::is_volume_id(&r.volume_id) {
            return ok(pb::DeleteVolumeResponse {});
        }
        let _busy = self.busy.hold(&r.volume_id)?;
        let all = self.scan_all().await?;
        for f in Self::find(&all, &r.volume_id) {
            self.remove_subsystem(f.idx, &r.volume_id).await?;
        }
        ok(pb::DeleteVolumeResponse {})
    }

    async fn controller_publish_volume(
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

    async fn controller_unpublish_volume(
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

    async fn validate_volume_capabilities(
        &self,
        req: Request<pb::ValidateVolumeCapabilitiesRequest>,
    ) -> Result<Response<pb::ValidateVolumeCapabilitiesResponse>, Status> {
        let r = req.into_inner();
        required(&r.volume_id, "volume_id")?;
        if r.volume_capabilities.is_empty() {
            return Err(invalid("volume_capabilities is required"));
        }
        self.locate(&r.volume_id).await?;
        for c in &r.volume_capabilities {
            if let Err(e) = check_capability(c) {
                return ok(pb::ValidateVolumeCapabilitiesResponse {
                    confirmed: None,
                    message: e,
                });
            }
        }
        if let Err(e) = parse_params(&r.parameters) {
            return ok(pb::ValidateVolumeCapabilitiesResponse {
                confirmed: None,
                message: e.message().to_string(),
            });
        }
        ok(pb::ValidateVolumeCapabilitiesResponse {
            confirmed: Some(pb::validate_volume_capabilities_response::Confirmed {
                volume_context: r.volume_context,
                volume_capabilities: r.volume_capabilities,
                parameters: r.parameters,
                mutable_parameters: Default::default(),
            }),
            message: String::new(),
        })
    }

    async fn list_volumes(
        &self,
        req: Request<pb::ListVolumesRequest>,
    ) -> Result<Response<pb::ListVolumesResponse>, Status> {
        let r = req.into_inner();
        let all = self.scan_all().await?;
        let mut vols: BTreeMap<String, pb::list_volumes_response::Entry> = BTreeMap::new();
        for b in &all {
            for s in b
                .state
                .subsystems
                .iter()
                .filter(|s| names::is_volume_id(&s.nqn))
            {
                if let Some(v) = self.volume(b, s) {
                    vols.entry(s.nqn.clone())
                        .or_insert(pb::list_volumes_response::Entry {
                            volume: Some(v),
                            status: Some(pb::list_volumes_response::VolumeStatus {
                                published_node_ids: s.hosts.clone(),
                            }),
                        });
                }
            }
        }
        let all: Vec<_> = vols.into_values().collect();
        let (entries, next_token) = page(&all, r.max_entries, &r.starting_token)?;
        ok(pb::ListVolumesResponse {
            entries,
            next_token,
        })
    }

    async fn get_capacity(
        &self,
        req: Request<pb::GetCapacityRequest>,
    ) -> Result<Response<pb::GetCapacityResponse>, Status> {
        let r = req.into_inner();
        for (i, c) in r.volume_capabilities.iter().enumerate() {
            check_capability(c).map_err(|e| invalid(format!("volume_capabilities[{i}]: {e}")))?;
        }
        let params = parse_params(&r.parameters)?;
        let zone = r
            .accessible_topology
            .as_ref()
            .and_then(|t| t.segments.get(crate::ZONE_KEY).cloned());
        let mut total: u64 = 0;
        let mut max: u64 = 0;
        for (idx, res) in self.scan().await {
            let bx = &self.boxes[idx];
            if zone.as_ref().is_some_and(|z| bx.zone.as_ref() != Some(z)) {
                continue;
            }
            let Ok(state) = res else {
                continue; // a box that does not answer offers nothing now
            };
            for p in &state.pools {
                if params.pool.as_ref().is_some_and(|w| *w != p.name) {
                    continue;
                }
                total = total.saturating_add(p.free_bytes);
                max = max.max(p.free_bytes);
            }
        }
        ok(pb::GetCapacityResponse {
            available_capacity: total.min(i64::MAX as u64) as i64,
            maximum_volume_size: Some(max.min(i64::MAX as u64) as i64),
            minimum_volume_size: Some(MIN_SIZE as i64),
        })
    }

    async fn controller_get_capabilities(
        &self,
        _: Request<pb::ControllerGetCapabilitiesRequest>,
    ) -> Result<Response<pb::ControllerGetCapabilitiesResponse>, Status> {
        use pb::controller_service_capability::{Rpc, Type, rpc::Type as T};
        let cap = |t: T| pb::ControllerServiceCapability {
            r#type: Some(Type::Rpc(Rpc { r#type: t as i32 })),
        };
        ok(pb::ControllerGetCapabilitiesResponse {
            capabilities: [
                T::CreateDeleteVolume,
                T::PublishUnpublishVolume,
                T::ListVolumes,
                T::GetCapacity,
                T::CreateDeleteSnapshot,
                T::ListSnapshots,
                T::PublishReadonly,
                T::ExpandVolume,
                T::ListVolumesPublishedNodes,
            ]
            .into_iter()
            .map(cap)
            .collect(),
        })
    }

    async fn create_snapshot(
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
        let found = Self::find(&all, &r.source_volume_id);
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
            Err(e) => return Err(self.box_error(idx, "taking the snapshot", &e)),
        };
        ok(pb::CreateSnapshotResponse {
            snapshot: Some(Self::snapshot_message(&s)),
        })
    }

    async fn delete_snapshot(
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

    async fn list_snapshots(
        &self,
        req: Request<pb::ListSnapshotsRequest>,
    ) -> Result<Response<pb::ListSnapshotsResponse>, Status> {
        let r = req.into_inner();
        let all = self.scan_all().await?;
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

    async fn controller_expand_volume(
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
        let (b, sub) = self.locate(&r.volume_id).await?;
        let current = sub
            .namespaces
            .iter()
            .find(|n| n.nsid == names::NSID)
            .map(|n| n.size)
            .unwrap_or(0);
        let node_expansion_required = !matches!(
            r.volume_capability
                .as_ref()
                .and_then(|c| c.access_type.as_ref()),
            Some(AccessType::Block(_))
        );
        if current >= size {
            return ok(pb::ControllerExpandVolumeResponse {
                capacity_bytes: current as i64,
                node_expansion_required,
            });
        }
        let n = r.volume_id.clone();
        let changed = self
            .on_box(b.idx, move |c| {
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
            .map_err(|e| self.box_error(b.idx, "growing the volume", &e))?;
        ok(pb::ControllerExpandVolumeResponse {
            capacity_bytes: changed.namespace.size as i64,
            node_expansion_required,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(req: i64, lim: i64) -> pb::CapacityRange {
        pb::CapacityRange {
            required_bytes: req,
            limit_bytes: lim,
        }
    }

    #[test]
    fn sizes_follow_the_capacity_range() {
        assert_eq!(size_for(None).unwrap(), DEFAULT_SIZE);
        assert_eq!(size_for(Some(&range(0, 0))).unwrap(), DEFAULT_SIZE);
        assert_eq!(size_for(Some(&range(10 << 20, 0))).unwrap(), 10 << 20);
        assert_eq!(size_for(Some(&range(1, 0))).unwrap(), MIN_SIZE);
        assert_eq!(
            size_for(Some(&range((10 << 20) + 1, 0))).unwrap(),
            (10 << 20) + 4096
        );
        assert_eq!(size_for(Some(&range(0, 64 << 20))).unwrap(), 64 << 20);
        assert_eq!(size_for(Some(&range(0, 5 << 30))).unwrap(), DEFAULT_SIZE);
        for bad in [
            range(-1, 0),
            range(0, -1),
            range(10, 5),
            range(0, 4096),
            range(5000, 6000),
        ] {
            assert_eq!(
                size_for(Some(&bad)).unwrap_err().code(),
                tonic::Code::OutOfRange,
                "{bad:?}"
            );
        }
        assert!(size_fits(10 << 20, Some(&range(10 << 20, 0))));
        assert!(!size_fits(10 << 20, Some(&range(20 << 20, 0))));
        assert!(!size_fits(10 << 20, Some(&range(0, 5 << 20))));
    }

    #[test]
    fn parameters_are_checked() {
        let p = |kv: &[(&str, &str)]| {
            parse_params(
                &kv.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            )
        };
        let ok = p(&[
            ("pool", "fast"),
            ("iops", "5000"),
            ("csi.storage.k8s.io/pvc/name", "x"),
        ])
        .unwrap();
        assert_eq!(ok.pool.as_deref(), Some("fast"));
        assert_eq!(ok.qos.unwrap().iops, Some(5000));
        assert!(p(&[]).unwrap().qos.is_none());
        assert_eq!(p(&[]).unwrap().auth, AuthMode::Dhchap, "the default");
        assert_eq!(p(&[("auth", "none")]).unwrap().auth, AuthMode::None);
        let tls = p(&[("auth", "tls")]).unwrap_err();
        assert_eq!(tls.code(), tonic::Code::InvalidArgument);
        assert!(tls.message().contains("not supported"), "{tls:?}");
        for bad in [
            &[("pool", "")][..],
            &[("iops", "-1")],
            &[("mbps", "x")],
            &[("colour", "red")],
        ] {
            assert_eq!(
                p(bad).unwrap_err().code(),
                tonic::Code::InvalidArgument,
                "{bad:?}"
            );
        }
    }

    #[test]
    fn capabilities_are_checked() {
        use pb::volume_capability::{AccessMode, BlockVolume, MountVolume};
        let cap = |block: bool, fs: &str, mode: Mode| pb::VolumeCapability {
            access_type: Some(if block {
                AccessType::Block(BlockVolume {})
            } else {
                AccessType::Mount(MountVolume {
                    fs_type: fs.into(),
                    ..Default::default()
                })
            }),
            access_mode: Some(AccessMode { mode: mode as i32 }),
        };
        assert!(check_capability(&cap(false, "", Mode::SingleNodeWriter)).is_ok());
        assert!(check_capability(&cap(false, "xfs", Mode::MultiNodeReaderOnly)).is_ok());
        assert!(check_capability(&cap(true, "", Mode::MultiNodeMultiWriter)).is_ok());
        assert!(check_capability(&cap(false, "ext4", Mode::MultiNodeMultiWriter)).is_err());
        assert!(check_capability(&cap(false, "zfs", Mode::SingleNodeWriter)).is_err());
        assert!(check_capability(&cap(true, "", Mode::Unknown)).is_err());
        assert!(check_capabilities(&[]).is_err());
        assert!(single_node(Some(&cap(false, "", Mode::SingleNodeWriter))));
        assert!(!single_node(Some(&cap(
            true,
            "",
            Mode::MultiNodeMultiWriter
        ))));
    }

    #[test]
    fn pages_walk_the_list_and_bad_tokens_abort() {
        let all: Vec<u32> = (0..5).collect();
        let (a, t) = page(&all, 2, "").unwrap();
        assert_eq!((a, t.as_str()), (vec![0, 1], "2"));
        let (b, t) = page(&all, 2, &t).unwrap();
        assert_eq!((b, t.as_str()), (vec![2, 3], "4"));
        let (c, t) = page(&all, 2, &t).unwrap();
        assert_eq!((c, t.as_str()), (vec![4], ""));
        assert_eq!(page(&all, 0, "").unwrap().0.len(), 5);
        assert_eq!(page(&all, 1, "x").unwrap_err().code(), tonic::Code::Aborted);
        assert_eq!(page(&all, 1, "9").unwrap_err().code(), tonic::Code::Aborted);
        assert_eq!(
            page(&all, -1, "").unwrap_err().code(),
            tonic::Code::InvalidArgument
        );
    }
}
