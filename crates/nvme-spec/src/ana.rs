//! Asymmetric Namespace Access (NVMe Base 2.0, 8.1.3 and 5.16.1.12): ANA states, the ANA log
//! page (log identifier 0Ch) and the Identify Controller ANACAP bits.
//!
//! Layout of the log page, as the spec's figures and Linux `include/linux/nvme.h`
//! (`struct nvme_ana_rsp_hdr`, `struct nvme_ana_group_desc`) give it: a 16-byte header
//! (change count u64, number of group descriptors u16), then per group a 32-byte descriptor
//! (group id u32, number of NSIDs u32, change count u64, state byte) followed by its NSIDs.

use crate::identify::{DecodeError, need};
use crate::{le16, le32, le64, put16, put32, put64};

/// An ANA state, with its value in the log page's ANAS field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum AnaState {
    /// ANA Optimized state (ANAS 01h): the preferred path; commands are processed.
    Optimized = 0x01,
    /// ANA Non-Optimized state (ANAS 02h): commands are processed, possibly with lower performance.
    NonOptimized = 0x02,
    /// ANA Inaccessible state (ANAS 03h): I/O fails with Asymmetric Access Inaccessible.
    Inaccessible = 0x03,
    /// ANA Persistent Loss state (ANAS 04h): the namespace will not become accessible on this path.
    PersistentLoss = 0x04,
    /// ANA Change state (ANAS 0Fh): transitioning; I/O fails with Asymmetric Access Transition.
    Change = 0x0F,
}

impl AnaState {
    /// Every state, in ANAS order.
    pub const ALL: [AnaState; 5] = [
        AnaState::Optimized,
        AnaState::NonOptimized,
        AnaState::Inaccessible,
        AnaState::PersistentLoss,
        AnaState::Change,
    ];

    /// The state an ANAS value encodes (`None` for reserved values).
    pub fn from_u8(v: u8) -> Option<AnaState> {
        AnaState::ALL.into_iter().find(|s| *s as u8 == v)
    }

    /// The name used in configuration files, the management API and `ebof ctl`.
    pub fn name(self) -> &'static str {
        match self {
            AnaState::Optimized => "optimized",
            AnaState::NonOptimized => "non-optimized",
            AnaState::Inaccessible => "inaccessible",
            AnaState::PersistentLoss => "persistent-loss",
            AnaState::Change => "change",
        }
    }

    /// Inverse of [`AnaState::name`].
    pub fn from_name(s: &str) -> Option<AnaState> {
        AnaState::ALL.into_iter().find(|a| a.name() == s)
    }

    /// The status of an I/O command to a namespace in this state (`None`: it may proceed).
    /// Path Related Status with DNR clear, so a multipath host retries on another path.
    pub fn io_status(self) -> Option<crate::Status> {
        match self {
            AnaState::Optimized | AnaState::NonOptimized => None,
            AnaState::Inaccessible => Some(crate::Status::ANA_INACCESSIBLE),
            AnaState::PersistentLoss => Some(crate::Status::ANA_PERSISTENT_LOSS),
            AnaState::Change => Some(crate::Status::ANA_TRANSITION),
        }
    }
}

impl std::fmt::Display for AnaState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Identify Controller ANACAP bits (byte 343).
pub mod anacap {
    /// ANA Optimized state reported (bit 0).
    pub const OPTIMIZED: u8 = 1 << 0;
    /// ANA Non-Optimized state reported (bit 1).
    pub const NON_OPTIMIZED: u8 = 1 << 1;
    /// ANA Inaccessible state reported (bit 2).
    pub const INACCESSIBLE: u8 = 1 << 2;
    /// ANA Persistent Loss state reported (bit 3).
    pub const PERSISTENT_LOSS: u8 = 1 << 3;
    /// ANA Change state reported (bit 4).
    pub const CHANGE: u8 = 1 << 4;
    /// The ANAGRPID of a namespace does not change while it is attached.
    pub const GRPID_STATIC: u8 = 1 << 6;
    /// Namespace Management may set a non-zero ANAGRPID.
    pub const GRPID_MGMT: u8 = 1 << 7;
}

/// Get Log Page LSP bit 0 for the ANA log: Return Groups Only (CDW10 bit 8).
pub const LSP_RGO: u32 = 1 << 8;

/// One ANA group descriptor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnaGroupDesc {
    /// ANA Group ID (ANAGRPID), non-zero; the namespaces' Identify Namespace ANAGRPID.
    pub grpid: u32,
    /// Change count of the last change to this descriptor.
    pub chgcnt: u64,
    /// The ANA state of every namespace in the group on this controller (ANAS).
    pub state: AnaState,
    /// NSIDs of the group, ascending (empty when the log was read with RGO).
    pub nsids: Vec<u32>,
}

/// The ANA log page.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AnaLog {
    /// Change Count (CHGCNT) of the page: bumped on every change to any descriptor.
    pub chgcnt: u64,
    /// Group descriptors, one per ANA group the controller reports.
    pub groups: Vec<AnaGroupDesc>,
}

impl AnaLog {
    /// Header length.
    pub const HEADER_LEN: usize = 16;
    /// Group descriptor length before its NSID list.
    pub const DESC_LEN: usize = 32;

    /// Encoded length.
    pub fn len(&self) -> usize {
        Self::HEADER_LEN
            + self
                .groups
                .iter()
                .map(|g| Self::DESC_LEN + 4 * g.nsids.len())
                .sum::<usize>()
    }

    /// True when the page lists no ANA group (the 16-byte header remains, so `len()` is not 0).
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// Encode the whole page (the caller windows it with [`crate::log::copy_log_window`]).
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; self.len()];
        put64(&mut b, 0, self.chgcnt);
        put16(
            &mut b,
            8,
            self.groups.len().min(usize::from(u16::MAX)) as u16,
        );
        let mut off = Self::HEADER_LEN;
        for g in &self.groups {
            put32(&mut b, off, g.grpid);
            put32(&mut b, off + 4, g.nsids.len() as u32);
            put64(&mut b, off + 8, g.chgcnt);
            b[off + 16] = g.state as u8;
            off += Self::DESC_LEN;
            for &n in &g.nsids {
                put32(&mut b, off, n);
                off += 4;
            }
        }
        b
    }

    /// Decode a page read from a controller (untrusted: every length is checked).
    pub fn decode(b: &[u8]) -> Result<AnaLog, DecodeError> {
        need(b, Self::HEADER_LEN)?;
        let mut log = AnaLog {
            chgcnt: le64(b, 0),
            groups: Vec::new(),
        };
        let ngd = le16(b, 8);
        let mut off = Self::HEADER_LEN;
        for _ in 0..ngd {
            need(b, off + Self::DESC_LEN)?;
            let nnsids = le32(b, off + 4) as usize;
            let state = AnaState::from_u8(b[off + 16] & 0x0F).ok_or(DecodeError::Invalid {
                field: "ANAS",
                reason: format!("reserved state {:#x}", b[off + 16] & 0x0F),
            })?;
            let end = nnsids
                .checked_mul(4)
                .and_then(|n| n.checked_add(off + Self::DESC_LEN))
                .ok_or(DecodeError::Invalid {
                    field: "NNSIDS",
                    reason: "too large".into(),
                })?;
            need(b, end)?;
            let nsids = (0..nnsids)
                .map(|i| le32(b, off + Self::DESC_LEN + 4 * i))
                .collect();
            log.groups.push(AnaGroupDesc {
                grpid: le32(b, off),
                chgcnt: le64(b, off + 8),
                state,
                nsids,
            });
            off = end;
        }
        Ok(log)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_names_and_status() {
        for s in AnaState::ALL {
            assert_eq!(AnaState::from_name(s.name()), Some(s));
            assert_eq!(AnaState::from_u8(s as u8), Some(s));
        }
        assert_eq!(AnaState::from_u8(0), None);
        assert_eq!(AnaState::from_u8(5), None);
        assert_eq!(AnaState::Optimized.io_status(), None);
        assert_eq!(AnaState::NonOptimized.io_status(), None);
        let s = AnaState::Inaccessible.io_status().unwrap();
        assert_eq!((s.sct, s.sc, s.dnr), (3, 0x02, false));
        assert_eq!(s.to_field(), 0x302 << 1);
        assert_eq!(AnaState::PersistentLoss.io_status().unwrap().sc, 0x01);
        assert_eq!(AnaState::Change.io_status().unwrap().sc, 0x03);
    }

    #[test]
    fn layout_and_roundtrip() {
        let log = AnaLog {
            chgcnt: 7,
            groups: vec![
                AnaGroupDesc {
                    grpid: 1,
                    chgcnt: 3,
                    state: AnaState::Optimized,
                    nsids: vec![1, 2],
                },
                AnaGroupDesc {
                    grpid: 2,
                    chgcnt: 7,
                    state: AnaState::Inaccessible,
                    nsids: vec![],
                },
            ],
        };
        let b = log.encode();
        assert_eq!(b.len(), 16 + 32 + 8 + 32);
        assert_eq!(b[0], 7);
        assert_eq!(b[8], 2);
        assert_eq!(le32(&b, 16), 1);
        assert_eq!(le32(&b, 20), 2);
        assert_eq!(le64(&b, 24), 3);
        assert_eq!(b[32], 0x01);
        assert_eq!(le32(&b, 48), 1);
        assert_eq!(le32(&b, 52), 2);
        assert_eq!(le32(&b, 56), 2);
        assert_eq!(b[56 + 16], 0x03);
        assert_eq!(AnaLog::decode(&b), Ok(log));
    }

    #[test]
    fn decode_rejects_bad_pages() {
        assert!(AnaLog::decode(&[0; 8]).is_err());
        let mut b = vec![0u8; 16 + 32];
        b[8] = 1;
        b[16 + 16] = 0x01;
        put32(&mut b, 20, 1); // one NSID promised, none present
        assert!(matches!(AnaLog::decode(&b), Err(DecodeError::Short { .. })));
        put32(&mut b, 20, u32::MAX);
        assert!(AnaLog::decode(&b).is_err());
        put32(&mut b, 20, 0);
        b[16 + 16] = 0x07;
        assert!(matches!(
            AnaLog::decode(&b),
            Err(DecodeError::Invalid { .. })
        ));
    }
}
