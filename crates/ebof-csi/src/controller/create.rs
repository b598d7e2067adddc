//! CreateVolume: the request checked, then the create protocol of the module docs run
//! attempt by attempt ([`Protocol`] decides, these methods call the boxes).

use super::checks::{Params, check_capabilities, parse_params, size_fits, size_for, zones};
use super::protocol::{CREATE_ATTEMPTS, Look, Protocol, Verdict};
use super::{BoxState, Controller, Found, api_code};
use crate::keys::AuthMode;
use crate::names::{self, ctx};
use crate::pb;
use crate::rpc::invalid;
use ebof_api::{
    ClientError, CloneRequest, NamespaceRequest, QosRequest, ResizeRequest, SnapshotView,
    SubsystemRequest,
};
use tonic::Status;

/// One CreateVolume request, checked: what every attempt works from.
struct Job<'a> {
    /// The request.
    r: &'a pb::CreateVolumeRequest,
    /// Its StorageClass parameters.
    params: Params,
    /// The size to provision.
    size: u64,
    /// Zones allowed (requisite) and preferred.
    topo: (Vec<String>, Vec<String>),
    /// The snapshot to make it from, if any.
    snapshot: Option<String>,
    /// The volume's subsystem NQN (its ID).
    nqn: String,
    /// Its namespace's UUID.
    uuid: String,
}

/// Where an attempt makes the volume: the box, the pool, and the snapshot to clone.
struct Target {
    idx: usize,
    pool: String,
    snap: Option<(String, SnapshotView)>,
}

/// The snapshot a request's content source names, if any.
fn content_source(r: &pb::CreateVolumeRequest) -> Result<Option<String>, Status> {
    match r
        .volume_content_source
        .as_ref()
        .and_then(|s| s.r#type.as_ref())
    {
        None => Ok(None),
        Some(pb::volume_content_source::Type::Snapshot(s)) => {
            if s.snapshot_id.is_empty() {
                return Err(invalid(
                    "volume_content_source.snapshot.snapshot_id is required",
                ));
            }
            Ok(Some(s.snapshot_id.clone()))
        }
        Some(pb::volume_content_source::Type::Volume(_)) => Err(invalid(
            "cloning from a volume is not supported (CLONE_VOLUME is not advertised): take a snapshot and create from it",
        )),
    }
}

impl Controller {
    pub(super) async fn create_volume_inner(
        &self,
        r: &pb::CreateVolumeRequest,
    ) -> Result<pb::Volume, Status> {
        names::check_name(&r.name).map_err(|e| invalid(format!("name: {e}")))?;
        check_capabilities(&r.volume_capabilities)?;
        let params = parse_params(&r.parameters)?;
        let size = size_for(r.capacity_range.as_ref())?;
        let topo = zones(r.accessibility_requirements.as_ref());
        let snapshot = content_source(r)?;
        let job = Job {
            r,
            params,
            size,
            topo,
            snapshot,
            nqn: names::volume_nqn(&r.name),
            uuid: names::volume_uuid(&r.name),
        };
        let _busy = self.busy.hold(&job.nqn)?;
        let mut protocol = Protocol::new();
        while let Some(attempt) = protocol.next_attempt() {
            if let Some(pause) = Protocol::pause(attempt, &r.name, &Protocol::seed()) {
                tokio::time::sleep(pause).await;
            }
            if let Some(v) = self.create_attempt(&job, &protocol).await? {
                return Ok(v);
            }
        }
        Err(Status::aborted(format!(
            "volume {}: creation raced with other attempts {CREATE_ATTEMPTS} times; retry",
            r.name
        )))
    }

    /// One attempt of the protocol: the volume, or `None` to start the next attempt.
    async fn create_attempt(
        &self,
        job: &Job<'_>,
        protocol: &Protocol,
    ) -> Result<Option<pb::Volume>, Status> {
        let (r, nqn) = (job.r, &job.nqn);
        // Step 1: look on every box.
        let all = self.scan_all().await?;
        let found = Self::find(&all, nqn);
        if let Look::Exists { on, leftovers } = Protocol::look(&found) {
            return self
                .existing(job, &all, &found, on, &leftovers)
                .await
                .map(Some);
        }
        let t = self.target(job, &all, &found)?;
        // Step 2: the subsystem, then look for a rival.
        if Protocol::needs_subsystem(&found, t.idx) {
            let req = SubsystemRequest {
                nqn: nqn.clone(),
                serial: None,
                model: Some("ebof-csi".into()),
                allow_any_host: Some(false),
            };
            if let Err(e) = self.on_box(t.idx, move |c| c.add_subsystem(&req)).await {
                return match Protocol::subsystem_refused(api_code(&e)) {
                    Verdict::Retry => Ok(None),
                    _ => Err(self.box_error(t.idx, "creating the volume's subsystem", &e)),
                };
            }
        }
        // Unfinished attempts elsewhere go (ours cannot pass the check below beside them),
        // unless one got its namespace meanwhile: then it is the volume; start over.
        let mut finished_elsewhere = false;
        for o in Protocol::others(&found, t.idx) {
            if !self.remove_unfinished(o, nqn).await? {
                finished_elsewhere = true;
            }
        }
        if finished_elsewhere {
            return Ok(None);
        }
        let again = self.scan_all().await?;
        if Protocol::yields(&Self::find(&again, nqn), t.idx) {
            tracing::info!(volume = %r.name, box_ = %self.boxes[t.idx].name, "another attempt made the same volume elsewhere; yielding");
            self.remove_subsystem(t.idx, nqn).await?;
            return Ok(None);
        }
        // Step 3: the namespace.
        let from_snapshot = t.snap.is_some();
        let idx = t.idx;
        match self.add_volume_namespace(job, t).await {
            Ok(Some(q)) => {
                let n = nqn.clone();
                self.on_box(idx, move |c| c.set_namespace_qos(&n, "1", &q))
                    .await
                    .map_err(|e| self.box_error(idx, "setting QoS", &e))?;
            }
            Ok(None) => {}
            Err(e) => {
                let verdict = protocol.namespace_refused(api_code(&e), from_snapshot);
                if verdict == Verdict::Retry {
                    return Ok(None);
                }
                let st = self.box_error(idx, "adding the volume's namespace", &e);
                self.remove_subsystem(idx, nqn).await?;
                return match verdict {
                    Verdict::FreeAndRetry => Ok(None),
                    _ => Err(st),
                };
            }
        }
        self.made(job, idx).await.map(Some)
    }

    /// The volume exists on box `on` (step 1 found it complete): the unfinished attempts on
    /// `leftovers` go, and it is the answer if its size fits the request.
    async fn existing(
        &self,
        job: &Job<'_>,
        all: &[BoxState],
        found: &[Found],
        on: usize,
        leftovers: &[usize],
    ) -> Result<pb::Volume, Status> {
        let f = found
            .iter()
            .find(|f| f.idx == on)
            .ok_or_else(|| Status::internal("volume missing from its own scan"))?;
        let b = Self::state_of(all, on)?;
        let v = self
            .volume(b, &f.sub)
            .ok_or_else(|| Status::internal("volume without namespace"))?;
        // Unfinished rivals (a crash or a racing attempt): remove them.
        for &o in leftovers {
            self.remove_unfinished(o, &job.nqn).await?;
        }
        if !size_fits(v.capacity_bytes as u64, job.r.capacity_range.as_ref()) {
            return Err(Status::already_exists(format!(
                "volume {} exists with {} bytes, which the capacity range asked does not allow",
                job.r.name, v.capacity_bytes
            )));
        }
        Ok(self.with_source(v, job.snapshot.as_deref(), job.params.auth))
    }

    /// Where this attempt makes the volume: the snapshot's box, else an unfinished attempt's
    /// box (if it has room), else a placement.
    fn target(&self, job: &Job<'_>, all: &[BoxState], found: &[Found]) -> Result<Target, Status> {
        let (r, params, topo) = (job.r, &job.params, &job.topo);
        if let Some(s) = &job.snapshot {
            let (sidx, view) = self.find_snapshot(all, s)?;
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
            let b = Self::state_of(all, sidx)?;
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
            return Ok(Target {
                idx: sidx,
                pool,
                snap: Some((s.clone(), view)),
            });
        }
        let (idx, pool) = match Protocol::look(found) {
            Look::Make { resume: Some(at) } => {
                let b = Self::state_of(all, at)?;
                self.place(std::slice::from_ref(b), &r.name, job.size, params, topo)
                    .or_else(|_| self.place(all, &r.name, job.size, params, topo))?
            }
            _ => self.place(all, &r.name, job.size, params, topo)?,
        };
        Ok(Target {
            idx,
            pool,
            snap: None,
        })
    }

    /// Step 3 on the target's box: the namespace added (or cloned from the snapshot and grown
    /// to the size asked). `Some(qos)`: limits still to set (a clone takes none on its way).
    async fn add_volume_namespace(
        &self,
        job: &Job<'_>,
        t: Target,
    ) -> Result<Option<QosRequest>, ClientError> {
        let (nqn, size, idx) = (job.nqn.clone(), job.size, t.idx);
        let Some((sname, view)) = t.snap else {
            let req = NamespaceRequest {
                nsid: Some(names::NSID),
                backend: "file".into(),
                size: Some(size),
                uuid: Some(job.uuid.clone()),
                qos: job.params.qos.clone(),
                pool: Some(t.pool),
                ..Default::default()
            };
            return self
                .on_box(idx, move |c| c.add_namespace(&nqn, &req))
                .await
                .map(|_| None);
        };
        let req = CloneRequest {
            subsystem: nqn.clone(),
            nsid: Some(names::NSID),
            uuid: Some(job.uuid.clone()),
            pool: Some(t.pool),
            ..Default::default()
        };
        self.on_box(idx, move |c| c.clone_snapshot(&sname, &req))
            .await?;
        let grow = size > view.size
            && job
                .r
                .capacity_range
                .as_ref()
                .is_some_and(|c| c.required_bytes > 0);
        if grow {
            self.on_box(idx, move |c| {
                c.resize_namespace(
                    &nqn,
                    "1",
                    &ResizeRequest {
                        size,
                        shrink: false,
                    },
                )
            })
            .await?;
        }
        Ok(job.params.qos.clone())
    }

    /// The answer: the volume as its box `idx` reports it now (the other boxes were read by
    /// step 2's check).
    async fn made(&self, job: &Job<'_>, idx: usize) -> Result<pb::Volume, Status> {
        let b = self.read_box(idx).await?;
        let v = b
            .state
            .subsystems
            .iter()
            .find(|s| s.nqn == job.nqn)
            .and_then(|sub| self.volume(&b, sub))
            .ok_or_else(|| Status::aborted("the volume vanished while it was made; retry"))?;
        tracing::info!(volume = %job.r.name, id = %v.volume_id, box_ = %self.boxes[idx].name, size = v.capacity_bytes, "volume created");
        Ok(self.with_source(v, job.snapshot.as_deref(), job.params.auth))
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
}
