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

use nvmf_rdma::verbs::{
    self, CmEvent, CmEventKind, CmId, CompChannel, ConnParams, Cq, EventChannel, Mr, QpCaps,
    RecvWr, SendOp, SendWr, Sge, Wc,
};
use nvmf_rdma::wire;
use nvmf_tcp::Digests;
use tokio::io::unix::AsyncFd;

use super::engine::{EngineConfig, RECV_WR_BIT, RdmaEngine};
use crate::command::Completion;
use crate::config::{ConnectParams, LinkParams};
use crate::error::{HostError, Result};

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
/// CQ polls per [`RdmaQueue::io_round`] before returning to the caller.
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
    /// Submission and the queue's accessors go straight to the engine.
    pub(crate) eng: RdmaEngine,
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
    /// Open the queue (see the module docs) for the queue `cp` describes, its slot buffers
    /// `max_transfer` bytes each. The Fabrics Connect is the caller's next step.
    pub(crate) async fn open(
        lp: &LinkParams,
        cp: &ConnectParams,
        max_transfer: usize,
    ) -> Result<RdmaQueue> {
        verbs::devices().map_err(HostError::Rdma)?;
        let eng = RdmaEngine::new(EngineConfig {
            qid: cp.qid,
            entries: cp.entries,
            icd_max: cp.icd_max,
            stride: max_transfer,
        })?;
        tokio::time::timeout(lp.connect_timeout, Self::establish(lp, cp, eng))
            .await
            .map_err(|_| HostError::Timeout("RDMA connection set-up"))?
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

    pub(crate) fn peer(&self) -> SocketAddr {
        self.peer
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
    /// Nothing outstanding: sends are posted by every `io_round`, so nothing waits to go out
    /// between calls.
    pub(crate) fn idle(&self) -> bool {
        self.eng.in_flight() == 0
    }
    /// Completions are always polled from the CQ: nothing to change for busy polling.
    pub(crate) fn set_busy_poll(&mut self, _busy: bool) {}

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
    pub(crate) fn io_round<F: FnMut(Completion<'_>)>(&mut self, f: &mut F) -> Result<usize> {
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

    pub(crate) fn break_link(&mut self, e: &HostError) {
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
}
