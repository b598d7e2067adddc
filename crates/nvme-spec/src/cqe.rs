//! The 16-byte Completion Queue Entry (NVMe Base 2.0, 4.6).

use crate::ids::{CommandId, QueueId};
use crate::status::Status;
use crate::{le16, le32, put16, put32};

/// A completion queue entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Cqe {
    /// Command specific result, DW0.
    pub dw0: u32,
    /// Command specific result, DW1.
    pub dw1: u32,
    /// SQ Head Pointer (SQHD), DW2 bits 15:0. 0xFFFF when SQ flow control is disabled.
    pub sqhd: u16,
    /// SQ Identifier (SQID), DW2 bits 31:16.
    pub sqid: u16,
    /// Command Identifier (CID), DW3 bits 15:0.
    pub cid: u16,
    /// Status field, DW3 bits 31:17 (phase bit unused on fabrics).
    pub status: Status,
}

impl Default for Status {
    fn default() -> Self {
        Status::SUCCESS
    }
}

impl Cqe {
    /// A completion for command `cid` of queue `sqid`: DW0, DW1 and SQHD zero.
    pub fn new(cid: CommandId, sqid: QueueId, status: Status) -> Cqe {
        Cqe {
            dw0: 0,
            dw1: 0,
            sqhd: 0,
            sqid: sqid.0,
            cid: cid.0,
            status,
        }
    }
    /// Result as a 64-bit value (DW1:DW0), as Property Get returns it.
    pub fn result64(&self) -> u64 {
        u64::from(self.dw0) | (u64::from(self.dw1) << 32)
    }
    /// Encode into the 16 wire bytes (little endian; the phase bit is 0).
    pub fn encode(&self, out: &mut [u8; 16]) {
        put32(out, 0, self.dw0);
        put32(out, 4, self.dw1);
        put16(out, 8, self.sqhd);
        put16(out, 10, self.sqid);
        put16(out, 12, self.cid);
        put16(out, 14, self.status.to_field());
    }
    /// The 16 wire bytes.
    pub fn to_bytes(&self) -> [u8; 16] {
        let mut b = [0; 16];
        self.encode(&mut b);
        b
    }
    /// Decode the 16 wire bytes (the phase bit is ignored).
    pub fn decode(b: &[u8; 16]) -> Cqe {
        Cqe {
            dw0: le32(b, 0),
            dw1: le32(b, 4),
            sqhd: le16(b, 8),
            sqid: le16(b, 10),
            cid: le16(b, 12),
            status: Status::from_field(le16(b, 14)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_offsets() {
        let c = Cqe {
            dw0: 1,
            dw1: 2,
            sqhd: 3,
            sqid: 4,
            cid: 5,
            status: Status::LBA_RANGE,
        };
        let b = c.to_bytes();
        assert_eq!(b[8], 3);
        assert_eq!(b[10], 4);
        assert_eq!(b[12], 5);
        assert_eq!(Cqe::decode(&b), c);
    }
}
