//! The sans-IO TLS session shared by both roles: OpenSSL's `SslStream` over an in-memory
//! transport for the handshake, then our record layer (`record.rs`, ADR 0024) for the
//! AES-GCM suites (TLS_AES_128_CCM_SHA256 stays on OpenSSL's record layer). Ciphertext goes in
//! with [`TlsConn::feed`] (or straight into [`TlsConn::cipher_space`]) and comes out of
//! [`TlsConn::pending_cipher`]; plaintext goes in with [`TlsConn::write_plain`] and comes out
//! of [`TlsConn::read_plain`].

use std::io::{self, Read, Write};
use std::mem::MaybeUninit;
use std::ops::Range;
use std::sync::{Mutex, OnceLock};

use openssl::ssl::{ErrorCode, Ssl, SslRef, SslStream};
use zeroize::{Zeroize, Zeroizing};

use crate::error::{TlsError, printable};
use crate::record::{
    ALERT_CLOSE_NOTIFY, ALERT_INTERNAL_ERROR, KeyUpdatePolicy, Opened, RecordLayer, Suite,
};

/// The largest plaintext a TLS record carries (RFC 8446 §5.1; also what the Linux host's
/// `record_size_limit` of 0x4001 allows: 16384 bytes + the inner content type).
pub const MAX_RECORD_PLAINTEXT: usize = 16384;

/// Past this much already-consumed input the receive buffer is compacted.
const RX_COMPACT_AT: usize = 64 * 1024;
/// [`TlsConn::cipher_space`] offers at least this much room.
const MIN_CIPHER_SPACE: usize = 64 * 1024;
/// Past this much already-sent output the send buffer is compacted.
const TX_COMPACT_AT: usize = 256 * 1024;
/// Records without plaintext (KeyUpdates, empty records, ignored alerts and tickets) one
/// `read_plain` call opens before it returns to the caller ([`TlsConn::read_paused`]).
pub const MAX_EMPTY_RECORDS_PER_CALL: usize = 64;
/// KeyUpdate answers queued and not yet sent before reading pauses (27 bytes each).
pub const MAX_ANSWERS_QUEUED: u32 = 64;

/// The connection's byte buffers. During the handshake OpenSSL reads ciphertext from `rx` (a
/// read past the end is `WouldBlock`: "need more bytes", a normal state) and writes ciphertext
/// to `tx`, which never blocks. Afterwards our record layer opens records in place in `rx`
/// and seals them in place at the end of `tx`.
#[derive(Default)]
pub(crate) struct MemIo {
    /// Initialized storage; `rx[rx_pos..rx_end]` is ciphertext not processed yet.
    rx: Vec<u8>,
    rx_pos: usize,
    rx_end: usize,
    /// Decrypted plaintext inside `rx` not handed out yet (our record layer only).
    plain: Range<usize>,
    tx: Vec<u8>,
    tx_pos: usize,
}

impl MemIo {
    /// Free room at the end of `rx`, at least `min` bytes (compacting or growing).
    fn space(&mut self, min: usize) -> &mut [u8] {
        let keep = if self.plain.is_empty() {
            self.rx_pos
        } else {
            self.plain.start
        };
        if keep == self.rx_end {
            self.rx_pos = 0;
            self.rx_end = 0;
            self.plain = 0..0;
        } else if keep > 0 && (keep >= RX_COMPACT_AT || self.rx.len() - self.rx_end < min) {
            self.rx.copy_within(keep..self.rx_end, 0);
            self.rx_pos -= keep;
            self.rx_end -= keep;
            if !self.plain.is_empty() {
                self.plain = self.plain.start - keep..self.plain.end - keep;
            }
        }
        if self.rx.len() - self.rx_end < min {
            // Doubling, so that the handshake's small reads keep a small buffer.
            let grow = min.max(self.rx.len());
            self.rx.resize(self.rx_end + grow, 0);
        }
        &mut self.rx[self.rx_end..]
    }

    fn filled(&mut self, n: usize) {
        self.rx_end = (self.rx_end + n).min(self.rx.len());
    }

    fn push(&mut self, bytes: &[u8]) {
        self.space(bytes.len())[..bytes.len()].copy_from_slice(bytes);
        self.filled(bytes.len());
    }

    fn compact_tx(&mut self) {
        if self.tx_pos >= TX_COMPACT_AT {
            self.tx.drain(..self.tx_pos);
            self.tx_pos = 0;
        }
    }

    /// After the peer's close_notify: what is buffered behind it is dropped (RFC 8446 §6.1:
    /// ignored), and the buffer is not grown for more.
    fn discard_input(&mut self) {
        self.rx_end = self.rx_pos;
    }
}

impl Drop for MemIo {
    /// Decrypted plaintext stays in the buffers after it is handed out: wiped with them.
    fn drop(&mut self) {
        self.rx.zeroize();
        self.tx.zeroize();
    }
}

impl Read for MemIo {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let avail = &self.rx[self.rx_pos..self.rx_end];
        if avail.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = avail.len().min(buf.len());
        buf[..n].copy_from_slice(&avail[..n]);
        self.rx_pos += n;
        Ok(n)
    }
}

impl Write for MemIo {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.tx.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The traffic secrets OpenSSL reports through its key log callback, per `SSL`, until our
/// record layer takes them.
#[derive(Default)]
pub(crate) struct Secrets {
    client: Option<Zeroizing<Vec<u8>>>,
    server: Option<Zeroizing<Vec<u8>>>,
}

type SecretSlot = Mutex<Secrets>;

fn secrets_index() -> Result<openssl::ex_data::Index<Ssl, SecretSlot>, TlsError> {
    static INDEX: OnceLock<Result<openssl::ex_data::Index<Ssl, SecretSlot>, String>> =
        OnceLock::new();
    ex_index(&INDEX)
}

/// The key log callback (`SSL_CTX_set_keylog_callback`): keeps the application traffic
/// secrets (`CLIENT_TRAFFIC_SECRET_0` / `SERVER_TRAFFIC_SECRET_0 <client_random> <hex>`) of
/// this `SSL`; every other line (handshake secrets) is ignored. Nothing is logged.
pub(crate) fn keylog(ssl: &SslRef, line: &str) {
    let mut parts = line.split(' ');
    let (Some(label), Some(_random), Some(hex), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return;
    };
    let client = match label {
        "CLIENT_TRAFFIC_SECRET_0" => true,
        "SERVER_TRAFFIC_SECRET_0" => false,
        _ => return,
    };
    let Some(secret) = unhex(hex) else {
        return;
    };
    let Ok(index) = secrets_index() else {
        return;
    };
    if let Some(slot) = ssl.ex_data(index)
        && let Ok(mut s) = slot.lock()
    {
        if client {
            s.client = Some(secret);
        } else {
            s.server = Some(secret);
        }
    }
}

fn unhex(hex: &str) -> Option<Zeroizing<Vec<u8>>> {
    let hex = hex.as_bytes();
    if !hex.len().is_multiple_of(2) || hex.len() > 128 {
        return None;
    }
    let digit = |c: u8| {
        char::from(c)
            .to_digit(16)
            .and_then(|d| u8::try_from(d).ok())
    };
    let mut out = Zeroizing::new(Vec::with_capacity(hex.len() / 2));
    for pair in hex.chunks_exact(2) {
        out.push(digit(pair[0])? << 4 | digit(pair[1])?);
    }
    Some(out)
}

/// A new `SslStream` over in-memory buffers, with the slot the key log callback fills.
pub(crate) fn new_stream(mut ssl: Ssl) -> Result<SslStream<MemIo>, TlsError> {
    ssl.set_ex_data(secrets_index()?, Mutex::new(Secrets::default()));
    SslStream::new(ssl, MemIo::default()).map_err(crate::setup_err)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    Server,
    Client,
}

#[derive(Debug)]
enum State {
    Handshaking,
    Established,
    Failed(String),
}

/// A per-type `SSL` ex-data slot, allocated once per process.
pub(crate) fn ex_index<T: Send + Sync + 'static>(
    cell: &'static std::sync::OnceLock<
        Result<openssl::ex_data::Index<openssl::ssl::Ssl, T>, String>,
    >,
) -> Result<openssl::ex_data::Index<openssl::ssl::Ssl, T>, TlsError> {
    cell.get_or_init(|| openssl::ssl::Ssl::new_ex_index().map_err(|e| e.to_string()))
        .clone()
        .map_err(TlsError::Setup)
}

/// `Deref`/`DerefMut` to [`TlsConn`] for a role's wrapper (`struct X { conn: TlsConn }`).
macro_rules! deref_to_conn {
    ($t:ty) => {
        impl std::ops::Deref for $t {
            type Target = $crate::conn::TlsConn;
            fn deref(&self) -> &$crate::conn::TlsConn {
                &self.conn
            }
        }
        impl std::ops::DerefMut for $t {
            fn deref_mut(&mut self) -> &mut $crate::conn::TlsConn {
                &mut self.conn
            }
        }
    };
}
pub(crate) use deref_to_conn;

/// Extra knowledge a role has about a failure (the server's callbacks record why they refused).
pub(crate) type FailureHook = fn(&openssl::ssl::SslRef) -> Option<TlsError>;
/// The identity a role negotiated (for messages).
pub(crate) type IdentityHook = fn(&openssl::ssl::SslRef) -> Option<&[u8]>;

/// One TLS session, either role. [`crate::TlsServer`] and [`crate::TlsClient`] dereference to
/// it; see the crate documentation for the calling pattern.
pub struct TlsConn {
    stream: SslStream<MemIo>,
    /// Our record layer, once the handshake of an AES-GCM suite is done (`None` during the
    /// handshake and for TLS_AES_128_CCM_SHA256, which stays on OpenSSL's).
    rec: Option<Box<RecordLayer>>,
    role: Role,
    state: State,
    /// The first bytes received, kept until the record type and version could be checked.
    sniff: Vec<u8>,
    sniff_done: bool,
    peer_closed: bool,
    local_closed: bool,
    staging: Vec<u8>,
    /// Full-size-record equivalents per sending key before a KeyUpdate (our record layer).
    key_update_records: u64,
    key_update_policy: KeyUpdatePolicy,
    /// The last `read_plain` stopped at its budget (see [`TlsConn::read_paused`]).
    paused: bool,
    failure_hook: FailureHook,
    identity_hook: IdentityHook,
}

/// Counters of our record layer (see [`TlsConn::record_stats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordStats {
    /// The sequence number of the next record we send (restarts at 0 after each KeyUpdate).
    pub send_seq: u64,
    /// The sequence number of the next record we expect.
    pub recv_seq: u64,
    /// KeyUpdates we sent (ours at the record threshold, or answers to the peer's requests).
    pub key_updates_sent: u64,
    /// KeyUpdates the peer sent.
    pub key_updates_received: u64,
    /// Times the sending key reached the KeyUpdate threshold and was kept, because the peer
    /// has not shown it takes a KeyUpdate ([`crate::KeyUpdatePolicy::Peer`]).
    pub key_updates_deferred: u64,
}

impl std::fmt::Debug for TlsConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConn")
            .field("role", &self.role)
            .field("state", &self.state)
            .field("cipher", &self.cipher_suite())
            .field("own_record_layer", &self.rec.is_some())
            .field("pending_cipher", &self.pending_cipher().len())
            .finish_non_exhaustive()
    }
}

impl TlsConn {
    pub(crate) fn new(
        stream: SslStream<MemIo>,
        role: Role,
        failure_hook: FailureHook,
        identity_hook: IdentityHook,
    ) -> TlsConn {
        TlsConn {
            stream,
            rec: None,
            role,
            state: State::Handshaking,
            sniff: Vec::with_capacity(5),
            sniff_done: false,
            peer_closed: false,
            local_closed: false,
            staging: Vec::new(),
            key_update_records: crate::record::DEFAULT_KEY_UPDATE_RECORDS,
            key_update_policy: KeyUpdatePolicy::Peer,
            paused: false,
            failure_hook,
            identity_hook,
        }
    }

    /// Runs the handshake as far as the buffered input allows (the client's first call
    /// produces the ClientHello); when it completes, our record layer takes over.
    pub(crate) fn drive(&mut self) -> Result<(), TlsError> {
        if !matches!(self.state, State::Handshaking) {
            return Ok(());
        }
        match self.stream.do_handshake() {
            Ok(()) => {
                self.state = State::Established;
                self.take_over_records()
            }
            Err(e) if e.code() == ErrorCode::WANT_READ => Ok(()),
            Err(e) => Err(self.fail_with(&e, true)),
        }
    }

    /// After the handshake: the AES-GCM suites move to our record layer with the traffic
    /// secrets OpenSSL logged. OpenSSL ran without read-ahead, so every byte after the peer's
    /// Finished is still unread in our buffer, and it has written all it had (its Finished)
    /// into `tx`, ahead of our records.
    fn take_over_records(&mut self) -> Result<(), TlsError> {
        let ssl = self.stream.ssl();
        let Some(suite) = ssl
            .current_cipher()
            .and_then(|c| c.standard_name())
            .and_then(Suite::from_name)
        else {
            // TLS_AES_128_CCM_SHA256: OpenSSL keeps the record layer.
            self.discard_secrets();
            return Ok(());
        };
        if crate::ffi::has_pending(ssl) {
            return Err(self.fail(TlsError::Record(
                "internal: OpenSSL buffered data past the handshake".into(),
            )));
        }
        let secrets = secrets_index()
            .ok()
            .and_then(|i| ssl.ex_data(i))
            .and_then(|slot| {
                slot.lock()
                    .ok()
                    .map(|mut s| (s.client.take(), s.server.take()))
            });
        let Some((Some(client), Some(server))) = secrets else {
            return Err(self.fail(TlsError::Setup(
                "OpenSSL did not report the traffic secrets (key log callback)".into(),
            )));
        };
        let (tx, rx) = match self.role {
            Role::Client => (client, server),
            Role::Server => (server, client),
        };
        match RecordLayer::new(suite, tx, rx, self.role == Role::Client) {
            Ok(mut rec) => {
                rec.set_key_update_records(self.key_update_records);
                rec.set_key_update_policy(self.key_update_policy);
                self.rec = Some(Box::new(rec));
                Ok(())
            }
            Err(e) => Err(self.fail(e)),
        }
    }

    fn discard_secrets(&mut self) {
        if let Ok(i) = secrets_index()
            && let Some(slot) = self.stream.ssl().ex_data(i)
            && let Ok(mut s) = slot.lock()
        {
            *s = Secrets::default();
        }
    }

    /// Takes ciphertext received from the peer. All of it is buffered (the return value is
    /// always `cipher.len()`); records split across calls are reassembled. During the
    /// handshake this advances it, which may queue handshake messages in
    /// [`Self::pending_cipher`]. Once [`Self::handshake_done`], call [`Self::read_plain`] until
    /// it returns 0. [`Self::cipher_space`] + [`Self::cipher_filled`] do the same without
    /// the copy.
    pub fn feed(&mut self, cipher: &[u8]) -> Result<usize, TlsError> {
        self.check_failed()?;
        if cipher.is_empty() || self.peer_closed {
            // After close_notify input is ignored, not buffered.
            return Ok(cipher.len());
        }
        if !self.sniff_done {
            self.sniff_first_bytes(cipher)?;
        }
        self.stream.get_mut().push(cipher);
        self.drive()?;
        Ok(cipher.len())
    }

    /// Room in the session's receive buffer (at least 64 KiB) for reading ciphertext from the
    /// socket straight into it; report what was read with [`Self::cipher_filled`].
    pub fn cipher_space(&mut self) -> &mut [u8] {
        self.stream.get_mut().space(MIN_CIPHER_SPACE)
    }

    /// `n` bytes were written at the start of [`Self::cipher_space`]: like [`Self::feed`]
    /// of those bytes, without the copy.
    pub fn cipher_filled(&mut self, n: usize) -> Result<(), TlsError> {
        self.check_failed()?;
        if n == 0 || self.peer_closed {
            // After close_notify input is ignored: the same space is offered again.
            return Ok(());
        }
        if !self.sniff_done {
            let io = self.stream.get_ref();
            let end = (io.rx_end + n).min(io.rx.len());
            let first = io.rx[io.rx_end..end].to_vec();
            self.sniff_first_bytes(&first)?;
        }
        self.stream.get_mut().filled(n);
        self.drive()
    }

    /// Checks that the connection starts like TLS: record type 22 (handshake) or 21 (alert),
    /// then major version 3. A byte 0..=9 first is a plaintext NVMe/TCP PDU type.
    fn sniff_first_bytes(&mut self, cipher: &[u8]) -> Result<(), TlsError> {
        let need = 2 - self.sniff.len().min(2);
        self.sniff
            .extend_from_slice(&cipher[..need.min(cipher.len())]);
        let first = self.sniff[0];
        let bad = if first <= 0x09 && first != 0x15 && first != 0x16 {
            Some(TlsError::PlaintextNvmeTcp {
                pdu_type: first,
                from_client: self.role == Role::Server,
            })
        } else if !(first == 0x16 || (first == 0x15 && self.role == Role::Client))
            || self.sniff.get(1).is_some_and(|&b| b != 0x03)
        {
            let mut shown = self.sniff.clone();
            shown.extend(cipher.iter().skip(need).take(5 - shown.len().min(5)));
            Some(TlsError::NotTls { first: shown })
        } else {
            None
        };
        if let Some(err) = bad {
            return Err(self.fail(err));
        }
        self.sniff_done = self.sniff.len() >= 2;
        Ok(())
    }

    /// True once the handshake completed: application data may flow.
    pub fn handshake_done(&self) -> bool {
        matches!(self.state, State::Established)
    }

    /// The negotiated cipher suite's standard name (e.g. `TLS_AES_128_GCM_SHA256`).
    pub fn cipher_suite(&self) -> Option<&'static str> {
        if !self.handshake_done() {
            return None;
        }
        self.stream
            .ssl()
            .current_cipher()
            .and_then(|c| c.standard_name())
    }

    /// True when application records go through our record layer (the AES-GCM suites after
    /// the handshake), false while handshaking and for TLS_AES_128_CCM_SHA256 (OpenSSL's).
    pub fn own_record_layer(&self) -> bool {
        self.rec.is_some()
    }

    /// Our record layer's sequence numbers and KeyUpdate counts (`None` when OpenSSL runs
    /// the records, see [`Self::own_record_layer`]).
    pub fn record_stats(&self) -> Option<RecordStats> {
        self.rec.as_ref().map(|r| {
            let (send_seq, recv_seq) = r.seqs();
            RecordStats {
                send_seq,
                recv_seq,
                key_updates_sent: r.updates_sent,
                key_updates_received: r.updates_received,
                key_updates_deferred: r.updates_deferred,
            }
        })
    }

    /// How much one sending key protects before a KeyUpdate is due, in full-size-record
    /// equivalents (16 KiB of plaintext each, counted in AES blocks: a small record costs a
    /// fraction of one; RFC 8446 §5.5). Default [`crate::DEFAULT_KEY_UPDATE_RECORDS`], below
    /// AES-GCM's limit; tests use tiny values. At least 1. Whether the KeyUpdate is then sent
    /// depends on [`Self::set_key_update_policy`].
    pub fn set_key_update_interval(&mut self, records: u64) {
        self.key_update_records = records.max(1);
        if let Some(r) = self.rec.as_mut() {
            r.set_key_update_records(records);
        }
    }

    /// Whom we send our own KeyUpdate to at the threshold: [`KeyUpdatePolicy::Peer`] (the
    /// default) only to a peer that has sent one itself — past the threshold the key is kept
    /// and [`RecordStats::key_updates_deferred`] counts it, as the Linux target keeps its key
    /// — or [`KeyUpdatePolicy::Always`]. KeyUpdates the peer asks for are always answered.
    pub fn set_key_update_policy(&mut self, policy: KeyUpdatePolicy) {
        self.key_update_policy = policy;
        if let Some(r) = self.rec.as_mut() {
            r.set_key_update_policy(policy);
        }
    }

    /// True when the last [`Self::read_plain`] (or [`Self::read_plain_into`]) returned
    /// early to bound its work: it opened [`MAX_EMPTY_RECORDS_PER_CALL`] records without
    /// plaintext, or [`MAX_ANSWERS_QUEUED`] KeyUpdate answers wait in
    /// [`Self::pending_cipher`]. More input may be buffered: stop reading the socket, send
    /// what is pending, let other work run, then call `read_plain` again.
    pub fn read_paused(&self) -> bool {
        self.paused
    }

    /// Testing only: the seal after `n` more succeeds fails, as a sealing error would (e.g.
    /// sequence-number exhaustion). Our record layer only.
    #[doc(hidden)]
    pub fn fail_seal_after(&mut self, n: u32) {
        if let Some(r) = self.rec.as_mut() {
            r.fail_seal_in = Some(n);
        }
    }

    /// Sends a KeyUpdate now and switches our sending key; with `request_peer` the peer must
    /// answer with its own. Our record layer only (an error for the CCM suite).
    pub fn key_update(&mut self, request_peer: bool) -> Result<(), TlsError> {
        self.check_failed()?;
        if self.local_closed {
            return Err(TlsError::Closed);
        }
        let Some(rec) = self.rec.as_mut() else {
            return Err(TlsError::Setup(
                "KeyUpdate is available with the AES-GCM suites only".into(),
            ));
        };
        let io = self.stream.get_mut();
        io.compact_tx();
        match rec.send_key_update(&mut io.tx, request_peer) {
            Ok(()) => Ok(()),
            Err(e) => Err(self.fail(e)),
        }
    }

    /// Testing and fuzzing only: seals `inner` verbatim as one record's TLSInnerPlaintext
    /// (content, content type, padding: any bytes, even malformed) with our sending key, so
    /// that a peer's record decoder can be fed hostile plaintext under valid encryption. Our
    /// record layer only; `inner` of at most 16 KiB + 256 − 16 bytes.
    #[doc(hidden)]
    pub fn write_raw_inner_plaintext(&mut self, inner: &[u8]) -> Result<(), TlsError> {
        self.check_failed()?;
        let Some(rec) = self.rec.as_mut() else {
            return Err(TlsError::NotEstablished);
        };
        if inner.len() + crate::aead::TAG_LEN > crate::record::MAX_CIPHERTEXT {
            return Err(TlsError::Record("inner plaintext too long".into()));
        }
        let io = self.stream.get_mut();
        io.compact_tx();
        rec.seal_raw_inner(&mut io.tx, inner)
    }

    /// True after the peer's close_notify: no more plaintext will come.
    pub fn peer_closed(&self) -> bool {
        self.peer_closed
    }

    /// Ciphertext received but not yet processed, plus decrypted bytes not yet read (for
    /// backpressure: stop reading the socket while this is large and [`Self::read_plain`] is
    /// not being called).
    pub fn buffered_cipher(&self) -> usize {
        let io = self.stream.get_ref();
        io.rx_end - io.rx_pos + io.plain.len()
    }

    /// Decrypts into `out`; returns the number of plaintext bytes, 0 when no complete record
    /// is buffered (or before the handshake, or after the peer's close_notify — see
    /// [`Self::peer_closed`]). Post-handshake messages (KeyUpdate) are handled inside and may
    /// queue ciphertext: flush [`Self::pending_cipher`] afterwards.
    pub fn read_plain(&mut self, out: &mut [u8]) -> Result<usize, TlsError> {
        self.check_failed()?;
        self.paused = false;
        if !self.handshake_done() || out.is_empty() {
            return Ok(0);
        }
        if self.rec.is_some() {
            let mut empty = 0;
            loop {
                let io = self.stream.get_mut();
                if !io.plain.is_empty() {
                    let n = io.plain.len().min(out.len());
                    let from = io.plain.start;
                    out[..n].copy_from_slice(&io.rx[from..from + n]);
                    io.plain.start += n;
                    return Ok(n);
                }
                if self.peer_closed || !self.open_budgeted(&mut empty)? {
                    return Ok(0);
                }
            }
        }
        if self.peer_closed {
            return Ok(0);
        }
        match self.stream.ssl_read(out) {
            Ok(n) => Ok(n),
            Err(e) => self.read_error(e),
        }
    }

    /// [`Self::open_record`] within the per-call budget: Ok(false) (and `paused`) once
    /// `empty` plaintext-free records were opened in this call, or too many KeyUpdate
    /// answers wait unsent. Two comparisons per record.
    fn open_budgeted(&mut self, empty: &mut usize) -> Result<bool, TlsError> {
        let answers = self.rec.as_ref().map_or(0, |r| r.answers_queued);
        if *empty >= MAX_EMPTY_RECORDS_PER_CALL || answers >= MAX_ANSWERS_QUEUED {
            self.paused = true;
            return Ok(false);
        }
        let opened = self.open_record()?;
        if opened && self.stream.get_ref().plain.is_empty() {
            *empty += 1;
        }
        Ok(opened)
    }

    /// Opens the next buffered record (our record layer). Ok(true): something was processed
    /// (plaintext may be waiting in `plain`); Ok(false): no whole record, or the peer closed.
    fn open_record(&mut self) -> Result<bool, TlsError> {
        let Some(rec) = self.rec.as_mut() else {
            return Ok(false);
        };
        let io = self.stream.get_mut();
        let mut pos = io.rx_pos;
        let end = io.rx_end;
        let r = rec.open_next(&mut io.rx[..end], &mut pos, &mut io.tx);
        io.rx_pos = pos;
        match r {
            Ok(Opened::NeedMore) => Ok(false),
            Ok(Opened::Data(range)) => {
                io.plain = range;
                Ok(true)
            }
            Ok(Opened::Control) => Ok(true),
            Ok(Opened::Closed) => {
                self.peer_closed = true;
                io.discard_input();
                Ok(false)
            }
            Err(v) => {
                if let Some(alert) = v.alert
                    && !self.local_closed
                {
                    let _ = rec.seal_alert(&mut io.tx, alert);
                }
                Err(self.fail(v.error))
            }
        }
    }

    /// Decrypts everything buffered, appending it to `out`; returns how many bytes were added.
    pub fn read_plain_into(&mut self, out: &mut Vec<u8>) -> Result<usize, TlsError> {
        self.check_failed()?;
        let start = out.len();
        self.paused = false;
        if self.rec.is_some() {
            let mut empty = 0;
            while self.handshake_done() {
                let io = self.stream.get_mut();
                if !io.plain.is_empty() {
                    out.extend_from_slice(&io.rx[io.plain.clone()]);
                    io.plain = 0..0;
                }
                if self.peer_closed || !self.open_budgeted(&mut empty)? {
                    break;
                }
            }
            return Ok(out.len() - start);
        }
        while self.handshake_done() && !self.peer_closed {
            out.reserve(MAX_RECORD_PLAINTEXT);
            let spare: &mut [MaybeUninit<u8>] = out.spare_capacity_mut();
            match self.stream.ssl_read_uninit(spare) {
                Ok(0) => break,
                Ok(n) => {
                    let len = out.len() + n;
                    // SAFETY: `ssl_read_uninit` initialized the first `n` bytes of the spare
                    // capacity, and `n` is at most its length.
                    unsafe { out.set_len(len) };
                }
                Err(e) => {
                    self.read_error(e)?;
                    break;
                }
            }
        }
        Ok(out.len() - start)
    }

    fn read_error(&mut self, e: openssl::ssl::Error) -> Result<usize, TlsError> {
        match e.code() {
            ErrorCode::WANT_READ => Ok(0),
            ErrorCode::ZERO_RETURN => {
                self.peer_closed = true;
                self.stream.get_mut().discard_input();
                Ok(0)
            }
            _ => Err(self.fail_with(&e, false)),
        }
    }

    /// Encrypts a batch of plaintext buffers (e.g. every PDU a reactor turn produced) into
    /// full-size records: the buffers are gathered into records of up to 16 KiB, so many small
    /// PDUs share one record; with our record layer each record is sealed in place in the
    /// send buffer (one copy of the plaintext, no staging). The ciphertext is appended to
    /// [`Self::pending_cipher`]. Returns the plaintext length.
    pub fn write_plain(&mut self, bufs: &[&[u8]]) -> Result<usize, TlsError> {
        self.check_failed()?;
        // TLS 1.3 allows half-close: after the peer's close_notify we may still send; only our
        // own close ends writing.
        if self.local_closed {
            return Err(TlsError::Closed);
        }
        if !self.handshake_done() {
            return Err(TlsError::NotEstablished);
        }
        if let Some(rec) = self.rec.as_mut() {
            let io = self.stream.get_mut();
            io.compact_tx();
            return match rec.seal_stream(&mut io.tx, bufs) {
                Ok(n) => Ok(n),
                Err(e) => {
                    let _ = rec.seal_alert(&mut io.tx, ALERT_INTERNAL_ERROR);
                    Err(self.fail(e))
                }
            };
        }
        let mut staging = std::mem::take(&mut self.staging);
        staging.clear();
        let mut total = 0usize;
        let result = (|| {
            for buf in bufs {
                let mut rest: &[u8] = buf;
                total += rest.len();
                while !rest.is_empty() {
                    if staging.is_empty() && rest.len() >= MAX_RECORD_PLAINTEXT {
                        let whole = rest.len() - rest.len() % MAX_RECORD_PLAINTEXT;
                        self.encrypt(&rest[..whole])?;
                        rest = &rest[whole..];
                        continue;
                    }
                    let take = (MAX_RECORD_PLAINTEXT - staging.len()).min(rest.len());
                    staging.extend_from_slice(&rest[..take]);
                    rest = &rest[take..];
                    if staging.len() == MAX_RECORD_PLAINTEXT {
                        self.encrypt(&staging)?;
                        staging.clear();
                    }
                }
            }
            if !staging.is_empty() {
                self.encrypt(&staging)?;
                staging.clear();
            }
            Ok(total)
        })();
        self.staging = staging;
        result
    }

    fn encrypt(&mut self, mut plain: &[u8]) -> Result<(), TlsError> {
        while !plain.is_empty() {
            match self.stream.ssl_write(plain) {
                Ok(n) => plain = &plain[n.min(plain.len())..],
                Err(e) => return Err(self.fail_with(&e, false)),
            }
        }
        Ok(())
    }

    /// Ciphertext waiting to be sent to the peer (write it with `writev`/`send`, then
    /// [`Self::consume_cipher`] what was accepted).
    pub fn pending_cipher(&self) -> &[u8] {
        let io = self.stream.get_ref();
        &io.tx[io.tx_pos..]
    }

    /// Marks `n` bytes of [`Self::pending_cipher`] as sent.
    pub fn consume_cipher(&mut self, n: usize) {
        let io = self.stream.get_mut();
        io.tx_pos = (io.tx_pos + n).min(io.tx.len());
        if io.tx_pos == io.tx.len() {
            io.tx.clear();
            io.tx_pos = 0;
            if let Some(r) = self.rec.as_mut() {
                r.answers_queued = 0;
            }
        }
    }

    /// Moves all pending ciphertext out (convenience for tests and blocking adaptors).
    pub fn take_cipher(&mut self) -> Vec<u8> {
        let out = self.pending_cipher().to_vec();
        let n = out.len();
        self.consume_cipher(n);
        out
    }

    /// Queues our close_notify alert in [`Self::pending_cipher`]; no more plaintext can be
    /// written afterwards. Reading continues until the peer's close_notify.
    pub fn close_notify(&mut self) -> Result<(), TlsError> {
        self.check_failed()?;
        if self.local_closed {
            return Ok(());
        }
        self.local_closed = true;
        if !self.handshake_done() {
            // Nothing protected was exchanged; closing the socket says enough.
            return Ok(());
        }
        if let Some(rec) = self.rec.as_mut() {
            let io = self.stream.get_mut();
            return match rec.seal_alert(&mut io.tx, ALERT_CLOSE_NOTIFY) {
                Ok(()) => {
                    rec.closed_tx = true;
                    Ok(())
                }
                Err(e) => Err(self.fail(e)),
            };
        }
        match self.stream.shutdown() {
            Ok(_) => Ok(()),
            Err(e) if e.code() == ErrorCode::WANT_READ || e.code() == ErrorCode::ZERO_RETURN => {
                Ok(())
            }
            Err(e) => Err(self.fail_with(&e, false)),
        }
    }

    fn check_failed(&self) -> Result<(), TlsError> {
        match &self.state {
            State::Failed(msg) => Err(TlsError::Failed(msg.clone())),
            State::Handshaking | State::Established => Ok(()),
        }
    }

    pub(crate) fn ssl(&self) -> &openssl::ssl::SslRef {
        self.stream.ssl()
    }

    fn fail(&mut self, err: TlsError) -> TlsError {
        self.state = State::Failed(err.to_string());
        err
    }

    fn fail_with(&mut self, e: &openssl::ssl::Error, handshake: bool) -> TlsError {
        let err = self.classify(e, handshake);
        self.fail(err)
    }

    /// Turns OpenSSL's error into the most specific [`TlsError`].
    fn classify(&self, e: &openssl::ssl::Error, handshake: bool) -> TlsError {
        if let Some(recorded) = (self.failure_hook)(self.stream.ssl()) {
            return recorded;
        }
        let reasons: Vec<String> = e
            .ssl_error()
            .map(|stack| {
                stack
                    .errors()
                    .iter()
                    .map(|er| er.reason().unwrap_or("unknown reason").to_owned())
                    .collect()
            })
            .unwrap_or_default();
        let identity = || printable((self.identity_hook)(self.stream.ssl()).unwrap_or(b""));
        for r in &reasons {
            if r.contains("binder does not verify") {
                return TlsError::WrongPsk {
                    identity: identity(),
                };
            }
            if let Some(idx) = r.find("alert ") {
                let alert = r[idx + "alert ".len()..].to_owned();
                let hint = alert_hint(&alert, handshake, self.role);
                return TlsError::PeerAlert { alert, hint };
            }
        }
        let detail = if reasons.is_empty() {
            match e.io_error() {
                Some(io) => io.to_string(),
                None => format!("OpenSSL error code {:?}", e.code()),
            }
        } else {
            reasons.join("; ")
        };
        if handshake {
            TlsError::Handshake(detail)
        } else {
            TlsError::Record(detail)
        }
    }
}

/// What a peer's alert usually means on an NVMe/TCP connection.
fn alert_hint(alert: &str, handshake: bool, role: Role) -> &'static str {
    match (alert, handshake, role) {
        ("decrypt error", true, Role::Client) => {
            " (the target's PSK for our identity differs from ours: wrong key, or the other \
             retained-PSK derivation)"
        }
        // OpenSSL 3.0 targets answer a binder that does not verify with illegal_parameter.
        ("illegal parameter", true, Role::Client) => {
            " (an OpenSSL-based target sends this when our PSK binder does not verify: wrong \
             key, or the other retained-PSK derivation)"
        }
        ("decrypt error", true, Role::Server) => " (the client could not verify our Finished)",
        ("handshake failure", true, Role::Client) => {
            " (the target knows no PSK for our identity, or shares no cipher suite/group)"
        }
        ("unknown psk identity", true, _) => " (the target has no key for our identity)",
        ("bad record mac", false, _) => " (the peer could not decrypt our data)",
        _ => "",
    }
}
