//! The 64-byte Submission Queue Entry (NVMe Base 2.0, 4.2) with SGL data pointer (NVMe-oF).

use crate::ids::{CommandId, NamespaceId};
use crate::{le16, le32, le64, put16, put32, put64};

/// SGL descriptor type/subtype byte (SQE byte 39) for in-capsule data: Data Block, Offset.
pub const SGL_ICD: u8 = 0x01;
/// SGL descriptor type/subtype byte for transport data: Transport SGL Data Block, subtype Ah.
pub const SGL_TRANSPORT: u8 = 0x5A;
/// PSDT value (SQE byte 1 bits 7:6) meaning "SGL, metadata pointer contiguous", required by fabrics.
pub const PSDT_SGL_MPTR_CONTIG: u8 = 0b01;
/// FUSE (SQE byte 1 bits 1:0) 01b: first command of a fused operation.
pub const FUSE_FIRST: u8 = 0b01;
/// FUSE 10b: second command of a fused operation.
pub const FUSE_SECOND: u8 = 0b10;

/// A submission queue entry, kept as its wire bytes; accessors decode fields on demand so a
/// capsule is never copied into an intermediate struct.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Sqe(pub [u8; 64]);

impl std::fmt::Debug for Sqe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sqe")
            .field("opc", &format_args!("{:#04x}", self.opcode()))
            .field("cid", &self.cid().0)
            .field("nsid", &self.nsid().0)
            .field("cdw10", &format_args!("{:#x}", self.cdw10()))
            .finish()
    }
}

impl Default for Sqe {
    fn default() -> Self {
        Sqe([0; 64])
    }
}

impl Sqe {
    /// A new SQE with opcode and CID set and PSDT = SGL (as every fabrics command must).
    pub fn new(opcode: u8, cid: CommandId) -> Sqe {
        let mut s = Sqe([0; 64]);
        s.0[0] = opcode;
        s.0[1] = PSDT_SGL_MPTR_CONTIG << 6;
        put16(&mut s.0, 2, cid.0);
        s
    }
    /// OPC, byte 0.
    pub fn opcode(&self) -> u8 {
        self.0[0]
    }
    /// FLAGS byte 1: FUSE bits 1:0, PSDT bits 7:6.
    pub fn flags(&self) -> u8 {
        self.0[1]
    }
    /// PRP or SGL for Data Transfer (PSDT), byte 1 bits 7:6.
    pub fn psdt(&self) -> u8 {
        self.0[1] >> 6
    }
    /// Fused operation (FUSE), byte 1 bits 1:0.
    pub fn fuse(&self) -> u8 {
        self.0[1] & 0x3
    }
    /// Set FUSE (byte 1 bits 1:0), keeping PSDT.
    pub fn set_fuse(&mut self, fuse: u8) {
        self.0[1] = (self.0[1] & !0x3) | (fuse & 0x3);
    }
    /// Command Identifier (CID), bytes 2..4.
    pub fn cid(&self) -> CommandId {
        CommandId(le16(&self.0, 2))
    }
    /// Set the Command Identifier (CID), bytes 2..4.
    pub fn set_cid(&mut self, cid: CommandId) {
        put16(&mut self.0, 2, cid.0);
    }
    /// Namespace Identifier (NSID), bytes 4..8. For fabrics commands byte 4 is FCTYPE.
    pub fn nsid(&self) -> NamespaceId {
        NamespaceId(le32(&self.0, 4))
    }
    /// Set the Namespace Identifier (NSID), bytes 4..8.
    pub fn set_nsid(&mut self, nsid: NamespaceId) {
        put32(&mut self.0, 4, nsid.0);
    }
    /// Fabrics Command Type (FCTYPE), byte 4, for opcode 0x7F.
    pub fn fctype(&self) -> u8 {
        self.0[4]
    }
    /// Set the Fabrics Command Type (FCTYPE), byte 4 (opcode 7Fh only).
    pub fn set_fctype(&mut self, fctype: u8) {
        self.0[4] = fctype;
    }
    /// SGL1 address (bytes 24..32).
    pub fn sgl_addr(&self) -> u64 {
        le64(&self.0, 24)
    }
    /// SGL1 length (bytes 32..36).
    pub fn sgl_len(&self) -> u32 {
        le32(&self.0, 32)
    }
    /// SGL1 data length whatever the descriptor: 24 bits for a Keyed SGL Data Block (type 4h,
    /// NVMe/RDMA: bytes 32..35, the key follows), else 32 bits (bytes 32..36).
    pub fn sgl_data_len(&self) -> u32 {
        if self.sgl_type() >> 4 == 4 {
            u32::from_le_bytes([self.0[32], self.0[33], self.0[34], 0])
        } else {
            self.sgl_len()
        }
    }
    /// SGL1 descriptor type (bits 7:4) and subtype (bits 3:0), byte 39.
    pub fn sgl_type(&self) -> u8 {
        self.0[39]
    }
    /// Set SGL1 as in-capsule data (Data Block, Offset 0) of `len` bytes.
    pub fn set_sgl_icd(&mut self, len: u32) {
        put64(&mut self.0, 24, 0);
        put32(&mut self.0, 32, len);
        self.0[36..39].fill(0);
        self.0[39] = SGL_ICD;
    }
    /// Set SGL1 as transport data (R2T/H2CData or C2HData) of `len` bytes.
    pub fn set_sgl_transport(&mut self, len: u32) {
        put64(&mut self.0, 24, 0);
        put32(&mut self.0, 32, len);
        self.0[36..39].fill(0);
        self.0[39] = SGL_TRANSPORT;
    }
    /// Command Dword `n` (n in 0..16).
    pub fn cdw(&self, n: usize) -> u32 {
        le32(&self.0, n * 4)
    }
    /// Set Command Dword `n` (n in 0..16) to `v`.
    pub fn set_cdw(&mut self, n: usize, v: u32) {
        put32(&mut self.0, n * 4, v);
    }
    /// Command Dword 10 (bytes 40..44): first command-specific dword.
    pub fn cdw10(&self) -> u32 {
        self.cdw(10)
    }
    /// Command Dword 11 (bytes 44..48).
    pub fn cdw11(&self) -> u32 {
        self.cdw(11)
    }
    /// Command Dword 12 (bytes 48..52); NLB, FUA, DEAC for the NVM I/O commands.
    pub fn cdw12(&self) -> u32 {
        self.cdw(12)
    }
    /// Command Dword 13 (bytes 52..56).
    pub fn cdw13(&self) -> u32 {
        self.cdw(13)
    }
    /// Command Dword 14 (bytes 56..60).
    pub fn cdw14(&self) -> u32 {
        self.cdw(14)
    }
    /// Command Dword 15 (bytes 60..64).
    pub fn cdw15(&self) -> u32 {
        self.cdw(15)
    }
    /// Starting LBA (SLBA) of Read/Write/Write Zeroes/Compare: CDW10 | CDW11 << 32.
    pub fn slba(&self) -> u64 {
        le64(&self.0, 40)
    }
    /// Set the Starting LBA (CDW10 | CDW11 << 32, bytes 40..48).
    pub fn set_slba(&mut self, slba: u64) {
        put64(&mut self.0, 40, slba);
    }
    /// Number of Logical Blocks (NLB), CDW12 bits 15:0, **0's based**: returns the real count.
    pub fn nlb(&self) -> u32 {
        (self.cdw12() & 0xFFFF) + 1
    }
    /// Set the block count (1..=65536) of a Read/Write; stored 0's based.
    pub fn set_nlb(&mut self, count: u32) {
        let v = (self.cdw12() & !0xFFFF) | (count.saturating_sub(1) & 0xFFFF);
        self.set_cdw(12, v);
    }
    /// Raw bytes.
    pub fn as_bytes(&self) -> &[u8; 64] {
        &self.0
    }
    /// Raw bytes, writable (transport-specific SGL descriptors, e.g. RDMA keyed data blocks).
    pub fn as_bytes_mut(&mut self) -> &mut [u8; 64] {
        &mut self.0
    }
    /// Decode from a slice of at least 64 bytes.
    pub fn from_slice(b: &[u8]) -> Option<Sqe> {
        let a: [u8; 64] = b.get(..64)?.try_into().ok()?;
        Some(Sqe(a))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_offsets() {
        let mut s = Sqe::new(0x02, CommandId(0xBEEF));
        s.set_nsid(NamespaceId(7));
        s.set_slba(0x1122_3344_5566_7788);
        s.set_nlb(8);
        s.set_sgl_transport(4096);
        assert_eq!(s.0[0], 0x02);
        assert_eq!(s.0[1], 0x40);
        assert_eq!(&s.0[2..4], &[0xEF, 0xBE]);
        assert_eq!(s.nsid().0, 7);
        assert_eq!(s.cdw10(), 0x5566_7788);
        assert_eq!(s.cdw11(), 0x1122_3344);
        assert_eq!(s.cdw12() & 0xFFFF, 7);
        assert_eq!(s.nlb(), 8);
        assert_eq!(s.sgl_len(), 4096);
        assert_eq!(s.0[39], 0x5A);
        assert_eq!(s.psdt(), 1);
    }
}
