//! Arbitrary text into the CSI driver's decoders and derived names (`ebof_csi::names`): the
//! volume context's listener list a CO hands back to the node (`tcp:ADDR:PORT,…`), and the
//! names a CSI volume or snapshot name turns into.
//!
//! Input: the first byte picks the decoder; the rest, as (lossy) UTF-8, is its text.
//!
//! Checked, beyond "never panics":
//! - listeners accepted ⇒ at least one, every port non-zero, and formatting them parses back
//!   to the same paths;
//! - a name the spec allows ⇒ its volume NQN is a volume ID of at most 81 bytes, its snapshot
//!   name a snapshot ID of at most 61 of `[a-z0-9.-]` after the prefix, both stable, and its
//!   UUID 36 characters.

use crate::Features;
use ebof_csi::names;

const F_LISTENERS_OK: u8 = 1;
const F_LISTENERS_ERR: u8 = 2;
const F_NAME_OK: u8 = 3;
const F_NAME_ERR: u8 = 4;

/// One input: decode it and check what the decoder says.
pub fn run(data: &[u8], feat: &mut Features) {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    if sel & 1 == 0 {
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

/// Which of `kinds` an error message is (its index), or `kinds.len()` for none: a feature per
/// kind of refusal, not per message (messages quote the input).
fn kind(message: &str, kinds: &[&str]) -> u64 {
    kinds
        .iter()
        .position(|k| message.contains(k))
        .unwrap_or(kinds.len()) as u64
}
