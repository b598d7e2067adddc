//! The CSI Controller service: volumes and snapshots on a fleet of ebof pool boxes, through
//! each box's management API.
//!
//! A volume is one subsystem (NQN = volume ID, derived from the CSI name) with namespace 1 in
//! a pool of one box. The controller keeps no state: every call reads the boxes. Creation is
//! made safe against crashes and against a second controller racing on the same name by
//! these rules (ADR 0023):
//! 1. look on every box first; a box that cannot be read stops the call (UNAVAILABLE), since
//!    the volume might be there; except for a volume of one copy made from nothing when the
//!    controller knows it is not on the silent boxes (each read since the controller started,
//!    without the volume's subsystem when last read, and not asked for one since:
//!    [`memory`]) and its home box (rendezvous hash of name and box over the boxes it fits,
//!    a silent one counted as fitting) answers: it is then looked for on the boxes that
//!    answer and made on its home box, and a retry while the box that has it is down cannot
//!    make it a second time elsewhere (issue 35);
//! 2. create the subsystem (no namespace yet), then look at every other box again: if another
//!    box has the same NQN, this attempt yields: it deletes its own subsystem and retries;
//! 3. only then add the namespace. A subsystem with its namespace therefore passed step 2 with
//!    no rival, and it is the volume; subsystems without a namespace are unfinished attempts
//!    (a crash, or a racing controller before step 3) that a retry finishes or removes.
//!
//! The rules are [`protocol::Protocol`]'s decisions, which [`create`] carries out. Beside them:
//! request checks ([`checks`]), placement and how a volume is described ([`placement`]),
//! publishing to nodes ([`publish`]), snapshots ([`snapshots`]), clones of volumes
//! ([`clone`]), live QoS changes ([`modify`]) and volume health ([`health`]). The calls that
//! list (ListVolumes, a whole ListSnapshots) need every box and name every box that does not
//! answer (a partial list would make the external-attacher publish the missing volumes'
//! attachments again; ADR 0023). A volume of two copies
//! mirrored on two boxes (`replicas: "2"`, issue 34) extends these rules: [`mirror`].

mod checks;
mod clone;
mod create;
mod expand;
mod health;
mod memory;
pub(crate) mod mirror;
mod modify;
mod placement;
mod protocol;
mod publish;
mod snapshots;

pub use checks::size_for;

/// The QoS limits a VolumeAttributesClass's parameters ask for (the mutable parameters of
/// ControllerModifyVolume and CreateVolume; `None`: none), or why the driver refuses them.
pub fn mutable_qos(
    p: &std::collections::HashMap<String, String>,
) -> Result<Option<ebof_api::QosRequest>, String> {
    parse_mutable(p).map_err(|e| e.message().to_string())
}

use crate::boxes::Box as EBox;
use crate::names;
use crate::pb;
use crate::rpc::{BusySet, invalid, ok, required};
use checks::{check_capability, page, parse_mutable, parse_params};
use ebof_api::{ApiError, ClientError, State, SubsystemView};
use mirror::{CopyMirror, Mirrors, Role};
use std::collections::BTreeMap;
use std::sync::Arc;
use tonic::{Request, Response, Status};

/// Size of a volume whose CreateVolume gives no capacity.
pub const DEFAULT_SIZE: u64 = 1 << 30;
/// Smallest volume (what a file system needs to be useful).
pub const MIN_SIZE: u64 = 1 << 20;
/// Volume sizes are multiples of this.
pub const GRANULE: u64 = 4096;

/// The Controller service over `boxes`.
#[derive(Debug, Clone)]
pub struct Controller {
    boxes: Arc<Vec<EBox>>,
    busy: BusySet,
    /// What it last read of each box, and the subsystems it asked of each.
    memory: Arc<memory::Memory>,
    /// The boxes' witness (`witness` of the boxes file): no copy of a replicated volume on
    /// the box listening there, when another pair exists.
    witness: Option<std::net::SocketAddr>,
}

/// What one box holds now, as far as the controller cares.
struct BoxState {
    idx: usize,
    state: State,
    /// The mirror of each replicated volume's copy on the box.
    mirrors: Mirrors,
    /// The address of its API's host (what a wildcard listener stands for), resolved with
    /// the state, off the async threads.
    api_ip: Option<std::net::IpAddr>,
}

/// A volume found on a box.
struct Found {
    idx: usize,
    sub: SubsystemView,
    /// Its namespace's mirror, for a copy of a replicated volume.
    mirror: Option<CopyMirror>,
    /// The box its mirror names as the peer (among the boxes read), if any.
    peer: Option<usize>,
}

/// A volume as found for publish, unpublish and expand: the copy that serves it (the
/// primary's, for a replicated volume), and for a replicated volume its peer.
struct Located {
    /// The box of the serving copy.
    main: BoxState,
    /// Its subsystem.
    sub: SubsystemView,
    /// The mirror of the serving copy (a replicated volume).
    mirror: Option<CopyMirror>,
    /// The peer's box and, when it answered, what it holds of the volume.
    partner: Option<(usize, Option<Seen>)>,
}

/// A box that answered, and its subsystem of the volume if it has one.
type Seen = (BoxState, Option<SubsystemView>);

fn api_code(e: &ClientError) -> Option<&str> {
    match e {
        ClientError::Api(ApiError { code, .. }) => Some(code.as_str()),
        _ => None,
    }
}

impl Controller {
    /// The Controller service over `boxes`.
    pub fn new(boxes: Vec<EBox>) -> Controller {
        Controller {
            memory: Arc::new(memory::Memory::new(boxes.len())),
            boxes: Arc::new(boxes),
            busy: BusySet::default(),
            witness: None,
        }
    }

    /// The Controller service over the boxes of a boxes file, with its witness.
    pub fn from_fleet(fleet: crate::boxes::Fleet) -> Controller {
        if let Some(w) = fleet.witness {
            tracing::info!(witness = %w, "replicated volumes: no copy on the witness's box; every box needs [mirror] witness = \"{w}\" in its configuration");
        }
        Controller {
            witness: fleet.witness,
            ..Controller::new(fleet.boxes)
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
        let tokens = self.boxes[idx].tokens.clone();
        let name = self.boxes[idx].name.clone();
        tokio::task::spawn_blocking(move || f(&tokens.client()))
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

    /// Box `idx`'s state, its mirrors, and its API host's address (a name is resolved here,
    /// on a blocking thread).
    async fn read_one(&self, idx: usize) -> Result<BoxState, ClientError> {
        let api = self.boxes[idx].api.clone();
        let read = self
            .on_box(idx, move |c| {
                let (state, mirrors) = mirror::read_state(c)?;
                Ok(BoxState {
                    idx,
                    state,
                    mirrors,
                    api_ip: placement::api_host_ip(&api),
                })
            })
            .await;
        if let Ok(b) = &read {
            self.memory.read(idx, &b.state);
        }
        read
    }

    /// Read every box's state, in parallel.
    async fn scan(&self) -> Vec<(usize, Result<BoxState, ClientError>)> {
        let mut tasks = Vec::new();
        for i in 0..self.boxes.len() {
            let c = self.clone();
            tasks.push(tokio::spawn(async move { (i, c.read_one(i).await) }));
        }
        let mut out = Vec::new();
        for t in tasks {
            if let Ok(r) = t.await {
                out.push(r);
            }
        }
        out
    }

    /// Every box's state: those that answered, and those that did not with UNAVAILABLE
    /// naming them.
    async fn scan_split(&self) -> (Vec<BoxState>, Vec<(usize, Status)>) {
        let mut reached = Vec::new();
        let mut down = Vec::new();
        for (idx, r) in self.scan().await {
            match r {
                Ok(b) => reached.push(b),
                Err(e) => down.push((idx, self.box_error(idx, "reading its state", &e))),
            }
        }
        (reached, down)
    }

    /// Box `idx`'s state, or UNAVAILABLE naming it.
    async fn read_box(&self, idx: usize) -> Result<BoxState, Status> {
        self.read_one(idx)
            .await
            .map_err(|e| self.box_error(idx, "reading its state", &e))
    }

    /// Every box's state, or UNAVAILABLE naming every box that cannot be read.
    async fn scan_all(&self) -> Result<Vec<BoxState>, Status> {
        self.scan_every("the call").await
    }

    /// Every box's state for `what`, which needs them all, or UNAVAILABLE naming every box
    /// that cannot be read, with why (ListVolumes: a list without a box's volumes would tell
    /// the external-attacher that their attachments are gone, and it would publish them again;
    /// ADR 0023).
    async fn scan_every(&self, what: &str) -> Result<Vec<BoxState>, Status> {
        let (all, down) = self.scan_split().await;
        if down.is_empty() {
            return Ok(all);
        }
        Err(self.silent_boxes(what, &down))
    }

    /// UNAVAILABLE: `what` needs every box, and the boxes `down` do not answer (each named,
    /// with why).
    fn silent_boxes(&self, what: &str, down: &[(usize, Status)]) -> Status {
        let names: Vec<&str> = down
            .iter()
            .map(|(i, _)| self.boxes[*i].name.as_str())
            .collect();
        let whys: Vec<&str> = down.iter().map(|(_, e)| e.message()).collect();
        Status::unavailable(format!(
            "{what} needs every box, and {} of {} do not answer: {} ({})",
            down.len(),
            self.boxes.len(),
            names.join(", "),
            whys.join("; ")
        ))
    }

    /// The subsystems named `nqn`, box by box, with their mirrors and peers' boxes.
    fn find(&self, all: &[BoxState], nqn: &str) -> Vec<Found> {
        all.iter()
            .filter_map(|b| {
                b.state.subsystems.iter().find(|s| s.nqn == nqn).map(|s| {
                    let mirror = b.mirrors.get(nqn).cloned();
                    let peer = mirror.as_ref().and_then(|m| self.box_at(all, &m.peer));
                    Found {
                        idx: b.idx,
                        sub: s.clone(),
                        mirror,
                        peer,
                    }
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

    /// The copy of volume `nqn` that serves it: complete (has its namespace), a primary
    /// before a secondary, first by box order.
    fn complete(found: &[Found]) -> Option<&Found> {
        let done = |f: &&Found| f.sub.namespaces.iter().any(|n| n.nsid == names::NSID);
        found
            .iter()
            .filter(done)
            .find(|f| f.mirror.as_ref().is_some_and(|m| m.role == Role::Primary))
            .or_else(|| found.iter().find(done))
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

    /// Whether DeleteVolume of `id` may go on while the boxes `down` do not answer: when the
    /// volume is whole on boxes that answer (its complete copy, and a replicated volume's
    /// other copy), a box that does not answer holds at most an unfinished attempt (an empty
    /// subsystem, by the create protocol), which is left there (logged). Otherwise the
    /// volume might be on such a box: UNAVAILABLE naming it.
    fn deletable_without(
        &self,
        id: &str,
        found: &[Found],
        down: Vec<(usize, Status)>,
    ) -> Result<(), Status> {
        let Some((_, first)) = down.first() else {
            return Ok(());
        };
        let whole = Self::complete(found).is_some_and(|m| {
            m.mirror.is_none() || protocol::Protocol::pair(found, m.idx) == protocol::Pair::Whole
        });
        if !whole {
            return Err(Status::unavailable(format!(
                "volume {id} is not whole on the boxes that answer, and may be on one that does not: {}",
                first.message()
            )));
        }
        let names: Vec<&str> = down
            .iter()
            .map(|(i, _)| self.boxes[*i].name.as_str())
            .collect();
        tracing::warn!(volume = %id, unreachable = ?names, "DeleteVolume goes on without boxes that do not answer: they hold at most an empty subsystem of it, left there");
        Ok(())
    }

    /// Volume `id` where it is served, and its peer's box for a replicated volume: NOT_FOUND
    /// when no box has it and every box answered; UNAVAILABLE when it is on no box that
    /// answered but some box did not.
    async fn locate(&self, id: &str) -> Result<Located, Status> {
        if !names::is_volume_id(id) {
            return Err(Status::not_found(format!("volume {id} does not exist")));
        }
        let (reached, down) = self.scan_split().await;
        let found = self.find(&reached, id);
        let Some(main) = Self::complete(&found) else {
            return Err(down
                .into_iter()
                .next_back()
                .map(|(_, e)| e)
                .unwrap_or_else(|| Status::not_found(format!("volume {id} does not exist"))));
        };
        let (main_idx, sub, mirror) = (main.idx, main.sub.clone(), main.mirror.clone());
        let peer = mirror
            .as_ref()
            .and_then(|m| main.peer.or_else(|| self.box_by_host(&m.peer, main_idx)))
            .filter(|&p| p != main_idx);
        let partner_sub =
            peer.and_then(|p| found.iter().find(|f| f.idx == p).map(|f| f.sub.clone()));
        let mut main_state = None;
        let mut partner_state = None;
        for b in reached {
            if b.idx == main_idx {
                main_state = Some(b);
            } else if Some(b.idx) == peer {
                partner_state = Some(b);
            }
        }
        let main =
            main_state.ok_or_else(|| Status::internal("volume missing from its own scan"))?;
        Ok(Located {
            main,
            sub,
            mirror,
            partner: peer.map(|p| (p, partner_state.map(|b| (b, partner_sub)))),
        })
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
        let (all, down) = self.scan_split().await;
        let mut found = self.find(&all, &r.volume_id);
        self.deletable_without(&r.volume_id, &found, down)?;
        // A replicated volume's secondary copy first, its primary last: a delete cut short
        // leaves a primary alone (which the next delete removes), never a secondary alone.
        found.sort_by_key(|f| f.mirror.as_ref().is_some_and(|m| m.role == Role::Primary));
        for f in found {
            self.remove_subsystem(f.idx, &r.volume_id).await?;
        }
        // A clone's temporary snapshot left by a CreateVolume cut short (see `clone`).
        let point = names::clone_point_name(&r.volume_id);
        self.drop_clone_point_in(&all, &point).await;
        ok(pb::DeleteVolumeResponse {})
    }

    async fn controller_publish_volume(
        &self,
        req: Request<pb::ControllerPublishVolumeRequest>,
    ) -> Result<Response<pb::ControllerPublishVolumeResponse>, Status> {
        self.publish(req).await
    }

    async fn controller_unpublish_volume(
        &self,
        req: Request<pb::ControllerUnpublishVolumeRequest>,
    ) -> Result<Response<pb::ControllerUnpublishVolumeResponse>, Status> {
        self.unpublish(req).await
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
        if let Err(e) =
            parse_params(&r.parameters).and_then(|_| parse_mutable(&r.mutable_parameters))
        {
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
                mutable_parameters: r.mutable_parameters,
            }),
            message: String::new(),
        })
    }

    async fn list_volumes(
        &self,
        req: Request<pb::ListVolumesRequest>,
    ) -> Result<Response<pb::ListVolumesResponse>, Status> {
        let r = req.into_inner();
        let all = self.scan_every("ListVolumes").await?;
        let mut vols: BTreeMap<String, pb::list_volumes_response::Entry> = BTreeMap::new();
        let ids: std::collections::BTreeSet<&str> = all
            .iter()
            .flat_map(|b| b.state.subsystems.iter())
            .map(|s| s.nqn.as_str())
            .filter(|n| names::is_volume_id(n))
            .collect();
        for id in ids {
            let found = self.find(&all, id);
            let Some(main) = Self::complete(&found) else {
                continue;
            };
            if let Some(v) = self.volume_of(&all, &found) {
                vols.insert(
                    id.to_string(),
                    pb::list_volumes_response::Entry {
                        volume: Some(v),
                        status: Some(pb::list_volumes_response::VolumeStatus {
                            published_node_ids: names::nodes(&main.sub.hosts),
                            volume_condition: Some(self.condition_of(&all, &found, &[])),
                        }),
                    },
                );
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
        // Each box's largest pool: a replicated volume's largest size is the second largest.
        let mut per_box: Vec<u64> = Vec::new();
        for (idx, res) in self.scan().await {
            let bx = &self.boxes[idx];
            if zone.as_ref().is_some_and(|z| bx.zone.as_ref() != Some(z)) {
                continue;
            }
            let Ok(BoxState { state, .. }) = res else {
                continue; // a box that does not answer offers nothing now
            };
            for p in &state.pools {
                if params.pool.as_ref().is_some_and(|w| *w != p.name) {
                    continue;
                }
                total = total.saturating_add(p.free_bytes);
                max = max.max(p.free_bytes);
            }
            per_box.push(
                state
                    .pools
                    .iter()
                    .filter(|p| params.pool.as_ref().is_none_or(|w| *w == p.name))
                    .map(|p| p.free_bytes)
                    .max()
                    .unwrap_or(0),
            );
        }
        if params.replicas > 1 {
            // Two copies on two boxes: half the bytes, and what the second box can hold.
            per_box.sort_unstable_by(|a, b| b.cmp(a));
            total /= 2;
            max = per_box.get(1).copied().unwrap_or(0);
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
                T::CloneVolume,
                T::ModifyVolume,
                T::GetVolume,
                T::VolumeCondition,
                T::GetSnapshot,
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
        self.snapshot_create(req).await
    }

    async fn delete_snapshot(
        &self,
        req: Request<pb::DeleteSnapshotRequest>,
    ) -> Result<Response<pb::DeleteSnapshotResponse>, Status> {
        self.snapshot_delete(req).await
    }

    async fn list_snapshots(
        &self,
        req: Request<pb::ListSnapshotsRequest>,
    ) -> Result<Response<pb::ListSnapshotsResponse>, Status> {
        self.snapshot_list(req).await
    }

    async fn controller_expand_volume(
        &self,
        req: Request<pb::ControllerExpandVolumeRequest>,
    ) -> Result<Response<pb::ControllerExpandVolumeResponse>, Status> {
        self.expand(req).await
    }

    async fn controller_get_volume(
        &self,
        req: Request<pb::ControllerGetVolumeRequest>,
    ) -> Result<Response<pb::ControllerGetVolumeResponse>, Status> {
        self.get_volume(req).await
    }

    async fn controller_modify_volume(
        &self,
        req: Request<pb::ControllerModifyVolumeRequest>,
    ) -> Result<Response<pb::ControllerModifyVolumeResponse>, Status> {
        self.modify(req).await
    }

    async fn get_snapshot(
        &self,
        req: Request<pb::GetSnapshotRequest>,
    ) -> Result<Response<pb::GetSnapshotResponse>, Status> {
        self.snapshot_get(req).await
    }
}
