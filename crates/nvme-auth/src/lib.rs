//! NVMe in-band authentication: DH-HMAC-CHAP (TP 8006, NVMe Base 2.x §8.3.4 "Authentication",
//! §8.13.5 in 2.0), for both roles — the controller (ebof's target) and the host (ebof's
//! initiator).
//!
//! **What it is**: the sans-IO protocol core. It parses the `DHHC-1:NN:…:` secrets, does the
//! FFDHE arithmetic, computes and checks the CHAP responses, decodes and encodes the
//! AUTH_Send / AUTH_Receive payloads, and runs one state machine per queue. It never touches a
//! socket, a clock or a log: the transport hands it payload bytes and gets payload bytes back,
//! and a timeout is the caller's `TargetAuth::abort_exchange` call.
//!
//! **What it is not**: the Fabrics command plumbing (fctype 05h AUTH_Send, 06h AUTH_Receive,
//! the Connect response's AUTHREQ bits, the "Authentication Required" status for other commands)
//! — `nvmf-target` and `nvmf-host` do that, with the helpers in [`msg`] and the constants below.
//! Not TLS and not secure-channel concatenation (SC_C ≠ 0 is refused with the spec's
//! "secure channel concatenation mismatch").
//!
//! Layout, in the order data flows:
//! - [`secret`]: `DHHC-1` secrets, the NQN-keyed key transformation.
//! - [`dh`]: RFC 7919 FFDHE groups and the null group; key pairs, peer-value checks.
//! - [`chap`]: hash identifiers, the augmented challenge and the two CHAP responses.
//! - [`msg`]: wire formats of Negotiate, Challenge, Reply, Success1/2, Failure1/2 — the one
//!   place untrusted bytes are decoded and bounds-checked.
//! - [`target`]: [`TargetAuth`], the controller's per-queue state machine.
//! - [`host`]: [`HostAuth`], the host's per-queue state machine.
//!
//! The exchange (one per queue, admin queue first, then every I/O queue):
//!
//! ```text
//! host                                   controller
//! AUTH_Send    Negotiate  (T_ID, hashes, DH groups, SC_C) ─►
//! AUTH_Receive            ◄─ Challenge (hash, group, S1, C1, g^x)
//! AUTH_Send    Reply      (R1, [S2, C2], g^y) ─►
//! AUTH_Receive            ◄─ Success1 ([R2])   or Failure1 (reason)
//! AUTH_Send    Success2 (bidirectional only)   or Failure2 (reason)
//! ```
//!
//! Facts relied on, each checked against Linux (drivers/nvme/common/auth.c,
//! drivers/nvme/host/auth.c, drivers/nvme/target/auth.c, fabrics-cmd-auth.c) and SPDK
//! (lib/nvme/nvme_auth.c): see the module docs of [`chap`], [`msg`] and [`secret`].

#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod chap;
pub mod config;
pub mod dh;
pub mod host;
pub mod msg;
pub mod rand;
pub mod secret;
pub mod target;

pub use chap::HashId;
pub use config::AuthConfig;
pub use dh::DhGroup;
pub use host::{HostAuth, HostConfig, HostError, HostErrorKind, HostState};
pub use msg::{FailureReason, Message};
pub use rand::{OsRandom, RandomError, RandomSource};
pub use secret::{DhchapSecret, KeyTransform, SecretError, TransformedKey};
pub use target::{AuthFailure, FailureCause, ReceiveError, TargetAuth, TargetConfig, TargetState};

/// Connect response Dword 0, AUTHREQ field: "Authentication Transaction Required" — the host must
/// run DH-HMAC-CHAP on this queue before anything else (Linux `NVME_CONNECT_AUTHREQ_ATR`).
pub const CONNECT_AUTHREQ_ATR: u32 = 1 << 17;
/// Connect response Dword 0, AUTHREQ field: "Authentication Secure Channel Required"
/// (`NVME_CONNECT_AUTHREQ_ASCR`); ebof does not set it (no secure-channel concatenation).
pub const CONNECT_AUTHREQ_ASCR: u32 = 1 << 18;
/// Status code type for [`SC_AUTHENTICATION_REQUIRED`]: command specific.
pub const SCT_COMMAND_SPECIFIC: u8 = 0x1;
/// Status code "Authentication Required" (SCT 1h, SC 91h, Linux `NVME_SC_AUTH_REQUIRED` 0x191):
/// the answer to any command other than Fabrics ones on a queue that has not authenticated yet.
pub const SC_AUTHENTICATION_REQUIRED: u8 = 0x91;
