//! How a volume authenticates its node: the StorageClass parameter `auth`, and the
//! DH-HMAC-CHAP secrets of each (volume, node) pair.
//!
//! The controller installs the pair's secrets on the volume's box at ControllerPublishVolume
//! (`PUT …/hosts/{node}/dhchap`, [`ebof_api::hostkeys`]) and hands them to that node in the
//! publish context; the node connects with `nvme connect --dhchap-secret=…
//! --dhchap-ctrl-secret=…` (both directions authenticate). ControllerUnpublishVolume removes
//! them with the node's host NQN.
//!
//! The secrets are *derived*, not drawn at random: HMAC-SHA-256 under a seed that is itself
//! derived from the box's management token, over the volume ID and the node ID. A retried or
//! repeated ControllerPublishVolume (the attacher does that) therefore installs and returns the
//! very key the node may already be connected with, so the kernel's reconnects after a network
//! blip keep authenticating; and the controller stays stateless (ADR 0023). Whoever holds the
//! box's token can compute them, but that holder can already install any key on the box, so
//! the derivation adds no one to those who can open a volume.

use hmac::{Hmac, Mac};
use nvme_auth::{DhchapSecret, KeyTransform};
use sha2::Sha256;
use std::fmt;
use zeroize::Zeroizing;

/// What a StorageClass may ask for in `auth`, and what the driver does by default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthMode {
    /// The node's host NQN on the subsystem's host list is the only check.
    None,
    /// DH-HMAC-CHAP with a secret per (volume, node), both directions (the default).
    Dhchap,
}

impl AuthMode {
    /// The default: DH-HMAC-CHAP works with every Linux node the driver supports (host
    /// support since Linux 6.0, nvme-cli 2.0) and needs nothing on the node; TLS would need
    /// tlshd and a PSK in the node's keyring.
    pub const DEFAULT: AuthMode = AuthMode::Dhchap;

    /// Its name in StorageClass parameters and the volume context.
    pub fn name(self) -> &'static str {
        match self {
            AuthMode::None => "none",
            AuthMode::Dhchap => "dhchap",
        }
    }

    /// Parse a StorageClass `auth` value (or the volume context's); `tls` and `both` are
    /// refused with the reason.
    pub fn parse(v: &str) -> Result<AuthMode, String> {
        match v {
            "none" => Ok(AuthMode::None),
            "dhchap" => Ok(AuthMode::Dhchap),
            "tls" | "both" => Err(format!(
                "auth: {v:?} is not supported yet: NVMe/TCP TLS needs a PSK per node in the node's kernel keyring for tlshd, and a box reads its TLS PSKs only at start, so the driver cannot provision one per volume; use auth: dhchap (the default) or none"
            )),
            other => Err(format!(
                "auth: {other:?} is not one of none, dhchap (default), tls, both"
            )),
        }
    }
}

/// The secret a box's keys are derived from (from its management token). Never shown.
#[derive(Clone)]
pub struct KeySeed(Zeroizing<[u8; 32]>);

impl fmt::Debug for KeySeed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KeySeed(<redacted>)")
    }
}

/// The DH-HMAC-CHAP secrets of one (volume, node) pair, as `DHHC-1:01:…:` text. Never shown.
#[derive(Clone, PartialEq, Eq)]
pub struct DhchapPair {
    /// The node's secret (`--dhchap-secret`).
    pub host: Zeroizing<String>,
    /// The box's secret (`--dhchap-ctrl-secret`): the node checks the box too.
    pub ctrl: Zeroizing<String>,
}

impl fmt::Debug for DhchapPair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("DhchapPair(<redacted>)")
    }
}

fn hmac(key: &[u8], parts: &[&[u8]]) -> Zeroizing<[u8; 32]> {
    // HMAC takes keys of any length: `new_from_slice` cannot fail for it.
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("HMAC accepts every key length"));
    for p in parts {
        m.update(&(p.len() as u64).to_be_bytes());
        m.update(p);
    }
    let mut out = Zeroizing::new([0u8; 32]);
    out.copy_from_slice(&m.finalize().into_bytes());
    out
}

impl KeySeed {
    /// The seed of a box whose management token is `token`.
    pub fn from_token(token: &str) -> KeySeed {
        KeySeed(hmac(token.as_bytes(), &[b"ebof-csi dhchap seed v1"]))
    }

    /// The secrets of `volume` on `node`: distinct per pair and per direction.
    pub fn dhchap(&self, volume: &str, node: &str) -> DhchapPair {
        let secret = |dir: &[u8]| {
            let k = hmac(&self.0[..], &[dir, volume.as_bytes(), node.as_bytes()]);
            // 32 bytes is a length DH-HMAC-CHAP takes: `from_key` cannot fail here.
            DhchapSecret::from_key(KeyTransform::Sha256, &k[..])
                .map(|s| s.encode())
                .unwrap_or_else(|_| unreachable!("a 32-byte key is valid"))
        };
        DhchapPair {
            host: secret(b"host"),
            ctrl: secret(b"ctrl"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_and_tls_is_refused_with_the_reason() {
        assert_eq!(AuthMode::parse("none"), Ok(AuthMode::None));
        assert_eq!(AuthMode::parse("dhchap"), Ok(AuthMode::Dhchap));
        assert_eq!(AuthMode::DEFAULT, AuthMode::Dhchap);
        for m in [AuthMode::None, AuthMode::Dhchap] {
            assert_eq!(AuthMode::parse(m.name()), Ok(m));
        }
        for t in ["tls", "both"] {
            let e = AuthMode::parse(t).unwrap_err();
            assert!(e.contains("not supported") && e.contains("dhchap"), "{e}");
        }
        assert!(AuthMode::parse("DHCHAP").is_err());
    }

    #[test]
    fn secrets_are_stable_distinct_valid_and_never_shown() {
        let s = KeySeed::from_token("token-1");
        let a = s.dhchap("vol-a", "nqn.node-1");
        assert_eq!(
            a,
            s.dhchap("vol-a", "nqn.node-1"),
            "the same pair, the same key"
        );
        assert_ne!(a.host, a.ctrl);
        assert_ne!(a, s.dhchap("vol-b", "nqn.node-1"));
        assert_ne!(a, s.dhchap("vol-a", "nqn.node-2"));
        assert_ne!(
            a,
            KeySeed::from_token("token-2").dhchap("vol-a", "nqn.node-1")
        );
        // No ambiguity between (volume, node) splits.
        assert_ne!(s.dhchap("ab", "c"), s.dhchap("a", "bc"));
        for k in [&a.host, &a.ctrl] {
            assert!(k.starts_with("DHHC-1:01:"), "{}", k.len());
            assert_eq!(DhchapSecret::parse(k).unwrap().key_len(), 32);
        }
        let shown = format!("{a:?} {s:?}");
        assert!(!shown.contains("DHHC"), "{shown}");
    }
}
