//! What the controller knows of a box that does not answer: the state it last read of each
//! box since it started, and the volume subsystems it asked each box to make since (sent
//! before the answer, so a lost answer counts). CreateVolume goes on while a box is down only
//! when this shows the volume is not there (see [`super::create`] and ADR 0023).

use ebof_api::State;
use std::collections::BTreeSet;
use std::sync::Mutex;

/// Per box: its last state read, and the subsystems asked of it.
#[derive(Debug)]
pub(super) struct Memory {
    boxes: Mutex<Vec<Known>>,
}

#[derive(Debug, Default, Clone)]
struct Known {
    last: Option<State>,
    asked: BTreeSet<String>,
}

/// What the controller can say of box `idx` and volume `nqn` while the box does not answer.
#[derive(Debug)]
pub(super) enum Silent {
    /// Not read since the controller started: the volume might be there.
    NeverRead,
    /// Its last state held the volume's subsystem, or the controller asked it to make one.
    MayHold,
    /// The volume was not there when last read, nor asked since: its last state.
    Without(Box<State>),
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
        self.with(|b| {
            if let Some(k) = b.get_mut(idx) {
                k.last = Some(state.clone());
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
                last: Some(state),
                asked,
            }) => {
                if asked.contains(nqn) || state.subsystems.iter().any(|s| s.nqn == nqn) {
                    Silent::MayHold
                } else {
                    Silent::Without(Box::new(state.clone()))
                }
            }
            _ => Silent::NeverRead,
        })
    }
}
