//! The few libssl 3 functions the `openssl`/`openssl-sys` crates do not bind: TLS 1.3 external
//! PSKs via sessions (`SSL_CTX_set_psk_find_session_callback`,
//! `SSL_CTX_set_psk_use_session_callback`, `SSL_SESSION_new`/`set1_master_key`/`set_cipher`/
//! `set_protocol_version`, `SSL_CIPHER_find`), all in libssl since OpenSSL 1.1.1.
//!
//! The legacy `SSL_CTX_set_psk_server_callback` (which the crate binds) only yields
//! TLS_AES_128_GCM_SHA256 sessions in TLS 1.3, so SHA-384 PSKs need the session callbacks.
//! Declarations follow `openssl/ssl.h` of OpenSSL 3.0; everything unsafe stays in this module.

use std::ffi::{c_int, c_uchar};
use std::ptr;

use openssl_sys::{EVP_MD, SSL, SSL_CIPHER, SSL_CTX, SSL_SESSION};

use crate::psk::{PskHash, TlsPsk};

/// `SSL_psk_find_session_cb_func` (server).
pub(crate) type FindSessionCb = unsafe extern "C" fn(
    ssl: *mut SSL,
    identity: *const c_uchar,
    identity_len: usize,
    sess: *mut *mut SSL_SESSION,
) -> c_int;

/// `SSL_psk_use_session_cb_func` (client).
pub(crate) type UseSessionCb = unsafe extern "C" fn(
    ssl: *mut SSL,
    md: *const EVP_MD,
    id: *mut *const c_uchar,
    idlen: *mut usize,
    sess: *mut *mut SSL_SESSION,
) -> c_int;

unsafe extern "C" {
    fn SSL_CTX_set_psk_find_session_callback(ctx: *mut SSL_CTX, cb: Option<FindSessionCb>);
    fn SSL_CTX_set_psk_use_session_callback(ctx: *mut SSL_CTX, cb: Option<UseSessionCb>);
    fn SSL_SESSION_new() -> *mut SSL_SESSION;
    fn SSL_SESSION_set1_master_key(
        sess: *mut SSL_SESSION,
        key: *const c_uchar,
        len: usize,
    ) -> c_int;
    fn SSL_SESSION_set_cipher(sess: *mut SSL_SESSION, cipher: *const SSL_CIPHER) -> c_int;
    fn SSL_SESSION_set_protocol_version(sess: *mut SSL_SESSION, version: c_int) -> c_int;
    fn SSL_CIPHER_find(ssl: *mut SSL, ptr: *const c_uchar) -> *const SSL_CIPHER;
    fn SSL_has_pending(ssl: *const SSL) -> c_int;
}

/// True if OpenSSL holds received bytes it has not handed out yet (unprocessed record bytes
/// or decrypted data): checked before our record layer takes over.
pub(crate) fn has_pending(ssl: &openssl::ssl::SslRef) -> bool {
    use foreign_types::ForeignTypeRef;
    // SAFETY: `ssl` is a live SSL; the call only reads its buffers' state.
    unsafe { SSL_has_pending(ssl.as_ptr()) != 0 }
}

/// Installs the server's PSK lookup callback on a context under construction.
pub(crate) fn set_find_session_callback(ctx: *mut SSL_CTX, cb: FindSessionCb) {
    // SAFETY: `ctx` comes from a live `SslContextBuilder`; the callback is a plain function.
    unsafe { SSL_CTX_set_psk_find_session_callback(ctx, Some(cb)) }
}

/// Installs the client's PSK callback on a context under construction.
pub(crate) fn set_use_session_callback(ctx: *mut SSL_CTX, cb: UseSessionCb) {
    // SAFETY: as above.
    unsafe { SSL_CTX_set_psk_use_session_callback(ctx, Some(cb)) }
}

/// The TLS 1.3 cipher suite whose hash matches the PSK's; OpenSSL accepts a PSK session with
/// any negotiated suite of the same hash (so TLS_AES_128_CCM_SHA256 works with a SHA-256 PSK).
fn suite_id(hash: PskHash) -> [u8; 2] {
    match hash {
        PskHash::Sha256 => [0x13, 0x01], // TLS_AES_128_GCM_SHA256
        PskHash::Sha384 => [0x13, 0x02], // TLS_AES_256_GCM_SHA384
    }
}

/// A new TLS 1.3 `SSL_SESSION` carrying `psk` as an external PSK, or null on failure.
/// Ownership of the returned session passes to OpenSSL when handed back from a PSK callback.
///
/// # Safety
/// `ssl` must be the live `SSL` the callback was invoked for.
pub(crate) unsafe fn psk_session(ssl: *mut SSL, psk: &TlsPsk) -> *mut SSL_SESSION {
    let id = suite_id(psk.hash());
    // SAFETY: `ssl` is live (caller contract); `id` points at two bytes as the API wants.
    let cipher = unsafe { SSL_CIPHER_find(ssl, id.as_ptr()) };
    if cipher.is_null() {
        return ptr::null_mut();
    }
    // SAFETY: plain constructor; checked for null below.
    let sess = unsafe { SSL_SESSION_new() };
    if sess.is_null() {
        return ptr::null_mut();
    }
    let key = psk.key();
    // SAFETY: `sess` is a fresh session we own; the key slice is valid for its length (libssl
    // copies it); `cipher` was returned by libssl above.
    let ok = unsafe {
        SSL_SESSION_set1_master_key(sess, key.as_ptr(), key.len()) == 1
            && SSL_SESSION_set_cipher(sess, cipher) == 1
            && SSL_SESSION_set_protocol_version(sess, openssl_sys::TLS1_3_VERSION) == 1
    };
    if !ok {
        // SAFETY: we still own `sess`.
        unsafe { openssl_sys::SSL_SESSION_free(sess) };
        return ptr::null_mut();
    }
    sess
}

/// The output size of a message digest (to match the hash OpenSSL asks a client PSK for).
///
/// # Safety
/// `md` must be null or a valid `EVP_MD`.
pub(crate) unsafe fn md_size(md: *const EVP_MD) -> Option<usize> {
    if md.is_null() {
        return None;
    }
    // SAFETY: non-null and valid by the caller's contract.
    usize::try_from(unsafe { openssl_sys::EVP_MD_size(md) }).ok()
}
