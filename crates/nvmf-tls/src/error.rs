//! The TLS engine's error type: one variant per cause an operator must be able to tell apart.

/// Why a TLS session failed. Messages name the cause (and the peer's identity where known)
/// but never key material. After any error except [`TlsError::NotEstablished`] the session is
/// dead: flush [`crate::TlsConn::pending_cipher`] (it may hold the alert telling the peer why)
/// and close the socket.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// The peer sent a plaintext NVMe/TCP PDU where a TLS record was expected.
    #[error(
        "plaintext NVMe/TCP PDU (type 0x{pdu_type:02x}{}) on a TLS connection: the {} does not use TLS",
        if *pdu_type == 0 { ", ICReq" } else { "" },
        if *from_client { "host (nvme connect without --tls?)" } else { "target port" }
    )]
    PlaintextNvmeTcp {
        /// The first byte received (the NVMe/TCP PDU type).
        pdu_type: u8,
        /// True when the server saw it (the host is not using TLS).
        from_client: bool,
    },
    /// The first bytes are neither TLS nor NVMe/TCP.
    #[error(
        "not TLS: the connection starts with {first:02x?}, not a TLS handshake record (16 03 ..)"
    )]
    NotTls {
        /// Up to the first five bytes received.
        first: Vec<u8>,
    },
    /// The client's hello carries no `pre_shared_key` extension (NVMe/TCP TLS is PSK-only).
    #[error(
        "the client offered no PSK: NVMe/TCP TLS needs a PSK identity (no certificates are used)"
    )]
    NoPskOffered,
    /// The client offers only `psk_ke` (PSK without (EC)DHE); NVMe/TCP requires `psk_dhe_ke`.
    #[error("the client offers PSK without (EC)DHE only; NVMe/TCP requires the psk_dhe_ke mode")]
    NoDheKeyExchange,
    /// None of the client's PSK identities is known here.
    #[error("unknown PSK identity {identity:?}: {reason}")]
    UnknownIdentity {
        /// The (first) identity offered, printable and truncated.
        identity: String,
        /// Why the lookup refused it.
        reason: String,
    },
    /// The client's PSK binder did not verify: same identity, different key.
    #[error(
        "wrong PSK for identity {identity:?}: the client's key differs from ours (binder does not verify)"
    )]
    WrongPsk {
        /// The identity whose key did not match.
        identity: String,
    },
    /// The peer ended the handshake (or the session) with a fatal alert.
    #[error("the peer sent TLS alert '{alert}'{hint}")]
    PeerAlert {
        /// OpenSSL's description of the alert (e.g. "decrypt error").
        alert: String,
        /// A short explanation of what the alert usually means here (may be empty).
        hint: &'static str,
    },
    /// Another handshake failure (no shared cipher suite or group, bad message...).
    #[error("TLS handshake failed: {0}")]
    Handshake(String),
    /// A record after the handshake failed to decrypt or parse.
    #[error("TLS record error: {0}")]
    Record(String),
    /// Plaintext was written before the handshake completed.
    #[error("TLS handshake not complete yet: cannot send application data")]
    NotEstablished,
    /// Plaintext was written after close_notify (ours or the peer's).
    #[error("the TLS session is closed")]
    Closed,
    /// The session failed earlier; this is the first error's message.
    #[error("the TLS session failed earlier: {0}")]
    Failed(String),
    /// Building a TLS context or session failed (OpenSSL error stack).
    #[error("TLS setup: {0}")]
    Setup(String),
}

impl TlsError {
    /// True when the failure is the peer's doing (bad bytes, wrong key, alert) rather than a
    /// local setup problem; the reactor logs these at `warn` with the peer address.
    pub fn is_peer_error(&self) -> bool {
        !matches!(
            self,
            TlsError::Setup(_) | TlsError::NotEstablished | TlsError::Closed
        )
    }
}

/// A printable, bounded rendering of identity bytes for messages and logs.
pub(crate) fn printable(identity: &[u8]) -> String {
    const MAX: usize = 300;
    let mut s: String = identity
        .iter()
        .take(MAX)
        .map(|&b| {
            if (0x20..0x7f).contains(&b) {
                char::from(b)
            } else {
                '?'
            }
        })
        .collect();
    if identity.len() > MAX {
        s.push('…');
    }
    s
}
