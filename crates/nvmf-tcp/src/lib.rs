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
//!
//! A data digest mismatch is not fatal (NVMe/TCP 1.0 transport error handling): it surfaces as
//! [`TargetEvent::CommandDataDigestError`] / [`TargetEvent::H2cDataDigestError`] /
//! [`HostEvent::C2hDataDigestError`] and the command completes with Transient Transport Error
//! while the connection lives on. The FES/FEI chosen for every fatal check are tabled in [`pdu`].
//!
//! Layout: `pdu` (wire format, stateless `decode_header`/`decode_frame` and `encode_*`),
//! `target`/`host` (per-role state: IC exchange, R2T windows), `error`, `digest`. Tests:
//! unit tests beside the code, property/golden/pair tests in `tests/`.

// `ProtocolError` carries the echoed header inline (128 bytes) so that reporting a peer's
// violation never allocates; it is returned once per connection at most, so the larger `Result`
// on the hot path costs nothing measurable, while boxing would allocate.
#![allow(clippy::result_large_err)]

pub mod digest;
pub mod error;
pub mod host;
pub mod pdu;
pub mod target;

pub use error::{Fes, ProtocolError};
pub use host::{HostConn, HostConnConfig, HostEvent};
pub use pdu::{
    DataHdr, DecodeLimits, Digests, Frame, FrameHeader, IcReq, IcResp, Pdu, R2t, Role, TermReq,
    decode_frame, decode_header,
};
pub use target::{TargetConn, TargetConnConfig, TargetEvent};
