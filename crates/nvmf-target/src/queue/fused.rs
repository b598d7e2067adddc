//! Fused Compare-and-Write (NVMe Base 2.0 section 3.4.2) and the queue's side of the namespace
//! gate ([`crate::gate`]): entering it, deferring commands that find it closed, retrying them,
//! and leaving it.
//!
//! **Pairing** (by capsule arrival order on the queue, as SPDK pairs them):
//! * FUSE 01b must be a Compare: it waits for the next capsule. Any other opcode fails with
//!   Invalid Field in Command.
//! * FUSE 10b must be a Write on the same namespace and LBA range as a waiting first command:
//!   the two form a pair. With no first waiting it fails with Command Aborted due to Missing
//!   Fused Command; not a matching Write, both commands fail with Invalid Field in Command
//!   (section 3.4.2: "the commands should be aborted with status Invalid Field in Command").
//! * Any other capsule (FUSE 00b or 11b, or a new first) while a first waits: the first fails
//!   with Missing Fused Command. FUSE 11b itself is Invalid Field.
//! * If one command of a pair fails before the pair runs (its data, its fields), the other
//!   fails with Command Aborted due to Failed Fused Command.
//!
//! Each command receives its own data (its own R2T); the pair runs when both have it, as one
//! [`IoOp::CompareWrite`] on the second command's slot, once that command holds the namespace
//! gate and the gate has drained. A miscompare fails the Compare with Compare Failure and the
//! Write with Failed Fused Command, and nothing is written.

use super::slots::{Fused, Slot, SlotState};
use super::{Disposition, Queue, QueueRole};
use crate::error::CmdError;
use crate::io::{IoOp, IoRequest, NsRef};
use nvme_spec::opcode::io;
use nvme_spec::sqe::{FUSE_FIRST, FUSE_SECOND};
use nvme_spec::{Sqe, Status};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A fused pair in progress.
#[derive(Clone, Copy, Debug)]
struct Pair {
    first: u16,
    /// The second's slot; `u16::MAX` between its arrival and its slot ([`Pairs::second_arrived`],
    /// [`Pairs::second_placed`]).
    second: Option<u16>,
    /// The second holds its namespace's gate.
    locked: bool,
    /// When it took the gate (the wait for the gate to drain is bounded).
    since: Option<Instant>,
}

impl Pair {
    /// The other command of the pair `idx` belongs to, if it has a slot.
    fn partner(&self, idx: u16) -> Option<u16> {
        let other = if self.first == idx {
            self.second
        } else {
            Some(self.first)
        };
        other.filter(|&o| o != u16::MAX)
    }
}

/// The queue's fused pairs: the first command waiting for its second, and the pairs in
/// progress (a first, its second once arrived, whether the second holds the gate).
#[derive(Debug, Default)]
pub(super) struct Pairs {
    /// The first command of a fused operation whose second has not arrived yet.
    first: Option<u16>,
    table: Vec<Pair>,
}

impl Pairs {
    /// A first command waits for its second: the next capsule decides.
    #[inline]
    pub(super) fn waiting(&self) -> bool {
        self.first.is_some()
    }

    /// The first command in `idx` opens a pair.
    fn open(&mut self, idx: u16) {
        self.first = Some(idx);
        self.table.push(Pair {
            first: idx,
            second: None,
            locked: false,
            since: None,
        });
    }

    /// The waiting first command, no longer waiting.
    fn take_first(&mut self) -> Option<u16> {
        self.first.take()
    }

    /// `idx` is no longer a first waiting for its second.
    fn forget_first(&mut self, idx: u16) {
        if self.first == Some(idx) {
            self.first = None;
        }
    }

    /// A second matching the first in `first` arrived (its slot is not known yet).
    fn second_arrived(&mut self, first: u16) {
        if let Some(p) = self.table.iter_mut().find(|p| p.first == first) {
            p.second = Some(u16::MAX);
        }
    }

    /// The second that arrived got slot `idx`.
    fn second_placed(&mut self, idx: u16) {
        if let Some(p) = self.table.iter_mut().find(|p| p.second == Some(u16::MAX)) {
            p.second = Some(idx);
        }
    }

    /// The pair whose second arrived but got no slot, out of the table.
    fn take_unplaced(&mut self) -> Option<Pair> {
        let i = self.table.iter().position(|p| p.second == Some(u16::MAX))?;
        Some(self.table.swap_remove(i))
    }

    /// Take the pair `idx` belongs to out of the table.
    fn take(&mut self, idx: u16) -> Option<Pair> {
        let i = self
            .table
            .iter()
            .position(|p| p.first == idx || p.second == Some(idx))?;
        Some(self.table.swap_remove(i))
    }

    /// The pair `idx` belongs to.
    fn get_mut(&mut self, idx: u16) -> Option<&mut Pair> {
        self.table
            .iter_mut()
            .find(|p| p.first == idx || p.second == Some(idx))
    }

    /// Every pair, out of the table (the queue's teardown).
    fn take_all(&mut self) -> Vec<Pair> {
        std::mem::take(&mut self.table)
    }
}

/// The queue's waits on namespace gates: commands deferred because their gate was closed,
/// oldest first, and the gate entries of reads streamed from memory, kept until their data
/// has been sent ([`Queue::output_sent`]).
#[derive(Debug, Default)]
pub(super) struct GateWaits {
    /// Slots in [`SlotState::Deferred`], oldest first.
    deferred: Vec<u16>,
    /// (namespace, count) of gate entries to leave once the output is sent.
    held: Vec<(Arc<NsRef>, usize)>,
}

impl GateWaits {
    /// `idx` waits for its gate.
    fn defer(&mut self, idx: u16) {
        self.deferred.push(idx);
    }

    /// `idx` no longer waits (it completed).
    fn cancel(&mut self, idx: u16) {
        self.deferred.retain(|&d| d != idx);
    }

    #[inline]
    fn has_deferred(&self) -> bool {
        !self.deferred.is_empty()
    }

    /// The waiting commands, for a retry (those still waiting are deferred again).
    fn take_deferred(&mut self) -> Vec<u16> {
        std::mem::take(&mut self.deferred)
    }

    /// `s` is freed: if it is inside its namespace's gate, leave it now, or (a read streamed
    /// from memory, whose data the transport sends later) once the output is sent.
    #[inline]
    pub(super) fn leave(&mut self, s: &mut Slot, streamed: bool) {
        if !std::mem::take(&mut s.gate) {
            return;
        }
        let ns = match (&s.io, &s.direct) {
            (Some(r), _) => &r.ns,
            (None, Some((ns, _))) => ns,
            (None, None) => return,
        };
        if !streamed {
            ns.gate.exit(1);
            return;
        }
        match self.held.last_mut() {
            Some((n, count)) if Arc::ptr_eq(n, ns) => *count += 1,
            _ => self.held.push((ns.clone(), 1)),
        }
    }

    /// The output was sent: leave the gates held for streamed reads.
    fn output_sent(&mut self) {
        for (ns, n) in self.held.drain(..) {
            ns.gate.exit(n);
        }
    }
}

/// Longest a Compare-and-Write holding its namespace's gate waits for the commands inside to
/// finish. Commands inside are normally done within milliseconds; a host that stops sending
/// the data of a Write it started (whose data goes straight into a RAM namespace) or stops
/// reading its socket (reads streamed from RAM) could hold the gate open for ever, and with it
/// every command on the namespace. Past this the pair fails with Command Interrupted (the host
/// may retry it) and the gate opens.
pub const CAW_DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

impl Queue {
    /// A capsule with FUSE set, or any capsule while a first command waits: its part in a
    /// fused operation (the first left alone is failed here). `Err`: fail the command at once.
    #[cold]
    #[inline(never)]
    pub(super) fn fused_arrival(&mut self, sqe: &Sqe) -> Result<Fused, CmdError> {
        let bad_fuse = CmdError::at(Status::INVALID_FIELD, 1);
        if !matches!(self.session.role(), QueueRole::Io { .. }) {
            return Err(bad_fuse);
        }
        let fuse = sqe.fuse();
        if fuse == FUSE_SECOND {
            let Some(first) = self.pairs.take_first() else {
                return Err(Status::ABORTED_FUSED_MISSING.into());
            };
            let f = self.slots[first].sqe;
            if sqe.opcode() != io::WRITE
                || sqe.nsid() != f.nsid()
                || sqe.slba() != f.slba()
                || sqe.nlb() != f.nlb()
            {
                self.abort_fused(first, Fused::AbortedInvalid);
                return Err(bad_fuse);
            }
            self.pairs.second_arrived(first);
            return Ok(Fused::Second);
        }
        if let Some(first) = self.pairs.take_first() {
            self.abort_fused(first, Fused::AbortedMissing);
        }
        match fuse {
            0 => Ok(Fused::None),
            FUSE_FIRST if sqe.opcode() == io::COMPARE => Ok(Fused::First),
            _ => Err(bad_fuse),
        }
    }

    /// The slot `idx` got for a command with part `f`.
    #[cold]
    #[inline(never)]
    pub(super) fn fused_attach(&mut self, idx: u16, f: Fused) {
        self.slots[idx].fused = f;
        match f {
            Fused::First => self.pairs.open(idx),
            Fused::Second => self.pairs.second_placed(idx),
            _ => {}
        }
    }

    /// A second command got no slot (the host exceeded the queue depth): its first fails.
    #[cold]
    #[inline(never)]
    pub(super) fn fused_unplaced(&mut self) {
        if let Some(p) = self.pairs.take_unplaced() {
            self.abort_fused(p.first, Fused::AbortedFailed);
        }
    }

    /// Open the gate the pair of `second` held (`locked`), if it took it.
    fn unlock_pair(&self, locked: bool, second: Option<u16>) {
        if locked
            && let Some(r) = second
                .and_then(|s| self.slots.get(s))
                .and_then(|s| s.io.as_ref())
        {
            r.ns.gate.unlock();
        }
    }

    /// Fail `idx` with `status` because its pair fell apart: now if its data is in, else once
    /// it is.
    fn abort_fused(&mut self, idx: u16, why: Fused) {
        if let Some(p) = self.pairs.take(idx) {
            // The gate is held by the second: only `idx`'s own request names its namespace.
            self.unlock_pair(p.locked, Some(idx));
        }
        let s = &mut self.slots[idx];
        match s.state {
            SlotState::FusedWait | SlotState::Deferred => {
                s.fused = Fused::None;
                self.gates.cancel(idx);
                self.complete_err(
                    idx,
                    why.aborted().unwrap_or(Status::ABORTED_FUSED_FAIL).into(),
                );
            }
            SlotState::AwaitData => s.fused = why,
            _ => s.fused = Fused::None,
        }
    }

    /// `idx` finishes on its own (an error before the pair ran): its partner fails.
    #[cold]
    #[inline(never)]
    pub(super) fn fused_orphaned(&mut self, idx: u16) {
        self.slots[idx].fused = Fused::None;
        self.pairs.forget_first(idx);
        let Some(p) = self.pairs.take(idx) else {
            return;
        };
        self.unlock_pair(p.locked, p.second);
        if let Some(other) = p.partner(idx) {
            self.abort_fused(other, Fused::AbortedFailed);
        }
    }

    /// A fused command has all its data and its request (in the slot): run the pair if the
    /// other one is ready too, else wait for it.
    #[cold]
    #[inline(never)]
    pub(super) fn fused_ready(&mut self, idx: u16) -> Disposition {
        let pair = self.pairs.get_mut(idx).copied();
        let partner = pair.and_then(|p| {
            if p.first == idx {
                p.second
            } else {
                Some(p.first)
            }
        });
        self.slots[idx].state = SlotState::FusedWait;
        match (pair, partner) {
            (Some(pair), Some(p))
                if self
                    .slots
                    .get(p)
                    .is_some_and(|s| s.state == SlotState::FusedWait) =>
            {
                match pair.second {
                    Some(second) => self.start_pair(pair.first, second),
                    None => Disposition::Pending,
                }
            }
            _ => Disposition::Parked,
        }
    }

    /// Both commands have their data: make the second's slot run the pair (the Compare's data
    /// then the Write's in its buffer) once it holds the gate.
    fn start_pair(&mut self, first: u16, second: u16) -> Disposition {
        let mut data = std::mem::take(&mut self.slots[first].buf);
        let s = &mut self.slots[second];
        let Some(req) = s.io.as_mut() else {
            return Disposition::Pending;
        };
        let IoOp::Write { fua } = req.op else {
            return Disposition::Pending;
        };
        let len = req.len as usize;
        req.op = IoOp::CompareWrite { fua };
        data.truncate(len);
        data.extend_from_slice(s.buf.get(..len).unwrap_or_default());
        // The first slot keeps the second's buffer (its capacity is reused later).
        let spare = std::mem::replace(&mut s.buf, data);
        self.slots[first].buf = spare;
        if self.pair_admitted(second, self.now) == Some(true) {
            self.slots[second].state = SlotState::Ready;
            Disposition::Execute { slot: second }
        } else {
            self.defer(second)
        }
    }

    /// `Some(true)`: the pair in `second` may run: it holds the gate (taken now if free) and the
    /// gate has drained. `None`: it waited for the drain longer than [`CAW_DRAIN_TIMEOUT`].
    fn pair_admitted(&mut self, second: u16, now: Instant) -> Option<bool> {
        let Some(ns) = self.slots[second].io.as_ref().map(|r| r.ns.clone()) else {
            return Some(false);
        };
        let Some(p) = self.pairs.get_mut(second) else {
            return Some(false);
        };
        if !p.locked {
            if !ns.gate.try_lock() {
                return Some(false);
            }
            p.locked = true;
            p.since = Some(now);
        }
        if ns.gate.drained() {
            return Some(true);
        }
        let waited = p
            .since
            .map_or(Duration::ZERO, |t| now.saturating_duration_since(t));
        (waited <= CAW_DRAIN_TIMEOUT).then_some(false)
    }

    /// A command that waited behind its namespace's gate is checked against the reservations
    /// again before it runs: one may have been acquired or preempted while it waited (its
    /// phase-2 check came before the wait).
    fn resv_recheck(&self, idx: u16) -> Result<(), CmdError> {
        self.resv_recheck_as(idx, self.slots[idx].sqe.opcode())
    }

    /// [`Queue::resv_recheck`] of `idx`'s namespace as if the command were `op`.
    fn resv_recheck_as(&self, idx: u16, op: u8) -> Result<(), CmdError> {
        match &self.slots[idx].io {
            Some(r) => self.session.resv_check(&r.ns, op),
            None => Ok(()),
        }
    }

    /// Take the pair of `second` out of the table and open the gate if it held it: the first
    /// command's slot, for the caller to complete both.
    fn end_pair(&mut self, second: u16) -> Option<u16> {
        let Pair { first, locked, .. } = self.pairs.take(second)?;
        self.unlock_pair(locked, Some(second));
        Some(first)
    }

    /// Fail both commands of a pair already out of the table ([`Queue::end_pair`]).
    fn fail_pair(&mut self, both: [(u16, CmdError); 2]) {
        for (idx, err) in both {
            self.slots[idx].fused = Fused::None;
            self.complete_err(idx, err);
        }
    }

    /// The pair in `second` got its gate but its Write is now refused by a reservation: the
    /// Write fails with that, the Compare with its own conflict or Failed Fused Command, and
    /// the gate opens.
    fn pair_refused(&mut self, second: u16, e: CmdError) {
        let Some(first) = self.end_pair(second) else {
            return;
        };
        let cmp = self
            .resv_recheck_as(second, io::COMPARE)
            .err()
            .unwrap_or(Status::ABORTED_FUSED_FAIL.into());
        self.fail_pair([(first, cmp), (second, e)]);
    }

    /// The pair in `second` waited too long for its gate to drain: both commands fail with
    /// Command Interrupted and the gate opens.
    fn pair_expired(&mut self, second: u16) {
        let Some(first) = self.end_pair(second) else {
            return;
        };
        crate::warn_every!(
            qid = self.session.qid(),
            "Compare-and-Write waited {}s for commands on its namespace to finish; failed \
             with Command Interrupted",
            CAW_DRAIN_TIMEOUT.as_secs()
        );
        let interrupted = || CmdError::from(Status::CMD_INTERRUPTED);
        self.fail_pair([(first, interrupted()), (second, interrupted())]);
    }

    /// The pair in `second` ran: complete both commands and open the gate.
    #[cold]
    #[inline(never)]
    pub(super) fn complete_pair(&mut self, second: u16, status: Status, buf: Vec<u8>) {
        let compare_failed = !status.is_success() && buf.is_empty();
        self.slots[second].buf = buf;
        let Some(first) = self.end_pair(second) else {
            return;
        };
        self.slots[second].fused = Fused::None;
        self.slots[first].fused = Fused::None;
        let (cmp, write) = if status.is_success() {
            (Status::SUCCESS, Status::SUCCESS)
        } else if compare_failed {
            (status, Status::ABORTED_FUSED_FAIL)
        } else {
            (Status::SUCCESS, status)
        };
        // The Compare completes first, as the host expects for a pair.
        for (idx, st) in [(first, cmp), (second, write)] {
            if st.is_success() {
                self.finish(idx, st, 0, 0);
            } else {
                self.complete_err(idx, CmdError::at(st, 0xFFFF));
            }
        }
    }

    #[cold]
    #[inline(never)]
    pub(super) fn defer(&mut self, idx: u16) -> Disposition {
        self.slots[idx].state = SlotState::Deferred;
        self.gates.defer(idx);
        Disposition::Parked
    }

    /// True if commands wait for their namespace's gate: the driver must call
    /// [`Queue::retry_deferred`] soon (every loop iteration) and not sleep long.
    pub fn has_deferred(&self) -> bool {
        self.gates.has_deferred()
    }

    /// Retry the deferred commands; those that may run now are appended to `ready` (run them
    /// as [`Disposition::Execute`] slots: [`Queue::execute_inline`] or the driver's engine).
    /// `now` bounds the wait of a Compare-and-Write ([`CAW_DRAIN_TIMEOUT`]).
    pub fn retry_deferred(&mut self, now: Instant, ready: &mut Vec<u16>) {
        for idx in self.gates.take_deferred() {
            if self.slots[idx].state != SlotState::Deferred {
                continue;
            }
            let go = match self.slots[idx].fused {
                Fused::Second => match self.pair_admitted(idx, now) {
                    Some(true) => {
                        if let Err(e) = self.resv_recheck(idx) {
                            self.pair_refused(idx, e);
                            continue;
                        }
                        true
                    }
                    Some(false) => false,
                    None => {
                        self.pair_expired(idx);
                        continue;
                    }
                },
                _ => {
                    if let Err(e) = self.resv_recheck(idx) {
                        self.complete_err(idx, e);
                        continue;
                    }
                    let s = &mut self.slots[idx];
                    match s.io.take() {
                        Some(req) => {
                            let inside = enter_gate(s, &req);
                            if inside && self.session.replica_fenced(&req.ns) {
                                if std::mem::take(&mut s.gate) {
                                    req.ns.gate.exit(1);
                                }
                                let denied = nvme_spec::ebof_vendor::OPERATION_DENIED;
                                self.complete_err(idx, denied.into());
                                continue;
                            }
                            s.io = Some(req);
                            inside
                        }
                        None => true,
                    }
                }
            };
            if go {
                self.slots[idx].state = SlotState::Ready;
                ready.push(idx);
            } else {
                self.gates.defer(idx);
            }
        }
    }

    /// The transport has sent everything drained so far: reads streamed from memory leave
    /// their namespace's gate (their data has left the namespace).
    pub fn output_sent(&mut self) {
        self.gates.output_sent();
    }

    /// The queue goes away: leave every gate it is in and open the ones it holds.
    pub(super) fn release_gates(&mut self) {
        self.output_sent();
        for p in self.pairs.take_all() {
            self.unlock_pair(p.locked, p.second);
        }
        for s in self.slots.iter_mut() {
            self.gates.leave(s, false);
        }
    }
}

/// Enter the gate of `req`'s namespace for the command in `s`. A Write whose data went straight
/// into the namespace is inside since it arrived.
#[inline]
pub(super) fn enter_gate(s: &mut Slot, req: &IoRequest) -> bool {
    if s.gate {
        match &s.direct {
            Some((ns, _)) if Arc::ptr_eq(ns, &req.ns) => return true,
            // The namespace was replaced in between: leave the old one's gate.
            Some((ns, _)) => ns.gate.exit(1),
            None => req.ns.gate.exit(1),
        }
    }
    s.gate = req.ns.gate.enter();
    s.gate
}
