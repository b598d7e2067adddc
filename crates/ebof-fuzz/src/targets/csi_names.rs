//! Arbitrary text into the CSI driver's decoders and derived names (`ebof_csi::names`): the
//! volume context's listener list a CO hands back to the node (`tcp:ADDR:PORT,…`), and the
//! names a CSI volume or snapshot name turns into.
//!
//! Also what the node and the controller read besides: `blkid -p -o export` output (is a
//! device empty?), the StorageClass `auth` value, and the per-(volume, node) DH-HMAC-CHAP
//! secrets derived from two texts.
//!
//! Input: the first byte picks the decoder; the rest, as (lossy) UTF-8, is its text.
//!
//! Checked, beyond "never panics":
//! - listeners accepted ⇒ at least one, every port non-zero, and formatting them parses back
//!   to the same paths;
//! - a name the spec allows ⇒ its volume NQN is a volume ID of at most 81 bytes, its snapshot
//!   name a snapshot ID of at most 61 of `[a-z0-9.-]` after the prefix, both stable, and its
//!   UUID 36 characters;
//! - blkid output with status 0 is never "empty"; a file system named is a `TYPE=` line;
//! - an `auth` accepted names itself; derived secrets are valid 32-byte `DHHC-1:01:` secrets,
//!   stable, and the two directions differ;
//! - mutable parameters (`KEY=VALUE` lines, a VolumeAttributesClass's) accepted are QoS keys
//!   only, with limits the box takes.

use crate::Features;
use ebof_csi::names;

const F_LISTENERS_OK: u8 = 1;
const F_LISTENERS_ERR: u8 = 2;
const F_NAME_OK: u8 = 3;
const F_NAME_ERR: u8 = 4;
const F_BLKID: u8 = 5;
const F_AUTH: u8 = 6;
const F_MUTABLE: u8 = 7;

/// One input: decode it and check what the decoder says.
pub fn run(data: &[u8], feat: &mut Features) {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    if sel & 7 == 3 {
        node_and_auth(&text, feat);
    } else if sel & 1 == 0 {
        match names::parse_listeners(&text) {
            Ok(paths) => {
                feat.add(F_LISTENERS_OK, paths.len().min(8) as u64);
                assert!(!paths.is_empty());
                assert!(paths.iter().all(|p| p.port != 0));
                let again = names::parse_listeners(&names::format_listeners(&paths))
                    .unwrap_or_else(|e| panic!("formatted listeners refused: {e}"));
                assert_eq!(again, paths);
            }
            Err(e) => feat.add(
                F_LISTENERS_ERR,
                kind(
                    &e,
                    &[
                        "only tcp",
                        "no port",
                        "not an IP",
                        "bad port",
                        "no listener",
                    ],
                ),
            ),
        }
    } else {
        match names::check_name(&text) {
            Ok(()) => {
                feat.add(F_NAME_OK, text.len().min(130) as u64 / 16);
                let nqn = names::volume_nqn(&text);
                assert!(nqn.len() <= 81 && names::is_volume_id(&nqn), "{nqn}");
                assert_eq!(nqn, names::volume_nqn(&text));
                let snap = names::snapshot_name(&text);
                assert!(snap.len() <= 61 && names::is_snapshot_id(&snap), "{snap}");
                assert_eq!(names::volume_uuid(&text).len(), 36);
            }
            Err(e) => feat.add_str(
                F_NAME_ERR,
                e.split(' ').take(3).collect::<String>().as_str(),
            ),
        }
    }
}

/// blkid's verdict, the `auth` parameter and the secrets derived from (volume, node) texts.
fn node_and_auth(text: &str, feat: &mut Features) {
    match ebof_csi::node::blkid_verdict(text) {
        Ok(Some(t)) => {
            feat.add(F_BLKID, 0);
            assert!(
                text.lines().any(|l| l.trim() == format!("TYPE={t}")),
                "{t:?} not a TYPE line"
            );
        }
        Ok(None) => panic!("status 0 taken for an empty device"),
        Err(e) => feat.add(
            F_BLKID,
            1 + kind(&e, &["partition table", "unnamed", "signature"]),
        ),
    }
    let auth = ebof_csi::keys::AuthMode::parse(text);
    feat.add(F_AUTH, auth.is_ok() as u64);
    if let Ok(m) = auth {
        assert_eq!(m.name(), text);
    }
    let params: std::collections::HashMap<String, String> = text
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    match ebof_csi::controller::mutable_qos(&params) {
        Ok(q) => {
            feat.add(F_MUTABLE, q.is_some() as u64);
            if let Some(q) = q {
                assert!(q.check("").is_ok(), "{q:?} accepted");
            }
            for k in params.keys() {
                assert!(
                    !matches!(k.as_str(), "pool" | "auth" | "replicas"),
                    "{k} accepted as mutable"
                );
            }
        }
        Err(e) => feat.add(
            F_MUTABLE,
            2 + kind(&e, &["cannot change", "unknown", "integer"]),
        ),
    }
    let (volume, node) = text.split_once('\n').unwrap_or((text, ""));
    let seed = ebof_csi::keys::KeySeed::from_token(node);
    let pair = seed.dhchap(volume, node);
    assert_eq!(pair, seed.dhchap(volume, node));
    assert_ne!(pair.host, pair.ctrl);
    for k in [&pair.host, &pair.ctrl] {
        let s = nvme_auth::DhchapSecret::parse(k).unwrap_or_else(|e| panic!("derived secret: {e}"));
        assert_eq!(s.key_len(), 32);
    }
}

/// Which of `kinds` an error message is (its index), or `kinds.len()` for none: a feature per
/// kind of refusal, not per message (messages quote the input).
fn kind(message: &str, kinds: &[&str]) -> u64 {
    kinds
        .iter()
        .position(|k| message.contains(k))
        .unwrap_or(kinds.len()) as u64
}
