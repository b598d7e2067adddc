//! Reservations (NVMe Base 2.0 section 8.19; commands in 7.2-7.5 of the NVM Command Set spec):
//! command fields of Reservation Register / Acquire / Release / Report, their data buffers,
//! the Reservation Status (extended) data structure, the Reservation Notification log page and
//! the RESCAP bits of Identify Namespace.
//!
//! Decoding is fallible and bounds-checked; encoding is infallible.

use crate::{le64, put16, put32, put64};

/// Reservation types (RTYPE, Reservation Acquire / Release CDW10 bits 15:8).
pub mod rtype {
    /// Write Exclusive: only the holder may write; anyone may read.
    pub const WRITE_EXCLUSIVE: u8 = 1;
    /// Exclusive Access: only the holder may read or write.
    pub const EXCLUSIVE_ACCESS: u8 = 2;
    /// Write Exclusive - Registrants Only: every registrant may write; anyone may read.
    pub const WRITE_EXCLUSIVE_REG_ONLY: u8 = 3;
    /// Exclusive Access - Registrants Only: only registrants may read or write.
    pub const EXCLUSIVE_ACCESS_REG_ONLY: u8 = 4;
    /// Write Exclusive - All Registrants: every registrant is a holder; anyone may read.
    pub const WRITE_EXCLUSIVE_ALL_REGS: u8 = 5;
    /// Exclusive Access - All Registrants: every registrant is a holder; only registrants have access.
    pub const EXCLUSIVE_ACCESS_ALL_REGS: u8 = 6;
}

/// Reservation Register Action (RREGA, CDW10 bits 2:0).
pub mod rrega {
    /// Register Reservation Key: register NRKEY for this host.
    pub const REGISTER: u8 = 0;
    /// Unregister Reservation Key: remove this host's registration (CRKEY must match unless IEKEY).
    pub const UNREGISTER: u8 = 1;
    /// Replace Reservation Key: change this host's key from CRKEY to NRKEY.
    pub const REPLACE: u8 = 2;
}

/// Reservation Acquire Action (RACQA, CDW10 bits 2:0).
pub mod racqa {
    /// Acquire: take the reservation of type RTYPE, if no other host holds one.
    pub const ACQUIRE: u8 = 0;
    /// Preempt: remove the registrations (and reservation) of the hosts holding key PRKEY.
    pub const PREEMPT: u8 = 1;
    /// Preempt and Abort: as Preempt, and abort the preempted hosts' outstanding commands.
    pub const PREEMPT_AND_ABORT: u8 = 2;
}

/// Reservation Release Action (RRELA, CDW10 bits 2:0).
pub mod rrela {
    /// Release: give up the reservation this host holds (RTYPE must match).
    pub const RELEASE: u8 = 0;
    /// Clear: release the reservation and remove every registration of the namespace.
    pub const CLEAR: u8 = 1;
}

/// Change Persist Through Power Loss State (CPTPL, Reservation Register CDW10 bits 31:30).
pub mod cptpl {
    /// No change to the PTPL state.
    pub const NO_CHANGE: u8 = 0b00;
    /// Reserved value; rejected with Invalid Field in Command.
    pub const RESERVED: u8 = 0b01;
    /// Set PTPL to 0: reservations are released and registrations cleared on power loss.
    pub const CLEAR: u8 = 0b10;
    /// Set PTPL to 1: reservations and registrations persist through power loss.
    pub const SET: u8 = 0b11;
}

/// Reservation Capabilities (RESCAP, Identify Namespace byte 31).
pub mod rescap {
    /// Persist Through Power Loss supported.
    pub const PTPL: u8 = 1 << 0;
    /// Write Exclusive ([`super::rtype::WRITE_EXCLUSIVE`]) supported.
    pub const WRITE_EXCLUSIVE: u8 = 1 << 1;
    /// Exclusive Access ([`super::rtype::EXCLUSIVE_ACCESS`]) supported.
    pub const EXCLUSIVE_ACCESS: u8 = 1 << 2;
    /// Write Exclusive - Registrants Only supported.
    pub const WRITE_EXCLUSIVE_REG_ONLY: u8 = 1 << 3;
    /// Exclusive Access - Registrants Only supported.
    pub const EXCLUSIVE_ACCESS_REG_ONLY: u8 = 1 << 4;
    /// Write Exclusive - All Registrants supported.
    pub const WRITE_EXCLUSIVE_ALL_REGS: u8 = 1 << 5;
    /// Exclusive Access - All Registrants supported.
    pub const EXCLUSIVE_ACCESS_ALL_REGS: u8 = 1 << 6;
    /// Ignore Existing Key behaves as NVMe 1.3 and later define it.
    pub const IEKEY: u8 = 1 << 7;
    /// All six reservation types.
    pub const ALL_TYPES: u8 = 0b0111_1110;
}

/// Reservation Notification Mask feature (82h) bits, also used to name notification types.
pub mod notify_mask {
    /// Mask Registration Preempted notifications.
    pub const REG_PREEMPTED: u32 = 1 << 1;
    /// Mask Reservation Released notifications.
    pub const RESV_RELEASED: u32 = 1 << 2;
    /// Mask Reservation Preempted notifications.
    pub const RESV_PREEMPTED: u32 = 1 << 3;
    /// Every bit that may be set.
    pub const ALL: u32 = REG_PREEMPTED | RESV_RELEASED | RESV_PREEMPTED;
}

/// Reservation Notification log page types (byte 8 of the page).
pub mod log_type {
    /// Empty Log Page: no notification is pending.
    pub const EMPTY: u8 = 0;
    /// Registration Preempted: another host preempted this host's registration.
    pub const REGISTRATION_PREEMPTED: u8 = 1;
    /// Reservation Released: the reservation this host was registered under was released.
    pub const RESERVATION_RELEASED: u8 = 2;
    /// Reservation Preempted: the reservation this host was registered under was preempted.
    pub const RESERVATION_PREEMPTED: u8 = 3;
}

/// Fields of CDW10 common to the four reservation commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResvCdw10 {
    /// The action (RREGA / RACQA / RRELA), bits 2:0.
    pub action: u8,
    /// Ignore Existing Key, bit 3.
    pub iekey: bool,
    /// Reservation type, bits 15:8 (Acquire, Release).
    pub rtype: u8,
    /// Change PTPL state, bits 31:30 (Register).
    pub cptpl: u8,
}

impl ResvCdw10 {
    /// Split CDW10 into its fields; the reserved bits 7:4 and 29:16 are ignored.
    pub fn from_cdw10(v: u32) -> ResvCdw10 {
        ResvCdw10 {
            action: (v & 0x7) as u8,
            iekey: v & (1 << 3) != 0,
            rtype: ((v >> 8) & 0xFF) as u8,
            cptpl: (v >> 30) as u8,
        }
    }

    /// Build CDW10 from the fields; values wider than their field are masked.
    pub fn to_cdw10(self) -> u32 {
        u32::from(self.action & 0x7)
            | (u32::from(self.iekey) << 3)
            | (u32::from(self.rtype) << 8)
            | (u32::from(self.cptpl & 0x3) << 30)
    }
}

/// The data buffer of Register (CRKEY, NRKEY) and Acquire (CRKEY, PRKEY): two keys, 16 bytes.
/// Release carries CRKEY only (8 bytes): `second` is then 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ResvKeys {
    /// Current Reservation Key.
    pub crkey: u64,
    /// New (Register) or Preempt (Acquire) Reservation Key.
    pub second: u64,
}

/// Data buffer too short for the command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShortData;

impl ResvKeys {
    /// Register and Acquire data length.
    pub const LEN: usize = 16;
    /// Release data length.
    pub const RELEASE_LEN: usize = 8;

    /// Decode `b`: 8 bytes give CRKEY only, 16 or more both keys.
    pub fn decode(b: &[u8]) -> Result<ResvKeys, ShortData> {
        if b.len() < Self::RELEASE_LEN {
            return Err(ShortData);
        }
        let crkey = le64(b, 0);
        let second = if b.len() >= Self::LEN { le64(b, 8) } else { 0 };
        Ok(ResvKeys { crkey, second })
    }

    /// The 16-byte Register/Acquire buffer (CRKEY at byte 0, the second key at byte 8).
    pub fn encode(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        put64(&mut b, 0, self.crkey);
        put64(&mut b, 8, self.second);
        b
    }
}

/// One registrant in a Reservation Report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegisteredCtrl {
    /// Controller ID (FFFFh: the dynamic controller model, one entry per host).
    pub cntlid: u16,
    /// Holds the reservation (RCSTS bit 0).
    pub holds: bool,
    /// Reservation Key (RKEY) this controller's host registered.
    pub rkey: u64,
    /// 128-bit host identifier.
    pub hostid: [u8; 16],
}

/// Reservation Status data structure, extended form (Report with EDS = 1).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResvStatusExt {
    /// Generation (PRGEN).
    pub generation: u32,
    /// Reservation type held (0: none).
    pub rtype: u8,
    /// Persist Through Power Loss State.
    pub ptpls: bool,
    /// Registered Controller Extended Data Structures, one per registrant (REGCTL counts them).
    pub regs: Vec<RegisteredCtrl>,
}

impl ResvStatusExt {
    /// Header length.
    pub const HEADER_LEN: usize = 64;
    /// Length of one Registered Controller Extended Data Structure.
    pub const ENTRY_LEN: usize = 64;

    /// Encode into `out` (NUMD bytes): what fits is written, the rest is zero. REGCTL counts
    /// every registrant even when not all entries fit, as the spec requires.
    pub fn encode(&self, out: &mut [u8]) {
        out.fill(0);
        let mut head = [0u8; Self::HEADER_LEN];
        put32(&mut head, 0, self.generation);
        head[4] = self.rtype;
        put16(
            &mut head,
            5,
            u16::try_from(self.regs.len()).unwrap_or(u16::MAX),
        );
        head[9] = u8::from(self.ptpls);
        let n = out.len().min(Self::HEADER_LEN);
        out[..n].copy_from_slice(&head[..n]);
        for (i, r) in self.regs.iter().enumerate() {
            let mut e = [0u8; Self::ENTRY_LEN];
            put16(&mut e, 0, r.cntlid);
            e[2] = u8::from(r.holds);
            put64(&mut e, 8, r.rkey);
            e[16..32].copy_from_slice(&r.hostid);
            let start = Self::HEADER_LEN + i * Self::ENTRY_LEN;
            if start >= out.len() {
                break;
            }
            let n = (out.len() - start).min(Self::ENTRY_LEN);
            out[start..start + n].copy_from_slice(&e[..n]);
        }
    }

    /// Decode a full structure (host side and tests).
    pub fn decode(b: &[u8]) -> Result<ResvStatusExt, ShortData> {
        if b.len() < Self::HEADER_LEN {
            return Err(ShortData);
        }
        let count = usize::from(u16::from_le_bytes([b[5], b[6]]));
        let mut regs = Vec::new();
        for i in 0..count {
            let start = Self::HEADER_LEN + i * Self::ENTRY_LEN;
            let Some(e) = b.get(start..start + Self::ENTRY_LEN) else {
                break;
            };
            let mut hostid = [0u8; 16];
            hostid.copy_from_slice(&e[16..32]);
            regs.push(RegisteredCtrl {
                cntlid: u16::from_le_bytes([e[0], e[1]]),
                holds: e[2] & 1 != 0,
                rkey: le64(e, 8),
                hostid,
            });
        }
        Ok(ResvStatusExt {
            generation: u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            rtype: b[4],
            ptpls: b[9] & 1 != 0,
            regs,
        })
    }
}

/// Reservation Notification log page (Log Identifier 80h), 64 bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ResvNotificationLog {
    /// Log Page Count: increments per notification; gaps mean lost notifications.
    pub count: u64,
    /// [`log_type`].
    pub log_type: u8,
    /// Number of Available Log Pages after this one (saturates at 255).
    pub available: u8,
    /// Namespace ID the notification is about.
    pub nsid: u32,
}

impl ResvNotificationLog {
    /// Length of the log page in bytes.
    pub const LEN: usize = 64;

    /// Write the page into `out`: count at byte 0, type at 8, available at 9, NSID at 12.
    pub fn encode(&self, out: &mut [u8; Self::LEN]) {
        out.fill(0);
        put64(out, 0, self.count);
        out[8] = self.log_type;
        out[9] = self.available;
        put32(out, 12, self.nsid);
    }

    /// Decode the first 16 bytes of `b`; fewer than 16 is [`ShortData`].
    pub fn decode(b: &[u8]) -> Result<ResvNotificationLog, ShortData> {
        if b.len() < 16 {
            return Err(ShortData);
        }
        Ok(ResvNotificationLog {
            count: le64(b, 0),
            log_type: b[8],
            available: b[9],
            nsid: u32::from_le_bytes([b[12], b[13], b[14], b[15]]),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cdw10_round_trip_and_offsets() {
        let c = ResvCdw10 {
            action: rrega::REPLACE,
            iekey: true,
            rtype: rtype::EXCLUSIVE_ACCESS_ALL_REGS,
            cptpl: cptpl::SET,
        };
        let v = c.to_cdw10();
        assert_eq!(v, 0b010 | 1 << 3 | 6 << 8 | 0b11 << 30);
        assert_eq!(ResvCdw10::from_cdw10(v), c);
    }

    #[test]
    fn keys_decode_short_and_full() {
        assert_eq!(ResvKeys::decode(&[0; 7]), Err(ShortData));
        let k = ResvKeys {
            crkey: 0x1122,
            second: 0xAABB,
        };
        assert_eq!(ResvKeys::decode(&k.encode()), Ok(k));
        assert_eq!(
            ResvKeys::decode(&k.encode()[..8]),
            Ok(ResvKeys {
                crkey: 0x1122,
                second: 0
            })
        );
    }

    /// Offsets as Linux `struct nvme_reservation_status_ext` / `nvme_registered_ctrl_ext`.
    #[test]
    fn status_ext_layout_and_truncation() {
        let s = ResvStatusExt {
            generation: 7,
            rtype: rtype::WRITE_EXCLUSIVE,
            ptpls: true,
            regs: vec![
                RegisteredCtrl {
                    cntlid: 0xFFFF,
                    holds: true,
                    rkey: 0x0102_0304_0506_0708,
                    hostid: [9; 16],
                },
                RegisteredCtrl {
                    cntlid: 0xFFFF,
                    holds: false,
                    rkey: 5,
                    hostid: [3; 16],
                },
            ],
        };
        let mut b = vec![0u8; 64 + 128];
        s.encode(&mut b);
        assert_eq!(&b[0..4], &7u32.to_le_bytes());
        assert_eq!(b[4], 1);
        assert_eq!(&b[5..7], &2u16.to_le_bytes());
        assert_eq!(b[9], 1);
        assert_eq!(&b[64..66], &[0xFF, 0xFF]);
        assert_eq!(b[66], 1);
        assert_eq!(&b[72..80], &0x0102_0304_0506_0708u64.to_le_bytes());
        assert_eq!(&b[80..96], &[9; 16]);
        assert_eq!(ResvStatusExt::decode(&b).unwrap(), s);
        // A buffer with room for one entry: REGCTL still says two.
        let mut short = vec![0u8; 64 + 64];
        s.encode(&mut short);
        assert_eq!(&short[5..7], &2u16.to_le_bytes());
        assert_eq!(ResvStatusExt::decode(&short).unwrap().regs.len(), 1);
        let mut tiny = vec![0u8; 8];
        s.encode(&mut tiny);
        assert_eq!(&tiny[0..4], &7u32.to_le_bytes());
        assert_eq!(ResvStatusExt::decode(&tiny), Err(ShortData));
    }

    #[test]
    fn notification_log_layout() {
        let l = ResvNotificationLog {
            count: 3,
            log_type: log_type::RESERVATION_RELEASED,
            available: 1,
            nsid: 2,
        };
        let mut b = [0u8; 64];
        l.encode(&mut b);
        assert_eq!(&b[0..8], &3u64.to_le_bytes());
        assert_eq!(b[8], 2);
        assert_eq!(b[9], 1);
        assert_eq!(&b[12..16], &2u32.to_le_bytes());
        assert_eq!(ResvNotificationLog::decode(&b), Ok(l));
    }
}
