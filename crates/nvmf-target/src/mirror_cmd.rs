//! Mirror Admit (C1h), the vendor admin command a mirror's primary sends on its replication
//! link (ADR 0028): decoded by `nvme_spec::ebof_vendor`, answered by the namespace's
//! [`crate::mirror::MirrorFence`]. Admitted, the link controller's replica epoch is the
//! primary's epoch and its I/O on the namespace is taken while the fence stays secondary at
//! that epoch.

use crate::controller::Controller;
use crate::error::{CmdError, CmdResult};
use nvme_spec::Sqe;
use nvme_spec::Status;
use nvme_spec::ebof_vendor::{AdmitReply, MirrorAdmit, OPERATION_DENIED, VendorError};

/// Execute a Mirror Admit on `ctrl` (off a replication link phase 1 already answered Invalid
/// Command Opcode, as for any opcode we do not implement: `tests/discovery.rs`). No such
/// mirrored namespace, not secondary, or an epoch older than the fence's → Operation Denied +
/// DNR. CQE DW0 bit 0: the
/// local copy is synced at this epoch; DW1: the low 32 bits of the epoch it was synced at.
pub(crate) fn execute_admit(ctrl: &std::sync::Arc<Controller>, sqe: &Sqe) -> CmdResult {
    if !ctrl.is_replica_link() {
        return Err(OPERATION_DENIED.into());
    }
    let a = MirrorAdmit::decode(sqe).map_err(|e| match e {
        VendorError::Nsid(_) => CmdError::at(Status::INVALID_NS, 4),
        VendorError::ReservedDword(n) => CmdError::at(Status::INVALID_FIELD, (n * 4) as u16),
        _ => CmdError::at(Status::INVALID_FIELD, 0),
    })?;
    let fence = ctrl
        .subsystem()
        .and_then(|s| s.namespace(a.nsid).and_then(|ns| ns.mirror.clone()))
        .ok_or(CmdError::from(OPERATION_DENIED))?;
    let r = fence.admit(a.epoch, a.in_sync);
    if !r.ok {
        return Err(OPERATION_DENIED.into());
    }
    ctrl.set_replica_epoch(a.epoch);
    let link: std::sync::Weak<Controller> = std::sync::Arc::downgrade(ctrl);
    fence.link_admitted(link);
    let reply = AdmitReply {
        synced: r.synced_at == a.epoch,
        synced_epoch_lo: r.synced_at as u32,
    };
    Ok((u32::from(reply.synced), reply.synced_epoch_lo))
}
