//! DH-HMAC-CHAP (`nvme-auth`): arbitrary AUTH_Send / AUTH_Receive payloads into the message
//! codec (`msg.rs`) and into a controller-side [`TargetAuth`] and a host-side [`HostAuth`]
//! that otherwise talk to each other honestly, as a host and ebof's target would.
//!
//! Input: `[mode, keys, ops...]`.
//! - `mode` picks the algorithms: bits 0-1 the hashes the host offers, bits 2-3 those the
//!   target allows (one choice is none), bit 4 the host also offers ffdhe2048, bit 5 the target
//!   prefers ffdhe2048 over the null group, bit 6 bidirectional authentication (the host has a
//!   controller key), bit 7 the target has no controller key.
//! - `keys`: bits 0-1 the secrets' transformation (`NN`), bits 2-3 their length, bit 4 the
//!   target holds another host key, bit 5 another controller key, bits 6-7 seed the random
//!   sources (challenges, DH keys, S1/S2) and the first T_ID.
//! - `ops`: records `[op, len LE16, payload[len]]` (a short last payload is what is left), at
//!   most [`MAX_OPS`]. `op % 10`: 0 one honest step (deliver the host's pending AUTH_Send; else,
//!   if the host waits, an AUTH_Receive of 4 KiB whose data goes to the host; else the host
//!   starts a (re-)authentication); 1 the payload as an AUTH_Send to the target; 2 the payload as
//!   AUTH_Receive data to the host; 3 patch the pending AUTH_Send (`[offset, xor]` pairs, an odd
//!   last byte truncates); 4 an AUTH_Receive with AL from the payload's first two bytes, patched
//!   with the rest, to the host; 5 the target's exchange times out; 6 the pending AUTH_Send is
//!   lost; 7 an extra AUTH_Receive with AL from the payload; 8 replay an earlier host message;
//!   9 codec only: a well-formed message built from the payload, `DHHC-1` secret text, the
//!   AUTH command fields.
//!
//! Checked, beyond "never panics":
//! - codec: every payload that decodes re-encodes to at most its own length and decodes to the
//!   same message; every message built from typed values decodes to itself; what either state
//!   machine sends decodes; a `DHHC-1` secret exports to text that parses back to it.
//! - no authentication without the keys: the target reaches "Success1 pending" only for a Reply
//!   carrying a response the honest host computed; a bidirectional host accepts only a
//!   controller response the honest target computed.
//! - state: Failure1/Failure2 and errors leave the target unauthenticated; an AUTH_Receive
//!   refused for a small AL changes nothing; the controller's messages fit AL and match its
//!   state.
//! - liveness: with matching keys and algorithms and only honest steps, nothing fails and the
//!   target is authenticated whenever the host is and nothing is in flight.

use crate::Features;
use nvme_auth::host::RECEIVE_ALLOC_LEN;
use nvme_auth::msg::{
    self, Challenge, DhchapDescriptor, Failure, MAX_IDS, Message, Negotiate, Reply, Success1,
};
use nvme_auth::target::ReceiveError;
use nvme_auth::{
    AuthConfig, DhGroup, DhchapSecret, HashId, HostAuth, HostState, KeyTransform, RandomError,
    RandomSource, TargetAuth, TargetState,
};
use std::sync::Arc;

/// At most this many operations per input.
pub const MAX_OPS: usize = 64;
/// At most this many exchanges started by honest steps (an authentication and two
/// re-authentications; with ffdhe2048 each costs four exponentiations, ~5 ms here).
const MAX_STARTS: usize = 3;

const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:fuzz-host";
const SUBNQN: &str = "nqn.2026-11.io.ebof:fuzz";

/// Feature families.
const F_MSG: u8 = 1;
const F_DECODE_ERR: u8 = 2;
const F_TARGET: u8 = 3;
const F_TARGET_FAIL: u8 = 4;
const F_HOST: u8 = 5;
const F_HOST_FAIL: u8 = 6;
const F_RECEIVE: u8 = 7;
const F_SECRET: u8 = 8;

/// A deterministic random source (SplitMix64), so every input replays the same exchange.
struct Rng(u64);

impl RandomSource for Rng {
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), RandomError> {
        for chunk in buf.chunks_mut(8) {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            chunk.copy_from_slice(&z.to_le_bytes()[..chunk.len()]);
        }
        Ok(())
    }
}

/// One input: `[mode, keys, ops...]` (see the module docs): payloads through the message
/// codec, and an exchange between a target and a host that the ops perturb.
pub fn run(data: &[u8], feat: &mut Features) {
    let [mode, keys, ops @ ..] = data else {
        return;
    };
    let mut ops = ops;
    let mut s = Session::new(*mode, *keys);
    for _ in 0..MAX_OPS {
        let [op, l0, l1, rest @ ..] = ops else {
            break;
        };
        let len = usize::from(u16::from_le_bytes([*l0, *l1])).min(rest.len());
        let (payload, tail) = rest.split_at(len);
        ops = tail;
        s.op(*op, payload, feat);
        s.invariants();
    }
}

fn host_hashes(bits: u8) -> Vec<HashId> {
    match bits & 3 {
        0 => HashId::ALL.to_vec(),
        1 => vec![HashId::Sha256],
        2 => vec![HashId::Sha512, HashId::Sha384],
        _ => vec![HashId::Sha384],
    }
}

fn target_hashes(bits: u8) -> Vec<HashId> {
    match bits & 3 {
        0 => HashId::ALL.to_vec(),
        1 => vec![HashId::Sha512],
        2 => vec![HashId::Sha384, HashId::Sha256],
        _ => Vec::new(),
    }
}

fn secret(keys: u8, salt: u8) -> DhchapSecret {
    let nn = keys & 3;
    let len = [32, 48, 64, 32][usize::from((keys >> 2) & 3)];
    let key: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(7) ^ salt).collect();
    match KeyTransform::from_nn(nn).map(|t| DhchapSecret::from_key(t, &key)) {
        Some(Ok(s)) => s,
        other => panic!("secret {nn:02}/{len} refused: {other:?}"),
    }
}

struct Session {
    host: HostAuth<Rng>,
    target: TargetAuth<Rng>,
    /// The host's AUTH_Send in flight.
    pending: Option<Vec<u8>>,
    /// T_ID of the host's current exchange, and the next one.
    host_tid: u16,
    next_tid: u16,
    starts: usize,
    /// Only honest steps so far.
    clean: bool,
    /// Keys and algorithms match: an honest exchange must succeed.
    expect_ok: bool,
    /// Every message the host sent (for replays), and the responses R1 in its Replies.
    host_sent: Vec<Vec<u8>>,
    host_responses: Vec<Vec<u8>>,
    /// The responses R2 in the target's Success1 messages.
    target_responses: Vec<Vec<u8>>,
}

impl Session {
    fn new(mode: u8, keys: u8) -> Session {
        let host_secret = secret(keys, 0x11);
        let ctrl_secret = secret(keys, 0x22);
        let target_host_secret = secret(keys, if keys & 0x10 != 0 { 0x33 } else { 0x11 });
        let target_ctrl_secret = secret(keys, if keys & 0x20 != 0 { 0x44 } else { 0x22 });
        let bidi = mode & 0x40 != 0;
        let target_has_ctrl = mode & 0x80 == 0;
        let (hh, th) = (host_hashes(mode), target_hashes(mode >> 2));
        let hg = if mode & 0x10 != 0 {
            vec![DhGroup::Ffdhe2048, DhGroup::Null]
        } else {
            vec![DhGroup::Null]
        };
        let tg = if mode & 0x20 != 0 {
            vec![DhGroup::Ffdhe2048, DhGroup::Null]
        } else {
            vec![DhGroup::Null, DhGroup::Ffdhe2048]
        };
        let expect_ok = th.iter().any(|h| hh.contains(h))
            && keys & 0x10 == 0
            && (!bidi || (target_has_ctrl && keys & 0x20 == 0));
        let host_cfg = AuthConfig::new(&host_secret, bidi.then_some(&ctrl_secret), HOSTNQN, SUBNQN)
            .with_hashes(hh)
            .with_dh_groups(hg);
        let target_cfg = AuthConfig::new(
            &target_host_secret,
            target_has_ctrl.then_some(&target_ctrl_secret),
            HOSTNQN,
            SUBNQN,
        )
        .with_hashes(th)
        .with_dh_groups(tg);
        let seed = u64::from(keys >> 6);
        Session {
            host: HostAuth::new(Arc::new(host_cfg), Rng(seed ^ 0x4855)),
            target: TargetAuth::new(Arc::new(target_cfg), Rng(seed ^ 0x5447)),
            pending: None,
            host_tid: 0,
            next_tid: u16::from(keys >> 6) << 8,
            starts: 0,
            clean: true,
            expect_ok,
            host_sent: Vec::new(),
            host_responses: Vec::new(),
            target_responses: Vec::new(),
        }
    }

    fn must_succeed(&self) -> bool {
        self.clean && self.expect_ok
    }

    fn op(&mut self, op: u8, payload: &[u8], feat: &mut Features) {
        match op % 10 {
            0 => self.honest(feat),
            1 => {
                self.clean = false;
                self.send_to_target(payload, feat);
            }
            2 => {
                self.clean = false;
                self.send_to_host(payload, feat);
            }
            3 => {
                if let Some(mut p) = self.pending.take() {
                    if patch(&mut p, payload) {
                        self.clean = false;
                    }
                    self.pending = Some(p);
                }
            }
            4 => {
                self.clean = false;
                let (al, rest) = al_from(payload);
                if let Some(mut b) = self.receive(al, feat) {
                    patch(&mut b, rest);
                    self.send_to_host(&b, feat);
                }
            }
            5 => {
                self.clean = false;
                let was = self.target.is_authenticated();
                self.target.abort_exchange();
                let want = if was {
                    TargetState::Authenticated
                } else {
                    TargetState::Idle
                };
                assert_eq!(self.target.state(), want, "after abort_exchange");
                assert_eq!(self.target.is_authenticated(), was);
            }
            6 => {
                self.clean = false;
                self.pending = None;
            }
            7 => {
                self.clean = false;
                self.receive(al_from(payload).0, feat);
            }
            8 => {
                self.clean = false;
                if !self.host_sent.is_empty() {
                    let i = usize::from(payload.first().copied().unwrap_or(0));
                    let m = self.host_sent[i % self.host_sent.len()].clone();
                    self.send_to_target(&m, feat);
                }
            }
            _ => {
                built_round_trip(payload, feat);
                secret_text(payload, feat);
                command_fields(payload);
            }
        }
    }

    fn honest(&mut self, feat: &mut Features) {
        if let Some(p) = self.pending.take() {
            self.send_to_target(&p, feat);
            return;
        }
        match self.host.state() {
            HostState::AwaitingChallenge | HostState::AwaitingSuccess1 => {
                if let Some(b) = self.receive(RECEIVE_ALLOC_LEN, feat) {
                    self.send_to_host(&b, feat);
                }
            }
            HostState::Idle | HostState::Authenticated | HostState::Failed => {
                if self.starts == MAX_STARTS {
                    return;
                }
                self.starts += 1;
                self.host_tid = self.next_tid;
                self.next_tid = self.next_tid.wrapping_add(1);
                let n = self.host.start(self.host_tid);
                assert_eq!(self.host.state(), HostState::AwaitingChallenge);
                self.sent_by_host(n, "negotiate");
            }
        }
    }

    /// Record and queue a message of the host's; it must decode as `name`.
    fn sent_by_host(&mut self, bytes: Vec<u8>, name: &str) {
        match msg::decode(&bytes) {
            Ok(m) => {
                assert_eq!(m.name(), name, "the host sent {}", m.name());
                assert_eq!(m.t_id(), self.host_tid, "the host's T_ID");
                if let Message::Reply(r) = &m {
                    self.host_responses.push(r.response.clone());
                }
            }
            Err(e) => panic!("the host sent an undecodable {name}: {e}"),
        }
        self.host_sent.push(bytes.clone());
        self.pending = Some(bytes);
    }

    /// An AUTH_Send from the host with `payload`.
    fn send_to_target(&mut self, payload: &[u8], feat: &mut Features) {
        codec(payload, feat);
        let before = self.target.state();
        let r = self.target.on_send(payload);
        let after = self.target.state();
        feat.add(F_TARGET, ((before as u64) << 8) | after as u64);
        match r {
            Ok(()) => {
                assert!(
                    matches!(
                        after,
                        TargetState::ChallengePending
                            | TargetState::Success1Pending
                            | TargetState::Authenticated
                    ),
                    "{before:?} → {after:?} on success"
                );
                if after == TargetState::Success1Pending {
                    match msg::decode(payload) {
                        Ok(Message::Reply(r)) => assert!(
                            self.host_responses.contains(&r.response),
                            "the target accepted a response the host never computed"
                        ),
                        other => panic!("Success1 pending after {other:?}"),
                    }
                }
            }
            Err(f) => {
                feat.add_variant(F_TARGET_FAIL, &f.cause);
                assert!(!f.to_string().is_empty());
                assert!(!self.target.is_authenticated(), "authenticated after {f}");
                assert!(
                    matches!(after, TargetState::Failure1Pending | TargetState::Failed),
                    "{after:?} after {f}"
                );
                assert!(
                    !self.must_succeed(),
                    "honest exchange failed at the target: {f}"
                );
            }
        }
    }

    /// An AUTH_Receive with allocation length `al`: the controller's data, if it answered.
    fn receive(&mut self, al: u32, feat: &mut Features) -> Option<Vec<u8>> {
        let before = (self.target.state(), self.target.is_authenticated());
        match self.target.on_receive(al) {
            Ok(b) => {
                assert!(b.len() <= al as usize, "{} bytes for AL {al}", b.len());
                let m = match msg::decode(&b) {
                    Ok(m) => m,
                    Err(e) => panic!("the target sent an undecodable message: {e}"),
                };
                let after = self.target.state();
                feat.add(F_RECEIVE, ((before.0 as u64) << 8) | after as u64);
                match &m {
                    Message::Challenge(_) => assert_eq!(after, TargetState::AwaitingReply),
                    Message::Success1(s) => {
                        assert!(
                            matches!(
                                after,
                                TargetState::Authenticated | TargetState::AwaitingSuccess2
                            ),
                            "{after:?} after success1"
                        );
                        assert_eq!(s.response.is_some(), after == TargetState::AwaitingSuccess2);
                        if let Some(r) = &s.response {
                            self.target_responses.push(r.clone());
                        }
                    }
                    Message::Failure1(_) => {
                        assert_eq!(after, TargetState::Failed);
                        assert!(!self.target.is_authenticated());
                        assert!(!self.must_succeed(), "honest exchange: failure1");
                    }
                    other => panic!("the target answered with {}", other.name()),
                }
                Some(b)
            }
            Err(ReceiveError::AllocationTooSmall { needed, al: got }) => {
                feat.add(F_RECEIVE, 0xffff);
                assert_eq!(got, al);
                assert!(needed > al as usize);
                assert_eq!(
                    (self.target.state(), self.target.is_authenticated()),
                    before,
                    "a refused AUTH_Receive changed the state"
                );
                assert!(!self.must_succeed() || al < RECEIVE_ALLOC_LEN);
                None
            }
        }
    }

    /// AUTH_Receive data `b` to the host.
    fn send_to_host(&mut self, b: &[u8], feat: &mut Features) {
        codec(b, feat);
        let before = self.host.state();
        let r = match before {
            HostState::AwaitingSuccess1 => {
                let r = self.host.handle_success1(b);
                if let Ok(Some(_)) = &r {
                    // Bidirectional: the host checked R2.
                    match msg::decode(b) {
                        Ok(Message::Success1(Success1 {
                            response: Some(r2), ..
                        })) => assert!(
                            self.target_responses.contains(&r2),
                            "the host accepted a controller response the target never computed"
                        ),
                        other => panic!("success2 owed after {other:?}"),
                    }
                }
                r.map(|s2| s2.map(|s| (s, "success2")))
            }
            // In any other state the host is not waiting: a caller bug it must refuse.
            _ => self
                .host
                .handle_challenge(b)
                .map(|reply| Some((reply, "reply"))),
        };
        let after = self.host.state();
        feat.add(F_HOST, ((before as u64) << 8) | after as u64);
        match r {
            Ok(out) => {
                assert!(
                    matches!(
                        (before, after),
                        (HostState::AwaitingChallenge, HostState::AwaitingSuccess1)
                            | (HostState::AwaitingSuccess1, HostState::Authenticated)
                    ),
                    "host {before:?} → {after:?}"
                );
                if let Some((bytes, name)) = out {
                    self.sent_by_host(bytes, name);
                }
            }
            Err(e) => {
                feat.add_variant(F_HOST_FAIL, &e.kind);
                assert!(!e.to_string().is_empty());
                if !matches!(
                    before,
                    HostState::AwaitingChallenge | HostState::AwaitingSuccess1
                ) {
                    assert_eq!(e.kind, nvme_auth::HostErrorKind::WrongState);
                    assert_eq!(e.failure2, None);
                    assert_eq!(after, before, "a refused call changed the host's state");
                    return;
                }
                assert_eq!(after, HostState::Failed);
                assert!(!self.host.is_authenticated());
                assert!(
                    !self.must_succeed(),
                    "honest exchange failed at the host: {e}"
                );
                if let Some(f2) = e.failure2 {
                    match msg::decode(&f2) {
                        Ok(Message::Failure2(f)) => {
                            assert_eq!(f.t_id, self.host_tid);
                            assert!(f.reason().is_some(), "undefined explanation");
                        }
                        other => panic!("failure2 payload decodes as {other:?}"),
                    }
                    self.host_sent.push(f2.clone());
                    self.pending = Some(f2);
                }
            }
        }
    }

    fn invariants(&self) {
        let t = self.target.state();
        let auth = self.target.is_authenticated();
        match t {
            TargetState::Idle | TargetState::Failure1Pending | TargetState::Failed => {
                assert!(!auth, "authenticated in {t:?}");
            }
            TargetState::Authenticated => assert!(auth),
            _ => {}
        }
        assert_eq!(
            self.target.exchange_in_progress(),
            matches!(
                t,
                TargetState::ChallengePending
                    | TargetState::AwaitingReply
                    | TargetState::Success1Pending
                    | TargetState::AwaitingSuccess2
                    | TargetState::Failure1Pending
            )
        );
        if self.must_succeed() && self.pending.is_none() && self.host.is_authenticated() {
            assert!(
                auth,
                "the host finished an honest exchange, the target did not"
            );
        }
    }
}

/// AL from the first two bytes of `p` (4096 if absent), and the rest.
fn al_from(p: &[u8]) -> (u32, &[u8]) {
    match p {
        [a, b, rest @ ..] => (u32::from(u16::from_le_bytes([*a, *b])), rest),
        _ => (RECEIVE_ALLOC_LEN, &[]),
    }
}

/// Apply `[offset, xor]` pairs to `b`; an odd last byte truncates it. Whether `b` changed.
fn patch(b: &mut Vec<u8>, p: &[u8]) -> bool {
    let before = b.clone();
    let mut pairs = p.chunks_exact(2);
    for pair in &mut pairs {
        if !b.is_empty() {
            let i = usize::from(pair[0]) % b.len();
            b[i] ^= pair[1];
        }
    }
    if let [cut] = pairs.remainder() {
        b.truncate(usize::from(*cut));
    }
    *b != before
}

/// Any payload: decode; a message re-encodes within its length and decodes to itself.
fn codec(b: &[u8], feat: &mut Features) {
    match msg::decode(b) {
        Ok(m) => {
            feat.add_str(F_MSG, m.name());
            let e = m.encode();
            assert!(
                e.len() <= b.len(),
                "{} re-encoded to {} bytes from {}",
                m.name(),
                e.len(),
                b.len()
            );
            assert_eq!(msg::decode(&e).as_ref(), Ok(&m), "decode → encode → decode");
            // The DH values a peer sent pass the range check or fail it, cheaply.
            let dh = match &m {
                Message::Challenge(c) => Some((c.dh_group, &c.dh_value)),
                Message::Reply(r) if !r.dh_value.is_empty() => {
                    Some((DhGroup::Ffdhe2048, &r.dh_value))
                }
                _ => None,
            };
            if let Some((g, v)) = dh
                && g != DhGroup::Null
            {
                let _ = nvme_auth::dh::check_peer_value(g, v);
            }
        }
        Err(e) => {
            feat.add_variant(F_DECODE_ERR, &e);
            assert!(!e.to_string().is_empty());
            let _ = e.failure_reason();
        }
    }
}

/// Reads bytes off the front of a payload (zeros when it runs out).
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    fn vec(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.u8()).collect()
    }
    fn hash(&mut self) -> HashId {
        HashId::ALL[usize::from(self.u8()) % HashId::ALL.len()]
    }
}

/// A well-formed message from typed values read off `p`: decode(encode(m)) == m.
fn built_round_trip(p: &[u8], feat: &mut Features) {
    let mut b = Bytes(p);
    let t_id = b.u16();
    let m = match b.u8() % 7 {
        0 => {
            let dhchap = (b.u8() & 1 == 1).then(|| {
                let (h, g) = (usize::from(b.u8()) % (MAX_IDS + 1), usize::from(b.u8()));
                DhchapDescriptor {
                    hash_ids: b.vec(h),
                    dh_group_ids: b.vec(g % (MAX_IDS + 1)),
                }
            });
            let napd = b.u8() % 8;
            Message::Negotiate(Negotiate {
                t_id,
                sc_c: b.u8(),
                napd: napd.max(u8::from(dhchap.is_some())),
                dhchap,
            })
        }
        1 => {
            let hash = b.hash();
            let dh_group = DhGroup::ALL[usize::from(b.u8()) % DhGroup::ALL.len()];
            let dhv = match dh_group {
                DhGroup::Null => 0,
                g => 1 + usize::from(b.u16()) % g.value_len(),
            };
            Message::Challenge(Challenge {
                t_id,
                hash,
                dh_group,
                seqnum: b.u32(),
                challenge: b.vec(hash.digest_len()),
                dh_value: b.vec(dhv),
            })
        }
        2 => {
            let hl = b.hash().digest_len();
            let with_c2 = b.u8() & 1 == 1;
            let dhv = usize::from(b.u16() % 1100);
            Message::Reply(Reply {
                t_id,
                response: b.vec(hl),
                challenge: with_c2.then(|| b.vec(hl)),
                seqnum: b.u32(),
                dh_value: b.vec(dhv),
            })
        }
        3 => {
            let hl = b.hash().digest_len();
            let m = if b.u8() & 1 == 1 {
                Success1 {
                    t_id,
                    hl: hl as u8,
                    response: Some(b.vec(hl)),
                }
            } else {
                Success1 {
                    t_id,
                    hl: b.u8(),
                    response: None,
                }
            };
            Message::Success1(m)
        }
        4 => Message::Success2 { t_id },
        5 => Message::Failure1(Failure {
            t_id,
            reason_code: b.u8(),
            explanation: b.u8(),
        }),
        _ => Message::Failure2(Failure {
            t_id,
            reason_code: b.u8(),
            explanation: b.u8(),
        }),
    };
    feat.add_str(F_MSG, m.name());
    let wire = m.encode();
    assert_eq!(msg::decode(&wire).as_ref(), Ok(&m), "encode → decode");
    // Padding after the message (a Linux target returns the whole allocation) is ignored.
    let mut padded = wire;
    padded.resize(padded.len() + 64, 0);
    assert_eq!(msg::decode(&padded).as_ref(), Ok(&m), "padded message");
}

/// The payload as a `DHHC-1` secret: one that parses exports text that parses back to it.
fn secret_text(p: &[u8], feat: &mut Features) {
    let text = String::from_utf8_lossy(p);
    match DhchapSecret::parse(&text) {
        Ok(s) => {
            feat.add(F_SECRET, u64::from(s.transform_kind().nn()));
            assert!(matches!(s.key_len(), 32 | 48 | 64));
            let out = s.encode();
            assert_eq!(DhchapSecret::parse(&out).as_ref(), Ok(&s), "export → parse");
            assert!(
                !format!("{s:?}").contains(&out[10..20]),
                "Debug leaks the key"
            );
        }
        Err(e) => {
            feat.add_variant(F_SECRET, &e);
            assert!(!e.to_string().is_empty());
        }
    }
}

/// The payload as an AUTH command's CDW10 and CDW11.
fn command_fields(p: &[u8]) {
    let mut b = Bytes(p);
    let (cdw10, cdw11) = (b.u32(), b.u32());
    match msg::check_command(cdw10, cdw11) {
        Ok(len) => {
            assert_eq!(len, cdw11);
            assert_ne!(len, 0);
            assert_eq!(cdw10 & 0xffff_ff00, msg::command_cdw10());
        }
        Err(e) => assert!((41..=44).contains(&e.sqe_byte())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn honest(mode: u8, keys: u8, steps: usize) -> Session {
        let mut s = Session::new(mode, keys);
        let mut feat = Features::default();
        for _ in 0..steps {
            s.op(0, &[], &mut feat);
            s.invariants();
        }
        s
    }

    /// The harness itself: honest steps with matching keys authenticate both sides (one-way,
    /// bidirectional, with and without FFDHE); a wrong key or no common algorithm does not.
    #[test]
    fn honest_exchanges_authenticate_only_with_the_keys() {
        for (mode, keys, steps) in [(0x00, 0x00, 5), (0x46, 0x05, 6), (0x70, 0x0f, 6)] {
            let s = honest(mode, keys, steps);
            assert!(s.expect_ok);
            assert!(s.host.is_authenticated(), "host, mode {mode:#x}");
            assert!(s.target.is_authenticated(), "target, mode {mode:#x}");
            assert!(s.pending.is_none());
        }
        let dh = honest(0x30, 0x00, 5);
        assert!(dh.target.is_authenticated());
        assert_eq!(dh.host.negotiated().map(|n| n.1), Some(DhGroup::Ffdhe2048));
        for (mode, keys) in [(0x00, 0x10), (0x40, 0x20), (0xc0, 0x00), (0x0c, 0x00)] {
            let s = honest(mode, keys, 6);
            assert!(!s.expect_ok);
            assert!(
                !s.target.is_authenticated(),
                "mode {mode:#x} keys {keys:#x}"
            );
        }
    }
}
