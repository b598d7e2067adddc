//! Asymmetric Namespace Access: the state of every (port, ANA group) pair, the ANA log page a
//! controller reads, and the check I/O commands pass through.
//!
//! **Ports** are the NVMe listeners, known by their address (what [`crate::Controller::local_addr`]
//! and [`crate::ListenerInfo::addr`] hold). Each address gets a *slot* in the table the first
//! time it is named (by the control plane or by a connection accepted on it) and keeps it for
//! the life of the target, so a queue can cache its row at accept time. Slot 0 stands for
//! "more listeners than slots": always optimized, never settable.
//!
//! **Groups** are numbered 1..=[`MAX_GROUPS`] and are target-wide (as in Linux nvmet): a
//! namespace of any subsystem in group 2 is inaccessible through a port where group 2 is.
//! A namespace's group is fixed while it exists ([`crate::Namespace::with_ana_group`]).
//!
//! **Data path**: a command's check is one relaxed load of a byte in a table that only the
//! control plane writes ([`AnaTable::path_status`]). States changed while a command is in
//! flight apply from the next command on.

use crate::model::Subsystem;
use nvme_spec::Status;
pub use nvme_spec::ana::AnaState;
use nvme_spec::ana::{AnaGroupDesc, AnaLog};
use std::net::SocketAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, Ordering};

/// ANA groups per target (Identify Controller ANAGRPMAX and NANAGRPID).
pub use crate::model::MAX_GROUPS;
/// Listener addresses the table can tell apart (slot 0 is the catch-all).
pub const PORT_SLOTS: usize = 64;
/// ANA Transition Time reported in Identify Controller (seconds): how long a host waits in
/// the change state before it resets the controller.
pub const ANATT: u8 = 10;

/// Why an ANA state cannot be set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnaError {
    /// The group id is not 1..=[`MAX_GROUPS`].
    Group(u32),
    /// Every slot of the table is taken by another address.
    TooManyPorts,
}

impl std::fmt::Display for AnaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AnaError::Group(g) => write!(f, "ANA group {g} is out of range (1 to {MAX_GROUPS})"),
            AnaError::TooManyPorts => write!(
                f,
                "too many listener addresses for the ANA table ({} at most)",
                PORT_SLOTS - 1
            ),
        }
    }
}

impl std::error::Error for AnaError {}

/// The ANA state table. Shared by all cores; written only by the control plane.
#[derive(Debug)]
pub struct AnaTable {
    /// `ANAS` value per slot × group (row = slot × [`MAX_GROUPS`], column = group − 1).
    states: Box<[AtomicU8]>,
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Address of slot `i + 1`.
    ports: Vec<SocketAddr>,
    /// The log page's Change Count (bumped at every state change).
    chgcnt: u64,
    /// Change Count at the last change of each (slot, group) descriptor.
    desc_chgcnt: Vec<u64>,
}

impl Default for AnaTable {
    fn default() -> Self {
        AnaTable::new()
    }
}

impl AnaTable {
    /// Every group optimized on every port.
    pub fn new() -> AnaTable {
        let n = PORT_SLOTS * MAX_GROUPS as usize;
        AnaTable {
            states: (0..n)
                .map(|_| AtomicU8::new(AnaState::Optimized as u8))
                .collect(),
            inner: Mutex::new(Inner {
                ports: Vec::new(),
                chgcnt: 0,
                desc_chgcnt: vec![0; n],
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn slot_locked(inner: &mut Inner, addr: SocketAddr) -> Option<usize> {
        if let Some(i) = inner.ports.iter().position(|a| *a == addr) {
            return Some(i + 1);
        }
        if inner.ports.len() + 1 >= PORT_SLOTS {
            return None;
        }
        inner.ports.push(addr);
        Some(inner.ports.len())
    }

    /// The table row of listener `addr` (assigned on first use): what a queue caches at
    /// accept time and adds a namespace's [`crate::Namespace::ana_index`] to.
    pub fn row_of(&self, addr: SocketAddr) -> usize {
        let mut inner = self.lock();
        Self::slot_locked(&mut inner, addr).unwrap_or(0) * MAX_GROUPS as usize
    }

    /// The per-command check: `None` if I/O may proceed on this path, else the Path Related
    /// status to fail it with. One relaxed load.
    #[inline]
    pub fn path_status(&self, index: usize) -> Option<Status> {
        let v = self.states.get(index)?.load(Ordering::Relaxed);
        if v <= AnaState::NonOptimized as u8 {
            return None;
        }
        AnaState::from_u8(v).and_then(AnaState::io_status)
    }

    fn state_at(&self, index: usize) -> AnaState {
        self.states
            .get(index)
            .and_then(|s| AnaState::from_u8(s.load(Ordering::Relaxed)))
            .unwrap_or(AnaState::Optimized)
    }

    /// The state of `grpid` on listener `addr` (optimized for anything never set).
    pub fn state(&self, addr: SocketAddr, grpid: u32) -> AnaState {
        if !(1..=MAX_GROUPS).contains(&grpid) {
            return AnaState::Optimized;
        }
        let inner = self.lock();
        match inner.ports.iter().position(|a| *a == addr) {
            Some(i) => self.state_at((i + 1) * MAX_GROUPS as usize + grpid as usize - 1),
            None => AnaState::Optimized,
        }
    }

    /// Groups of listener `addr` that are not optimized, ascending.
    pub fn non_optimized(&self, addr: SocketAddr) -> Vec<(u32, AnaState)> {
        let Some(i) = self.lock().ports.iter().position(|a| *a == addr) else {
            return Vec::new();
        };
        let row = (i + 1) * MAX_GROUPS as usize;
        (1..=MAX_GROUPS)
            .map(|g| (g, self.state_at(row + g as usize - 1)))
            .filter(|(_, s)| *s != AnaState::Optimized)
            .collect()
    }

    /// Set `grpid` on `addr` to `state`. Returns whether the state changed (the change count
    /// moves only then).
    pub fn set(&self, addr: SocketAddr, grpid: u32, state: AnaState) -> Result<bool, AnaError> {
        if !(1..=MAX_GROUPS).contains(&grpid) {
            return Err(AnaError::Group(grpid));
        }
        let mut inner = self.lock();
        let slot = Self::slot_locked(&mut inner, addr).ok_or(AnaError::TooManyPorts)?;
        let i = slot * MAX_GROUPS as usize + grpid as usize - 1;
        if self.state_at(i) == state {
            return Ok(false);
        }
        inner.chgcnt = inner.chgcnt.wrapping_add(1);
        inner.desc_chgcnt[i] = inner.chgcnt;
        self.states[i].store(state as u8, Ordering::Relaxed);
        Ok(true)
    }

    /// The log's Change Count now.
    pub fn change_count(&self) -> u64 {
        self.lock().chgcnt
    }

    /// The ANA log page of a controller of `sub` whose queue sits in table row `row`: one
    /// descriptor per group that holds a namespace of `sub`, ascending, with its NSIDs unless
    /// `rgo` (Return Groups Only).
    pub fn log(&self, row: usize, sub: &Subsystem, rgo: bool) -> AnaLog {
        let inner = self.lock();
        let mut groups: Vec<u32> = sub.namespaces.iter().map(|n| n.ana_group()).collect();
        groups.sort_unstable();
        groups.dedup();
        AnaLog {
            chgcnt: inner.chgcnt,
            groups: groups
                .into_iter()
                .map(|g| {
                    let i = row + g as usize - 1;
                    AnaGroupDesc {
                        grpid: g,
                        chgcnt: inner.desc_chgcnt.get(i).copied().unwrap_or(0),
                        state: self.state_at(i),
                        nsids: if rgo {
                            Vec::new()
                        } else {
                            sub.namespaces
                                .iter()
                                .filter(|n| n.ana_group() == g)
                                .map(|n| n.nsid)
                                .collect()
                        },
                    }
                })
                .collect(),
        }
    }
}

/// The Identify Controller fields of an I/O controller that say ANA is reported: CMIC
/// multi-port, multi-controller and ANA reporting; every state supported and the group of a
/// namespace fixed while attached (ANACAP); ANATT; group limits; ANA Change notices (OAES);
/// MNAN (the namespaces the subsystem may hold, `max_namespaces`), which Linux requires
/// non-zero and at most NN when CMIC says ANA.
pub(crate) fn identify_controller(
    id: &mut nvme_spec::identify::IdentifyController,
    max_namespaces: u32,
) {
    use nvme_spec::ana::anacap;
    use nvme_spec::identify::{cmic, oaes};
    id.cmic |= cmic::MULTI_PORT | cmic::MULTI_CTRL | cmic::ANA;
    id.anacap = anacap::OPTIMIZED
        | anacap::NON_OPTIMIZED
        | anacap::INACCESSIBLE
        | anacap::PERSISTENT_LOSS
        | anacap::CHANGE
        | anacap::GRPID_STATIC;
    id.anatt = ANATT;
    id.anagrpmax = MAX_GROUPS;
    id.nanagrpid = MAX_GROUPS;
    id.oaes |= oaes::ANA_CHANGE;
    id.mnan = max_namespaces.clamp(1, id.nn.max(1));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Namespace;
    use std::sync::Arc;

    fn addr(p: u16) -> SocketAddr {
        SocketAddr::from(([10, 77, 0, 1], p))
    }

    fn sub(groups: &[(u32, u32)]) -> Subsystem {
        Subsystem {
            nqn: "nqn.2026-11.io.ebof:ana".into(),
            serial: "S".into(),
            model: "M".into(),
            allow_any_host: true,
            hosts: vec![],
            namespaces: groups
                .iter()
                .map(|&(nsid, g)| {
                    let b =
                        ebof_backend::open(&ebof_backend::BackendSpec::Ram { size: 4096 }).unwrap();
                    Arc::new(Namespace::new(nsid, b, 512, [nsid as u8; 16]).with_ana_group(g))
                })
                .collect(),
            ns_hosts: Default::default(),
        }
    }

    #[test]
    fn default_is_optimized_everywhere() {
        let t = AnaTable::new();
        let row = t.row_of(addr(4420));
        assert_eq!(row, MAX_GROUPS as usize);
        for g in 0..MAX_GROUPS as usize {
            assert_eq!(t.path_status(row + g), None);
        }
        assert_eq!(t.state(addr(4421), 1), AnaState::Optimized);
        assert_eq!(t.change_count(), 0);
        assert!(t.non_optimized(addr(4420)).is_empty());
    }

    #[test]
    fn states_per_port_and_group_and_io_status() {
        let t = AnaTable::new();
        let r0 = t.row_of(addr(4420));
        let r1 = t.row_of(addr(4421));
        assert_ne!(r0, r1);
        assert_eq!(t.set(addr(4421), 2, AnaState::Inaccessible), Ok(true));
        // Same state again: no change, no count.
        assert_eq!(t.set(addr(4421), 2, AnaState::Inaccessible), Ok(false));
        assert_eq!(t.change_count(), 1);
        assert_eq!(t.path_status(r1 + 1), Some(Status::ANA_INACCESSIBLE));
        assert_eq!(t.path_status(r1), None, "group 1 untouched");
        assert_eq!(t.path_status(r0 + 1), None, "other port untouched");
        for (s, want) in [
            (AnaState::NonOptimized, None),
            (AnaState::PersistentLoss, Some(Status::ANA_PERSISTENT_LOSS)),
            (AnaState::Change, Some(Status::ANA_TRANSITION)),
            (AnaState::Optimized, None),
        ] {
            assert_eq!(t.set(addr(4421), 2, s), Ok(true));
            assert_eq!(t.path_status(r1 + 1), want, "{s}");
            assert_eq!(t.state(addr(4421), 2), s);
        }
        assert_eq!(t.change_count(), 5);
        assert_eq!(t.path_status(usize::MAX), None);
    }

    #[test]
    fn group_range_and_slot_exhaustion() {
        let t = AnaTable::new();
        assert_eq!(
            t.set(addr(1), 0, AnaState::Inaccessible),
            Err(AnaError::Group(0))
        );
        assert_eq!(
            t.set(addr(1), MAX_GROUPS + 1, AnaState::Inaccessible),
            Err(AnaError::Group(MAX_GROUPS + 1))
        );
        assert!(t.set(addr(1), MAX_GROUPS, AnaState::Inaccessible).is_ok());
        for p in 2..PORT_SLOTS as u16 {
            t.row_of(addr(p));
        }
        // Table full: a new address shares the always-optimized slot 0 and cannot be set.
        assert_eq!(t.row_of(addr(9999)), 0);
        assert_eq!(
            t.set(addr(9999), 1, AnaState::Inaccessible),
            Err(AnaError::TooManyPorts)
        );
        assert_eq!(t.path_status(0), None);
    }

    #[test]
    fn log_with_and_without_rgo() {
        let t = AnaTable::new();
        let s = sub(&[(1, 1), (2, 3), (5, 1), (7, 3)]);
        let row = t.row_of(addr(4420));
        t.set(addr(4420), 3, AnaState::NonOptimized).unwrap();
        t.set(addr(4421), 1, AnaState::Inaccessible).unwrap();
        let log = t.log(row, &s, false);
        assert_eq!(log.chgcnt, 2);
        assert_eq!(log.groups.len(), 2);
        assert_eq!(log.groups[0].grpid, 1);
        assert_eq!(log.groups[0].state, AnaState::Optimized);
        assert_eq!(log.groups[0].chgcnt, 0);
        assert_eq!(log.groups[0].nsids, vec![1, 5]);
        assert_eq!(log.groups[1].grpid, 3);
        assert_eq!(log.groups[1].state, AnaState::NonOptimized);
        assert_eq!(log.groups[1].chgcnt, 1);
        assert_eq!(log.groups[1].nsids, vec![2, 7]);
        let rgo = t.log(row, &s, true);
        assert_eq!(rgo.groups.len(), 2);
        assert!(rgo.groups.iter().all(|g| g.nsids.is_empty()));
        assert_eq!(rgo.encode().len(), 16 + 2 * 32);
        // The other port sees its own states.
        let other = t.log(t.row_of(addr(4421)), &s, false);
        assert_eq!(other.groups[0].state, AnaState::Inaccessible);
        assert_eq!(other.groups[0].chgcnt, 2);
        assert_eq!(other.groups[1].state, AnaState::Optimized);
    }
}
