//! Opcodes and command-type constants (NVMe Base 2.0 Figure 28/84, NVM Command Set 1.0,
//! NVMe-oF 1.1 Figure 34).

/// Admin command opcodes.
pub mod admin {
    /// Delete I/O Submission Queue (PCIe only; not supported over Fabrics).
    pub const DELETE_IO_SQ: u8 = 0x00;
    /// Create I/O Submission Queue (PCIe only; Fabrics creates queues with Connect).
    pub const CREATE_IO_SQ: u8 = 0x01;
    /// Get Log Page: log identifier in CDW10 bits 7:0, dword count in NUMDL/NUMDU.
    pub const GET_LOG_PAGE: u8 = 0x02;
    /// Delete I/O Completion Queue (PCIe only).
    pub const DELETE_IO_CQ: u8 = 0x04;
    /// Create I/O Completion Queue (PCIe only).
    pub const CREATE_IO_CQ: u8 = 0x05;
    /// Identify: the data structure returned is chosen by CNS (CDW10 bits 7:0).
    pub const IDENTIFY: u8 = 0x06;
    /// Abort: abort the command with CID in CDW10 bits 31:16 on the SQ in CDW10 bits 15:0.
    pub const ABORT: u8 = 0x08;
    /// Set Features: feature identifier in CDW10 bits 7:0, Save in CDW10 bit 31.
    pub const SET_FEATURES: u8 = 0x09;
    /// Get Features: feature identifier in CDW10 bits 7:0, Select (current, default, saved,
    /// supported capabilities) in bits 10:8.
    pub const GET_FEATURES: u8 = 0x0A;
    /// Asynchronous Event Request: stays outstanding until the controller has an event to report.
    pub const ASYNC_EVENT_REQUEST: u8 = 0x0C;
    /// Namespace Management: create or delete a namespace.
    pub const NS_MGMT: u8 = 0x0D;
    /// Firmware Commit: activate a downloaded image in a firmware slot.
    pub const FW_COMMIT: u8 = 0x10;
    /// Firmware Image Download: transfer (part of) a firmware image.
    pub const FW_DOWNLOAD: u8 = 0x11;
    /// Namespace Attachment: attach a namespace to, or detach it from, controllers.
    pub const NS_ATTACH: u8 = 0x15;
    /// Keep Alive: restarts the controller's Keep Alive Timer (KATO).
    pub const KEEP_ALIVE: u8 = 0x18;
    /// Directive Send: transfer data for a directive (e.g. streams).
    pub const DIRECTIVE_SEND: u8 = 0x19;
    /// Directive Receive: read the data of a directive.
    pub const DIRECTIVE_RECV: u8 = 0x1A;
    /// Discovery Information Management (TP 8010): a host or discovery controller registers,
    /// updates or deregisters its discovery information with a discovery controller
    /// (see [`crate::dim`]).
    pub const DISCOVERY_INFO_MGMT: u8 = 0x21;
    /// Fabrics command: the command type is FCTYPE in SQE byte 4 (see [`super::fctype`]);
    /// valid on admin and I/O queues.
    pub const FABRICS: u8 = 0x7F;
    /// Format NVM: low-level format of a namespace with a chosen LBA format.
    pub const FORMAT_NVM: u8 = 0x80;
    /// Security Send: security protocol data from host to controller (SECP in CDW10 bits 31:24).
    pub const SECURITY_SEND: u8 = 0x81;
    /// Security Receive: security protocol data from controller to host.
    pub const SECURITY_RECV: u8 = 0x82;
    /// Sanitize: erase all user data in the NVM subsystem.
    pub const SANITIZE: u8 = 0x84;
    /// Get LBA Status: report potentially unrecoverable LBAs.
    pub const GET_LBA_STATUS: u8 = 0x86;
}

/// NVM command set I/O opcodes.
pub mod io {
    /// Flush: commit the volatile write cache of the namespace (all namespaces for NSID
    /// FFFFFFFFh) to non-volatile media.
    pub const FLUSH: u8 = 0x00;
    /// Write: SLBA in CDW10-11, NLB (0's based block count) in CDW12 bits 15:0, FUA in CDW12 bit 30.
    pub const WRITE: u8 = 0x01;
    /// Read: SLBA in CDW10-11, NLB (0's based block count) in CDW12 bits 15:0.
    pub const READ: u8 = 0x02;
    /// Write Uncorrectable: mark an LBA range invalid so that reads of it fail.
    pub const WRITE_UNCORRECTABLE: u8 = 0x04;
    /// Compare: compare host data with an LBA range, Compare Failure if they differ (first
    /// command of a fused Compare-and-Write).
    pub const COMPARE: u8 = 0x05;
    /// Write Zeroes: set an LBA range to zero without data transfer (DEAC, CDW12 bit 25,
    /// allows deallocation).
    pub const WRITE_ZEROES: u8 = 0x08;
    /// Dataset Management: attributes for up to 256 LBA ranges, e.g. Deallocate
    /// ([`super::DSM_ATTR_DEALLOCATE`]).
    pub const DATASET_MGMT: u8 = 0x09;
    /// Verify: check that an LBA range is readable, without data transfer.
    pub const VERIFY: u8 = 0x0C;
    /// Reservation Register: register, unregister or replace a reservation key.
    pub const RESV_REGISTER: u8 = 0x0D;
    /// Reservation Report: return the Reservation Status data structure.
    pub const RESV_REPORT: u8 = 0x0E;
    /// Reservation Acquire: acquire, preempt, or preempt and abort a reservation.
    pub const RESV_ACQUIRE: u8 = 0x11;
    /// Reservation Release: release or clear a reservation.
    pub const RESV_RELEASE: u8 = 0x15;
    /// Copy: copy one or more source LBA ranges to a destination LBA of the same namespace.
    pub const COPY: u8 = 0x19;
}

/// Fabrics command types (FCTYPE, SQE byte 4 when opcode is 0x7F).
pub mod fctype {
    /// Property Set: write a controller property (e.g. CC) at the offset in the command.
    pub const PROPERTY_SET: u8 = 0x00;
    /// Connect: create a queue (on the admin queue, also the controller association); carries
    /// the 1024-byte Connect data.
    pub const CONNECT: u8 = 0x01;
    /// Property Get: read a controller property (CAP, VS, CC, CSTS, ...), 4 or 8 bytes wide.
    pub const PROPERTY_GET: u8 = 0x04;
    /// Authentication Send: a DH-HMAC-CHAP message from host to controller (TP 8006).
    pub const AUTH_SEND: u8 = 0x05;
    /// Authentication Receive: fetch the controller's next DH-HMAC-CHAP message (TP 8006).
    pub const AUTH_RECV: u8 = 0x06;
    /// Disconnect: delete the I/O queue the command is submitted on.
    pub const DISCONNECT: u8 = 0x08;
}

/// Feature identifiers (Get/Set Features CDW10 bits 7:0).
pub mod feature {
    /// Arbitration (FID 01h): arbitration burst and the weights of submission queue classes.
    pub const ARBITRATION: u8 = 0x01;
    /// Power Management (FID 02h): power state and workload hint.
    pub const POWER_MGMT: u8 = 0x02;
    /// Temperature Threshold (FID 04h): over/under temperature thresholds, in kelvin.
    pub const TEMP_THRESHOLD: u8 = 0x04;
    /// Error Recovery (FID 05h): Time Limited Error Recovery (TLER, 100 ms units) and DULBE.
    pub const ERROR_RECOVERY: u8 = 0x05;
    /// Volatile Write Cache (FID 06h): bit 0 (WCE) enables the write cache.
    pub const VOLATILE_WC: u8 = 0x06;
    /// Number of Queues (FID 07h): NSQR in bits 15:0, NCQR in bits 31:16, both 0's based.
    pub const NUM_QUEUES: u8 = 0x07;
    /// Interrupt Coalescing (FID 08h): aggregation threshold and time (PCIe only).
    pub const IRQ_COALESCE: u8 = 0x08;
    /// Interrupt Vector Configuration (FID 09h) (PCIe only).
    pub const IRQ_CONFIG: u8 = 0x09;
    /// Write Atomicity Normal (FID 0Ah): bit 0 (DN) disables normal atomicity (AWUN/NAWUN).
    pub const WRITE_ATOMIC: u8 = 0x0A;
    /// Asynchronous Event Configuration (FID 0Bh): which events are reported through AERs.
    pub const ASYNC_EVENT: u8 = 0x0B;
    /// Keep Alive Timer (FID 0Fh): the Keep Alive Timeout in milliseconds (CDW11).
    pub const KATO: u8 = 0x0F;
    /// Host Identifier (FID 81h): 64-bit, or 128-bit with EXHID, used to group controllers for
    /// reservations.
    pub const HOST_ID: u8 = 0x81;
    /// Reservation Notification Mask (namespace-specific).
    pub const RESV_MASK: u8 = 0x82;
    /// Reservation Persistence (namespace-specific): PTPL state.
    pub const RESV_PERSIST: u8 = 0x83;
}

/// Dataset Management attribute: Deallocate (CDW11 bit 2).
pub const DSM_ATTR_DEALLOCATE: u32 = 1 << 2;
