//! The create protocol of the module docs (ADR 0023) as decisions on what the controller sees:
//! how many attempts and when, what the first look at the boxes means, when an attempt yields
//! to a rival, and what a box's refusal means. The calls to the boxes stay in
//! [`super::create`]; this type holds no I/O, so each rule has a unit test.

use super::Found;
use super::mirror::Role;
use crate::names;
use std::time::Duration;

/// Attempts of the create protocol before ABORTED (the CO retries later).
pub(super) const CREATE_ATTEMPTS: u32 = 6;

/// One CreateVolume call's way through the protocol: which attempt it is on.
#[derive(Debug, Default)]
pub(super) struct Protocol {
    /// Attempts started so far.
    started: u32,
}

/// What the first look at every box (step 1) says about the volume.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Look {
    /// It exists: complete (with its namespace) on box `on`, the first such box in box
    /// order (a replicated volume's primary before its secondary); unfinished attempts on the
    /// boxes `leftovers` are to be removed.
    Exists {
        /// The box that holds the volume (the serving copy).
        on: usize,
        /// For a replicated volume, the box its copy on `on` names as the peer: its other
        /// copy, complete or in the making (never a leftover).
        partner: Option<usize>,
        /// Boxes with an unfinished attempt (a subsystem without its namespace).
        leftovers: Vec<usize>,
    },
    /// It does not exist yet: make it, resuming the unfinished attempt on box `resume` if
    /// there is one (the first by box order).
    Make {
        /// The box of the first unfinished attempt.
        resume: Option<usize>,
    },
}

/// Where a replicated volume that exists stands (step 4 of [`super::mirror`]).
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Pair {
    /// One copy, not mirrored.
    Single,
    /// Both copies are complete.
    Whole,
    /// A primary whose secondary is missing or unfinished on box `on`: make it.
    MakeSecondary {
        /// The secondary's box.
        on: usize,
    },
    /// A mirrored copy whose peer is none of the boxes read: nothing to do about it here.
    PeerUnknown,
    /// A secondary whose primary is gone: never completed (a new primary would overwrite
    /// the secondary's data); someone promotes it.
    Orphan,
}

/// What a refusal of the box means for the attempt.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Start the next attempt (a rival got there first, or our subsystem went).
    Retry,
    /// Remove our subsystem, then start the next attempt (another pool may have room).
    FreeAndRetry,
    /// Remove our subsystem and fail the call with the box's error.
    FreeAndFail,
    /// Fail the call with the box's error (nothing of ours to remove).
    Fail,
}

fn complete(f: &Found) -> bool {
    f.sub.namespaces.iter().any(|n| n.nsid == names::NSID)
}

impl Protocol {
    /// A call at its start: no attempt made yet.
    pub(super) fn new() -> Protocol {
        Protocol::default()
    }

    /// Start the next attempt: its number (0 first), or `None` when every attempt is used.
    pub(super) fn next_attempt(&mut self) -> Option<u32> {
        (self.started < CREATE_ATTEMPTS).then(|| {
            self.started += 1;
            self.started - 1
        })
    }

    /// The attempt under way (0 first).
    fn attempt(&self) -> u32 {
        self.started.saturating_sub(1)
    }

    /// How long to wait before attempt `attempt` of volume `name`: nothing before the first,
    /// then 50 ms and a jitter below 200 ms that `seed` varies, so that rivals do not retry in
    /// lockstep.
    pub(super) fn pause(attempt: u32, name: &str, seed: &str) -> Option<Duration> {
        (attempt > 0).then(|| {
            let jitter = super::placement::weight(name, &format!("{attempt}:{seed}")) % 200;
            Duration::from_millis(50 + jitter)
        })
    }

    /// A seed for [`Protocol::pause`] that differs per process and call.
    pub(super) fn seed() -> String {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        format!("{}:{nanos}", std::process::id())
    }

    /// Step 1: what the subsystems named after the volume, box by box, say.
    pub(super) fn look(found: &[Found]) -> Look {
        match super::Controller::complete(found) {
            Some(f) => Look::Exists {
                on: f.idx,
                partner: f.peer,
                leftovers: found
                    .iter()
                    .filter(|o| o.idx != f.idx && Some(o.idx) != f.peer && !complete(o))
                    .map(|o| o.idx)
                    .collect(),
            },
            None => Look::Make {
                resume: found.first().map(|f| f.idx),
            },
        }
    }

    /// Step 2 on box `idx`: whether our subsystem is still to be made there (an unfinished
    /// attempt there is resumed instead).
    pub(super) fn needs_subsystem(found: &[Found], idx: usize) -> bool {
        !found.iter().any(|f| f.idx == idx)
    }

    /// Step 2 on box `idx`: the boxes whose unfinished attempts go before the check (ours
    /// cannot pass it beside them).
    pub(super) fn others(found: &[Found], idx: usize) -> Vec<usize> {
        found
            .iter()
            .filter(|f| f.idx != idx)
            .map(|f| f.idx)
            .collect()
    }

    /// Step 2's check, on the second look: whether the attempt on box `idx` yields to a
    /// subsystem of the same name on another box.
    pub(super) fn yields(again: &[Found], idx: usize) -> bool {
        again.iter().any(|f| f.idx != idx)
    }

    /// A yielding attempt's subsystem on box `idx` stays when a complete copy on another box
    /// names `idx` as its peer: it is that copy's secondary in the making.
    pub(super) fn keeps(again: &[Found], idx: usize) -> bool {
        again
            .iter()
            .any(|f| f.idx != idx && complete(f) && f.peer == Some(idx))
    }

    /// Where the volume that exists on box `on` stands as a pair.
    pub(super) fn pair(found: &[Found], on: usize) -> Pair {
        let Some(f) = found.iter().find(|f| f.idx == on) else {
            return Pair::Single;
        };
        let Some(m) = &f.mirror else {
            return Pair::Single;
        };
        let Some(p) = f.peer.filter(|&p| p != on) else {
            return Pair::PeerUnknown;
        };
        if found.iter().any(|o| o.idx == p && complete(o)) {
            Pair::Whole
        } else if m.role == Role::Primary {
            Pair::MakeSecondary { on: p }
        } else {
            Pair::Orphan
        }
    }

    /// Making the subsystem was refused with API `code`.
    pub(super) fn subsystem_refused(code: Option<&str>) -> Verdict {
        match code {
            Some("duplicate-nqn") => Verdict::Retry,
            _ => Verdict::Fail,
        }
    }

    /// Step 3, adding the namespace (or cloning it from a snapshot when `from_snapshot`), was
    /// refused with API `code`.
    pub(super) fn namespace_refused(&self, code: Option<&str>, from_snapshot: bool) -> Verdict {
        match code {
            Some("duplicate-nsid") | Some("unknown-subsystem") => Verdict::Retry,
            Some("pool-full") | Some("no-space") => {
                if self.attempt() + 1 < CREATE_ATTEMPTS && !from_snapshot {
                    Verdict::FreeAndRetry
                } else {
                    Verdict::FreeAndFail
                }
            }
            _ => Verdict::FreeAndFail,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ebof_api::{NamespaceView, SubsystemView};

    const NQN: &str = "nqn.2026-11.io.ebof.csi:vol";

    /// The subsystem of the volume on box `idx`, with its namespace when `complete`.
    fn on(idx: usize, complete: bool) -> Found {
        // From JSON, so the view's later optional fields need no mention here.
        let ns: NamespaceView = serde_json::from_value(serde_json::json!({
            "nsid": names::NSID, "backend": "file", "size": 1u64 << 30, "block_size": 512,
            "uuid": "", "thin": true,
        }))
        .unwrap();
        Found {
            idx,
            sub: SubsystemView {
                nqn: NQN.into(),
                serial: String::new(),
                model: "ebof-csi".into(),
                allow_any_host: false,
                hosts: vec![],
                namespaces: if complete { vec![ns] } else { vec![] },
            },
            mirror: None,
            peer: None,
        }
    }

    /// A copy of a replicated volume on box `idx` (complete) in `role`, naming box `peer`.
    fn copy(idx: usize, role: Role, peer: usize) -> Found {
        Found {
            mirror: Some(super::super::mirror::CopyMirror {
                role,
                peer: format!("127.0.0.{peer}:4420"),
                state: ("in-sync".into(), false),
            }),
            peer: Some(peer),
            ..on(idx, true)
        }
    }

    #[test]
    fn attempts_are_counted_and_paced() {
        let mut p = Protocol::new();
        let got: Vec<u32> = std::iter::from_fn(|| p.next_attempt()).collect();
        assert_eq!(got, (0..CREATE_ATTEMPTS).collect::<Vec<_>>());
        assert_eq!(p.next_attempt(), None, "then ABORTED");
        assert_eq!(Protocol::pause(0, "v", "s"), None, "the first goes at once");
        for a in 1..CREATE_ATTEMPTS {
            let d = Protocol::pause(a, "v", "s").unwrap();
            assert!(d >= Duration::from_millis(50) && d < Duration::from_millis(250));
        }
        let seeds: std::collections::BTreeSet<Duration> = (0..64)
            .map(|i| Protocol::pause(1, "v", &format!("{i}")).unwrap())
            .collect();
        assert!(
            seeds.len() > 8,
            "rivals do not retry in lockstep: {seeds:?}"
        );
    }

    #[test]
    fn the_first_look_finds_the_volume_or_where_to_resume() {
        assert_eq!(Protocol::look(&[]), Look::Make { resume: None });
        assert_eq!(
            Protocol::look(&[on(2, false), on(0, false)]),
            Look::Make { resume: Some(2) }
        );
        // The first complete one by box order is the volume; unfinished ones elsewhere go.
        assert_eq!(
            Protocol::look(&[on(0, false), on(1, true), on(2, true), on(3, false)]),
            Look::Exists {
                on: 1,
                partner: None,
                leftovers: vec![0, 3]
            }
        );
    }

    /// Issue 34: the primary is the volume; its peer's box is its other copy, never a
    /// leftover, complete or not.
    #[test]
    fn a_replicated_volume_is_its_primary_and_the_peer_it_names() {
        use Role::*;
        // Both complete: the primary serves, whatever the box order.
        let whole = [copy(0, Secondary, 2), on(1, false), copy(2, Primary, 0)];
        assert_eq!(
            Protocol::look(&whole),
            Look::Exists {
                on: 2,
                partner: Some(0),
                leftovers: vec![1]
            }
        );
        assert_eq!(Protocol::pair(&whole, 2), Pair::Whole);
        // Half-created: the primary alone, or with an unfinished subsystem on its peer.
        let half = [copy(1, Primary, 3), on(3, false), on(0, false)];
        assert_eq!(
            Protocol::look(&half),
            Look::Exists {
                on: 1,
                partner: Some(3),
                leftovers: vec![0]
            }
        );
        assert_eq!(Protocol::pair(&half, 1), Pair::MakeSecondary { on: 3 });
        assert_eq!(
            Protocol::pair(&[copy(1, Primary, 3)], 1),
            Pair::MakeSecondary { on: 3 }
        );
        // A secondary alone is not completed; one copy is single; an unknown peer is said.
        assert_eq!(Protocol::pair(&[copy(1, Secondary, 3)], 1), Pair::Orphan);
        assert_eq!(Protocol::pair(&[on(1, true)], 1), Pair::Single);
        let mut lost = copy(1, Primary, 3);
        lost.peer = None;
        assert_eq!(Protocol::pair(&[lost], 1), Pair::PeerUnknown);
        // A yielding attempt keeps its subsystem where a complete copy names its box.
        assert!(Protocol::keeps(&[copy(1, Primary, 3), on(3, false)], 3));
        assert!(!Protocol::keeps(&[on(1, false), on(3, false)], 3));
        assert!(!Protocol::keeps(&[copy(1, Primary, 2), on(3, false)], 3));
    }

    #[test]
    fn an_attempt_yields_to_a_rival_on_another_box() {
        let found = [on(1, false), on(3, false)];
        assert!(!Protocol::needs_subsystem(&found, 1), "resumed there");
        assert!(Protocol::needs_subsystem(&found, 2));
        assert_eq!(Protocol::others(&found, 1), vec![3]);
        assert_eq!(Protocol::others(&found, 2), vec![1, 3]);
        assert!(!Protocol::yields(&[on(1, false)], 1), "only ours: go on");
        assert!(Protocol::yields(&[on(1, false), on(0, false)], 1));
        assert!(Protocol::yields(&[on(4, true)], 1));
    }

    #[test]
    fn refusals_retry_free_or_fail() {
        use Verdict::*;
        assert_eq!(Protocol::subsystem_refused(Some("duplicate-nqn")), Retry);
        assert_eq!(Protocol::subsystem_refused(Some("pool-full")), Fail);
        assert_eq!(Protocol::subsystem_refused(None), Fail);
        let mut p = Protocol::new();
        p.next_attempt();
        for code in ["duplicate-nsid", "unknown-subsystem"] {
            assert_eq!(p.namespace_refused(Some(code), false), Retry);
            assert_eq!(p.namespace_refused(Some(code), true), Retry);
        }
        for code in ["pool-full", "no-space"] {
            assert_eq!(p.namespace_refused(Some(code), false), FreeAndRetry);
            assert_eq!(p.namespace_refused(Some(code), true), FreeAndFail);
        }
        assert_eq!(p.namespace_refused(Some("internal"), false), FreeAndFail);
        assert_eq!(p.namespace_refused(None, false), FreeAndFail);
        while p.next_attempt().is_some() {}
        assert_eq!(
            p.namespace_refused(Some("pool-full"), false),
            FreeAndFail,
            "no attempt left"
        );
    }
}
