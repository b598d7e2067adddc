//! Command slots and SQ accounting: which CIDs are free, what each outstanding command is
//! doing, and how full the controller's submission queue is. No I/O and no PDUs (those are in
//! [`super::engine`]); a leaf of the TCP queue.

use nvme_spec::{Cqe, QueueId, Status};

use crate::command::DataDir;
use crate::error::{HostError, Result};

/// SQHD value meaning "SQ flow control disabled" (NVMe-oF 1.1, 3.3.2).
pub(super) const SQHD_DISABLED: u16 = 0xFFFF;

/// One command slot: the CID of its command is its index.
pub(super) struct Slot {
    pub(super) busy: bool,
    pub(super) dir: DataDir,
    /// Data sent in the capsule (no R2T expected).
    pub(super) inline: bool,
    /// Transfer length of the command.
    pub(super) len: usize,
    /// Bytes transferred so far: received (C2HData) or requested and sent (R2T/H2CData).
    pub(super) done: usize,
    /// Some C2HData of this command failed its data digest: the command fails with Transient
    /// Transport Error whatever its response says (NVMe/TCP 1.0, 3.5).
    pub(super) digest_error: bool,
    /// Pieces of `buf` waiting in the transmit buffer ([`super::txbuf::TxBuf`]): the slot is
    /// not reused (nor its buffer touched) until they are sent.
    pub(super) pins: u32,
    /// Released while pinned: goes back to the free list when unpinned.
    pub(super) parked: bool,
    pub(super) user: u64,
    pub(super) buf: Vec<u8>,
}

impl Slot {
    fn new(prealloc: usize) -> Slot {
        Slot {
            busy: false,
            dir: DataDir::None,
            inline: false,
            len: 0,
            done: 0,
            digest_error: false,
            pins: 0,
            parked: false,
            user: 0,
            buf: vec![0; prealloc],
        }
    }
}

/// Command slots and SQ accounting: everything about a queue except the socket and the PDUs.
pub(super) struct Slots {
    pub(super) slots: Vec<Slot>,
    /// Free slot indices (a stack: recently freed, cache-warm slots are reused first).
    pub(super) free: Vec<u16>,
    pub(super) in_flight: usize,
    pub(super) qid: QueueId,
    /// SQ entries (SQSIZE + 1).
    pub(super) entries: u16,
    pub(super) sq_tail: u16,
    pub(super) sq_head: u16,
    pub(super) flow_control: bool,
    pub(super) icd_max: usize,
}

impl Slots {
    pub(super) fn new(qid: QueueId, entries: u16, icd_max: usize, prealloc: usize) -> Slots {
        let n = usize::from(entries.saturating_sub(1)).max(1);
        Slots {
            slots: (0..n).map(|_| Slot::new(prealloc)).collect(),
            free: (0..n as u16).rev().collect(),
            in_flight: 0,
            qid,
            entries,
            sq_tail: 0,
            sq_head: 0,
            flow_control: true,
            icd_max,
        }
    }

    /// Apply the Fabrics Connect response's SQHD: 0xFFFF after asking for DISSQFC turns SQ
    /// flow control off.
    pub(super) fn connected(&mut self, sqhd: u16, dissqfc: bool) {
        if dissqfc && sqhd == SQHD_DISABLED {
            self.flow_control = false;
        } else if sqhd < self.entries {
            self.sq_head = sqhd;
        }
    }

    /// Commands the controller has not fetched yet, as far as SQHD tells; never more than the
    /// outstanding count (a controller that completes without a response, or sends a stale
    /// SQHD, must not wedge the queue).
    fn sq_occupancy(&self) -> usize {
        let e = u32::from(self.entries);
        let occ = (u32::from(self.sq_tail) + e - u32::from(self.sq_head)) % e;
        (occ as usize).min(self.in_flight)
    }

    pub(super) fn can_submit(&self) -> bool {
        !self.free.is_empty()
            && (!self.flow_control || self.sq_occupancy() + 1 < usize::from(self.entries))
    }

    pub(super) fn release(&mut self, idx: usize) {
        let s = &mut self.slots[idx];
        s.busy = false;
        self.in_flight -= 1;
        if s.pins > 0 {
            s.parked = true;
        } else {
            self.free.push(idx as u16);
        }
    }

    /// The slot's data left the transmit buffer; a slot released meanwhile becomes free.
    pub(super) fn unpin(&mut self, idx: usize) {
        let Some(s) = self.slots.get_mut(idx) else {
            return;
        };
        s.pins = s.pins.saturating_sub(1);
        if s.pins == 0 && s.parked {
            s.parked = false;
            self.free.push(idx as u16);
        }
    }

    /// The CQE of a command completed without a CapsuleResp (C2HData SUCCESS), carrying the
    /// last SQHD the controller reported.
    pub(super) fn synthesized_cqe(&self, cid: u16, status: Status) -> Cqe {
        Cqe {
            dw0: 0,
            dw1: 0,
            sqhd: self.sq_head,
            sqid: self.qid.0,
            cid,
            status,
        }
    }

    /// The slot of outstanding command `cid`; a PDU naming any other CID is a protocol error.
    pub(super) fn busy_slot(&mut self, cid: u16, reason: &'static str) -> Result<&mut Slot> {
        match self.slots.get_mut(usize::from(cid)) {
            Some(s) if s.busy => Ok(s),
            _ => Err(HostError::UnexpectedPdu { reason, cid }),
        }
    }
}
