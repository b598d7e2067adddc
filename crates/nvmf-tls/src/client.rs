//! The host's side (the ebof initiator): [`TlsClientConfig`] (shared) and [`TlsClient`] (one
//! per connection, with its identity and PSK).
//!
//! The ClientHello offers only the cipher suites of the PSK's hash (what a SHA-384 PSK can be
//! used with), key shares for x25519 (groups x25519, secp384r1, P-256 are supported), the
//! `psk_dhe_ke` mode only, one PSK identity, and no SNI or ALPN — as the Linux host does.

use std::ffi::c_uchar;
use std::ptr;
use std::sync::{Arc, OnceLock};

use foreign_types::ForeignTypeRef;
use openssl::ex_data::Index;
use openssl::ssl::{Ssl, SslContext, SslMethod, SslRef};
use openssl_sys::{EVP_MD, SSL, SSL_SESSION};

use crate::conn::{Role, TlsConn};
use crate::error::TlsError;
use crate::psk::TlsPsk;
use crate::{base_context, ffi, setup_err, suites_for};

struct ClientState {
    identity: Vec<u8>,
    psk: TlsPsk,
}

fn state_index() -> Result<Index<Ssl, ClientState>, TlsError> {
    static INDEX: OnceLock<Result<Index<Ssl, ClientState>, String>> = OnceLock::new();
    crate::conn::ex_index(&INDEX)
}

/// The initiator-wide TLS configuration (TLS 1.3 only, no certificates). Build once.
#[derive(Debug)]
pub struct TlsClientConfig {
    ctx: SslContext,
}

impl TlsClientConfig {
    /// The shared client configuration.
    pub fn new() -> Result<Arc<TlsClientConfig>, TlsError> {
        state_index()?;
        let b = base_context(SslMethod::tls_client())?;
        ffi::set_use_session_callback(b.as_ptr(), use_session);
        Ok(Arc::new(TlsClientConfig { ctx: b.build() }))
    }
}

/// Hands OpenSSL our PSK for the ClientHello (and again after a HelloRetryRequest, when `md`
/// names the negotiated hash: a PSK of another hash is then withheld).
unsafe extern "C" fn use_session(
    ssl: *mut SSL,
    md: *const EVP_MD,
    id: *mut *const c_uchar,
    idlen: *mut usize,
    sess: *mut *mut SSL_SESSION,
) -> std::ffi::c_int {
    if ssl.is_null() || id.is_null() || idlen.is_null() || sess.is_null() {
        return 0;
    }
    // SAFETY: libssl's out-pointers, valid for writes.
    unsafe {
        *sess = ptr::null_mut();
        *id = ptr::null();
        *idlen = 0;
    }
    let Ok(index) = state_index() else {
        return 0;
    };
    // SAFETY: `ssl` is the live SSL this callback runs for.
    let ssl_ref = unsafe { SslRef::from_ptr(ssl) };
    let Some(state) = ssl_ref.ex_data(index) else {
        return 0;
    };
    // SAFETY: `md` is null or libssl's digest.
    if let Some(size) = unsafe { ffi::md_size(md) }
        && size != state.psk.hash().len()
    {
        return 1;
    }
    // SAFETY: `ssl` is live; ownership of the session passes to libssl.
    let session = unsafe { ffi::psk_session(ssl, &state.psk) };
    if session.is_null() {
        return 0;
    }
    // SAFETY: out-pointers as above; the identity lives in the SSL's ex_data as long as the
    // SSL itself, which is what libssl requires.
    unsafe {
        *sess = session;
        *id = state.identity.as_ptr();
        *idlen = state.identity.len();
    }
    1
}

fn no_failure(_: &SslRef) -> Option<TlsError> {
    None
}

fn our_identity(ssl: &SslRef) -> Option<&[u8]> {
    let index = state_index().ok()?;
    ssl.ex_data(index).map(|s| s.identity.as_slice())
}

/// One TLS connection of the initiator. Dereferences to [`TlsConn`] for the data path.
#[derive(Debug)]
pub struct TlsClient {
    conn: TlsConn,
}

impl TlsClient {
    /// Starts a handshake presenting `identity` (e.g. `NVMe0R01 <hostnqn> <subnqn>`) with
    /// `psk`. The ClientHello is ready in [`TlsConn::pending_cipher`] on return: send it
    /// before anything else (the ICReq goes inside TLS once [`TlsConn::handshake_done`]).
    pub fn new(
        config: &Arc<TlsClientConfig>,
        identity: &[u8],
        psk: TlsPsk,
    ) -> Result<TlsClient, TlsError> {
        if identity.is_empty() || identity.len() > usize::from(u16::MAX) {
            return Err(TlsError::Setup(format!(
                "a PSK identity must be 1..=65535 bytes, not {}",
                identity.len()
            )));
        }
        let index = state_index()?;
        let mut ssl = Ssl::new(&config.ctx).map_err(setup_err)?;
        ssl.set_ciphersuites(suites_for(psk.hash()))
            .map_err(setup_err)?;
        ssl.set_ex_data(
            index,
            ClientState {
                identity: identity.to_vec(),
                psk,
            },
        );
        ssl.set_connect_state();
        let stream = crate::conn::new_stream(ssl)?;
        let mut conn = TlsConn::new(stream, Role::Client, no_failure, our_identity);
        conn.drive()?;
        Ok(TlsClient { conn })
    }
}

crate::conn::deref_to_conn!(TlsClient);
