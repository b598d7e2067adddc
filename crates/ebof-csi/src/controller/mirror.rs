//! Replicated volumes (issue 34): StorageClass parameter `replicas: "2"`.
//!
//! **What a replicated volume is.** The same subsystem (NQN = volume ID), namespace 1, UUID
//! and size on two boxes, the namespace added with `mirror = { peer, role }`
//! (`docs/adr/0028-replicated-volumes.md`): the **primary** copy names the secondary box's NVMe/TCP listener as its
//! peer and replicates every write to it; the **secondary** names the primary's. The boxes do
//! the rest (the replication link, ANA states of the copies' paths, the write-intent bitmap,
//! resync, promotion); the driver only places, makes, publishes, grows and deletes both copies.
//! Each box chooses the copy's ANA group itself (a mirrored namespace has a group of its own).
//!
//! **Placement.** Two distinct boxes with a pool that fits the size (and the `pool`
//! parameter), both in the zones a topology requirement allows, the primary first in the
//! preferred ones. Among the pairs: boxes in different zones first (a zone lost keeps one
//! copy); then pairs without the witness box (a copy on the witness box would leave its peer
//! without a lease to promote itself when that box dies); then free bytes and the rendezvous
//! weight, as for one copy. Two boxes in one zone are used only when no pair spans zones,
//! with a warning in the log. Fewer than two boxes that fit: RESOURCE_EXHAUSTED.
//!
//! **Creation** extends the create protocol of [`super`] (ADR 0023): steps 1 and 2 (the look,
//! the subsystem on the primary's box, the yield check) are those of one copy, so one attempt
//! at most passes them; then
//! 3. the primary's namespace, with `mirror = { peer = <secondary's listener>, role =
//!    "primary" }`. From here the volume exists and its pair is fixed by the primary's peer;
//! 4. the secondary: its subsystem (one already there is adopted) and its namespace with
//!    `mirror = { peer = <primary's listener>, role = "secondary" }` (one already there must
//!    name the primary).
//!
//! The answer is given only once both copies are complete. A crash or a race between 3 and 4
//! leaves a half-created volume: a primary alone, or with an unfinished subsystem on its
//! peer's box. The next CreateVolume finds the primary (step 1) and finishes step 4 (the
//! peer's box is read from the primary's `mirror.peer`, so every controller finishes the
//! same pair); the next DeleteVolume deletes what there is. Two rules keep a half-made
//! secondary from being swept as an unfinished attempt: step 1 never counts the box a
//! complete copy names as its peer among the leftovers, and an attempt that yields in step 2
//! leaves its subsystem where a complete copy names that box as its peer (it is that copy's
//! secondary in the making), and otherwise removes it only while it has no namespace.
//! A secondary alone (its primary's copy gone: a box rebuilt, a volume half deleted) is never
//! completed by making a primary next to it (a new primary would copy its empty disk over
//! the secondary's data): CreateVolume answers UNAVAILABLE and names the box to promote.
//!
//! **Deletion** removes the secondary's copy first, then the primary's: a DeleteVolume cut
//! short leaves a primary alone, which the next DeleteVolume removes.
//!
//! **Publishing**: the node's host NQN and DH-HMAC-CHAP keys on both boxes (one key pair for
//! the volume, derived from the seed of the pair's box whose API address sorts first, since
//! the node connects every path with one secret), and the volume context lists every
//! listener of both boxes (and `replicas = 2`); the node connects them all, with
//! `--ctrl-loss-tmo=-1` (a box back after a long loss may serve the volume next: its paths
//! must not have been dropped), and finds the one block device by the namespace UUID (native
//! multipath gives one head per subsystem). A box that does not answer
//! does not stop a publish (a pod must start when one box is down: that is what a second copy
//! is for) as long as one copy took the node; its host list catches up at the next publish.
//!
//! **GetCapacity** with `replicas: "2"` answers half the free bytes, and as the largest volume
//! what the second largest box can hold.
//!
//! **Expansion** grows the secondary first, then the primary (a primary larger than its peer
//! would replicate writes past the peer's end); both boxes must answer.
//!
//! **Snapshots are taken on both copies.** The driver asks the primary; the primary holds
//! the volume's writes and has its secondary take the same-named snapshot through the
//! replication link before taking its own, so both are one point in time (ADR 0028, decision
//! 15), and the snapshot survives the loss of either box. While the copies are not in sync
//! (degraded, resyncing) the box refuses with `snapshot-busy` and CreateSnapshot answers
//! UNAVAILABLE: the sidecar retries. DeleteSnapshot deletes it on every box that has it.
//! Restoring a snapshot into a `replicas: "2"` volume: the primary is the snapshot cloned on
//! its box with `mirror` (the clone request's), the secondary an empty namespace of the
//! clone's size on another box, which the primary copies itself to whole (a new secondary);
//! then both grow to the size asked, the secondary first (`create.rs` `grow_copies`).
//!
//! **The witness.** The boxes decide who is primary through a witness (`[mirror] witness`
//! in each box's configuration; the driver does not configure boxes). The boxes file may name
//! it with a top-level `witness = "ADDR:PORT"` (see [`crate::boxes`]): then no copy is placed
//! on the box listening at that address when another pair exists. The boxes of a
//! replicated volume also need disjoint `[target] cntlid_min`/`cntlid_max` ranges (a host
//! refuses two controllers with one ID in a subsystem).
//!
//! This module holds the box calls the mirror adds: reading each copy's mirror from the
//! state, and adding a namespace with `mirror`.

use ebof_api::{ApiError, Client, ClientError, NamespaceChanged, NamespaceRequest, State, routes};
use serde::Deserialize;
use std::collections::BTreeMap;

/// The role a copy has now, as its box reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// Serves the hosts' I/O and replicates writes to its peer.
    Primary,
    /// Takes the primary's replicated writes; its paths are inaccessible to hosts.
    Secondary,
}

impl Role {
    /// As the configuration and the API write it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Role::Primary => "primary",
            Role::Secondary => "secondary",
        }
    }
}

/// A copy's mirror as its box reports it (the namespace view's `mirror`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CopyMirror {
    /// Its role now.
    pub(crate) role: Role,
    /// The peer's NVMe listener, `ADDR:PORT`.
    pub(crate) peer: String,
    /// Its replication state as the box reports it (`in-sync`, `degraded`, `resyncing`,
    /// `connecting`; empty when not reported), and whether it lost its lease (fenced).
    pub(crate) state: (String, bool),
}

/// Each volume's copy mirror on one box, by subsystem NQN (namespace 1 only).
pub(crate) type Mirrors = BTreeMap<String, CopyMirror>;

#[derive(Deserialize, Default)]
struct ShadowState {
    #[serde(default)]
    subsystems: Vec<ShadowSubsystem>,
}

#[derive(Deserialize)]
struct ShadowSubsystem {
    nqn: String,
    #[serde(default)]
    namespaces: Vec<ShadowNamespace>,
}

#[derive(Deserialize)]
struct ShadowNamespace {
    nsid: u32,
    #[serde(default)]
    mirror: Option<ShadowMirror>,
}

#[derive(Deserialize)]
struct ShadowMirror {
    #[serde(default)]
    role: String,
    #[serde(default)]
    peer: String,
    #[serde(default)]
    state: String,
    #[serde(default)]
    fenced: bool,
}

/// The answer of a request to box `c` on `uri`: a `T` on 2xx, its [`ApiError`] otherwise (as
/// the client's typed calls answer).
fn answer<T: serde::de::DeserializeOwned>(
    c: &Client,
    uri: &str,
    (status, body): (u16, Vec<u8>),
) -> Result<T, ClientError> {
    let transport = |message: String| ClientError::Transport {
        endpoint: c.endpoint(),
        message,
    };
    if (200..300).contains(&status) {
        serde_json::from_slice(&body)
            .map_err(|e| transport(format!("unexpected answer to {uri}: {e}")))
    } else {
        match serde_json::from_slice::<ApiError>(&body) {
            Ok(e) => Err(ClientError::Api(e)),
            Err(_) => Err(transport(format!(
                "HTTP {status} from {uri}: {}",
                String::from_utf8_lossy(&body)
            ))),
        }
    }
}

/// The mirrors of a state's JSON: namespace 1 of each subsystem that has one.
fn mirrors_of(body: &[u8]) -> Mirrors {
    let shadow: ShadowState = serde_json::from_slice(body).unwrap_or_default();
    let mut out = Mirrors::new();
    for s in shadow.subsystems {
        let Some(m) = s
            .namespaces
            .into_iter()
            .find(|n| n.nsid == crate::names::NSID)
            .and_then(|n| n.mirror)
        else {
            continue;
        };
        let role = if m.role.eq_ignore_ascii_case("primary") {
            Role::Primary
        } else if m.role.eq_ignore_ascii_case("secondary") {
            Role::Secondary
        } else {
            continue; // not a role this driver knows: not a copy it can pair
        };
        out.insert(
            s.nqn,
            CopyMirror {
                role,
                peer: m.peer,
                state: (m.state, m.fenced),
            },
        );
    }
    out
}

/// `GET /v1/state` of box `c`, with each volume's mirror.
pub(crate) fn read_state(c: &Client) -> Result<(State, Mirrors), ClientError> {
    let raw = c.raw("GET", routes::STATE, None)?;
    let mirrors = if (200..300).contains(&raw.0) {
        mirrors_of(&raw.1)
    } else {
        Mirrors::new()
    };
    answer::<State>(c, routes::STATE, raw).map(|s| (s, mirrors))
}

/// `POST …/namespaces` on box `c`: `req` with `mirror = { peer, role }`.
pub(crate) fn add_mirrored_namespace(
    c: &Client,
    nqn: &str,
    req: &NamespaceRequest,
    peer: &str,
    role: Role,
) -> Result<NamespaceChanged, ClientError> {
    let mut body = serde_json::to_value(req).unwrap_or_default();
    if let Some(o) = body.as_object_mut() {
        o.insert(
            "mirror".into(),
            serde_json::json!({ "peer": peer, "role": role.name() }),
        );
    }
    let uri = routes::fill(routes::NAMESPACES, &[nqn]);
    let raw = c.raw("POST", &uri, Some(body.to_string()))?;
    answer(c, &uri, raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mirrors_are_read_from_the_state() {
        let j = br#"{"subsystems":[
            {"nqn":"a","namespaces":[{"nsid":1,"mirror":{"role":"primary","peer":"10.0.0.2:4420","epoch":3}}]},
            {"nqn":"b","namespaces":[{"nsid":1,"mirror":{"role":"secondary","peer":"10.0.0.1:4420"}}]},
            {"nqn":"c","namespaces":[{"nsid":1}]},
            {"nqn":"d","namespaces":[{"nsid":2,"mirror":{"role":"primary","peer":"x"}}]}]}"#;
        let m = mirrors_of(j);
        assert_eq!(m.len(), 2);
        assert_eq!(m["a"].role, Role::Primary);
        assert_eq!(m["a"].peer, "10.0.0.2:4420");
        assert_eq!(m["a"].state, (String::new(), false));
        assert_eq!(m["b"].role, Role::Secondary);
        assert!(mirrors_of(b"not json").is_empty());
    }

    /// What a box answers is peer input: nothing it sends makes the reading panic; a state
    /// whose mirrors are not what they should be has none.
    #[test]
    fn odd_states_have_no_mirrors() {
        for j in [
            &b"null"[..],
            b"[]",
            b"{}",
            br#"{"subsystems":7}"#,
            br#"{"subsystems":[{"nqn":1}]}"#,
            br#"{"subsystems":[{"nqn":"a","namespaces":[{"nsid":"1","mirror":{}}]}]}"#,
            br#"{"subsystems":[{"nqn":"a","namespaces":[{"nsid":1,"mirror":[1]}]}]}"#,
            br#"{"subsystems":[{"nqn":"a","namespaces":[{"nsid":1,"mirror":{}}]}]}"#,
            br#"{"subsystems":[{"nqn":"a","namespaces":[{"nsid":1,"mirror":{"role":"x"}}]}]}"#,
            br#"{"subsystems":[{"nqn":"a","namespaces":[{"nsid":4294967296}]}]}"#,
        ] {
            assert!(mirrors_of(j).is_empty(), "{}", String::from_utf8_lossy(j));
        }
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for n in 0..2000 {
            let bytes: Vec<u8> = (0..(n % 97))
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    b"{}[]\":,0123456789abcnqsmirolepd "[(seed % 32) as usize]
                })
                .collect();
            let _ = mirrors_of(&bytes);
        }
    }
}
