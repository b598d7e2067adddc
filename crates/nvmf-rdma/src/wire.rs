//! NVMe/RDMA wire structures: RDMA CM private data and SGL descriptors.
//!
//! Facts (NVMe/RDMA transport specification, "RDMA Transport Specific Connection Setup";
//! Linux `include/linux/nvme-rdma.h`):
//!
//! - **CM Connect Request private data** (host → target, 32 bytes; the Linux host's arrives
//!   padded to 56 by the CM): RECFMT u16 (0 is the only format), QID u16, HRQSIZE u16 (host
//!   receive queue size: how many responses the host can take), HSQSIZE u16 (host send queue
//!   size, 0's based, as SQSIZE in Connect), CNTLID u16, 22 bytes reserved. The admin queue of
//!   the Linux host asks HRQSIZE 32, HSQSIZE 31.
//! - **CM Accept private data** (32 bytes): RECFMT u16, CRQSIZE u16 (controller receive queue
//!   size: receive buffers posted for this queue), reserved.
//! - **CM Reject private data** (4 bytes used, sent as 32): RECFMT u16, STS u16
//!   ([`RejectStatus`]).
//! - **Keyed SGL Data Block** (SQE bytes 24..40): address u64, length 24 bits, key u32, then
//!   the type byte: type 4h in bits 7:4, subtype 0h (address) or Fh (address, invalidate the
//!   key with the response: send with invalidate).
//! - **In-capsule data** (I/O queues, up to IOCCSZ): SGL Data Block, type 0h subtype 1h
//!   (offset): the address is an offset into the capsule's data (ICDOFF 0 here).

use thiserror::Error;

/// RECFMT of NVMe/RDMA 1.0 (the only one defined).
pub const RECFMT_1_0: u16 = 0;
/// Bytes of private data the request must carry.
pub const CM_REQ_LEN: usize = 32;
/// Bytes of private data we send in an accept or reject.
pub const CM_REP_LEN: usize = 32;

/// SGL type byte of a Keyed SGL Data Block, subtype Address.
pub const SGL_KEYED_ADDR: u8 = 0x40;
/// SGL type byte of a Keyed SGL Data Block, subtype Invalidate Key (the host asks for send
/// with invalidate of `key` with the response).
pub const SGL_KEYED_INVALIDATE: u8 = 0x4F;
/// SGL type byte of in-capsule data: Data Block, subtype Offset (same as NVMe/TCP).
pub const SGL_OFFSET: u8 = nvme_spec::sqe::SGL_ICD;
/// Largest length a keyed SGL data block can carry (24 bits).
pub const KEYED_LEN_MAX: u32 = (1 << 24) - 1;

/// NVMe/RDMA CM reject status codes (STS of the reject private data).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum RejectStatus {
    /// The private data is shorter than the request structure.
    InvalidLength = 0x01,
    /// RECFMT is not 0.
    InvalidRecfmt = 0x02,
    /// QID is out of range (more I/O queues than allowed).
    InvalidQid = 0x03,
    /// HSQSIZE is too large (or 0).
    InvalidHsqsize = 0x04,
    /// HRQSIZE is too small or too large.
    InvalidHrqsize = 0x05,
    /// The controller has no resources for this queue.
    NoResources = 0x06,
    /// The host's IRD (responder resources) is not acceptable.
    InvalidIrd = 0x07,
    /// The host's ORD (initiator depth) is not acceptable.
    InvalidOrd = 0x08,
    /// CNTLID is not acceptable.
    InvalidCntlid = 0x09,
}

impl RejectStatus {
    /// The status from its code.
    pub fn from_code(c: u16) -> Option<RejectStatus> {
        Some(match c {
            0x01 => RejectStatus::InvalidLength,
            0x02 => RejectStatus::InvalidRecfmt,
            0x03 => RejectStatus::InvalidQid,
            0x04 => RejectStatus::InvalidHsqsize,
            0x05 => RejectStatus::InvalidHrqsize,
            0x06 => RejectStatus::NoResources,
            0x07 => RejectStatus::InvalidIrd,
            0x08 => RejectStatus::InvalidOrd,
            0x09 => RejectStatus::InvalidCntlid,
            _ => return None,
        })
    }
}

impl std::fmt::Display for RejectStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RejectStatus::InvalidLength => "invalid private data length",
            RejectStatus::InvalidRecfmt => "invalid record format",
            RejectStatus::InvalidQid => "invalid queue ID",
            RejectStatus::InvalidHsqsize => "invalid host send queue size",
            RejectStatus::InvalidHrqsize => "invalid host receive queue size",
            RejectStatus::NoResources => "no resources",
            RejectStatus::InvalidIrd => "invalid IRD",
            RejectStatus::InvalidOrd => "invalid ORD",
            RejectStatus::InvalidCntlid => "invalid controller ID",
        })
    }
}

/// The decoded private data of a CM Connect Request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmRequest {
    /// Record format (RECFMT); only 0 ([`RECFMT_1_0`]) is defined.
    pub recfmt: u16,
    /// NVMe queue ID (QID) the RDMA queue pair will carry: 0 for the admin queue.
    pub qid: u16,
    /// Host receive queue size (responses the host can take at once).
    pub hrqsize: u16,
    /// Host send queue size, 0's based.
    pub hsqsize: u16,
    /// Controller ID (CNTLID) the queue is for, as the host gives it in the Connect data.
    pub cntlid: u16,
}

/// A malformed CM request, with the status to reject it with.
#[derive(Clone, Copy, Debug, Error, PartialEq, Eq)]
#[error("RDMA CM request refused: {status}")]
pub struct CmRequestError {
    /// The reject status the request fails with.
    pub status: RejectStatus,
}

impl CmRequest {
    /// Decode the private data of a connect request (any length ≥ 32: the CM pads it).
    pub fn decode(b: &[u8]) -> Result<CmRequest, CmRequestError> {
        let Some(b) = b.get(..CM_REQ_LEN) else {
            return Err(CmRequestError {
                status: RejectStatus::InvalidLength,
            });
        };
        let r = CmRequest {
            recfmt: le16(b, 0),
            qid: le16(b, 2),
            hrqsize: le16(b, 4),
            hsqsize: le16(b, 6),
            cntlid: le16(b, 8),
        };
        if r.recfmt != RECFMT_1_0 {
            return Err(CmRequestError {
                status: RejectStatus::InvalidRecfmt,
            });
        }
        Ok(r)
    }

    /// Encode as the host sends it (32 bytes).
    pub fn encode(&self) -> [u8; CM_REQ_LEN] {
        let mut b = [0u8; CM_REQ_LEN];
        put16(&mut b, 0, self.recfmt);
        put16(&mut b, 2, self.qid);
        put16(&mut b, 4, self.hrqsize);
        put16(&mut b, 6, self.hsqsize);
        put16(&mut b, 8, self.cntlid);
        b
    }

    /// Queue entries the host will submit at most (HSQSIZE is 0's based).
    pub fn entries(&self) -> u32 {
        u32::from(self.hsqsize) + 1
    }
}

/// Limits a target applies to CM requests.
#[derive(Clone, Copy, Debug)]
pub struct CmLimits {
    /// Deepest admin queue (entries).
    pub admin_entries: u32,
    /// Deepest I/O queue (entries, CAP.MQES + 1).
    pub io_entries: u32,
    /// Highest I/O queue ID.
    pub max_qid: u16,
}

impl CmRequest {
    /// Check the request against the target's limits; the reject status when it fails.
    pub fn check(&self, lim: &CmLimits) -> Result<(), RejectStatus> {
        let max = if self.qid == 0 {
            lim.admin_entries
        } else {
            lim.io_entries
        };
        if self.qid > lim.max_qid {
            return Err(RejectStatus::InvalidQid);
        }
        // HSQSIZE is 0's based: 0 (one entry) is as invalid as in Connect.
        if self.hsqsize == 0 || self.entries() > max {
            return Err(RejectStatus::InvalidHsqsize);
        }
        // The host must be able to take a response for every command it may submit.
        if u32::from(self.hrqsize) < self.entries() || u32::from(self.hrqsize) > max + 1 {
            return Err(RejectStatus::InvalidHrqsize);
        }
        Ok(())
    }
}

/// Private data of a CM accept.
pub fn encode_accept(crqsize: u16) -> [u8; CM_REP_LEN] {
    let mut b = [0u8; CM_REP_LEN];
    put16(&mut b, 0, RECFMT_1_0);
    put16(&mut b, 2, crqsize);
    b
}

/// CRQSIZE from an accept's private data (host side).
pub fn decode_accept(b: &[u8]) -> Option<u16> {
    let b = b.get(..4)?;
    (le16(b, 0) == RECFMT_1_0).then(|| le16(b, 2))
}

/// Private data of a CM reject.
pub fn encode_reject(status: RejectStatus) -> [u8; CM_REP_LEN] {
    let mut b = [0u8; CM_REP_LEN];
    put16(&mut b, 0, RECFMT_1_0);
    put16(&mut b, 2, status as u16);
    b
}

/// The status of a reject's private data (host side): the raw code when it is not one of ours.
pub fn decode_reject(b: &[u8]) -> Option<Result<RejectStatus, u16>> {
    let b = b.get(..4)?;
    let c = le16(b, 2);
    Some(RejectStatus::from_code(c).ok_or(c))
}

/// Where a command's data is, from SGL1 of its SQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataDesc {
    /// No data (length 0, whatever the type).
    None,
    /// In the host's memory: RDMA READ / WRITE at `addr` with `key`; `invalidate`: the host
    /// asks that the key be invalidated with the response (send with invalidate).
    Keyed {
        /// Host memory address of the data (remote virtual address of the RDMA transfer).
        addr: u64,
        /// Data length in bytes (24 bits on the wire, at most [`KEYED_LEN_MAX`]).
        len: u32,
        /// Remote key (rkey) of the host's memory region.
        key: u32,
        /// Send the response with invalidate of `key` (subtype Fh).
        invalidate: bool,
    },
    /// In the capsule, at `offset` of its data.
    InCapsule {
        /// Offset of the data from the start of the capsule's data (SGL address field).
        offset: u64,
        /// Data length in bytes.
        len: u32,
    },
}

/// An SGL the RDMA transport does not take; the NVMe status to fail the command with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum SglError {
    /// A descriptor type this transport does not support (SGL Descriptor Type Invalid).
    #[error("SGL descriptor type {0:#04x} not supported")]
    Type(u8),
}

/// Decode SGL1 of `sqe` the way an RDMA controller reads it.
pub fn decode_sgl(sqe: &nvme_spec::Sqe) -> Result<DataDesc, SglError> {
    let b = sqe.as_bytes();
    let ty = b[39];
    match ty {
        SGL_KEYED_ADDR | SGL_KEYED_INVALIDATE => {
            let len = u32::from(b[32]) | u32::from(b[33]) << 8 | u32::from(b[34]) << 16;
            if len == 0 {
                return Ok(DataDesc::None);
            }
            Ok(DataDesc::Keyed {
                addr: u64::from_le_bytes([b[24], b[25], b[26], b[27], b[28], b[29], b[30], b[31]]),
                len,
                key: u32::from_le_bytes([b[35], b[36], b[37], b[38]]),
                invalidate: ty == SGL_KEYED_INVALIDATE,
            })
        }
        SGL_OFFSET => {
            let len = sqe.sgl_len();
            if len == 0 {
                return Ok(DataDesc::None);
            }
            Ok(DataDesc::InCapsule {
                offset: sqe.sgl_addr(),
                len,
            })
        }
        t => Err(SglError::Type(t)),
    }
}

/// Set SGL1 of `sqe` to a keyed data block (host side).
pub fn set_keyed_sgl(sqe: &mut nvme_spec::Sqe, addr: u64, len: u32, key: u32, invalidate: bool) {
    let b = sqe.as_bytes_mut();
    b[24..32].copy_from_slice(&addr.to_le_bytes());
    let l = len.min(KEYED_LEN_MAX).to_le_bytes();
    b[32..35].copy_from_slice(&l[..3]);
    b[35..39].copy_from_slice(&key.to_le_bytes());
    b[39] = if invalidate {
        SGL_KEYED_INVALIDATE
    } else {
        SGL_KEYED_ADDR
    };
}

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvme_spec::{CommandId, Sqe};

    /// A Linux host's admin-queue request as the CM delivers it: 32 bytes of NVMe data padded
    /// with zeros to 56.
    fn linux_admin_req() -> Vec<u8> {
        let mut v = vec![0u8; 56];
        v[4] = 32; // hrqsize
        v[6] = 31; // hsqsize
        v
    }

    const LIM: CmLimits = CmLimits {
        admin_entries: 32,
        io_entries: 1024,
        max_qid: 32,
    };

    #[test]
    fn request_decodes_padded_and_checks() {
        let r = CmRequest::decode(&linux_admin_req()).unwrap();
        assert_eq!(
            r,
            CmRequest {
                recfmt: 0,
                qid: 0,
                hrqsize: 32,
                hsqsize: 31,
                cntlid: 0
            }
        );
        assert_eq!(r.entries(), 32);
        assert_eq!(r.check(&LIM), Ok(()));
        assert_eq!(CmRequest::decode(&r.encode()), Ok(r));
    }

    #[test]
    fn request_refusals() {
        let short = CmRequest::decode(&[0u8; 31]).unwrap_err();
        assert_eq!(short.status, RejectStatus::InvalidLength);
        let mut b = linux_admin_req();
        b[0] = 1;
        assert_eq!(
            CmRequest::decode(&b).unwrap_err().status,
            RejectStatus::InvalidRecfmt
        );
        let ok = CmRequest::decode(&linux_admin_req()).unwrap();
        let admin_too_deep = CmRequest {
            hsqsize: 32,
            hrqsize: 33,
            ..ok
        };
        assert_eq!(
            admin_too_deep.check(&LIM),
            Err(RejectStatus::InvalidHsqsize)
        );
        let zero = CmRequest { hsqsize: 0, ..ok };
        assert_eq!(zero.check(&LIM), Err(RejectStatus::InvalidHsqsize));
        let qid = CmRequest { qid: 33, ..ok };
        assert_eq!(qid.check(&LIM), Err(RejectStatus::InvalidQid));
        let small_rq = CmRequest { hrqsize: 16, ..ok };
        assert_eq!(small_rq.check(&LIM), Err(RejectStatus::InvalidHrqsize));
        let io = CmRequest {
            qid: 1,
            hsqsize: 127,
            hrqsize: 128,
            ..ok
        };
        assert_eq!(io.check(&LIM), Ok(()));
    }

    #[test]
    fn accept_and_reject_round_trip() {
        let a = encode_accept(128);
        assert_eq!(&a[..4], &[0, 0, 128, 0]);
        assert_eq!(decode_accept(&a), Some(128));
        for c in 1..=9u16 {
            let s = RejectStatus::from_code(c).unwrap();
            let r = encode_reject(s);
            assert_eq!(decode_reject(&r), Some(Ok(s)));
            assert!(!s.to_string().is_empty());
        }
        assert_eq!(decode_reject(&[0, 0, 0x42, 0]), Some(Err(0x42)));
        assert_eq!(decode_reject(&[0, 0]), None);
        assert_eq!(decode_accept(&[1, 0, 0, 0]), None);
    }

    #[test]
    fn keyed_sgl_layout() {
        let mut s = Sqe::new(0x02, CommandId(7));
        set_keyed_sgl(&mut s, 0x1122_3344_5566_7788, 0x0A_BCDE, 0xDEAD_BEEF, true);
        let b = s.as_bytes();
        // Byte layout from the spec: address LE, 3 length bytes LE, key LE, type 4Fh.
        assert_eq!(
            &b[24..32],
            &[0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11]
        );
        assert_eq!(&b[32..35], &[0xDE, 0xBC, 0x0A]);
        assert_eq!(&b[35..39], &[0xEF, 0xBE, 0xAD, 0xDE]);
        assert_eq!(b[39], 0x4F);
        assert_eq!(
            decode_sgl(&s),
            Ok(DataDesc::Keyed {
                addr: 0x1122_3344_5566_7788,
                len: 0x0A_BCDE,
                key: 0xDEAD_BEEF,
                invalidate: true
            })
        );
        set_keyed_sgl(&mut s, 8, 0, 1, false);
        assert_eq!(decode_sgl(&s), Ok(DataDesc::None));
    }

    #[test]
    fn in_capsule_and_foreign_types() {
        let mut s = Sqe::new(0x01, CommandId(1));
        s.set_sgl_icd(4096);
        assert_eq!(
            decode_sgl(&s),
            Ok(DataDesc::InCapsule {
                offset: 0,
                len: 4096
            })
        );
        // NVMe/TCP's transport data block is not an RDMA descriptor.
        s.set_sgl_transport(4096);
        assert_eq!(decode_sgl(&s), Err(SglError::Type(0x5A)));
    }
}
