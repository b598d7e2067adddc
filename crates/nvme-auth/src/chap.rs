//! The CHAP arithmetic of DH-HMAC-CHAP: hash identifiers, the augmented challenge and the two
//! responses.
//!
//! Formulas (NVMe Base 2.x §8.3.4.5 "DH-HMAC-CHAP protocol"; each byte checked against Linux
//! `nvme_auth_dhchap_setup_host_response` / `_setup_ctrl_response` (host/auth.c),
//! `nvmet_auth_host_hash` / `nvmet_auth_ctrl_hash` (target/auth.c) and SPDK
//! `spdk_nvme_dhchap_calculate`):
//!
//! ```text
//! R1 = HMAC(Kh', C1' || LE32(S1) || LE16(T_ID) || SC_C || "HostHost"   || NQNh || 00h || NQNs)
//! R2 = HMAC(Kc', C2' || LE32(S2) || LE16(T_ID) || SC_C || "Controller" || NQNs || 00h || NQNh)
//! C' = HMAC(H(Ks), C)   with a DH group, Ks = g^xy mod p (big-endian, group-size bytes);
//! C' = C                with the null group
//! ```
//!
//! - HMAC and H use the hash the controller chose in the Challenge (HashID), not the hash of
//!   the secret's `NN` transformation.
//! - Kh' is the host secret transformed with the **host** NQN, Kc' the controller secret
//!   transformed with the **subsystem** NQN, on both sides (see [`crate::secret`]).
//! - NQNs are hashed without their NUL terminator; the one 00h byte separates them.
//! - SC_C is the Negotiate's secure-channel byte (always 0 here; Linux hashes a literal 0).
//! - Ks is the full-width shared secret: Linux's kpp writes it padded to the group size,
//!   SPDK derives with `EVP_PKEY_CTX_set_dh_pad(ctx, 1)`.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha384, Sha512};
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use crate::secret::TransformedKey;

/// A DH-HMAC-CHAP hash function, with its wire identifier (HashID, Linux
/// `NVME_AUTH_HASH_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum HashId {
    /// SHA-256, HashID 01h, 32-byte digests.
    Sha256 = 0x01,
    /// SHA-384, HashID 02h, 48-byte digests.
    Sha384 = 0x02,
    /// SHA-512, HashID 03h, 64-byte digests.
    Sha512 = 0x03,
}

impl HashId {
    /// Every hash, in the order the Linux host offers them.
    pub const ALL: [HashId; 3] = [HashId::Sha256, HashId::Sha384, HashId::Sha512];

    /// The hash with wire identifier `id`, if known.
    pub fn from_id(id: u8) -> Option<Self> {
        match id {
            0x01 => Some(Self::Sha256),
            0x02 => Some(Self::Sha384),
            0x03 => Some(Self::Sha512),
            _ => None,
        }
    }

    /// Wire identifier.
    pub fn id(self) -> u8 {
        self as u8
    }

    /// Digest length in bytes (the HL field of the messages).
    pub fn digest_len(self) -> usize {
        match self {
            Self::Sha256 => 32,
            Self::Sha384 => 48,
            Self::Sha512 => 64,
        }
    }

    /// Name as nvme-cli and Linux configfs spell it: `hmac(sha256)` … `hmac(sha512)`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Sha256 => "hmac(sha256)",
            Self::Sha384 => "hmac(sha384)",
            Self::Sha512 => "hmac(sha512)",
        }
    }

    /// Parses `sha256` / `hmac(sha256)` (and the 384/512 forms).
    pub fn from_name(name: &str) -> Option<Self> {
        let bare = name
            .strip_prefix("hmac(")
            .and_then(|s| s.strip_suffix(')'))
            .unwrap_or(name);
        match bare {
            "sha256" => Some(Self::Sha256),
            "sha384" => Some(Self::Sha384),
            "sha512" => Some(Self::Sha512),
            _ => None,
        }
    }
}

impl std::fmt::Display for HashId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

fn mac_parts<M: Mac + hmac::digest::KeyInit>(key: &[u8], parts: &[&[u8]]) -> Zeroizing<Vec<u8>> {
    // HMAC takes keys of any length (RFC 2104 hashes long ones), so this cannot fail;
    // the fallback (an HMAC under an empty key) is unreachable.
    let mut m = <M as hmac::digest::KeyInit>::new_from_slice(key)
        .unwrap_or_else(|_| <M as hmac::digest::KeyInit>::new(&Default::default()));
    for p in parts {
        m.update(p);
    }
    Zeroizing::new(m.finalize().into_bytes().to_vec())
}

/// HMAC over the concatenation of `parts`, keyed by `key`, with hash `hash`.
pub fn hmac(hash: HashId, key: &[u8], parts: &[&[u8]]) -> Zeroizing<Vec<u8>> {
    match hash {
        HashId::Sha256 => mac_parts::<Hmac<Sha256>>(key, parts),
        HashId::Sha384 => mac_parts::<Hmac<Sha384>>(key, parts),
        HashId::Sha512 => mac_parts::<Hmac<Sha512>>(key, parts),
    }
}

/// H(data) with hash `hash`.
pub fn digest(hash: HashId, data: &[u8]) -> Zeroizing<Vec<u8>> {
    Zeroizing::new(match hash {
        HashId::Sha256 => Sha256::digest(data).to_vec(),
        HashId::Sha384 => Sha384::digest(data).to_vec(),
        HashId::Sha512 => Sha512::digest(data).to_vec(),
    })
}

/// The augmented challenge `C' = HMAC(H(Ks), C)` (Linux `nvme_auth_augmented_challenge`).
pub fn augmented_challenge(hash: HashId, session_key: &[u8], challenge: &[u8]) -> Vec<u8> {
    let hashed = digest(hash, session_key);
    hmac(hash, &hashed, &[challenge]).to_vec()
}

/// The per-transaction inputs both responses share.
#[derive(Debug, Clone, Copy)]
pub struct ChapContext<'a> {
    /// The hash the controller chose (Challenge HashID).
    pub hash: HashId,
    /// Transaction identifier (T_ID) of the exchange.
    pub t_id: u16,
    /// Secure channel concatenation byte from the Negotiate (0: none).
    pub sc_c: u8,
    /// Host NQN as sent in the Connect command, without NUL.
    pub hostnqn: &'a str,
    /// Subsystem NQN as sent in the Connect command, without NUL.
    pub subnqn: &'a str,
    /// `g^xy mod p`, group-size bytes, when a DH group is in use.
    pub session_key: Option<&'a [u8]>,
}

impl ChapContext<'_> {
    fn challenge_for(&self, challenge: &[u8]) -> Vec<u8> {
        match self.session_key {
            Some(ks) => augmented_challenge(self.hash, ks, challenge),
            None => challenge.to_vec(),
        }
    }

    /// The host's response R1 to challenge C1 with sequence number S1; `key` is the host secret
    /// transformed with the host NQN.
    pub fn host_response(&self, key: &TransformedKey, c1: &[u8], s1: u32) -> Vec<u8> {
        let c = self.challenge_for(c1);
        hmac(
            self.hash,
            key.as_bytes(),
            &[
                &c,
                &s1.to_le_bytes(),
                &self.t_id.to_le_bytes(),
                &[self.sc_c],
                b"HostHost",
                self.hostnqn.as_bytes(),
                &[0],
                self.subnqn.as_bytes(),
            ],
        )
        .to_vec()
    }

    /// The controller's response R2 to challenge C2 with sequence number S2; `key` is the
    /// controller secret transformed with the subsystem NQN.
    pub fn controller_response(&self, key: &TransformedKey, c2: &[u8], s2: u32) -> Vec<u8> {
        let c = self.challenge_for(c2);
        hmac(
            self.hash,
            key.as_bytes(),
            &[
                &c,
                &s2.to_le_bytes(),
                &self.t_id.to_le_bytes(),
                &[self.sc_c],
                b"Controller",
                self.subnqn.as_bytes(),
                &[0],
                self.hostnqn.as_bytes(),
            ],
        )
        .to_vec()
    }
}

/// Constant-time equality of a received response with the expected one (lengths are public).
pub fn responses_match(expected: &[u8], received: &[u8]) -> bool {
    expected.len() == received.len() && bool::from(expected.ct_eq(received))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_ids_and_names() {
        for h in HashId::ALL {
            assert_eq!(HashId::from_id(h.id()), Some(h));
            assert_eq!(HashId::from_name(h.name()), Some(h));
            assert_eq!(digest(h, b"x").len(), h.digest_len());
            assert_eq!(hmac(h, b"k", &[b"x"]).len(), h.digest_len());
        }
        assert_eq!(HashId::from_id(0), None);
        assert_eq!(HashId::from_id(4), None);
        assert_eq!(HashId::from_name("sha384"), Some(HashId::Sha384));
        assert_eq!(HashId::from_name("md5"), None);
    }

    #[test]
    fn hmac_parts_concatenate() {
        // RFC 4231 test case 2: key "Jefe", data "what do ya want for nothing?".
        let want = "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843";
        let got = hmac(
            HashId::Sha256,
            b"Jefe",
            &[b"what do ya ", b"want ", b"for nothing?"],
        );
        assert_eq!(hex(&got), want);
    }

    #[test]
    fn response_comparison() {
        assert!(responses_match(b"abc", b"abc"));
        assert!(!responses_match(b"abc", b"abd"));
        assert!(!responses_match(b"abc", b"ab"));
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }
}
