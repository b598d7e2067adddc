//! The AEAD behind our record layer: AES-GCM sealed and opened in place, with `ring`.
//!
//! ring 0.17 won the comparison on this machine (ADR 0024: AES-128-GCM on 16 KiB records,
//! in place, one core, same run: ring 3.0–5.1 GB/s seal and 2.5–4.5 GB/s open; aws-lc-rs
//! 1.4–2.3 / 1.1–2.1; OpenSSL 3.0 EVP through the `openssl` crate 1.2–1.5 / 1.0–1.7): its
//! AES-GCM uses VAES + VPCLMULQDQ on AVX2, which this CPU has and OpenSSL 3.0 does not use.

use ring::aead::{AES_128_GCM, AES_256_GCM, Aad, LessSafeKey, Nonce, Tag, UnboundKey};

use crate::error::TlsError;
use crate::record::Suite;

/// AES-GCM nonce length (RFC 8446 §5.3: iv_length = 12 for every suite here).
pub(crate) const NONCE_LEN: usize = 12;
/// AES-GCM tag length.
pub(crate) const TAG_LEN: usize = 16;

/// One direction's AEAD key (ring zeroes nothing on drop, but its expanded key schedule is
/// not the secret itself; the traffic secret and IV are `Zeroizing`).
pub(crate) struct Aead {
    key: LessSafeKey,
}

impl Aead {
    pub(crate) fn new(suite: Suite, key: &[u8]) -> Result<Aead, TlsError> {
        let alg = match suite {
            Suite::Aes128GcmSha256 => &AES_128_GCM,
            Suite::Aes256GcmSha384 => &AES_256_GCM,
        };
        let key = UnboundKey::new(alg, key)
            .map_err(|_| TlsError::Setup("AEAD key of the wrong length".into()))?;
        Ok(Aead {
            key: LessSafeKey::new(key),
        })
    }

    /// Encrypts `buf` in place with `aad`; returns the tag.
    pub(crate) fn seal_in_place(
        &mut self,
        nonce: &[u8; NONCE_LEN],
        aad: &[u8],
        buf: &mut [u8],
    ) -> Result<[u8; TAG_LEN], TlsError> {
        let tag: Tag = self
            .key
            .seal_in_place_separate_tag(Nonce::assume_unique_for_key(*nonce), Aad::from(aad), buf)
            .map_err(|_| TlsError::Record("AEAD: record too long to seal".into()))?;
        let mut out = [0u8; TAG_LEN];
        out.copy_from_slice(tag.as_ref());
        Ok(out)
    }

    /// Decrypts `buf` in place and checks `tag`; on `Err` the contents of `buf` must not be
    /// used.
    pub(crate) fn open_in_place(
        &mut self,
        nonce: &[u8; NONCE_LEN],
        aad: &[u8],
        buf: &mut [u8],
        tag: &[u8],
    ) -> Result<(), ()> {
        let tag: [u8; TAG_LEN] = tag.try_into().map_err(|_| ())?;
        self.key
            .open_in_place_separate_tag(
                Nonce::assume_unique_for_key(*nonce),
                Aad::from(aad),
                Tag::from(tag),
                buf,
                0..,
            )
            .map(|_| ())
            .map_err(|_| ())
    }
}
