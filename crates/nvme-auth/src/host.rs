//! The host's DH-HMAC-CHAP state machine for one queue (ebof's initiator).
//!
//! The caller drives the commands (Linux `nvme_queue_auth_work` in host/auth.c does the same
//! steps):
//!
//! 1. AUTH_Send [`HostAuth::start`] (Negotiate).
//! 2. AUTH_Receive with AL [`RECEIVE_ALLOC_LEN`], pass the data to
//!    [`HostAuth::handle_challenge`]; AUTH_Send the Reply it returns.
//! 3. AUTH_Receive, pass the data to [`HostAuth::handle_success1`]; if it returns
//!    `Some(success2)`, AUTH_Send it.
//! 4. On any `Err(HostError)`: if [`HostError::failure2`] holds bytes, AUTH_Send them; the queue
//!    is not authenticated. A Failure1 from the controller ends the exchange without Failure2.
//!
//! Differences from the Linux host, deliberately stricter: the controller's hash and DH group
//! must be among those offered; with a controller secret configured, a Success1 without a
//! controller response (RVALID clear) is a failure (Linux accepts it silently).

use std::sync::Arc;

use zeroize::Zeroizing;

use crate::chap::{ChapContext, HashId, responses_match};
use crate::config::AuthConfig;
use crate::dh::{DhError, DhGroup, DhPrivateKey};
use crate::msg::{
    self, DecodeError, DhchapDescriptor, Failure, FailureReason, Message, Negotiate, Reply,
};
use crate::rand::{OsRandom, RandomSource};

/// AL to use for the AUTH_Receive commands: enough for any Challenge (16 + 64 + 1024 bytes);
/// the same 4 KiB buffer the Linux host uses.
pub const RECEIVE_ALLOC_LEN: u32 = 4096;

/// The host's keys, NQNs and offered algorithms (see [`AuthConfig`]).
pub type HostConfig = AuthConfig;

/// Where the host's exchange on a queue stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HostState {
    /// Nothing sent yet.
    Idle,
    /// Negotiate sent.
    AwaitingChallenge,
    /// Reply sent.
    AwaitingSuccess1,
    /// Success1 accepted (and Success2 produced when bidirectional).
    Authenticated,
    /// The exchange failed.
    Failed,
}

/// Why the host's exchange failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HostErrorKind {
    /// The controller sent Failure1 (e.g. it rejected the host's response: wrong host key).
    #[error(
        "controller sent failure1 (reason code {reason_code:#04x}, explanation {explanation:#04x})"
    )]
    ControllerFailure {
        /// Reason code.
        reason_code: u8,
        /// Reason code explanation (see [`FailureReason::from_u8`]).
        explanation: u8,
    },
    /// The controller's message is malformed.
    #[error("malformed message from the controller: {0}")]
    Decode(#[from] DecodeError),
    /// A well-formed message other than the one expected.
    #[error("{got} received while expecting {expected}")]
    UnexpectedMessage {
        /// Expected message.
        expected: &'static str,
        /// Received message.
        got: &'static str,
    },
    /// T_ID differs from the Negotiate's.
    #[error("transaction id {got}, expected {expected}")]
    TransactionId {
        /// The exchange's T_ID.
        expected: u16,
        /// The message's.
        got: u16,
    },
    /// The controller chose a hash the host did not offer.
    #[error("controller chose {0}, which was not offered")]
    HashNotOffered(HashId),
    /// The controller chose a DH group the host did not offer.
    #[error("controller chose DH group {0}, which was not offered")]
    DhGroupNotOffered(DhGroup),
    /// The controller's DH value is unusable.
    #[error("controller DH value rejected: {0}")]
    DhValue(DhError),
    /// Success1's HL is not the chosen hash's length.
    #[error("success1 hash length {0} does not match the chosen hash")]
    HashLength(u8),
    /// The controller's response R2 is wrong: wrong controller key (or a fake controller).
    #[error("controller response mismatch (wrong controller key)")]
    ControllerResponseMismatch,
    /// Bidirectional authentication was requested but Success1 carries no response.
    #[error("controller did not answer the bidirectional challenge")]
    MissingControllerResponse,
    /// The random source failed.
    #[error("random source failed")]
    Random,
    /// A `handle_*` call out of order (caller bug, nothing sent to the controller).
    #[error("host authentication API used out of order")]
    WrongState,
}

/// A failed host exchange: why, and the Failure2 to AUTH_Send (if one is due).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind}")]
pub struct HostError {
    /// Why.
    pub kind: HostErrorKind,
    /// The Failure2 payload to AUTH_Send, when the spec has the host send one.
    pub failure2: Option<Vec<u8>>,
}

struct HostExchange {
    hash: HashId,
    /// (S2, C2, expected R2) when bidirectional.
    bidi: Option<(u32, Vec<u8>, Vec<u8>)>,
}

/// DH-HMAC-CHAP on one queue, host side.
pub struct HostAuth<R: RandomSource = OsRandom> {
    config: Arc<HostConfig>,
    rng: R,
    state: HostState,
    t_id: u16,
    exchange: Option<HostExchange>,
    negotiated: Option<(HashId, DhGroup)>,
}

impl<R: RandomSource> std::fmt::Debug for HostAuth<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostAuth")
            .field("state", &self.state)
            .field("t_id", &self.t_id)
            .field("negotiated", &self.negotiated)
            .finish_non_exhaustive()
    }
}

impl HostAuth<OsRandom> {
    /// A queue's state machine using the OS random source.
    pub fn with_os_random(config: Arc<HostConfig>) -> Self {
        Self::new(config, OsRandom)
    }
}

impl<R: RandomSource> HostAuth<R> {
    /// A queue's state machine, [`HostState::Idle`].
    pub fn new(config: Arc<HostConfig>, rng: R) -> Self {
        Self {
            config,
            rng,
            state: HostState::Idle,
            t_id: 0,
            exchange: None,
            negotiated: None,
        }
    }

    /// Current state.
    pub fn state(&self) -> HostState {
        self.state
    }

    /// Whether the exchange succeeded.
    pub fn is_authenticated(&self) -> bool {
        self.state == HostState::Authenticated
    }

    /// Hash and DH group the controller chose (for the log).
    pub fn negotiated(&self) -> Option<(HashId, DhGroup)> {
        self.negotiated
    }

    /// Starts (or restarts, for re-authentication) an exchange with transaction id `t_id`
    /// (Linux uses a per-controller counter): the Negotiate payload to AUTH_Send.
    pub fn start(&mut self, t_id: u16) -> Vec<u8> {
        self.t_id = t_id;
        self.exchange = None;
        self.negotiated = None;
        self.state = HostState::AwaitingChallenge;
        Message::Negotiate(Negotiate {
            t_id,
            sc_c: 0,
            napd: 1,
            dhchap: Some(DhchapDescriptor {
                hash_ids: self.config.hashes.iter().map(|h| h.id()).collect(),
                dh_group_ids: self.config.dh_groups.iter().map(|g| g.id()).collect(),
            }),
        })
        .encode()
    }

    fn fail(&mut self, kind: HostErrorKind, reason: Option<FailureReason>) -> HostError {
        self.state = HostState::Failed;
        self.exchange = None;
        HostError {
            kind,
            failure2: reason.map(|r| Message::Failure2(Failure::new(self.t_id, r)).encode()),
        }
    }

    /// Decodes a controller message; Failure1 and junk become errors.
    fn receive(&mut self, payload: &[u8], expected: &'static str) -> Result<Message, HostError> {
        let m = match msg::decode(payload) {
            Ok(m) => m,
            Err(e) => {
                let r = e.failure_reason();
                return Err(self.fail(HostErrorKind::Decode(e), Some(r)));
            }
        };
        if let Message::Failure1(f) = m {
            return Err(self.fail(
                HostErrorKind::ControllerFailure {
                    reason_code: f.reason_code,
                    explanation: f.explanation,
                },
                None,
            ));
        }
        if m.name() != expected {
            return Err(self.fail(
                HostErrorKind::UnexpectedMessage {
                    expected,
                    got: m.name(),
                },
                Some(FailureReason::IncorrectMessage),
            ));
        }
        if m.t_id() != self.t_id {
            return Err(self.fail(
                HostErrorKind::TransactionId {
                    expected: self.t_id,
                    got: m.t_id(),
                },
                Some(FailureReason::IncorrectMessage),
            ));
        }
        Ok(m)
    }

    /// Handles the AUTH_Receive data that should hold the Challenge; returns the Reply to
    /// AUTH_Send.
    pub fn handle_challenge(&mut self, payload: &[u8]) -> Result<Vec<u8>, HostError> {
        if self.state != HostState::AwaitingChallenge {
            return Err(HostError {
                kind: HostErrorKind::WrongState,
                failure2: None,
            });
        }
        let Message::Challenge(c) = self.receive(payload, "challenge")? else {
            return Err(self.fail(HostErrorKind::WrongState, None));
        };
        if !self.config.hashes.contains(&c.hash) {
            return Err(self.fail(
                HostErrorKind::HashNotOffered(c.hash),
                Some(FailureReason::HashUnusable),
            ));
        }
        if !self.config.dh_groups.contains(&c.dh_group) {
            return Err(self.fail(
                HostErrorKind::DhGroupNotOffered(c.dh_group),
                Some(FailureReason::DhGroupUnusable),
            ));
        }
        self.negotiated = Some((c.hash, c.dh_group));
        let (session_key, dh_value): (Option<Zeroizing<Vec<u8>>>, Vec<u8>) = match c.dh_group {
            DhGroup::Null => (None, Vec::new()),
            g => {
                let key = match DhPrivateKey::generate(g, &mut self.rng) {
                    Ok(k) => k,
                    Err(_) => {
                        return Err(self.fail(HostErrorKind::Random, Some(FailureReason::Failed)));
                    }
                };
                match key.shared_secret(&c.dh_value) {
                    Ok(ks) => (Some(ks), key.public_value()),
                    Err(e) => {
                        return Err(self.fail(
                            HostErrorKind::DhValue(e),
                            Some(FailureReason::IncorrectPayload),
                        ));
                    }
                }
            }
        };
        let config = self.config.clone();
        let ctx = ChapContext {
            hash: c.hash,
            t_id: self.t_id,
            sc_c: 0,
            hostnqn: &config.hostnqn,
            subnqn: &config.subnqn,
            session_key: session_key.as_deref().map(|v| v.as_slice()),
        };
        let response = ctx.host_response(&config.host_key, &c.challenge, c.seqnum);
        let bidi = match &config.ctrl_key {
            None => None,
            Some(ctrl_key) => {
                let mut c2 = vec![0u8; c.hash.digest_len()];
                let s2 = match self.rng.fill(&mut c2).and_then(|()| self.rng.seqnum()) {
                    Ok(s2) => s2,
                    Err(_) => {
                        return Err(self.fail(HostErrorKind::Random, Some(FailureReason::Failed)));
                    }
                };
                let r2 = ctx.controller_response(ctrl_key, &c2, s2);
                Some((s2, c2, r2))
            }
        };
        let reply = Message::Reply(Reply {
            t_id: self.t_id,
            response,
            challenge: bidi.as_ref().map(|(_, c2, _)| c2.clone()),
            seqnum: bidi.as_ref().map_or(0, |(s2, _, _)| *s2),
            dh_value,
        })
        .encode();
        self.exchange = Some(HostExchange { hash: c.hash, bidi });
        self.state = HostState::AwaitingSuccess1;
        Ok(reply)
    }

    /// Handles the AUTH_Receive data that should hold Success1; returns the Success2 to
    /// AUTH_Send when the exchange is bidirectional, `None` when it is complete as is.
    pub fn handle_success1(&mut self, payload: &[u8]) -> Result<Option<Vec<u8>>, HostError> {
        if self.state != HostState::AwaitingSuccess1 {
            return Err(HostError {
                kind: HostErrorKind::WrongState,
                failure2: None,
            });
        }
        let Message::Success1(s) = self.receive(payload, "success1")? else {
            return Err(self.fail(HostErrorKind::WrongState, None));
        };
        let Some(ex) = self.exchange.take() else {
            return Err(self.fail(HostErrorKind::WrongState, None));
        };
        if s.hl as usize != ex.hash.digest_len() {
            return Err(self.fail(
                HostErrorKind::HashLength(s.hl),
                Some(FailureReason::HashUnusable),
            ));
        }
        match (&ex.bidi, &s.response) {
            (None, _) => {
                self.state = HostState::Authenticated;
                Ok(None)
            }
            (Some(_), None) => Err(self.fail(
                HostErrorKind::MissingControllerResponse,
                Some(FailureReason::Failed),
            )),
            (Some((_, _, expected)), Some(got)) => {
                if !responses_match(expected, got) {
                    return Err(self.fail(
                        HostErrorKind::ControllerResponseMismatch,
                        Some(FailureReason::Failed),
                    ));
                }
                self.state = HostState::Authenticated;
                Ok(Some(Message::Success2 { t_id: self.t_id }.encode()))
            }
        }
    }
}
