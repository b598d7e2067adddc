//! A failed command as the completion reports it: NVMe status, the field at fault (Error
//! Information log) and DW0. A leaf module, so the command modules and the feature modules
//! ([`crate::cmds`], [`crate::auth`]) name their failures without depending on the queue.

use nvme_spec::Status;

/// A command error: status plus the byte offset in the SQE of the offending field (for the
/// Error Information log), `0xFFFF` when not applicable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CmdError {
    pub status: Status,
    pub loc: u16,
    /// DW0 to return with the error (Connect Invalid Parameters: IPO and IATTR).
    pub dw0: u32,
}

impl From<Status> for CmdError {
    fn from(status: Status) -> Self {
        CmdError {
            status,
            loc: 0xFFFF,
            dw0: 0,
        }
    }
}

impl CmdError {
    pub fn at(status: Status, loc: u16) -> CmdError {
        CmdError {
            status,
            loc,
            dw0: 0,
        }
    }
    /// A fault in the command's data at byte `offset` of it: the Error Information log
    /// points at the data pointer (SQE byte 24) and DW0 carries the offset, as Connect's IPO
    /// does for the Connect data.
    pub fn in_data(status: Status, offset: u32) -> CmdError {
        CmdError {
            status,
            loc: 24,
            dw0: offset,
        }
    }
    /// Connect Invalid Parameters: `ipo` is the offset of the bad field, in the Connect data
    /// when `in_data`, else in the SQE.
    pub fn connect_param(ipo: u16, in_data: bool) -> CmdError {
        let iattr = if in_data {
            nvme_spec::fabrics::IATTR_CONNECT_DATA
        } else {
            0
        };
        CmdError {
            status: Status::CONNECT_INVALID_PARAM,
            loc: ipo,
            dw0: u32::from(ipo) | iattr,
        }
    }
}

/// The outcome of executing a command: DW0/DW1 of the CQE.
pub(crate) type CmdResult = Result<(u32, u32), CmdError>;
