//! Arbitrary bytes into the NVMe/RDMA wire decoders of `nvmf-rdma` (`wire.rs`): the private
//! data of the RDMA CM connect request, accept and reject, and SGL1 of command capsules.
//!
//! Input: `[mode, bytes...]`. `bytes` is, at once, the private data of a connect request (and
//! of an accept and a reject, as a host reads them), and a run of 64-byte command capsules
//! (at most [`MAX_SQES`]; a short last one is zero-padded). `mode` picks the target's queue
//! limits for [`CmRequest::check`] (bits 0-1: admin entries, bits 2-3: I/O entries, bits 4-5:
//! highest QID).
//!
//! Checked, beyond "never panics":
//! - [`CmRequest::decode`]: accepted ⇒ the fields are the first ten bytes, little-endian, RECFMT
//!   0; encode → decode gives the same request; a request shorter than 32 bytes is refused with
//!   "invalid length" whatever it holds. [`CmRequest::check`] accepted ⇒ HSQSIZE ≠ 0, the
//!   entries within the queue's limit, HRQSIZE at least the entries, QID within the limit.
//! - accept and reject: decode → encode → decode gives the same CRQSIZE / status; a known
//!   status encodes to itself.
//! - [`decode_sgl`]: a keyed data block has a length of 1..=2²⁴−1 and re-encoding it with
//!   [`set_keyed_sgl`] reproduces SGL1 byte for byte; in-capsule data has a non-zero length;
//!   the length always agrees with `nvme-spec`'s `Sqe::sgl_data_len` (the one the controller
//!   checks against MDTS); only keyed, in-capsule and (length 0) no-data descriptors are
//!   accepted.

use crate::Features;
use nvme_spec::Sqe;
use nvmf_rdma::wire::{
    CM_REQ_LEN, CmLimits, CmRequest, DataDesc, KEYED_LEN_MAX, RECFMT_1_0, RejectStatus,
    SGL_KEYED_ADDR, SGL_KEYED_INVALIDATE, SGL_OFFSET, SglError, decode_accept, decode_reject,
    decode_sgl, encode_accept, encode_reject, set_keyed_sgl,
};

/// At most this many capsules per input.
pub const MAX_SQES: usize = 64;

/// Feature families.
const F_REQ: u8 = 1;
const F_CHECK: u8 = 2;
const F_REP: u8 = 3;
const F_SGL: u8 = 4;

/// One input: decode NVMe/RDMA CM private data and keyed SGLs, checking fields against the
/// bytes and that every accepted value round-trips.
pub fn run(data: &[u8], feat: &mut Features) {
    let [mode, bytes @ ..] = data else {
        return;
    };
    let lim = CmLimits {
        admin_entries: [1, 2, 32, 4096][usize::from(mode & 3)],
        io_entries: [1, 128, 1024, 65536][usize::from((mode >> 2) & 3)],
        max_qid: [0, 1, 32, u16::MAX][usize::from((mode >> 4) & 3)],
    };
    cm_request(bytes, &lim, feat);
    cm_reply(bytes, feat);
    for chunk in bytes.chunks(64).take(MAX_SQES) {
        let mut b = [0u8; 64];
        b[..chunk.len()].copy_from_slice(chunk);
        sgl(&b, feat);
    }
}

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn cm_request(bytes: &[u8], lim: &CmLimits, feat: &mut Features) {
    let r = match CmRequest::decode(bytes) {
        Ok(r) => r,
        Err(e) => {
            feat.add(F_REQ, e.status as u64);
            if bytes.len() < CM_REQ_LEN {
                assert_eq!(e.status, RejectStatus::InvalidLength, "short request");
            }
            assert!(!e.to_string().is_empty());
            return;
        }
    };
    feat.add(F_REQ, 0);
    assert!(bytes.len() >= CM_REQ_LEN, "a short request was accepted");
    assert_eq!(r.recfmt, RECFMT_1_0);
    assert_eq!(
        [r.recfmt, r.qid, r.hrqsize, r.hsqsize, r.cntlid],
        [0, 2, 4, 6, 8].map(|at| le16(bytes, at)),
        "decoded fields"
    );
    assert_eq!(CmRequest::decode(&r.encode()), Ok(r), "encode → decode");
    match r.check(lim) {
        Ok(()) => {
            feat.add(F_CHECK, 0);
            let max = if r.qid == 0 {
                lim.admin_entries
            } else {
                lim.io_entries
            };
            assert!(r.qid <= lim.max_qid, "QID {} accepted", r.qid);
            assert!(
                r.hsqsize != 0 && r.entries() <= max,
                "HSQSIZE {}",
                r.hsqsize
            );
            assert!(
                u32::from(r.hrqsize) >= r.entries(),
                "HRQSIZE {} < entries {}",
                r.hrqsize,
                r.entries()
            );
        }
        Err(s) => feat.add(F_CHECK, s as u64),
    }
}

fn cm_reply(bytes: &[u8], feat: &mut Features) {
    match decode_accept(bytes) {
        Some(crqsize) => {
            feat.add(F_REP, 1);
            assert_eq!(le16(bytes, 0), RECFMT_1_0);
            assert_eq!(crqsize, le16(bytes, 2));
            assert_eq!(decode_accept(&encode_accept(crqsize)), Some(crqsize));
        }
        None => assert!(bytes.len() < 4 || le16(bytes, 0) != RECFMT_1_0),
    }
    match decode_reject(bytes) {
        Some(Ok(s)) => {
            feat.add(F_REP, 0x100 | s as u64);
            assert_eq!(s as u16, le16(bytes, 2));
            assert_eq!(RejectStatus::from_code(s as u16), Some(s));
            assert_eq!(decode_reject(&encode_reject(s)), Some(Ok(s)));
            assert!(!s.to_string().is_empty());
        }
        Some(Err(code)) => {
            feat.add(F_REP, 2);
            assert_eq!(code, le16(bytes, 2));
            assert_eq!(RejectStatus::from_code(code), None);
        }
        None => assert!(bytes.len() < 4, "reject of {} bytes refused", bytes.len()),
    }
}

fn sgl(b: &[u8; 64], feat: &mut Features) {
    let Some(sqe) = Sqe::from_slice(b) else {
        return;
    };
    let ty = b[39];
    match decode_sgl(&sqe) {
        Ok(DataDesc::None) => {
            feat.add(F_SGL, 0);
            assert!(matches!(
                ty,
                SGL_KEYED_ADDR | SGL_KEYED_INVALIDATE | SGL_OFFSET
            ));
            assert_eq!(sqe.sgl_data_len(), 0, "no data, but a length");
        }
        Ok(DataDesc::Keyed {
            addr,
            len,
            key,
            invalidate,
        }) => {
            feat.add(F_SGL, 1 | (u64::from(invalidate) << 4));
            assert!(len > 0 && len <= KEYED_LEN_MAX, "keyed length {len}");
            assert_eq!(invalidate, ty == SGL_KEYED_INVALIDATE);
            assert_eq!(sqe.sgl_data_len(), len, "nvme-spec and nvmf-rdma lengths");
            // Every bit of a keyed descriptor is a field: re-encoding gives SGL1 back.
            let mut again = sqe;
            set_keyed_sgl(&mut again, addr, len, key, invalidate);
            assert_eq!(again.as_bytes(), sqe.as_bytes(), "keyed SGL re-encoded");
            assert_eq!(decode_sgl(&again), decode_sgl(&sqe));
        }
        Ok(DataDesc::InCapsule { offset, len }) => {
            feat.add(F_SGL, 2 | (u64::from(offset == 0) << 4));
            assert_eq!(ty, SGL_OFFSET);
            assert!(len > 0);
            assert_eq!(offset, sqe.sgl_addr());
            assert_eq!(sqe.sgl_data_len(), len, "nvme-spec and nvmf-rdma lengths");
            if offset == 0 {
                let mut again = sqe;
                again.set_sgl_icd(len);
                assert_eq!(
                    decode_sgl(&again),
                    decode_sgl(&sqe),
                    "in-capsule re-encoded"
                );
            }
        }
        Err(SglError::Type(t)) => {
            feat.add(F_SGL, 3);
            assert_eq!(t, ty);
            assert!(!matches!(
                t,
                SGL_KEYED_ADDR | SGL_KEYED_INVALIDATE | SGL_OFFSET
            ));
        }
    }
}
