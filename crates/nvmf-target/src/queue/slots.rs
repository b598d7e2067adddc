//! The command slots of a queue and its completion funnel.
//!
//! [`Slots`] owns the slot table, the free list and the completion list, and the SQ head
//! pointer the completions carry. Its methods keep them consistent: a slot is either on the
//! free list or in use; a command gets a slot only below the queue size (plus the spares); a
//! completion is queued only by [`Slots::finish`] or [`Slots::immediate`], which stamp the CQE
//! (CID, SQID, SQHD) and advance SQHD once each; a slot returns to the free list only through
//! [`Slots::release`], after its completion was handed to the transport. The count of parked
//! Asynchronous Event Requests moves with their slots ([`Slots::park`],
//! [`Slots::complete_parked`]).
//!
//! What a slot's command does while it is in use (its [`SlotState`], buffers and I/O request)
//! is the command state machine of [`super::Queue`]; the [`Slot`] record is shared with the
//! other parts of the queue (`queue/`), not with the rest of the crate.

use crate::error::CmdError;
use crate::io::{IoRequest, NsRef};
use crate::model::ADMIN_QUEUE_MAX;
use nvme_spec::{Cqe, Sqe, Status};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

/// Extra slots beyond the queue size: AERs on the admin queue and commands whose completion is
/// queued but not yet sent.
pub(super) const SPARE_SLOTS: usize = 8;

/// Slot buffers above this capacity are given back when their command completes, so large
/// transfers do not pin memory on idle queues.
const BUF_KEEP_MAX: usize = 4 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SlotState {
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
    /// Compare-and-Write waiting for the commands inside to finish):
    /// [`super::Queue::retry_deferred`].
    Deferred,
    /// One command of a fused pair with all its data, waiting for the other.
    FusedWait,
    /// I/O prepared, waiting for its namespace's QoS budget:
    /// [`super::Queue::retry_throttled`].
    Throttled,
}

/// A slot's part in a fused operation (one byte: the pairing lives in `fused::Pairs`, so the
/// slot table of an idle queue stays small).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum Fused {
    #[default]
    None,
    /// The first command (Compare).
    First,
    /// The second command (Write).
    Second,
    /// The pair fell apart while the host was still sending this command's data: complete it
    /// with Missing Fused Command once the data is in.
    AbortedMissing,
    /// As [`Fused::AbortedMissing`], with Failed Fused Command.
    AbortedFailed,
    /// As [`Fused::AbortedMissing`], with Invalid Field in Command (the second did not match).
    AbortedInvalid,
}

impl Fused {
    /// The status to complete an aborted command with.
    pub(super) fn aborted(self) -> Option<Status> {
        match self {
            Fused::AbortedMissing => Some(Status::ABORTED_FUSED_MISSING),
            Fused::AbortedFailed => Some(Status::ABORTED_FUSED_FAIL),
            Fused::AbortedInvalid => Some(Status::INVALID_FIELD),
            _ => None,
        }
    }
}

/// A command slot.
#[derive(Debug)]
pub(super) struct Slot {
    pub(super) state: SlotState,
    pub(super) sqe: Sqe,
    /// Data buffer: host data for writes, data for the host for reads and admin queries.
    pub(super) buf: Vec<u8>,
    /// Host data expected / received so far (`u32::MAX`: poisoned by a digest error).
    h2c_len: u32,
    received: u32,
    /// Bytes of `buf` to return to the host as C2HData.
    pub(super) c2h_len: u32,
    pub(super) io: Option<IoRequest>,
    /// The command completed as a read still to be done: `drain_completions` hands `io` to the
    /// transport as [`crate::C2hData::Read`].
    pub(super) stream: bool,
    /// A Write whose H2CData goes straight into the namespace (backend that does not block):
    /// the namespace and the byte offset of DATAO 0. `direct_status` is the first failure.
    pub(super) direct: Option<(Arc<NsRef>, u64)>,
    pub(super) direct_status: Status,
    cqe: Cqe,
    /// When the command arrived (its receive batch), for the latency histograms.
    pub(super) start: Instant,
    /// Its part in a fused operation.
    pub(super) fused: Fused,
    /// Inside its namespace's gate ([`crate::gate`]).
    pub(super) gate: bool,
}

impl Slot {
    fn new(now: Instant) -> Slot {
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
            start: now,
            fused: Fused::None,
            gate: false,
        }
    }

    /// The command's `len` bytes of host data came in the capsule.
    #[inline]
    pub(super) fn capsule_data(&mut self, icd: &[u8], len: u32) {
        self.buf.clear();
        self.buf.extend_from_slice(icd);
        self.h2c_len = len;
        self.received = len;
    }

    /// The command waits for `len` bytes of host data (H2CData or the transport's own
    /// placement): into the namespace at `direct` (inside its gate, `gate`), else into the
    /// slot buffer.
    #[inline]
    pub(super) fn await_data(&mut self, len: u32, direct: Option<(Arc<NsRef>, u64)>, gate: bool) {
        self.gate = gate;
        if direct.is_some() {
            // The data goes straight into the namespace as it arrives (one copy less).
            self.buf.clear();
        } else if self.buf.len() < len as usize {
            self.buf.resize(len as usize, 0);
        } else {
            // No zeroing: the transport accepts H2CData only at the next expected offset up
            // to the R2T's end, so every byte is overwritten before the command runs (and
            // it runs only when all of them arrived).
            self.buf.truncate(len as usize);
        }
        self.direct = direct;
        self.direct_status = Status::SUCCESS;
        self.h2c_len = len;
        self.state = SlotState::AwaitData;
    }

    /// H2CData at offset `datao` (the transport checked it against the R2T): into the
    /// namespace for a direct write (its first failure kept for the completion), else into the
    /// slot buffer. False if it does not fit the command's data (then ignored; the
    /// transport's checks make that unreachable).
    #[inline]
    pub(super) fn receive(&mut self, datao: u32, data: &[u8]) -> bool {
        let start = datao as usize;
        if let Some((ns, offset)) = &self.direct {
            if start + data.len() > self.h2c_len as usize {
                return false;
            }
            if let Err(e) = ns.backend.write(offset + start as u64, data)
                && self.direct_status.is_success()
            {
                self.direct_status = crate::io::backend_status(&e, true);
            }
        } else {
            let Some(dst) = self.buf.get_mut(start..start + data.len()) else {
                return false;
            };
            dst.copy_from_slice(data);
        }
        if self.received != u32::MAX {
            self.received = self.received.saturating_add(data.len() as u32);
        }
        true
    }

    /// After the last H2CData: the command may run only with all its data, none of it failing
    /// its digest.
    #[inline]
    pub(super) fn transfer_outcome(&self) -> Result<(), CmdError> {
        if self.received == u32::MAX {
            return Err(Status::TRANSIENT_TRANSPORT.into());
        }
        if self.received != self.h2c_len {
            return Err(CmdError::at(Status::DATA_XFER_ERROR, 0xFFFF));
        }
        Ok(())
    }

    /// The transport placed `len` bytes itself ([`crate::Queue::handle_h2c_placed`]): false
    /// unless that is all the command's data.
    pub(super) fn placed(&mut self, len: u32) -> bool {
        if len != self.h2c_len {
            return false;
        }
        self.received = len;
        true
    }

    /// Some of the command's data failed its digest: it will not run.
    pub(super) fn poison(&mut self) {
        self.received = u32::MAX; // never equals h2c_len
    }

    /// The completion [`Slots::finish`] stamped.
    #[inline]
    pub(super) fn cqe(&self) -> &Cqe {
        &self.cqe
    }

    /// A streamed read failed when the transport read it: its completion reports `status`
    /// instead, with no data.
    pub(super) fn fail_streamed(&mut self, status: Status) {
        self.cqe.status = status;
        self.c2h_len = 0;
    }
}

/// A queued completion.
#[derive(Clone, Copy, Debug)]
pub(super) enum Completion {
    Slot(u16),
    /// A command rejected before it got a slot.
    Immediate(Cqe),
}

/// The slot table, free list and completion list of one queue, and its SQ accounting.
#[derive(Debug)]
pub(super) struct Slots {
    slots: Vec<Slot>,
    free: Vec<u16>,
    completions: VecDeque<Completion>,
    /// Queue entries (SQSIZE + 1).
    entries: u32,
    sqhd: u16,
    /// SQ flow control enabled (not disabled by CATTR.DISSQFC).
    flow_control: bool,
    /// Asynchronous Event Requests parked in slots.
    aers: u32,
}

impl std::ops::Index<u16> for Slots {
    type Output = Slot;
    #[inline]
    fn index(&self, idx: u16) -> &Slot {
        &self.slots[usize::from(idx)]
    }
}

impl std::ops::IndexMut<u16> for Slots {
    #[inline]
    fn index_mut(&mut self, idx: u16) -> &mut Slot {
        &mut self.slots[usize::from(idx)]
    }
}

impl Slots {
    /// No slot yet: the table grows with the commands in flight (see [`Slots::take`]).
    pub(super) fn new() -> Slots {
        Slots {
            slots: Vec::new(),
            free: Vec::new(),
            completions: VecDeque::new(),
            entries: ADMIN_QUEUE_MAX,
            sqhd: 0,
            flow_control: true,
            aers: 0,
        }
    }

    /// Connect told the queue size and whether SQ flow control is on (the table grows up to
    /// the size on demand).
    pub(super) fn configure(&mut self, entries: u32, flow_control: bool) {
        self.entries = entries;
        self.flow_control = flow_control;
    }

    /// SQ flow control is on: completions carry SQHD, and C2HData may not stand in for a
    /// response.
    #[inline]
    pub(super) fn flow_control(&self) -> bool {
        self.flow_control
    }

    /// A slot for the command `sqe` that arrived at `now`, reset for it: a freed one, else a
    /// new one while the table is below the queue size (plus the spares); `None` when the
    /// host exceeded the queue depth. Slots are made on demand, so a queue of 1024 entries
    /// that never has more than a few commands in flight holds a few slots, not 1024.
    #[inline]
    pub(super) fn take(&mut self, sqe: &Sqe, now: Instant) -> Option<u16> {
        let idx = match self.free.pop() {
            Some(idx) => idx,
            None => {
                let limit = self.entries as usize + SPARE_SLOTS;
                if self.slots.len() >= limit {
                    return None;
                }
                let idx = u16::try_from(self.slots.len()).ok()?;
                self.slots.push(Slot::new(now));
                idx
            }
        };
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
        Some(idx)
    }

    /// The slot a transfer tag names, if there is one.
    #[inline]
    pub(super) fn get(&self, idx: u16) -> Option<&Slot> {
        self.slots.get(usize::from(idx))
    }

    #[inline]
    pub(super) fn get_mut(&mut self, idx: u16) -> Option<&mut Slot> {
        self.slots.get_mut(usize::from(idx))
    }

    /// Every slot made so far (the queue's teardown).
    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = &mut Slot> {
        self.slots.iter_mut()
    }

    /// The completion funnel: fills CID, SQID, SQHD and status of `idx`'s completion and
    /// queues it.
    #[inline]
    pub(super) fn finish(&mut self, idx: u16, sqid: u16, status: Status, dw0: u32, dw1: u32) {
        let sqhd = self.next_sqhd();
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

    /// Queue the completion of a command that got no slot.
    pub(super) fn immediate(&mut self, sqid: u16, sqe: &Sqe, status: Status) {
        let sqhd = self.next_sqhd();
        let cqe = Cqe {
            dw0: 0,
            dw1: 0,
            sqhd,
            sqid,
            cid: sqe.cid().0,
            status,
        };
        self.completions.push_back(Completion::Immediate(cqe));
    }

    fn next_sqhd(&mut self) -> u16 {
        if !self.flow_control {
            return 0xFFFF;
        }
        self.sqhd = ((u32::from(self.sqhd) + 1) % self.entries.max(1)) as u16;
        self.sqhd
    }

    /// The oldest completion not yet handed to the transport.
    #[inline]
    pub(super) fn next_completion(&mut self) -> Option<Completion> {
        self.completions.pop_front()
    }

    /// The completion of `idx` was handed to the transport: the slot is free again (its
    /// buffer kept, unless it grew past [`BUF_KEEP_MAX`]).
    #[inline]
    pub(super) fn release(&mut self, idx: u16) {
        let s = &mut self.slots[usize::from(idx)];
        s.state = SlotState::Free;
        s.io = None;
        s.direct = None;
        if s.buf.capacity() > BUF_KEEP_MAX {
            s.buf = Vec::new();
        }
        self.free.push(idx);
    }

    /// Park the AER in `idx` until an event completes it.
    pub(super) fn park(&mut self, idx: u16) {
        self.slots[usize::from(idx)].state = SlotState::Parked;
        self.aers += 1;
    }

    /// Asynchronous Event Requests outstanding.
    #[inline]
    pub(super) fn parked(&self) -> u32 {
        self.aers
    }

    /// Complete a parked AER with `dw0` (async event information). Returns false if none is
    /// parked.
    pub(super) fn complete_parked(&mut self, sqid: u16, dw0: u32) -> bool {
        let Some(idx) = self.slots.iter().position(|s| s.state == SlotState::Parked) else {
            return false;
        };
        self.aers = self.aers.saturating_sub(1);
        self.finish(idx as u16, sqid, Status::SUCCESS, dw0, 0);
        true
    }

    /// Commands in flight (received, not yet completed to the transport).
    #[inline]
    pub(super) fn outstanding(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// True if completions are waiting.
    #[inline]
    pub(super) fn has_completions(&self) -> bool {
        !self.completions.is_empty()
    }

    /// With no command in flight and no completion waiting, give back the slot table, its
    /// data buffers and the completion list.
    pub(super) fn release_idle(&mut self) {
        if self.outstanding() != 0 || !self.completions.is_empty() {
            return;
        }
        self.slots = Vec::new();
        self.free = Vec::new();
        self.completions = VecDeque::new();
    }

    /// Bytes held by the slot table, its buffers, the free list and the completion list.
    pub(super) fn footprint(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Slot>()
            + self.slots.iter().map(|s| s.buf.capacity()).sum::<usize>()
            + self.free.capacity() * std::mem::size_of::<u16>()
            + self.completions.capacity() * std::mem::size_of::<Completion>()
    }
}
