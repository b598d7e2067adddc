//! NVM I/O commands (NVM Command Set 1.0 section 3) on an I/O queue: phase 1 (how much host
//! data, validated before any moves; where a Write's data may go straight into the namespace)
//! and phase 2 (the backend request, [`IoRequest`], run by [`crate::execute_io`] or the
//! driver). Compare, Verify and Copy are decoded in [`crate::cmds`], the reservation commands
//! in `resv_cmd.rs`.

use crate::error::CmdError;
use crate::io::{IoOp, IoRequest, NsRef, lba_range};
use crate::queue::{Exec, Queue, QueueRole};
use nvme_spec::opcode::{DSM_ATTR_DEALLOCATE, io};
use nvme_spec::{Sqe, Status};
use std::sync::Arc;

/// Maximum Dataset Management ranges (NR is 0's based, 8 bits).
const DSM_MAX_RANGES: u32 = 256;
/// Write Zeroes CDW12 bit 25: deallocate.
const WZ_DEAC: u32 = 1 << 25;
/// Read/Write CDW12 bit 30: Force Unit Access.
const RW_FUA: u32 = 1 << 30;

impl Queue {
    /// The namespace an I/O command names, from the queue's own handles.
    fn io_namespace(&self, sqe: &Sqe) -> Result<&Arc<NsRef>, CmdError> {
        if self.session.ctrl().is_none_or(|c| c.is_discovery()) {
            return Err(CmdError::from(Status::CMD_SEQ_ERROR));
        }
        self.ns
            .get(sqe.nsid().0)
            .ok_or(CmdError::at(Status::INVALID_NS, 4))
    }

    /// Where the H2CData of a Write may go straight into the namespace (a backend that does not
    /// block, e.g. RAM): the namespace and the byte offset of the command's first LBA. `None`
    /// for anything else (the data is then gathered in the slot buffer first).
    pub(crate) fn direct_write_target(&self, sqe: &Sqe, need: u32) -> Option<(Arc<NsRef>, u64)> {
        if !matches!(self.session.role(), QueueRole::Io { .. })
            || sqe.opcode() != io::WRITE
            || sqe.fuse() != 0
            // A replication link's data lands only after its fence is checked inside the gate.
            || self.session.is_replica_link()
        {
            return None;
        }
        let ns = self.io_namespace(sqe).ok()?;
        // With a host registered, a reservation may change while the data is on its way: the
        // data is gathered first and the check right before the write decides.
        if ns.resv.in_use() {
            return None;
        }
        let (offset, len) = lba_range(ns, sqe.slba(), u64::from(sqe.nlb())).ok()?;
        (len == u64::from(need) && !ns.backend.writes_block()).then(|| (ns.clone(), offset))
    }

    /// Host data an I/O command carries (writes, DSM ranges); validates the command fully.
    pub(crate) fn io_host_data_len(&self, sqe: &Sqe) -> Result<u32, CmdError> {
        self.session.check_io_ready()?;
        match sqe.opcode() {
            io::WRITE | io::COMPARE => {
                let ns = self.io_namespace(sqe)?;
                self.session.ana_check(ns)?;
                let (_, len) = lba_range(ns, sqe.slba(), u64::from(sqe.nlb()))?;
                // Before any data moves (a Write's may go straight into the namespace); a
                // Compare is checked as the read it is.
                self.session.resv_check(ns, sqe.opcode())?;
                if len > u64::from(self.session.max_transfer()) {
                    return Err(CmdError::at(Status::INVALID_FIELD, 48));
                }
                Ok(len as u32)
            }
            io::COPY => {
                self.io_namespace(sqe)?;
                crate::cmds::copy_host_data_len(sqe)
            }
            io::DATASET_MGMT => {
                self.session.ana_check(self.io_namespace(sqe)?)?;
                // The host may send a larger buffer than NR ranges (Linux always sends 4 KiB,
                // room for 256 ranges): accept NR*16 ≤ length ≤ 4096, as Linux nvmet does.
                let nr = (sqe.cdw10() & 0xFF) + 1;
                let len = sqe.sgl_data_len();
                if len < nr * 16 || len > DSM_MAX_RANGES * 16 {
                    return Err(CmdError::at(Status::SGL_INVALID_DATA, 32));
                }
                Ok(len)
            }
            op if crate::reservation::is_reservation_opcode(op) => {
                // Like any I/O command, not through a path that is not accessible.
                self.session.ana_check(self.io_namespace(sqe)?)?;
                self.resv_host_data_len(sqe)
            }
            _ => Ok(0),
        }
    }

    /// Write through: FUA, or the host turned the volatile write cache off.
    fn fua(&self, sqe: &Sqe) -> bool {
        sqe.cdw12() & RW_FUA != 0 || !self.session.ctrl().is_some_and(|c| c.wce())
    }

    /// Phase 2 for I/O queues: build the backend request. `placed`: the command is a Write
    /// whose data already went straight into the namespace.
    pub(crate) fn prepare_io(&mut self, sqe: &Sqe, buf: &[u8], placed: bool) -> Exec {
        match self.prepare_io_inner(sqe, buf, placed) {
            Ok(Some(req)) => Exec::Io(req),
            Ok(None) => Exec::Done(Ok((0, 0))),
            Err(e) => Exec::Done(Err(e)),
        }
    }

    fn prepare_io_inner(
        &mut self,
        sqe: &Sqe,
        buf: &[u8],
        placed: bool,
    ) -> Result<Option<IoRequest>, CmdError> {
        self.session.check_io_ready()?;
        let op = sqe.opcode();
        if op == io::FLUSH && sqe.nsid().0 == u32::MAX {
            let ctrl = self.session.ctrl();
            let sub = ctrl
                .and_then(|c| c.subsystem())
                .ok_or(CmdError::from(Status::CMD_SEQ_ERROR))?;
            let Some(nsid) = sub.namespaces.first().map(|n| n.nsid) else {
                return Ok(None);
            };
            if let Some(c) = ctrl {
                self.ns.cache(c, nsid);
            }
            let Some(first) = self.ns.get(nsid).cloned() else {
                return Ok(None);
            };
            for n in &sub.namespaces {
                self.session.ana_check(n)?;
            }
            return Ok(Some(IoRequest {
                op: IoOp::FlushAll(sub),
                ns: first,
                offset: 0,
                len: 0,
            }));
        }
        let ns = match op {
            // Writes and DSM passed the ANA check in phase 1, before any data moved.
            io::WRITE | io::DATASET_MGMT => self.io_namespace(sqe)?.clone(),
            io::READ | io::FLUSH | io::WRITE_ZEROES | io::COMPARE | io::VERIFY | io::COPY => {
                let ns = self.io_namespace(sqe)?;
                self.session.ana_check(ns)?;
                ns.clone()
            }
            _ => return Err(CmdError::at(Status::INVALID_OPCODE, 0)),
        };
        // A Write whose data is already in the namespace passed its check in phase 1 (no host
        // was registered then): failing it now would report a write that happened as refused.
        if !placed {
            self.session.resv_check(&ns, op)?;
        }
        let req = match op {
            io::READ => {
                let (offset, len) = lba_range(&ns, sqe.slba(), u64::from(sqe.nlb()))?;
                if len > u64::from(self.session.max_transfer()) {
                    return Err(CmdError::at(Status::INVALID_FIELD, 48));
                }
                if !self.session.transport().data_sgl(sqe.sgl_type()) {
                    return Err(CmdError::at(Status::SGL_INVALID_TYPE, 39));
                }
                if u64::from(sqe.sgl_data_len()) != len {
                    return Err(CmdError::at(Status::SGL_INVALID_DATA, 32));
                }
                IoRequest {
                    op: IoOp::Read,
                    ns,
                    offset,
                    len,
                }
            }
            io::WRITE => {
                let (offset, len) = lba_range(&ns, sqe.slba(), u64::from(sqe.nlb()))?;
                IoRequest {
                    op: IoOp::Write { fua: self.fua(sqe) },
                    ns,
                    offset,
                    len,
                }
            }
            io::FLUSH => IoRequest {
                op: IoOp::Flush,
                ns,
                offset: 0,
                len: 0,
            },
            io::WRITE_ZEROES => {
                let (offset, len) = lba_range(&ns, sqe.slba(), u64::from(sqe.nlb()))?;
                IoRequest {
                    op: IoOp::WriteZeroes {
                        deallocate: sqe.cdw12() & WZ_DEAC != 0,
                        fua: self.fua(sqe),
                    },
                    ns,
                    offset,
                    len,
                }
            }
            io::DATASET_MGMT => {
                let nr = (sqe.cdw10() & 0xFF) + 1;
                if sqe.cdw11() & DSM_ATTR_DEALLOCATE == 0 {
                    // Only hints (integral read/write): nothing to do.
                    return Ok(None);
                }
                IoRequest {
                    op: IoOp::Deallocate { nr },
                    ns,
                    offset: 0,
                    len: 0,
                }
            }
            io::COMPARE | io::VERIFY | io::COPY => {
                let wce = self.session.ctrl().is_some_and(|c| c.wce());
                return crate::cmds::prepare(ns, sqe, buf, wce).map(Some);
            }
            _ => return Err(CmdError::at(Status::INVALID_OPCODE, 0)),
        };
        Ok(Some(req))
    }
}
