//! What the controller knows of a box that does not answer: the subsystems it held when the
//! controller last read it (since the controller started), and the volume subsystems the
//! controller asked it to make since (noted before the request, so a lost answer counts).
//! CreateVolume goes on while a box is down only when this shows the volume is not there
//! (see [`super::create`] and ADR 0023). It only ever refuses more: a box that answers is
//! always read afresh.

use ebof_api::State;
use std::collections::BTreeSet;
use std::sync::Mutex;

/// Per box: its subsystems when last read, and the subsystems asked of it.
#[derive(Debug)]
pub(super) struct Memory {
    boxes: Mutex<Vec<Known>>,
}

#[derive(Debug, Default, Clone)]
struct Known {
    last: Option<BTreeSet<String>>,
    asked: BTreeSet<String>,
}

/// What the controller can say of a box that does not answer and a volume.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Silent {
    /// Not read since the controller started: the volume might be there.
    NeverRead,
    /// It held the volume's subsystem when last read, or the controller asked it for one.
    MayHold,
    /// The volume was not there when last read, nor asked since.
    Without,
}

impl Memory {
    /// Nothing known of `n` boxes.
    pub(super) fn new(n: usize) -> Memory {
        Memory {
            boxes: Mutex::new(vec![Known::default(); n]),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut Vec<Known>) -> T) -> T {
        let mut g = self.boxes.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut g)
    }

    /// Box `idx` answered with `state`.
    pub(super) fn read(&self, idx: usize, state: &State) {
        let nqns = state.subsystems.iter().map(|s| s.nqn.clone()).collect();
        self.with(|b| {
            if let Some(k) = b.get_mut(idx) {
                k.last = Some(nqns);
            }
        })
    }

    /// Box `idx` is about to be asked for subsystem `nqn`.
    pub(super) fn asking(&self, idx: usize, nqn: &str) {
        self.with(|b| {
            if let Some(k) = b.get_mut(idx) {
                k.asked.insert(nqn.to_string());
            }
        })
    }

    /// What is known of box `idx` and volume `nqn`.
    pub(super) fn silent(&self, idx: usize, nqn: &str) -> Silent {
        self.with(|b| match b.get(idx) {
            Some(Known {
                last: Some(nqns),
                asked,
            }) => {
                if asked.contains(nqn) || nqns.contains(nqn) {
                    Silent::MayHold
                } else {
                    Silent::Without
                }
            }
            _ => Silent::NeverRead,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{Memory, Silent};

    #[test]
    fn a_box_is_unknown_until_read_and_keeps_what_it_was_asked() {
        let m = Memory::new(2);
        assert_eq!(m.silent(0, "v"), Silent::NeverRead);
        let state: ebof_api::State = serde_json::from_value(serde_json::json!({
            "version": "t", "subsystems": [], "listeners": [], "controllers": [], "pools": [],
        }))
        .unwrap();
        m.read(0, &state);
        assert_eq!(m.silent(0, "v"), Silent::Without);
        m.asking(0, "v");
        assert_eq!(m.silent(0, "v"), Silent::MayHold);
        m.read(0, &state);
        assert_eq!(m.silent(0, "v"), Silent::MayHold, "asked stays");
        assert_eq!(m.silent(1, "v"), Silent::NeverRead);
        assert_eq!(m.silent(7, "v"), Silent::NeverRead);
    }
}
