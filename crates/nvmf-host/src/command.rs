//! What every layer of a queue speaks, whatever the transport: a command's data direction and
//! its completion. A leaf: the TCP and RDMA engines, the transport seam and the session above
//! them all use it, and it uses none of them.

use nvme_spec::{CommandId, Cqe, Status};

/// Direction of a command's data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataDir {
    /// No data (Flush, Keep Alive, Write Zeroes...).
    None,
    /// Host to controller (Write, Dataset Management, Connect): in-capsule when it fits in the
    /// queue's in-capsule limit, otherwise on R2T with H2CData PDUs.
    ToController,
    /// Controller to host (Read, Identify, Get Log Page): C2HData PDUs.
    FromController,
}

/// One finished command, handed to the completion callback. `data` borrows the slot's buffer
/// (the bytes received for a read; empty otherwise) and is valid only during the callback.
#[derive(Debug)]
pub struct Completion<'a> {
    /// The command's CID (its slot index).
    pub cid: CommandId,
    /// The caller's tag given at submission.
    pub user: u64,
    /// The completion entry. For a read completed by C2HData SUCCESS (no CapsuleResp), a CQE
    /// with status Success and the queue's last known SQHD is synthesized.
    pub cqe: Cqe,
    /// Data received from the controller (length = bytes received).
    pub data: &'a [u8],
}

impl Completion<'_> {
    /// The command's completion status.
    pub fn status(&self) -> Status {
        self.cqe.status
    }
    /// True if the command completed with Successful Completion.
    pub fn is_success(&self) -> bool {
        self.cqe.status.is_success()
    }
}
