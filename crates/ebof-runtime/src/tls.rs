//! NVMe/TCP over TLS 1.3 (TP 8011) in the reactor.
//!
//! The machine's kernel has no kTLS, so records are encrypted and decrypted in userspace by a
//! TLS library behind [`TlsAcceptor`] / [`TlsSession`] (the `ebof` binary wires in the
//! `nvmf-tls` crate, OpenSSL with external PSKs). The reactor keeps its shape:
//!
//! - **in**: what the socket holds is read into a per-connection ciphertext buffer, fed to the
//!   session, and the plaintext goes into the connection's receive buffer, where the PDU
//!   decoder finds it as if it had come from the socket;
//! - **out**: the whole output of a round (every PDU header, and the data of reads, including
//!   the zero-copy segments that point into RAM namespaces) is handed to the session in one
//!   call, which encrypts it into full records — a batch, not a record per PDU — and the
//!   ciphertext goes out with `send`.
//!
//! A listener's mode decides what the first bytes may be ([`nvmf_target::ListenerTls`]): on a
//! TLS-required listener a connection must start with a TLS handshake record (a plaintext
//! ICReq is refused, with a log line that says so); on an optional one the first byte decides
//! (16h: TLS handshake; 00h: ICReq); on a plain one nothing changes at all.
//!
//! Once the handshake is done the session names the PSK identity's host and subsystem NQNs,
//! and the queue refuses a Connect that names others ([`nvmf_target::Queue::set_tls_peer`]).

use std::fmt;

/// A TLS failure, in words fit for the log (never key material).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsError(pub String);

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The server side of one TLS connection, sans-IO: ciphertext in and out, plaintext in and
/// out.
pub trait TlsSession: Send {
    /// Ciphertext received from the socket. A fatal error (bad record, failed handshake,
    /// unknown PSK identity) may leave an alert in [`TlsSession::pending_cipher`] to send
    /// before closing.
    fn feed(&mut self, cipher: &[u8]) -> Result<(), TlsError>;
    /// Room in the session's own receive buffer to read ciphertext from the socket straight
    /// into (then [`TlsSession::cipher_filled`]): saves the copy [`TlsSession::feed`] makes.
    /// `None` (the default): the reactor reads into its own buffer and calls `feed`.
    fn cipher_space(&mut self) -> Option<&mut [u8]> {
        None
    }
    /// `n` bytes were read into the start of [`TlsSession::cipher_space`]; like `feed` of
    /// them.
    fn cipher_filled(&mut self, n: usize) -> Result<(), TlsError> {
        let _ = n;
        Err(TlsError(
            "internal: cipher_filled on a session without cipher_space".into(),
        ))
    }
    /// Decrypted bytes, as many as fit `dst`; 0 when none are ready.
    fn read_plain(&mut self, dst: &mut [u8]) -> Result<usize, TlsError>;
    /// Encrypt `bufs` (in order, as one stream) into records.
    fn write_plain(&mut self, bufs: &[&[u8]]) -> Result<(), TlsError>;
    /// Ciphertext to send (handshake messages, records, alerts).
    fn pending_cipher(&self) -> &[u8];
    /// `n` bytes of [`TlsSession::pending_cipher`] were sent.
    fn consume_cipher(&mut self, n: usize);
    /// The handshake has completed.
    fn handshake_done(&self) -> bool;
    /// The host NQN and subsystem NQN of the PSK the handshake used (once done).
    fn peer(&self) -> Option<(String, String)>;
    /// The peer sent close_notify: no more input will be taken (the session discards it);
    /// the reactor flushes what is left, answers with [`TlsSession::close_notify`] and
    /// closes the connection.
    fn peer_closed(&self) -> bool {
        false
    }
    /// The last [`TlsSession::read_plain`] returned early to bound its work (records without
    /// plaintext, KeyUpdate answers not yet sent): the reactor stops reading this socket for
    /// the turn, sends what is pending, serves its other connections, and comes back.
    fn read_paused(&self) -> bool {
        false
    }
    /// Queue our close_notify in [`TlsSession::pending_cipher`] (before the connection is
    /// closed; no more plaintext is written afterwards). Best effort: a failed session sends
    /// nothing.
    fn close_notify(&mut self) {}
}

/// Makes the server side of a new TLS connection.
pub trait TlsAcceptor: Send + Sync {
    /// A new server-side session for one connection, before any byte is exchanged.
    fn accept(&self) -> Result<Box<dyn TlsSession>, TlsError>;
}

impl fmt::Debug for dyn TlsAcceptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TlsAcceptor")
    }
}

/// First byte of a TLS handshake record.
pub const TLS_HANDSHAKE: u8 = 0x16;
/// First byte of an NVMe/TCP ICReq PDU.
pub const NVME_TCP_ICREQ: u8 = 0x00;

/// A connection's TLS state in the reactor.
pub(crate) enum ConnTls {
    /// Plain NVMe/TCP (a listener without TLS, or an optional one whose host began with an
    /// ICReq).
    Plain,
    /// TLS listener, nothing received yet: the first byte decides.
    Sniff { required: bool },
    /// A TLS session; `peer_told` once the queue knows the PSK's host and subsystem.
    On {
        session: Box<dyn TlsSession>,
        peer_told: bool,
    },
}

impl ConnTls {
    /// The state for a connection accepted on a listener with `mode`.
    pub(crate) fn for_listener(mode: nvmf_target::ListenerTls) -> ConnTls {
        match mode {
            nvmf_target::ListenerTls::Off => ConnTls::Plain,
            nvmf_target::ListenerTls::Optional => ConnTls::Sniff { required: false },
            nvmf_target::ListenerTls::Required => ConnTls::Sniff { required: true },
        }
    }

    pub(crate) fn is_plain(&self) -> bool {
        matches!(self, ConnTls::Plain)
    }

    /// Ciphertext waiting to be sent.
    pub(crate) fn has_pending(&self) -> bool {
        match self {
            ConnTls::On { session, .. } => !session.pending_cipher().is_empty(),
            _ => false,
        }
    }
}

/// What the first bytes of a connection on a TLS listener mean.
pub(crate) fn sniff(
    first: u8,
    required: bool,
    acceptor: Option<&std::sync::Arc<dyn TlsAcceptor>>,
) -> Result<ConnTls, TlsError> {
    if first == TLS_HANDSHAKE {
        let Some(a) = acceptor else {
            return Err(TlsError(
                "a TLS ClientHello, but no TLS keys are configured".into(),
            ));
        };
        return Ok(ConnTls::On {
            session: a.accept()?,
            peer_told: false,
        });
    }
    if required {
        return Err(TlsError(if first == NVME_TCP_ICREQ {
            "a plaintext ICReq on a listener that requires TLS".into()
        } else {
            format!("first byte {first:#04x} is not a TLS handshake record (TLS is required)")
        }));
    }
    Ok(ConnTls::Plain)
}
