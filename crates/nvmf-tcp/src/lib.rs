//! # nvmf-tcp — NVMe/TCP, sans-IO
//!
//! **What it is**: the NVMe/TCP transport binding (NVMe/TCP Transport Specification 1.0) as pure
//! functions and state machines over byte slices: the codec for all nine PDU types
//! ([`pdu`]), CRC32C header/data digests ([`digest`]), and one connection state machine per role —
//! [`TargetConn`] (answers ICReq, validates H2CData against the R2Ts it issued, encodes
//! CapsuleResp/C2HData/R2T/C2HTermReq) and [`HostConn`] (sends ICReq, capsules, H2CData; decodes
//! responses, C2HData, R2T).
//!
//! **What it is not**: it never touches sockets, clocks or threads, and knows nothing about what
//! a command means (that is `nvmf-target` / `nvmf-host`).
//!
//! **Where it sits**: the driver reads bytes from a socket into a buffer and calls
//! `decode_one(&buf[pos..], &mut out)` until it returns `Ok(None)` ("need more bytes" is a
//! normal state). Each decoded PDU has been fully checked (HLEN, PLEN, PDO, digests, negotiated
//! limits, R2T bookkeeping) before it is returned as a typed [`TargetEvent`]/[`HostEvent`]; a
//! violation is a [`ProtocolError`] carrying the FES/FEI and the offending header, which the
//! driver turns into a C2HTermReq ([`TargetConn::encode_term_req`]) and then closes.
//! Encoding appends to a caller-owned `Vec<u8>` so a whole batch of PDUs leaves in one send.

pub mod digest;
pub mod error;
pub mod host;
pub mod pdu;
pub mod target;

pub use error::{Fes, ProtocolError};
pub use host::{HostConn, HostConnConfig, HostEvent};
pub use pdu::{DataHdr, Digests, IcReq, IcResp, Pdu, R2t, TermReq};
pub use target::{TargetConn, TargetConnConfig, TargetEvent};
