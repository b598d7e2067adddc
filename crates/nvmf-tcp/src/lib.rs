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
//!
//! # Example
//!
//! A host and a target connected by nothing but byte buffers: the IC exchange, one command
//! capsule and its response. Bytes arrive in any chunking; "not enough yet" is `Ok(None)`.
//!
//! ```
//! use nvme_spec::{CommandId, Cqe, QueueId, Sqe, Status, opcode::admin};
//! use nvmf_tcp::{HostConn, HostConnConfig, HostEvent, TargetConn, TargetConnConfig, TargetEvent};
//!
//! let mut host = HostConn::new(HostConnConfig::default());
//! let mut target = TargetConn::new(TargetConnConfig::default());
//!
//! // Host → target: ICReq. Half of it is not a PDU yet.
//! let mut wire = Vec::new();
//! host.encode_icreq(&mut wire);
//! let mut to_host = Vec::new();
//! assert!(target.decode_one(&wire[..64], &mut to_host)?.is_none());
//! let (ev, used) = target.decode_one(&wire, &mut to_host)?.expect("a whole ICReq");
//! assert!(matches!(ev, TargetEvent::Established { .. }));
//! assert_eq!(used, wire.len());
//!
//! // Target → host: the ICResp it appended.
//! let (ev, _) = host.decode_one(&to_host)?.expect("a whole ICResp");
//! assert!(matches!(ev, HostEvent::Established { .. }));
//!
//! // A Keep Alive capsule and its response.
//! let mut wire = Vec::new();
//! host.encode_capsule(&mut wire, &Sqe::new(admin::KEEP_ALIVE, CommandId(3)), &[]);
//! let mut out = Vec::new();
//! let Some((TargetEvent::Command { sqe, icd }, _)) = target.decode_one(&wire, &mut out)? else {
//!     panic!("expected a command");
//! };
//! assert_eq!((sqe.opcode(), sqe.cid(), icd.len()), (admin::KEEP_ALIVE, CommandId(3), 0));
//! target.encode_resp(&mut out, &Cqe::new(sqe.cid(), QueueId::ADMIN, Status::SUCCESS));
//! let (ev, _) = host.decode_one(&out)?.expect("a whole CapsuleResp");
//! assert!(matches!(ev, HostEvent::Response(cqe) if cqe.cid == 3 && cqe.status.is_success()));
//! # Ok::<(), nvmf_tcp::ProtocolError>(())
//! ```

// `ProtocolError` carries the echoed header inline (128 bytes) so that reporting a peer's
// violation never allocates; it is returned once per connection at most, so the larger `Result`
// on the hot path costs nothing measurable, while boxing would allocate.
#![allow(clippy::result_large_err)]
#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

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
