//! Completion status (NVMe Base 2.0, 4.6.1): Status Code Type, Status Code, More, DNR.

/// Status Code Type values.
pub mod sct {
    /// Generic Command Status (SCT 0h): errors that apply to any command.
    pub const GENERIC: u8 = 0;
    /// Command Specific Status (SCT 1h): meaning depends on the opcode (and FCTYPE).
    pub const COMMAND_SPECIFIC: u8 = 1;
    /// Media and Data Integrity Errors (SCT 2h).
    pub const MEDIA: u8 = 2;
    /// Path Related Status (SCT 3h): the host may retry on another path.
    pub const PATH: u8 = 3;
}

/// A command's completion status. `Status::SUCCESS` is all zero.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Status {
    /// Status Code Type (SCT, 3 bits).
    pub sct: u8,
    /// Status Code (SC).
    pub sc: u8,
    /// More (M): more status information is in the Error Information log.
    pub more: bool,
    /// Do Not Retry (DNR).
    pub dnr: bool,
}

impl std::fmt::Debug for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Status({}", self.name())?;
        write!(f, " sct={} sc={:#04x}", self.sct, self.sc)?;
        if self.dnr {
            write!(f, " dnr")?;
        }
        if self.more {
            write!(f, " more")?;
        }
        write!(f, ")")
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (sct {} sc {:#04x}", self.name(), self.sct, self.sc)?;
        if self.dnr {
            write!(f, ", dnr")?;
        }
        write!(f, ")")
    }
}

const fn generic(sc: u8) -> Status {
    Status {
        sct: sct::GENERIC,
        sc,
        more: false,
        dnr: true,
    }
}
const fn specific(sc: u8) -> Status {
    Status {
        sct: sct::COMMAND_SPECIFIC,
        sc,
        more: false,
        dnr: true,
    }
}
const fn path(sc: u8) -> Status {
    Status {
        sct: sct::PATH,
        sc,
        more: false,
        dnr: false,
    }
}
const fn media(sc: u8) -> Status {
    Status {
        sct: sct::MEDIA,
        sc,
        more: false,
        dnr: false,
    }
}

impl Status {
    /// Successful Completion (SCT 0h, SC 00h).
    pub const SUCCESS: Status = Status {
        sct: 0,
        sc: 0,
        more: false,
        dnr: false,
    };
    // Generic command status (SCT 0).
    /// Invalid Command Opcode (SC 01h).
    pub const INVALID_OPCODE: Status = generic(0x01);
    /// Invalid Field in Command (SC 02h); the error log's parameter location names the field.
    pub const INVALID_FIELD: Status = generic(0x02);
    /// Command ID Conflict (SC 03h): the CID is already in use on this submission queue.
    pub const CMDID_CONFLICT: Status = generic(0x03);
    /// Data Transfer Error (SC 04h): moving the command's data to or from the host failed.
    pub const DATA_XFER_ERROR: Status = generic(0x04);
    /// Internal Error (SC 06h): the controller failed for a reason not covered by another status.
    pub const INTERNAL: Status = generic(0x06);
    /// Command Abort Requested (SC 07h): aborted by an Abort command; DNR clear.
    pub const ABORT_REQ: Status = Status {
        dnr: false,
        ..generic(0x07)
    };
    /// Command Aborted due to SQ Deletion (SC 08h): the queue went away (disconnect); DNR clear.
    pub const ABORT_SQ_DELETED: Status = Status {
        dnr: false,
        ..generic(0x08)
    };
    /// Command Aborted due to Failed Fused Command (the other command of the pair failed).
    /// DNR clear, as SPDK: the other command's failure may be one a retry gets past (a path
    /// status, an interrupted pair).
    pub const ABORTED_FUSED_FAIL: Status = Status {
        dnr: false,
        ..generic(0x09)
    };
    /// Command Aborted due to Missing Fused Command (the pair was not well formed).
    pub const ABORTED_FUSED_MISSING: Status = generic(0x0A);
    /// Invalid Namespace or Format (SC 0Bh): the NSID is not an active namespace, or is invalid
    /// for the command.
    pub const INVALID_NS: Status = generic(0x0B);
    /// Command Sequence Error (SC 0Ch): the command is not allowed in the current state (e.g.
    /// before Connect, or a fused command out of order).
    pub const CMD_SEQ_ERROR: Status = generic(0x0C);
    /// Invalid SGL Segment Descriptor (SC 0Dh).
    pub const SGL_INVALID_LAST: Status = generic(0x0D);
    /// Invalid Number of SGL Descriptors (SC 0Eh).
    pub const SGL_INVALID_COUNT: Status = generic(0x0E);
    /// Data SGL Length Invalid (SC 0Fh): the SGL's length does not match the command's data.
    pub const SGL_INVALID_DATA: Status = generic(0x0F);
    /// SGL Descriptor Type Invalid (SC 11h): a descriptor type or subtype the transport does not
    /// accept.
    pub const SGL_INVALID_TYPE: Status = generic(0x11);
    /// SGL Offset Invalid (SC 16h): an in-capsule data offset out of range.
    pub const SGL_INVALID_OFFSET: Status = generic(0x16);
    /// Host Identifier Inconsistent Format (SC 18h): the Host Identifier does not match the format
    /// (64 or 128 bit) in use.
    pub const HOST_ID_INCONSISTENT: Status = generic(0x18);
    /// Keep Alive Timer Expired (SC 19h): the controller's keep-alive timer ran out.
    pub const KA_EXPIRED: Status = generic(0x19);
    /// Command Aborted due to Preempt and Abort.
    pub const PREEMPT_ABORT: Status = generic(0x1B);
    /// Command Interrupted (SC 21h): the command could not complete now and may succeed if
    /// resubmitted; DNR clear.
    pub const CMD_INTERRUPTED: Status = Status {
        dnr: false,
        ..generic(0x21)
    };
    /// Transient Transport Error (SC 22h): a transport failure that a retry may get past; DNR clear.
    pub const TRANSIENT_TRANSPORT: Status = Status {
        dnr: false,
        ..generic(0x22)
    };
    /// Namespace is Write Protected (SC 20h): a write-type command on a write-protected namespace.
    pub const NS_WRITE_PROTECTED: Status = generic(0x20);
    /// LBA Out of Range (SC 80h): the LBA range exceeds the namespace size (NSZE).
    pub const LBA_RANGE: Status = generic(0x80);
    /// Capacity Exceeded (SC 81h): the namespace has no capacity left for the command.
    pub const CAP_EXCEEDED: Status = generic(0x81);
    /// Reservation Conflict (NVMe Base 2.0 8.19).
    pub const RESERVATION_CONFLICT: Status = generic(0x83);
    /// Namespace Not Ready (SC 82h): the namespace cannot serve commands for now; DNR clear.
    pub const NS_NOT_READY: Status = Status {
        dnr: false,
        ..generic(0x82)
    };
    // Command specific status (SCT 1).
    /// Invalid Queue Identifier (SC 01h; for Connect, a QID above the number of I/O queues).
    pub const INVALID_QID: Status = specific(0x01);
    /// Invalid Queue Size (SC 02h): e.g. a Connect SQSIZE of zero or above CAP.MQES.
    pub const INVALID_QSIZE: Status = specific(0x02);
    /// Abort Command Limit Exceeded (SC 03h): more outstanding Aborts than ACL allows.
    pub const ABORT_LIMIT: Status = specific(0x03);
    /// Asynchronous Event Request Limit Exceeded (SC 05h): more outstanding AERs than AERL allows.
    pub const ASYNC_LIMIT: Status = specific(0x05);
    /// Invalid Firmware Slot (SC 06h).
    pub const INVALID_FW_SLOT: Status = specific(0x06);
    /// Invalid Log Page (SC 09h): the log identifier is unsupported.
    pub const INVALID_LOG_PAGE: Status = specific(0x09);
    /// Invalid Format (SC 0Ah): the LBA format or metadata settings are unsupported.
    pub const INVALID_FORMAT: Status = specific(0x0A);
    /// Feature Identifier Not Saveable (SC 0Dh): Set Features with SV set for a feature that
    /// cannot be saved.
    pub const FEATURE_NOT_SAVEABLE: Status = specific(0x0D);
    /// Feature Not Changeable (SC 0Eh).
    pub const FEATURE_NOT_CHANGEABLE: Status = specific(0x0E);
    /// Feature Not Namespace Specific (SC 0Fh): an NSID given for a controller-wide feature.
    pub const FEATURE_NOT_PER_NS: Status = specific(0x0F);
    /// Invalid Discovery Information (TP 8010, SCT 1h SC 2Fh): the discovery information of
    /// a Discovery Information Management command does not apply to its entity type.
    pub const INVALID_DISCOVERY_INFO: Status = specific(0x2F);
    /// Insufficient Discovery Resources (TP 8010, SCT 1h SC 32h): a registration holds more
    /// discovery information entries than the discovery controller has room for.
    pub const INSUFFICIENT_DISCOVERY_RESOURCES: Status = specific(0x32);
    /// Connect: Incompatible Format (RECFMT not supported).
    pub const CONNECT_INCOMPATIBLE_FORMAT: Status = specific(0x80);
    /// Connect: Controller Busy (e.g. QID already in use).
    pub const CONNECT_CTRL_BUSY: Status = specific(0x81);
    /// Connect: Invalid Parameters; DW0 carries IPO/IATTR.
    pub const CONNECT_INVALID_PARAM: Status = specific(0x82);
    /// Connect: Restart Discovery (SC 83h): the subsystem is not reachable this way any more; the
    /// host should read the discovery log again.
    pub const CONNECT_RESTART_DISC: Status = specific(0x83);
    /// Connect: Invalid Host (host not allowed to access the subsystem).
    pub const CONNECT_INVALID_HOST: Status = specific(0x84);
    /// Authentication Required: a command other than AUTH_Send / AUTH_Receive on a queue
    /// that has not completed its required authentication (NVMe Base 2.x, Figure 103).
    pub const AUTH_REQUIRED: Status = specific(0x91);
    /// Conflicting Attributes (SC 80h for Dataset Management, Read, Write): the command's
    /// attributes conflict with each other or with the namespace.
    pub const CONFLICTING_ATTRS: Status = specific(0x80);
    /// Copy: Command Size Limit Exceeded (NR above MSRC, a range above MSSRL, the total above
    /// MCL; NVM Command Set 1.0 Figure 33).
    pub const CMD_SIZE_LIMIT: Status = specific(0x83);
    // Media and data integrity errors (SCT 2).
    /// Write Fault (SCT 2h, SC 80h): the write failed in the backing store.
    pub const WRITE_FAULT: Status = media(0x80);
    /// Unrecovered Read Error (SCT 2h, SC 81h): the read failed in the backing store.
    pub const UNRECOVERED_READ: Status = media(0x81);
    /// Compare (and fused Compare-and-Write): the data differ. Retrying cannot help.
    pub const COMPARE_FAILURE: Status = Status {
        dnr: true,
        ..media(0x85)
    };
    /// Access Denied (SCT 2h, SC 86h): access to the data is prohibited (e.g. security state).
    pub const ACCESS_DENIED: Status = media(0x86);
    // Path related status (SCT 3), DNR clear: the host retries on another path.
    /// Asymmetric Access Persistent Loss (SCT 3h, SC 01h): the namespace is in ANA Persistent Loss
    /// state on this controller.
    pub const ANA_PERSISTENT_LOSS: Status = path(0x01);
    /// Asymmetric Access Inaccessible (SCT 3h, SC 02h): the namespace is ANA Inaccessible through
    /// this controller.
    pub const ANA_INACCESSIBLE: Status = path(0x02);
    /// Asymmetric Access Transition (SCT 3h, SC 03h): the namespace's ANA state is changing; retry
    /// later.
    pub const ANA_TRANSITION: Status = path(0x03);
    /// Controller Pathing Error (SCT 3h, SC 60h), DNR clear: this path's controller is gone
    /// (removed listener, reset); a multipath host fails the command over to another path.
    pub const CONTROLLER_PATHING_ERROR: Status = path(0x60);

    /// The same status with Do Not Retry set or cleared.
    pub const fn with_dnr(self, dnr: bool) -> Status {
        Status { dnr, ..self }
    }

    /// True for Successful Completion (SCT 0, SC 0), whatever More and DNR say.
    pub fn is_success(&self) -> bool {
        self.sct == 0 && self.sc == 0
    }

    /// The 15-bit status field as it appears in CQE DW3 bits 31:17 (i.e. the upper 16 bits of
    /// DW3 with bit 0, the phase tag, clear).
    pub fn to_field(self) -> u16 {
        (u16::from(self.sc) << 1)
            | (u16::from(self.sct & 0x7) << 9)
            | (u16::from(self.more) << 14)
            | (u16::from(self.dnr) << 15)
    }

    /// Inverse of [`Status::to_field`]; ignores the phase bit and CRD.
    pub fn from_field(v: u16) -> Status {
        Status {
            sc: ((v >> 1) & 0xFF) as u8,
            sct: ((v >> 9) & 0x7) as u8,
            more: v & (1 << 14) != 0,
            dnr: v & (1 << 15) != 0,
        }
    }

    /// Human-readable name for logs and CLI output.
    pub fn name(&self) -> &'static str {
        match (self.sct, self.sc) {
            (0, 0x00) => "Success",
            (0, 0x01) => "Invalid Command Opcode",
            (0, 0x02) => "Invalid Field in Command",
            (0, 0x03) => "Command ID Conflict",
            (0, 0x04) => "Data Transfer Error",
            (0, 0x06) => "Internal Error",
            (0, 0x07) => "Command Abort Requested",
            (0, 0x08) => "Command Aborted due to SQ Deletion",
            (0, 0x09) => "Command Aborted due to Failed Fused Command",
            (0, 0x0A) => "Command Aborted due to Missing Fused Command",
            (0, 0x0B) => "Invalid Namespace or Format",
            (0, 0x0C) => "Command Sequence Error",
            (0, 0x0D) => "Invalid SGL Segment Descriptor",
            (0, 0x0E) => "Invalid Number of SGL Descriptors",
            (0, 0x0F) => "Data SGL Length Invalid",
            (0, 0x11) => "SGL Descriptor Type Invalid",
            (0, 0x16) => "SGL Offset Invalid",
            (0, 0x18) => "Host Identifier Inconsistent Format",
            (0, 0x19) => "Keep Alive Timer Expired",
            (0, 0x1B) => "Command Aborted due to Preempt and Abort",
            (0, 0x20) => "Namespace is Write Protected",
            (0, 0x21) => "Command Interrupted",
            (0, 0x22) => "Transient Transport Error",
            (0, 0x80) => "LBA Out of Range",
            (0, 0x81) => "Capacity Exceeded",
            (0, 0x82) => "Namespace Not Ready",
            (0, 0x83) => "Reservation Conflict",
            (0, 0x91) => "Authentication Required",
            (1, 0x01) => "Invalid Queue Identifier",
            (1, 0x02) => "Invalid Queue Size",
            (1, 0x03) => "Abort Command Limit Exceeded",
            (1, 0x05) => "Asynchronous Event Request Limit Exceeded",
            (1, 0x09) => "Invalid Log Page",
            (1, 0x0D) => "Feature Identifier Not Saveable",
            (1, 0x0E) => "Feature Not Changeable",
            (1, 0x2F) => "Invalid Discovery Information",
            (1, 0x32) => "Insufficient Discovery Resources",
            (1, 0x80) => "Connect Incompatible Format / Conflicting Attributes",
            (1, 0x81) => "Connect Controller Busy",
            (1, 0x82) => "Connect Invalid Parameters",
            (1, 0x83) => "Connect Restart Discovery / Command Size Limit Exceeded",
            (1, 0x84) => "Connect Invalid Host",
            (2, 0x80) => "Write Fault",
            (2, 0x81) => "Unrecovered Read Error",
            (2, 0x85) => "Compare Failure",
            (2, 0x86) => "Access Denied",
            (3, 0x01) => "Asymmetric Access Persistent Loss",
            (3, 0x02) => "Asymmetric Access Inaccessible",
            (3, 0x03) => "Asymmetric Access Transition",
            _ => "Unknown Status",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_roundtrip() {
        for s in [
            Status::SUCCESS,
            Status::INVALID_FIELD,
            Status::LBA_RANGE,
            Status::CONNECT_INVALID_HOST,
        ] {
            assert_eq!(Status::from_field(s.to_field()), s);
        }
        // Linux: NVME_SC_INVALID_FIELD = 0x2, NVME_SC_DNR = 0x4000 in its (status >> 1) encoding.
        assert_eq!(Status::INVALID_FIELD.to_field() >> 1, 0x4002);
        assert_eq!(Status::CONNECT_INVALID_PARAM.to_field() >> 1, 0x4182);
    }
}
