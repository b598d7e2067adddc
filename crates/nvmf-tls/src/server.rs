//! The target's side: [`TlsServerConfig`] (one per listener, shared) and [`TlsServer`] (one
//! per connection).
//!
//! PSK selection happens in two OpenSSL callbacks:
//! 1. the ClientHello callback reads the raw `pre_shared_key` (41) and
//!    `psk_key_exchange_modes` (45) extensions, refuses PSK-less and psk_ke-only hellos with a
//!    precise error, asks the caller's lookup for each offered identity (first match wins,
//!    at most [`MAX_IDENTITIES_TRIED`]), and restricts this connection's cipher suites to those
//!    of the PSK's hash — OpenSSL picks the suite *before* it looks at PSKs and would otherwise
//!    ignore a SHA-384 PSK when it picked a SHA-256 suite;
//! 2. the find-session callback hands OpenSSL the chosen PSK as a TLS 1.3 session.

use std::ffi::c_uchar;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr;
use std::sync::{Arc, OnceLock};

use foreign_types::ForeignTypeRef;
use openssl::ex_data::Index;
use openssl::ssl::{
    ClientHelloResponse, Ssl, SslAlert, SslContext, SslMethod, SslOptions, SslRef,
    SslSessionCacheMode,
};
use openssl_sys::{SSL, SSL_SESSION};

use crate::conn::{Role, TlsConn};
use crate::error::{TlsError, printable};
use crate::psk::{PskIdentity, TlsPsk};
use crate::{base_context, ffi, setup_err, suites_for};

/// The most PSK identities of one ClientHello offered to the lookup (Linux sends one).
pub const MAX_IDENTITIES_TRIED: usize = 8;

/// TLS extension numbers (RFC 8446 §4.2).
const EXT_PRE_SHARED_KEY: u32 = 41;
const EXT_PSK_KEY_EXCHANGE_MODES: u32 = 45;
/// `psk_dhe_ke` (RFC 8446 §4.2.9).
const PSK_DHE_KE: u8 = 1;

/// The caller's PSK lookup: identity bytes as sent by the client → the TLS PSK, or why there
/// is none (the reason goes into [`TlsError::UnknownIdentity`], so into the log).
pub type PskLookup = dyn Fn(&[u8]) -> Result<TlsPsk, String> + Send + Sync;

/// Per-connection state the callbacks share with [`TlsServer`].
#[derive(Default)]
struct ServerState {
    identity: Option<Vec<u8>>,
    psk: Option<TlsPsk>,
    failure: Option<TlsError>,
}

fn state_index() -> Result<Index<Ssl, ServerState>, TlsError> {
    static INDEX: OnceLock<Result<Index<Ssl, ServerState>, String>> = OnceLock::new();
    crate::conn::ex_index(&INDEX)
}

/// The listener-wide TLS configuration: TLS 1.3 only; TLS_AES_128_GCM_SHA256,
/// TLS_AES_256_GCM_SHA384 and TLS_AES_128_CCM_SHA256; groups x25519, secp384r1, P-256;
/// PSK with (EC)DHE only; no certificates, no session tickets. Build once, share the `Arc`.
#[derive(Debug)]
pub struct TlsServerConfig {
    ctx: SslContext,
}

impl TlsServerConfig {
    /// A configuration whose PSKs come from `lookup` (identity bytes → TLS PSK, `None` for
    /// an unknown identity). The lookup runs on the connection's thread during the handshake,
    /// once per offered identity; it should be quick (e.g. a map lookup plus
    /// [`crate::psk::resolve_identity`]). A panic in it counts as "unknown identity".
    pub fn new<F>(lookup: F) -> Result<Arc<TlsServerConfig>, TlsError>
    where
        F: Fn(&[u8]) -> Option<TlsPsk> + Send + Sync + 'static,
    {
        TlsServerConfig::with_reasons(move |id| {
            lookup(id).ok_or_else(|| "no key configured for it".to_owned())
        })
    }

    /// Like [`TlsServerConfig::new`], but the lookup says why it refuses an identity (e.g. the
    /// error of [`crate::psk::resolve_identity`]); the reason ends up in the log line.
    pub fn with_reasons<F>(lookup: F) -> Result<Arc<TlsServerConfig>, TlsError>
    where
        F: Fn(&[u8]) -> Result<TlsPsk, String> + Send + Sync + 'static,
    {
        let index = state_index()?;
        let lookup: Arc<PskLookup> = Arc::new(lookup);
        let mut b = base_context(SslMethod::tls_server())?;
        // Session tickets would arrive at the Linux host as post-handshake records after tlshd
        // handed the socket to kTLS; PSK-only sessions have no use for them anyway.
        b.set_num_tickets(0).map_err(setup_err)?;
        b.set_options(SslOptions::NO_TICKET);
        b.set_session_cache_mode(SslSessionCacheMode::OFF);
        b.set_client_hello_callback(move |ssl, alert| client_hello(ssl, alert, &*lookup, index));
        ffi::set_find_session_callback(b.as_ptr(), find_session);
        Ok(Arc::new(TlsServerConfig { ctx: b.build() }))
    }
}

/// Picks the PSK for this connection (callback 1, see the module doc).
fn client_hello(
    ssl: &mut SslRef,
    alert: &mut SslAlert,
    lookup: &PskLookup,
    index: Index<Ssl, ServerState>,
) -> Result<ClientHelloResponse, openssl::error::ErrorStack> {
    match select_psk(ssl, lookup) {
        Ok((identity, psk)) => {
            if let Err(e) = ssl.set_ciphersuites(suites_for(psk.hash())) {
                *alert = SslAlert::HANDSHAKE_FAILURE;
                return Err(e);
            }
            if let Some(state) = ssl.ex_data_mut(index) {
                state.identity = Some(identity);
                state.psk = Some(psk);
            }
            Ok(ClientHelloResponse::SUCCESS)
        }
        Err((failure, code)) => {
            *alert = code;
            if let Some(state) = ssl.ex_data_mut(index) {
                state.failure = Some(failure);
            }
            Err(openssl::error::ErrorStack::get())
        }
    }
}

fn raw_extension(ssl: &SslRef, ext: u32) -> Option<&[u8]> {
    let mut out: *const c_uchar = ptr::null();
    let mut len = 0usize;
    // SAFETY: called only from the ClientHello callback, where `ssl` is live and the
    // extension data stays valid while the callback runs (the borrow of `ssl` outlives the
    // returned slice only within it).
    let found =
        unsafe { openssl_sys::SSL_client_hello_get0_ext(ssl.as_ptr(), ext, &mut out, &mut len) };
    if found != 1 || out.is_null() {
        return None;
    }
    // SAFETY: libssl returned a pointer to `len` readable bytes of the ClientHello.
    Some(unsafe { std::slice::from_raw_parts(out, len) })
}

fn select_psk(ssl: &SslRef, lookup: &PskLookup) -> Result<(Vec<u8>, TlsPsk), (TlsError, SslAlert)> {
    let psk_ext = raw_extension(ssl, EXT_PRE_SHARED_KEY)
        .ok_or((TlsError::NoPskOffered, SslAlert::HANDSHAKE_FAILURE))?;
    let modes = raw_extension(ssl, EXT_PSK_KEY_EXCHANGE_MODES).unwrap_or(&[]);
    // KeyExchangeModes: u8 length, then the modes.
    let dhe = modes
        .split_first()
        .is_some_and(|(&n, rest)| rest.iter().take(usize::from(n)).any(|&m| m == PSK_DHE_KE));
    if !dhe {
        return Err((TlsError::NoDheKeyExchange, SslAlert::HANDSHAKE_FAILURE));
    }
    let identities = parse_psk_identities(psk_ext).ok_or((
        TlsError::Handshake("malformed pre_shared_key extension".into()),
        SslAlert::DECODE_ERROR,
    ))?;
    let mut first_refusal = None;
    for id in identities.iter().take(MAX_IDENTITIES_TRIED) {
        let reason = match catch_unwind(AssertUnwindSafe(|| lookup(id))) {
            Ok(Ok(psk)) => return Ok((id.to_vec(), psk)),
            Ok(Err(reason)) => reason,
            Err(_) => "the PSK lookup panicked".to_owned(),
        };
        first_refusal.get_or_insert((printable(id), reason));
    }
    let (identity, reason) = first_refusal.unwrap_or_default();
    Err((
        TlsError::UnknownIdentity { identity, reason },
        SslAlert::HANDSHAKE_FAILURE,
    ))
}

/// The identities of a ClientHello's `pre_shared_key` extension (RFC 8446 §4.2.11):
/// `u16 len, { u16 len, identity, u32 obfuscated_ticket_age }*`, then the binders (skipped).
/// `None` if the structure does not add up.
pub(crate) fn parse_psk_identities(ext: &[u8]) -> Option<Vec<&[u8]>> {
    let list_len = usize::from(u16::from_be_bytes([*ext.first()?, *ext.get(1)?]));
    let mut list = ext.get(2..2usize.checked_add(list_len)?)?;
    let mut ids = Vec::new();
    while !list.is_empty() {
        let len = usize::from(u16::from_be_bytes([*list.first()?, *list.get(1)?]));
        let id = list.get(2..2 + len)?;
        if id.is_empty() {
            return None;
        }
        ids.push(id);
        list = list.get(2 + len + 4..)?;
    }
    if ids.is_empty() { None } else { Some(ids) }
}

/// Callback 2: gives OpenSSL the PSK chosen in the ClientHello callback, as a session.
unsafe extern "C" fn find_session(
    ssl: *mut SSL,
    identity: *const c_uchar,
    identity_len: usize,
    sess: *mut *mut SSL_SESSION,
) -> std::ffi::c_int {
    if sess.is_null() || ssl.is_null() {
        return 0;
    }
    // SAFETY: `sess` is libssl's out-pointer, valid for a write.
    unsafe { *sess = ptr::null_mut() };
    let Ok(index) = state_index() else {
        return 0;
    };
    let offered: &[u8] = if identity.is_null() || identity_len == 0 {
        &[]
    } else {
        // SAFETY: libssl passes `identity_len` readable bytes.
        unsafe { std::slice::from_raw_parts(identity, identity_len) }
    };
    // SAFETY: `ssl` is the live SSL this callback runs for.
    let ssl_ref = unsafe { SslRef::from_ptr(ssl) };
    let Some(state) = ssl_ref.ex_data(index) else {
        return 0;
    };
    if let (Some(id), Some(psk)) = (&state.identity, &state.psk)
        && id.as_slice() == offered
    {
        // SAFETY: `ssl` is live; ownership of the session passes to libssl.
        let session = unsafe { ffi::psk_session(ssl, psk) };
        // SAFETY: `sess` is libssl's out-pointer, valid for a write.
        unsafe { *sess = session };
        return i32::from(!session.is_null());
    }
    // Not the identity we chose: "no PSK for this one", libssl tries the next.
    1
}

fn recorded_failure(ssl: &SslRef) -> Option<TlsError> {
    let index = state_index().ok()?;
    ssl.ex_data(index).and_then(|s| s.failure.clone())
}

fn chosen_identity(ssl: &SslRef) -> Option<&[u8]> {
    let index = state_index().ok()?;
    ssl.ex_data(index).and_then(|s| s.identity.as_deref())
}

/// One TLS connection on the target. Dereferences to [`TlsConn`] for the data path.
#[derive(Debug)]
pub struct TlsServer {
    conn: TlsConn,
}

impl TlsServer {
    /// A new server session; feed it the client's bytes.
    pub fn new(config: &Arc<TlsServerConfig>) -> Result<TlsServer, TlsError> {
        let index = state_index()?;
        let mut ssl = Ssl::new(&config.ctx).map_err(setup_err)?;
        ssl.set_ex_data(index, ServerState::default());
        ssl.set_accept_state();
        let stream = crate::conn::new_stream(ssl)?;
        Ok(TlsServer {
            conn: TlsConn::new(stream, Role::Server, recorded_failure, chosen_identity),
        })
    }

    /// The PSK identity the client authenticated with, once the handshake is done (check that
    /// the Connect command's host and subsystem NQNs match it).
    pub fn psk_identity(&self) -> Option<&[u8]> {
        if !self.conn.handshake_done() {
            return None;
        }
        chosen_identity(self.conn.ssl())
    }

    /// [`TlsServer::psk_identity`] parsed as an NVMe identity: its `hostnqn` and `subnqn` are
    /// what the Connect command must name. `None` before the handshake, or if the lookup
    /// accepted an identity that is not in NVMe form.
    pub fn peer_identity(&self) -> Option<PskIdentity> {
        PskIdentity::parse(self.psk_identity()?).ok()
    }
}

crate::conn::deref_to_conn!(TlsServer);

#[cfg(test)]
mod tests {
    use super::parse_psk_identities;

    #[test]
    fn psk_extension_parser_is_bounded() {
        // One identity "ab", ticket age 0, then binders (ignored).
        let ext = [0, 8, 0, 2, b'a', b'b', 0, 0, 0, 0, 0, 33];
        assert_eq!(parse_psk_identities(&ext), Some(vec![&b"ab"[..]]));
        assert_eq!(parse_psk_identities(&[]), None);
        assert_eq!(parse_psk_identities(&[0]), None);
        assert_eq!(parse_psk_identities(&[0, 0]), None, "no identities");
        assert_eq!(
            parse_psk_identities(&[0, 9, 0, 2, b'a', b'b', 0, 0, 0, 0]),
            None
        );
        assert_eq!(
            parse_psk_identities(&[0, 6, 0, 0, 0, 0, 0, 0]),
            None,
            "empty identity"
        );
        assert_eq!(
            parse_psk_identities(&[0, 7, 0, 2, b'a', b'b', 0, 0, 0]),
            None
        );
        assert_eq!(parse_psk_identities(&[0xff, 0xff, 0, 1]), None);
    }
}
