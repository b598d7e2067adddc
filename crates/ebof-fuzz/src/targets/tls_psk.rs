//! Arbitrary bytes into the PSK parsers of `nvmf-tls` (`psk.rs`): the PSK identity a host
//! presents in its ClientHello, the target's whole lookup for it, and the NVMe key interchange
//! format (`NVMeTLSkey-1:HH:…:`) of configured keys; plus host ↔ target agreement on the TLS
//! PSK for keys and NQNs taken from the input.
//!
//! Input: `[mode, bytes...]`. `bytes` is parsed as an identity and as interchange text (lossy
//! UTF-8). For the agreement check, `bytes` also gives the configured key (its first 32 or 48
//! bytes, by the transform) and, after them, the host and subsystem NQNs (split at the first
//! space). `mode`: bits 0-1 the transform (`00`, `01`, `02`; 3 skips the agreement check), bit 2
//! the identity version the host presents, bit 3 the host's derivation, bit 4 the target's
//! preferred derivation, bit 5 a 48-byte key for transform `00`.
//!
//! Checked, beyond "never panics":
//! - [`PskIdentity::parse`]: accepted ⇒ its wire form is exactly the input (the parser is
//!   strict: one text per identity) and parses back to the same identity; NQNs of 1..=223
//!   bytes without spaces; a version-1 digest of the hash's length.
//! - [`resolve_identity`] (the target's lookup, with a key of the identity's hash configured
//!   for every host): accepted ⇒ the identity is the parsed one, retained, and the TLS PSK has
//!   the identity's hash and length.
//! - [`ConfiguredPsk::parse`]: accepted ⇒ the key length fits the transform, the interchange
//!   text it exports is the (trimmed) input and parses back to the same key.
//! - agreement: the identity and TLS PSK a host derives from a configured key
//!   ([`ConfiguredPsk::host_identity`]) are what the target's lookup derives from the same key
//!   and the identity's text (for a version-1 identity of a transformed key whichever
//!   derivation the target prefers; otherwise when both use the same one); with a different
//!   key, a version-1 identity is refused with a digest mismatch.

use crate::Features;
use nvmf_tls::psk::{
    ConfiguredPsk, Derivation, IdentityError, IdentityVersion, KeyTransform, MAX_IDENTITY_LEN,
    MAX_NQN_LEN, PskError, PskHash, PskIdentity, PskKind, ResolveError, resolve_identity,
};

/// Feature families.
const F_ID: u8 = 1;
const F_RESOLVE: u8 = 2;
const F_KEY: u8 = 3;
const F_AGREE: u8 = 4;

/// One input: parse PSK identities and configured keys, checking that accepted text is kept
/// exactly and that host and target derive the same identity and PSK.
pub fn run(data: &[u8], feat: &mut Features) {
    let [mode, bytes @ ..] = data else {
        return;
    };
    let mode = *mode;
    let preferred = derivation(mode & 0x10 != 0);
    identity(bytes, preferred, feat);
    interchange(bytes, feat);
    agreement(mode, bytes, feat);
}

fn derivation(rfc: bool) -> Derivation {
    if rfc {
        Derivation::Rfc8446
    } else {
        Derivation::Compat
    }
}

/// A configured key of `hash`'s length (transform `00`: the configured PSK is the retained one).
fn any_key(hash: PskHash) -> Option<ConfiguredPsk> {
    ConfiguredPsk::new(KeyTransform::None, &vec![0x5a; hash.len()]).ok()
}

fn identity(bytes: &[u8], preferred: Derivation, feat: &mut Features) {
    let parsed = PskIdentity::parse(bytes);
    match &parsed {
        Ok(id) => {
            feat.add(F_ID, 0);
            assert!(bytes.len() <= MAX_IDENTITY_LEN);
            let text = id.to_string();
            assert_eq!(text.as_bytes(), bytes, "identity wire form");
            assert_eq!(PskIdentity::parse(text.as_bytes()).as_ref(), Ok(id));
            for nqn in [&id.hostnqn, &id.subnqn] {
                assert!(!nqn.is_empty() && nqn.len() <= MAX_NQN_LEN, "NQN {nqn:?}");
                assert!(!nqn.contains(' '));
            }
            assert_eq!(
                id.digest.is_some(),
                id.version == IdentityVersion::V1,
                "digest and version"
            );
        }
        Err(e) => {
            feat.add_variant(F_ID, &e);
            assert!(!e.to_string().is_empty());
            if let IdentityError::TooLong(n) = e {
                assert_eq!(*n, bytes.len());
            }
        }
    }
    let resolved = resolve_identity(bytes, preferred, |id| any_key(id.hash));
    match resolved {
        Ok((id, psk)) => {
            feat.add(F_RESOLVE, 0);
            assert_eq!(parsed.as_ref(), Ok(&id), "resolved another identity");
            assert_eq!(id.kind, PskKind::Retained, "a generated identity resolved");
            assert_eq!(psk.hash(), id.hash);
            assert_eq!(psk.key().len(), id.hash.len());
        }
        Err(e) => {
            feat.add_variant(F_RESOLVE, &e);
            match e {
                ResolveError::Identity(ie) => assert_eq!(parsed, Err(ie)),
                ResolveError::NoKey { .. } => panic!("a key was configured for every host"),
                ResolveError::Psk(_) => assert!(parsed.is_ok()),
            }
        }
    }
}

fn interchange(bytes: &[u8], feat: &mut Features) {
    let text = String::from_utf8_lossy(bytes);
    match ConfiguredPsk::parse(&text) {
        Ok(k) => {
            feat.add_variant(F_KEY, &k.transform());
            let len_ok = match k.transform() {
                KeyTransform::None => k.key().len() == 32 || k.key().len() == 48,
                KeyTransform::Sha256 => k.key().len() == 32,
                KeyTransform::Sha384 => k.key().len() == 48,
            };
            assert!(len_ok, "{}-byte key for {:?}", k.key().len(), k.transform());
            assert_eq!(k.hash().len(), k.key().len());
            let out = k.to_interchange();
            assert_eq!(out.as_str(), text.trim(), "exported interchange text");
            assert_eq!(ConfiguredPsk::parse(&out), Ok(k), "export → parse");
        }
        Err(e) => {
            feat.add_variant(F_KEY, &e);
            assert!(!e.to_string().is_empty());
        }
    }
}

fn agreement(mode: u8, bytes: &[u8], feat: &mut Features) {
    let transform = match mode & 3 {
        0 => KeyTransform::None,
        1 => KeyTransform::Sha256,
        2 => KeyTransform::Sha384,
        _ => return,
    };
    let key_len = match transform {
        KeyTransform::Sha256 => 32,
        KeyTransform::Sha384 => 48,
        KeyTransform::None if mode & 0x20 != 0 => 48,
        KeyTransform::None => 32,
    };
    let (key, rest) = bytes.split_at(key_len.min(bytes.len()));
    let mut key = key.to_vec();
    key.resize(key_len, 0xa5);
    let Ok(configured) = ConfiguredPsk::new(transform, &key) else {
        panic!("a {key_len}-byte key refused for {transform:?}");
    };
    let rest = String::from_utf8_lossy(rest);
    let rest: &str = &rest;
    let (hostnqn, subnqn) = rest.split_once(' ').unwrap_or((rest, "nqn.s"));
    let version = if mode & 4 == 0 {
        IdentityVersion::V0
    } else {
        IdentityVersion::V1
    };
    let host_derivation = derivation(mode & 8 != 0);
    let preferred = derivation(mode & 0x10 != 0);
    let (id, host_psk) = match configured.host_identity(hostnqn, subnqn, version, host_derivation) {
        Ok(v) => v,
        Err(e) => {
            feat.add_variant(F_AGREE, &e);
            assert!(
                matches!(e, PskError::Nqn(_) | PskError::ContextTooLong { .. }),
                "host derivation failed: {e}"
            );
            return;
        }
    };
    assert_eq!(id.hash, configured.hash());
    assert_eq!(host_psk.hash(), configured.hash());
    assert_eq!(host_psk.key().len(), configured.hash().len());
    let wire = id.to_string();
    // NQNs are UTF-8 but identities printable ASCII: a host NQN beyond ASCII makes an identity
    // that no target parses (noticed, left as is: such NQNs are not seen in practice).
    if !wire.is_ascii() {
        feat.add(F_AGREE, 1);
        assert!(PskIdentity::parse(wire.as_bytes()).is_err());
        return;
    }
    assert_eq!(
        PskIdentity::parse(wire.as_bytes()).as_ref(),
        Ok(&id),
        "the host's identity does not parse back"
    );
    let same_key = resolve_identity(wire.as_bytes(), preferred, |_| Some(configured.clone()));
    let must_agree = host_derivation == preferred
        || (version == IdentityVersion::V1 && transform != KeyTransform::None);
    match same_key {
        Ok((got_id, target_psk)) => {
            feat.add(F_AGREE, 2 | (u64::from(target_psk == host_psk) << 4));
            assert_eq!(got_id, id);
            if must_agree {
                assert!(
                    target_psk == host_psk,
                    "host and target derive different PSKs"
                );
            }
        }
        Err(e) => {
            // Only the context limit of the preferred derivation may stop the target.
            feat.add_variant(F_AGREE, &e);
            assert!(
                !must_agree || preferred != host_derivation,
                "the target refused the host's own identity: {e}"
            );
            assert!(
                matches!(e, ResolveError::Psk(PskError::ContextTooLong { .. })),
                "{e}"
            );
        }
    }
    if version == IdentityVersion::V1 {
        let mut other = key.clone();
        other[0] ^= 1;
        let Ok(wrong) = ConfiguredPsk::new(transform, &other) else {
            panic!("a {key_len}-byte key refused");
        };
        let r = resolve_identity(wire.as_bytes(), preferred, |_| Some(wrong));
        assert!(
            matches!(r, Err(ResolveError::Psk(PskError::DigestMismatch))),
            "another key resolved a version-1 identity: {r:?}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The harness itself: the generated agreement seeds reach the host ↔ target comparison
    /// (feature 2 with the "same PSK" bit).
    #[test]
    fn agreement_seeds_compare_keys() {
        let mut n = 0;
        for (target, name, bytes) in crate::seeds::all() {
            if target != "tls_psk" || !name.starts_with("agree-") {
                continue;
            }
            let mut feat = Features::default();
            run(&bytes, &mut feat);
            let agreed = (u64::from(F_AGREE) << 56) ^ (2 | (1 << 4));
            assert!(feat.as_slice().contains(&agreed), "{name}");
            n += 1;
        }
        assert_eq!(n, 6);
    }
}
