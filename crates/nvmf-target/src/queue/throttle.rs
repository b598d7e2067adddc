//! The queue's side of per-namespace QoS ([`crate::qos`], ADR 0020): its own buckets on each
//! limited namespace it uses, the commands waiting for their tokens, and when the driver must
//! come back for them.
//!
//! A command over its namespace's limits is *throttled*: its I/O is prepared, it waits in
//! [`SlotState::Throttled`] until the instant its tokens have accrued, then goes on exactly as
//! a command that was never held (namespace gate, execution). Nothing fails. The driver
//! learns the earliest instant from [`Queue::next_wake`] and sleeps until then; it calls
//! [`Queue::retry_throttled`] (through the duties) when it wakes.

use super::slots::SlotState;
use super::{Queue, fused};
use crate::io::{IoOp, IoRequest};
use crate::qos::{Charge, LocalQos, RECHECK};
use std::sync::Arc;
use std::time::Instant;

/// One throttled command.
#[derive(Debug, Clone, Copy)]
struct Wait {
    slot: u16,
    until: Instant,
    /// Index in `Throttle::locals` of its namespace's buckets.
    local: usize,
    /// The limits' generation it was charged under.
    generation: u64,
}

/// Buckets and waiting commands of one queue.
#[derive(Debug, Default)]
pub(super) struct Throttle {
    /// This queue's buckets, one set per limited namespace it used (few: linear search).
    locals: Vec<LocalQos>,
    waiting: Vec<Wait>,
    /// Earliest `until` of `waiting`, or the next recheck.
    wake: Option<Instant>,
}

/// What a command costs, or `None` for commands QoS does not charge (a Flush of every
/// namespace, a fused Compare-and-Write).
fn charge(req: &IoRequest) -> Option<Charge> {
    let (write, bytes) = match req.op {
        IoOp::Read | IoOp::Compare | IoOp::Verify => (false, req.len),
        IoOp::Write { .. } | IoOp::Copy { .. } => (true, req.len),
        IoOp::WriteZeroes { .. } | IoOp::Deallocate { .. } | IoOp::Flush => (true, 0),
        IoOp::FlushAll(_) | IoOp::CompareWrite { .. } => return None,
    };
    Some(Charge { write, bytes })
}

impl Throttle {
    fn local(&mut self, req: &IoRequest) -> usize {
        let shared = req.ns.qos.shared();
        if let Some(i) = self
            .locals
            .iter()
            .position(|l| Arc::ptr_eq(l.shared(), shared))
        {
            return i;
        }
        self.locals.push(LocalQos::new(shared.clone()));
        self.locals.len() - 1
    }

    fn rewake(&mut self, now: Instant) {
        self.wake = self
            .waiting
            .iter()
            .map(|w| w.until)
            .min()
            .map(|u| u.min(now + RECHECK));
    }

    /// Publish the waits counted by every bucket set (the tick).
    pub(super) fn publish(&mut self) {
        for l in &mut self.locals {
            l.publish();
        }
    }
}

impl Queue {
    /// The command in `idx` (request `req`) is on a namespace with limits: charge it. True: it
    /// waits, throttled (the caller parks `req` in the slot); false: it may go on now.
    #[cold]
    #[inline(never)]
    pub(super) fn qos_admit(&mut self, idx: u16, req: &IoRequest) -> bool {
        let Some(c) = charge(req) else {
            return false;
        };
        let now = self.now;
        let t = &mut self.throttle;
        let local = t.local(req);
        let Some(until) = t.locals[local].admit(c, now) else {
            return false;
        };
        let generation = t.locals[local].shared().generation();
        t.waiting.push(Wait {
            slot: idx,
            until,
            local,
            generation,
        });
        // Back at the latest after RECHECK: a limit lifted meanwhile releases it then.
        let until_or_recheck = until.min(now + RECHECK);
        t.wake = Some(t.wake.map_or(until_or_recheck, |w| w.min(until_or_recheck)));
        self.slots[idx].state = SlotState::Throttled;
        true
    }

    /// When the driver must call [`Queue::retry_throttled`] next: the earliest instant a
    /// throttled command may run (or a recheck of the limits). `None`: nothing waits.
    #[inline]
    pub fn next_wake(&self) -> Option<Instant> {
        self.throttle.wake
    }

    /// True when commands wait for their namespace's QoS budget.
    #[inline]
    pub fn has_throttled(&self) -> bool {
        !self.throttle.waiting.is_empty()
    }

    /// Release the throttled commands whose time has come at `now` (or whose namespace's
    /// limits changed since they were charged): each goes on as if it had just been prepared
    /// (its namespace gate, then `ready`, or deferred at the gate).
    pub fn retry_throttled(&mut self, now: Instant, ready: &mut Vec<u16>) {
        if self.throttle.wake.is_none_or(|w| now < w) {
            return;
        }
        self.now = now;
        let waiting = std::mem::take(&mut self.throttle.waiting);
        for w in waiting {
            if self.slots[w.slot].state != SlotState::Throttled {
                continue;
            }
            let changed = self.throttle.locals[w.local].shared().generation() != w.generation;
            if now < w.until && !changed {
                self.throttle.waiting.push(w);
                continue;
            }
            let slot = &mut self.slots[w.slot];
            let Some(req) = slot.io.take() else {
                continue;
            };
            let inside = !req.op.gated() || fused::enter_gate(slot, &req);
            if inside && self.session.replica_fenced(&req.ns) {
                if std::mem::take(&mut slot.gate) {
                    req.ns.gate.exit(1);
                }
                let denied = nvme_spec::ebof_vendor::OPERATION_DENIED;
                self.complete_err(w.slot, denied.into());
                continue;
            }
            slot.io = Some(req);
            if inside {
                slot.state = SlotState::Ready;
                ready.push(w.slot);
            } else {
                self.defer(w.slot);
            }
        }
        self.throttle.rewake(now);
        if self.throttle.waiting.is_empty() {
            self.throttle.publish();
        }
    }
}
