//! Diffie-Hellman for DH-HMAC-CHAP: the RFC 7919 FFDHE groups (generator 2) and the null group.
//!
//! - Group identifiers (DHGID) are the spec's: null 00h, ffdhe2048 01h … ffdhe8192 05h (Linux
//!   `NVME_AUTH_DHGROUP_*`).
//! - Public values travel big-endian, left-padded to the group size (256 … 1024 bytes), as the
//!   Linux kpp writes them. A peer value shorter than the group size is accepted and
//!   left-padded (SPDK sends `BN_bn2bin` output, which drops leading zero bytes); longer is
//!   refused. Empty, 0, 1, p−1 and anything ≥ p are refused (RFC 7919 §5.1: with a safe prime
//!   that check is the whole small-subgroup defence).
//! - The shared secret `g^xy mod p` is group-size bytes, big-endian, zero-padded (Linux kpp;
//!   SPDK `EVP_PKEY_CTX_set_dh_pad(ctx, 1)`).
//! - Private exponents are random with 2·s bits, s the group's security strength from
//!   NIST SP 800-57 (112, 128, 152, 176, 200 bits), as SP 800-56A rev. 3 §5.6.1.1.1 and
//!   Linux's `dh_safe_prime` table do: 224 … 400-bit exponents instead of full-size ones, which
//!   is what keeps ffdhe8192 fast.
//! - Arithmetic: `crypto-bigint`'s `BoxedMontyForm`, constant time in the exponent's value (the
//!   exponent *length* is fixed per group, so it leaks nothing).
//! - The primes are the RFC 7919 appendix A values; `tests/kat.rs` checks them against the
//!   RFC's own formula evaluated by `tests/vectors/gen.py`.

use std::sync::{Arc, OnceLock};

use crypto_bigint::modular::{BoxedMontyForm, BoxedMontyParams};
use crypto_bigint::{BoxedUint, Odd};
use zeroize::{Zeroize, Zeroizing};

use crate::rand::{RandomError, RandomSource};

/// A DH group of DH-HMAC-CHAP, with its wire identifier (DHGID).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum DhGroup {
    /// No Diffie-Hellman: the challenge is used as is (DHGID 00h).
    Null = 0x00,
    /// RFC 7919 ffdhe2048 (01h).
    Ffdhe2048 = 0x01,
    /// RFC 7919 ffdhe3072 (02h).
    Ffdhe3072 = 0x02,
    /// RFC 7919 ffdhe4096 (03h).
    Ffdhe4096 = 0x03,
    /// RFC 7919 ffdhe6144 (04h).
    Ffdhe6144 = 0x04,
    /// RFC 7919 ffdhe8192 (05h).
    Ffdhe8192 = 0x05,
}

impl DhGroup {
    /// Every group, in identifier order (the order the Linux host offers them).
    pub const ALL: [DhGroup; 6] = [
        DhGroup::Null,
        DhGroup::Ffdhe2048,
        DhGroup::Ffdhe3072,
        DhGroup::Ffdhe4096,
        DhGroup::Ffdhe6144,
        DhGroup::Ffdhe8192,
    ];

    /// The group with wire identifier `id`, if known.
    pub fn from_id(id: u8) -> Option<Self> {
        Self::ALL.into_iter().find(|g| g.id() == id)
    }

    /// Wire identifier.
    pub fn id(self) -> u8 {
        self as u8
    }

    /// Name as nvme-cli and Linux spell it: `null`, `ffdhe2048` … `ffdhe8192`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Null => "null",
            Self::Ffdhe2048 => "ffdhe2048",
            Self::Ffdhe3072 => "ffdhe3072",
            Self::Ffdhe4096 => "ffdhe4096",
            Self::Ffdhe6144 => "ffdhe6144",
            Self::Ffdhe8192 => "ffdhe8192",
        }
    }

    /// Parses a name as [`DhGroup::name`] prints it.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|g| g.name() == name)
    }

    /// Size of the modulus in bits (0 for the null group).
    pub fn bits(self) -> u32 {
        match self {
            Self::Null => 0,
            Self::Ffdhe2048 => 2048,
            Self::Ffdhe3072 => 3072,
            Self::Ffdhe4096 => 4096,
            Self::Ffdhe6144 => 6144,
            Self::Ffdhe8192 => 8192,
        }
    }

    /// Length of a public value / shared secret on the wire (0 for the null group).
    pub fn value_len(self) -> usize {
        self.bits() as usize / 8
    }

    /// Private exponent length in bits: twice the security strength.
    pub fn private_bits(self) -> u32 {
        match self {
            Self::Null => 0,
            Self::Ffdhe2048 => 224,
            Self::Ffdhe3072 => 256,
            Self::Ffdhe4096 => 304,
            Self::Ffdhe6144 => 352,
            Self::Ffdhe8192 => 400,
        }
    }

    fn prime_hex(self) -> Option<&'static str> {
        match self {
            Self::Null => None,
            Self::Ffdhe2048 => Some(FFDHE2048_HEX),
            Self::Ffdhe3072 => Some(FFDHE3072_HEX),
            Self::Ffdhe4096 => Some(FFDHE4096_HEX),
            Self::Ffdhe6144 => Some(FFDHE6144_HEX),
            Self::Ffdhe8192 => Some(FFDHE8192_HEX),
        }
    }

    /// The prime p, big-endian, group-size bytes (`None` for the null group).
    pub fn prime(self) -> Option<Vec<u8>> {
        self.params().map(|p| p.modulus().to_be_bytes().to_vec())
    }

    /// Montgomery parameters of p, computed once per process.
    fn params(self) -> Option<Arc<BoxedMontyParams>> {
        static CACHE: [OnceLock<Option<Arc<BoxedMontyParams>>>; 6] = [
            OnceLock::new(),
            OnceLock::new(),
            OnceLock::new(),
            OnceLock::new(),
            OnceLock::new(),
            OnceLock::new(),
        ];
        CACHE[self.id() as usize]
            .get_or_init(|| {
                let hex = self.prime_hex()?;
                let p = Option::<BoxedUint>::from(BoxedUint::from_be_hex(hex, self.bits()))?;
                let odd = Option::<Odd<BoxedUint>>::from(Odd::new(p))?;
                // The modulus is public: variable-time setup is fine.
                Some(Arc::new(BoxedMontyParams::new_vartime(odd)))
            })
            .clone()
    }
}

impl std::fmt::Display for DhGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a DH operation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DhError {
    /// The null group has no key pairs.
    #[error("the null DH group has no DH values")]
    NullGroup,
    /// The peer sent no DH value for a DH group.
    #[error("empty DH value")]
    Empty,
    /// The peer's DH value is longer than the group size.
    #[error("DH value of {len} bytes is longer than the {max}-byte group")]
    TooLong {
        /// Received length.
        len: usize,
        /// The group's value length.
        max: usize,
    },
    /// The peer's DH value is 0, 1, p−1 or not below p.
    #[error("DH value out of range (must be 2 ..= p-2)")]
    OutOfRange,
    /// A test-supplied private exponent is zero or too long.
    #[error("invalid private exponent")]
    BadPrivateKey,
    /// Internal: the group's parameters could not be built (a constant is wrong).
    #[error("DH group parameters unavailable")]
    Parameters,
    /// The random source failed.
    #[error(transparent)]
    Random(#[from] RandomError),
}

/// An ephemeral DH private exponent in one group; zeroized on drop.
pub struct DhPrivateKey {
    group: DhGroup,
    params: Arc<BoxedMontyParams>,
    x: BoxedUint,
}

impl Drop for DhPrivateKey {
    fn drop(&mut self) {
        self.x.zeroize();
    }
}

impl std::fmt::Debug for DhPrivateKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DhPrivateKey({}, <redacted>)", self.group)
    }
}

impl DhPrivateKey {
    /// A fresh random exponent of [`DhGroup::private_bits`] bits (never zero).
    pub fn generate(group: DhGroup, rng: &mut dyn RandomSource) -> Result<Self, DhError> {
        let nbytes = group.private_bits() as usize / 8;
        if nbytes == 0 {
            return Err(DhError::NullGroup);
        }
        let mut buf = Zeroizing::new(vec![0u8; nbytes]);
        for _ in 0..8 {
            rng.fill(&mut buf)?;
            if buf.iter().any(|&b| b != 0) {
                return Self::from_be_bytes(group, &buf);
            }
        }
        Err(DhError::Random(RandomError))
    }

    /// An exponent given as big-endian bytes (known-answer tests). It must be non-zero and at
    /// most 1024 bits — any length up to that works, it only has to be below q = (p−1)/2 to be
    /// meaningful, which every value that short is.
    pub fn from_be_bytes(group: DhGroup, bytes: &[u8]) -> Result<Self, DhError> {
        let params = group.params().ok_or(if group == DhGroup::Null {
            DhError::NullGroup
        } else {
            DhError::Parameters
        })?;
        if bytes.len() > 128 || bytes.iter().all(|&b| b == 0) {
            return Err(DhError::BadPrivateKey);
        }
        // Precision: the group's exponent size, or the given length if a test passes longer.
        let bits = group.private_bits().max(bytes.len() as u32 * 8);
        let x = BoxedUint::from_be_slice(bytes, bits).map_err(|_| DhError::BadPrivateKey)?;
        Ok(Self { group, params, x })
    }

    /// The group of this key.
    pub fn group(&self) -> DhGroup {
        self.group
    }

    fn pow(&self, base: BoxedUint) -> Zeroizing<Vec<u8>> {
        let m = BoxedMontyForm::new_with_arc(base, self.params.clone());
        let mut r = m.pow(&self.x).retrieve();
        let out = Zeroizing::new(r.to_be_bytes().to_vec());
        r.zeroize();
        out
    }

    /// The public value `g^x mod p`, group-size bytes big-endian.
    pub fn public_value(&self) -> Vec<u8> {
        let g = BoxedUint::from(2u8).widen(self.group.bits());
        self.pow(g).to_vec()
    }

    /// The shared secret `peer^x mod p`, group-size bytes big-endian, after checking the peer's
    /// value.
    pub fn shared_secret(&self, peer: &[u8]) -> Result<Zeroizing<Vec<u8>>, DhError> {
        let y = validate_peer_value(self.group, &self.params, peer)?;
        let k = self.pow(y);
        // With 2 <= y <= p-2 and a safe prime, k = 1 only if y has order 2, i.e. y = p-1,
        // already excluded; kept as a cheap second line.
        let one = k[..k.len() - 1].iter().all(|&b| b == 0) && k[k.len() - 1] <= 1;
        if one {
            return Err(DhError::OutOfRange);
        }
        Ok(k)
    }
}

/// Checks a peer's public value for `group` without computing anything with it.
pub fn check_peer_value(group: DhGroup, peer: &[u8]) -> Result<(), DhError> {
    let params = group.params().ok_or(DhError::NullGroup)?;
    validate_peer_value(group, &params, peer).map(|_| ())
}

fn validate_peer_value(
    group: DhGroup,
    params: &BoxedMontyParams,
    peer: &[u8],
) -> Result<BoxedUint, DhError> {
    let max = group.value_len();
    if peer.is_empty() {
        return Err(DhError::Empty);
    }
    if peer.len() > max {
        return Err(DhError::TooLong {
            len: peer.len(),
            max,
        });
    }
    let y = BoxedUint::from_be_slice(peer, group.bits()).map_err(|_| DhError::OutOfRange)?;
    let p = params.modulus().as_ref();
    let two = BoxedUint::from(2u8).widen(group.bits());
    let p_minus_one = p.wrapping_sub(&BoxedUint::one_with_precision(group.bits()));
    // Public values: ordinary comparisons are fine.
    if y < two || y >= p_minus_one {
        return Err(DhError::OutOfRange);
    }
    Ok(y)
}

// RFC 7919 appendix A primes (hex, big-endian).
const FFDHE2048_HEX: &str = concat!(
    "ffffffffffffffffadf85458a2bb4a9aafdc5620273d3cf1d8b9c583ce2d3695a9e13641146433fbcc939dce249b3ef9",
    "7d2fe363630c75d8f681b202aec4617ad3df1ed5d5fd65612433f51f5f066ed0856365553ded1af3b557135e7f57c935",
    "984f0c70e0e68b77e2a689daf3efe8721df158a136ade73530acca4f483a797abc0ab182b324fb61d108a94bb2c8e3fb",
    "b96adab760d7f4681d4f42a3de394df4ae56ede76372bb190b07a7c8ee0a6d709e02fce1cdf7e2ecc03404cd28342f61",
    "9172fe9ce98583ff8e4f1232eef28183c3fe3b1b4c6fad733bb5fcbc2ec22005c58ef1837d1683b2c6f34a26c1b2effa",
    "886b423861285c97ffffffffffffffff",
);
const FFDHE3072_HEX: &str = concat!(
    "ffffffffffffffffadf85458a2bb4a9aafdc5620273d3cf1d8b9c583ce2d3695a9e13641146433fbcc939dce249b3ef9",
    "7d2fe363630c75d8f681b202aec4617ad3df1ed5d5fd65612433f51f5f066ed0856365553ded1af3b557135e7f57c935",
    "984f0c70e0e68b77e2a689daf3efe8721df158a136ade73530acca4f483a797abc0ab182b324fb61d108a94bb2c8e3fb",
    "b96adab760d7f4681d4f42a3de394df4ae56ede76372bb190b07a7c8ee0a6d709e02fce1cdf7e2ecc03404cd28342f61",
    "9172fe9ce98583ff8e4f1232eef28183c3fe3b1b4c6fad733bb5fcbc2ec22005c58ef1837d1683b2c6f34a26c1b2effa",
    "886b4238611fcfdcde355b3b6519035bbc34f4def99c023861b46fc9d6e6c9077ad91d2691f7f7ee598cb0fac186d91c",
    "aefe130985139270b4130c93bc437944f4fd4452e2d74dd364f2e21e71f54bff5cae82ab9c9df69ee86d2bc522363a0d",
    "abc521979b0deada1dbf9a42d5c4484e0abcd06bfa53ddef3c1b20ee3fd59d7c25e41d2b66c62e37ffffffffffffffff",
);
const FFDHE4096_HEX: &str = concat!(
    "ffffffffffffffffadf85458a2bb4a9aafdc5620273d3cf1d8b9c583ce2d3695a9e13641146433fbcc939dce249b3ef9",
    "7d2fe363630c75d8f681b202aec4617ad3df1ed5d5fd65612433f51f5f066ed0856365553ded1af3b557135e7f57c935",
    "984f0c70e0e68b77e2a689daf3efe8721df158a136ade73530acca4f483a797abc0ab182b324fb61d108a94bb2c8e3fb",
    "b96adab760d7f4681d4f42a3de394df4ae56ede76372bb190b07a7c8ee0a6d709e02fce1cdf7e2ecc03404cd28342f61",
    "9172fe9ce98583ff8e4f1232eef28183c3fe3b1b4c6fad733bb5fcbc2ec22005c58ef1837d1683b2c6f34a26c1b2effa",
    "886b4238611fcfdcde355b3b6519035bbc34f4def99c023861b46fc9d6e6c9077ad91d2691f7f7ee598cb0fac186d91c",
    "aefe130985139270b4130c93bc437944f4fd4452e2d74dd364f2e21e71f54bff5cae82ab9c9df69ee86d2bc522363a0d",
    "abc521979b0deada1dbf9a42d5c4484e0abcd06bfa53ddef3c1b20ee3fd59d7c25e41d2b669e1ef16e6f52c3164df4fb",
    "7930e9e4e58857b6ac7d5f42d69f6d187763cf1d5503400487f55ba57e31cc7a7135c886efb4318aed6a1e012d9e6832",
    "a907600a918130c46dc778f971ad0038092999a333cb8b7a1a1db93d7140003c2a4ecea9f98d0acc0a8291cdcec97dcf",
    "8ec9b55a7f88a46b4db5a851f44182e1c68a007e5e655f6affffffffffffffff",
);
const FFDHE6144_HEX: &str = concat!(
    "ffffffffffffffffadf85458a2bb4a9aafdc5620273d3cf1d8b9c583ce2d3695a9e13641146433fbcc939dce249b3ef9",
    "7d2fe363630c75d8f681b202aec4617ad3df1ed5d5fd65612433f51f5f066ed0856365553ded1af3b557135e7f57c935",
    "984f0c70e0e68b77e2a689daf3efe8721df158a136ade73530acca4f483a797abc0ab182b324fb61d108a94bb2c8e3fb",
    "b96adab760d7f4681d4f42a3de394df4ae56ede76372bb190b07a7c8ee0a6d709e02fce1cdf7e2ecc03404cd28342f61",
    "9172fe9ce98583ff8e4f1232eef28183c3fe3b1b4c6fad733bb5fcbc2ec22005c58ef1837d1683b2c6f34a26c1b2effa",
    "886b4238611fcfdcde355b3b6519035bbc34f4def99c023861b46fc9d6e6c9077ad91d2691f7f7ee598cb0fac186d91c",
    "aefe130985139270b4130c93bc437944f4fd4452e2d74dd364f2e21e71f54bff5cae82ab9c9df69ee86d2bc522363a0d",
    "abc521979b0deada1dbf9a42d5c4484e0abcd06bfa53ddef3c1b20ee3fd59d7c25e41d2b669e1ef16e6f52c3164df4fb",
    "7930e9e4e58857b6ac7d5f42d69f6d187763cf1d5503400487f55ba57e31cc7a7135c886efb4318aed6a1e012d9e6832",
    "a907600a918130c46dc778f971ad0038092999a333cb8b7a1a1db93d7140003c2a4ecea9f98d0acc0a8291cdcec97dcf",
    "8ec9b55a7f88a46b4db5a851f44182e1c68a007e5e0dd9020bfd64b645036c7a4e677d2c38532a3a23ba4442caf53ea6",
    "3bb454329b7624c8917bdd64b1c0fd4cb38e8c334c701c3acdad0657fccfec719b1f5c3e4e46041f388147fb4cfdb477",
    "a52471f7a9a96910b855322edb6340d8a00ef092350511e30abec1fff9e3a26e7fb29f8c183023c3587e38da0077d9b4",
    "763e4e4b94b2bbc194c6651e77caf992eeaac0232a281bf6b3a739c1226116820ae8db5847a67cbef9c9091b462d538c",
    "d72b03746ae77f5e62292c311562a846505dc82db854338ae49f5235c95b91178ccf2dd5cacef403ec9d1810c6272b04",
    "5b3b71f9dc6b80d63fdd4a8e9adb1e6962a69526d43161c1a41d570d7938dad4a40e329cd0e40e65ffffffffffffffff",
);
const FFDHE8192_HEX: &str = concat!(
    "ffffffffffffffffadf85458a2bb4a9aafdc5620273d3cf1d8b9c583ce2d3695a9e13641146433fbcc939dce249b3ef9",
    "7d2fe363630c75d8f681b202aec4617ad3df1ed5d5fd65612433f51f5f066ed0856365553ded1af3b557135e7f57c935",
    "984f0c70e0e68b77e2a689daf3efe8721df158a136ade73530acca4f483a797abc0ab182b324fb61d108a94bb2c8e3fb",
    "b96adab760d7f4681d4f42a3de394df4ae56ede76372bb190b07a7c8ee0a6d709e02fce1cdf7e2ecc03404cd28342f61",
    "9172fe9ce98583ff8e4f1232eef28183c3fe3b1b4c6fad733bb5fcbc2ec22005c58ef1837d1683b2c6f34a26c1b2effa",
    "886b4238611fcfdcde355b3b6519035bbc34f4def99c023861b46fc9d6e6c9077ad91d2691f7f7ee598cb0fac186d91c",
    "aefe130985139270b4130c93bc437944f4fd4452e2d74dd364f2e21e71f54bff5cae82ab9c9df69ee86d2bc522363a0d",
    "abc521979b0deada1dbf9a42d5c4484e0abcd06bfa53ddef3c1b20ee3fd59d7c25e41d2b669e1ef16e6f52c3164df4fb",
    "7930e9e4e58857b6ac7d5f42d69f6d187763cf1d5503400487f55ba57e31cc7a7135c886efb4318aed6a1e012d9e6832",
    "a907600a918130c46dc778f971ad0038092999a333cb8b7a1a1db93d7140003c2a4ecea9f98d0acc0a8291cdcec97dcf",
    "8ec9b55a7f88a46b4db5a851f44182e1c68a007e5e0dd9020bfd64b645036c7a4e677d2c38532a3a23ba4442caf53ea6",
    "3bb454329b7624c8917bdd64b1c0fd4cb38e8c334c701c3acdad0657fccfec719b1f5c3e4e46041f388147fb4cfdb477",
    "a52471f7a9a96910b855322edb6340d8a00ef092350511e30abec1fff9e3a26e7fb29f8c183023c3587e38da0077d9b4",
    "763e4e4b94b2bbc194c6651e77caf992eeaac0232a281bf6b3a739c1226116820ae8db5847a67cbef9c9091b462d538c",
    "d72b03746ae77f5e62292c311562a846505dc82db854338ae49f5235c95b91178ccf2dd5cacef403ec9d1810c6272b04",
    "5b3b71f9dc6b80d63fdd4a8e9adb1e6962a69526d43161c1a41d570d7938dad4a40e329ccff46aaa36ad004cf600c838",
    "1e425a31d951ae64fdb23fcec9509d43687feb69edd1cc5e0b8cc3bdf64b10ef86b63142a3ab8829555b2f747c932665",
    "cb2c0f1cc01bd70229388839d2af05e454504ac78b7582822846c0ba35c35f5c59160cc046fd8251541fc68c9c86b022",
    "bb7099876a460e7451a8a93109703fee1c217e6c3826e52c51aa691e0e423cfc99e9e31650c1217b624816cdad9a95f9",
    "d5b8019488d9c0a0a1fe3075a577e23183f81d4a3f2fa4571efc8ce0ba8a4fe8b6855dfe72b0a66eded2fbabfbe58a30",
    "fafabe1c5d71a87e2f741ef8c1fe86fea6bbfde530677f0d97d11d49f7a8443d0822e506a9f4614e011e2a94838ff88c",
    "d68c8bb7c5c6424cffffffffffffffff",
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_names_sizes() {
        for g in DhGroup::ALL {
            assert_eq!(DhGroup::from_id(g.id()), Some(g));
            assert_eq!(DhGroup::from_name(g.name()), Some(g));
            assert_eq!(g.value_len() * 8, g.bits() as usize);
        }
        assert_eq!(DhGroup::from_id(6), None);
        assert_eq!(DhGroup::from_name("ffdhe1024"), None);
        assert_eq!(DhGroup::Ffdhe8192.value_len(), 1024);
    }

    #[test]
    fn private_key_checks() {
        assert_eq!(
            DhPrivateKey::from_be_bytes(DhGroup::Null, &[1]).map(|_| ()),
            Err(DhError::NullGroup)
        );
        assert_eq!(
            DhPrivateKey::from_be_bytes(DhGroup::Ffdhe2048, &[0; 28]).map(|_| ()),
            Err(DhError::BadPrivateKey)
        );
        assert_eq!(
            DhPrivateKey::from_be_bytes(DhGroup::Ffdhe2048, &[1; 129]).map(|_| ()),
            Err(DhError::BadPrivateKey)
        );
        struct Zeros;
        impl RandomSource for Zeros {
            fn fill(&mut self, buf: &mut [u8]) -> Result<(), RandomError> {
                buf.fill(0);
                Ok(())
            }
        }
        // A source that only yields zeros never produces a (zero) key.
        assert_eq!(
            DhPrivateKey::generate(DhGroup::Ffdhe2048, &mut Zeros).map(|_| ()),
            Err(DhError::Random(RandomError))
        );
        assert_eq!(
            DhPrivateKey::generate(DhGroup::Null, &mut Zeros).map(|_| ()),
            Err(DhError::NullGroup)
        );
        // g^1 = 2, left-padded to the group size.
        let one = DhPrivateKey::from_be_bytes(DhGroup::Ffdhe2048, &[1]).expect("x = 1");
        let mut two = vec![0u8; 256];
        two[255] = 2;
        assert_eq!(one.public_value(), two);
        assert!(format!("{one:?}").contains("redacted"));
    }
}
