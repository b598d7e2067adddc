//! One NVMe queue (= one transport connection): the command state machine.
//!
//! A queue starts [`QueueRole::Unconnected`]; the only command it accepts is Fabrics Connect,
//! which makes it the admin queue of a new controller or an I/O queue of an existing one.
//! Every accepted command occupies a preallocated [`Slot`] (its index doubles as the NVMe/TCP
//! transfer tag) from preparation to completion; slot buffers are kept and reused, so no
//! command allocates once buffers reached their working size.

use crate::controller::Controller;
use crate::io::{IoOp, IoRequest};
use crate::model::{ADMIN_INLINE_DATA, ADMIN_QUEUE_MAX, Target};
use ebof_backend::{Backend, BackendError};
use nvme_spec::opcode::{admin, fctype};
use nvme_spec::sqe::{PSDT_SGL_MPTR_CONTIG, SGL_ICD, SGL_TRANSPORT};

/// The fabric a queue runs on: what its SGLs for command data look like.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Transport {
    /// NVMe/TCP: Transport SGL Data Block (5Ah): R2T/H2CData and C2HData.
    #[default]
    Tcp,
    /// NVMe/RDMA: Keyed SGL Data Block (40h, 4Fh with invalidate): RDMA READ and WRITE.
    Rdma,
}

impl Transport {
    /// Whether an SGL1 of type byte `t` describes data moved by the transport (not in the
    /// capsule).
    #[inline]
    pub fn data_sgl(self, t: u8) -> bool {
        match self {
            Transport::Tcp => t == SGL_TRANSPORT,
            Transport::Rdma => t == 0x40 || t == 0x4F,
        }
    }

    /// The transport type (TRTYPE) of discovery log entries.
    pub fn trtype(self) -> u8 {
        match self {
            Transport::Tcp => nvme_spec::discovery::trtype::TCP,
            Transport::Rdma => nvme_spec::discovery::trtype::RDMA,
        }
    }
}
use nvme_spec::{Cqe, Sqe, Status};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

mod fused;
pub use fused::CAW_DRAIN_TIMEOUT;
pub(crate) use fused::Fused;

/// What a queue is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueRole {
    /// No Connect yet.
    Unconnected,
    /// QID 0 of a controller.
    Admin,
    /// An I/O queue; `epoch` is the controller's I/O epoch at Connect.
    Io { qid: u16, epoch: u32 },
}

/// What the transport must do after [`Queue::handle_command`] / [`Queue::handle_h2c_data`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Disposition {
    /// A completion is queued; call [`Queue::drain_completions`].
    Done,
    /// Ask the host for `len` bytes of data for command `cccid` with an R2T whose TTAG is `ttag`.
    NeedData { ttag: u16, cccid: u16, len: u32 },
    /// Backend I/O is ready in `slot`: run it ([`Queue::io_request`]) then
    /// [`Queue::complete_io`].
    Execute { slot: u16 },
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
        backend: &'a Arc<dyn Backend>,
        offset: u64,
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

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A command error: status plus the byte offset in the SQE of the offending field (for the
/// Error Information log), `0xFFFF` when not applicable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CmdError {
    pub status: Status,
    pub loc: u16,
    /// DW0 to return with the error (Connect Invalid Parameters: IPO and IATTR).
    pub dw0: u32,
}

impl From<Status> for CmdError {
    fn from(status: Status) -> Self {
        CmdError {
            status,
            loc: 0xFFFF,
            dw0: 0,
        }
    }
}

impl CmdError {
    pub fn at(status: Status, loc: u16) -> CmdError {
        CmdError {
            status,
            loc,
            dw0: 0,
        }
    }
    /// Connect Invalid Parameters: `ipo` is the offset of the bad field, in the Connect data
    /// when `in_data`, else in the SQE.
    pub fn connect_param(ipo: u16, in_data: bool) -> CmdError {
        let iattr = if in_data {
            nvme_spec::fabrics::IATTR_CONNECT_DATA
        } else {
            0
        };
        CmdError {
            status: Status::CONNECT_INVALID_PARAM,
            loc: ipo,
            dw0: u32::from(ipo) | iattr,
        }
    }
}

/// The outcome of executing a command: DW0/DW1 of the CQE.
pub(crate) type CmdResult = Result<(u32, u32), CmdError>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SlotState {
    Free,
    /// Waiting for H2CData.
    AwaitData,
    /// I/O prepared, not yet handed to the backend.
    Ready,
    /// Backend I/O running (the driver holds the buffer).
    Executing,
    /// AER outstanding.
    Parked,
    /// Completed, waiting in the completion list.
    Done,
    /// I/O prepared, waiting for its namespace's gate (a Compare-and-Write holds it, or it is a
    /// Compare-and-Write waiting for the commands inside to finish): [`Queue::retry_deferred`].
    Deferred,
    /// One command of a fused pair with all its data, waiting for the other.
    FusedWait,
}

/// A command slot.
#[derive(Debug)]
struct Slot {
    state: SlotState,
    sqe: Sqe,
    /// Data buffer: host data for writes, data for the host for reads and admin queries.
    buf: Vec<u8>,
    /// Host data expected / received so far.
    h2c_len: u32,
    received: u32,
    /// Bytes of `buf` to return to the host as C2HData.
    c2h_len: u32,
    io: Option<IoRequest>,
    /// The command completed as a read still to be done: `drain_completions` hands `io` to the
    /// transport as [`C2hData::Read`].
    stream: bool,
    /// A Write whose H2CData goes straight into the namespace (backend that does not block):
    /// the namespace and the byte offset of DATAO 0. `direct_status` is the first failure.
    direct: Option<(Arc<crate::io::NsRef>, u64)>,
    direct_status: Status,
    cqe: Cqe,
    /// When the command arrived (its receive batch), for the latency histograms.
    start: Instant,
    /// Its part in a fused operation.
    fused: Fused,
    /// Inside its namespace's gate ([`crate::gate`]).
    gate: bool,
}

impl Slot {
    fn new() -> Slot {
        Slot {
            state: SlotState::Free,
            sqe: Sqe::default(),
            buf: Vec::new(),
            h2c_len: 0,
            received: 0,
            c2h_len: 0,
            io: None,
            stream: false,
            direct: None,
            direct_status: Status::SUCCESS,
            cqe: Cqe::default(),
            start: Instant::now(),
            fused: Fused::None,
            gate: false,
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Completion {
    Slot(u16),
    /// A command rejected before it got a slot.
    Immediate(Cqe),
}

/// Extra slots beyond the queue size: AERs on the admin queue and commands whose completion is
/// queued but not yet sent.
const SPARE_SLOTS: usize = 8;

/// Per-connection queue state. `!Sync`: it lives on the core that owns the connection.
#[derive(Debug)]
pub struct Queue {
    pub(crate) target: Arc<Target>,
    pub(crate) role: QueueRole,
    pub(crate) ctrl: Option<Arc<Controller>>,
    /// Local address of the connection (for the discovery log's current-subsystem entry).
    pub(crate) local: SocketAddr,
    slots: Vec<Slot>,
    free: Vec<u16>,
    completions: VecDeque<Completion>,
    /// Queue entries (SQSIZE + 1).
    pub(crate) entries: u32,
    sqhd: u16,
    /// SQ flow control enabled (not disabled by CATTR.DISSQFC).
    pub(crate) flow_control: bool,
    pub(crate) aers: u32,
    /// Accepted on a dedicated discovery listener: only the discovery subsystem may be reached.
    pub(crate) discovery_only: bool,
    /// Time of the command being handled (sans-IO: given by the driver).
    pub(crate) now: Instant,
    /// SMART counters not yet added to the namespaces'.
    pub(crate) stats: crate::io::StatsBatch,
    /// This queue's handles on the namespaces its commands addressed (I/O queues; made on first
    /// use, sorted by NSID).
    pub(crate) ns_refs: Vec<Arc<crate::io::NsRef>>,
    /// The controller's namespace generation `ns_refs` were made at.
    pub(crate) ns_gen: u32,
    /// When this queue last wrote the controller's keep-alive timestamp.
    touched: Option<Instant>,
    /// Row of this connection's listener in the target's ANA table (see [`crate::ana`]).
    pub(crate) ana_row: usize,
    /// The first command of a fused operation whose second has not arrived yet.
    fused_first: Option<u16>,
    /// Slots in [`SlotState::Deferred`], oldest first.
    deferred: Vec<u16>,
    /// Fused pairs in progress (a first command, its second once arrived).
    pairs: Vec<fused::Pair>,
    /// Gate entries of reads streamed from memory, kept until their data has been sent
    /// ([`Queue::output_sent`]): (namespace, count).
    held: Vec<(Arc<crate::io::NsRef>, usize)>,
    /// In-band authentication of this queue, when its host has a key ([`crate::auth`]).
    pub(crate) auth: Option<Box<crate::auth::QueueAuth>>,
    /// Authentication is required and not done: every command but AUTH_Send / AUTH_Receive
    /// fails (one predictable branch per command otherwise).
    pub(crate) auth_gate: bool,
    /// The host NQN and subsystem NQN of the TLS PSK this connection was secured with
    /// ([`Queue::set_tls_peer`]); Connect must name the same ones.
    pub(crate) tls_peer: Option<(String, String)>,
    /// The fabric this queue runs on ([`Queue::set_transport`]).
    pub(crate) transport: Transport,
}

/// How often a queue refreshes its controller's keep-alive timestamp under traffic.
const TOUCH_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

impl Queue {
    /// A new, unconnected queue for a connection accepted on `local`.
    pub fn new(target: Arc<Target>, local: SocketAddr, now: Instant) -> Queue {
        let ana_row = target.ana.row_of(local);
        Queue {
            target,
            role: QueueRole::Unconnected,
            ctrl: None,
            local,
            // The slot table grows with the commands in flight (see `take_slot`).
            slots: Vec::new(),
            free: Vec::new(),
            completions: VecDeque::new(),
            entries: ADMIN_QUEUE_MAX,
            sqhd: 0,
            flow_control: true,
            aers: 0,
            discovery_only: false,
            now,
            stats: crate::io::StatsBatch::default(),
            ns_refs: Vec::new(),
            ns_gen: 0,
            touched: None,
            ana_row,
            fused_first: None,
            deferred: Vec::new(),
            pairs: Vec::new(),
            held: Vec::new(),
            auth: None,
            auth_gate: false,
            tls_peer: None,
            transport: Transport::Tcp,
        }
    }

    /// This queue runs on `t` (NVMe/TCP unless told): its SGLs for command data are that
    /// transport's, and Identify Controller describes its capsules.
    pub fn set_transport(&mut self, t: Transport) {
        self.transport = t;
    }

    /// The fabric this queue runs on.
    pub fn transport(&self) -> Transport {
        self.transport
    }

    /// The connection is TLS-protected with the PSK of (`hostnqn`, `subnqn`): a Connect that
    /// names another host or subsystem is refused (Invalid Host), so a host cannot use its own
    /// key to reach a subsystem its key was not made for.
    pub fn set_tls_peer(&mut self, hostnqn: String, subnqn: String) {
        self.tls_peer = Some((hostnqn, subnqn));
    }

    /// Mark the queue as accepted on a dedicated discovery listener.
    pub fn set_discovery_only(&mut self, v: bool) {
        self.discovery_only = v;
    }

    pub fn role(&self) -> QueueRole {
        self.role
    }

    pub fn controller(&self) -> Option<&Arc<Controller>> {
        self.ctrl.as_ref()
    }

    pub fn qid(&self) -> u16 {
        match self.role {
            QueueRole::Io { qid, .. } => qid,
            _ => 0,
        }
    }

    /// Number of transfer tags the transport must track (= slots).
    pub fn max_ttags(&self) -> u16 {
        // Slots never exceed the larger of the admin and I/O queue sizes, plus the spares.
        let entries = usize::from(self.target.limits.max_queue_size).max(ADMIN_QUEUE_MAX as usize);
        u16::try_from(entries + SPARE_SLOTS).unwrap_or(u16::MAX)
    }

    /// In-capsule data limit of this queue.
    pub fn inline_limit(&self) -> u32 {
        match self.role {
            QueueRole::Io { .. } => self.target.limits.io_inline_data,
            _ => ADMIN_INLINE_DATA,
        }
    }

    /// True when the connection should close: the controller was torn down, or (I/O queue)
    /// the controller was reset/shut down since this queue connected.
    pub fn should_close(&self) -> bool {
        match (&self.ctrl, self.role) {
            (Some(c), QueueRole::Io { epoch, .. }) => c.is_dead() || c.io_epoch() != epoch,
            (Some(c), _) => c.is_dead(),
            (None, _) => false,
        }
    }

    /// Periodic check (call about once a second): keep-alive expiry tears the controller
    /// down (its admin queue decides). Returns true if this connection must close.
    pub fn poll_timers(&mut self, now: Instant) -> bool {
        self.stats.publish();
        self.deliver_events();
        if let (Some(c), QueueRole::Admin) = (&self.ctrl, self.role)
            && c.keep_alive_expired(now)
        {
            tracing::warn!(cntlid = c.cntlid.0, hostnqn = %c.hostnqn, "keep-alive timeout expired; tearing down controller");
            c.kill();
            self.target
                .events
                .keep_alive_expiries
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        self.should_close()
    }

    /// Record host traffic for the traffic-based keep-alive (call once per received batch that
    /// held commands). The controller's shared timestamp is written at most every
    /// [`TOUCH_EVERY`], far below the keep-alive granularity (1 s), so that busy queues on
    /// several cores do not write the same cache line per batch.
    pub fn touch(&mut self, now: Instant) {
        if self
            .touched
            .is_some_and(|t| now.saturating_duration_since(t) < TOUCH_EVERY)
        {
            return;
        }
        self.touched = Some(now);
        if let Some(c) = &self.ctrl {
            c.touch(now);
        }
    }

    /// Commands in flight (received, not yet completed to the transport).
    pub fn outstanding(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// Called when the connection has been idle for a while: with no command in flight (and no
    /// completion waiting), give back the slot table, its data buffers (each grew to the
    /// largest transfer it carried) and the completion list, so an idle queue holds nothing
    /// but the `Queue` itself. They grow again with the next commands.
    pub fn release_idle_buffers(&mut self) {
        if self.outstanding() != 0 || !self.completions.is_empty() {
            return;
        }
        self.slots = Vec::new();
        self.free = Vec::new();
        self.completions = VecDeque::new();
    }

    /// Bytes an idle queue holds beyond the `Queue` value: its slot table, free list and
    /// completion list (all given back by [`Queue::release_idle_buffers`]).
    pub fn idle_footprint(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Slot>()
            + self.slots.iter().map(|s| s.buf.capacity()).sum::<usize>()
            + self.free.capacity() * std::mem::size_of::<u16>()
            + self.completions.capacity() * std::mem::size_of::<Completion>()
    }

    /// Set the queue size after Connect told it (the slot table grows up to it on demand).
    pub(crate) fn set_entries(&mut self, entries: u32) {
        self.entries = entries;
    }

    /// A free slot for a new command: a freed one, else a new one while the table is below
    /// the queue size (plus the spares); `None` when the host exceeded the queue depth.
    /// Slots are made on demand, so a queue of 1024 entries that never has more than a few
    /// commands in flight holds a few slots, not 1024.
    fn take_slot(&mut self) -> Option<u16> {
        if let Some(idx) = self.free.pop() {
            return Some(idx);
        }
        let limit = self.entries as usize + SPARE_SLOTS;
        if self.slots.len() >= limit {
            return None;
        }
        let idx = u16::try_from(self.slots.len()).ok()?;
        self.slots.push(Slot::new());
        Some(idx)
    }

    /// Handle a command capsule. `icd` is its in-capsule data (already framed by the transport).
    pub fn handle_command(&mut self, sqe: &Sqe, icd: &[u8], now: Instant) -> Disposition {
        self.now = now;
        let sqid = self.qid();
        if sqe.psdt() != PSDT_SGL_MPTR_CONTIG {
            return self.immediate(sqe, CmdError::at(Status::INVALID_FIELD, 1));
        }
        let fused = if sqe.fuse() != 0 || self.fused_first.is_some() {
            match self.fused_arrival(sqe) {
                Ok(f) => f,
                Err(e) => return self.immediate(sqe, e),
            }
        } else {
            Fused::None
        };
        let Some(idx) = self.take_slot() else {
            if fused == Fused::Second {
                self.fused_unplaced();
            }
            crate::warn_every!(sqid, "host exceeded the queue depth; command rejected");
            return self.immediate(sqe, Status::CMD_SEQ_ERROR.into());
        };
        // The control plane changed the namespaces (one atomic load of a line the command path
        // reads anyway): take the new set before this command looks its namespace up.
        if let (QueueRole::Io { .. }, Some(c)) = (self.role, &self.ctrl) {
            if c.ns_gen() != self.ns_gen {
                self.refresh_namespaces();
            }
            self.cache_namespace(sqe.nsid().0);
        }
        let slot = &mut self.slots[usize::from(idx)];
        slot.sqe = *sqe;
        slot.start = now;
        slot.state = SlotState::Free;
        slot.h2c_len = 0;
        slot.received = 0;
        slot.c2h_len = 0;
        slot.io = None;
        slot.stream = false;
        slot.direct = None;
        slot.gate = false;
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
                let slot = &mut self.slots[usize::from(idx)];
                slot.buf.clear();
                slot.buf.extend_from_slice(icd);
                slot.h2c_len = need;
                slot.received = need;
                return self.run(idx);
            }
            let data_sgl = self.transport.data_sgl(sqe.sgl_type());
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
            let slot = &mut self.slots[usize::from(idx)];
            slot.gate = gate;
            if direct.is_some() {
                // The data goes straight into the namespace as it arrives (one copy less).
                slot.buf.clear();
            } else if slot.buf.len() < need as usize {
                slot.buf.resize(need as usize, 0);
            } else {
                // No zeroing: the transport accepts H2CData only at the next expected offset up
                // to the R2T's end, so every byte is overwritten before the command runs (and
                // it runs only when all of them arrived).
                slot.buf.truncate(need as usize);
            }
            slot.direct = direct;
            slot.direct_status = Status::SUCCESS;
            slot.h2c_len = need;
            slot.state = SlotState::AwaitData;
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
        let Some(slot) = self.slots.get_mut(usize::from(ttag)) else {
            return Disposition::Pending;
        };
        if slot.state != SlotState::AwaitData {
            return Disposition::Pending;
        }
        let start = datao as usize;
        if let Some((ns, offset)) = &slot.direct {
            if start + data.len() > slot.h2c_len as usize {
                return Disposition::Pending;
            }
            if let Err(e) = ns.backend.write(offset + start as u64, data)
                && slot.direct_status.is_success()
            {
                slot.direct_status = crate::io::backend_status(&e, true);
            }
        } else {
            let Some(dst) = slot.buf.get_mut(start..start + data.len()) else {
                return Disposition::Pending;
            };
            dst.copy_from_slice(data);
        }
        if slot.received != u32::MAX {
            slot.received = slot.received.saturating_add(data.len() as u32);
        }
        if !last {
            return Disposition::Pending;
        }
        if slot.received == u32::MAX {
            return self.complete_err(ttag, Status::TRANSIENT_TRANSPORT.into());
        }
        if slot.received != slot.h2c_len {
            return self.complete_err(ttag, CmdError::at(Status::DATA_XFER_ERROR, 0xFFFF));
        }
        self.run(ttag)
    }

    /// For a command waiting for its data ([`Disposition::NeedData`] with `ttag`) that writes
    /// straight into a namespace that does not block: that namespace's backend and the byte
    /// offset where the data goes. A transport that can put the data there itself (RDMA READ
    /// into registered namespace memory) does, then calls [`Queue::handle_h2c_placed`].
    pub fn direct_target(&self, ttag: u16) -> Option<(&Arc<dyn Backend>, u64)> {
        let s = self.slots.get(usize::from(ttag))?;
        if s.state != SlotState::AwaitData {
            return None;
        }
        s.direct.as_ref().map(|(ns, off)| (&ns.backend, *off))
    }

    /// All `len` bytes of host data for `ttag` were placed at [`Queue::direct_target`] by the
    /// transport: run the command (as the last H2CData would).
    pub fn handle_h2c_placed(&mut self, ttag: u16, len: u32) -> Disposition {
        let Some(slot) = self.slots.get_mut(usize::from(ttag)) else {
            return Disposition::Pending;
        };
        if slot.state != SlotState::AwaitData || slot.direct.is_none() {
            return Disposition::Pending;
        }
        if len != slot.h2c_len {
            return self.complete_err(ttag, CmdError::at(Status::DATA_XFER_ERROR, 0xFFFF));
        }
        slot.received = len;
        self.run(ttag)
    }

    /// The transport could not fetch the host data of `ttag` (an RDMA READ failed): the
    /// command completes with Transient Transport Error without running.
    pub fn handle_h2c_failed(&mut self, ttag: u16) -> Disposition {
        match self.slots.get(usize::from(ttag)) {
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
        let Some(slot) = self.slots.get_mut(usize::from(ttag)) else {
            return Disposition::Pending;
        };
        if slot.state != SlotState::AwaitData {
            return Disposition::Pending;
        }
        slot.received = u32::MAX; // poisoned: never equals h2c_len
        if !last {
            return Disposition::Pending;
        }
        self.complete_err(ttag, Status::TRANSIENT_TRANSPORT.into())
    }

    /// Phase 2: the command has all its host data; execute or hand I/O to the driver.
    fn run(&mut self, idx: u16) -> Disposition {
        if let Some(st) = self.slots[usize::from(idx)].fused.aborted() {
            self.slots[usize::from(idx)].fused = Fused::None;
            return self.complete_err(idx, st.into());
        }
        let sqe = self.slots[usize::from(idx)].sqe;
        let mut buf = std::mem::take(&mut self.slots[usize::from(idx)].buf);
        let res = self.execute(idx, &sqe, &mut buf);
        self.slots[usize::from(idx)].buf = buf;
        match res {
            Exec::Done(r) => self.complete_result(idx, r),
            Exec::Io(req) => {
                let slot = &mut self.slots[usize::from(idx)];
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
                let inside = !req.op.gated() || fused::enter_gate(slot, &req);
                slot.io = Some(req);
                if !inside {
                    return self.defer(idx);
                }
                slot.state = SlotState::Ready;
                Disposition::Execute { slot: idx }
            }
            Exec::Park => {
                self.slots[usize::from(idx)].state = SlotState::Parked;
                Disposition::Parked
            }
        }
    }

    /// Phase 1 dispatch: host→controller data length by role and opcode.
    fn host_data_len(&self, sqe: &Sqe) -> Result<u32, CmdError> {
        match self.role {
            QueueRole::Unconnected => {
                if sqe.opcode() == admin::FABRICS && sqe.fctype() == fctype::CONNECT {
                    Ok(nvme_spec::fabrics::CONNECT_DATA_LEN as u32)
                } else {
                    Err(Status::INVALID_OPCODE.into())
                }
            }
            _ if self.auth_gate => {
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
        match self.role {
            QueueRole::Unconnected => Exec::Done(self.execute_connect(sqe, buf)),
            QueueRole::Admin | QueueRole::Io { .. } if sqe.opcode() == admin::FABRICS => {
                Exec::Done(self.execute_fabrics(idx, sqe, buf))
            }
            QueueRole::Admin => self.execute_admin(idx, sqe, buf),
            QueueRole::Io { .. } if crate::reservation::is_reservation_opcode(sqe.opcode()) => {
                Exec::Done(self.execute_reservation(idx, sqe, buf))
            }
            QueueRole::Io { .. } => {
                let placed = self.slots[usize::from(idx)].direct.is_some();
                self.prepare_io(sqe, buf, placed)
            }
        }
    }

    /// The I/O request prepared in `slot` (for the driver to execute).
    pub fn io_request(&self, slot: u16) -> Option<&IoRequest> {
        self.slots
            .get(usize::from(slot))
            .and_then(|s| s.io.as_ref())
    }

    /// Take the slot buffer out for execution on another thread; give it back with
    /// [`Queue::complete_io`].
    pub fn take_io_buffer(&mut self, slot: u16) -> Vec<u8> {
        match self.slots.get_mut(usize::from(slot)) {
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
        let Some(s) = self.slots.get_mut(usize::from(slot)) else {
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
            _ => crate::io::execute_io(&req, &mut buf),
        };
        s.io = Some(req);
        s.state = SlotState::Executing;
        self.complete_io(slot, status, buf);
    }

    /// Report the outcome of the I/O in `slot`, returning the buffer.
    pub fn complete_io(&mut self, slot: u16, status: Status, buf: Vec<u8>) {
        let qid = self.qid();
        let Some(s) = self.slots.get_mut(usize::from(slot)) else {
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
            if let Some(c) = &self.ctrl {
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
        if self.slots[usize::from(idx)].fused != Fused::None {
            // A fused command failing on its own (the only way one completes alone): its
            // partner cannot run any more.
            self.fused_orphaned(idx);
        }
        let sqe = self.slots[usize::from(idx)].sqe;
        self.log_failure(&sqe, e);
        self.finish(idx, e.status, e.dw0, 0);
        Disposition::Done
    }

    fn log_failure(&self, sqe: &Sqe, e: CmdError) {
        tracing::debug!(qid = self.qid(), ?sqe, status = %e.status, "command failed");
        if let Some(c) = &self.ctrl {
            c.record_error(self.qid(), sqe.cid().0, e.status, e.loc, 0, sqe.nsid().0);
        }
    }

    /// The completion funnel: fills CID, SQID, SQHD and status and queues the completion.
    fn finish(&mut self, idx: u16, status: Status, dw0: u32, dw1: u32) {
        let sqhd = self.next_sqhd();
        let sqid = self.qid();
        let slot = &mut self.slots[usize::from(idx)];
        if !status.is_success() {
            slot.c2h_len = 0;
        }
        slot.cqe = Cqe {
            dw0,
            dw1,
            sqhd,
            sqid,
            cid: slot.sqe.cid().0,
            status,
        };
        slot.state = SlotState::Done;
        self.completions.push_back(Completion::Slot(idx));
    }

    fn next_sqhd(&mut self) -> u16 {
        if !self.flow_control {
            return 0xFFFF;
        }
        self.sqhd = ((u32::from(self.sqhd) + 1) % self.entries.max(1)) as u16;
        self.sqhd
    }

    fn immediate(&mut self, sqe: &Sqe, e: CmdError) -> Disposition {
        self.log_failure(sqe, e);
        let sqhd = self.next_sqhd();
        let cqe = Cqe {
            dw0: 0,
            dw1: 0,
            sqhd,
            sqid: self.qid(),
            cid: sqe.cid().0,
            status: e.status,
        };
        self.completions.push_back(Completion::Immediate(cqe));
        Disposition::Done
    }

    /// Admin queue: complete outstanding Asynchronous Event Requests with the controller's
    /// pending events (they wait in the controller until an AER is there). Returns whether a
    /// completion was queued: the driver then sends it.
    pub fn deliver_events(&mut self) -> bool {
        let Some(c) = self.ctrl.clone() else {
            return false;
        };
        if self.role != QueueRole::Admin || self.aers == 0 || !c.has_event() {
            return false;
        }
        let mut any = false;
        while self.aers > 0 {
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
        let Some(idx) = self.slots.iter().position(|s| s.state == SlotState::Parked) else {
            return false;
        };
        self.aers = self.aers.saturating_sub(1);
        self.finish(idx as u16, Status::SUCCESS, dw0, 0);
        true
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
    pub fn drain_completions(
        &mut self,
        mut emit: impl FnMut(&Cqe, C2hData<'_>, bool) -> Result<(), BackendError>,
    ) {
        let qid = self.qid();
        // One clock read per drain, when the first I/O command is counted.
        let mut now: Option<Instant> = None;
        while let Some(c) = self.completions.pop_front() {
            let idx = match c {
                Completion::Immediate(cqe) => {
                    let _ = emit(&cqe, C2hData::Bytes(&[]), false);
                    continue;
                }
                Completion::Slot(idx) => idx,
            };
            let s = &mut self.slots[usize::from(idx)];
            let streamed = s.stream;
            if s.stream {
                s.stream = false;
                if let Some(req) = &s.io {
                    let len = usize::try_from(req.len).unwrap_or(usize::MAX);
                    let shortcut = !self.flow_control && len > 0;
                    let data = C2hData::Read {
                        backend: &req.ns.backend,
                        offset: req.offset,
                        len,
                    };
                    let latency = elapsed_ns(s.start, &mut now);
                    match emit(&s.cqe, data, shortcut) {
                        Ok(()) => self.stats.add(req, Status::SUCCESS, latency),
                        Err(e) => {
                            let status = crate::io::failed(req, &e);
                            self.stats.add(req, status, latency);
                            s.cqe.status = status;
                            s.c2h_len = 0;
                            if let Some(c) = &self.ctrl {
                                c.record_error(
                                    qid,
                                    s.cqe.cid,
                                    status,
                                    0xFFFF,
                                    req.slba(),
                                    s.sqe.nsid().0,
                                );
                            }
                            let _ = emit(&s.cqe, C2hData::Bytes(&[]), false);
                        }
                    }
                }
            } else {
                if let Some(req) = &s.io
                    && !req.ns.is_removed()
                {
                    let latency = elapsed_ns(s.start, &mut now);
                    self.stats.add(req, s.cqe.status, latency);
                }
                let len = (s.c2h_len as usize).min(s.buf.len());
                let shortcut = !self.flow_control && len > 0 && s.cqe.status.is_success();
                let _ = emit(&s.cqe, C2hData::Bytes(&s.buf[..len]), shortcut);
            }
            if std::mem::take(&mut s.gate) {
                fused::leave_gate(s, streamed, &mut self.held);
            }
            s.state = SlotState::Free;
            s.io = None;
            s.direct = None;
            // Keep large buffers from pinning memory forever on idle queues.
            if s.buf.capacity() > 4 << 20 {
                s.buf = Vec::new();
            }
            self.free.push(idx);
        }
        if self.stats.full() || (self.outstanding() == 0 && self.completions.is_empty()) {
            self.stats.publish();
        }
    }

    /// True if completions are waiting.
    pub fn has_completions(&self) -> bool {
        !self.completions.is_empty()
    }

    /// Set a slot's C2H data length (admin commands that return data in `buf`).
    pub(crate) fn set_c2h(&mut self, idx: u16, len: u32) {
        self.slots[usize::from(idx)].c2h_len = len;
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        self.stats.publish();
        self.release_gates();
        if let Some(c) = &self.ctrl {
            match self.role {
                QueueRole::Admin => {
                    if c.is_discovery() {
                        tracing::debug!(cntlid = c.cntlid.0, hostnqn = %c.hostnqn, "admin queue closed; discovery controller removed");
                    } else {
                        tracing::info!(cntlid = c.cntlid.0, hostnqn = %c.hostnqn, "admin queue closed; controller removed");
                    }
                    c.kill();
                }
                QueueRole::Io { qid, .. } => {
                    tracing::debug!(cntlid = c.cntlid.0, qid, "I/O queue closed");
                    c.release_qid(qid);
                }
                QueueRole::Unconnected => {}
            }
        }
    }
}

/// Nanoseconds from `start` to now (read once per drain and kept in `now`).
fn elapsed_ns(start: Instant, now: &mut Option<Instant>) -> u64 {
    let now = *now.get_or_insert_with(Instant::now);
    u64::try_from(now.saturating_duration_since(start).as_nanos()).unwrap_or(u64::MAX)
}

/// Outcome of phase 2.
pub(crate) enum Exec {
    Done(CmdResult),
    Io(IoRequest),
    Park,
}
