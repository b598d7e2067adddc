//! Wire formats of the AUTH_Send / AUTH_Receive payloads (NVMe Base 2.x §8.3.4.5 figures for
//! AUTH_Negotiate, DH-HMAC-CHAP_Challenge, _Reply, _Success1, _Success2, AUTH_Failure1/2;
//! byte offsets checked against Linux `include/linux/nvme.h` `struct nvmf_auth_dhchap_*_data`).
//!
//! Every message starts with the same 6 bytes: AUTH-Type (00h common, 01h DH-HMAC-CHAP),
//! AUTH-Id, 2 reserved, T_ID (LE16). Then:
//!
//! | message   | type/id | layout after byte 5                                                      |
//! |-----------|---------|---------------------------------------------------------------------------|
//! | Negotiate | 00/00   | 6 SC_C, 7 NAPD, 8.. NAPD × 64-byte descriptors: AUTHID(01h), rsvd, HALEN, DHLEN, IDLIST\[60\] (hash ids at 0.., DH group ids at 30..) |
//! | Challenge | 01/01   | 6 HL, 7 rsvd, 8 HASHID, 9 DHGID, 10 DHVLEN (LE16), 12 SEQNUM (LE32), 16 C1\[HL\], DHV\[DHVLEN\] |
//! | Reply     | 01/02   | 6 HL, 7 rsvd, 8 CVALID, 9 rsvd, 10 DHVLEN, 12 SEQNUM (S2), 16 R1\[HL\], C2\[HL\], DHV\[DHVLEN\] |
//! | Success1  | 01/03   | 6 HL, 7 rsvd, 8 RVALID, 9..15 rsvd, 16 R2\[HL\] when RVALID                |
//! | Success2  | 01/04   | 6..15 rsvd (16 bytes)                                                    |
//! | Failure2  | 00/F0   | 6 reason code (01h), 7 reason code explanation                           |
//! | Failure1  | 00/F1   | as Failure2                                                              |
//!
//! [`decode`] is the one place these bytes are checked: lengths against the buffer, HL against
//! the hash, DHVLEN against the group (null → 0, else 1..=group size), id lists ≤ 30 entries.
//! Trailing bytes are ignored: a Linux target returns the whole AUTH_Receive allocation,
//! zero-filled. Encoding cannot fail.
//!
//! The command fields (SQE bytes 40..47) are checked by [`check_command`]: SECP E9h, SPSP0 01h,
//! SPSP1 01h, and a non-zero TL/AL; a mismatch is "Invalid Field in Command" (Linux
//! `nvmet_execute_auth_send` / `_receive`), not an authentication failure.

use crate::chap::HashId;
use crate::dh::DhGroup;

/// SECP (Security Protocol) of AUTH_Send / AUTH_Receive for NVMe in-band authentication.
pub const SECP_NVME_AUTH: u8 = 0xE9;
/// SPSP0 for DH-HMAC-CHAP.
pub const SPSP0_DHCHAP: u8 = 0x01;
/// SPSP1 for DH-HMAC-CHAP.
pub const SPSP1_DHCHAP: u8 = 0x01;
/// AUTH-Type of Negotiate and Failure messages.
pub const AUTH_TYPE_COMMON: u8 = 0x00;
/// AUTH-Type of the DH-HMAC-CHAP messages.
pub const AUTH_TYPE_DHCHAP: u8 = 0x01;
/// AUTHID of the DH-HMAC-CHAP protocol descriptor.
pub const AUTHID_DHCHAP: u8 = 0x01;
/// Bytes per protocol descriptor in a Negotiate.
pub const DESCRIPTOR_LEN: usize = 64;
/// At most this many hash ids, and as many DH group ids, per descriptor.
pub const MAX_IDS: usize = 30;
/// Reason code "Authentication failure", the only one defined.
pub const REASON_AUTHENTICATION_FAILURE: u8 = 0x01;

/// AUTH-Id values.
pub mod auth_id {
    /// AUTH_Negotiate.
    pub const NEGOTIATE: u8 = 0x00;
    /// DH-HMAC-CHAP_Challenge.
    pub const CHALLENGE: u8 = 0x01;
    /// DH-HMAC-CHAP_Reply.
    pub const REPLY: u8 = 0x02;
    /// DH-HMAC-CHAP_Success1.
    pub const SUCCESS1: u8 = 0x03;
    /// DH-HMAC-CHAP_Success2.
    pub const SUCCESS2: u8 = 0x04;
    /// AUTH_Failure2 (host → controller).
    pub const FAILURE2: u8 = 0xF0;
    /// AUTH_Failure1 (controller → host).
    pub const FAILURE1: u8 = 0xF1;
}

/// Reason code explanation of a Failure1/Failure2 (Linux `NVME_AUTH_DHCHAP_FAILURE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FailureReason {
    /// 01h: authentication failed (wrong response, no key, internal failure).
    Failed = 0x01,
    /// 02h: authentication protocol not usable.
    ProtocolNotUsable = 0x02,
    /// 03h: secure channel concatenation mismatch.
    ConcatMismatch = 0x03,
    /// 04h: hash function not usable.
    HashUnusable = 0x04,
    /// 05h: DH group not usable.
    DhGroupUnusable = 0x05,
    /// 06h: incorrect payload.
    IncorrectPayload = 0x06,
    /// 07h: incorrect protocol message.
    IncorrectMessage = 0x07,
}

impl FailureReason {
    /// The explanation with wire value `v`, if defined.
    pub fn from_u8(v: u8) -> Option<Self> {
        match v {
            0x01 => Some(Self::Failed),
            0x02 => Some(Self::ProtocolNotUsable),
            0x03 => Some(Self::ConcatMismatch),
            0x04 => Some(Self::HashUnusable),
            0x05 => Some(Self::DhGroupUnusable),
            0x06 => Some(Self::IncorrectPayload),
            0x07 => Some(Self::IncorrectMessage),
            _ => None,
        }
    }
}

impl std::fmt::Display for FailureReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Failed => "authentication failed",
            Self::ProtocolNotUsable => "authentication protocol not usable",
            Self::ConcatMismatch => "secure channel concatenation mismatch",
            Self::HashUnusable => "hash function not usable",
            Self::DhGroupUnusable => "DH group not usable",
            Self::IncorrectPayload => "incorrect payload",
            Self::IncorrectMessage => "incorrect protocol message",
        })
    }
}

/// The DH-HMAC-CHAP protocol descriptor of a Negotiate. Ids are kept raw: a host may list ids
/// this implementation does not know, which are simply not chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DhchapDescriptor {
    /// Hash ids in the host's order (HALEN entries).
    pub hash_ids: Vec<u8>,
    /// DH group ids in the host's order (DHLEN entries).
    pub dh_group_ids: Vec<u8>,
}

/// AUTH_Negotiate (host → controller).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiate {
    /// Transaction identifier chosen by the host.
    pub t_id: u16,
    /// Secure channel concatenation (00h none, 01h new TLS PSK, 02h replace TLS PSK).
    pub sc_c: u8,
    /// Number of protocol descriptors the host sent (NAPD).
    pub napd: u8,
    /// The first descriptor with AUTHID 01h, if any.
    pub dhchap: Option<DhchapDescriptor>,
}

/// DH-HMAC-CHAP_Challenge (controller → host).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Challenge {
    /// Transaction identifier (the host's).
    pub t_id: u16,
    /// Chosen hash; HL equals its length.
    pub hash: HashId,
    /// Chosen DH group.
    pub dh_group: DhGroup,
    /// Sequence number S1.
    pub seqnum: u32,
    /// Challenge C1 (HL bytes).
    pub challenge: Vec<u8>,
    /// The controller's public value g^x (empty for the null group).
    pub dh_value: Vec<u8>,
}

/// DH-HMAC-CHAP_Reply (host → controller).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// Transaction identifier.
    pub t_id: u16,
    /// Response R1 (HL bytes, HL a digest length 32/48/64).
    pub response: Vec<u8>,
    /// Challenge C2 when CVALID is set (bidirectional authentication or a PSK seed).
    pub challenge: Option<Vec<u8>>,
    /// Sequence number S2 (0: no bidirectional authentication).
    pub seqnum: u32,
    /// The host's public value g^y (empty for the null group).
    pub dh_value: Vec<u8>,
}

/// DH-HMAC-CHAP_Success1 (controller → host).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Success1 {
    /// Transaction identifier.
    pub t_id: u16,
    /// HL: digest length of the chosen hash.
    pub hl: u8,
    /// Response R2 when RVALID is set.
    pub response: Option<Vec<u8>>,
}

/// AUTH_Failure1 / AUTH_Failure2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failure {
    /// Transaction identifier.
    pub t_id: u16,
    /// Reason code (01h "authentication failure").
    pub reason_code: u8,
    /// Reason code explanation, raw; see [`Failure::reason`].
    pub explanation: u8,
}

impl Failure {
    /// A Failure with reason code 01h and explanation `reason`.
    pub fn new(t_id: u16, reason: FailureReason) -> Self {
        Self {
            t_id,
            reason_code: REASON_AUTHENTICATION_FAILURE,
            explanation: reason as u8,
        }
    }

    /// The explanation, if it is a defined value.
    pub fn reason(&self) -> Option<FailureReason> {
        FailureReason::from_u8(self.explanation)
    }
}

/// One decoded authentication message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// AUTH_Negotiate.
    Negotiate(Negotiate),
    /// DH-HMAC-CHAP_Challenge.
    Challenge(Challenge),
    /// DH-HMAC-CHAP_Reply.
    Reply(Reply),
    /// DH-HMAC-CHAP_Success1.
    Success1(Success1),
    /// DH-HMAC-CHAP_Success2.
    Success2 {
        /// Transaction identifier.
        t_id: u16,
    },
    /// AUTH_Failure1.
    Failure1(Failure),
    /// AUTH_Failure2.
    Failure2(Failure),
}

/// Why a payload is not a well-formed authentication message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The buffer is shorter than the message's fields say.
    #[error("message truncated: {needed} bytes needed, {len} present")]
    Truncated {
        /// Bytes the message needs.
        needed: usize,
        /// Bytes present.
        len: usize,
    },
    /// AUTH-Type / AUTH-Id pair that is not a DH-HMAC-CHAP message.
    #[error("unknown message type {auth_type:#04x} id {auth_id:#04x}")]
    UnknownMessage {
        /// AUTH-Type byte.
        auth_type: u8,
        /// AUTH-Id byte.
        auth_id: u8,
    },
    /// HASHID is not SHA-256/384/512.
    #[error("unknown hash id {0:#04x}")]
    UnknownHash(u8),
    /// HL does not match the hash (or is not a digest length).
    #[error("hash length {0} does not match the hash function")]
    HashLength(u8),
    /// DHGID is not a known group.
    #[error("unknown DH group id {0:#04x}")]
    UnknownDhGroup(u8),
    /// DHVLEN does not fit the group (non-zero for null, zero or too long otherwise).
    #[error("DH value length {len} invalid for DH group {group}")]
    DhValueLength {
        /// The group.
        group: DhGroup,
        /// DHVLEN.
        len: usize,
    },
    /// HALEN or DHLEN above 30.
    #[error("protocol descriptor lists {halen} hashes and {dhlen} DH groups (at most 30 each)")]
    TooManyIds {
        /// HALEN.
        halen: u8,
        /// DHLEN.
        dhlen: u8,
    },
}

impl DecodeError {
    /// The Failure1/Failure2 explanation this error is reported with.
    pub fn failure_reason(&self) -> FailureReason {
        match self {
            Self::Truncated { .. } | Self::TooManyIds { .. } | Self::HashLength(_) => {
                FailureReason::IncorrectPayload
            }
            Self::UnknownMessage { .. } => FailureReason::IncorrectMessage,
            Self::UnknownHash(_) => FailureReason::HashUnusable,
            Self::UnknownDhGroup(_) | Self::DhValueLength { .. } => FailureReason::DhGroupUnusable,
        }
    }
}

fn need(buf: &[u8], needed: usize) -> Result<(), DecodeError> {
    if buf.len() < needed {
        Err(DecodeError::Truncated {
            needed,
            len: buf.len(),
        })
    } else {
        Ok(())
    }
}

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn digest_len_ok(hl: u8) -> bool {
    HashId::ALL.iter().any(|h| h.digest_len() == hl as usize)
}

fn dh_len_ok(group: DhGroup, len: usize) -> Result<(), DecodeError> {
    let ok = match group {
        DhGroup::Null => len == 0,
        g => len >= 1 && len <= g.value_len(),
    };
    if ok {
        Ok(())
    } else {
        Err(DecodeError::DhValueLength { group, len })
    }
}

/// Decodes one AUTH_Send / AUTH_Receive payload. Bytes after the message are ignored.
pub fn decode(buf: &[u8]) -> Result<Message, DecodeError> {
    need(buf, 6)?;
    let (auth_type, id) = (buf[0], buf[1]);
    let t_id = le16(buf, 4);
    match (auth_type, id) {
        (AUTH_TYPE_COMMON, auth_id::NEGOTIATE) => decode_negotiate(buf, t_id),
        (AUTH_TYPE_DHCHAP, auth_id::CHALLENGE) => decode_challenge(buf, t_id),
        (AUTH_TYPE_DHCHAP, auth_id::REPLY) => decode_reply(buf, t_id),
        (AUTH_TYPE_DHCHAP, auth_id::SUCCESS1) => {
            need(buf, 16)?;
            let hl = buf[6];
            let response = if buf[8] & 1 != 0 {
                if !digest_len_ok(hl) {
                    return Err(DecodeError::HashLength(hl));
                }
                let end = 16 + hl as usize;
                need(buf, end)?;
                Some(buf[16..end].to_vec())
            } else {
                None
            };
            Ok(Message::Success1(Success1 { t_id, hl, response }))
        }
        (AUTH_TYPE_DHCHAP, auth_id::SUCCESS2) => {
            need(buf, 16)?;
            Ok(Message::Success2 { t_id })
        }
        (AUTH_TYPE_COMMON, auth_id::FAILURE1 | auth_id::FAILURE2) => {
            need(buf, 8)?;
            let f = Failure {
                t_id,
                reason_code: buf[6],
                explanation: buf[7],
            };
            Ok(if id == auth_id::FAILURE1 {
                Message::Failure1(f)
            } else {
                Message::Failure2(f)
            })
        }
        _ => Err(DecodeError::UnknownMessage {
            auth_type,
            auth_id: id,
        }),
    }
}

fn decode_negotiate(buf: &[u8], t_id: u16) -> Result<Message, DecodeError> {
    need(buf, 8)?;
    let sc_c = buf[6];
    let napd = buf[7];
    need(buf, 8 + napd as usize * DESCRIPTOR_LEN)?;
    let mut dhchap = None;
    for i in 0..napd as usize {
        let d = &buf[8 + i * DESCRIPTOR_LEN..8 + (i + 1) * DESCRIPTOR_LEN];
        if d[0] != AUTHID_DHCHAP || dhchap.is_some() {
            continue;
        }
        let (halen, dhlen) = (d[2], d[3]);
        if halen as usize > MAX_IDS || dhlen as usize > MAX_IDS {
            return Err(DecodeError::TooManyIds { halen, dhlen });
        }
        let ids = &d[4..];
        dhchap = Some(DhchapDescriptor {
            hash_ids: ids[..halen as usize].to_vec(),
            dh_group_ids: ids[MAX_IDS..MAX_IDS + dhlen as usize].to_vec(),
        });
    }
    Ok(Message::Negotiate(Negotiate {
        t_id,
        sc_c,
        napd,
        dhchap,
    }))
}

fn decode_challenge(buf: &[u8], t_id: u16) -> Result<Message, DecodeError> {
    need(buf, 16)?;
    let hl = buf[6];
    let hash = HashId::from_id(buf[8]).ok_or(DecodeError::UnknownHash(buf[8]))?;
    if hash.digest_len() != hl as usize {
        return Err(DecodeError::HashLength(hl));
    }
    let dh_group = DhGroup::from_id(buf[9]).ok_or(DecodeError::UnknownDhGroup(buf[9]))?;
    let dhvlen = le16(buf, 10) as usize;
    let seqnum = le32(buf, 12);
    let c_end = 16 + hl as usize;
    need(buf, c_end + dhvlen)?;
    dh_len_ok(dh_group, dhvlen)?;
    Ok(Message::Challenge(Challenge {
        t_id,
        hash,
        dh_group,
        seqnum,
        challenge: buf[16..c_end].to_vec(),
        dh_value: buf[c_end..c_end + dhvlen].to_vec(),
    }))
}

fn decode_reply(buf: &[u8], t_id: u16) -> Result<Message, DecodeError> {
    need(buf, 16)?;
    let hl = buf[6] as usize;
    if !digest_len_ok(buf[6]) {
        return Err(DecodeError::HashLength(buf[6]));
    }
    let cvalid = buf[8] & 1 != 0;
    let dhvlen = le16(buf, 10) as usize;
    let seqnum = le32(buf, 12);
    let dh_at = 16 + 2 * hl;
    need(buf, dh_at + dhvlen)?;
    Ok(Message::Reply(Reply {
        t_id,
        response: buf[16..16 + hl].to_vec(),
        challenge: cvalid.then(|| buf[16 + hl..dh_at].to_vec()),
        seqnum,
        dh_value: buf[dh_at..dh_at + dhvlen].to_vec(),
    }))
}

fn header(auth_type: u8, id: u8, t_id: u16, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    v[0] = auth_type;
    v[1] = id;
    v[4..6].copy_from_slice(&t_id.to_le_bytes());
    v
}

impl Message {
    /// The wire bytes. Lists longer than the format allows are cut to fit (30 ids, 255-byte
    /// HL, 65535-byte DH values): a caller building messages from typed values never hits that.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Message::Negotiate(n) => {
                // NAPD descriptors: ours first, then AUTHID-00h placeholders for the others a
                // decoded message counted but this crate does not keep.
                let napd = n.napd.max(u8::from(n.dhchap.is_some()));
                let mut v = header(AUTH_TYPE_COMMON, auth_id::NEGOTIATE, n.t_id, 8);
                v[6] = n.sc_c;
                v[7] = napd;
                if let Some(d) = &n.dhchap {
                    let mut desc = [0u8; DESCRIPTOR_LEN];
                    let hashes = &d.hash_ids[..d.hash_ids.len().min(MAX_IDS)];
                    let groups = &d.dh_group_ids[..d.dh_group_ids.len().min(MAX_IDS)];
                    desc[0] = AUTHID_DHCHAP;
                    desc[2] = hashes.len() as u8;
                    desc[3] = groups.len() as u8;
                    desc[4..4 + hashes.len()].copy_from_slice(hashes);
                    desc[4 + MAX_IDS..4 + MAX_IDS + groups.len()].copy_from_slice(groups);
                    v.extend_from_slice(&desc);
                }
                v.resize(8 + napd as usize * DESCRIPTOR_LEN, 0);
                v
            }
            Message::Challenge(c) => {
                let hl = c.challenge.len().min(255);
                let dhvlen = c.dh_value.len().min(u16::MAX as usize);
                let mut v = header(AUTH_TYPE_DHCHAP, auth_id::CHALLENGE, c.t_id, 16);
                v[6] = hl as u8;
                v[8] = c.hash.id();
                v[9] = c.dh_group.id();
                v[10..12].copy_from_slice(&(dhvlen as u16).to_le_bytes());
                v[12..16].copy_from_slice(&c.seqnum.to_le_bytes());
                v.extend_from_slice(&c.challenge[..hl]);
                v.extend_from_slice(&c.dh_value[..dhvlen]);
                v
            }
            Message::Reply(r) => {
                let hl = r.response.len().min(255);
                let dhvlen = r.dh_value.len().min(u16::MAX as usize);
                let mut v = header(AUTH_TYPE_DHCHAP, auth_id::REPLY, r.t_id, 16);
                v[6] = hl as u8;
                v[8] = u8::from(r.challenge.is_some());
                v[10..12].copy_from_slice(&(dhvlen as u16).to_le_bytes());
                v[12..16].copy_from_slice(&r.seqnum.to_le_bytes());
                v.extend_from_slice(&r.response[..hl]);
                // C2 is always HL bytes on the wire, zero when CVALID is clear (as Linux).
                let mut c2 = vec![0u8; hl];
                if let Some(c) = &r.challenge {
                    let n = c.len().min(hl);
                    c2[..n].copy_from_slice(&c[..n]);
                }
                v.extend_from_slice(&c2);
                v.extend_from_slice(&r.dh_value[..dhvlen]);
                v
            }
            Message::Success1(s) => {
                let mut v = header(AUTH_TYPE_DHCHAP, auth_id::SUCCESS1, s.t_id, 16);
                v[6] = s.hl;
                if let Some(r) = &s.response {
                    v[8] = 1;
                    v.extend_from_slice(r);
                }
                v
            }
            Message::Success2 { t_id } => header(AUTH_TYPE_DHCHAP, auth_id::SUCCESS2, *t_id, 16),
            Message::Failure1(f) | Message::Failure2(f) => {
                let id = if matches!(self, Message::Failure1(_)) {
                    auth_id::FAILURE1
                } else {
                    auth_id::FAILURE2
                };
                let mut v = header(AUTH_TYPE_COMMON, id, f.t_id, 8);
                v[6] = f.reason_code;
                v[7] = f.explanation;
                v
            }
        }
    }

    /// Short name for logs: `negotiate`, `challenge`, …
    pub fn name(&self) -> &'static str {
        match self {
            Message::Negotiate(_) => "negotiate",
            Message::Challenge(_) => "challenge",
            Message::Reply(_) => "reply",
            Message::Success1(_) => "success1",
            Message::Success2 { .. } => "success2",
            Message::Failure1(_) => "failure1",
            Message::Failure2(_) => "failure2",
        }
    }

    /// The message's transaction identifier.
    pub fn t_id(&self) -> u16 {
        match self {
            Message::Negotiate(n) => n.t_id,
            Message::Challenge(c) => c.t_id,
            Message::Reply(r) => r.t_id,
            Message::Success1(s) => s.t_id,
            Message::Success2 { t_id } => *t_id,
            Message::Failure1(f) | Message::Failure2(f) => f.t_id,
        }
    }
}

/// A wrong field in the AUTH_Send / AUTH_Receive command itself: complete the command with
/// "Invalid Field in Command" (SCT 0h, SC 02h, DNR) pointing at [`CommandFieldError::sqe_byte`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CommandFieldError {
    /// SECP is not E9h.
    #[error("AUTH command SECP {0:#04x}, expected 0xe9")]
    Secp(u8),
    /// SPSP0 is not 01h.
    #[error("AUTH command SPSP0 {0:#04x}, expected 0x01")]
    Spsp0(u8),
    /// SPSP1 is not 01h.
    #[error("AUTH command SPSP1 {0:#04x}, expected 0x01")]
    Spsp1(u8),
    /// TL (AUTH_Send) or AL (AUTH_Receive) is zero.
    #[error("AUTH command transfer/allocation length is zero")]
    ZeroLength,
}

impl CommandFieldError {
    /// Byte offset of the offending field in the 64-byte SQE (for the error information log's
    /// parameter error location; Linux `offsetof(struct nvmf_auth_send_command, …)`).
    pub fn sqe_byte(&self) -> u16 {
        match self {
            Self::Spsp0(_) => 41,
            Self::Spsp1(_) => 42,
            Self::Secp(_) => 43,
            Self::ZeroLength => 44,
        }
    }
}

/// Checks an AUTH_Send / AUTH_Receive command's CDW10 (bits 15:8 SPSP0, 23:16 SPSP1, 31:24
/// SECP) and CDW11 (TL or AL); returns the length.
pub fn check_command(cdw10: u32, cdw11: u32) -> Result<u32, CommandFieldError> {
    let [_, spsp0, spsp1, secp] = cdw10.to_le_bytes();
    if secp != SECP_NVME_AUTH {
        return Err(CommandFieldError::Secp(secp));
    }
    if spsp0 != SPSP0_DHCHAP {
        return Err(CommandFieldError::Spsp0(spsp0));
    }
    if spsp1 != SPSP1_DHCHAP {
        return Err(CommandFieldError::Spsp1(spsp1));
    }
    if cdw11 == 0 {
        return Err(CommandFieldError::ZeroLength);
    }
    Ok(cdw11)
}

/// CDW10 of an AUTH_Send / AUTH_Receive for DH-HMAC-CHAP (host side).
pub fn command_cdw10() -> u32 {
    u32::from_le_bytes([0, SPSP0_DHCHAP, SPSP1_DHCHAP, SECP_NVME_AUTH])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_fields() {
        let cdw10 = command_cdw10();
        assert_eq!(cdw10, 0xE901_0100);
        assert_eq!(check_command(cdw10, 72), Ok(72));
        assert_eq!(
            check_command(cdw10 & 0x00FF_FFFF, 72),
            Err(CommandFieldError::Secp(0))
        );
        assert_eq!(
            check_command(0xE901_0200, 72),
            Err(CommandFieldError::Spsp0(2))
        );
        assert_eq!(
            check_command(0xE900_0100, 72),
            Err(CommandFieldError::Spsp1(0))
        );
        assert_eq!(check_command(cdw10, 0), Err(CommandFieldError::ZeroLength));
        assert_eq!(CommandFieldError::Secp(0).sqe_byte(), 43);
    }

    /// The Negotiate the Linux host sends (nvme_auth_set_dhchap_negotiate_data): 3 hashes at
    /// idlist[0..3], 6 groups at idlist[30..36], 72 bytes in all.
    #[test]
    fn negotiate_layout_matches_linux() {
        let mut wire = vec![0u8; 72];
        wire[4..6].copy_from_slice(&7u16.to_le_bytes());
        wire[7] = 1; // napd
        wire[8] = 1; // authid
        wire[10] = 3; // halen
        wire[11] = 6; // dhlen
        wire[12..15].copy_from_slice(&[1, 2, 3]);
        wire[12 + 30..12 + 36].copy_from_slice(&[0, 1, 2, 3, 4, 5]);
        let m = decode(&wire).expect("decode");
        let want = Message::Negotiate(Negotiate {
            t_id: 7,
            sc_c: 0,
            napd: 1,
            dhchap: Some(DhchapDescriptor {
                hash_ids: vec![1, 2, 3],
                dh_group_ids: vec![0, 1, 2, 3, 4, 5],
            }),
        });
        assert_eq!(m, want);
        assert_eq!(want.encode(), wire);
    }

    #[test]
    fn challenge_reply_success_failure_layouts() {
        let c = Message::Challenge(Challenge {
            t_id: 0x0102,
            hash: HashId::Sha384,
            dh_group: DhGroup::Ffdhe2048,
            seqnum: 0xA1B2C3D4,
            challenge: vec![0xCC; 48],
            dh_value: vec![0x11; 256],
        });
        let w = c.encode();
        assert_eq!(w.len(), 16 + 48 + 256);
        assert_eq!(
            &w[..16],
            &[1, 1, 0, 0, 2, 1, 48, 0, 2, 1, 0, 1, 0xD4, 0xC3, 0xB2, 0xA1]
        );
        assert_eq!(decode(&w), Ok(c));

        let r = Message::Reply(Reply {
            t_id: 9,
            response: vec![0xAA; 32],
            challenge: Some(vec![0xBB; 32]),
            seqnum: 5,
            dh_value: vec![],
        });
        let w = r.encode();
        assert_eq!(w.len(), 16 + 64);
        assert_eq!(&w[..16], &[1, 2, 0, 0, 9, 0, 32, 0, 1, 0, 0, 0, 5, 0, 0, 0]);
        assert_eq!(decode(&w), Ok(r));
        // CVALID clear: C2 still occupies HL zero bytes.
        let r1 = Message::Reply(Reply {
            t_id: 9,
            response: vec![0xAA; 32],
            challenge: None,
            seqnum: 0,
            dh_value: vec![3; 8],
        });
        let w = r1.encode();
        assert_eq!(w.len(), 16 + 64 + 8);
        assert!(w[48..80].iter().all(|&b| b == 0));
        assert_eq!(decode(&w), Ok(r1));

        let s = Message::Success1(Success1 {
            t_id: 3,
            hl: 64,
            response: Some(vec![0x55; 64]),
        });
        let w = s.encode();
        assert_eq!(&w[..9], &[1, 3, 0, 0, 3, 0, 64, 0, 1]);
        assert_eq!(decode(&w), Ok(s));
        let s2 = Message::Success2 { t_id: 3 };
        assert_eq!(
            s2.encode(),
            [1, 4, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
        );
        let f = Message::Failure1(Failure::new(3, FailureReason::HashUnusable));
        assert_eq!(f.encode(), [0, 0xF1, 0, 0, 3, 0, 1, 4]);
        assert_eq!(decode(&f.encode()), Ok(f));
        let f2 = Message::Failure2(Failure::new(3, FailureReason::Failed));
        assert_eq!(f2.encode(), [0, 0xF0, 0, 0, 3, 0, 1, 1]);
        // A Linux target returns the whole allocation: trailing zeros are fine.
        let mut padded = f2.encode();
        padded.resize(4096, 0);
        assert_eq!(decode(&padded), Ok(f2));
    }
}
