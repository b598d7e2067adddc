//! # nvme-spec — the NVMe and NVMe-oF wire vocabulary
//!
//! **What it is**: typed views of the bytes that NVMe over Fabrics peers exchange — the 64-byte
//! submission queue entry ([`Sqe`]), the 16-byte completion queue entry ([`Cqe`]), status codes
//! ([`Status`]), opcodes, Fabrics Connect/Property structures, Identify data, log pages and the
//! discovery log. Identifiers are newtypes ([`CommandId`], [`QueueId`], [`ControllerId`],
//! [`NamespaceId`]).
//!
//! **What it is not**: it does no I/O, keeps no state and allocates nothing on hot types. It does
//! not know about TCP (see `nvmf-tcp`) or about controller behaviour (see `nvmf-target`).
//!
//! **Where it sits**: the bottom of the stack; every other crate speaks in these types.
//! Encoding is infallible; decoding of untrusted bytes is fallible and never panics.
//!
//! # Example
//!
//! A host's admin-queue Fabrics Connect, as the target sees it: the SQE fields and the
//! 1024-byte Connect data decode back to what was encoded, truncated data is an error naming
//! the offset to report, and the rejection travels back in a CQE.
//!
//! ```
//! use nvme_spec::fabrics::{ConnectCmd, ConnectData, IATTR_CONNECT_DATA, connect_data_off};
//! use nvme_spec::opcode::{admin, fctype};
//! use nvme_spec::{CommandId, ControllerId, Cqe, QueueId, Sqe, Status};
//!
//! let mut sqe = Sqe::new(admin::FABRICS, CommandId(7));
//! sqe.set_fctype(fctype::CONNECT);
//! let cmd = ConnectCmd { recfmt: 0, qid: QueueId::ADMIN, sqsize: 31, cattr: 0, kato: 120_000 };
//! cmd.encode_into(&mut sqe);
//! let data = ConnectData {
//!     hostid: [0x11; 16],
//!     cntlid: ControllerId::DYNAMIC,
//!     subnqn: "nqn.2026-11.io.ebof:default".into(),
//!     hostnqn: "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001".into(),
//! };
//! let bytes = data.encode();
//!
//! // Target side: decode what arrived.
//! let got = ConnectCmd::from_sqe(&sqe);
//! assert_eq!(got, cmd);
//! assert_eq!(got.queue_entries(), 32); // SQSIZE is 0's based
//! assert_eq!(ConnectData::decode(&bytes), Ok(data));
//! assert!(ConnectData::decode(&bytes[..100]).is_err());
//!
//! // No such subsystem: Connect Invalid Parameters, IPO = SUBNQN's offset in the data.
//! let mut cqe = Cqe::new(sqe.cid(), QueueId::ADMIN, Status::CONNECT_INVALID_PARAM);
//! cqe.dw0 = u32::from(connect_data_off::SUBNQN) | IATTR_CONNECT_DATA;
//! let wire = cqe.to_bytes();
//! assert_eq!(Cqe::decode(&wire), cqe);
//! assert_eq!(cqe.status.name(), "Connect Invalid Parameters");
//! ```

#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod ana;
pub mod cqe;
pub mod dim;
pub mod discovery;
pub mod ebof_vendor;
pub mod fabrics;
pub mod identify;
pub mod ids;
pub mod log;
pub mod opcode;
pub mod resv;
pub mod sqe;
pub mod status;

pub use cqe::Cqe;
pub use ids::{CommandId, ControllerId, NamespaceId, QueueId};
pub use sqe::Sqe;
pub use status::Status;

/// The version this implementation reports in the VS property and Identify Controller VER
/// (NVMe Base 2.0: major 2, minor 0, tertiary 0).
pub const NVME_VERSION: u32 = 0x0002_0000;

/// The well-known discovery subsystem NQN (NVMe-oF 1.1, section 7.2).
pub const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";

/// Maximum NQN length in bytes, excluding the terminating NUL (NVMe Base 2.0, 4.5).
pub const NQN_MAX_LEN: usize = 223;

/// Read a little-endian u16 at `off`. Callers index only within fixed-size arrays.
#[inline]
pub fn le16(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}

/// Read a little-endian u32 at `off`.
#[inline]
pub fn le32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

/// Read a little-endian u64 at `off`.
#[inline]
pub fn le64(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(a)
}

/// Write a little-endian u16 at `off`.
#[inline]
pub fn put16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_le_bytes());
}

/// Write a little-endian u32 at `off`.
#[inline]
pub fn put32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

/// Write a little-endian u64 at `off`.
#[inline]
pub fn put64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

/// Decode a NUL-terminated/NUL-padded string field (NQNs) of fixed width. Stops at the first NUL;
/// returns `None` if the bytes before it are not printable ASCII.
pub fn nul_padded_str(b: &[u8]) -> Option<&str> {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    let s = &b[..end];
    if s.iter().all(|c| (0x20..0x7f).contains(c)) {
        std::str::from_utf8(s).ok()
    } else {
        None
    }
}

/// True if `nqn` is a syntactically acceptable NQN: starts with `nqn.`, at most
/// [`NQN_MAX_LEN`] bytes, printable ASCII.
pub fn is_valid_nqn(nqn: &str) -> bool {
    nqn.len() <= NQN_MAX_LEN
        && nqn.len() > 4
        && nqn.starts_with("nqn.")
        && nqn.bytes().all(|c| (0x21..0x7f).contains(&c))
}
