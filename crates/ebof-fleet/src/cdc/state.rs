//! What the CDC knows (members, hosts, their logs and views) and how a view is made: the union
//! of the live members' logs for one host.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use nvme_spec::discovery::DiscoveryLogEntry;
use nvmf_target::DimRegistration;

use super::Trusted;

/// Members' logs for one host, in member order.
pub(super) type Logs = Vec<Arc<Vec<DiscoveryLogEntry>>>;

/// A DIM registration's key: (host NQN, entity NQN).
pub(super) type RegKey = (String, String);

/// One member as the CDC knows it.
#[derive(Debug, Default)]
pub(super) struct Member {
    /// Added by a DIM registration of the member itself rather than configured.
    pub(super) announced: bool,
    /// The registrations that announce it (announced members leave when none is left).
    pub(super) owners: BTreeSet<RegKey>,
    /// An announced member's own addresses: only entries pointing at one of them are served.
    pub(super) own: HashSet<IpAddr>,
    /// Connection attempts failed in a row.
    pub(super) failures: u32,
    pub(super) connected: bool,
    /// Its entries count in the views (connected, or lost and not yet failed to reconnect).
    pub(super) live: bool,
    pub(super) last_error: Option<String>,
    pub(super) last_change: Option<SystemTime>,
    /// The member's NVM subsystem entries as each host would see them.
    pub(super) logs: HashMap<String, Arc<Vec<DiscoveryLogEntry>>>,
}

/// One host that connected to the CDC.
#[derive(Debug)]
pub(super) struct Host {
    pub(super) last_seen: Instant,
    /// A view was handed out to it (hosts never served are forgotten first).
    pub(super) served: bool,
    /// `None` until the first reads for this host are done.
    pub(super) view: Option<Arc<Vec<DiscoveryLogEntry>>>,
}

#[derive(Debug)]
pub(super) struct State {
    pub(super) members: BTreeMap<SocketAddr, Member>,
    pub(super) hosts: HashMap<String, Host>,
    /// Moves on every change of what the views are made of (members, their liveness, logs).
    pub(super) epoch: u64,
    pub(super) trusted: Vec<Trusted>,
    /// Hosts recorded whose first view is not ready yet.
    pub(super) pending: usize,
    /// New-host admission: tokens left and when they were counted.
    pub(super) tokens: f64,
    pub(super) refilled: Instant,
}

/// What makes two entries the same entry (every field), borrowed, for hashing.
#[derive(Hash, PartialEq, Eq)]
pub(super) struct EntryKey<'a> {
    head: [u8; 4],
    ids: [u16; 4],
    text: [&'a str; 3],
    tsas: [u8; 3],
}

pub(super) fn entry_key(e: &DiscoveryLogEntry) -> EntryKey<'_> {
    EntryKey {
        head: [e.trtype, e.adrfam, e.subtype, e.treq],
        ids: [e.portid, e.cntlid, e.asqsz, e.eflags],
        text: [&e.trsvcid, &e.subnqn, &e.traddr],
        tsas: [e.tcp_sectype, e.rdma_prtype, e.rdma_cms],
    }
}

/// The union of `logs` (in order), each entry once, at most `max` entries: linear in the
/// entries (a hash set of the ones taken).
pub(super) fn union_of<'a>(
    logs: impl Iterator<Item = &'a Arc<Vec<DiscoveryLogEntry>>>,
    max: usize,
) -> Vec<DiscoveryLogEntry> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    'all: for log in logs {
        for e in log.iter() {
            if out.len() >= max {
                break 'all;
            }
            if seen.insert(entry_key(e)) {
                out.push(e.clone());
            }
        }
    }
    out
}

impl State {
    pub(super) fn new(trusted: Vec<Trusted>, burst: u32) -> State {
        State {
            members: BTreeMap::new(),
            hosts: HashMap::new(),
            epoch: 0,
            pending: 0,
            trusted,
            tokens: f64::from(burst),
            refilled: Instant::now(),
        }
    }

    /// The live members' logs for `host`, in member order (cheap: `Arc` clones).
    pub(super) fn inputs(&self, host: &str) -> Logs {
        self.members
            .values()
            .filter(|m| m.live)
            .filter_map(|m| m.logs.get(host).cloned())
            .collect()
    }

    /// The union of the live members' entries for `host`, in member order, each entry once.
    #[cfg(test)]
    pub(super) fn union(&self, host: &str) -> Vec<DiscoveryLogEntry> {
        union_of(self.inputs(host).iter(), usize::MAX)
    }

    /// Install `next` as the view of `host` (created when `first`); true when an existing
    /// view changed.
    pub(super) fn install(
        &mut self,
        host: &str,
        next: Vec<DiscoveryLogEntry>,
        first: bool,
    ) -> bool {
        let Some(h) = self.hosts.get_mut(host) else {
            return false;
        };
        match &h.view {
            Some(v) if **v == next => false,
            Some(_) => {
                h.view = Some(Arc::new(next));
                true
            }
            None if first => {
                h.view = Some(Arc::new(next));
                self.pending = self.pending.saturating_sub(1);
                false
            }
            None => false,
        }
    }

    /// Recompute, under the lock, the view of `host`; see [`State::install`].
    #[cfg(test)]
    pub(super) fn recompute(&mut self, host: &str, first: bool) -> bool {
        let next = self.union(host);
        self.install(host, next, first)
    }

    /// Recompute, under the lock, every view; true when any changed.
    #[cfg(test)]
    pub(super) fn recompute_all(&mut self) -> bool {
        let names: Vec<String> = self.hosts.keys().cloned().collect();
        let mut changed = false;
        for h in names {
            changed |= self.recompute(&h, false);
        }
        changed
    }

    /// Is the sender of `reg` a discovery controller this CDC trusts?
    pub(super) fn trusts(&self, reg: &DimRegistration) -> bool {
        let ip = reg.peer.map(|p| p.ip());
        reg.authenticated
            || self.trusted.iter().any(|t| match t {
                Trusted::Address(a) => Some(*a) == ip,
                Trusted::Nqn(n) => *n == reg.hostnqn,
            })
            || ip.is_some_and(|ip| {
                self.members
                    .iter()
                    .any(|(a, m)| !m.announced && a.ip() == ip)
            })
    }
}
