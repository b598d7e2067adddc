//! In-band authentication on a queue (NVMe Base 2.x section 8.3.4; the Fabrics commands
//! AUTH_Send 05h and AUTH_Receive 06h).
//!
//! The controller core knows *when* a queue must authenticate and what a queue may do until
//! it has; *how* (DH-HMAC-CHAP's messages, hashes and groups) is behind [`AuthPolicy`] and
//! [`AuthSession`], implemented outside this crate (the `ebof` binary wires in the
//! `nvme-auth` crate), so the core stays free of cryptography and testable with a fake.
//!
//! The flow, as the Linux host drives it:
//! - Connect of a queue (admin and every I/O queue) whose host has a key: the Connect
//!   completion carries AUTHREQ.ATR (DW0 bit 17), and the queue is *gated*;
//! - on a gated queue every command but AUTH_Send / AUTH_Receive fails with Authentication
//!   Required (SCT 1h, SC 91h, DNR), before any data moves;
//! - AUTH_Send (host→controller message, TL bytes) and AUTH_Receive (controller→host
//!   message, at most AL bytes) carry the exchange; when the session reports success the
//!   gate opens;
//! - a Negotiate on an authenticated queue starts re-authentication; the queue stays usable
//!   meanwhile, and a failed re-authentication gates it again.
//!
//! SECP must be E9h (DH-HMAC-CHAP), SPSP0 and SPSP1 01h, TL and AL non-zero; otherwise
//! Invalid Field, as Linux nvmet answers.

use std::fmt;

use nvme_spec::{Sqe, Status};

use crate::error::CmdError;

/// SECP of DH-HMAC-CHAP (Security Protocol E9h).
pub const SECP_DHCHAP: u8 = 0xE9;
/// Largest AUTH_Send payload we accept: a DH-HMAC-CHAP Reply with an ffdhe8192 value
/// (1024 bytes) and two SHA-512 sized fields is about 1.2 KiB.
pub const AUTH_SEND_MAX: u32 = 4096;
/// Largest AUTH_Receive we fill (a Challenge with an ffdhe8192 value is about 1.1 KiB).
pub const AUTH_RECV_MAX: u32 = 4096;
/// Byte offsets in the SQE, for the Error Information log.
pub(crate) mod off {
    pub const SPSP0: u16 = 41;
    pub const SPSP1: u16 = 42;
    pub const SECP: u16 = 43;
    pub const TL_AL: u16 = 44;
}

/// Where an exchange stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthProgress {
    /// Messages still to come.
    InProgress,
    /// The host (and, bidirectionally, the controller) proved its identity.
    Succeeded,
    /// The exchange failed: the queue stays (or becomes) gated.
    Failed,
}

/// Why an AUTH_Send or AUTH_Receive itself was refused (not an authentication failure, which
/// is a message of the protocol): the NVMe status to complete it with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthCmdError(pub Status);

/// One queue's authentication exchange.
pub trait AuthSession: Send {
    /// An AUTH_Send payload (a protocol message from the host).
    fn send(&mut self, payload: &[u8]) -> Result<(), AuthCmdError>;
    /// The message AUTH_Receive returns (at most `al` bytes are sent).
    fn receive(&mut self, al: u32) -> Result<Vec<u8>, AuthCmdError>;
    /// Where the exchange stands: the queue is ungated only once this is `Succeeded`.
    fn progress(&self) -> AuthProgress;
    /// Why the exchange failed, in words, for the log (never a secret).
    fn failure(&self) -> Option<String> {
        None
    }
}

/// Which hosts must authenticate, and the sessions for them.
pub trait AuthPolicy: Send + Sync {
    /// A session for a queue of `hostnqn` connecting to `subnqn`, or `None` when this host
    /// has no key (no authentication). `qid` 0 is the admin queue.
    fn session(&self, hostnqn: &str, subnqn: &str, qid: u16) -> Option<Box<dyn AuthSession>>;
}

impl fmt::Debug for dyn AuthPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AuthPolicy")
    }
}

/// A queue's authentication: the exchange with its host, when its host has a key, and the
/// gate that keeps every other command out until the exchange succeeded. Only the exchange's
/// progress opens or closes the gate ([`QueueAuth::progress`]).
#[derive(Debug, Default)]
pub(crate) struct QueueAuth {
    exchange: Option<Box<Exchange>>,
    /// Authentication is required and not done: every command but AUTH_Send / AUTH_Receive
    /// fails (one predictable branch per command otherwise).
    gate: bool,
}

/// One exchange and what of it was logged.
struct Exchange {
    session: Box<dyn AuthSession>,
    /// Reported once: success or failure is logged when it happens.
    logged: AuthProgress,
}

impl fmt::Debug for Exchange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueueAuth")
            .field("progress", &self.session.progress())
            .finish()
    }
}

/// How an exchange moved since it was last looked at ([`QueueAuth::progress`]).
pub(crate) enum AuthMoved {
    Succeeded,
    /// With the reason, in words.
    Failed(String),
}

impl QueueAuth {
    /// The queue's host must authenticate with `session`: the gate closes until it succeeds.
    pub(crate) fn start(&mut self, session: Box<dyn AuthSession>) {
        self.exchange = Some(Box::new(Exchange {
            session,
            logged: AuthProgress::InProgress,
        }));
        self.gate = true;
    }

    /// Authentication is required and not done.
    #[inline]
    pub(crate) fn gated(&self) -> bool {
        self.gate
    }

    /// The host has a key here (an exchange was started).
    #[inline]
    pub(crate) fn active(&self) -> bool {
        self.exchange.is_some()
    }

    /// The exchange, for AUTH_Send and AUTH_Receive.
    pub(crate) fn session(&mut self) -> Option<&mut (dyn AuthSession + 'static)> {
        self.exchange.as_mut().map(|e| &mut *e.session)
    }

    /// Open or close the gate as the exchange moved; `Some` the first time it reached an
    /// outcome (for the caller to log and count).
    pub(crate) fn progress(&mut self) -> Option<AuthMoved> {
        let e = self.exchange.as_mut()?;
        let p = e.session.progress();
        if p == e.logged {
            return None;
        }
        e.logged = p;
        match p {
            AuthProgress::Succeeded => {
                self.gate = false;
                Some(AuthMoved::Succeeded)
            }
            AuthProgress::Failed => {
                self.gate = true;
                let why = e
                    .session
                    .failure()
                    .unwrap_or_else(|| "authentication failed".into());
                Some(AuthMoved::Failed(why))
            }
            AuthProgress::InProgress => None,
        }
    }
}

/// Connect response DW0 bit 17: AUTHREQ.ATR, an authentication transaction is required.
pub const CONNECT_AUTHREQ_ATR: u32 = 1 << 17;

/// SECP / SPSP0 / SPSP1 / TL-AL of an AUTH_Send or AUTH_Receive, checked.
pub(crate) fn check_fields(sqe: &Sqe) -> Result<u32, CmdError> {
    let dw10 = sqe.cdw10().to_le_bytes();
    let (spsp0, spsp1, secp) = (dw10[1], dw10[2], dw10[3]);
    if secp != SECP_DHCHAP {
        return Err(CmdError::at(Status::INVALID_FIELD, off::SECP));
    }
    if spsp0 != 0x01 {
        return Err(CmdError::at(Status::INVALID_FIELD, off::SPSP0));
    }
    if spsp1 != 0x01 {
        return Err(CmdError::at(Status::INVALID_FIELD, off::SPSP1));
    }
    let len = sqe.cdw11();
    if len == 0 {
        return Err(CmdError::at(Status::INVALID_FIELD, off::TL_AL));
    }
    Ok(len)
}

/// The status of a command refused on a queue that has not authenticated.
pub(crate) fn auth_required() -> CmdError {
    CmdError::from(Status::AUTH_REQUIRED)
}
