//! DH-HMAC-CHAP secrets in the `DHHC-1` representation, and the NQN-keyed transformation.
//!
//! Format (NVMe Base 2.x §8.3.4.5.8 "DH-HMAC-CHAP secret representation"; Linux
//! `nvme_auth_parse_key` / `nvme_auth_extract_key`; SPDK `nvme_auth_get_key`; what
//! `nvme gen-dhchap-key` prints):
//!
//! ```text
//! DHHC-1:NN:<base64( key || LE32(CRC-32(key)) )>:
//! ```
//!
//! - `NN` is two decimal digits: `00` the key is used as is, `01`/`02`/`03` it is first
//!   transformed with SHA-256/384/512.
//! - The key is 32, 48 or 64 bytes (decoded length 36, 52 or 68 with the CRC); any key length
//!   goes with any `NN`.
//! - The CRC is the ordinary CRC-32 (IEEE 802.3, zlib's `crc32`), appended little-endian.
//!
//! Transformation (Linux `nvme_auth_transform_key`, SPDK `nvme_auth_transform_key`):
//! `K' = HMAC_NN(key, NQN || "NVMe-over-Fabrics")`, its length the hash's digest length; with
//! `NN = 00`, `K' = key`. The host secret is transformed with the **host** NQN and the
//! controller secret with the **subsystem** NQN — on both sides of the link (Linux host:
//! `ctrl->opts->host->nqn` / `ctrl->opts->subsysnqn`; target: `ctrl->hostnqn` /
//! `ctrl->subsysnqn`).
//!
//! Secrets never appear in `Debug` output and are zeroized when dropped; errors never echo the
//! secret text.

use std::fmt;
use std::str::FromStr;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use zeroize::{Zeroize, Zeroizing};

use crate::chap::{HashId, hmac};
use crate::rand::{RandomError, RandomSource};

/// The `NN` field of a `DHHC-1` secret: which hash (if any) transforms the key before use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum KeyTransform {
    /// `00`: the key is used unchanged.
    None = 0,
    /// `01`: HMAC-SHA-256 transformation.
    Sha256 = 1,
    /// `02`: HMAC-SHA-384 transformation.
    Sha384 = 2,
    /// `03`: HMAC-SHA-512 transformation.
    Sha512 = 3,
}

impl KeyTransform {
    /// The transformation with number `nn` (0..=3).
    pub fn from_nn(nn: u8) -> Option<Self> {
        match nn {
            0 => Some(Self::None),
            1 => Some(Self::Sha256),
            2 => Some(Self::Sha384),
            3 => Some(Self::Sha512),
            _ => None,
        }
    }

    /// The `NN` number.
    pub fn nn(self) -> u8 {
        self as u8
    }

    /// The transforming hash, `None` for `00`.
    pub fn hash(self) -> Option<HashId> {
        match self {
            Self::None => None,
            Self::Sha256 => Some(HashId::Sha256),
            Self::Sha384 => Some(HashId::Sha384),
            Self::Sha512 => Some(HashId::Sha512),
        }
    }
}

/// Why a `DHHC-1` secret was refused. No variant carries any part of the secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    /// The text does not start with `DHHC-1:`.
    #[error("DH-HMAC-CHAP secret does not start with \"DHHC-1:\"")]
    MissingPrefix,
    /// The `NN` field is not two decimal digits followed by `:`.
    #[error("DH-HMAC-CHAP secret: the hash field after \"DHHC-1:\" must be two digits and ':'")]
    BadTransformField,
    /// `NN` is two digits but not 00..03.
    #[error("DH-HMAC-CHAP secret: unknown key transformation {0:02} (00, 01, 02 or 03)")]
    UnknownTransform(u8),
    /// Something other than one final `:` follows the base64 text.
    #[error("DH-HMAC-CHAP secret: unexpected text after the key (must end with a single ':')")]
    TrailingText,
    /// The key is not valid base64 (standard alphabet, padded).
    #[error("DH-HMAC-CHAP secret: the key is not valid base64")]
    Base64,
    /// The decoded key plus CRC is not 36, 52 or 68 bytes.
    #[error(
        "DH-HMAC-CHAP secret: decoded length {0} bytes, expected 36, 52 or 68 (32, 48 or 64-byte key and a 4-byte CRC)"
    )]
    BadLength(usize),
    /// The CRC-32 after the key does not match the key.
    #[error("DH-HMAC-CHAP secret: CRC-32 mismatch (the secret was mistyped or truncated)")]
    CrcMismatch,
    /// [`DhchapSecret::from_key`] / [`DhchapSecret::generate`]: key length not 32, 48 or 64.
    #[error("DH-HMAC-CHAP key length {0} bytes, expected 32, 48 or 64")]
    BadKeyLength(usize),
    /// [`DhchapSecret::generate`]: the random source failed.
    #[error(transparent)]
    Random(#[from] RandomError),
}

/// A configured DH-HMAC-CHAP secret: the raw key and its `NN` transformation.
#[derive(Clone, PartialEq, Eq)]
pub struct DhchapSecret {
    transform: KeyTransform,
    key: Zeroizing<Vec<u8>>,
}

impl fmt::Debug for DhchapSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DhchapSecret")
            .field("transform", &self.transform)
            .field("key", &format_args!("<redacted {} bytes>", self.key.len()))
            .finish()
    }
}

fn check_key_len(len: usize) -> Result<(), SecretError> {
    match len {
        32 | 48 | 64 => Ok(()),
        n => Err(SecretError::BadKeyLength(n)),
    }
}

impl DhchapSecret {
    /// Parses `DHHC-1:NN:<base64>:`. Surrounding ASCII whitespace (a key file's newline) is
    /// ignored; the final `:` may be missing, as Linux accepts.
    pub fn parse(text: &str) -> Result<Self, SecretError> {
        let text = text.trim_ascii();
        let rest = text
            .strip_prefix("DHHC-1:")
            .ok_or(SecretError::MissingPrefix)?;
        let b = rest.as_bytes();
        if b.len() < 3 || !b[0].is_ascii_digit() || !b[1].is_ascii_digit() || b[2] != b':' {
            return Err(SecretError::BadTransformField);
        }
        let nn = (b[0] - b'0') * 10 + (b[1] - b'0');
        let transform = KeyTransform::from_nn(nn).ok_or(SecretError::UnknownTransform(nn))?;
        let body = &rest[3..];
        let b64 = body.strip_suffix(':').unwrap_or(body);
        if b64.contains(':') {
            return Err(SecretError::TrailingText);
        }
        let mut raw = Zeroizing::new(Vec::with_capacity(72));
        STANDARD
            .decode_vec(b64, &mut raw)
            .map_err(|_| SecretError::Base64)?;
        let key_len = match raw.len() {
            36 | 52 | 68 => raw.len() - 4,
            n => return Err(SecretError::BadLength(n)),
        };
        let (key, crc) = raw.split_at(key_len);
        let mut crc_bytes = [0u8; 4];
        crc_bytes.copy_from_slice(crc);
        if crc32fast::hash(key) != u32::from_le_bytes(crc_bytes) {
            return Err(SecretError::CrcMismatch);
        }
        Ok(Self {
            transform,
            key: Zeroizing::new(key.to_vec()),
        })
    }

    /// A secret from raw key bytes (32, 48 or 64).
    pub fn from_key(transform: KeyTransform, key: &[u8]) -> Result<Self, SecretError> {
        check_key_len(key.len())?;
        Ok(Self {
            transform,
            key: Zeroizing::new(key.to_vec()),
        })
    }

    /// A fresh random secret of `len` bytes (32, 48 or 64), as `nvme gen-dhchap-key` makes.
    pub fn generate(
        transform: KeyTransform,
        len: usize,
        rng: &mut dyn RandomSource,
    ) -> Result<Self, SecretError> {
        check_key_len(len)?;
        let mut key = Zeroizing::new(vec![0u8; len]);
        rng.fill(&mut key)?;
        Ok(Self { transform, key })
    }

    /// The `NN` transformation.
    pub fn transform_kind(&self) -> KeyTransform {
        self.transform
    }

    /// Length of the raw key in bytes.
    pub fn key_len(&self) -> usize {
        self.key.len()
    }

    /// The raw key bytes. Secret: do not log.
    pub fn key_bytes(&self) -> &[u8] {
        &self.key
    }

    /// The key used in the CHAP responses for `nqn` (host NQN for a host secret, subsystem NQN
    /// for a controller secret).
    pub fn transform(&self, nqn: &str) -> TransformedKey {
        match self.transform.hash() {
            None => TransformedKey(Zeroizing::new(self.key.to_vec())),
            Some(h) => TransformedKey(hmac(h, &self.key, &[nqn.as_bytes(), b"NVMe-over-Fabrics"])),
        }
    }

    /// The `DHHC-1:NN:<base64>:` text. Secret: do not log.
    pub fn encode(&self) -> Zeroizing<String> {
        let mut raw = Zeroizing::new(Vec::with_capacity(self.key.len() + 4));
        raw.extend_from_slice(&self.key);
        raw.extend_from_slice(&crc32fast::hash(&self.key).to_le_bytes());
        let mut b64 = STANDARD.encode(&raw[..]);
        let s = format!("DHHC-1:{:02}:{}:", self.transform.nn(), b64);
        b64.zeroize();
        Zeroizing::new(s)
    }
}

impl FromStr for DhchapSecret {
    type Err = SecretError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// A secret after the NQN transformation: the HMAC key of a CHAP response.
#[derive(Clone, PartialEq, Eq)]
pub struct TransformedKey(Zeroizing<Vec<u8>>);

impl TransformedKey {
    /// A transformed key from raw bytes (tests, or a key computed elsewhere).
    pub fn from_bytes(bytes: &[u8]) -> Self {
        Self(Zeroizing::new(bytes.to_vec()))
    }

    /// The key bytes. Secret: do not log.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for TransformedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TransformedKey(<redacted {} bytes>)", self.0.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(raw: &[u8]) -> String {
        STANDARD.encode(raw)
    }

    fn with_crc(key: &[u8]) -> Vec<u8> {
        let mut v = key.to_vec();
        v.extend_from_slice(&crc32fast::hash(key).to_le_bytes());
        v
    }

    #[test]
    fn malformed_secrets_have_typed_errors() {
        let key = [7u8; 32];
        let good = format!("DHHC-1:01:{}:", b64(&with_crc(&key)));
        assert!(DhchapSecret::parse(&good).is_ok());
        // Without the final ':' and with a newline, as Linux accepts.
        assert!(DhchapSecret::parse(good.trim_end_matches(':')).is_ok());
        assert!(DhchapSecret::parse(&format!("{good}\n")).is_ok());

        let cases: Vec<(String, SecretError)> = vec![
            ("".into(), SecretError::MissingPrefix),
            ("DHHC-2:01:abcd:".into(), SecretError::MissingPrefix),
            ("DHHC-1:1:abcd:".into(), SecretError::BadTransformField),
            ("DHHC-1:0x:abcd:".into(), SecretError::BadTransformField),
            ("DHHC-1:01".into(), SecretError::BadTransformField),
            (
                format!("DHHC-1:04:{}:", b64(&with_crc(&key))),
                SecretError::UnknownTransform(4),
            ),
            (
                format!("DHHC-1:99:{}:", b64(&with_crc(&key))),
                SecretError::UnknownTransform(99),
            ),
            (
                format!("DHHC-1:01:{}:extra", b64(&with_crc(&key))),
                SecretError::TrailingText,
            ),
            (
                format!("DHHC-1:01:{}::", b64(&with_crc(&key))),
                SecretError::TrailingText,
            ),
            ("DHHC-1:01:not*base64!:".into(), SecretError::Base64),
            (
                format!("DHHC-1:01:{}:", b64(&with_crc(&[1u8; 31]))),
                SecretError::BadLength(35),
            ),
            (
                format!("DHHC-1:01:{}:", b64(&[1u8; 32])),
                SecretError::BadLength(32),
            ),
            ("DHHC-1:01::".into(), SecretError::BadLength(0)),
        ];
        for (text, want) in cases {
            assert_eq!(DhchapSecret::parse(&text), Err(want), "{text:?}");
        }
        let mut bad_crc = with_crc(&key);
        bad_crc[33] ^= 1;
        assert_eq!(
            DhchapSecret::parse(&format!("DHHC-1:00:{}:", b64(&bad_crc))),
            Err(SecretError::CrcMismatch)
        );
    }

    #[test]
    fn errors_and_debug_never_echo_the_secret() {
        let key = [0x5au8; 48];
        let s = DhchapSecret::from_key(KeyTransform::Sha384, &key).expect("valid length");
        let text = s.encode();
        let b64part = text.split(':').nth(2).expect("three fields").to_string();
        let dbg = format!("{s:?} {:?}", s.transform("nqn.x"));
        assert!(!dbg.contains(&b64part[..16]), "{dbg}");
        assert!(!dbg.contains("5a5a"), "{dbg}");
        assert!(dbg.contains("redacted 48 bytes"), "{dbg}");
        let mut corrupted = text.to_string();
        corrupted.replace_range(12..13, "*");
        let err = DhchapSecret::parse(&corrupted).expect_err("corrupted");
        assert!(!err.to_string().contains(&b64part[4..12]));
    }

    #[test]
    fn encode_parse_round_trip_and_generate() {
        struct Counter(u8);
        impl RandomSource for Counter {
            fn fill(&mut self, buf: &mut [u8]) -> Result<(), RandomError> {
                for b in buf {
                    self.0 = self.0.wrapping_add(1);
                    *b = self.0;
                }
                Ok(())
            }
        }
        for len in [32, 48, 64] {
            for nn in 0..4 {
                let t = KeyTransform::from_nn(nn).expect("0..3");
                let s = DhchapSecret::generate(t, len, &mut Counter(0)).expect("generate");
                assert_eq!(s.key_len(), len);
                assert_eq!(s.key_bytes()[0], 1);
                let back = DhchapSecret::parse(&s.encode()).expect("round trip");
                assert_eq!(back, s);
                let len_t = s.transform("nqn.test").as_bytes().len();
                assert_eq!(len_t, t.hash().map_or(len, HashId::digest_len));
            }
        }
        assert_eq!(
            DhchapSecret::generate(KeyTransform::None, 16, &mut Counter(0)),
            Err(SecretError::BadKeyLength(16))
        );
    }
}
