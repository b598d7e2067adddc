//! The sans-IO TLS session shared by both roles: OpenSSL's `SslStream` over an in-memory
//! transport. Ciphertext goes in with [`TlsConn::feed`] and comes out of
//! [`TlsConn::pending_cipher`]; plaintext goes in with [`TlsConn::write_plain`] and comes out
//! of [`TlsConn::read_plain`].

use std::io::{self, Read, Write};
use std::mem::MaybeUninit;

use openssl::ssl::{ErrorCode, SslStream};

use crate::error::{TlsError, printable};

/// The largest plaintext a TLS record carries (RFC 8446 §5.1; also what the Linux host's
/// `record_size_limit` of 0x4001 allows: 16384 bytes + the inner content type).
pub const MAX_RECORD_PLAINTEXT: usize = 16384;

/// Past this much already-consumed input the receive buffer is compacted.
const RX_COMPACT_AT: usize = 64 * 1024;

/// Bytes shuttled between the reactor and OpenSSL. OpenSSL reads ciphertext from `rx` (a read
/// past the end is `WouldBlock`: "need more bytes", a normal state) and writes ciphertext to
/// `tx`, which never blocks.
#[derive(Default)]
pub(crate) struct MemIo {
    rx: Vec<u8>,
    rx_pos: usize,
    tx: Vec<u8>,
    tx_pos: usize,
}

impl MemIo {
    fn push(&mut self, bytes: &[u8]) {
        if self.rx_pos == self.rx.len() {
            self.rx.clear();
            self.rx_pos = 0;
        } else if self.rx_pos >= RX_COMPACT_AT {
            self.rx.drain(..self.rx_pos);
            self.rx_pos = 0;
        }
        self.rx.extend_from_slice(bytes);
    }
}

impl Read for MemIo {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let avail = &self.rx[self.rx_pos..];
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
    role: Role,
    state: State,
    /// The first bytes received, kept until the record type and version could be checked.
    sniff: Vec<u8>,
    sniff_done: bool,
    peer_closed: bool,
    local_closed: bool,
    staging: Vec<u8>,
    failure_hook: FailureHook,
    identity_hook: IdentityHook,
}

impl std::fmt::Debug for TlsConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConn")
            .field("role", &self.role)
            .field("state", &self.state)
            .field("cipher", &self.cipher_suite())
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
            role,
            state: State::Handshaking,
            sniff: Vec::with_capacity(5),
            sniff_done: false,
            peer_closed: false,
            local_closed: false,
            staging: Vec::new(),
            failure_hook,
            identity_hook,
        }
    }

    /// Runs the handshake as far as the buffered input allows (the client's first call
    /// produces the ClientHello).
    pub(crate) fn drive(&mut self) -> Result<(), TlsError> {
        if !matches!(self.state, State::Handshaking) {
            return Ok(());
        }
        match self.stream.do_handshake() {
            Ok(()) => {
                self.state = State::Established;
                Ok(())
            }
            Err(e) if e.code() == ErrorCode::WANT_READ => Ok(()),
            Err(e) => Err(self.fail_with(&e, true)),
        }
    }

    /// Takes ciphertext received from the peer. All of it is buffered (the return value is
    /// always `cipher.len()`); records split across calls are reassembled. During the
    /// handshake this advances it, which may queue handshake messages in
    /// [`Self::pending_cipher`]. Once [`Self::handshake_done`], call [`Self::read_plain`] until
    /// it returns 0.
    pub fn feed(&mut self, cipher: &[u8]) -> Result<usize, TlsError> {
        self.check_failed()?;
        if cipher.is_empty() {
            return Ok(0);
        }
        if !self.sniff_done {
            self.sniff_first_bytes(cipher)?;
        }
        self.stream.get_mut().push(cipher);
        self.drive()?;
        Ok(cipher.len())
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

    /// True after the peer's close_notify: no more plaintext will come.
    pub fn peer_closed(&self) -> bool {
        self.peer_closed
    }

    /// Ciphertext received but not yet processed by OpenSSL (for backpressure: stop reading
    /// the socket while this is large and [`Self::read_plain`] is not being called).
    pub fn buffered_cipher(&self) -> usize {
        let io = self.stream.get_ref();
        io.rx.len() - io.rx_pos
    }

    /// Decrypts into `out`; returns the number of plaintext bytes, 0 when no complete record
    /// is buffered (or before the handshake, or after the peer's close_notify — see
    /// [`Self::peer_closed`]). Post-handshake messages (KeyUpdate) are handled inside and may
    /// queue ciphertext: flush [`Self::pending_cipher`] afterwards.
    pub fn read_plain(&mut self, out: &mut [u8]) -> Result<usize, TlsError> {
        self.check_failed()?;
        if !self.handshake_done() || self.peer_closed || out.is_empty() {
            return Ok(0);
        }
        match self.stream.ssl_read(out) {
            Ok(n) => Ok(n),
            Err(e) => self.read_error(e),
        }
    }

    /// Decrypts everything buffered, appending it to `out`; returns how many bytes were added.
    pub fn read_plain_into(&mut self, out: &mut Vec<u8>) -> Result<usize, TlsError> {
        self.check_failed()?;
        let start = out.len();
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
                Ok(0)
            }
            _ => Err(self.fail_with(&e, false)),
        }
    }

    /// Encrypts a batch of plaintext buffers (e.g. every PDU a reactor turn produced) into
    /// full-size records: the buffers are gathered into records of up to 16 KiB, so many small
    /// PDUs share one record and a large data buffer is encrypted in place without a copy.
    /// The ciphertext is appended to [`Self::pending_cipher`]. Returns the plaintext length.
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
