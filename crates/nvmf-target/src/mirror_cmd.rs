//! Mirror Admit (C1h), Mirror Reservations (C9h) and Mirror Snapshot (CDh), the vendor admin commands a mirror's
//! primary sends on its replication link (ADR 0028): decoded by `nvme_spec::ebof_vendor`,
//! answered by the namespace's [`crate::mirror::MirrorFence`]. Admitted, the link controller's
//! replica epoch is the primary's epoch and its I/O on the namespace is taken while the fence
//! stays secondary at that epoch; so is its reservation table, which replaces the namespace's.

use crate::controller::Controller;
use crate::error::{CmdError, CmdResult};
use nvme_spec::Sqe;
use nvme_spec::Status;
use nvme_spec::ebof_vendor::{
    AdmitReply, MirrorAdmit, MirrorResv, OPERATION_DENIED, RESV_IMAGE_MAX_LEN, ResvImageError,
    VendorError,
};

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
    let r = fence.admit(a.epoch, a.in_sync, ctrl.link_token());
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

/// Phase 1 of a Mirror Reservations on `ctrl`: its data (the table image, at most
/// [`RESV_IMAGE_MAX_LEN`] bytes). Off a replication link: Invalid Command Opcode.
pub(crate) fn resv_data_len(ctrl: Option<&Controller>, sqe: &Sqe) -> Result<u32, CmdError> {
    if !ctrl.is_some_and(|c| c.is_replica_link()) {
        return Err(CmdError::at(Status::INVALID_OPCODE, 0));
    }
    let len = sqe.sgl_data_len();
    if len as usize > RESV_IMAGE_MAX_LEN {
        return Err(CmdError::at(Status::SGL_INVALID_DATA, 32));
    }
    Ok(len)
}

/// Execute a Mirror Reservations on `ctrl` with its `data`: the namespace's reservation table
/// becomes the primary's (persisted first when PTPL is on), provided the link was admitted at
/// the command's epoch and the fence is still secondary at it (checked under the fence's lock,
/// so never after a promotion). Else Operation Denied + DNR.
pub(crate) fn execute_resv(ctrl: &Controller, sqe: &Sqe, data: &[u8]) -> CmdResult {
    if !ctrl.is_replica_link() {
        return Err(CmdError::at(Status::INVALID_OPCODE, 0));
    }
    let m = MirrorResv::decode(sqe, data).map_err(|e| match e {
        ResvImageError::Sqe(VendorError::Nsid(_)) => CmdError::at(Status::INVALID_NS, 4),
        ResvImageError::Sqe(VendorError::ReservedDword(n)) => {
            CmdError::at(Status::INVALID_FIELD, (n * 4) as u16)
        }
        ResvImageError::Sqe(_) => CmdError::at(Status::INVALID_FIELD, 0),
        ResvImageError::DataLen(_) | ResvImageError::Count(_) => {
            CmdError::at(Status::SGL_INVALID_DATA, 24)
        }
        ResvImageError::ReservedByte(o) => CmdError::in_data(Status::INVALID_FIELD, o as u32),
        ResvImageError::Type(_) => CmdError::in_data(Status::INVALID_FIELD, 5),
        ResvImageError::Holder => CmdError::in_data(Status::INVALID_FIELD, 8),
        ResvImageError::Duplicate(i) => {
            CmdError::in_data(Status::INVALID_FIELD, 32 + 24 * i as u32)
        }
    })?;
    let ns = ctrl
        .subsystem()
        .and_then(|s| s.namespace(m.nsid).cloned())
        .ok_or(CmdError::from(OPERATION_DENIED))?;
    let fence = ns.mirror.clone().ok_or(CmdError::from(OPERATION_DENIED))?;
    if m.epoch != ctrl.replica_epoch() {
        return Err(OPERATION_DENIED.into());
    }
    let table = crate::reservation::ResvTable::from_image(m.image);
    match fence.while_link_admitted(m.epoch, ctrl.link_token(), || ns.resv.install(table)) {
        None => Err(OPERATION_DENIED.into()),
        Some(r) => r.map(|()| (0, 0)).map_err(CmdError::from),
    }
}

/// Phase 1 of a Mirror Snapshot on `ctrl`: its data (the name, at most
/// [`SNAPSHOT_NAME_MAX`](nvme_spec::ebof_vendor::SNAPSHOT_NAME_MAX) bytes). Off a replication
/// link: Invalid Command Opcode.
pub(crate) fn snapshot_data_len(ctrl: Option<&Controller>, sqe: &Sqe) -> Result<u32, CmdError> {
    if !ctrl.is_some_and(|c| c.is_replica_link()) {
        return Err(CmdError::at(Status::INVALID_OPCODE, 0));
    }
    let len = sqe.sgl_data_len();
    if len as usize > nvme_spec::ebof_vendor::SNAPSHOT_NAME_MAX {
        return Err(CmdError::at(Status::SGL_INVALID_DATA, 32));
    }
    Ok(len)
}

/// Execute a Mirror Snapshot on `ctrl` with its `data`: this copy takes (or deletes) the
/// snapshot through the fence's [`crate::mirror::MirrorSnapshots`], provided the link was
/// admitted at the command's epoch and the fence is secondary at it. The primary holds its
/// writes meanwhile, so no replica write is in flight. Else Operation Denied + DNR.
pub(crate) fn execute_snapshot(ctrl: &Controller, sqe: &Sqe, data: &[u8]) -> CmdResult {
    if !ctrl.is_replica_link() {
        return Err(CmdError::at(Status::INVALID_OPCODE, 0));
    }
    let m = nvme_spec::ebof_vendor::MirrorSnapshot::decode(sqe, data).map_err(|e| match e {
        VendorError::Nsid(_) => CmdError::at(Status::INVALID_NS, 4),
        VendorError::ReservedDword(n) => CmdError::at(Status::INVALID_FIELD, (n * 4) as u16),
        VendorError::Op(_) => CmdError::at(Status::INVALID_FIELD, 48),
        VendorError::DataLen(_) => CmdError::at(Status::SGL_INVALID_DATA, 24),
        VendorError::ReservedByte(o) => CmdError::in_data(Status::INVALID_FIELD, o as u32),
        _ => CmdError::at(Status::INVALID_FIELD, 0),
    })?;
    let fence = ctrl
        .subsystem()
        .and_then(|s| s.namespace(m.nsid).and_then(|ns| ns.mirror.clone()))
        .ok_or(CmdError::from(OPERATION_DENIED))?;
    if m.epoch != ctrl.replica_epoch()
        || fence
            .while_link_admitted(m.epoch, ctrl.link_token(), || ())
            .is_none()
    {
        return Err(OPERATION_DENIED.into());
    }
    let taker = fence.snapshots().ok_or(CmdError::from(OPERATION_DENIED))?;
    taker.snapshot(m.op, &m.name).map_err(|e| {
        tracing::warn!(nsid = m.nsid, snapshot = %m.name, op = ?m.op, "mirror snapshot refused: {e}");
        CmdError::from(OPERATION_DENIED)
    })?;
    Ok((0, 0))
}
