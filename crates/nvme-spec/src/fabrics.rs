//! NVMe-oF Fabrics commands: Connect (command and 1024-byte data), Property Get/Set, and the
//! controller registers exposed as properties (NVMe-oF 1.1 section 3; NVMe Base 2.0 3.1.4).

use crate::ids::{ControllerId, QueueId};
use crate::sqe::Sqe;
use crate::{le16, le32, le64, nul_padded_str, put16};

/// Size of the Connect command's data (NVMe-oF 1.1 Figure 20).
pub const CONNECT_DATA_LEN: usize = 1024;

/// Byte offsets inside the Connect data, used as IPO values in Invalid Parameters responses.
pub mod connect_data_off {
    /// HOSTID: Host Identifier, 16 bytes at offset 0.
    pub const HOSTID: u16 = 0;
    /// CNTLID: requested Controller ID, 2 bytes at offset 16 (FFFFh: dynamic controller model).
    pub const CNTLID: u16 = 16;
    /// SUBNQN: NVM Subsystem NQN, 256 bytes at offset 256.
    pub const SUBNQN: u16 = 256;
    /// HOSTNQN: Host NQN, 256 bytes at offset 512.
    pub const HOSTNQN: u16 = 512;
}

/// Byte offsets inside the Connect SQE, used as IPO values.
pub mod connect_sqe_off {
    /// RECFMT: Record Format, 2 bytes at SQE offset 40.
    pub const RECFMT: u16 = 40;
    /// QID: Queue ID, 2 bytes at SQE offset 42.
    pub const QID: u16 = 42;
    /// SQSIZE: Submission Queue Size, 2 bytes at SQE offset 44.
    pub const SQSIZE: u16 = 44;
    /// CATTR: Connect Attributes, 1 byte at SQE offset 46.
    pub const CATTR: u16 = 46;
    /// KATO: Keep Alive Timeout, 4 bytes at SQE offset 48.
    pub const KATO: u16 = 48;
}

/// IATTR bit in Connect Invalid Parameters DW0 (bit 16): 1 = IPO is an offset into the data.
pub const IATTR_CONNECT_DATA: u32 = 1 << 16;

/// Connect command fields (SQE bytes 40..56).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectCmd {
    /// Record Format (RECFMT), must be 0.
    pub recfmt: u16,
    /// Queue ID (QID).
    pub qid: QueueId,
    /// Submission Queue Size (SQSIZE), **0's based** as on the wire.
    pub sqsize: u16,
    /// Connect Attributes (CATTR).
    pub cattr: u8,
    /// Keep Alive Timeout in ms (KATO), admin queue only.
    pub kato: u32,
}

impl ConnectCmd {
    /// Read the Connect fields from SQE bytes 40..52 (no validation: the caller checks them).
    pub fn from_sqe(s: &Sqe) -> ConnectCmd {
        ConnectCmd {
            recfmt: le16(&s.0, 40),
            qid: QueueId(le16(&s.0, 42)),
            sqsize: le16(&s.0, 44),
            cattr: s.0[46],
            kato: le32(&s.0, 48),
        }
    }
    /// CATTR bit 2: disable SQ flow control.
    pub fn dissqfc(&self) -> bool {
        self.cattr & 0x4 != 0
    }
    /// Number of entries the SQ holds (SQSIZE + 1).
    pub fn queue_entries(&self) -> u32 {
        u32::from(self.sqsize) + 1
    }
    /// A Fabrics Connect SQE with command identifier `cid` carrying these fields (the caller
    /// sets the SGL for the 1024 bytes of [`ConnectData`]).
    pub fn to_sqe(&self, cid: crate::ids::CommandId) -> Sqe {
        let mut s = Sqe::new(crate::opcode::admin::FABRICS, cid);
        s.set_fctype(crate::opcode::fctype::CONNECT);
        self.encode_into(&mut s);
        s
    }
    /// Write the fields into SQE bytes 40..52; opcode, FCTYPE and SGL are left as they are.
    pub fn encode_into(&self, s: &mut Sqe) {
        put16(&mut s.0, 40, self.recfmt);
        put16(&mut s.0, 42, self.qid.0);
        put16(&mut s.0, 44, self.sqsize);
        s.0[46] = self.cattr;
        s.0[48..52].copy_from_slice(&self.kato.to_le_bytes());
    }
}

/// Connect data (1024 bytes): host identifier, controller id, subsystem and host NQNs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectData {
    /// Host Identifier (HOSTID), 128 bits; identifies the host across its controllers.
    pub hostid: [u8; 16],
    /// Controller ID (CNTLID): FFFFh asks for any controller (dynamic model); an I/O queue's
    /// Connect names the controller its admin queue got.
    pub cntlid: ControllerId,
    /// NVM Subsystem NQN (SUBNQN) the host connects to; at most 223 bytes.
    pub subnqn: String,
    /// Host NQN; may be empty (SPDK's initiator without a configured host NQN).
    pub hostnqn: String,
}

/// Why Connect data could not be decoded; carries the IPO to report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectDataError {
    /// Offset in the Connect data of the bad field.
    pub offset: u16,
}

impl ConnectData {
    /// Decode the 1024-byte Connect data; a short buffer or a malformed NQN is an error carrying
    /// the offset to report as IPO.
    pub fn decode(b: &[u8]) -> Result<ConnectData, ConnectDataError> {
        if b.len() < CONNECT_DATA_LEN {
            return Err(ConnectDataError { offset: 0 });
        }
        let mut hostid = [0u8; 16];
        hostid.copy_from_slice(&b[0..16]);
        let subnqn = nqn_field(&b[256..512]).ok_or(ConnectDataError {
            offset: connect_data_off::SUBNQN,
        })?;
        // An empty HOSTNQN is what SPDK's initiator sends when its user gave none; the Linux
        // target and SPDK accept it for subsystems open to any host, so decoding does too
        // (access control decides).
        let hostnqn = if b[512] == 0 {
            ""
        } else {
            nqn_field(&b[512..768]).ok_or(ConnectDataError {
                offset: connect_data_off::HOSTNQN,
            })?
        };
        Ok(ConnectData {
            hostid,
            cntlid: ControllerId(le16(b, 16)),
            subnqn: subnqn.to_string(),
            hostnqn: hostnqn.to_string(),
        })
    }
    /// Encode to the 1024-byte wire form; NQNs longer than 223 bytes are truncated.
    pub fn encode(&self) -> [u8; CONNECT_DATA_LEN] {
        let mut b = [0u8; CONNECT_DATA_LEN];
        b[0..16].copy_from_slice(&self.hostid);
        put16(&mut b, 16, self.cntlid.0);
        let s = self.subnqn.as_bytes();
        let n = s.len().min(crate::NQN_MAX_LEN);
        b[256..256 + n].copy_from_slice(&s[..n]);
        let h = self.hostnqn.as_bytes();
        let n = h.len().min(crate::NQN_MAX_LEN);
        b[512..512 + n].copy_from_slice(&h[..n]);
        b
    }
}

/// An NQN field: NUL-terminated within 256 bytes, non-empty, ≤ 223 bytes, printable.
fn nqn_field(b: &[u8]) -> Option<&str> {
    let end = b.iter().position(|&c| c == 0)?;
    if end == 0 || end > crate::NQN_MAX_LEN {
        return None;
    }
    nul_padded_str(&b[..end])
}

/// Property Get/Set fields (SQE bytes 40..56).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PropertyCmd {
    /// ATTRIB bits 2:0: 0 = 4-byte property, 1 = 8-byte property.
    pub size8: bool,
    /// Property offset (OFST).
    pub ofst: u32,
    /// Value (Property Set only).
    pub value: u64,
}

/// A Property Get/Set with an ATTRIB size other than 4 or 8 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InvalidPropertySize(pub u8);

impl PropertyCmd {
    /// Decode a Property Get/Set from the SQE; an ATTRIB size other than 4 or 8 bytes is an
    /// error.
    pub fn from_sqe(s: &Sqe) -> Result<PropertyCmd, InvalidPropertySize> {
        let size = s.0[40] & 0x7;
        if size > 1 {
            return Err(InvalidPropertySize(size));
        }
        Ok(PropertyCmd {
            size8: size == 1,
            ofst: le32(&s.0, 44),
            value: le64(&s.0, 48),
        })
    }
    /// Write ATTRIB, OFST and VALUE into SQE bytes 40..56.
    pub fn encode_into(&self, s: &mut Sqe) {
        s.0[40] = u8::from(self.size8);
        s.0[44..48].copy_from_slice(&self.ofst.to_le_bytes());
        s.0[48..56].copy_from_slice(&self.value.to_le_bytes());
    }
}

/// Controller property (register) offsets.
pub mod prop {
    /// Controller Capabilities, 8 bytes.
    pub const CAP: u32 = 0x00;
    /// Version, 4 bytes.
    pub const VS: u32 = 0x08;
    /// Controller Configuration, 4 bytes.
    pub const CC: u32 = 0x14;
    /// Controller Status, 4 bytes.
    pub const CSTS: u32 = 0x1C;
    /// NVM Subsystem Reset, 4 bytes.
    pub const NSSR: u32 = 0x20;
    /// Controller Ready Timeouts, 4 bytes.
    pub const CRTO: u32 = 0x68;
}

/// Controller Capabilities (CAP) builder/decoder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cap {
    /// Maximum Queue Entries Supported, **0's based**.
    pub mqes: u16,
    /// Timeout in 500 ms units (TO).
    pub to: u8,
    /// NVM Command Set supported (CSS bit 0 of the field, CAP bit 37).
    pub css_nvm: bool,
    /// One or more I/O Command Sets supported (CSS bit 6 of the field, CAP bit 43).
    pub css_iocs: bool,
}

impl Cap {
    /// The 64-bit register value: MQES, CQR set, TO and CSS; DSTRD, MPSMIN and MPSMAX are 0
    /// (4 KiB pages).
    pub fn to_u64(self) -> u64 {
        u64::from(self.mqes)
            | (1u64 << 16) // CQR: contiguous queues required
            | (u64::from(self.to) << 24)
            | (u64::from(self.css_nvm) << 37)
            | (u64::from(self.css_iocs) << 43)
        // DSTRD, MPSMIN, MPSMAX = 0 (4 KiB pages)
    }
    /// Read MQES, TO and the two CSS bits back from a CAP value.
    pub fn from_u64(v: u64) -> Cap {
        Cap {
            mqes: (v & 0xFFFF) as u16,
            to: ((v >> 24) & 0xFF) as u8,
            css_nvm: v & (1 << 37) != 0,
            css_iocs: v & (1 << 43) != 0,
        }
    }
}

/// Controller Configuration (CC) fields.
pub mod cc {
    /// Enable (EN), bit 0.
    pub const EN: u32 = 1;
    /// I/O Command Set Selected (CSS), bits 6:4: 0 NVM, 6 all supported I/O command sets.
    pub fn css(cc: u32) -> u32 {
        (cc >> 4) & 0x7
    }
    /// Memory Page Size (MPS), bits 10:7: the page size is 2^(12 + MPS) bytes.
    pub fn mps(cc: u32) -> u32 {
        (cc >> 7) & 0xF
    }
    /// Arbitration Mechanism Selected (AMS), bits 13:11: 0 round robin.
    pub fn ams(cc: u32) -> u32 {
        (cc >> 11) & 0x7
    }
    /// Shutdown Notification (SHN), bits 15:14: 0 none, 1 normal, 2 abrupt.
    pub fn shn(cc: u32) -> u32 {
        (cc >> 14) & 0x3
    }
    /// I/O Submission Queue Entry Size (IOSQES), bits 19:16: log2 of the size, 6 for 64 bytes.
    pub fn iosqes(cc: u32) -> u32 {
        (cc >> 16) & 0xF
    }
    /// I/O Completion Queue Entry Size (IOCQES), bits 23:20: log2 of the size, 4 for 16 bytes.
    pub fn iocqes(cc: u32) -> u32 {
        (cc >> 20) & 0xF
    }
    /// The SHN field, bits 15:14.
    pub const SHN_MASK: u32 = 0x3 << 14;
    /// SHN = 01b: normal shutdown notification.
    pub const SHN_NORMAL: u32 = 1 << 14;
    /// CC value with EN=1, IOSQES=6, IOCQES=4, CSS from argument (0 = NVM, 6 = all I/O sets).
    pub fn enable_value(css: u32) -> u32 {
        EN | ((css & 7) << 4) | (6 << 16) | (4 << 20)
    }
}

/// Controller Status (CSTS) fields.
pub mod csts {
    /// Ready (RDY), bit 0: the controller is ready to process commands after CC.EN was set.
    pub const RDY: u32 = 1;
    /// Controller Fatal Status (CFS), bit 1.
    pub const CFS: u32 = 1 << 1;
    /// Shutdown Status (SHST), bits 3:2: 0 normal, 1 occurring, 2 complete.
    pub const SHST_MASK: u32 = 0x3 << 2;
    /// SHST = 01b: shutdown processing occurring.
    pub const SHST_OCCURRING: u32 = 1 << 2;
    /// SHST = 10b: shutdown processing complete.
    pub const SHST_COMPLETE: u32 = 2 << 2;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_data_roundtrip() {
        let d = ConnectData {
            hostid: [7; 16],
            cntlid: ControllerId::DYNAMIC,
            subnqn: "nqn.2026-11.io.ebof:default".into(),
            hostnqn: "nqn.2014-08.org.nvmexpress:uuid:1234".into(),
        };
        let b = d.encode();
        assert_eq!(&b[16..18], &[0xFF, 0xFF]);
        assert_eq!(&b[256..260], b"nqn.");
        assert_eq!(ConnectData::decode(&b).unwrap(), d);
    }

    #[test]
    fn connect_data_rejects_bad_nqn() {
        let mut b = [0u8; 1024];
        b[512..516].copy_from_slice(b"nqn.");
        assert_eq!(ConnectData::decode(&b).unwrap_err().offset, 256);
        b[256..260].copy_from_slice(b"nqn.");
        b[512..1024].fill(b'a');
        assert_eq!(ConnectData::decode(&b).unwrap_err().offset, 512);
        assert!(ConnectData::decode(&b[..100]).is_err());
    }

    #[test]
    fn connect_data_accepts_empty_hostnqn() {
        // SPDK's initiator without a configured host NQN sends HOSTNQN all zeros.
        let mut b = [0u8; 1024];
        b[256..260].copy_from_slice(b"nqn.");
        let d = ConnectData::decode(&b).unwrap();
        assert_eq!(d.hostnqn, "");
        assert_eq!(d.subnqn, "nqn.");
        // An empty SUBNQN is still an error.
        b[256..260].fill(0);
        assert_eq!(ConnectData::decode(&b).unwrap_err().offset, 256);
    }

    #[test]
    fn cap_bits() {
        let c = Cap {
            mqes: 127,
            to: 15,
            css_nvm: true,
            css_iocs: true,
        };
        let v = c.to_u64();
        assert_eq!(v & 0xFFFF, 127);
        assert_eq!((v >> 16) & 1, 1);
        assert_eq!(Cap::from_u64(v), c);
    }
}
