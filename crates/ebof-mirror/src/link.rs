//! The replication link: a dedicated thread running a tokio current-thread runtime that owns
//! the NVMe/TCP connection to the peer, replicates writes, and resyncs dirty regions.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::chan::{LinkRx, LinkTx};
pub(crate) use crate::pipe::LinkReq;
use crate::pipe::{CHUNK, Pipe, Sub};
use crate::resv::ResvSource;
use crate::shared::Shared;
use crate::worker::{Inbox, Worker};
use crate::{PeerState, Role};
use ebof_backend::Backend;
use nvme_spec::ebof_vendor::{self, AdmitReply, MirrorAdmit, MirrorResv};
use nvme_spec::{CommandId, NamespaceId, Sqe};
use nvmf_host::{Controller, DataDir, HostConfig, IoQueue};

/// Mirror Admit (vendor admin opcode, see the design).
pub(crate) const OPC_MIRROR_ADMIT: u8 = ebof_vendor::opcode::MIRROR_ADMIT;
const BACKOFF_MIN: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(2);
const TICK: Duration = Duration::from_millis(500);

/// The link thread and the way into it.
pub(crate) struct LinkHandle {
    worker: Worker<()>,
    tx: LinkTx,
}

impl LinkHandle {
    /// A sender into the link.
    pub(crate) fn sender(&self) -> LinkTx {
        self.tx.clone()
    }

    /// Stop the link thread and join it (idempotent); what is queued fails.
    pub(crate) fn stop(&self) {
        self.worker.stop();
    }
}

/// Start the link thread of `shared` over the local copy `local`, pushing the reservation
/// table of `resv`.
pub(crate) fn start(
    shared: Arc<Shared>,
    local: Arc<dyn Backend>,
    resv: Arc<ResvSource>,
) -> std::io::Result<LinkHandle> {
    let name = format!("mirror-{}", shared.spec.nsid);
    let (tx, rx) = crate::chan::channel();
    let worker = Worker::spawn(name, move |inbox: Inbox<()>| async move {
        let mut l = Link {
            shared,
            local,
            resv,
            rx,
            stop: inbox.stop,
            wake: inbox.wake,
        };
        l.run().await;
    })?;
    Ok(LinkHandle { worker, tx })
}

struct Link {
    shared: Arc<Shared>,
    local: Arc<dyn Backend>,
    resv: Arc<ResvSource>,
    rx: LinkRx,
    stop: Arc<AtomicBool>,
    wake: Arc<tokio::sync::Notify>,
}

/// A connected link: admin controller and one I/O queue.
struct Conn {
    ctrl: Controller,
    q: IoQueue,
}

impl Link {
    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    async fn run(&mut self) {
        let mut backoff = BACKOFF_MIN;
        while !self.stopping() {
            if self.shared.role() != Role::Primary || self.shared.link_withheld() {
                self.idle(TICK.min(BACKOFF_MIN * 2)).await;
                continue;
            }
            match self.connect_failing_requests().await {
                Ok(mut c) => {
                    backoff = BACKOFF_MIN;
                    if let Err(e) = self.serve(&mut c).await {
                        tracing::warn!(nsid = self.shared.spec.nsid, "mirror link lost: {e}");
                    }
                    self.shared.degrade();
                    c.ctrl.disconnect().await;
                }
                Err(e) => {
                    tracing::debug!(nsid = self.shared.spec.nsid, "mirror link connect: {e}");
                    self.shared.degrade();
                    self.idle(backoff).await;
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                }
            }
        }
        self.rx.close();
    }

    /// Wait `d` (or a stop), failing every request that arrives meanwhile (link down).
    async fn idle(&mut self, d: Duration) {
        let deadline = tokio::time::Instant::now() + d;
        loop {
            tokio::select! {
                r = self.rx.recv() => match r { Some(r) => r.fail(), None => return },
                _ = tokio::time::sleep_until(deadline) => return,
                _ = self.wake.notified() => return,
            }
        }
    }

    fn timeout(&self) -> Duration {
        self.shared.link_timeout()
    }

    /// [`Link::connect`], failing every request that arrives meanwhile: a peer that takes the
    /// connection but does not answer (paused, partitioned) must not hold host writes for the
    /// whole connect timeout; they go on degraded (or fenced) at once.
    async fn connect_failing_requests(&mut self) -> Result<Conn, String> {
        let rx = self.rx.clone();
        {
            let fut = self.connect();
            tokio::pin!(fut);
            loop {
                tokio::select! {
                    r = &mut fut => break r,
                    req = rx.recv() => match req {
                        Some(req) => req.fail(),
                        None => break Err("mirror stopped".to_string()),
                    },
                }
            }
        }
    }

    async fn connect(&self) -> Result<Conn, String> {
        let spec = &self.shared.spec;
        let cfg = HostConfig {
            hostnqn: spec.link_hostnqn.clone(),
            io_queues: 1,
            async_events: false,
            io_timeout: self.timeout(),
            ..spec.host.clone()
        };
        let to = self.timeout();
        let ctrl = tokio::time::timeout(to, Controller::connect(spec.peer, &spec.subnqn, &cfg))
            .await
            .map_err(|_| "connect timed out".to_string())?
            .map_err(|e| e.to_string())?;
        let q = tokio::time::timeout(to, ctrl.io_queue(1, 0, false))
            .await
            .map_err(|_| "I/O queue connect timed out".to_string())?
            .map_err(|e| e.to_string())?;
        let synced = self.admit(&ctrl, false).await?;
        if !synced {
            self.shared.mark_all_dirty();
        }
        Ok(Conn { ctrl, q })
    }

    /// Mirror Admit with our epoch; Ok(peer holds a copy synced at this epoch).
    async fn admit(&self, ctrl: &Controller, in_sync: bool) -> Result<bool, String> {
        let sqe = admit_sqe(self.shared.spec.nsid, self.shared.epoch(), in_sync);
        let (cqe, _) = tokio::time::timeout(
            self.timeout(),
            ctrl.admin_raw(sqe, DataDir::None, Vec::new(), 0),
        )
        .await
        .map_err(|_| "mirror admit timed out".to_string())?
        .map_err(|e| e.to_string())?;
        if !cqe.status.is_success() {
            return Err(format!("mirror admit refused: {:?}", cqe.status));
        }
        Ok(AdmitReply::from_cqe(&cqe).synced)
    }

    /// Serve requests and resync until the link fails or we stop; on failure every request
    /// in flight or waiting fails (the primary degrades).
    async fn serve(&mut self, c: &mut Conn) -> Result<(), String> {
        let mut pipe = Pipe::new(self.shared.spec.nsid, self.shared.spec.block_size);
        let mut stash = None;
        let r = self.serve_pipe(c, &mut pipe, &mut stash).await;
        pipe.fail_all();
        if let Some(r) = stash {
            LinkReq::fail(r);
        }
        r
    }

    async fn serve_pipe(
        &mut self,
        c: &mut Conn,
        pipe: &mut Pipe,
        stash: &mut Option<LinkReq>,
    ) -> Result<(), String> {
        let mut cursor = 0u64;
        let mut pass = Pass::new();
        pass.total = self.shared.dirty() * self.shared.spec.region_bytes;
        let mut in_sync = pass.total == 0;
        if in_sync {
            self.push_resv(&c.ctrl).await?;
            self.admit(&c.ctrl, true).await?;
            self.shared.set_peer(PeerState::InSync);
        }
        while !self.stopping()
            && self.shared.role() == Role::Primary
            && !self.shared.link_withheld()
        {
            self.intake(c, pipe, stash).await?;
            if pipe.in_flight() > 0 && stash.is_some() {
                // The queue is full: room comes from completions only.
                pipe.poll(&mut c.q).await?;
                continue;
            }
            if pipe.in_flight() > 0 && in_sync {
                // Completions, or a new request to send at once (not after the next
                // completion: on a slow link that is a round trip more per write).
                tokio::select! {
                    r = pipe.poll(&mut c.q) => r?,
                    r = self.rx.recv() => match r {
                        Some(r) => *stash = Some(r),
                        None => return Ok(()),
                    },
                }
                continue;
            }
            pipe.take_failure()?;
            if !in_sync {
                while pipe.in_flight() > 0 {
                    pipe.poll(&mut c.q).await?;
                }
                if let Some(r) = self.shared.next_dirty(cursor) {
                    self.copy_region(c, r, &mut pass).await?;
                    cursor = r + 1;
                    continue;
                }
                self.push_resv(&c.ctrl).await?;
                self.admit(&c.ctrl, true).await?;
                self.shared.set_peer(PeerState::InSync);
                in_sync = true;
                let nsid = self.shared.spec.nsid;
                tracing::info!(nsid, bytes = pass.done, "mirror resync done");
            }
            tokio::select! {
                r = self.rx.recv() => match r {
                    Some(r) => *stash = Some(r),
                    None => return Ok(()),
                },
                _ = tokio::time::sleep(TICK) => self.shared.sweep(),
                _ = self.wake.notified() => {}
            }
        }
        Ok(())
    }

    /// Submit waiting requests while the queue has room.
    async fn intake(
        &mut self,
        c: &mut Conn,
        pipe: &mut Pipe,
        stash: &mut Option<LinkReq>,
    ) -> Result<(), String> {
        loop {
            let r = match stash.take() {
                Some(r) => r,
                None => match self.rx.try_recv() {
                    Some(r) => r,
                    None => return Ok(()),
                },
            };
            match pipe.submit(&mut c.q, r)? {
                Sub::Queued => {}
                Sub::Full(r) => {
                    *stash = Some(r);
                    return Ok(());
                }
                Sub::Big(r) => {
                    while pipe.in_flight() > 0 {
                        pipe.poll(&mut c.q).await?;
                    }
                    self.replicate(c, r).await?;
                }
            }
        }
    }

    async fn replicate(&self, c: &mut Conn, r: LinkReq) -> Result<(), String> {
        match r {
            LinkReq::PeerSize { done } => done(self.peer_size(&c.ctrl).await),
            LinkReq::Snapshot { op, name, done } => {
                done(crate::snap::on_peer(&self.shared, &c.ctrl, op, &name, self.timeout()).await)
            }
            LinkReq::Write {
                offset,
                data,
                fua,
                done,
            } => {
                let res = self.write(c, offset, &data, fua).await;
                // Ours dropped first: the completion takes the buffer back without a copy.
                drop(data);
                done(res.is_ok());
                return res;
            }
            LinkReq::Flush { done } => {
                let res = self.io(c.q.flush(NamespaceId(self.shared.spec.nsid))).await;
                done(res.is_ok());
                return res;
            }
            LinkReq::Resv { done } => {
                let res = self.push_resv(&c.ctrl).await;
                // Its command gave up waiting (and went on degraded, or failed): drop the
                // link, so the reconnect pushes the table again before the peer is in sync.
                if !done(res.is_ok()) && res.is_ok() {
                    return Err("a reservation push ended after its command gave up".into());
                }
                return res;
            }
        }
        Ok(())
    }

    /// The peer's namespace size in bytes (Identify Namespace: NSZE × the LBA size).
    async fn peer_size(&self, ctrl: &Controller) -> Option<u64> {
        let nsid = NamespaceId(self.shared.spec.nsid);
        let id = tokio::time::timeout(self.timeout(), ctrl.identify_namespace(nsid))
            .await
            .ok()?
            .ok()?;
        id.nsze.checked_mul(u64::from(id.lba_size()))
    }

    /// Push the namespace's whole reservation table (Mirror Reservations) at our epoch. A peer
    /// that does not know the command (an older ebof) is told nothing: the mirror works as
    /// before, without replicated reservations (ADR 0028).
    async fn push_resv(&self, ctrl: &Controller) -> Result<(), String> {
        let Some(data) = self.resv.image() else {
            return Ok(());
        };
        let mut sqe = Sqe::new(ebof_vendor::opcode::MIRROR_RESV, CommandId(0));
        MirrorResv::encode_sqe(self.shared.spec.nsid, self.shared.epoch(), &mut sqe);
        let (cqe, _) = tokio::time::timeout(
            self.timeout(),
            ctrl.admin_raw(sqe, DataDir::ToController, data, 0),
        )
        .await
        .map_err(|_| "reservation push timed out".to_string())?
        .map_err(|e| e.to_string())?;
        if cqe.status == nvme_spec::Status::INVALID_OPCODE {
            tracing::warn!(
                nsid = self.shared.spec.nsid,
                "mirror: the peer does not take reservation tables (older ebof?); not replicated"
            );
            return Ok(());
        }
        if !cqe.status.is_success() {
            return Err(format!("reservation push refused: {:?}", cqe.status));
        }
        Ok(())
    }

    async fn io<F>(&self, f: F) -> Result<(), String>
    where
        F: std::future::Future<Output = Result<(), nvmf_host::HostError>>,
    {
        match tokio::time::timeout(self.timeout(), f).await {
            Err(_) => Err("replicated command timed out".into()),
            Ok(r) => r.map_err(|e| e.to_string()),
        }
    }

    async fn write(&self, c: &mut Conn, offset: u64, data: &[u8], fua: bool) -> Result<(), String> {
        let bs = u64::from(self.shared.spec.block_size);
        let nsid = NamespaceId(self.shared.spec.nsid);
        let mut off = 0usize;
        while off < data.len() {
            let n = (data.len() - off).min(CHUNK);
            let slba = (offset + off as u64) / bs;
            let nlb = (n as u64 / bs) as u32;
            let chunk = &data[off..off + n];
            self.io(c.q.write(nsid, slba, nlb, chunk)).await?;
            off += n;
        }
        if fua {
            // FUA on the peer: a flush after the write is at least as strong.
            self.io(c.q.flush(nsid)).await?;
        }
        Ok(())
    }

    /// Copy dirty region `r` (read local, write remote) under its lock and the rate limit.
    /// The region lock is held across the remote write on purpose: this thread is the link's
    /// own, and a host write to the region must wait for the copy (never stale data remote).
    #[allow(clippy::await_holding_lock)]
    async fn copy_region(&self, c: &mut Conn, r: u64, pass: &mut Pass) -> Result<(), String> {
        let rb = self.shared.spec.region_bytes;
        let off = r * rb;
        let len = rb.min(self.shared.size.saturating_sub(off)) as usize;
        if len == 0 {
            self.shared.clear_region(r);
            return Ok(());
        }
        let mut buf = vec![0u8; len];
        {
            let _g = self.shared.region_lock(r);
            self.shared.clear_region(r);
            if let Err(e) = self.local.read(off, &mut buf) {
                self.shared.mark(off, len as u64);
                return Err(format!("resync local read: {e}"));
            }
            if let Err(e) = self.write_all_at_once(c, off, buf).await {
                self.shared.mark(off, len as u64);
                return Err(e);
            }
        }
        pass.done += len as u64;
        pass.total = pass.total.max(pass.done);
        self.shared.set_peer(PeerState::Resyncing {
            done: pass.done,
            total: pass.total,
        });
        if let Some(rate) = self.shared.spec.resync_bytes_per_sec.filter(|r| *r > 0) {
            let due = Duration::from_secs_f64(pass.done as f64 / rate as f64);
            let spent = pass.start.elapsed();
            if due > spent {
                tokio::time::sleep(due - spent).await;
            }
        }
        Ok(())
    }
}

impl Link {
    /// Write `data` at `offset` with every piece in flight at once (a resync region: the
    /// queue is idle then), falling back to one piece at a time when the queue is too small.
    async fn write_all_at_once(
        &self,
        c: &mut Conn,
        offset: u64,
        data: Vec<u8>,
    ) -> Result<(), String> {
        let mut pipe = Pipe::new(self.shared.spec.nsid, self.shared.spec.block_size);
        let ok = Arc::new(AtomicBool::new(false));
        let flag = ok.clone();
        let req = LinkReq::Write {
            offset,
            data: Arc::new(data),
            fua: false,
            done: Box::new(move |good| flag.store(good, Ordering::Release)),
        };
        match pipe.submit(&mut c.q, req)? {
            Sub::Queued => {}
            Sub::Full(r) | Sub::Big(r) => {
                let LinkReq::Write { data, .. } = r else {
                    return Err("resync: not a write".into());
                };
                return self.write(c, offset, &data, false).await;
            }
        }
        while pipe.in_flight() > 0 {
            if let Err(e) = pipe.poll(&mut c.q).await {
                pipe.fail_all();
                return Err(e);
            }
        }
        if ok.load(Ordering::Acquire) {
            Ok(())
        } else {
            Err("resync write failed on the peer".into())
        }
    }
}

/// Progress of one resync pass.
struct Pass {
    start: Instant,
    done: u64,
    total: u64,
}

impl Pass {
    fn new() -> Pass {
        Pass {
            start: Instant::now(),
            done: 0,
            total: 0,
        }
    }
}

/// The Mirror Admit SQE: NSID, CDW10/11 = epoch, CDW12 bit 0 = "you are in sync".
pub(crate) fn admit_sqe(nsid: u32, epoch: u64, in_sync: bool) -> Sqe {
    let mut sqe = Sqe::new(OPC_MIRROR_ADMIT, CommandId(0));
    MirrorAdmit {
        nsid,
        epoch,
        in_sync,
    }
    .encode_into(&mut sqe);
    sqe
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admit_sqe_layout() {
        let s = admit_sqe(3, 0x1_0000_0002, true);
        assert_eq!(s.0[0], 0xC1);
        assert_eq!(s.cdw(1), 3);
        assert_eq!(s.cdw(10), 2);
        assert_eq!(s.cdw(11), 1);
        assert_eq!(s.cdw(12), 1);
        assert_eq!(
            MirrorAdmit::decode(&s).ok(),
            Some(MirrorAdmit {
                nsid: 3,
                epoch: 0x1_0000_0002,
                in_sync: true
            })
        );
    }
}
