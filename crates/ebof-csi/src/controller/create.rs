//! CreateVolume: the request checked, then the create protocol of the module docs run
//! attempt by attempt ([`Protocol`] decides, these methods call the boxes); for a replicated
//! volume, with the steps [`super::mirror`] adds.

use super::checks::{
    Params, check_capabilities, overlay, parse_mutable, parse_params, size_fits, size_for, zones,
};
use super::memory::Silent;
use super::mirror::{self, Role};
use super::protocol::{CREATE_ATTEMPTS, Look, Pair, Protocol, Verdict};
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

/// How long a replicated clone's primary is asked again to grow while its new link comes up.
const GROW_WAIT: std::time::Duration = std::time::Duration::from_secs(15);

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
    /// What to make it from, if anything.
    source: Option<Source>,
    /// The volume's subsystem NQN (its ID).
    nqn: String,
    /// Its namespace's UUID.
    uuid: String,
}

/// Where a volume may be made while boxes do not answer: on every box (`None`), only on its
/// home box, or nowhere now (UNAVAILABLE).
type Homed = Result<Option<usize>, Status>;

/// Where an attempt makes the volume: the box, the pool, and the snapshot to clone.
struct Target {
    idx: usize,
    pool: String,
    snap: Option<(String, SnapshotView)>,
    /// A replicated volume's secondary: its box, pool and NVMe listener (the primary's peer).
    secondary: Option<(usize, String, String)>,
}

/// What a volume is made from (its content source).
#[derive(Clone, Debug, PartialEq, Eq)]
enum Source {
    /// A snapshot, by ID.
    Snapshot(String),
    /// Another volume (a clone), by ID.
    Volume(String),
}

/// What a request's content source names, if anything.
fn content_source(r: &pb::CreateVolumeRequest) -> Result<Option<Source>, Status> {
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
            Ok(Some(Source::Snapshot(s.snapshot_id.clone())))
        }
        Some(pb::volume_content_source::Type::Volume(v)) => {
            if v.volume_id.is_empty() {
                return Err(invalid(
                    "volume_content_source.volume.volume_id is required",
                ));
            }
            Ok(Some(Source::Volume(v.volume_id.clone())))
        }
    }
}

impl Controller {
    pub(super) async fn create_volume_inner(
        &self,
        r: &pb::CreateVolumeRequest,
    ) -> Result<pb::Volume, Status> {
        names::check_name(&r.name).map_err(|e| invalid(format!("name: {e}")))?;
        check_capabilities(&r.volume_capabilities)?;
        let mut params = parse_params(&r.parameters)?;
        if let Some(q) = parse_mutable(&r.mutable_parameters)? {
            params.qos = Some(overlay(params.qos.as_ref(), &q));
        }
        let size = size_for(r.capacity_range.as_ref())?;
        let topo = zones(r.accessibility_requirements.as_ref());
        let source = content_source(r)?;
        let job = Job {
            r,
            params,
            size,
            topo,
            source,
            nqn: names::volume_nqn(&r.name),
            uuid: names::volume_uuid(&r.name),
        };
        let _busy = self.busy.hold(&job.nqn)?;
        let made = self.create_rounds(&job).await;
        if matches!(job.source, Some(Source::Volume(_))) {
            self.drop_clone_point(&job.nqn).await;
        }
        made
    }

    /// The attempts of the create protocol, until one makes (or finds) the volume.
    async fn create_rounds(&self, job: &Job<'_>) -> Result<pb::Volume, Status> {
        let r = job.r;
        let mut protocol = Protocol::new();
        while let Some(attempt) = protocol.next_attempt() {
            if let Some(pause) = Protocol::pause(attempt, &r.name, &Protocol::seed()) {
                tokio::time::sleep(pause).await;
            }
            if let Some(v) = self.create_attempt(job, &protocol).await? {
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
        // Step 1: look on every box (with a box down: on those that answer, if the silent
        // ones did not hold the volume when last read and its home box answers).
        let (all, home) = self.create_scan(job).await?;
        let found = self.find(&all, nqn);
        if let Look::Exists {
            on,
            partner,
            leftovers,
        } = Protocol::look(&found)
        {
            return self
                .existing(job, &all, &found, (on, partner), &leftovers)
                .await;
        }
        let point = match &job.source {
            Some(Source::Snapshot(s)) => Some((
                s.clone(),
                format!("snapshot {s}"),
                self.find_snapshot(&all, s)?,
            )),
            Some(Source::Volume(v)) => {
                let p = self.clone_point(&all, v, &job.nqn).await?;
                Some((p.1.name.clone(), format!("source volume {v}"), p))
            }
            None => None,
        };
        let t = match home? {
            Some(h) => {
                let b = Self::state_of(&all, h)?;
                let (idx, pool) = self.place(
                    std::slice::from_ref(b),
                    &r.name,
                    job.size,
                    &job.params,
                    &job.topo,
                )?;
                Target {
                    idx,
                    pool,
                    snap: None,
                    secondary: None,
                }
            }
            None => self.target(job, &all, &found, point)?,
        };
        // Step 2: the subsystem, then look for a rival.
        if Protocol::needs_subsystem(&found, t.idx) {
            let req = SubsystemRequest {
                nqn: nqn.clone(),
                serial: None,
                model: Some("ebof-csi".into()),
                allow_any_host: Some(false),
            };
            self.memory.asking(t.idx, nqn);
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
        let (again, still) = self.create_scan(job).await?;
        still?;
        let again = self.find(&again, nqn);
        if Protocol::yields(&again, t.idx) {
            tracing::info!(volume = %r.name, box_ = %self.boxes[t.idx].name, "another attempt made the same volume elsewhere; yielding");
            // Not where a complete copy names this box as its peer (its secondary in the
            // making), and only while it has no namespace.
            if !Protocol::keeps(&again, t.idx) {
                self.remove_unfinished(t.idx, nqn).await?;
            }
            return Ok(None);
        }
        // Step 3: the namespace (a replicated volume's primary).
        let from_snapshot = t.snap.is_some();
        let idx = t.idx;
        let secondary = t.secondary.clone();
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
        // Step 4: a replicated volume's secondary (a clone's: then both grown to the size).
        if let Some((s, pool, _)) = secondary {
            if !self.make_secondary(job, idx, s, Some(pool)).await? {
                return Ok(None);
            }
            if from_snapshot {
                self.grow_copies(job, idx, s).await?;
            }
        }
        self.made(job).await.map(Some)
    }

    /// A replicated volume made from a snapshot or a volume is cloned at its source's size;
    /// when the capacity asked is larger, its copies grow to it: the secondary first, then
    /// the primary (which grows only once its peer holds the new size: while its new link
    /// comes up it refuses, so it is asked again for a bounded while).
    async fn grow_copies(&self, job: &Job<'_>, p: usize, s: usize) -> Result<(), Status> {
        let size = job.size;
        let asked = job
            .r
            .capacity_range
            .as_ref()
            .is_some_and(|c| c.required_bytes > 0);
        if !asked {
            return Ok(());
        }
        for idx in [s, p] {
            let deadline = std::time::Instant::now() + GROW_WAIT;
            loop {
                let b = self.read_box(idx).await?;
                let now = b
                    .state
                    .subsystems
                    .iter()
                    .find(|x| x.nqn == job.nqn)
                    .and_then(|x| x.namespaces.iter().find(|n| n.nsid == names::NSID))
                    .map_or(0, |n| n.size);
                if now >= size {
                    break;
                }
                let n = job.nqn.clone();
                let req = ResizeRequest {
                    size,
                    shrink: false,
                };
                match self
                    .on_box(idx, move |c| c.resize_namespace(&n, "1", &req))
                    .await
                {
                    Ok(_) => break,
                    Err(e) if idx == p && std::time::Instant::now() < deadline => {
                        tracing::debug!(volume = %job.r.name, error = %e, "the primary does not grow yet; asking again");
                        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                    }
                    Err(e) => return Err(self.box_error(idx, "growing the cloned volume", &e)),
                }
            }
        }
        Ok(())
    }

    /// The boxes that answer, for steps 1 and 2. When one does not, the volume might be
    /// there: the call stops (UNAVAILABLE), unless the volume is one copy made from nothing;
    /// then the second value is where making it may go ([`Controller::home_while_down`]). A volume found
    /// complete on a box that answers is found all the same: the second value is only what
    /// making it may do.
    async fn create_scan(&self, job: &Job<'_>) -> Result<(Vec<BoxState>, Homed), Status> {
        let (all, down) = self.scan_split().await;
        let Some((_, first)) = down.first() else {
            return Ok((all, Ok(None)));
        };
        if job.params.replicas > 1 || job.source.is_some() {
            return Err(first.clone());
        }
        let home = self.home_while_down(job, &all, &down);
        Ok((all, home))
    }

    /// Where volume `job` (one copy, from nothing) may be made while the boxes `down` do not
    /// answer. First, the volume must not be on them as far as the controller knows: a silent
    /// box not read since the controller started, or that held the volume's subsystem when
    /// last read, or was asked for one since, is UNAVAILABLE naming it (the volume might be
    /// there; a retry after a lost answer must not make it a second time elsewhere). Then
    /// its home box ([`Controller::rendezvous_home`]: the rendezvous hash over the boxes it
    /// fits, a silent one counted as fitting) decides: answering, it is made there
    /// (`Some(home)`); silent, UNAVAILABLE naming it.
    fn home_while_down(&self, job: &Job<'_>, all: &[BoxState], down: &[(usize, Status)]) -> Homed {
        let name = &job.r.name;
        for (d, why) in down {
            let bname = &self.boxes[*d].name;
            let unknown = match self.memory.silent(*d, &job.nqn) {
                Silent::Without => continue,
                Silent::NeverRead => "has not been read since the controller started",
                Silent::MayHold => "held the volume, or was asked to make it, when last read",
            };
            return Err(Status::unavailable(format!(
                "volume {name}: box {bname} does not answer ({}) and {unknown}: the volume might be there",
                why.message()
            )));
        }
        let silent: Vec<usize> = down.iter().map(|d| d.0).collect();
        let Some(h) = self.rendezvous_home(all, &silent, name, job.size, &job.params, &job.topo.0)
        else {
            return Err(down[0].1.clone());
        };
        if let Some((_, why)) = down.iter().find(|(d, _)| *d == h) {
            return Err(Status::unavailable(format!(
                "volume {name}: its home box {} does not answer ({}); it is made only there while a box is down",
                self.boxes[h].name,
                why.message()
            )));
        }
        let names: Vec<&str> = silent
            .iter()
            .map(|&i| self.boxes[i].name.as_str())
            .collect();
        tracing::warn!(volume = %name, home = %self.boxes[h].name, down = ?names, "boxes do not answer, and did not hold the volume when last read: it is looked for on the others and made on its home box");
        Ok(Some(h))
    }

    /// The volume exists on box `on` (step 1 found it complete; `partner`: its peer's box, for
    /// a replicated volume): the unfinished attempts on `leftovers` go, a half-created
    /// replicated volume gets its secondary, and it is the answer if its size and copies fit
    /// the request (`None`: start the next attempt).
    async fn existing(
        &self,
        job: &Job<'_>,
        all: &[BoxState],
        found: &[Found],
        (on, partner): (usize, Option<usize>),
        leftovers: &[usize],
    ) -> Result<Option<pb::Volume>, Status> {
        let f = found
            .iter()
            .find(|f| f.idx == on)
            .ok_or_else(|| Status::internal("volume missing from its own scan"))?;
        let b = Self::state_of(all, on)?;
        let partner_state = partner.and_then(|p| all.iter().find(|b| b.idx == p));
        let v = self
            .volume(b, &f.sub, partner_state)
            .ok_or_else(|| Status::internal("volume without namespace"))?;
        // Unfinished rivals (a crash or a racing attempt): remove them.
        for &o in leftovers {
            self.remove_unfinished(o, &job.nqn).await?;
        }
        let copies = if f.mirror.is_some() { 2 } else { 1 };
        if copies != job.params.replicas {
            return Err(Status::already_exists(format!(
                "volume {} exists with {copies} cop{}, not the {} asked (parameter replicas)",
                job.r.name,
                if copies == 1 { "y" } else { "ies" },
                job.params.replicas
            )));
        }
        match Protocol::pair(found, on) {
            // Both copies of a clone made before its growth was cut short: grow them now.
            Pair::Whole
                if job.source.is_some()
                    && (v.capacity_bytes as u64) < job.size
                    && let Some(s) = partner =>
            {
                self.grow_copies(job, on, s).await?;
                return self.made(job).await.map(Some);
            }
            Pair::Single | Pair::Whole => {}
            Pair::MakeSecondary { on: s } => {
                tracing::info!(volume = %job.r.name, primary = %self.boxes[on].name, secondary = %self.boxes[s].name, "a half-created replicated volume: making its secondary");
                if !self.make_secondary(job, on, s, None).await? {
                    return Ok(None);
                }
                if job.source.is_some() {
                    self.grow_copies(job, on, s).await?;
                }
                return self.made(job).await.map(Some);
            }
            Pair::PeerUnknown => {
                let peer = f.mirror.as_ref().map(|m| m.peer.as_str()).unwrap_or("");
                return Err(Status::failed_precondition(format!(
                    "volume {}: its copy on box {} names peer {peer}, which is no NVMe listener of the boxes file's boxes",
                    job.r.name, self.boxes[on].name
                )));
            }
            Pair::Orphan => {
                // The boxes are read in parallel: a primary made while they were read may
                // be missing from the look. Only a second look confirms it.
                let fresh = self.scan_all().await?;
                if Protocol::pair(&self.find(&fresh, &job.nqn), on) != Pair::Orphan {
                    return Ok(None);
                }
                let peer = f.mirror.as_ref().map(|m| m.peer.as_str()).unwrap_or("");
                return Err(Status::unavailable(format!(
                    "volume {}: its copy on box {} is a secondary and its peer {peer} has no copy: promote it (ebof ctl ns mirror promote {} 1 on that box) or delete the volume",
                    job.r.name, self.boxes[on].name, job.nqn
                )));
            }
        }
        if !size_fits(v.capacity_bytes as u64, job.r.capacity_range.as_ref()) {
            return Err(Status::already_exists(format!(
                "volume {} exists with {} bytes, which the capacity range asked does not allow",
                job.r.name, v.capacity_bytes
            )));
        }
        Ok(Some(self.with_source(
            v,
            job.source.as_ref(),
            job.params.auth,
        )))
    }

    /// Step 4 of a replicated volume: the secondary's copy on box `s` for the primary on box
    /// `p` (its subsystem, adopted if there; its namespace naming the primary, in `pool` or
    /// the box's pool with the most room). False: start the next attempt.
    async fn make_secondary(
        &self,
        job: &Job<'_>,
        p: usize,
        s: usize,
        pool: Option<String>,
    ) -> Result<bool, Status> {
        let nqn = &job.nqn;
        let pb = self.read_box(p).await?;
        let Some(ns) = pb
            .state
            .subsystems
            .iter()
            .find(|x| x.nqn == *nqn)
            .and_then(|x| x.namespaces.iter().find(|n| n.nsid == names::NSID))
            .cloned()
        else {
            return Ok(false); // the primary went (a delete): start over
        };
        let peer = self.listener_of(&pb).ok_or_else(|| {
            Status::failed_precondition(format!(
                "box {} has no NVMe/TCP listener for its peer to replicate to",
                self.boxes[p].name
            ))
        })?;
        let sb = self.read_box(s).await?;
        let sub = sb.state.subsystems.iter().find(|x| x.nqn == *nqn);
        if let Some(have) = sub.and_then(|x| x.namespaces.iter().find(|n| n.nsid == names::NSID)) {
            let names_primary = sb
                .mirrors
                .get(nqn)
                .is_some_and(|m| self.box_at(std::slice::from_ref(&pb), &m.peer) == Some(p));
            if !names_primary || have.uuid != ns.uuid {
                return Err(Status::internal(format!(
                    "volume {}: box {} holds a copy that is not the secondary of the copy on box {}",
                    job.r.name, self.boxes[s].name, self.boxes[p].name
                )));
            }
            return Ok(true);
        }
        let pool = match pool {
            Some(pool) => pool,
            None => {
                let none = (Vec::new(), Vec::new());
                self.place(
                    std::slice::from_ref(&sb),
                    &job.r.name,
                    ns.size,
                    &job.params,
                    &none,
                )?
                .1
            }
        };
        if sub.is_none() {
            let req = SubsystemRequest {
                nqn: nqn.clone(),
                serial: None,
                model: Some("ebof-csi".into()),
                allow_any_host: Some(false),
            };
            match self.on_box(s, move |c| c.add_subsystem(&req)).await {
                Ok(_) => {}
                Err(e) if api_code(&e) == Some("duplicate-nqn") => {}
                Err(e) => return Err(self.box_error(s, "creating the secondary's subsystem", &e)),
            }
        }
        let req = NamespaceRequest {
            nsid: Some(names::NSID),
            backend: "file".into(),
            size: Some(ns.size),
            block_size: Some(ns.block_size),
            uuid: Some(ns.uuid.clone()),
            qos: job.params.qos.clone(),
            pool: Some(pool),
            ..Default::default()
        };
        let n = nqn.clone();
        match self
            .on_box(s, move |c| {
                mirror::add_mirrored_namespace(c, &n, &req, &peer, Role::Secondary)
            })
            .await
        {
            Ok(_) => Ok(true),
            Err(e)
                if matches!(
                    api_code(&e),
                    Some("duplicate-nsid") | Some("unknown-subsystem")
                ) =>
            {
                Ok(false)
            }
            Err(e) => Err(self.box_error(s, "adding the secondary's namespace", &e)),
        }
    }

    /// Where this attempt makes the volume: the box of the snapshot it is cloned from
    /// (`point`: the snapshot's name, how messages call the source, its box and view), else
    /// an unfinished attempt's box (if it has room), else a placement.
    fn target(
        &self,
        job: &Job<'_>,
        all: &[BoxState],
        found: &[Found],
        point: Option<(String, String, (usize, SnapshotView))>,
    ) -> Result<Target, Status> {
        let (r, params, topo) = (job.r, &job.params, &job.topo);
        if let Some((s, label, (sidx, view))) = point {
            if let Some(cr) = &r.capacity_range
                && cr.limit_bytes > 0
                && view.size > cr.limit_bytes as u64
            {
                return Err(Status::out_of_range(format!(
                    "{label} is {} bytes, above limit_bytes {}",
                    view.size, cr.limit_bytes
                )));
            }
            let bx = &self.boxes[sidx];
            if !topo.0.is_empty() && !bx.zone.as_ref().is_some_and(|z| topo.0.contains(z)) {
                return Err(Status::resource_exhausted(format!(
                    "{label} is on box {} (zone {:?}), outside the zones asked {:?}",
                    bx.name, bx.zone, topo.0
                )));
            }
            let b = Self::state_of(all, sidx)?;
            let pool = super::placement::clone_pool(
                params,
                &b.state.pools,
                &view.origin.path,
                &bx.name,
                &label,
            )?;
            // A replicated clone: the primary on the snapshot's box, the secondary placed as
            // for a new pair (encrypted too when the clone's pool is: each copy at rest).
            let secondary = if params.replicas > 1 {
                let mut p2 = params.clone();
                p2.encrypted |= b.state.pools.iter().any(|p| p.name == pool && p.encrypted);
                let size = view.size.max(job.size);
                let (_, (s, spool)) = self.place_pair(all, &r.name, size, &p2, topo, Some(sidx))?;
                let listener = self
                    .listener_of(Self::state_of(all, s)?)
                    .ok_or_else(|| Status::internal("the secondary's box has no listener"))?;
                Some((s, spool, listener))
            } else {
                None
            };
            return Ok(Target {
                idx: sidx,
                pool,
                snap: Some((s, view)),
                secondary,
            });
        }
        if params.replicas > 1 {
            let resume = match Protocol::look(found) {
                Look::Make { resume } => resume,
                Look::Exists { .. } => None,
            };
            let ((idx, pool), (s, spool)) = resume
                .and_then(|at| {
                    self.place_pair(all, &r.name, job.size, params, topo, Some(at))
                        .ok()
                })
                .map_or_else(
                    || self.place_pair(all, &r.name, job.size, params, topo, None),
                    Ok,
                )?;
            let listener = self
                .listener_of(Self::state_of(all, s)?)
                .ok_or_else(|| Status::internal("the secondary's box has no listener"))?;
            return Ok(Target {
                idx,
                pool,
                snap: None,
                secondary: Some((s, spool, listener)),
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
            secondary: None,
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
            let peer = t.secondary.map(|(_, _, listener)| listener);
            return self
                .on_box(idx, move |c| match peer {
                    Some(peer) => {
                        mirror::add_mirrored_namespace(c, &nqn, &req, &peer, Role::Primary)
                    }
                    None => c.add_namespace(&nqn, &req),
                })
                .await
                .map(|_| None);
        };
        let replicated = t.secondary.is_some();
        let req = CloneRequest {
            subsystem: nqn.clone(),
            nsid: Some(names::NSID),
            uuid: Some(job.uuid.clone()),
            pool: Some(t.pool),
            mirror: t.secondary.map(|(_, _, peer)| ebof_api::MirrorFields {
                peer: Some(peer),
                role: Some(Role::Primary.name().into()),
            }),
            ..Default::default()
        };
        self.on_box(idx, move |c| c.clone_snapshot(&sname, &req))
            .await?;
        // A replicated clone grows once its secondary exists (`grow_copies`): a primary grows
        // only when its peer holds the new size.
        let grow = !replicated
            && size > view.size
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

    /// The answer: the volume as its boxes report it now (both copies of a replicated one).
    /// A volume of one copy is described from the boxes that answer (it is on one of them).
    async fn made(&self, job: &Job<'_>) -> Result<pb::Volume, Status> {
        let all = if job.params.replicas > 1 {
            self.scan_all().await?
        } else {
            self.scan_split().await.0
        };
        let found = self.find(&all, &job.nqn);
        let whole = Self::complete(&found)
            .is_some_and(|f| f.mirror.is_none() || Protocol::pair(&found, f.idx) == Pair::Whole);
        let v = self
            .volume_of(&all, &found)
            .filter(|_| whole)
            .ok_or_else(|| Status::aborted("the volume vanished while it was made; retry"))?;
        tracing::info!(volume = %job.r.name, id = %v.volume_id, boxes = %v.volume_context.get(ctx::BOX).map_or("", |b| b.as_str()), size = v.capacity_bytes, "volume created");
        Ok(self.with_source(v, job.source.as_ref(), job.params.auth))
    }

    /// The volume as CreateVolume answers it: its source, and how its nodes authenticate.
    fn with_source(
        &self,
        mut v: pb::Volume,
        source: Option<&Source>,
        auth: AuthMode,
    ) -> pb::Volume {
        use pb::volume_content_source::{SnapshotSource, Type, VolumeSource};
        v.volume_context
            .insert(ctx::AUTH.to_string(), auth.name().to_string());
        v.content_source = source.map(|s| pb::VolumeContentSource {
            r#type: Some(match s {
                Source::Snapshot(id) => Type::Snapshot(SnapshotSource {
                    snapshot_id: id.clone(),
                }),
                Source::Volume(id) => Type::Volume(VolumeSource {
                    volume_id: id.clone(),
                }),
            }),
        });
        v
    }
}
