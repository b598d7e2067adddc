//! One NVMe queue (= one transport connection): the command state machine.
//!
//! A queue starts [`QueueRole::Unconnected`]; the only command it accepts is Fabrics Connect,
//! which makes it the admin queue of a new controller or an I/O queue of an existing one.
//! Every accepted command occupies a slot (its index doubles as the NVMe/TCP transfer tag) from
//! preparation to completion; slot buffers are kept and reused, so no command allocates once
//! buffers reached their working size.
//!
//! [`Queue`] composes typed parts, each owning its fields behind its own methods (as quinn's
//! `Connection` composes `PacketSpace`, `StreamsState`, `PathData`):
//!
//! | part | file | owns |
//! |---|---|---|
//! | [`Session`] | `queue/session.rs` | target, connection facts (local address, transport, TLS peer, discovery-only, ANA row), role and controller, keep-alive touch; the per-command path checks |
//! | `Slots` | `queue/slots.rs` | slot table, free list, completion list, SQHD and SQ flow control, parked AERs; the completion funnel (`finish`) |
//! | [`NsCache`] | `queue/ns_cache.rs` | the queue's namespace handles (sorted, binary search) and the namespace generation they were checked at |
//! | `Pairs`, `GateWaits` | `queue/fused.rs` | fused pairs; commands deferred behind a namespace gate and gate entries held for streamed reads |
//! | `Throttle` | `queue/throttle.rs` | QoS: the queue's token buckets on limited namespaces, commands waiting for their budget, the driver's next wake-up |
//! | [`crate::auth::QueueAuth`] | `auth.rs` | the authentication exchange and the gate it keeps |
//! | `StatsBatch` | `io.rs` | SMART counters not yet published |
//!
//! The command handlers (`admin.rs`, `fabrics.rs`, `auth_cmd.rs`, `discovery.rs`,
//! `io_cmd.rs`, `resv_cmd.rs`) are `impl Queue` blocks that reach this state through the
//! parts' methods.

use crate::controller::Controller;
use crate::error::{CmdError, CmdResult};
use crate::io::{IoOp, IoRequest, StatsBatch};
use crate::target::Target;
use ebof_backend::{Backend, BackendError};
use nvme_spec::opcode::{admin, fctype};
use nvme_spec::sqe::{PSDT_SGL_MPTR_CONTIG, SGL_ICD};
use nvme_spec::{Cqe, Sqe, Status};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod fused;
mod ns_cache;
mod session;
mod slots;
mod throttle;
pub use fused::CAW_DRAIN_TIMEOUT;
use fused::{GateWaits, Pairs};
pub(crate) use ns_cache::NsCache;
pub(crate) use session::Session;
use slots::{Completion, Fused, SlotState, Slots};

pub use crate::model::Transport;

/// What a queue is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueRole {
    /// No Connect yet.
    Unconnected,
    /// QID 0 of a controller.
    Admin,
    /// An I/O queue; `epoch` is the controller's I/O epoch at Connect.
    Io {
        /// The queue's QID (1..=the controller's `max_qid`).
        qid: u16,
        /// The controller's I/O epoch at Connect: the queue closes when it moves on.
        epoch: u32,
    },
}

/// What the transport must do after [`Queue::handle_command`] / [`Queue::handle_h2c_data`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Disposition {
    /// A completion is queued; call [`Queue::drain_completions`].
    Done,
    /// Ask the host for `len` bytes of data for command `cccid` with an R2T whose TTAG is `ttag`.
    NeedData {
        /// Transfer tag for the R2T (the command's slot).
        ttag: u16,
        /// Command Capsule CID of the command the data is for.
        cccid: u16,
        /// Bytes of data to ask for.
        len: u32,
    },
    /// Backend I/O is ready in `slot`: run it ([`Queue::io_request`]) then
    /// [`Queue::complete_io`].
    Execute {
        /// The slot holding the command's [`IoRequest`](crate::IoRequest).
        slot: u16,
    },
    /// The command is outstanding without work to do (Asynchronous Event Request).
    Parked,
    /// More data PDUs are expected for this command.
    Pending,
}

/// The data a finished command returns to the host, as handed to the `emit` callback of
/// [`Queue::drain_completions`].
#[derive(Clone, Copy, Debug)]
pub enum C2hData<'a> {
    /// Bytes already in memory (empty: no data).
    Bytes(&'a [u8]),
    /// A read not executed yet (backends that do not block): the transport reads `len` bytes at
    /// byte `offset` of `backend` straight into its send buffer.
    Read {
        /// The namespace's backend to read from.
        backend: &'a Arc<dyn Backend>,
        /// Byte offset in the backend.
        offset: u64,
        /// Bytes to read.
        len: usize,
    },
}

impl C2hData<'_> {
    /// Number of data bytes.
    pub fn len(&self) -> usize {
        match self {
            C2hData::Bytes(b) => b.len(),
            C2hData::Read { len, .. } => *len,
        }
    }

    /// True when the command returns no data.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Per-connection queue state. `!Sync`: it lives on the core that owns the connection.
#[derive(Debug)]
pub struct Queue {
    /// Target, connection facts, role and controller.
    pub(crate) session: Session,
    /// Command slots, completions and SQ accounting.
    slots: Slots,
    /// This queue's handles on the namespaces its commands addressed (I/O queues).
    pub(crate) ns: NsCache,
    /// Fused pairs in progress.
    pairs: Pairs,
    /// Commands waiting for a namespace gate, and gate entries held for streamed reads.
    gates: GateWaits,
    /// In-band authentication of this queue, when its host has a key ([`crate::auth`]).
    pub(crate) auth: crate::auth::QueueAuth,
    /// SMART counters not yet added to the namespaces'.
    stats: StatsBatch,
    /// Time of the command being handled (sans-IO: given by the driver).
    now: Instant,
    /// When the periodic timers ([`Queue::poll_timers`]) are due next ([`Queue::poll_timeout`]).
    timers_at: Instant,
    /// QoS: this queue's buckets on limited namespaces and its throttled commands.
    throttle: throttle::Throttle,
}

impl Queue {
    /// A new, unconnected queue for a connection accepted on `local`.
    pub fn new(target: Arc<Target>, local: SocketAddr, now: Instant) -> Queue {
        Queue {
            session: Session::new(target, local),
            slots: Slots::new(),
            ns: NsCache::default(),
            pairs: Pairs::default(),
            gates: GateWaits::default(),
            auth: crate::auth::QueueAuth::default(),
            stats: StatsBatch::default(),
            now,
            timers_at: next_period(now),
            throttle: throttle::Throttle::default(),
        }
    }

    /// This queue runs on `t` (NVMe/TCP unless told): its SGLs for command data are that
    /// transport's, and Identify Controller describes its capsules.
    pub fn set_transport(&mut self, t: Transport) {
        self.session.set_transport(t);
    }

    /// The fabric this queue runs on.
    pub fn transport(&self) -> Transport {
        self.session.transport()
    }

    /// The connection is TLS-protected with the PSK of (`hostnqn`, `subnqn`): a Connect that
    /// names another host or subsystem is refused (Invalid Host), so a host cannot use its own
    /// key to reach a subsystem its key was not made for.
    pub fn set_tls_peer(&mut self, hostnqn: String, subnqn: String) {
        self.session.set_tls_peer(hostnqn, subnqn);
    }

    /// The host's address on this connection (the socket's peer): a DIM registration that
    /// leaves TRADDR empty ("use the address of this connection") records it.
    pub fn set_peer(&mut self, addr: SocketAddr) {
        self.session.set_peer(addr);
    }

    /// Mark the queue as accepted on a dedicated discovery listener.
    pub fn set_discovery_only(&mut self, v: bool) {
        self.session.set_discovery_only(v);
    }

    /// What the queue is now: unconnected, admin or I/O.
    pub fn role(&self) -> QueueRole {
        self.session.role()
    }

    /// The controller the queue belongs to (`None` before Connect).
    pub fn controller(&self) -> Option<&Arc<Controller>> {
        self.session.ctrl()
    }

    /// The queue's QID: 0 for the admin queue and before Connect.
    pub fn qid(&self) -> u16 {
        self.session.qid()
    }

    /// Number of transfer tags the transport must track (= slots).
    pub fn max_ttags(&self) -> u16 {
        self.session.max_ttags()
    }

    /// In-capsule data limit of this queue.
    pub fn inline_limit(&self) -> u32 {
        self.session.inline_limit()
    }

    /// True when the connection should close: the controller was torn down, or (I/O queue)
    /// the controller was reset/shut down since this queue connected.
    pub fn should_close(&self) -> bool {
        self.session.should_close()
    }

    /// Periodic check (call about once a second): keep-alive expiry tears the controller
    /// down (its admin queue decides). Returns true if this connection must close.
    pub fn poll_timers(&mut self, now: Instant) -> bool {
        self.stats.publish();
        self.throttle.publish();
        self.deliver_events();
        self.session.check_keep_alive(now);
        self.should_close()
    }

    /// The one deadline of this queue (quinn's `poll_timeout`): the earliest of its periodic
    /// timers (keep-alive expiry, AER delivery, counters published: every [`TIMER_PERIOD`]),
    /// the QoS wake-up of a throttled command ([`Queue::next_wake`]) and, while commands are
    /// deferred at a namespace gate, their retry (already due: an instant not after the last
    /// `now` the queue was given). Call [`Queue::handle_timeout`] once it has come. Never
    /// `None`: the periodic timers always run.
    #[inline]
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut t = self.timers_at;
        if let Some(w) = self.next_wake() {
            t = t.min(w);
        }
        if self.has_deferred() {
            t = t.min(self.now);
        }
        Some(t)
    }

    /// Run what is due at `now` ([`Queue::poll_timeout`]): release throttled commands whose
    /// time has come and retry deferred ones (those that may run now are appended to `ready`,
    /// as by [`Queue::retry_throttled`] and [`Queue::retry_deferred`]), and, once per
    /// [`TIMER_PERIOD`], the periodic timers ([`Queue::poll_timers`]).
    pub fn handle_timeout(&mut self, now: Instant, ready: &mut Vec<u16>) -> Timeout {
        if self.has_throttled() {
            self.retry_throttled(now, ready);
        }
        if self.has_deferred() {
            self.retry_deferred(now, ready);
        }
        if now < self.timers_at {
            return Timeout::default();
        }
        self.timers_at = next_period(now);
        Timeout {
            timers: true,
            close: self.poll_timers(now),
        }
    }

    /// Record host traffic for the traffic-based keep-alive (call once per received batch that
    /// held commands). The controller's shared timestamp is written at most every 100 ms, far
    /// below the keep-alive granularity (1 s), so that busy queues on several cores do not
    /// write the same cache line per batch.
    pub fn touch(&mut self, now: Instant) {
        self.session.touch(now);
    }

    /// Commands in flight (received, not yet completed to the transport).
    pub fn outstanding(&self) -> usize {
        self.slots.outstanding()
    }

    /// Called when the connection has been idle for a while: with no command in flight (and no
    /// completion waiting), give back the slot table, its data buffers (each grew to the
    /// largest transfer it carried) and the completion list, so an idle queue holds nothing
    /// but the `Queue` itself. They grow again with the next commands.
    pub fn release_idle_buffers(&mut self) {
        self.slots.release_idle();
    }

    /// Bytes an idle queue holds beyond the `Queue` value: its slot table, free list and
    /// completion list (all given back by [`Queue::release_idle_buffers`]).
    pub fn idle_footprint(&self) -> usize {
        self.slots.footprint()
    }

    /// Time of the command being handled.
    #[inline]
    pub(crate) fn now(&self) -> Instant {
        self.now
    }

    /// Fabrics Connect succeeded: this queue is `role` of `ctrl`, with `entries` entries and SQ
    /// flow control on unless the host disabled it.
    pub(crate) fn connected(
        &mut self,
        ctrl: Arc<Controller>,
        role: QueueRole,
        entries: u32,
        flow_control: bool,
    ) {
        if matches!(role, QueueRole::Io { .. }) {
            let target = self.session.target();
            self.stats.set_host(target.host_io.for_host(&ctrl.hostnqn));
        }
        self.session.connected(ctrl, role);
        if matches!(role, QueueRole::Io { .. }) {
            self.refresh_namespaces();
        }
        self.slots.configure(entries, flow_control);
    }

    /// Drop the handles on namespaces the control plane removed or replaced (at Connect, and
    /// when the namespace generation moved), and publish the counters gathered for them.
    fn refresh_namespaces(&mut self) {
        let Some(ctrl) = self.session.ctrl() else {
            return;
        };
        if self.ns.refresh(ctrl) {
            // Counters of namespaces that are gone are published and let go.
            self.stats.publish();
            self.stats.forget_all();
        }
    }

    /// Before an I/O command looks its namespace up: take the controller's new set of
    /// namespaces if the control plane changed it, and make sure the queue has a handle on
    /// `nsid` if the subsystem has that namespace.
    #[inline]
    pub(crate) fn sync_namespace(&mut self, nsid: u32) {
        let Some(ctrl) = self.session.ctrl() else {
            return;
        };
        if self.ns.stale(ctrl) && self.ns.refresh(ctrl) {
            self.stats.publish();
            self.stats.forget_all();
        }
        self.ns.cache(ctrl, nsid);
    }

    /// Asynchronous Event Requests outstanding (admin queue).
    #[inline]
    pub(crate) fn parked_aers(&self) -> u32 {
        self.slots.parked()
    }

    /// Handle a command capsule. `icd` is its in-capsule data (already framed by the transport).
    pub fn handle_command(&mut self, sqe: &Sqe, icd: &[u8], now: Instant) -> Disposition {
        self.now = now;
        let sqid = self.session.qid();
        if sqe.psdt() != PSDT_SGL_MPTR_CONTIG {
            return self.immediate(sqe, CmdError::at(Status::INVALID_FIELD, 1));
        }
        let fused = if sqe.fuse() != 0 || self.pairs.waiting() {
            match self.fused_arrival(sqe) {
                Ok(f) => f,
                Err(e) => return self.immediate(sqe, e),
            }
        } else {
            Fused::None
        };
        let Some(idx) = self.slots.take(sqe, now) else {
            if fused == Fused::Second {
                self.fused_unplaced();
            }
            crate::warn_every!(sqid, "host exceeded the queue depth; command rejected");
            return self.immediate(sqe, Status::CMD_SEQ_ERROR.into());
        };
        // The control plane changed the namespaces (one atomic load of a line the command path
        // reads anyway): take the new set before this command looks its namespace up.
        if let QueueRole::Io { .. } = self.session.role() {
            self.sync_namespace(sqe.nsid().0);
        }
        if fused != Fused::None {
            self.fused_attach(idx, fused);
        }
        // Phase 1: how much host data does the command need (validates it as far as possible
        // before any data moves).
        let need = match self.host_data_len(sqe) {
            Ok(n) => n,
            Err(e) => return self.complete_err(idx, e),
        };
        if need > 0 {
            if !icd.is_empty() {
                if icd.len() as u32 != need {
                    return self.complete_err(idx, CmdError::at(Status::SGL_INVALID_DATA, 24));
                }
                if need > self.inline_limit() {
                    return self.complete_err(idx, CmdError::at(Status::SGL_INVALID_OFFSET, 24));
                }
                self.slots[idx].capsule_data(icd, need);
                return self.run(idx);
            }
            let data_sgl = self.session.transport().data_sgl(sqe.sgl_type());
            if !data_sgl || sqe.sgl_data_len() != need {
                let st = if data_sgl || sqe.sgl_type() == SGL_ICD {
                    Status::SGL_INVALID_DATA
                } else {
                    Status::SGL_INVALID_TYPE
                };
                return self.complete_err(idx, CmdError::at(st, 24));
            }
            let mut direct = self.direct_write_target(sqe, need);
            // Straight into the namespace means inside its gate from now on; if a
            // Compare-and-Write holds it, the data is gathered first instead.
            let mut gate = false;
            if let Some((ns, _)) = &direct {
                gate = ns.gate.enter();
                if !gate {
                    direct = None;
                }
            }
            self.slots[idx].await_data(need, direct, gate);
            return Disposition::NeedData {
                ttag: idx,
                cccid: sqe.cid().0,
                len: need,
            };
        }
        if !icd.is_empty() {
            // Data the command does not take.
            return self.complete_err(idx, CmdError::at(Status::SGL_INVALID_DATA, 24));
        }
        self.run(idx)
    }

    /// Handle validated H2CData for the R2T issued with `ttag` (the transport has checked the
    /// tag, offset and length against the R2T).
    pub fn handle_h2c_data(
        &mut self,
        ttag: u16,
        datao: u32,
        data: &[u8],
        last: bool,
    ) -> Disposition {
        let Some(slot) = self.slots.get_mut(ttag) else {
            return Disposition::Pending;
        };
        if slot.state != SlotState::AwaitData {
            return Disposition::Pending;
        }
        if !slot.receive(datao, data) {
            return Disposition::Pending;
        }
        if !last {
            return Disposition::Pending;
        }
        if let Err(e) = slot.transfer_outcome() {
            return self.complete_err(ttag, e);
        }
        self.run(ttag)
    }

    /// For a command waiting for its data ([`Disposition::NeedData`] with `ttag`) that writes
    /// straight into a namespace that does not block: that namespace's backend and the byte
    /// offset where the data goes. A transport that can put the data there itself (RDMA READ
    /// into registered namespace memory) does, then calls [`Queue::handle_h2c_placed`].
    pub fn direct_target(&self, ttag: u16) -> Option<(&Arc<dyn Backend>, u64)> {
        let s = self.slots.get(ttag)?;
        if s.state != SlotState::AwaitData {
            return None;
        }
        s.direct.as_ref().map(|(ns, off)| (&ns.backend, *off))
    }

    /// All `len` bytes of host data for `ttag` were placed at [`Queue::direct_target`] by the
    /// transport: run the command (as the last H2CData would).
    pub fn handle_h2c_placed(&mut self, ttag: u16, len: u32) -> Disposition {
        let Some(slot) = self.slots.get_mut(ttag) else {
            return Disposition::Pending;
        };
        if slot.state != SlotState::AwaitData || slot.direct.is_none() {
            return Disposition::Pending;
        }
        if !slot.placed(len) {
            return self.complete_err(ttag, CmdError::at(Status::DATA_XFER_ERROR, 0xFFFF));
        }
        self.run(ttag)
    }

    /// The transport could not fetch the host data of `ttag` (an RDMA READ failed): the
    /// command completes with Transient Transport Error without running.
    pub fn handle_h2c_failed(&mut self, ttag: u16) -> Disposition {
        match self.slots.get(ttag) {
            Some(s) if s.state == SlotState::AwaitData => {
                self.complete_err(ttag, Status::TRANSIENT_TRANSPORT.into())
            }
            _ => Disposition::Pending,
        }
    }

    /// A command capsule whose in-capsule data failed its data digest: complete it with
    /// Transient Transport Error without executing it (NVMe/TCP 1.0 section 3.5).
    pub fn handle_command_digest_error(&mut self, sqe: &Sqe, now: Instant) -> Disposition {
        self.now = now;
        self.immediate(sqe, Status::TRANSIENT_TRANSPORT.into())
    }

    /// H2CData whose data failed its digest: the command will not run; once its transfer is
    /// over (`last`) it completes with Transient Transport Error.
    pub fn handle_h2c_digest_error(&mut self, ttag: u16, last: bool) -> Disposition {
        let Some(slot) = self.slots.get_mut(ttag) else {
            return Disposition::Pending;
        };
        if slot.state != SlotState::AwaitData {
            return Disposition::Pending;
        }
        slot.poison();
        if !last {
            return Disposition::Pending;
        }
        self.complete_err(ttag, Status::TRANSIENT_TRANSPORT.into())
    }

    /// Phase 2: the command has all its host data; execute or hand I/O to the driver.
    fn run(&mut self, idx: u16) -> Disposition {
        if let Some(st) = self.slots[idx].fused.aborted() {
            self.slots[idx].fused = Fused::None;
            return self.complete_err(idx, st.into());
        }
        let sqe = self.slots[idx].sqe;
        let mut buf = std::mem::take(&mut self.slots[idx].buf);
        let res = self.execute(idx, &sqe, &mut buf);
        self.slots[idx].buf = buf;
        match res {
            Exec::Done(r) => self.complete_result(idx, r),
            Exec::Io(req) => {
                let slot = &mut self.slots[idx];
                if let Some((ns, _)) = &slot.direct
                    && !Arc::ptr_eq(ns, &req.ns)
                {
                    // The namespace at this NSID was replaced while the data was arriving: it
                    // went into the old one, now removed. Fail it as a command to a namespace
                    // removed in flight is failed.
                    if std::mem::take(&mut slot.gate) {
                        ns.gate.exit(1);
                    }
                    slot.direct = None;
                    return self.complete_err(idx, Status::INVALID_NS.with_dnr(true).into());
                }
                if slot.fused != Fused::None {
                    slot.io = Some(req);
                    return self.fused_ready(idx);
                }
                // QoS: one relaxed load of a line only the control plane writes.
                if req.ns.qos.on() && self.qos_admit(idx, &req) {
                    self.slots[idx].io = Some(req);
                    return Disposition::Parked;
                }
                let slot = &mut self.slots[idx];
                let inside = !req.op.gated() || fused::enter_gate(slot, &req);
                if inside && self.session.replica_fenced(&req.ns) {
                    if std::mem::take(&mut slot.gate) {
                        req.ns.gate.exit(1);
                    }
                    let denied = nvme_spec::ebof_vendor::OPERATION_DENIED;
                    return self.complete_err(idx, denied.into());
                }
                let slot = &mut self.slots[idx];
                slot.io = Some(req);
                if !inside {
                    return self.defer(idx);
                }
                slot.state = SlotState::Ready;
                Disposition::Execute { slot: idx }
            }
            Exec::Park => {
                self.slots.park(idx);
                Disposition::Parked
            }
        }
    }

    /// Phase 1 dispatch: host→controller data length by role and opcode.
    fn host_data_len(&self, sqe: &Sqe) -> Result<u32, CmdError> {
        match self.session.role() {
            QueueRole::Unconnected => {
                if sqe.opcode() == admin::FABRICS && sqe.fctype() == fctype::CONNECT {
                    Ok(nvme_spec::fabrics::CONNECT_DATA_LEN as u32)
                } else {
                    Err(Status::INVALID_OPCODE.into())
                }
            }
            _ if self.auth.gated() => {
                let f = sqe.fctype();
                if sqe.opcode() != admin::FABRICS
                    || (f != fctype::AUTH_SEND && f != fctype::AUTH_RECV)
                {
                    return Err(crate::auth::auth_required());
                }
                self.fabrics_host_data_len(sqe)
            }
            QueueRole::Admin => {
                if sqe.opcode() == admin::FABRICS {
                    return self.fabrics_host_data_len(sqe);
                }
                self.admin_host_data_len(sqe)
            }
            QueueRole::Io { .. } => {
                if sqe.opcode() == admin::FABRICS {
                    return self.fabrics_host_data_len(sqe);
                }
                self.io_host_data_len(sqe)
            }
        }
    }

    /// Phase 2 dispatch.
    fn execute(&mut self, idx: u16, sqe: &Sqe, buf: &mut Vec<u8>) -> Exec {
        match self.session.role() {
            QueueRole::Unconnected => Exec::Done(self.execute_connect(sqe, buf)),
            QueueRole::Admin | QueueRole::Io { .. } if sqe.opcode() == admin::FABRICS => {
                Exec::Done(self.execute_fabrics(idx, sqe, buf))
            }
            QueueRole::Admin => self.execute_admin(idx, sqe, buf),
            QueueRole::Io { .. } if crate::reservation::is_reservation_opcode(sqe.opcode()) => {
                Exec::Done(self.execute_reservation(idx, sqe, buf))
            }
            QueueRole::Io { .. } => {
                let placed = self.slots[idx].direct.is_some();
                self.prepare_io(sqe, buf, placed)
            }
        }
    }

    /// The I/O request prepared in `slot` (for the driver to execute).
    pub fn io_request(&self, slot: u16) -> Option<&IoRequest> {
        self.slots.get(slot).and_then(|s| s.io.as_ref())
    }

    /// Take the slot buffer out for execution on another thread; give it back with
    /// [`Queue::complete_io`].
    pub fn take_io_buffer(&mut self, slot: u16) -> Vec<u8> {
        match self.slots.get_mut(slot) {
            Some(s) if s.state == SlotState::Ready => {
                s.state = SlotState::Executing;
                std::mem::take(&mut s.buf)
            }
            _ => Vec::new(),
        }
    }

    /// Execute the prepared I/O of `slot` on the calling thread (for backends that do not
    /// block) and queue its completion.
    ///
    /// A read is not executed here: it completes as "ready to stream" and
    /// [`Queue::drain_completions`] hands it to the transport as [`C2hData::Read`], which reads
    /// straight from the backend into the send buffer (one copy instead of two). Its status is
    /// final only then: a backend error turns into the NVMe status (and Error log entry) there.
    pub fn execute_inline(&mut self, slot: u16) {
        let Some(s) = self.slots.get_mut(slot) else {
            return;
        };
        if s.state != SlotState::Ready {
            return;
        }
        if let Some(req) = &s.io
            && matches!(req.op, IoOp::Read)
            && !req.may_block()
            && !req.ns.is_removed()
        {
            s.stream = true;
            s.c2h_len = u32::try_from(req.len).unwrap_or(u32::MAX);
            self.finish(slot, Status::SUCCESS, 0, 0);
            return;
        }
        let Some(req) = s.io.take() else { return };
        let mut buf = std::mem::take(&mut s.buf);
        let status = match (s.direct.take(), &req.op) {
            // The data is already in the namespace; only FUA is left to honour.
            (Some(_), IoOp::Write { .. }) if !s.direct_status.is_success() => s.direct_status,
            (Some(_), IoOp::Write { fua: true }) => match req.ns.backend.flush() {
                Ok(()) => Status::SUCCESS,
                Err(e) => crate::io::backend_status(&e, true),
            },
            (Some(_), IoOp::Write { fua: false }) => Status::SUCCESS,
            _ => crate::cmds::execute_io(&req, &mut buf),
        };
        s.io = Some(req);
        s.state = SlotState::Executing;
        self.complete_io(slot, status, buf);
    }

    /// Report the outcome of the I/O in `slot`, returning the buffer.
    pub fn complete_io(&mut self, slot: u16, status: Status, buf: Vec<u8>) {
        let qid = self.session.qid();
        let Some(s) = self.slots.get_mut(slot) else {
            return;
        };
        if !matches!(s.state, SlotState::Executing | SlotState::Ready) {
            return;
        }
        if matches!(
            s.io.as_ref().map(|r| &r.op),
            Some(IoOp::CompareWrite { .. })
        ) {
            return self.complete_pair(slot, status, buf);
        }
        s.buf = buf;
        // The request stays in the slot: `drain_completions` counts it, with its latency.
        let (removed, read_len, err_lba) = match &s.io {
            Some(r) => (
                r.ns.is_removed(),
                matches!(r.op, IoOp::Read).then_some(r.len),
                r.slba(),
            ),
            None => (false, None, 0),
        };
        // A namespace removed while the command was in flight fails it (Linux nvmet answers
        // commands to a disabled namespace the same way).
        let status = if status.is_success() && removed {
            Status::INVALID_NS.with_dnr(true)
        } else {
            status
        };
        if status.is_success()
            && let Some(len) = read_len
        {
            s.c2h_len = len as u32;
        }
        if status.is_success() {
            self.complete_result(slot, Ok((0, 0)));
        } else {
            let nsid = s.sqe.nsid().0;
            if let Some(c) = self.session.ctrl() {
                c.record_error(qid, s.sqe.cid().0, status, 0xFFFF, err_lba, nsid);
            }
            self.finish(slot, status, 0, 0);
        }
    }

    fn complete_result(&mut self, idx: u16, r: CmdResult) -> Disposition {
        match r {
            Ok((dw0, dw1)) => {
                self.finish(idx, Status::SUCCESS, dw0, dw1);
                Disposition::Done
            }
            Err(e) => self.complete_err(idx, e),
        }
    }

    fn complete_err(&mut self, idx: u16, e: CmdError) -> Disposition {
        if self.slots[idx].fused != Fused::None {
            // A fused command failing on its own (the only way one completes alone): its
            // partner cannot run any more.
            self.fused_orphaned(idx);
        }
        let sqe = self.slots[idx].sqe;
        self.log_failure(&sqe, e);
        self.finish(idx, e.status, e.dw0, 0);
        Disposition::Done
    }

    fn log_failure(&self, sqe: &Sqe, e: CmdError) {
        let qid = self.session.qid();
        tracing::debug!(qid, ?sqe, status = %e.status, "command failed");
        if let Some(c) = self.session.ctrl() {
            c.record_error(qid, sqe.cid().0, e.status, e.loc, 0, sqe.nsid().0);
        }
    }

    /// The completion funnel ([`Slots::finish`]): fills CID, SQID, SQHD and status and queues
    /// the completion.
    #[inline]
    fn finish(&mut self, idx: u16, status: Status, dw0: u32, dw1: u32) {
        let sqid = self.session.qid();
        self.slots.finish(idx, sqid, status, dw0, dw1);
    }

    /// A command that got no slot fails at once.
    fn immediate(&mut self, sqe: &Sqe, e: CmdError) -> Disposition {
        self.log_failure(sqe, e);
        self.slots.immediate(self.session.qid(), sqe, e.status);
        Disposition::Done
    }

    /// Admin queue: complete outstanding Asynchronous Event Requests with the controller's
    /// pending events (they wait in the controller until an AER is there). Returns whether a
    /// completion was queued: the driver then sends it.
    pub fn deliver_events(&mut self) -> bool {
        let Some(c) = self.session.ctrl().cloned() else {
            return false;
        };
        if self.session.role() != QueueRole::Admin || self.slots.parked() == 0 || !c.has_event() {
            return false;
        }
        let mut any = false;
        while self.slots.parked() > 0 {
            let Some(dw0) = c.take_event() else { break };
            if !self.complete_aer(dw0) {
                break;
            }
            any = true;
        }
        any
    }

    /// Complete a parked AER with `dw0` (async event information). Returns false if none parked.
    pub fn complete_aer(&mut self, dw0: u32) -> bool {
        let sqid = self.session.qid();
        self.slots.complete_parked(sqid, dw0)
    }

    /// Hand each finished command to `emit(cqe, c2h_data, success_shortcut_allowed)` in
    /// completion order and free its slot. `success_shortcut_allowed` is true when the queue
    /// has SQ flow control disabled and the command succeeded with data, so the transport may
    /// set SUCCESS on the last C2HData and omit the CapsuleResp.
    ///
    /// `emit` appends the C2H data (if any) and, unless it took the shortcut, the response.
    /// For [`C2hData::Read`] it performs the read; if the backend fails it must append nothing
    /// and return the error: the command then fails (NVMe status from the backend error, Error
    /// log entry, SMART media error) and `emit` is called again for it with the error CQE and
    /// no data. `emit`'s result is ignored otherwise.
    ///
    /// Latency is measured to the queue's last `now` (the time of the last command handled);
    /// a driver measures to the real time of the drain with [`Queue::drain_completions_at`].
    pub fn drain_completions(
        &mut self,
        emit: impl FnMut(&Cqe, C2hData<'_>, bool) -> Result<(), BackendError>,
    ) {
        let now = self.now;
        self.drain_completions_at(|| now, emit);
    }

    /// [`Queue::drain_completions`], with the commands' latency measured to the time
    /// `clock` tells (the driver's clock; read at most once per drain, when the first I/O
    /// command is counted).
    pub fn drain_completions_at(
        &mut self,
        mut clock: impl FnMut() -> Instant,
        mut emit: impl FnMut(&Cqe, C2hData<'_>, bool) -> Result<(), BackendError>,
    ) {
        let qid = self.session.qid();
        let flow_control = self.slots.flow_control();
        // One clock read per drain, when the first I/O command is counted.
        let mut now: Option<Instant> = None;
        while let Some(c) = self.slots.next_completion() {
            let idx = match c {
                Completion::Immediate(cqe) => {
                    let _ = emit(&cqe, C2hData::Bytes(&[]), false);
                    continue;
                }
                Completion::Slot(idx) => idx,
            };
            let s = &mut self.slots[idx];
            let streamed = s.stream;
            if s.stream {
                s.stream = false;
                if let Some(req) = &s.io {
                    let len = usize::try_from(req.len).unwrap_or(usize::MAX);
                    let shortcut = !flow_control && len > 0;
                    let data = C2hData::Read {
                        backend: &req.ns.backend,
                        offset: req.offset,
                        len,
                    };
                    let latency = elapsed_ns(s.start, &mut now, &mut clock);
                    match emit(s.cqe(), data, shortcut) {
                        Ok(()) => self.stats.add(req, Status::SUCCESS, latency),
                        Err(e) => {
                            let status = crate::io::failed(req, &e);
                            self.stats.add(req, status, latency);
                            let (slba, nsid) = (req.slba(), s.sqe.nsid().0);
                            s.fail_streamed(status);
                            if let Some(c) = self.session.ctrl() {
                                c.record_error(qid, s.cqe().cid, status, 0xFFFF, slba, nsid);
                            }
                            let _ = emit(s.cqe(), C2hData::Bytes(&[]), false);
                        }
                    }
                }
            } else {
                if let Some(req) = &s.io
                    && !req.ns.is_removed()
                {
                    let latency = elapsed_ns(s.start, &mut now, &mut clock);
                    self.stats.add(req, s.cqe().status, latency);
                }
                let len = (s.c2h_len as usize).min(s.buf.len());
                let shortcut = !flow_control && len > 0 && s.cqe().status.is_success();
                let _ = emit(s.cqe(), C2hData::Bytes(&s.buf[..len]), shortcut);
            }
            self.gates.leave(s, streamed);
            self.slots.release(idx);
        }
        if self.stats.full() || (self.slots.outstanding() == 0 && !self.slots.has_completions()) {
            self.stats.publish();
        }
    }

    /// True if completions are waiting.
    pub fn has_completions(&self) -> bool {
        self.slots.has_completions()
    }

    /// Set a slot's C2H data length (admin commands that return data in `buf`).
    pub(crate) fn set_c2h(&mut self, idx: u16, len: u32) {
        self.slots[idx].c2h_len = len;
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        self.stats.publish();
        self.release_gates();
        self.session.close();
    }
}

/// Nanoseconds from `start` to now (read from `clock` once per drain and kept in `now`).
fn elapsed_ns(
    start: Instant,
    now: &mut Option<Instant>,
    clock: &mut impl FnMut() -> Instant,
) -> u64 {
    let now = *now.get_or_insert_with(clock);
    u64::try_from(now.saturating_duration_since(start).as_nanos()).unwrap_or(u64::MAX)
}

/// How often a queue's periodic timers run ([`Queue::poll_timers`] through
/// [`Queue::handle_timeout`]): keep-alive expiry, AER delivery, counters published.
pub const TIMER_PERIOD: Duration = Duration::from_millis(500);

/// What [`Queue::handle_timeout`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timeout {
    /// The periodic timers ran (a driver does its own periodic duties with them).
    pub timers: bool,
    /// The connection must close (controller gone or reset; see [`Queue::poll_timers`]).
    pub close: bool,
}

/// Where every queue's periodic timers fall: one grid for the whole process (its origin is
/// the first instant a queue was given), so the queues of a run loop come due together and
/// an idle loop wakes once per period, not once per queue.
static GRID: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

/// The first point of the timer grid after `now`.
fn next_period(now: Instant) -> Instant {
    let origin = *GRID.get_or_init(|| now);
    let Some(since) = now.checked_duration_since(origin) else {
        return now + TIMER_PERIOD;
    };
    let period = TIMER_PERIOD.as_nanos();
    let steps = since.as_nanos() / period + 1;
    let at = u64::try_from(steps * period).unwrap_or(u64::MAX);
    origin
        .checked_add(Duration::from_nanos(at))
        .unwrap_or(now + TIMER_PERIOD)
}

/// Outcome of phase 2.
pub(crate) enum Exec {
    Done(CmdResult),
    Io(IoRequest),
    Park,
}
