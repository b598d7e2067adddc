//! Our TLS 1.3 record layer for application traffic (RFC 8446 §5), used once OpenSSL has
//! finished the handshake (ADR 0024): the traffic secrets come out of OpenSSL through its key
//! log callback, keys and IVs are derived here with HKDF-Expand-Label (§7.1, §7.3), and every
//! record after the handshake is sealed and opened in place in the connection's own buffers.
//!
//! Everything in this module is peer-input safe: [`RecordLayer::open_next`] bounds-checks the
//! 5-byte header, the length (≤ 2^14 + 256, else `record_overflow`), authenticates the record
//! before looking at any of its bytes, strips the TLSInnerPlaintext padding, and decodes the
//! post-handshake messages (KeyUpdate, NewSessionTicket) and alerts it may carry.

use zeroize::{Zeroize, Zeroizing};

use crate::aead::{Aead, NONCE_LEN, TAG_LEN};
use crate::error::TlsError;

/// Record header: type, legacy version (2), length (2).
pub(crate) const HEADER_LEN: usize = 5;
/// Most plaintext per record (RFC 8446 §5.1; the Linux host's record_size_limit 0x4001 is this
/// plus the content type).
pub(crate) const MAX_PLAIN: usize = 16384;
/// Largest TLSCiphertext.length accepted (RFC 8446 §5.2).
pub(crate) const MAX_CIPHERTEXT: usize = MAX_PLAIN + 256;
/// What a record adds to its plaintext: header, content type, tag.
pub(crate) const RECORD_OVERHEAD: usize = HEADER_LEN + 1 + TAG_LEN;

/// Content types (RFC 8446 §5.1).
pub(crate) const CT_CHANGE_CIPHER_SPEC: u8 = 20;
pub(crate) const CT_ALERT: u8 = 21;
pub(crate) const CT_HANDSHAKE: u8 = 22;
pub(crate) const CT_APPLICATION_DATA: u8 = 23;

/// Handshake message types seen after the handshake (RFC 8446 §4).
const HS_NEW_SESSION_TICKET: u8 = 4;
const HS_KEY_UPDATE: u8 = 24;

/// Alert descriptions we send (RFC 8446 §6).
pub(crate) const ALERT_CLOSE_NOTIFY: u8 = 0;
pub(crate) const ALERT_UNEXPECTED_MESSAGE: u8 = 10;
pub(crate) const ALERT_BAD_RECORD_MAC: u8 = 20;
pub(crate) const ALERT_RECORD_OVERFLOW: u8 = 22;
pub(crate) const ALERT_ILLEGAL_PARAMETER: u8 = 47;
pub(crate) const ALERT_DECODE_ERROR: u8 = 50;
pub(crate) const ALERT_INTERNAL_ERROR: u8 = 80;
const ALERT_USER_CANCELED: u8 = 90;

/// Full-size-record equivalents sealed under one key before a KeyUpdate is due. RFC 8446 §5.5
/// puts the AES-GCM limit at about 2^24.5 full-size records; we stay below it.
pub const DEFAULT_KEY_UPDATE_RECORDS: u64 = 1 << 24;

/// What one full-size record costs in AES blocks: 16384 bytes of content plus the content
/// type byte (1025 blocks of counter mode), plus the block that masks the tag. The KeyUpdate
/// threshold is counted in these units (RFC 8446 §5.5 bounds AES-GCM by the blocks it
/// encrypts): a record of `n` inner-plaintext bytes costs `ceil(n / 16) + 1` blocks, so a
/// full record is exactly one unit and a 100-byte record about 1/128 of one.
pub(crate) const FULL_RECORD_BLOCKS: u64 = 1026;

/// The AES blocks a record of `inner` TLSInnerPlaintext bytes costs (see
/// [`FULL_RECORD_BLOCKS`]).
fn record_blocks(inner: usize) -> u64 {
    inner.div_ceil(16) as u64 + 1
}

/// Whom we send a KeyUpdate of our own to when the sending key reaches the threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KeyUpdatePolicy {
    /// Only to a peer that has sent a KeyUpdate itself (and so shown it takes one). Linux
    /// hosts read NVMe/TCP through kTLS, which takes no post-handshake handshake record:
    /// towards them the key is kept past the threshold (as the Linux target does) and the
    /// deferral is counted ([`crate::RecordStats::key_updates_deferred`]).
    #[default]
    Peer,
    /// To every peer.
    Always,
}

/// KeyUpdates received in a row without application data between them before the peer is
/// refused (a legitimate peer updates after millions of records, not in a loop).
pub(crate) const MAX_KEY_UPDATES_WITHOUT_DATA: u32 = 32;

/// The most bytes of post-handshake handshake messages buffered while one is incomplete
/// (a NewSessionTicket of a real peer is a few hundred bytes).
const MAX_HANDSHAKE_BUFFER: usize = 64 * 1024;

/// The AEAD suites our record layer runs (CCM stays on OpenSSL's record layer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Suite {
    /// TLS_AES_128_GCM_SHA256.
    Aes128GcmSha256,
    /// TLS_AES_256_GCM_SHA384.
    Aes256GcmSha384,
}

impl Suite {
    /// The suite of an OpenSSL standard name, `None` for one we leave to OpenSSL.
    pub(crate) fn from_name(name: &str) -> Option<Suite> {
        match name {
            "TLS_AES_128_GCM_SHA256" => Some(Suite::Aes128GcmSha256),
            "TLS_AES_256_GCM_SHA384" => Some(Suite::Aes256GcmSha384),
            _ => None,
        }
    }

    fn key_len(self) -> usize {
        match self {
            Suite::Aes128GcmSha256 => 16,
            Suite::Aes256GcmSha384 => 32,
        }
    }

    pub(crate) fn hash_len(self) -> usize {
        match self {
            Suite::Aes128GcmSha256 => 32,
            Suite::Aes256GcmSha384 => 48,
        }
    }
}

/// HKDF-Expand-Label(secret, label, "", out.len()) (RFC 8446 §7.1).
pub(crate) fn hkdf_expand_label(
    suite: Suite,
    secret: &[u8],
    label: &[u8],
    out: &mut [u8],
) -> Result<(), TlsError> {
    // HkdfLabel: u16 length, opaque label<7..255> = "tls13 " + label, opaque context<0..255>.
    let full_len = 6 + label.len();
    let (Ok(len16), Ok(label_len)) = (u16::try_from(out.len()), u8::try_from(full_len)) else {
        return Err(TlsError::Setup(
            "HKDF-Expand-Label: label or length too long".into(),
        ));
    };
    let mut info = Vec::with_capacity(4 + full_len);
    info.extend_from_slice(&len16.to_be_bytes());
    info.push(label_len);
    info.extend_from_slice(b"tls13 ");
    info.extend_from_slice(label);
    info.push(0);
    let bad = |_| TlsError::Setup("HKDF-Expand-Label: bad secret or output length".into());
    match suite {
        Suite::Aes128GcmSha256 => hkdf::Hkdf::<sha2::Sha256>::from_prk(secret)
            .map_err(|_| TlsError::Setup("traffic secret of the wrong length".into()))?
            .expand(&info, out)
            .map_err(bad),
        Suite::Aes256GcmSha384 => hkdf::Hkdf::<sha2::Sha384>::from_prk(secret)
            .map_err(|_| TlsError::Setup("traffic secret of the wrong length".into()))?
            .expand(&info, out)
            .map_err(bad),
    }
}

/// One direction's keys: the traffic secret (kept for KeyUpdate), the AEAD key, the IV and the
/// record sequence number. Secrets are zeroed on drop and never printed.
pub(crate) struct DirKeys {
    suite: Suite,
    secret: Zeroizing<Vec<u8>>,
    aead: Aead,
    /// On the heap, so that moving the keys around leaves no copy of it behind.
    iv: Zeroizing<Vec<u8>>,
    seq: u64,
    /// AES blocks protected with the current key (for the KeyUpdate threshold, sending side).
    blocks: u64,
}

impl std::fmt::Debug for DirKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirKeys")
            .field("suite", &self.suite)
            .field("seq", &self.seq)
            .finish_non_exhaustive()
    }
}

impl DirKeys {
    pub(crate) fn new(suite: Suite, secret: Zeroizing<Vec<u8>>) -> Result<DirKeys, TlsError> {
        if secret.len() != suite.hash_len() {
            return Err(TlsError::Setup(format!(
                "traffic secret of {} bytes for a {}-byte hash",
                secret.len(),
                suite.hash_len()
            )));
        }
        let mut key = Zeroizing::new([0u8; 32]);
        let key = &mut key[..suite.key_len()];
        hkdf_expand_label(suite, &secret, b"key", key)?;
        let mut iv = Zeroizing::new(vec![0u8; NONCE_LEN]);
        hkdf_expand_label(suite, &secret, b"iv", &mut iv[..])?;
        Ok(DirKeys {
            suite,
            aead: Aead::new(suite, key)?,
            secret,
            iv,
            seq: 0,
            blocks: 0,
        })
    }

    /// The next generation of keys (RFC 8446 §7.2): secret = HKDF-Expand-Label(secret,
    /// "traffic upd", "", Hash.length); sequence numbers restart at 0.
    fn update(&mut self) -> Result<(), TlsError> {
        let mut next = Zeroizing::new(vec![0u8; self.suite.hash_len()]);
        hkdf_expand_label(self.suite, &self.secret, b"traffic upd", &mut next)?;
        *self = DirKeys::new(self.suite, next)?;
        Ok(())
    }

    /// nonce = iv XOR the 64-bit sequence number, left-padded (RFC 8446 §5.3); then the
    /// sequence number advances (a wrap is refused).
    fn next_nonce(&mut self) -> Result<[u8; NONCE_LEN], TlsError> {
        let mut nonce = [0u8; NONCE_LEN];
        nonce.copy_from_slice(&self.iv[..NONCE_LEN]);
        for (n, s) in nonce[NONCE_LEN - 8..]
            .iter_mut()
            .zip(self.seq.to_be_bytes())
        {
            *n ^= s;
        }
        self.seq = self
            .seq
            .checked_add(1)
            .ok_or_else(|| TlsError::Record("record sequence number exhausted".into()))?;
        Ok(nonce)
    }
}

/// What opening the next buffered record produced.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Opened {
    /// Not a whole record buffered.
    NeedMore,
    /// Application data: the plaintext is at this range of the buffer (possibly empty).
    Data(std::ops::Range<usize>),
    /// A record handled inside (KeyUpdate, NewSessionTicket, a partial handshake message).
    Control,
    /// The peer's close_notify.
    Closed,
}

/// A protocol violation by the peer: the alert we send and the error we report.
pub(crate) struct Violation {
    pub(crate) alert: Option<u8>,
    pub(crate) error: TlsError,
}

fn violation(alert: u8, detail: impl Into<String>) -> Violation {
    Violation {
        alert: Some(alert),
        error: TlsError::Record(format!("{}: {}", alert_name(alert), detail.into())),
    }
}

/// The record layer of one established connection (both directions).
pub(crate) struct RecordLayer {
    pub(crate) suite: Suite,
    tx: DirKeys,
    rx: DirKeys,
    /// Post-handshake handshake bytes of a message not yet complete.
    handshake: Vec<u8>,
    /// AES blocks under one sending key before a KeyUpdate is due (the threshold in
    /// full-size-record equivalents times [`FULL_RECORD_BLOCKS`]).
    key_update_blocks: u64,
    /// Whom we send our own KeyUpdate to.
    policy: KeyUpdatePolicy,
    /// Blocks under the current sending key at which the next deferral is counted.
    next_deferral: u64,
    /// Our close_notify went out: nothing more is sent (not even a requested KeyUpdate).
    pub(crate) closed_tx: bool,
    is_client: bool,
    /// KeyUpdates received / sent (for tests and statistics).
    pub(crate) updates_received: u64,
    pub(crate) updates_sent: u64,
    /// Thresholds crossed without a KeyUpdate (the peer has not shown it takes one).
    pub(crate) updates_deferred: u64,
    /// KeyUpdates received since the last application data carrying bytes.
    updates_without_data: u32,
    /// KeyUpdates we queued as answers to the peer's requests since our output was last
    /// flushed (the caller stops reading while there are many, see `TlsConn::read_paused`).
    pub(crate) answers_queued: u32,
    /// Testing: the seal after this many more fails (see `TlsConn::fail_seal_after`).
    pub(crate) fail_seal_in: Option<u32>,
}

impl std::fmt::Debug for RecordLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordLayer")
            .field("suite", &self.suite)
            .field("tx", &self.tx)
            .field("rx", &self.rx)
            .finish_non_exhaustive()
    }
}

impl RecordLayer {
    pub(crate) fn new(
        suite: Suite,
        tx_secret: Zeroizing<Vec<u8>>,
        rx_secret: Zeroizing<Vec<u8>>,
        is_client: bool,
    ) -> Result<RecordLayer, TlsError> {
        Ok(RecordLayer {
            suite,
            tx: DirKeys::new(suite, tx_secret)?,
            rx: DirKeys::new(suite, rx_secret)?,
            handshake: Vec::new(),
            key_update_blocks: DEFAULT_KEY_UPDATE_RECORDS * FULL_RECORD_BLOCKS,
            policy: KeyUpdatePolicy::Peer,
            next_deferral: DEFAULT_KEY_UPDATE_RECORDS * FULL_RECORD_BLOCKS,
            closed_tx: false,
            is_client,
            updates_received: 0,
            updates_sent: 0,
            updates_deferred: 0,
            updates_without_data: 0,
            answers_queued: 0,
            fail_seal_in: None,
        })
    }

    /// The KeyUpdate threshold, in full-size-record equivalents (at least 1).
    pub(crate) fn set_key_update_records(&mut self, n: u64) {
        self.key_update_blocks = n.max(1).saturating_mul(FULL_RECORD_BLOCKS);
        self.next_deferral = self.key_update_blocks;
    }

    pub(crate) fn set_key_update_policy(&mut self, policy: KeyUpdatePolicy) {
        self.policy = policy;
    }

    /// Whether we may start a KeyUpdate towards this peer (see [`KeyUpdatePolicy`]).
    fn may_initiate(&self) -> bool {
        self.policy == KeyUpdatePolicy::Always || self.updates_received > 0
    }

    /// The sequence numbers of the next record sent and received.
    pub(crate) fn seqs(&self) -> (u64, u64) {
        (self.tx.seq, self.rx.seq)
    }

    /// Seals `out[start..]` (`start` is where the 5-byte header goes, the inner plaintext
    /// follows: content, then the content type byte) in place and appends the tag.
    fn seal_at(&mut self, out: &mut Vec<u8>, start: usize) -> Result<(), TlsError> {
        let inner = out.len() - start - HEADER_LEN;
        let len = u16::try_from(inner + TAG_LEN)
            .map_err(|_| TlsError::Record("internal: record too long".into()))?;
        let header = [
            CT_APPLICATION_DATA,
            3,
            3,
            len.to_be_bytes()[0],
            len.to_be_bytes()[1],
        ];
        out[start..start + HEADER_LEN].copy_from_slice(&header);
        if let Some(n) = self.fail_seal_in.as_mut() {
            if *n == 0 {
                self.fail_seal_in = None;
                return Err(TlsError::Record("sealing failed (test hook)".into()));
            }
            *n -= 1;
        }
        let nonce = self.tx.next_nonce()?;
        let (hdr, body) = out[start..].split_at_mut(HEADER_LEN);
        let tag = self.tx.aead.seal_in_place(&nonce, hdr, body)?;
        out.extend_from_slice(&tag);
        self.tx.blocks = self.tx.blocks.saturating_add(record_blocks(inner));
        Ok(())
    }

    /// Appends one record of content type `ct` carrying `content` (nothing on an error).
    pub(crate) fn seal_record(
        &mut self,
        out: &mut Vec<u8>,
        ct: u8,
        content: &[u8],
    ) -> Result<(), TlsError> {
        let start = out.len();
        out.reserve(content.len() + RECORD_OVERHEAD);
        out.extend_from_slice(&[0; HEADER_LEN]);
        out.extend_from_slice(content);
        out.push(ct);
        self.seal_at(out, start)
            .inspect_err(|_| out.truncate(start))
    }

    /// Appends a record whose TLSInnerPlaintext is exactly `inner` (tests, fuzzing).
    pub(crate) fn seal_raw_inner(
        &mut self,
        out: &mut Vec<u8>,
        inner: &[u8],
    ) -> Result<(), TlsError> {
        let start = out.len();
        out.extend_from_slice(&[0; HEADER_LEN]);
        out.extend_from_slice(inner);
        self.seal_at(out, start)
            .inspect_err(|_| out.truncate(start))
    }

    /// Before an application-data record: our own KeyUpdate when the sending key has
    /// protected enough (the threshold) and the policy lets us send one to this peer; else
    /// the key is kept and the deferral counted, once per threshold's worth. O(1): one
    /// comparison on the data path.
    fn key_update_due(&mut self, out: &mut Vec<u8>) -> Result<(), TlsError> {
        if self.tx.blocks < self.key_update_blocks {
            return Ok(());
        }
        if self.may_initiate() {
            self.send_key_update(out, false)
        } else {
            if self.tx.blocks >= self.next_deferral {
                self.updates_deferred += 1;
                self.next_deferral = self.tx.blocks.saturating_add(self.key_update_blocks);
            }
            Ok(())
        }
    }

    /// Sends a KeyUpdate (asking the peer to update too if `request`) and switches our
    /// sending key.
    pub(crate) fn send_key_update(
        &mut self,
        out: &mut Vec<u8>,
        request: bool,
    ) -> Result<(), TlsError> {
        self.seal_record(
            out,
            CT_HANDSHAKE,
            &[HS_KEY_UPDATE, 0, 0, 1, u8::from(request)],
        )?;
        self.tx.update()?;
        self.next_deferral = self.key_update_blocks;
        self.updates_sent += 1;
        Ok(())
    }

    /// Encrypts `bufs` (one stream) into records of up to 16 KiB appended to `out`; returns
    /// the plaintext length. On an error `out` keeps only the records sealed whole before it
    /// (never plaintext of a record that was not sealed).
    pub(crate) fn seal_stream(
        &mut self,
        out: &mut Vec<u8>,
        bufs: &[&[u8]],
    ) -> Result<usize, TlsError> {
        let mut sealed = out.len();
        self.seal_stream_inner(out, bufs, &mut sealed)
            .inspect_err(|_| out.truncate(sealed))
    }

    /// [`Self::seal_stream`]; `sealed` follows the end of the last whole record.
    fn seal_stream_inner(
        &mut self,
        out: &mut Vec<u8>,
        bufs: &[&[u8]],
        sealed: &mut usize,
    ) -> Result<usize, TlsError> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if total == 0 {
            return Ok(0);
        }
        let records = total.div_ceil(MAX_PLAIN);
        out.reserve(total + records * RECORD_OVERHEAD);
        let mut start = None;
        let mut filled = 0usize;
        for buf in bufs {
            let mut rest: &[u8] = buf;
            while !rest.is_empty() {
                if start.is_none() {
                    self.key_update_due(out)?;
                    *sealed = out.len();
                    start = Some(out.len());
                    out.extend_from_slice(&[0; HEADER_LEN]);
                    filled = 0;
                }
                let take = (MAX_PLAIN - filled).min(rest.len());
                out.extend_from_slice(&rest[..take]);
                rest = &rest[take..];
                filled += take;
                if filled == MAX_PLAIN
                    && let Some(s) = start.take()
                {
                    out.push(CT_APPLICATION_DATA);
                    self.seal_at(out, s)?;
                    *sealed = out.len();
                }
            }
        }
        if let Some(s) = start {
            out.push(CT_APPLICATION_DATA);
            self.seal_at(out, s)?;
        }
        Ok(total)
    }

    /// Opens the record at `buf[*pos..end]` in place if it is complete, advancing `*pos`
    /// past it. Post-handshake messages and alerts are handled here (a KeyUpdate we owe is
    /// queued in `out`).
    pub(crate) fn open_next(
        &mut self,
        buf: &mut [u8],
        pos: &mut usize,
        out: &mut Vec<u8>,
    ) -> Result<Opened, Violation> {
        let avail = &buf[*pos..];
        let Some(header) = avail.get(..HEADER_LEN) else {
            return Ok(Opened::NeedMore);
        };
        let ct = header[0];
        let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
        if ct != CT_APPLICATION_DATA {
            return Err(violation(
                ALERT_UNEXPECTED_MESSAGE,
                format!(
                    "record of type {ct} ({}) after the handshake; only protected records \
                     (type 23) may follow it",
                    content_type_name(ct)
                ),
            ));
        }
        if len > MAX_CIPHERTEXT {
            return Err(violation(
                ALERT_RECORD_OVERFLOW,
                format!("record of {len} bytes, more than {MAX_CIPHERTEXT}"),
            ));
        }
        if len < TAG_LEN + 1 {
            return Err(violation(
                ALERT_DECODE_ERROR,
                format!("record of {len} bytes, too short for a protected record"),
            ));
        }
        if avail.len() < HEADER_LEN + len {
            return Ok(Opened::NeedMore);
        }
        let start = *pos;
        let nonce = self
            .rx
            .next_nonce()
            .map_err(|error| Violation { alert: None, error })?;
        let (hdr, rest) = buf[start..start + HEADER_LEN + len].split_at_mut(HEADER_LEN);
        let (body, tag) = rest.split_at_mut(len - TAG_LEN);
        if self.rx.aead.open_in_place(&nonce, hdr, body, tag).is_err() {
            return Err(violation(
                ALERT_BAD_RECORD_MAC,
                format!(
                    "record {} did not authenticate (corrupted, or not encrypted with the \
                     expected key)",
                    self.rx.seq - 1
                ),
            ));
        }
        *pos = start + HEADER_LEN + len;
        // TLSInnerPlaintext: content, content type (non-zero), zero padding; 2^14 + 1 bytes
        // at most, padding included (RFC 8446 §5.4).
        if body.len() > MAX_PLAIN + 1 {
            return Err(violation(
                ALERT_RECORD_OVERFLOW,
                format!(
                    "record inner plaintext of {} bytes, more than {}",
                    body.len(),
                    MAX_PLAIN + 1
                ),
            ));
        }
        let Some(type_at) = body.iter().rposition(|&b| b != 0) else {
            return Err(violation(
                ALERT_UNEXPECTED_MESSAGE,
                "a record of padding only (no content type)",
            ));
        };
        let inner_ct = body[type_at];
        if type_at > MAX_PLAIN {
            return Err(violation(
                ALERT_RECORD_OVERFLOW,
                format!("record plaintext of {type_at} bytes, more than {MAX_PLAIN}"),
            ));
        }
        let content_start = start + HEADER_LEN;
        match inner_ct {
            CT_APPLICATION_DATA => {
                if !self.handshake.is_empty() {
                    return Err(violation(
                        ALERT_UNEXPECTED_MESSAGE,
                        "application data inside a fragmented handshake message",
                    ));
                }
                if type_at > 0 {
                    self.updates_without_data = 0;
                }
                Ok(Opened::Data(content_start..content_start + type_at))
            }
            CT_ALERT => {
                if !self.handshake.is_empty() {
                    return Err(violation(
                        ALERT_UNEXPECTED_MESSAGE,
                        "an alert inside a fragmented handshake message",
                    ));
                }
                self.on_alert(&body[..type_at])
            }
            CT_HANDSHAKE => {
                if type_at == 0 {
                    return Err(violation(
                        ALERT_UNEXPECTED_MESSAGE,
                        "a handshake record with no content",
                    ));
                }
                let content = body[..type_at].to_vec();
                self.on_handshake(&content, out)
            }
            other => Err(violation(
                ALERT_UNEXPECTED_MESSAGE,
                format!(
                    "protected record of content type {other} ({})",
                    content_type_name(other)
                ),
            )),
        }
    }

    fn on_alert(&mut self, alert: &[u8]) -> Result<Opened, Violation> {
        let &[_level, desc] = alert else {
            return Err(violation(
                ALERT_DECODE_ERROR,
                format!("alert record of {} bytes, not 2", alert.len()),
            ));
        };
        match desc {
            ALERT_CLOSE_NOTIFY => Ok(Opened::Closed),
            ALERT_USER_CANCELED => Ok(Opened::Control),
            _ => {
                let name = alert_name(desc);
                let hint = if desc == ALERT_BAD_RECORD_MAC {
                    " (the peer could not decrypt our data)"
                } else {
                    ""
                };
                Err(Violation {
                    alert: None,
                    error: TlsError::PeerAlert {
                        alert: name.replace('_', " "),
                        hint,
                    },
                })
            }
        }
    }

    fn on_handshake(&mut self, content: &[u8], out: &mut Vec<u8>) -> Result<Opened, Violation> {
        if self.handshake.len() + content.len() > MAX_HANDSHAKE_BUFFER {
            return Err(violation(
                ALERT_UNEXPECTED_MESSAGE,
                "post-handshake message larger than 64 KiB",
            ));
        }
        self.handshake.extend_from_slice(content);
        loop {
            let &[msg_type, a, b, c, ..] = self.handshake.as_slice() else {
                return Ok(Opened::Control);
            };
            let body_len = usize::from(a) << 16 | usize::from(b) << 8 | usize::from(c);
            if body_len > MAX_HANDSHAKE_BUFFER {
                return Err(violation(
                    ALERT_UNEXPECTED_MESSAGE,
                    format!("post-handshake message of {body_len} bytes"),
                ));
            }
            if self.handshake.len() < 4 + body_len {
                return Ok(Opened::Control);
            }
            let body: Vec<u8> = self.handshake[4..4 + body_len].to_vec();
            self.handshake.drain(..4 + body_len);
            match msg_type {
                HS_KEY_UPDATE => {
                    let request = match body.as_slice() {
                        [0] => false,
                        [1] => true,
                        [_] => {
                            return Err(violation(
                                ALERT_ILLEGAL_PARAMETER,
                                "KeyUpdate with request_update other than 0 or 1",
                            ));
                        }
                        _ => {
                            return Err(violation(
                                ALERT_DECODE_ERROR,
                                format!("KeyUpdate of {} bytes, not 1", body.len()),
                            ));
                        }
                    };
                    // A key change must end the record (RFC 8446 §5.1).
                    if !self.handshake.is_empty() {
                        return Err(violation(
                            ALERT_UNEXPECTED_MESSAGE,
                            "data after a KeyUpdate in the same record",
                        ));
                    }
                    self.updates_without_data += 1;
                    if self.updates_without_data > MAX_KEY_UPDATES_WITHOUT_DATA {
                        return Err(violation(
                            ALERT_UNEXPECTED_MESSAGE,
                            format!(
                                "more than {MAX_KEY_UPDATES_WITHOUT_DATA} KeyUpdates without \
                                 application data between them"
                            ),
                        ));
                    }
                    self.rx
                        .update()
                        .map_err(|error| Violation { alert: None, error })?;
                    self.updates_received += 1;
                    if request && !self.closed_tx {
                        self.send_key_update(out, false)
                            .map_err(|error| Violation { alert: None, error })?;
                        self.answers_queued = self.answers_queued.saturating_add(1);
                    }
                    return Ok(Opened::Control);
                }
                HS_NEW_SESSION_TICKET if self.is_client => {}
                other => {
                    return Err(violation(
                        ALERT_UNEXPECTED_MESSAGE,
                        format!(
                            "handshake message type {other} ({}) after the handshake",
                            handshake_name(other)
                        ),
                    ));
                }
            }
        }
    }

    /// Appends a fatal alert record (or close_notify) to `out`.
    pub(crate) fn seal_alert(&mut self, out: &mut Vec<u8>, desc: u8) -> Result<(), TlsError> {
        let level = if desc == ALERT_CLOSE_NOTIFY { 1 } else { 2 };
        self.seal_record(out, CT_ALERT, &[level, desc])
    }
}

impl Drop for RecordLayer {
    fn drop(&mut self) {
        self.handshake.zeroize();
    }
}

/// RFC 8446 §6 names (with underscores) of alert descriptions.
pub(crate) fn alert_name(desc: u8) -> &'static str {
    match desc {
        0 => "close_notify",
        10 => "unexpected_message",
        20 => "bad_record_mac",
        22 => "record_overflow",
        40 => "handshake_failure",
        42 => "bad_certificate",
        43 => "unsupported_certificate",
        44 => "certificate_revoked",
        45 => "certificate_expired",
        46 => "certificate_unknown",
        47 => "illegal_parameter",
        48 => "unknown_ca",
        49 => "access_denied",
        50 => "decode_error",
        51 => "decrypt_error",
        70 => "protocol_version",
        71 => "insufficient_security",
        80 => "internal_error",
        86 => "inappropriate_fallback",
        90 => "user_canceled",
        109 => "missing_extension",
        110 => "unsupported_extension",
        112 => "unrecognized_name",
        113 => "bad_certificate_status_response",
        115 => "unknown_psk_identity",
        116 => "certificate_required",
        120 => "no_application_protocol",
        _ => "unknown alert",
    }
}

fn content_type_name(ct: u8) -> &'static str {
    match ct {
        CT_CHANGE_CIPHER_SPEC => "change_cipher_spec",
        CT_ALERT => "alert",
        CT_HANDSHAKE => "handshake",
        CT_APPLICATION_DATA => "application_data",
        24 => "heartbeat",
        _ => "unknown",
    }
}

fn handshake_name(t: u8) -> &'static str {
    match t {
        1 => "client_hello",
        2 => "server_hello",
        4 => "new_session_ticket",
        5 => "end_of_early_data",
        8 => "encrypted_extensions",
        11 => "certificate",
        13 => "certificate_request",
        15 => "certificate_verify",
        20 => "finished",
        24 => "key_update",
        254 => "message_hash",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(b: u8, suite: Suite) -> Zeroizing<Vec<u8>> {
        Zeroizing::new(vec![b; suite.hash_len()])
    }

    /// A client and a server record layer with matching keys.
    fn pair(suite: Suite) -> (RecordLayer, RecordLayer) {
        let c = RecordLayer::new(suite, secret(1, suite), secret(2, suite), true).unwrap();
        let s = RecordLayer::new(suite, secret(2, suite), secret(1, suite), false).unwrap();
        (c, s)
    }

    /// Seals a record whose TLSInnerPlaintext is exactly `inner` (content, type, padding).
    fn seal_inner(rl: &mut RecordLayer, inner: &[u8]) -> Vec<u8> {
        let mut out = vec![0; HEADER_LEN];
        out.extend_from_slice(inner);
        rl.seal_at(&mut out, 0).unwrap();
        out
    }

    /// Opens everything in `wire`; returns the application data and the last outcome.
    fn open_all(rl: &mut RecordLayer, wire: &mut [u8]) -> Result<(Vec<u8>, Opened), String> {
        let mut pos = 0;
        let mut data = Vec::new();
        let mut sink = Vec::new();
        loop {
            match rl.open_next(wire, &mut pos, &mut sink) {
                Ok(Opened::Data(r)) => data.extend_from_slice(&wire[r]),
                Ok(Opened::Control) => {}
                Ok(other) => return Ok((data, other)),
                Err(v) => return Err(v.error.to_string()),
            }
        }
    }

    #[test]
    fn round_trip_both_suites_and_sequence_numbers() {
        for suite in [Suite::Aes128GcmSha256, Suite::Aes256GcmSha384] {
            let (mut c, mut s) = pair(suite);
            let data: Vec<u8> = (0..40_000u32).map(|i| i as u8).collect();
            let mut wire = Vec::new();
            assert_eq!(
                c.seal_stream(&mut wire, &[&data[..100], &data[100..]])
                    .unwrap(),
                40_000
            );
            // 40 000 bytes: 16384 + 16384 + 7232.
            assert_eq!(wire.len(), 40_000 + 3 * RECORD_OVERHEAD);
            assert_eq!(c.seqs(), (3, 0));
            let (got, last) = open_all(&mut s, &mut wire).unwrap();
            assert_eq!(got, data);
            assert_eq!(last, Opened::NeedMore);
            assert_eq!(s.seqs(), (0, 3));
        }
    }

    #[test]
    fn tampered_record_is_bad_record_mac() {
        let (mut c, mut s) = pair(Suite::Aes128GcmSha256);
        let mut wire = Vec::new();
        c.seal_stream(&mut wire, &[b"hello"]).unwrap();
        let last = wire.len() - 1;
        wire[last] ^= 1;
        let e = open_all(&mut s, &mut wire).unwrap_err();
        assert!(e.contains("bad_record_mac"), "{e}");
        // The header is authenticated too.
        let (mut c, mut s) = pair(Suite::Aes128GcmSha256);
        let mut wire = Vec::new();
        c.seal_stream(&mut wire, &[b"hello"]).unwrap();
        wire[1] = 0x01; // legacy version: ignored by the spec, but it is in the AAD
        assert!(
            open_all(&mut s, &mut wire)
                .unwrap_err()
                .contains("bad_record_mac")
        );
    }

    #[test]
    fn outer_content_type_and_lengths() {
        let (_, mut s) = pair(Suite::Aes128GcmSha256);
        let mut v = vec![22, 3, 3, 0, 20];
        v.extend_from_slice(&[0; 20]);
        assert!(
            open_all(&mut s, &mut v)
                .unwrap_err()
                .contains("unexpected_message")
        );
        let mut v = vec![23, 3, 3, 0x41, 0x01];
        assert!(
            open_all(&mut s, &mut v)
                .unwrap_err()
                .contains("record_overflow")
        );
        let mut v = vec![23, 3, 3, 0, 16];
        v.extend_from_slice(&[0; 16]);
        assert!(
            open_all(&mut s, &mut v)
                .unwrap_err()
                .contains("decode_error")
        );
        // Incomplete: header only, then header plus part of the body.
        let mut v = vec![23, 3, 3];
        assert_eq!(open_all(&mut s, &mut v).unwrap().1, Opened::NeedMore);
        let mut v = vec![23, 3, 3, 0, 30, 1, 2];
        assert_eq!(open_all(&mut s, &mut v).unwrap().1, Opened::NeedMore);
    }

    #[test]
    fn inner_plaintext_padding_types_and_overflow() {
        let (mut c, mut s) = pair(Suite::Aes128GcmSha256);
        // Content, type, then padding zeros: the padding is stripped.
        let mut w = seal_inner(&mut c, b"abc\x17\0\0\0\0");
        assert_eq!(open_all(&mut s, &mut w).unwrap().0, b"abc");
        // A zero-length application data record.
        let mut w = seal_inner(&mut c, b"\x17");
        assert_eq!(
            open_all(&mut s, &mut w).unwrap(),
            (vec![], Opened::NeedMore)
        );
        // Content ending in zeros keeps them (they come before the type).
        let mut w = seal_inner(&mut c, b"a\0\0\x17\0");
        assert_eq!(open_all(&mut s, &mut w).unwrap().0, b"a\0\0");
        // All zeros: no content type.
        let mut w = seal_inner(&mut c, &[0; 10]);
        assert!(
            open_all(&mut s, &mut w)
                .unwrap_err()
                .contains("unexpected_message")
        );
        let (mut c, mut s) = pair(Suite::Aes128GcmSha256);
        let mut w = seal_inner(&mut c, b"x\x18");
        let e = open_all(&mut s, &mut w).unwrap_err();
        assert!(e.contains("content type 24"), "{e}");
        let (mut c, mut s) = pair(Suite::Aes128GcmSha256);
        let mut w = seal_inner(&mut c, b"x\x14");
        assert!(
            open_all(&mut s, &mut w)
                .unwrap_err()
                .contains("unexpected_message")
        );
        // 16385 bytes of content: record_overflow, although the record length is allowed.
        let (mut c, mut s) = pair(Suite::Aes128GcmSha256);
        let mut inner = vec![1u8; MAX_PLAIN + 1];
        inner.push(CT_APPLICATION_DATA);
        let mut w = seal_inner(&mut c, &inner);
        assert!(
            open_all(&mut s, &mut w)
                .unwrap_err()
                .contains("record_overflow")
        );
        // Exactly 16384 and the type: fine; one byte of padding more is over 2^14 + 1
        // (RFC 8446 §5.4), although the record length is allowed.
        let (mut c, mut s) = pair(Suite::Aes128GcmSha256);
        let mut inner = vec![1u8; MAX_PLAIN];
        inner.push(CT_APPLICATION_DATA);
        let mut w = seal_inner(&mut c, &inner);
        assert_eq!(open_all(&mut s, &mut w).unwrap().0.len(), MAX_PLAIN);
        for pad in [1, 255 - TAG_LEN] {
            let (mut c, mut s) = pair(Suite::Aes128GcmSha256);
            let mut inner = vec![1u8; MAX_PLAIN];
            inner.push(CT_APPLICATION_DATA);
            inner.extend(std::iter::repeat_n(0, pad));
            let mut w = seal_inner(&mut c, &inner);
            let e = open_all(&mut s, &mut w).unwrap_err();
            assert!(e.contains("record_overflow"), "{e}");
        }
        // Short content with padding up to 2^14 + 1 in all: fine.
        let (mut c, mut s) = pair(Suite::Aes128GcmSha256);
        let mut inner = b"ab\x17".to_vec();
        inner.resize(MAX_PLAIN + 1, 0);
        let mut w = seal_inner(&mut c, &inner);
        assert_eq!(open_all(&mut s, &mut w).unwrap().0, b"ab");
    }

    #[test]
    fn alerts() {
        let (mut c, mut s) = pair(Suite::Aes128GcmSha256);
        let mut w = Vec::new();
        c.seal_alert(&mut w, ALERT_CLOSE_NOTIFY).unwrap();
        assert_eq!(open_all(&mut s, &mut w).unwrap().1, Opened::Closed);
        let mut w = Vec::new();
        c.seal_alert(&mut w, ALERT_DECODE_ERROR).unwrap();
        let e = open_all(&mut s, &mut w).unwrap_err();
        assert!(e.contains("decode error"), "{e}");
        let (mut c, mut s) = pair(Suite::Aes128GcmSha256);
        let mut w = seal_inner(&mut c, &[2, 20, 0, CT_ALERT]);
        assert!(
            open_all(&mut s, &mut w)
                .unwrap_err()
                .contains("decode_error")
        );
        // user_canceled is a warning: ignored.
        let (mut c, mut s) = pair(Suite::Aes128GcmSha256);
        let mut w = seal_inner(&mut c, &[1, 90, CT_ALERT]);
        assert_eq!(
            open_all(&mut s, &mut w).unwrap(),
            (vec![], Opened::NeedMore)
        );
    }

    #[test]
    fn key_update_both_ways_and_requested_answer() {
        let (mut c, mut s) = pair(Suite::Aes256GcmSha384);
        let mut w = Vec::new();
        c.seal_stream(&mut w, &[b"before"]).unwrap();
        c.send_key_update(&mut w, true).unwrap();
        c.seal_stream(&mut w, &[b"after"]).unwrap();
        assert_eq!(c.seqs().0, 1, "sequence numbers restart under the new key");
        let mut answer = Vec::new();
        let mut pos = 0;
        let mut got = Vec::new();
        loop {
            match s.open_next(&mut w, &mut pos, &mut answer) {
                Ok(Opened::Data(r)) => got.extend_from_slice(&w[r]),
                Ok(Opened::Control) => {}
                Ok(Opened::NeedMore) => break,
                Ok(Opened::Closed) | Err(_) => panic!("unexpected"),
            }
        }
        assert_eq!(got, b"beforeafter");
        assert_eq!((s.updates_received, s.updates_sent), (1, 1));
        // The server answered with its own KeyUpdate and switched its sending key.
        s.seal_stream(&mut answer, &[b"reply"]).unwrap();
        let (data, _) = open_all(&mut c, &mut answer).unwrap();
        assert_eq!(data, b"reply");
        assert_eq!((c.updates_received, c.updates_sent), (1, 1));
    }

    #[test]
    fn key_update_at_the_record_threshold() {
        let (mut c, mut s) = pair(Suite::Aes128GcmSha256);
        c.set_key_update_records(2);
        c.set_key_update_policy(KeyUpdatePolicy::Always);
        let data = vec![7u8; 5 * MAX_PLAIN];
        let mut w = Vec::new();
        c.seal_stream(&mut w, &[&data]).unwrap();
        // Records 1,2 | KU | 3,4 | KU | 5.
        assert_eq!(c.updates_sent, 2);
        let (got, _) = open_all(&mut s, &mut w).unwrap();
        assert_eq!(got, data);
        assert_eq!(s.updates_received, 2);
    }

    /// Seals `records` records of `size` bytes each, one call each; the KeyUpdates sent.
    fn records_of(c: &mut RecordLayer, size: usize, records: usize) -> Vec<u8> {
        let data = vec![3u8; size];
        let mut w = Vec::new();
        for _ in 0..records {
            c.seal_stream(&mut w, &[&data]).unwrap();
        }
        w
    }

    #[test]
    fn threshold_counts_full_size_record_equivalents() {
        // 4 units = 4 × 1026 blocks; a 4 KiB record costs 258 (4097 bytes: 257 + 1), so 16
        // of them stay below (4128 > 4104 only after the 16th), the 17th is preceded by a
        // KeyUpdate.
        let (mut c, mut s) = pair(Suite::Aes128GcmSha256);
        c.set_key_update_records(4);
        c.set_key_update_policy(KeyUpdatePolicy::Always);
        let mut w = records_of(&mut c, 4096, 15);
        assert_eq!(c.updates_sent, 0);
        w.extend(records_of(&mut c, 4096, 1));
        assert_eq!(c.updates_sent, 0, "16 × 4 KiB ≈ 4 full records, not 16");
        w.extend(records_of(&mut c, 4096, 1));
        assert_eq!(c.updates_sent, 1);
        assert_eq!(open_all(&mut s, &mut w).unwrap().0.len(), 17 * 4096);
        // 100-byte records cost 8 blocks (101 bytes: 7 + 1): 513 of them make 4 units.
        let (mut c, _) = pair(Suite::Aes128GcmSha256);
        c.set_key_update_records(4);
        c.set_key_update_policy(KeyUpdatePolicy::Always);
        records_of(&mut c, 100, 513);
        assert_eq!(c.updates_sent, 0);
        records_of(&mut c, 100, 1);
        assert_eq!(c.updates_sent, 1);
        // Full records: exactly one unit each.
        let (mut c, _) = pair(Suite::Aes128GcmSha256);
        c.set_key_update_records(4);
        c.set_key_update_policy(KeyUpdatePolicy::Always);
        records_of(&mut c, MAX_PLAIN, 4);
        assert_eq!(c.updates_sent, 0);
        records_of(&mut c, MAX_PLAIN, 1);
        assert_eq!(c.updates_sent, 1);
    }

    /// True if `wire` (records of `rl`'s peer) holds a record of inner type 22.
    fn has_handshake_record(rl: &mut RecordLayer, wire: &mut [u8]) -> bool {
        let before = rl.updates_received;
        open_all(rl, wire).unwrap();
        rl.updates_received > before
    }

    #[test]
    fn peer_policy_sends_no_key_update_before_the_peer_did() {
        let (mut c, mut s) = pair(Suite::Aes128GcmSha256);
        s.set_key_update_records(2);
        // Ten full records past a threshold of two: no KeyUpdate, four deferrals counted
        // (before records 3, 5, 7 and 9).
        let mut w = records_of(&mut s, MAX_PLAIN, 10);
        assert_eq!((s.updates_sent, s.updates_deferred), (0, 4));
        assert!(!has_handshake_record(&mut c, &mut w));
        // The peer sends a KeyUpdate: from now on ours go out, at once (we are past the
        // threshold).
        let mut ku = Vec::new();
        c.send_key_update(&mut ku, false).unwrap();
        open_all(&mut s, &mut ku).unwrap();
        let mut w = records_of(&mut s, MAX_PLAIN, 1);
        assert_eq!(s.updates_sent, 1);
        assert!(has_handshake_record(&mut c, &mut w));
        // And again at the threshold.
        let mut w = records_of(&mut s, MAX_PLAIN, 2);
        assert_eq!(s.updates_sent, 2);
        assert!(has_handshake_record(&mut c, &mut w));
        // The same towards a peer with the Always policy: without it having sent one.
        let (mut c, mut s) = pair(Suite::Aes128GcmSha256);
        s.set_key_update_records(2);
        s.set_key_update_policy(KeyUpdatePolicy::Always);
        let mut w = records_of(&mut s, MAX_PLAIN, 3);
        assert_eq!((s.updates_sent, s.updates_deferred), (1, 0));
        assert!(has_handshake_record(&mut c, &mut w));
    }

    #[test]
    fn sealing_errors_leave_only_whole_records() {
        // Sequence-number exhaustion: the first record of 40 000 bytes takes the last
        // number, the second cannot be sealed. `out` keeps its old bytes and the one record.
        let (mut c, mut s) = pair(Suite::Aes128GcmSha256);
        c.tx.seq = u64::MAX - 1;
        let mut out = b"before".to_vec();
        let data = vec![0xA5u8; 40_000];
        let e = c.seal_stream(&mut out, &[&data]).unwrap_err();
        assert!(e.to_string().contains("exhausted"), "{e}");
        assert_eq!(out.len(), 6 + MAX_PLAIN + RECORD_OVERHEAD);
        assert_eq!(&out[..6], b"before");
        s.rx.seq = u64::MAX - 1;
        let (got, _) = open_all(&mut s, &mut out[6..]).unwrap();
        assert_eq!(got, &data[..MAX_PLAIN]);
        // Nothing at all once the numbers are gone (an alert cannot be sealed either).
        let mut out = Vec::new();
        assert!(c.seal_stream(&mut out, &[b"x"]).is_err());
        assert!(c.seal_alert(&mut out, ALERT_INTERNAL_ERROR).is_err());
        assert!(out.is_empty());
    }

    #[test]
    fn too_many_key_updates_without_data() {
        let (mut c, mut s) = pair(Suite::Aes128GcmSha256);
        let mut w = Vec::new();
        for _ in 0..MAX_KEY_UPDATES_WITHOUT_DATA {
            c.send_key_update(&mut w, true).unwrap();
        }
        // Empty data records do not count as data.
        c.seal_stream(&mut w, &[]).unwrap();
        w.extend(seal_inner(&mut c, &[CT_APPLICATION_DATA]));
        assert!(open_all(&mut s, &mut w).is_ok());
        let mut w = Vec::new();
        c.send_key_update(&mut w, true).unwrap();
        let e = open_all(&mut s, &mut w).unwrap_err();
        assert!(e.contains("KeyUpdates without application data"), "{e}");
        // With data between them any number is fine.
        let (mut c, mut s) = pair(Suite::Aes128GcmSha256);
        let mut w = Vec::new();
        for _ in 0..3 * MAX_KEY_UPDATES_WITHOUT_DATA {
            c.send_key_update(&mut w, true).unwrap();
            c.seal_stream(&mut w, &[b"d"]).unwrap();
        }
        assert!(open_all(&mut s, &mut w).is_ok());
        assert_eq!(s.answers_queued, 3 * MAX_KEY_UPDATES_WITHOUT_DATA);
    }

    #[test]
    fn post_handshake_messages() {
        // NewSessionTicket to a client: ignored, even split over two records.
        let (mut c, mut s) = pair(Suite::Aes128GcmSha256);
        let mut w = seal_inner(&mut s, &[4, 0, 0, 3, 9, 9, CT_HANDSHAKE]);
        w.extend(seal_inner(&mut s, &[9, CT_HANDSHAKE]));
        w.extend(seal_inner(&mut s, b"ok\x17"));
        assert_eq!(open_all(&mut c, &mut w).unwrap().0, b"ok");
        // ... but not to a server.
        let (mut c, mut s) = pair(Suite::Aes128GcmSha256);
        let mut w = seal_inner(&mut c, &[4, 0, 0, 0, CT_HANDSHAKE]);
        assert!(
            open_all(&mut s, &mut w)
                .unwrap_err()
                .contains("new_session_ticket")
        );
        // Any other handshake message.
        let (mut c, mut s) = pair(Suite::Aes128GcmSha256);
        let mut w = seal_inner(&mut c, &[1, 0, 0, 0, CT_HANDSHAKE]);
        assert!(
            open_all(&mut s, &mut w)
                .unwrap_err()
                .contains("client_hello")
        );
        // A KeyUpdate with a bad value, with a bad length, or not at the end of its record.
        for (inner, want) in [
            (&[24, 0, 0, 1, 2, CT_HANDSHAKE][..], "illegal_parameter"),
            (&[24, 0, 0, 2, 0, 0, CT_HANDSHAKE][..], "decode_error"),
            (&[24, 0, 0, 1, 0, 4, CT_HANDSHAKE][..], "unexpected_message"),
        ] {
            let (mut c, mut s) = pair(Suite::Aes128GcmSha256);
            let mut w = seal_inner(&mut c, inner);
            let e = open_all(&mut s, &mut w).unwrap_err();
            assert!(e.contains(want), "{e}");
        }
        // Application data in the middle of a fragmented handshake message.
        let (mut c, mut s) = pair(Suite::Aes128GcmSha256);
        let mut w = seal_inner(&mut c, &[24, 0, CT_HANDSHAKE]);
        w.extend(seal_inner(&mut c, b"x\x17"));
        assert!(
            open_all(&mut s, &mut w)
                .unwrap_err()
                .contains("unexpected_message")
        );
        // An alert in the middle of a fragmented handshake message.
        let (mut c, mut s) = pair(Suite::Aes128GcmSha256);
        let mut w = seal_inner(&mut c, &[24, 0, CT_HANDSHAKE]);
        w.extend(seal_inner(&mut c, &[1, 90, CT_ALERT]));
        let e = open_all(&mut s, &mut w).unwrap_err();
        assert!(e.contains("alert inside a fragmented"), "{e}");
        // An empty handshake record.
        let (mut c, mut s) = pair(Suite::Aes128GcmSha256);
        let mut w = seal_inner(&mut c, &[CT_HANDSHAKE]);
        assert!(
            open_all(&mut s, &mut w)
                .unwrap_err()
                .contains("unexpected_message")
        );
    }

    #[test]
    fn secrets_of_the_wrong_length_are_refused() {
        let short = Zeroizing::new(vec![0u8; 31]);
        assert!(DirKeys::new(Suite::Aes128GcmSha256, short).is_err());
        let sha256 = Zeroizing::new(vec![0u8; 32]);
        assert!(DirKeys::new(Suite::Aes256GcmSha384, sha256).is_err());
    }
}
