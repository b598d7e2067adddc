//! The controller's DH-HMAC-CHAP state machine for one queue (admin or I/O).
//!
//! Flow (NVMe Base 2.x §8.3.4.5; Linux `nvmet_execute_auth_send` / `_receive` in
//! target/fabrics-cmd-auth.c):
//!
//! ```text
//! Idle ─Negotiate─► ChallengePending ─Receive─► AwaitingReply ─Reply ok─► Success1Pending
//!   Success1Pending ─Receive─► Authenticated                      (one-way)
//!   Success1Pending ─Receive─► AwaitingSuccess2 ─Success2─► Authenticated (bidirectional)
//! any failure ─► Failure1Pending ─Receive (returns Failure1)─► Failed
//! Failure2 from the host (during an exchange) ─► Failed
//! Negotiate in any state ─► a new exchange (re-authentication)
//! ```
//!
//! Rules this follows:
//! - An AUTH_Send whose payload is wrong (garbled, out of order, wrong T_ID, wrong response)
//!   still completes with success status; the failure is reported in the Failure1 that the
//!   next AUTH_Receive returns (Linux does the same; the Linux host then logs the reason and
//!   gives up). Only the command fields — SECP/SPSP0/SPSP1/TL/AL — earn an NVMe error status,
//!   see [`crate::msg::check_command`].
//! - T_ID: the host picks it in the Negotiate; Reply, Success2 and Failure2 must repeat it
//!   (mismatch → "incorrect payload", as Linux).
//! - S1 is a fresh random non-zero number per Challenge; S2 = 0 in the Reply means "no
//!   bidirectional authentication" even if CVALID is set (that C2 only seeds a TLS PSK).
//! - Hash and DH group: the first entry of the configured list (the operator's preference)
//!   that the host offers.
//! - A host asking for bidirectional authentication when no controller secret is configured
//!   fails with "authentication failed" (Linux `nvmet_auth_success1`).
//! - Authenticated means: one-way — after Success1 was handed out; bidirectional — after the
//!   host's Success2. During a re-authentication the queue stays authenticated until the new
//!   exchange fails; any failure clears it.
//! - No timer lives here: if the host goes quiet mid-exchange, call
//!   [`TargetAuth::abort_exchange`] (Linux resets after KATO, or 120 s without one).
//! - The response check is constant-time ([`crate::chap::responses_match`]).

use std::sync::Arc;

use zeroize::Zeroizing;

use crate::chap::{ChapContext, HashId, responses_match};
use crate::config::AuthConfig;
use crate::dh::{DhError, DhGroup, DhPrivateKey};
use crate::msg::{self, Challenge, DecodeError, Failure, FailureReason, Message, Reply, Success1};
use crate::rand::{OsRandom, RandomSource};

/// What the controller knows about one host: its keys, the NQNs, the allowed hashes and DH
/// groups in preference order (see [`AuthConfig`]).
pub type TargetConfig = AuthConfig;

/// Where a queue's authentication stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TargetState {
    /// No exchange yet (or one was aborted): expecting a Negotiate.
    Idle,
    /// Negotiate accepted: the next AUTH_Receive returns the Challenge.
    ChallengePending,
    /// Challenge sent: expecting the Reply.
    AwaitingReply,
    /// Reply verified: the next AUTH_Receive returns Success1.
    Success1Pending,
    /// Success1 (with R2) sent: expecting Success2 or Failure2.
    AwaitingSuccess2,
    /// Done, the queue is authenticated.
    Authenticated,
    /// The exchange failed: the next AUTH_Receive returns Failure1.
    Failure1Pending,
    /// Failure1 delivered or Failure2 received. A new Negotiate may start over; whether the
    /// association survives is the caller's policy (Linux tears the controller down).
    Failed,
}

/// The detail of a failure, for the log line (never contains key material).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FailureCause {
    /// The payload is not a well-formed message.
    #[error("malformed message: {0}")]
    Decode(#[from] DecodeError),
    /// A well-formed message at the wrong point of the exchange.
    #[error("{got} received while expecting {expected}")]
    UnexpectedMessage {
        /// What the state machine expected.
        expected: &'static str,
        /// What arrived.
        got: &'static str,
    },
    /// AUTH_Receive while the controller has nothing to send.
    #[error("AUTH_Receive while expecting {expected}")]
    ReceiveOutOfOrder {
        /// What the state machine expected instead.
        expected: &'static str,
    },
    /// T_ID differs from the Negotiate's.
    #[error("transaction id {got}, expected {expected}")]
    TransactionId {
        /// The exchange's T_ID.
        expected: u16,
        /// The message's T_ID.
        got: u16,
    },
    /// The Negotiate has no DH-HMAC-CHAP protocol descriptor.
    #[error("no DH-HMAC-CHAP protocol descriptor in the negotiate")]
    NoDhchapProtocol,
    /// The host asked for secure channel concatenation, which is not supported.
    #[error("secure channel concatenation {0:#04x} requested, not supported")]
    SecureChannelUnsupported(u8),
    /// None of the host's hashes is allowed.
    #[error("no hash function in common with the host")]
    NoCommonHash,
    /// None of the host's DH groups is allowed.
    #[error("no DH group in common with the host")]
    NoCommonDhGroup,
    /// The Reply's HL is not the chosen hash's length.
    #[error("response length {got}, expected {expected}")]
    HashLength {
        /// Digest length of the chosen hash.
        expected: usize,
        /// HL of the Reply.
        got: usize,
    },
    /// The host's DH value is unusable.
    #[error("host DH value rejected: {0}")]
    DhValue(DhError),
    /// The host sent a DH value although the null group was chosen.
    #[error("host DH value present with the null DH group")]
    UnexpectedDhValue,
    /// The host's response does not match: wrong host secret (or wrong NQN).
    #[error("host response mismatch (wrong host key)")]
    ResponseMismatch,
    /// The host asked for bidirectional authentication but no controller secret is set.
    #[error("host requested bidirectional authentication but no controller key is configured")]
    NoControllerKey,
    /// The host ended the exchange with Failure2 (it rejected the controller's response).
    #[error("host sent failure2 (reason code {reason_code:#04x}, explanation {explanation:#04x})")]
    HostFailure2 {
        /// Reason code.
        reason_code: u8,
        /// Reason code explanation.
        explanation: u8,
    },
    /// The random source failed.
    #[error("random source failed")]
    Random,
}

/// An authentication failure on this queue: the explanation sent in Failure1 and the cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{reason}: {cause}")]
pub struct AuthFailure {
    /// Reason code explanation (the wire value of Failure1).
    pub reason: FailureReason,
    /// Why, for the log.
    pub cause: FailureCause,
}

/// AUTH_Receive could not be answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ReceiveError {
    /// AL is smaller than the message: complete with "Invalid Field in Command"; the state is
    /// unchanged, the host may retry with a larger AL.
    #[error("allocation length {al} too small, the message needs {needed} bytes")]
    AllocationTooSmall {
        /// Bytes the message needs.
        needed: usize,
        /// The command's AL.
        al: u32,
    },
}

struct Exchange {
    hash: HashId,
    group: DhGroup,
    sc_c: u8,
    s1: u32,
    c1: Vec<u8>,
    dh: Option<DhPrivateKey>,
    /// R2 to send in Success1 (bidirectional).
    r2: Option<Vec<u8>>,
}

/// DH-HMAC-CHAP on one queue, controller side.
pub struct TargetAuth<R: RandomSource = OsRandom> {
    config: Arc<TargetConfig>,
    rng: R,
    state: TargetState,
    authenticated: bool,
    t_id: u16,
    exchange: Option<Exchange>,
    negotiated: Option<(HashId, DhGroup)>,
    failure: Option<AuthFailure>,
}

impl<R: RandomSource> std::fmt::Debug for TargetAuth<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TargetAuth")
            .field("state", &self.state)
            .field("authenticated", &self.authenticated)
            .field("t_id", &self.t_id)
            .field("negotiated", &self.negotiated)
            .field("failure", &self.failure)
            .finish_non_exhaustive()
    }
}

impl TargetAuth<OsRandom> {
    /// A queue's state machine using the OS random source.
    pub fn with_os_random(config: Arc<TargetConfig>) -> Self {
        Self::new(config, OsRandom)
    }
}

impl<R: RandomSource> TargetAuth<R> {
    /// A queue's state machine, in [`TargetState::Idle`], not authenticated.
    pub fn new(config: Arc<TargetConfig>, rng: R) -> Self {
        Self {
            config,
            rng,
            state: TargetState::Idle,
            authenticated: false,
            t_id: 0,
            exchange: None,
            negotiated: None,
            failure: None,
        }
    }

    /// Current state.
    pub fn state(&self) -> TargetState {
        self.state
    }

    /// Whether commands other than Fabrics ones may run on this queue.
    pub fn is_authenticated(&self) -> bool {
        self.authenticated
    }

    /// Whether an exchange is under way (the caller's cue to arm or keep a timeout).
    pub fn exchange_in_progress(&self) -> bool {
        matches!(
            self.state,
            TargetState::ChallengePending
                | TargetState::AwaitingReply
                | TargetState::Success1Pending
                | TargetState::AwaitingSuccess2
                | TargetState::Failure1Pending
        )
    }

    /// Hash and DH group of the current or last exchange (for the log).
    pub fn negotiated(&self) -> Option<(HashId, DhGroup)> {
        self.negotiated
    }

    /// The last failure, if any.
    pub fn last_failure(&self) -> Option<&AuthFailure> {
        self.failure.as_ref()
    }

    /// Abandons an exchange in progress (timeout): back to expecting a Negotiate; a queue that
    /// was authenticated before a re-authentication stays authenticated (as Linux).
    pub fn abort_exchange(&mut self) {
        self.exchange = None;
        self.state = if self.authenticated {
            TargetState::Authenticated
        } else {
            TargetState::Idle
        };
    }

    fn fail(&mut self, reason: FailureReason, cause: FailureCause) -> Result<(), AuthFailure> {
        let f = AuthFailure { reason, cause };
        self.exchange = None;
        self.authenticated = false;
        self.failure = Some(f);
        self.state = TargetState::Failure1Pending;
        Err(f)
    }

    fn expected_send(&self) -> &'static str {
        match self.state {
            TargetState::AwaitingReply => "reply",
            TargetState::AwaitingSuccess2 => "success2",
            TargetState::ChallengePending => "AUTH_Receive (challenge)",
            TargetState::Success1Pending => "AUTH_Receive (success1)",
            TargetState::Failure1Pending => "AUTH_Receive (failure1)",
            TargetState::Idle | TargetState::Authenticated | TargetState::Failed => "negotiate",
        }
    }

    /// Handles the payload of an AUTH_Send (after [`msg::check_command`] accepted the command).
    ///
    /// `Ok` and `Err` both mean: complete the AUTH_Send with success status. `Err` says the
    /// exchange failed (the next AUTH_Receive returns Failure1, or the host already ended it
    /// with Failure2) and why — log it, it never holds key material.
    pub fn on_send(&mut self, payload: &[u8]) -> Result<(), AuthFailure> {
        let m = match msg::decode(payload) {
            Ok(m) => m,
            Err(e) => return self.fail(e.failure_reason(), FailureCause::Decode(e)),
        };
        if let Message::Negotiate(n) = &m {
            return self.handle_negotiate(n);
        }
        let expected_tid = self.t_id;
        match (self.state, &m) {
            (TargetState::AwaitingReply, Message::Reply(r)) => {
                if r.t_id != expected_tid {
                    return self.fail(
                        FailureReason::IncorrectPayload,
                        FailureCause::TransactionId {
                            expected: expected_tid,
                            got: r.t_id,
                        },
                    );
                }
                self.handle_reply(r)
            }
            (TargetState::AwaitingSuccess2, Message::Success2 { t_id }) => {
                if *t_id != expected_tid {
                    return self.fail(
                        FailureReason::IncorrectPayload,
                        FailureCause::TransactionId {
                            expected: expected_tid,
                            got: *t_id,
                        },
                    );
                }
                self.exchange = None;
                self.authenticated = true;
                self.state = TargetState::Authenticated;
                Ok(())
            }
            (
                TargetState::ChallengePending
                | TargetState::AwaitingReply
                | TargetState::Success1Pending
                | TargetState::AwaitingSuccess2,
                Message::Failure2(f),
            ) => {
                let af = AuthFailure {
                    reason: f.reason().unwrap_or(FailureReason::Failed),
                    cause: FailureCause::HostFailure2 {
                        reason_code: f.reason_code,
                        explanation: f.explanation,
                    },
                };
                self.exchange = None;
                self.authenticated = false;
                self.failure = Some(af);
                self.state = TargetState::Failed;
                Err(af)
            }
            _ => {
                let expected = self.expected_send();
                self.fail(
                    FailureReason::IncorrectMessage,
                    FailureCause::UnexpectedMessage {
                        expected,
                        got: m.name(),
                    },
                )
            }
        }
    }

    fn handle_negotiate(&mut self, n: &msg::Negotiate) -> Result<(), AuthFailure> {
        // A Negotiate always starts over: first exchange or re-authentication.
        self.exchange = None;
        self.t_id = n.t_id;
        self.negotiated = None;
        if n.sc_c != 0 {
            return self.fail(
                FailureReason::ConcatMismatch,
                FailureCause::SecureChannelUnsupported(n.sc_c),
            );
        }
        let Some(d) = &n.dhchap else {
            return self.fail(
                FailureReason::ProtocolNotUsable,
                FailureCause::NoDhchapProtocol,
            );
        };
        let Some(hash) = self
            .config
            .hashes
            .iter()
            .copied()
            .find(|h| d.hash_ids.contains(&h.id()))
        else {
            return self.fail(FailureReason::HashUnusable, FailureCause::NoCommonHash);
        };
        let Some(group) = self
            .config
            .dh_groups
            .iter()
            .copied()
            .find(|g| d.dh_group_ids.contains(&g.id()))
        else {
            return self.fail(
                FailureReason::DhGroupUnusable,
                FailureCause::NoCommonDhGroup,
            );
        };
        self.negotiated = Some((hash, group));
        self.exchange = Some(Exchange {
            hash,
            group,
            sc_c: n.sc_c,
            s1: 0,
            c1: Vec::new(),
            dh: None,
            r2: None,
        });
        self.state = TargetState::ChallengePending;
        Ok(())
    }

    fn handle_reply(&mut self, r: &Reply) -> Result<(), AuthFailure> {
        let Some(ex) = self.exchange.take() else {
            return self.fail(
                FailureReason::IncorrectMessage,
                FailureCause::UnexpectedMessage {
                    expected: "negotiate",
                    got: "reply",
                },
            );
        };
        if r.response.len() != ex.hash.digest_len() {
            return self.fail(
                FailureReason::IncorrectPayload,
                FailureCause::HashLength {
                    expected: ex.hash.digest_len(),
                    got: r.response.len(),
                },
            );
        }
        let session_key: Option<Zeroizing<Vec<u8>>> = match (&ex.dh, ex.group) {
            (None, _) | (_, DhGroup::Null) => {
                if !r.dh_value.is_empty() {
                    return self.fail(
                        FailureReason::IncorrectPayload,
                        FailureCause::UnexpectedDhValue,
                    );
                }
                None
            }
            (Some(key), _) => match key.shared_secret(&r.dh_value) {
                Ok(k) => Some(k),
                Err(e) => {
                    return self.fail(FailureReason::DhGroupUnusable, FailureCause::DhValue(e));
                }
            },
        };
        let config = self.config.clone();
        let ctx = ChapContext {
            hash: ex.hash,
            t_id: self.t_id,
            sc_c: ex.sc_c,
            hostnqn: &config.hostnqn,
            subnqn: &config.subnqn,
            session_key: session_key.as_deref().map(|v| v.as_slice()),
        };
        let expected = ctx.host_response(&config.host_key, &ex.c1, ex.s1);
        if !responses_match(&expected, &r.response) {
            return self.fail(FailureReason::Failed, FailureCause::ResponseMismatch);
        }
        let mut r2 = None;
        if let (Some(c2), true) = (&r.challenge, r.seqnum != 0) {
            let Some(ctrl_key) = &config.ctrl_key else {
                return self.fail(FailureReason::Failed, FailureCause::NoControllerKey);
            };
            r2 = Some(ctx.controller_response(ctrl_key, c2, r.seqnum));
        }
        self.exchange = Some(Exchange { r2, dh: None, ..ex });
        self.state = TargetState::Success1Pending;
        Ok(())
    }

    /// Answers an AUTH_Receive with allocation length `al`: the message to return, at most `al`
    /// bytes. Transfer it zero-padded to exactly `al` bytes, as Linux nvmet does (the Linux
    /// and SPDK hosts ask for 4096 and zero their buffer; the decoders ignore the padding).
    pub fn on_receive(&mut self, al: u32) -> Result<Vec<u8>, ReceiveError> {
        let fits = |needed: usize| {
            if needed > al as usize {
                Err(ReceiveError::AllocationTooSmall { needed, al })
            } else {
                Ok(())
            }
        };
        match self.state {
            TargetState::ChallengePending => {
                let (hash, group) = match &self.exchange {
                    Some(ex) => (ex.hash, ex.group),
                    None => return Ok(self.out_of_order_receive()),
                };
                fits(16 + hash.digest_len() + group.value_len())?;
                match self.make_challenge() {
                    Ok(bytes) => {
                        self.state = TargetState::AwaitingReply;
                        Ok(bytes)
                    }
                    Err(()) => {
                        let _ = self.fail(FailureReason::Failed, FailureCause::Random);
                        Ok(self.take_failure1())
                    }
                }
            }
            TargetState::Success1Pending => {
                let Some(ex) = self.exchange.as_mut() else {
                    return Ok(self.out_of_order_receive());
                };
                fits(16 + ex.r2.as_ref().map_or(0, Vec::len))?;
                let r2 = ex.r2.take();
                let bidirectional = r2.is_some();
                let bytes = Message::Success1(Success1 {
                    t_id: self.t_id,
                    hl: ex.hash.digest_len() as u8,
                    response: r2,
                })
                .encode();
                if bidirectional {
                    self.state = TargetState::AwaitingSuccess2;
                } else {
                    self.exchange = None;
                    self.authenticated = true;
                    self.state = TargetState::Authenticated;
                }
                Ok(bytes)
            }
            TargetState::Failure1Pending | TargetState::Failed => {
                fits(8)?;
                Ok(self.take_failure1())
            }
            TargetState::Idle
            | TargetState::AwaitingReply
            | TargetState::AwaitingSuccess2
            | TargetState::Authenticated => {
                fits(8)?;
                Ok(self.out_of_order_receive())
            }
        }
    }

    fn out_of_order_receive(&mut self) -> Vec<u8> {
        let expected = self.expected_send();
        let _ = self.fail(
            FailureReason::IncorrectMessage,
            FailureCause::ReceiveOutOfOrder { expected },
        );
        self.take_failure1()
    }

    fn take_failure1(&mut self) -> Vec<u8> {
        let reason = self.failure.map_or(FailureReason::Failed, |f| f.reason);
        self.state = TargetState::Failed;
        self.authenticated = false;
        Message::Failure1(Failure::new(self.t_id, reason)).encode()
    }

    fn make_challenge(&mut self) -> Result<Vec<u8>, ()> {
        let Some(ex) = self.exchange.as_mut() else {
            return Err(());
        };
        let s1 = self.rng.seqnum().map_err(|_| ())?;
        let mut c1 = vec![0u8; ex.hash.digest_len()];
        self.rng.fill(&mut c1).map_err(|_| ())?;
        let (dh, dh_value) = match ex.group {
            DhGroup::Null => (None, Vec::new()),
            g => {
                let k = DhPrivateKey::generate(g, &mut self.rng).map_err(|_| ())?;
                let v = k.public_value();
                (Some(k), v)
            }
        };
        let bytes = Message::Challenge(Challenge {
            t_id: self.t_id,
            hash: ex.hash,
            dh_group: ex.group,
            seqnum: s1,
            challenge: c1.clone(),
            dh_value,
        })
        .encode();
        ex.s1 = s1;
        ex.c1 = c1;
        ex.dh = dh;
        Ok(bytes)
    }
}
