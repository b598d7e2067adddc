//! The I/O shell of an NVMe/RDMA queue: RDMA CM set-up, one RC queue pair, memory registration,
//! and the completion queue driven from tokio; all NVMe logic is in [`super::engine`].
//!
//! Set-up (as `nvme_rdma_alloc_queue` / `nvme_rdma_create_queue_ib` / `nvme_rdma_route_resolved`
//! do it): a CM id in the TCP port space on its own event channel → resolve the address → the
//! device's protection domain, a completion channel and one CQ for sends and receives, the QP
//! on the id → register the engine's data region (remote read/write) and control region → post
//! every receive → resolve the route → connect with the NVMe/RDMA private data → Fabrics Connect
//! over the queue itself (its 1024 bytes of data by keyed SGL).
//!
//! Waiting: the CQ is re-armed each time it is found empty (then polled once more, so a
//! completion that raced the arming is not missed); [`RdmaQueue::wait_ready`] waits on the
//! completion channel's fd and the CM channel's fd (a `Disconnected` event fails the queue).

use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

use nvme_spec::{CommandId, ControllerId, Cqe, QueueId, Sqe};
use nvmf_rdma::verbs::{
    self, CmEvent, CmEventKind, CmId, CompChannel, ConnParams, Cq, EventChannel, Mr, QpCaps,
    RecvWr, SendOp, SendWr, Sge, Wc,
};
use nvmf_rdma::wire;
use nvmf_tcp::Digests;
use tokio::io::unix::AsyncFd;

use super::engine::{EngineConfig, RECV_WR_BIT, RdmaEngine};
use crate::error::{HostError, Result};
use crate::queue::{
    Completion, ConnectParams, DataDir, Driver, LinkParams, drive_execute, drive_poll,
    fabrics_connect,
};

/// Bound on address and route resolution (Linux `NVME_RDMA_CM_TIMEOUT_MS`).
const CM_TIMEOUT_MS: i32 = 3000;
/// RDMA READs the controller may have outstanding against this host's memory, and ours against
/// it (we issue none). 16 is what mlx5 devices support (`max_qp_rd_atom`); soft-RoCE allows
/// more; asking beyond the device's limit fails the connect.
const RD_ATOMIC: u8 = 16;
/// IB CM reject reason "consumer defined": the peer's application rejected (IBTA 12.6.7.2).
const IB_CM_REJ_CONSUMER_DEFINED: i32 = 28;
/// Completions taken from the CQ per poll.
const WC_BATCH: usize = 32;
/// CQ polls per [`RdmaQueue::try_io`] before returning to the caller.
const POLL_BUDGET: usize = 64;

fn rdma_err(e: verbs::Error) -> HostError {
    HostError::Rdma(e.to_string())
}

/// A raw fd for [`AsyncFd`] (the owner closes it).
struct Fd(RawFd);

impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// Register `fd` (a CM or completion channel's, non-blocking) with the tokio reactor.
fn watch(fd: RawFd) -> Result<AsyncFd<Fd>> {
    // SAFETY: the fd belongs to a channel that the caller keeps open for longer than the
    // AsyncFd (declared before it in `RdmaQueue`, so dropped first; locals in `establish` drop
    // in reverse order of creation, the AsyncFd before its channel).
    unsafe { AsyncFd::register_with_interest(Fd(fd), tokio::io::Interest::READABLE) }
        .map_err(|e| HostError::Rdma(format!("cannot watch an RDMA channel: {e}")))
}

/// One NVMe queue over one RC queue pair. Fields drop in order: the QP and CM id first, the CQ
/// and its channel next, the registrations, then the memory they cover.
pub(crate) struct RdmaQueue {
    id: CmId,
    cq: Cq,
    comp_fd: AsyncFd<Fd>,
    comp: CompChannel,
    cm_fd: AsyncFd<Fd>,
    events: Arc<EventChannel>,
    /// Held for its registration (the engine puts its rkey in every keyed SGL).
    _data_mr: Mr,
    ctrl_mr: Mr,
    eng: RdmaEngine,
    peer: SocketAddr,
    broken: bool,
    wcs: [Wc; WC_BATCH],
    wrs: WrBufs,
}

/// Work request lists reused from post to post.
struct WrBufs {
    sends: Vec<SendWr>,
    recvs: Vec<RecvWr>,
}

// SAFETY: the raw pointers in the work requests point into the queue's own registered regions
// and are only dereferenced (by the provider, at post time) by the thread that owns the queue;
// the lists are plain data otherwise.
unsafe impl Send for WrBufs {}

impl Drop for RdmaQueue {
    fn drop(&mut self) {
        if !self.broken {
            let _ = self.id.disconnect();
        }
    }
}

/// Wait for the next CM event on `ch`.
async fn next_event(fd: &AsyncFd<Fd>, ch: &EventChannel) -> Result<CmEvent> {
    loop {
        if let Some(ev) = ch.next_event().map_err(rdma_err)? {
            return Ok(ev);
        }
        let mut g = fd.readable().await?;
        g.clear_ready();
    }
}

/// Wait for `want`, or say why it did not come.
async fn expect_event(
    fd: &AsyncFd<Fd>,
    ch: &EventChannel,
    want: CmEventKind,
    addr: SocketAddr,
) -> Result<CmEvent> {
    let ev = next_event(fd, ch).await?;
    if ev.kind == want {
        return Ok(ev);
    }
    Err(match ev.kind {
        CmEventKind::AddrError => HostError::Rdma(format!(
            "cannot resolve {} to a local RDMA device (status {}): is an RDMA interface (RNIC, or \
             rdma_rxe on the route's netdev) configured?",
            addr.ip(),
            ev.status
        )),
        CmEventKind::RouteError => {
            HostError::Rdma(format!("no route to {addr} (status {})", ev.status))
        }
        // Only a consumer-defined reject (the controller's own, IB CM reason 28) carries the
        // NVMe/RDMA reject private data (Linux `rdma_consumer_reject_data`); any other reason is
        // the CM refusing, e.g. 8 (invalid service ID): nothing listens on that port.
        CmEventKind::Rejected if ev.status == IB_CM_REJ_CONSUMER_DEFINED => {
            match wire::decode_reject(&ev.private_data) {
                Some(Ok(sts)) => HostError::Rdma(format!(
                    "the controller at {addr} rejected the RDMA connection: {sts}"
                )),
                Some(Err(code)) => HostError::Rdma(format!(
                    "the controller at {addr} rejected the RDMA connection (NVMe/RDMA status \
                     {code:#x})"
                )),
                None => HostError::Rdma(format!(
                    "the controller at {addr} rejected the RDMA connection (no reason given)"
                )),
            }
        }
        CmEventKind::Rejected => HostError::Transport(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            format!(
                "RDMA connection to {addr} refused (CM reject reason {}): no NVMe/RDMA listener \
                 there?",
                ev.status
            ),
        )),
        CmEventKind::Unreachable | CmEventKind::ConnectError => HostError::Rdma(format!(
            "cannot reach {addr} over RDMA ({:?}, status {})",
            ev.kind, ev.status
        )),
        k => HostError::Rdma(format!(
            "unexpected RDMA CM event {k:?} (waiting for {want:?})"
        )),
    })
}

impl RdmaQueue {
    /// Open the queue (see the module docs) and run the Fabrics Connect on it.
    pub(crate) async fn connect(
        lp: &LinkParams,
        cp: &ConnectParams,
        max_transfer: usize,
    ) -> Result<(RdmaQueue, ControllerId)> {
        if cp.entries < 2 {
            return Err(HostError::InvalidArgument(format!(
                "queue size {} (need at least 2 entries)",
                cp.entries
            )));
        }
        verbs::devices().map_err(HostError::Rdma)?;
        let eng = RdmaEngine::new(EngineConfig {
            qid: cp.qid,
            entries: cp.entries,
            icd_max: cp.icd_max,
            stride: max_transfer,
        })?;
        let mut q = tokio::time::timeout(lp.connect_timeout, Self::establish(lp, cp, eng))
            .await
            .map_err(|_| HostError::Timeout("RDMA connection set-up"))??;
        let cqe = fabrics_connect(&mut q, lp.connect_timeout, cp).await?;
        q.eng.connected(cqe.sqhd, cp.dissqfc);
        tracing::debug!(peer = %lp.addr, qid = cp.qid.0, cntlid = cqe.dw0 & 0xFFFF,
            flow_control = q.eng.flow_control(), "RDMA queue connected");
        Ok((q, ControllerId((cqe.dw0 & 0xFFFF) as u16)))
    }

    async fn establish(lp: &LinkParams, cp: &ConnectParams, mut eng: RdmaEngine) -> Result<Self> {
        let addr = lp.addr;
        let events = EventChannel::new().map_err(rdma_err)?;
        let cm_fd = watch(events.fd())?;
        let mut id = CmId::new(&events).map_err(rdma_err)?;
        id.resolve_addr(None, addr, CM_TIMEOUT_MS)
            .map_err(rdma_err)?;
        expect_event(&cm_fd, &events, CmEventKind::AddrResolved, addr).await?;

        let dev = id.device().map_err(rdma_err)?;
        let comp = dev.comp_channel().map_err(rdma_err)?;
        let slots = eng.capacity() as u32;
        let recvs = eng.recv_count() as u32;
        // One CQE per send and per receive, plus one.
        let cq = dev
            .cq((slots + recvs + 1) as i32, Some(&comp))
            .map_err(rdma_err)?;
        id.create_qp(
            &dev,
            &cq,
            &cq,
            QpCaps {
                max_send_wr: slots + 1,
                max_recv_wr: recvs + 1,
                max_send_sge: 1,
                max_inline_data: 0,
            },
        )
        .map_err(rdma_err)?;
        let data = eng.data_region();
        // SAFETY: the engine's regions are boxed slices that are never reallocated; the engine
        // is a field of the queue declared after both registrations, so it outlives them.
        let data_mr = unsafe { dev.register(data.as_mut_ptr(), data.len()) }.map_err(rdma_err)?;
        let ctrl = eng.ctrl_region();
        // SAFETY: as above.
        let ctrl_mr = unsafe { dev.register(ctrl.as_mut_ptr(), ctrl.len()) }.map_err(rdma_err)?;
        eng.set_rkey(data_mr.rkey());
        let comp_fd = watch(comp.fd())?;
        let mut q = RdmaQueue {
            id,
            cq,
            comp_fd,
            comp,
            cm_fd,
            events,
            _data_mr: data_mr,
            ctrl_mr,
            eng,
            peer: addr,
            broken: true, // until established: no disconnect on drop
            wcs: [Wc::default(); WC_BATCH],
            wrs: WrBufs {
                sends: Vec::with_capacity(slots as usize),
                recvs: Vec::with_capacity(recvs as usize),
            },
        };
        q.flush()?; // every receive posted before the controller can send
        q.cq.arm().map_err(rdma_err)?;

        q.id.resolve_route(CM_TIMEOUT_MS).map_err(rdma_err)?;
        expect_event(&q.cm_fd, &q.events, CmEventKind::RouteResolved, addr).await?;
        let private = wire::CmRequest {
            recfmt: wire::RECFMT_1_0,
            qid: cp.qid.0,
            hrqsize: recvs as u16,
            hsqsize: cp.entries - 1,
            cntlid: cp.cntlid.0,
        }
        .encode();
        q.id.connect(
            &private,
            ConnParams {
                responder_resources: RD_ATOMIC,
                initiator_depth: RD_ATOMIC,
                retry_count: 7,
                rnr_retry_count: 7,
            },
        )
        .map_err(rdma_err)?;
        let ev = expect_event(&q.cm_fd, &q.events, CmEventKind::Established, addr).await?;
        q.broken = false;
        let crqsize = wire::decode_accept(&ev.private_data);
        tracing::debug!(peer = %addr, qid = cp.qid.0, ?crqsize, "RDMA CM connection established");
        Ok(q)
    }

    pub(crate) fn qid(&self) -> QueueId {
        self.eng.qid()
    }
    pub(crate) fn peer(&self) -> SocketAddr {
        self.peer
    }
    pub(crate) fn in_flight(&self) -> usize {
        self.eng.in_flight()
    }
    pub(crate) fn capacity(&self) -> usize {
        self.eng.capacity()
    }
    pub(crate) fn flow_control(&self) -> bool {
        self.eng.flow_control()
    }
    pub(crate) fn icd_max(&self) -> usize {
        self.eng.icd_max()
    }
    pub(crate) fn maxh2cdata(&self) -> u32 {
        0
    }
    pub(crate) fn digests(&self) -> Digests {
        Digests::default()
    }
    pub(crate) fn is_broken(&self) -> bool {
        self.broken
    }
    pub(crate) fn can_submit(&self) -> bool {
        !self.broken && self.eng.can_submit()
    }

    pub(crate) fn submit(
        &mut self,
        sqe: Sqe,
        dir: DataDir,
        len: usize,
        user: u64,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<Option<CommandId>> {
        if self.broken {
            return Err(HostError::Disconnected);
        }
        self.eng.submit(sqe, dir, len, user, fill)
    }

    /// Post the receives and SENDs the engine has queued.
    fn flush(&mut self) -> Result<()> {
        let base = self.ctrl_mr.addr();
        let lkey = self.ctrl_mr.lkey();
        if !self.eng.pending_recvs().is_empty() {
            self.wrs.recvs.clear();
            self.wrs
                .recvs
                .extend(self.eng.pending_recvs().iter().map(|d| RecvWr {
                    wr_id: d.wr_id,
                    // The offsets come from the engine and lie inside the control region.
                    addr: base.wrapping_add(d.offset),
                    len: d.len as u32,
                    lkey,
                }));
            self.eng.clear_recvs();
            self.id.post_recv(&self.wrs.recvs).map_err(rdma_err)?;
        }
        if !self.eng.pending_sends().is_empty() {
            self.wrs.sends.clear();
            self.wrs
                .sends
                .extend(self.eng.pending_sends().iter().map(|d| SendWr {
                    wr_id: d.wr_id,
                    op: SendOp::Send,
                    sge: Sge {
                        addr: base.wrapping_add(d.offset).cast_const(),
                        len: d.len as u32,
                        lkey,
                    },
                    signaled: true,
                    inline: false,
                }));
            self.eng.clear_sends();
            self.id.post_send(&self.wrs.sends).map_err(rdma_err)?;
        }
        Ok(())
    }

    /// Post what is queued, then take every completion the CQ has (re-arming it when found
    /// empty) and complete commands through `f`. Never waits.
    pub(crate) fn try_io<F: FnMut(Completion<'_>)>(&mut self, f: &mut F) -> Result<usize> {
        if self.broken {
            return Err(HostError::Disconnected);
        }
        let r = self.try_io_inner(f);
        if let Err(e) = &r {
            self.break_link(e);
        }
        r
    }

    fn try_io_inner<F: FnMut(Completion<'_>)>(&mut self, f: &mut F) -> Result<usize> {
        self.flush()?;
        let mut done = 0;
        let mut armed = false;
        for _ in 0..POLL_BUDGET {
            let n = self.cq.poll(&mut self.wcs).map_err(rdma_err)?;
            if n == 0 {
                if armed {
                    break;
                }
                self.cq.arm().map_err(rdma_err)?;
                armed = true;
                continue;
            }
            for i in 0..n {
                let wc = self.wcs[i];
                if !wc.ok() {
                    let what = if wc.wr_id & RECV_WR_BIT != 0 {
                        "receive"
                    } else {
                        "send"
                    };
                    return Err(HostError::Rdma(format!(
                        "{what} work request failed: {} (the connection is gone)",
                        wc.status_str()
                    )));
                }
                done += if wc.wr_id & RECV_WR_BIT != 0 {
                    self.eng
                        .on_recv(wc.wr_id, wc.byte_len, wc.invalidated_rkey, f)?
                } else {
                    self.eng.on_send_done(wc.wr_id, f)?
                };
            }
            self.flush()?; // repost the receives just consumed
        }
        Ok(done)
    }

    fn break_link(&mut self, e: &HostError) {
        if self.broken {
            return;
        }
        self.broken = true;
        tracing::debug!(peer = %self.peer, qid = self.eng.qid().0, error = %e, "RDMA queue failed");
        let _ = self.id.disconnect();
    }

    /// Wait until the CQ has something (its channel fired) or the CM reports on the
    /// connection. Cancel-safe.
    pub(crate) async fn wait_ready(&mut self) -> Result<()> {
        tokio::select! {
            g = self.comp_fd.readable() => {
                let mut g = g?;
                self.comp.drain(&mut self.cq);
                g.clear_ready();
                Ok(())
            }
            g = self.cm_fd.readable() => {
                let mut g = g?;
                while let Some(ev) = self.events.next_event().map_err(rdma_err)? {
                    match ev.kind {
                        CmEventKind::Disconnected | CmEventKind::DeviceRemoval => {
                            return Err(HostError::Disconnected);
                        }
                        k => tracing::debug!(event = ?k, "RDMA CM event"),
                    }
                }
                g.clear_ready();
                Ok(())
            }
        }
    }

    /// See [`drive_poll`].
    pub(crate) async fn poll<F: FnMut(Completion<'_>)>(
        &mut self,
        f: &mut F,
        idle_timeout: Duration,
        busy: bool,
    ) -> Result<usize> {
        drive_poll(self, f, idle_timeout, busy).await
    }

    /// See [`drive_execute`].
    pub(crate) async fn execute(
        &mut self,
        sqe: Sqe,
        dir: DataDir,
        out: &[u8],
        in_len: usize,
    ) -> Result<(Cqe, Vec<u8>)> {
        drive_execute(self, sqe, dir, out, in_len).await
    }

    /// Forget every outstanding command and mark the queue dead.
    pub(crate) fn fail_in_flight(&mut self, f: impl FnMut(u64)) {
        self.break_link(&HostError::Disconnected);
        self.eng.fail_in_flight(f);
    }
}

impl Driver for RdmaQueue {
    fn try_io<F: FnMut(Completion<'_>)>(&mut self, f: &mut F) -> Result<usize> {
        RdmaQueue::try_io(self, f)
    }
    fn idle(&self) -> bool {
        // Sends are posted by every `try_io`: nothing waits to go out between calls.
        self.eng.in_flight() == 0
    }
    fn in_flight(&self) -> usize {
        self.eng.in_flight()
    }
    async fn wait_ready(&mut self) -> Result<()> {
        RdmaQueue::wait_ready(self).await
    }
    fn break_link(&mut self, e: &HostError) {
        RdmaQueue::break_link(self, e)
    }
    fn submit(
        &mut self,
        sqe: Sqe,
        dir: DataDir,
        len: usize,
        user: u64,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<Option<CommandId>> {
        RdmaQueue::submit(self, sqe, dir, len, user, fill)
    }
}
