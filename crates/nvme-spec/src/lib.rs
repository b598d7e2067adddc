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

pub mod cqe;
pub mod discovery;
pub mod fabrics;
pub mod identify;
pub mod ids;
pub mod log;
pub mod opcode;
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
