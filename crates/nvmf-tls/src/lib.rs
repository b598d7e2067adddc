//! # nvmf-tls — NVMe/TCP TLS 1.3 with PSK (TP 8011), sans-IO
//!
//! **What it is**: the security channel of NVMe/TCP (NVMe/TCP Transport 1.0 §3.6 with TP 8011):
//! * [`psk`] — the NVMe PSK material, pure Rust: the `NVMeTLSkey-1:HH:…:` interchange format,
//!   the retained-PSK and TLS-PSK derivations exactly as Linux hosts perform them (two
//!   encodings exist, see [`psk::Derivation`]), PSK digests and the `NVMe0R01 …` /
//!   `NVMe1R02 … <digest>` identities, with a bounded parser for identities from the wire;
//! * [`TlsServer`] / [`TlsClient`] — TLS 1.3 sessions driven purely through byte buffers
//!   ([`TlsConn`]), for the target and for the ebof initiator: the handshake on OpenSSL 3 (the
//!   system's libssl, ADR 0016), then, for TLS_AES_128_GCM_SHA256 and TLS_AES_256_GCM_SHA384,
//!   our own record layer (ADR 0024): the traffic secrets come from OpenSSL's key log
//!   callback, keys and IVs from HKDF-Expand-Label, and records are sealed and opened in place
//!   in the session's buffers with ring's AES-GCM; KeyUpdate both ways (ours after
//!   [`DEFAULT_KEY_UPDATE_RECORDS`] full-size-record equivalents, and by default only towards
//!   a peer that has sent one: [`KeyUpdatePolicy`]), NewSessionTickets ignored, alerts decoded.
//!   TLS_AES_128_CCM_SHA256 (offered by Linux) stays on OpenSSL's record layer;
//! * [`looks_like_tls`] — tells a ClientHello from a plaintext ICReq on `tls = "optional"` ports.
//!
//! **What it is not**: no sockets, threads or clocks; no handshake written here (OpenSSL does
//! it, with its PSK callbacks); no AES or GHASH written here (ring); no NVMe/TCP PDUs (that is
//! `nvmf-tcp`, which runs unchanged on the plaintext).
//!
//! **Where it sits**: between the socket and `nvmf-tcp`. With TLS the first bytes after TCP
//! connect are the host's ClientHello; the ICReq comes inside TLS afterwards.
//!
//! ```text
//! socket --read--> cipher_space()/cipher_filled() (or feed()) --> [open in place]
//!        --> read_plain() --> ConnCore (nvmf-tcp decode)
//! socket <-write- pending_cipher()/consume_cipher() <-- [seal in place] <-- write_plain(&[pdus])
//! ```
//! (During the handshake, and for the CCM suite, OpenSSL sits where the brackets are.)
//!
//! # Protocol facts (what the Linux host does; `shared/design/KERNEL-INTEROP.md`)
//! TLS 1.3 only; suites TLS_AES_128_GCM_SHA256 and TLS_AES_128_CCM_SHA256 offered by Linux,
//! TLS_AES_256_GCM_SHA384 for SHA-384 PSKs; PSK with (EC)DHE (`psk_dhe_ke`) only; key shares
//! secp384r1 and x25519; no SNI, no ALPN; `record_size_limit` 0x4001 (records of at most
//! 16384 plaintext bytes, which is OpenSSL's default size). The PSK in the Linux keyring is
//! already the *TLS PSK* (`nvme gen-tls-key --insert` derived it from the configured key);
//! the target derives the same from its configured key with [`psk::tls_psk_for_identity`].
//! No session tickets are sent: after the handshake the Linux host's socket belongs to kTLS,
//! which does not expect post-handshake handshake records. For the same reason we start no
//! KeyUpdate towards a peer that has not sent one itself ([`KeyUpdatePolicy::Peer`], the
//! default): past the threshold the key is kept, as the Linux target keeps its own.
//!
//! # Calling pattern (reactor)
//! ```
//! use std::sync::Arc;
//! use nvmf_tls::{TlsClient, TlsClientConfig, TlsServer, TlsServerConfig, psk::{PskHash, TlsPsk}};
//!
//! let key = TlsPsk::new(PskHash::Sha256, &[7u8; 32])?;
//! let server_key = key.clone();
//! let config = TlsServerConfig::new(move |id: &[u8]| {
//!     (id == b"NVMe0R01 nqn.host nqn.sub").then(|| server_key.clone())
//! })?;
//! let mut server = TlsServer::new(&config)?;
//! let mut client = TlsClient::new(&TlsClientConfig::new()?, b"NVMe0R01 nqn.host nqn.sub", key)?;
//!
//! // Shuttle ciphertext until both sides are done (a socket would carry it).
//! while !(server.handshake_done() && client.handshake_done()) {
//!     let c = client.take_cipher();
//!     server.feed(&c)?;
//!     let s = server.take_cipher();
//!     client.feed(&s)?;
//! }
//! assert_eq!(server.psk_identity(), Some(&b"NVMe0R01 nqn.host nqn.sub"[..]));
//!
//! // A batch of PDUs leaves as few full records.
//! client.write_plain(&[b"icreq...", b"capsule..."])?;
//! let wire = client.take_cipher();
//! server.feed(&wire)?;
//! let mut plain = Vec::new();
//! server.read_plain_into(&mut plain)?;
//! assert_eq!(plain, b"icreq...capsule...");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Rules for the integrator:
//! * Read the socket straight into [`TlsConn::cipher_space`] and report it with
//!   [`TlsConn::cipher_filled`] (or [`TlsConn::feed`] bytes read elsewhere, one more copy);
//!   records split across reads are reassembled inside and input is never refused; then,
//!   once [`TlsConn::handshake_done`], call [`TlsConn::read_plain`] (or
//!   [`TlsConn::read_plain_into`]) until it returns nothing. Use [`TlsConn::buffered_cipher`] for
//!   backpressure if plaintext is not drained.
//! * After **every** call (`feed`, `read_plain*`, `write_plain`, `close_notify`, and after an
//!   error) write out [`TlsConn::pending_cipher`] and [`TlsConn::consume_cipher`] what the
//!   socket took: handshake messages, KeyUpdate answers and alerts appear there too. On an
//!   error, send what is pending (the alert), then close.
//! * Encrypt per reactor turn, not per PDU: gather the turn's PDUs into one
//!   [`TlsConn::write_plain`] call; records are filled to 16 KiB.
//! * A close_notify from the peer shows as [`TlsConn::peer_closed`]; answer with
//!   [`TlsConn::close_notify`], flush, close the socket. Input after it is discarded, never
//!   buffered.
//! * When [`TlsConn::read_paused`] is true after `read_plain` returned 0, stop reading the
//!   socket for now: send [`TlsConn::pending_cipher`], serve other work, call `read_plain`
//!   again later (records without plaintext — KeyUpdates, empty records — are opened at most
//!   [`MAX_EMPTY_RECORDS_PER_CALL`] per call, and reading pauses while many KeyUpdate answers
//!   wait unsent).
//! * Memory per session: the receive buffer here (at least 64 KiB once reading, doubling
//!   when a caller reads more at once) and the send buffer (grows to the largest batch), plus
//!   OpenSSL's handshake state; OpenSSL's own record buffers only for the CCM suite.
//!
//! Layout: `psk` (keys, identities), `server` / `client` (OpenSSL configuration and PSK
//! callbacks per role), `conn` (the sans-IO session, the hand-over from OpenSSL), `record`
//! (our record layer: key schedule for traffic keys, record decoder, KeyUpdate), `aead`
//! (ring's AES-GCM), `ffi` (the libssl calls the `openssl` crate lacks), `error`.

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod aead;
pub mod client;
pub mod conn;
pub mod error;
mod ffi;
pub mod psk;
mod record;
pub mod server;

pub use client::{TlsClient, TlsClientConfig};
pub use conn::{
    MAX_ANSWERS_QUEUED, MAX_EMPTY_RECORDS_PER_CALL, MAX_RECORD_PLAINTEXT, RecordStats, TlsConn,
};
pub use error::TlsError;
pub use record::{DEFAULT_KEY_UPDATE_RECORDS, KeyUpdatePolicy};
pub use server::{TlsServer, TlsServerConfig};

use openssl::ssl::{SslContextBuilder, SslMethod, SslVerifyMode, SslVersion};

use crate::psk::PskHash;

/// Every TLS 1.3 suite NVMe/TCP uses (NVMe/TCP 1.0 §3.6.1.2; CCM because Linux offers it).
pub(crate) const SUITES_ALL: &str =
    "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_AES_128_CCM_SHA256";

/// Key-exchange groups: x25519 first (the client's key share), secp384r1 (Linux offers both),
/// P-256.
pub(crate) const GROUPS: &str = "X25519:secp384r1:P-256";

/// The suites usable with a PSK of `hash` (OpenSSL only uses a PSK whose hash matches the
/// negotiated suite's).
pub(crate) fn suites_for(hash: PskHash) -> &'static str {
    match hash {
        PskHash::Sha256 => "TLS_AES_128_GCM_SHA256:TLS_AES_128_CCM_SHA256",
        PskHash::Sha384 => "TLS_AES_256_GCM_SHA384",
    }
}

/// What both roles share: TLS 1.3 only, the NVMe/TCP suites and groups, no certificate
/// verification (the PSK authenticates both ends: each Finished proves knowledge of it).
pub(crate) fn base_context(method: SslMethod) -> Result<SslContextBuilder, TlsError> {
    let mut b = SslContextBuilder::new(method).map_err(setup_err)?;
    b.set_min_proto_version(Some(SslVersion::TLS1_3))
        .map_err(setup_err)?;
    b.set_max_proto_version(Some(SslVersion::TLS1_3))
        .map_err(setup_err)?;
    b.set_ciphersuites(SUITES_ALL).map_err(setup_err)?;
    b.set_groups_list(GROUPS).map_err(setup_err)?;
    b.set_verify(SslVerifyMode::NONE);
    // No read-ahead: OpenSSL must read exactly the handshake's records and leave every byte
    // after the peer's Finished in our buffer, where our record layer takes over (ADR 0024).
    // Off by default in OpenSSL; said explicitly so that no default can change it.
    b.set_read_ahead(false);
    // The key log callback hands us the application traffic secrets.
    b.set_keylog_callback(conn::keylog);
    Ok(b)
}

pub(crate) fn setup_err(e: openssl::error::ErrorStack) -> TlsError {
    TlsError::Setup(e.to_string())
}

/// For `tls = "optional"` listeners: does a connection's first data look like TLS?
///
/// `Some(true)`: a TLS handshake record (`16 03`); `Some(false)`: anything else — a plaintext
/// NVMe/TCP PDU (an ICReq starts with PDU type `00`) goes to the plaintext path, whose own
/// checks reject garbage; `None`: not enough bytes to tell (only `16` so far, or nothing).
pub fn looks_like_tls(first_bytes: &[u8]) -> Option<bool> {
    match first_bytes {
        [] | [0x16] => None,
        [0x16, 0x03, ..] => Some(true),
        _ => Some(false),
    }
}

#[cfg(test)]
mod tests {
    use super::looks_like_tls;

    #[test]
    fn sniffing() {
        assert_eq!(looks_like_tls(&[]), None);
        assert_eq!(looks_like_tls(&[0x16]), None);
        assert_eq!(looks_like_tls(&[0x16, 0x03, 0x01, 0x02, 0x00]), Some(true));
        // ICReq: PDU type 0, flags 0, HLEN 128.
        assert_eq!(looks_like_tls(&[0x00, 0x00, 0x80, 0x00]), Some(false));
        assert_eq!(looks_like_tls(&[0x00]), Some(false));
        assert_eq!(looks_like_tls(&[0x16, 0x01]), Some(false));
        assert_eq!(looks_like_tls(b"GET / HTTP/1.1"), Some(false));
    }
}
