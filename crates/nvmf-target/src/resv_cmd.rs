//! The reservation commands on an I/O queue (Reservation Register 0Dh, Report 0Eh, Acquire
//! 11h, Release 15h) and the reservation features of the admin queue (82h, 83h): decoding,
//! then [`crate::reservation`] does the work; notifications go to the controllers of the
//! hosts concerned.

use crate::controller::Controller;
use crate::error::{CmdError, CmdResult};
use crate::model::Namespace;
use crate::queue::Queue;
use crate::reservation::{HostId, Outcome};
use nvme_spec::opcode::{feature, io};
use nvme_spec::resv::{ResvCdw10, ResvKeys, ResvStatusExt, cptpl, notify_mask, rrega};
use nvme_spec::{Sqe, Status};
use std::sync::Arc;

/// Largest data buffer the Register / Acquire / Release commands may carry.
const RESV_DATA_MAX: u32 = 4096;

/// Identify Namespace RESCAP of `ns`: all six types, IEKEY as NVMe 1.3+ defines it, and PTPL
/// where the namespace has a place to persist to.
pub(crate) fn rescap(ns: &Namespace) -> u8 {
    use nvme_spec::resv::rescap;
    let ptpl = if ns.resv.ptpl_capable() {
        rescap::PTPL
    } else {
        0
    };
    rescap::ALL_TYPES | rescap::IEKEY | ptpl
}

impl Queue {
    /// Host data of a reservation command (phase 1): the key buffer.
    pub(crate) fn resv_host_data_len(&self, sqe: &Sqe) -> Result<u32, CmdError> {
        let min = match sqe.opcode() {
            io::RESV_REGISTER | io::RESV_ACQUIRE => ResvKeys::LEN as u32,
            io::RESV_RELEASE => ResvKeys::RELEASE_LEN as u32,
            _ => return Ok(0),
        };
        let len = sqe.sgl_data_len();
        if len < min || len > RESV_DATA_MAX {
            return Err(CmdError::at(Status::SGL_INVALID_DATA, 32));
        }
        Ok(len)
    }

    /// Phase 2 of a reservation command. `buf` holds the host data; Report's data for the host
    /// goes back in it.
    pub(crate) fn execute_reservation(
        &mut self,
        idx: u16,
        sqe: &Sqe,
        buf: &mut Vec<u8>,
    ) -> CmdResult {
        self.session.check_io_ready()?;
        let ctrl = self
            .session
            .ctrl()
            .filter(|c| !c.is_discovery())
            .cloned()
            .ok_or(CmdError::from(Status::CMD_SEQ_ERROR))?;
        let nsid = sqe.nsid().0;
        let ns = self
            .ns
            .get(nsid)
            .map(|n| n.0.clone())
            .ok_or(CmdError::at(Status::INVALID_NS, 4))?;
        // Not through a path where the namespace's ANA group is not accessible (checked in
        // phase 1 too; the state may have changed while the key data arrived).
        self.session.ana_check(&ns)?;
        let host: HostId = ctrl.hostid;
        let cdw = ResvCdw10::from_cdw10(sqe.cdw10());
        let op = sqe.opcode();
        if op == io::RESV_REPORT {
            return self.resv_report(idx, &ns, sqe, buf);
        }
        let keys = ResvKeys::decode(buf).map_err(|_| CmdError::at(Status::SGL_INVALID_DATA, 32))?;
        let capable = ns.resv.ptpl_capable();
        let r = ns.resv.update(|t| match op {
            io::RESV_REGISTER => t.register(&host, cdw, keys, capable),
            io::RESV_ACQUIRE => t.acquire(&host, cdw, keys),
            _ => t.release(&host, cdw, keys),
        });
        let out = r.map_err(|s| CmdError::at(s, resv_error_loc(op, s, cdw)))?;
        self.deliver_resv_outcome(&ctrl, nsid, out);
        Ok((0, 0))
    }

    fn resv_report(&mut self, idx: u16, ns: &Namespace, sqe: &Sqe, buf: &mut Vec<u8>) -> CmdResult {
        // Our host identifiers are 128-bit (from Connect): the 64-bit form cannot carry them.
        if sqe.cdw11() & 1 == 0 {
            return Err(CmdError::at(Status::HOST_ID_INCONSISTENT, 44));
        }
        let len = (u64::from(sqe.cdw10()) + 1) * 4;
        if len > u64::from(self.session.max_transfer()) {
            return Err(CmdError::at(Status::INVALID_FIELD, 40));
        }
        self.check_c2h(sqe, len as u32)?;
        let report: ResvStatusExt = ns.resv.snapshot().report();
        buf.clear();
        buf.resize(len as usize, 0);
        report.encode(buf);
        self.set_c2h(idx, len as u32);
        Ok((0, 0))
    }

    /// Send each notice to every controller of its host on this subsystem that sees `nsid`.
    /// (Commands of hosts preempted with Preempt and Abort need nothing more here: every later
    /// access check sees them unregistered; see ADR 0012.)
    fn deliver_resv_outcome(&self, ctrl: &Arc<Controller>, nsid: u32, out: Outcome) {
        if out.notices.is_empty() {
            return;
        }
        let subnqn = ctrl.subnqn();
        let ctrls = self.session.target().controllers();
        for n in &out.notices {
            // A host the namespace is masked from (it may have registered before being
            // detached) is not told: the namespace does not exist for it.
            for c in ctrls.iter().filter(|c| {
                !c.is_discovery()
                    && c.hostid == n.host
                    && c.subsystem()
                        .is_some_and(|s| s.nqn == subnqn && s.namespace(nsid).is_some())
            }) {
                c.reservation_notice(nsid, n.log_type);
            }
        }
        for h in &out.aborted {
            tracing::info!(nsid, host = ?h, "reservation preempted and aborted");
        }
    }

    /// Get Features 82h / 83h for namespace `nsid`.
    pub(crate) fn get_resv_feature(
        &self,
        ctrl: &Controller,
        fid: u8,
        nsid: u32,
    ) -> Result<u32, CmdError> {
        let ns = resv_namespace(ctrl, nsid)?;
        Ok(match fid {
            feature::RESV_MASK => ctrl.resv_mask(nsid),
            _ => u32::from(ns.resv.snapshot().ptpl),
        })
    }

    /// Set Features 82h / 83h.
    pub(crate) fn set_resv_feature(
        &self,
        ctrl: &Controller,
        fid: u8,
        nsid: u32,
        v: u32,
    ) -> CmdResult {
        if fid == feature::RESV_MASK {
            if v & !notify_mask::ALL != 0 {
                return Err(CmdError::at(Status::INVALID_FIELD, 44));
            }
            if nsid != u32::MAX {
                resv_namespace(ctrl, nsid)?;
            }
            ctrl.set_resv_mask(nsid, v);
            return Ok((0, 0));
        }
        let ns = resv_namespace(ctrl, nsid)?;
        let on = v & 1 != 0;
        if on && !ns.resv.ptpl_capable() {
            return Err(CmdError::at(Status::INVALID_FIELD, 44));
        }
        ns.resv
            .update(|t| {
                t.ptpl = on;
                Ok(Outcome::default())
            })
            .map_err(CmdError::from)?;
        Ok((0, 0))
    }
}

/// The namespace a reservation feature names (a specific, attached NSID).
fn resv_namespace(ctrl: &Controller, nsid: u32) -> Result<Arc<Namespace>, CmdError> {
    ctrl.subsystem()
        .and_then(|s| s.namespace(nsid).cloned())
        .ok_or(CmdError::at(Status::INVALID_NS, 4))
}

/// Where in the SQE a failed reservation command's fault lies (Error Information log).
fn resv_error_loc(op: u8, s: Status, cdw: ResvCdw10) -> u16 {
    match s {
        Status::INVALID_FIELD if op == io::RESV_REGISTER && cdw.cptpl != cptpl::NO_CHANGE => 43,
        Status::INVALID_FIELD if op == io::RESV_REGISTER && cdw.action > rrega::REPLACE => 40,
        Status::INVALID_FIELD => 40,
        _ => 0xFFFF,
    }
}

#[cfg(test)]
mod tests;
