//! Witness Lease (C5h), the vendor admin command a mirror's box asks the witness with
//! (ADR 0028): decoded by `nvme_spec::ebof_vendor`, answered by the target's
//! [`crate::witness::LeaseTable`]. Only controllers of [`WITNESS_NQN`] on a target that is a
//! witness ([`Target::set_witness`]) know the opcode; anywhere else it is Invalid Command
//! Opcode.

use crate::controller::Controller;
use crate::error::{CmdError, CmdResult};
use crate::target::Target;
use crate::witness::{LeaseRequest, WITNESS_NQN};
use nvme_spec::Sqe;
use nvme_spec::Status;
use nvme_spec::ebof_vendor::{LeaseReplyDw, VendorError, WITNESS_LEASE_DATA_LEN, WitnessLease};
use std::time::Instant;

/// `ctrl` answers Witness Lease: a controller of the witness subsystem on a witness.
pub(crate) fn serves_lease(target: &Target, ctrl: &Controller) -> bool {
    ctrl.subsystem().is_some_and(|s| s.nqn == WITNESS_NQN) && target.is_witness()
}

/// Phase 1: the host data a Witness Lease carries on `ctrl` (exactly 64 bytes).
pub(crate) fn lease_data_len(target: &Target, ctrl: Option<&Controller>) -> Result<u32, CmdError> {
    if !ctrl.is_some_and(|c| serves_lease(target, c)) {
        return Err(CmdError::at(Status::INVALID_OPCODE, 0));
    }
    Ok(WITNESS_LEASE_DATA_LEN as u32)
}

/// Phase 2: answer the request in `data` at `now`. CQE DW0 bit 0 = granted, DW1 = ms left on
/// the current holder's lease.
pub(crate) fn execute_lease(
    target: &Target,
    ctrl: &Controller,
    sqe: &Sqe,
    data: &[u8],
    now: Instant,
) -> CmdResult {
    if !serves_lease(target, ctrl) {
        return Err(CmdError::at(Status::INVALID_OPCODE, 0));
    }
    let w = WitnessLease::decode(sqe, data).map_err(|e| match e {
        VendorError::ReservedDword(n) => CmdError::at(Status::INVALID_FIELD, (n * 4) as u16),
        VendorError::DataLen(_) => CmdError::at(Status::SGL_INVALID_DATA, 24),
        VendorError::ReservedByte(o) => CmdError::in_data(Status::INVALID_FIELD, o as u32),
        VendorError::LeaseMs(_) => CmdError::in_data(Status::INVALID_FIELD, 40),
        VendorError::Op(_) => CmdError::in_data(Status::INVALID_FIELD, 44),
        VendorError::Opcode(_) | VendorError::Nsid(_) => CmdError::at(Status::INVALID_FIELD, 0),
    })?;
    let reply = target
        .witness_request(&LeaseRequest::from(&w), now)
        .ok_or(CmdError::at(Status::INVALID_OPCODE, 0))?;
    let dw = LeaseReplyDw {
        granted: reply.granted,
        ms_left: u32::try_from(reply.left.as_millis()).unwrap_or(u32::MAX),
    };
    Ok((u32::from(dw.granted), dw.ms_left))
}
