//! Opcodes and command-type constants (NVMe Base 2.0 Figure 28/84, NVM Command Set 1.0,
//! NVMe-oF 1.1 Figure 34).

/// Admin command opcodes.
pub mod admin {
    pub const DELETE_IO_SQ: u8 = 0x00;
    pub const CREATE_IO_SQ: u8 = 0x01;
    pub const GET_LOG_PAGE: u8 = 0x02;
    pub const DELETE_IO_CQ: u8 = 0x04;
    pub const CREATE_IO_CQ: u8 = 0x05;
    pub const IDENTIFY: u8 = 0x06;
    pub const ABORT: u8 = 0x08;
    pub const SET_FEATURES: u8 = 0x09;
    pub const GET_FEATURES: u8 = 0x0A;
    pub const ASYNC_EVENT_REQUEST: u8 = 0x0C;
    pub const NS_MGMT: u8 = 0x0D;
    pub const FW_COMMIT: u8 = 0x10;
    pub const FW_DOWNLOAD: u8 = 0x11;
    pub const NS_ATTACH: u8 = 0x15;
    pub const KEEP_ALIVE: u8 = 0x18;
    pub const DIRECTIVE_SEND: u8 = 0x19;
    pub const DIRECTIVE_RECV: u8 = 0x1A;
    pub const FABRICS: u8 = 0x7F;
    pub const FORMAT_NVM: u8 = 0x80;
    pub const SECURITY_SEND: u8 = 0x81;
    pub const SECURITY_RECV: u8 = 0x82;
    pub const SANITIZE: u8 = 0x84;
    pub const GET_LBA_STATUS: u8 = 0x86;
}

/// NVM command set I/O opcodes.
pub mod io {
    pub const FLUSH: u8 = 0x00;
    pub const WRITE: u8 = 0x01;
    pub const READ: u8 = 0x02;
    pub const WRITE_UNCORRECTABLE: u8 = 0x04;
    pub const COMPARE: u8 = 0x05;
    pub const WRITE_ZEROES: u8 = 0x08;
    pub const DATASET_MGMT: u8 = 0x09;
    pub const VERIFY: u8 = 0x0C;
    pub const RESV_REGISTER: u8 = 0x0D;
    pub const RESV_REPORT: u8 = 0x0E;
    pub const RESV_ACQUIRE: u8 = 0x11;
    pub const RESV_RELEASE: u8 = 0x15;
    pub const COPY: u8 = 0x19;
}

/// Fabrics command types (FCTYPE, SQE byte 4 when opcode is 0x7F).
pub mod fctype {
    pub const PROPERTY_SET: u8 = 0x00;
    pub const CONNECT: u8 = 0x01;
    pub const PROPERTY_GET: u8 = 0x04;
    pub const AUTH_SEND: u8 = 0x05;
    pub const AUTH_RECV: u8 = 0x06;
    pub const DISCONNECT: u8 = 0x08;
}

/// Feature identifiers (Get/Set Features CDW10 bits 7:0).
pub mod feature {
    pub const ARBITRATION: u8 = 0x01;
    pub const POWER_MGMT: u8 = 0x02;
    pub const TEMP_THRESHOLD: u8 = 0x04;
    pub const ERROR_RECOVERY: u8 = 0x05;
    pub const VOLATILE_WC: u8 = 0x06;
    pub const NUM_QUEUES: u8 = 0x07;
    pub const IRQ_COALESCE: u8 = 0x08;
    pub const IRQ_CONFIG: u8 = 0x09;
    pub const WRITE_ATOMIC: u8 = 0x0A;
    pub const ASYNC_EVENT: u8 = 0x0B;
    pub const KATO: u8 = 0x0F;
    pub const HOST_ID: u8 = 0x81;
    /// Reservation Notification Mask (namespace-specific).
    pub const RESV_MASK: u8 = 0x82;
    /// Reservation Persistence (namespace-specific): PTPL state.
    pub const RESV_PERSIST: u8 = 0x83;
}

/// Dataset Management attribute: Deallocate (CDW11 bit 2).
pub const DSM_ATTR_DEALLOCATE: u32 = 1 << 2;
