//! What the target's reactors and the CDC's thread share, and the target's side of it: the
//! [`CentralDiscovery`] callbacks (hosts seen, their views, DIM admission and announced
//! members).

use std::collections::{BTreeSet, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Instant;

use nvme_spec::dim::{DimTask, EntityType};
use nvme_spec::discovery::DiscoveryLogEntry;
use nvmf_host::HostConfig;
use nvmf_target::{CentralDiscovery, DimDenial, DimRegistration, Target};
use tokio::sync::mpsc;

use super::state::{Host, Member, RegKey, State};
use super::{CdcConfig, Cmd};
use crate::derived_hostid;

/// What the target's reactors and the CDC's thread share.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) cfg: CdcConfig,
    pub(super) st: Mutex<State>,
    pub(super) tx: mpsc::UnboundedSender<Cmd>,
    pub(super) target: Weak<Target>,
}

impl Shared {
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Note `hostnqn` as seen; a new host is recorded (forgetting one never served, or one
    /// not served for `host_protect`, when the table is full) and its first reads are queued,
    /// at most `new_hosts_per_sec`. A host not admitted now is admitted on a later call (it
    /// polls CSTS until RDY).
    pub(super) fn touch(&self, st: &mut State, hostnqn: &str) {
        let now = Instant::now();
        if let Some(h) = st.hosts.get_mut(hostnqn) {
            h.last_seen = now;
            return;
        }
        let rate = f64::from(self.cfg.new_hosts_per_sec.max(1));
        let elapsed = now.saturating_duration_since(st.refilled).as_secs_f64();
        st.tokens = (st.tokens + elapsed * rate).min(rate);
        st.refilled = now;
        // Admitted hosts still waiting for their first view are bounded too (a few rounds of
        // first reads), so the queue of first reads cannot grow while members are slow.
        if st.tokens < 1.0 || st.pending >= self.cfg.max_first_reads.max(1) * 4 {
            return;
        }
        if st.hosts.len() >= self.cfg.max_hosts.max(1) {
            let protect = self.cfg.host_protect;
            let victim = st
                .hosts
                .iter()
                .filter(|(_, h)| !h.served || now.saturating_duration_since(h.last_seen) >= protect)
                .min_by_key(|(_, h)| (h.served, h.last_seen))
                .map(|(n, _)| n.clone());
            match victim {
                Some(old) => forget_host(st, &old),
                None => {
                    refused_host(hostnqn);
                    return;
                }
            }
        }
        st.tokens -= 1.0;
        st.pending += 1;
        st.hosts.insert(
            hostnqn.to_string(),
            Host {
                last_seen: now,
                served: false,
                view: None,
            },
        );
        let _ = self.tx.send(Cmd::HostSeen(hostnqn.to_string()));
    }

    /// A host's view changed: move the CDC's generation counter and tell its hosts.
    pub(super) fn changed(&self) {
        if let Some(t) = self.target.upgrade() {
            t.discovery_log_changed();
        }
    }

    pub(super) fn host_config(&self, hostnqn: &str) -> HostConfig {
        let t = self.cfg.fetch_timeout;
        HostConfig {
            hostnqn: hostnqn.to_string(),
            hostid: derived_hostid(hostnqn),
            kato_ms: 0,
            io_queues: 0,
            async_events: false,
            connect_timeout: t,
            admin_timeout: t,
            shutdown_timeout: t,
            dhchap: self.cfg.host_keys.get(hostnqn).cloned(),
            ..HostConfig::default()
        }
    }
}

pub(super) fn forget_host(st: &mut State, host: &str) {
    if st.hosts.remove(host).is_some_and(|h| h.view.is_none()) {
        st.pending = st.pending.saturating_sub(1);
    }
    for m in st.members.values_mut() {
        m.logs.remove(host);
    }
}

impl CentralDiscovery for Shared {
    fn host_seen(&self, hostnqn: &str) {
        let mut st = self.lock();
        self.touch(&mut st, hostnqn);
    }

    fn entries(&self, hostnqn: &str) -> Option<Arc<Vec<DiscoveryLogEntry>>> {
        let mut st = self.lock();
        self.touch(&mut st, hostnqn);
        let h = st.hosts.get_mut(hostnqn)?;
        let v = h.view.clone();
        h.served |= v.is_some();
        v
    }

    fn admit(&self, task: DimTask, reg: &DimRegistration) -> Result<(), DimDenial> {
        let st = self.lock();
        if !st.trusts(reg) {
            return Err(DimDenial::Untrusted);
        }
        if task != DimTask::Deregister {
            let new = announced_addrs(reg)
                .iter()
                .filter(|a| !st.members.contains_key(a))
                .count();
            if new > 0 && st.members.len() + new > self.cfg.max_members {
                return Err(DimDenial::Full);
            }
        }
        Ok(())
    }

    fn registered(&self, reg: &DimRegistration) {
        let addrs = announced_addrs(reg);
        if addrs.is_empty() {
            return;
        }
        let mut own: HashSet<IpAddr> = addrs.iter().map(|a| a.ip()).collect();
        own.extend(reg.peer.map(|p| p.ip()));
        let key = (reg.hostnqn.clone(), reg.entity_nqn.clone());
        let mut started = Vec::new();
        {
            let mut st = self.lock();
            for a in addrs {
                if let Some(m) = st.members.get_mut(&a) {
                    if m.announced {
                        m.owners.insert(key.clone());
                        m.own.extend(own.iter().copied());
                    }
                    continue;
                }
                // Admission checked the limit; two admissions at once may both have passed.
                if st.members.len() >= self.cfg.max_members {
                    nvmf_target::warn_every!(member = %a, "central discovery: member limit reached, announcement ignored");
                    continue;
                }
                tracing::info!(member = %a, host = %key.0, "central discovery: member announced itself");
                st.members.insert(
                    a,
                    Member {
                        announced: true,
                        owners: BTreeSet::from([key.clone()]),
                        own: own.clone(),
                        ..Member::default()
                    },
                );
                started.push(a);
            }
        }
        for a in started {
            let _ = self.tx.send(Cmd::Add(a));
        }
    }

    fn replaced(&self, old: &DimRegistration, new: &DimRegistration) {
        let keep = announced_addrs(new);
        let gone: Vec<SocketAddr> = announced_addrs(old)
            .into_iter()
            .filter(|a| !keep.contains(a))
            .collect();
        self.withdraw(&(old.hostnqn.clone(), old.entity_nqn.clone()), gone);
        self.registered(new);
    }

    fn deregistered(&self, reg: &DimRegistration) {
        self.withdraw(
            &(reg.hostnqn.clone(), reg.entity_nqn.clone()),
            announced_addrs(reg),
        );
    }
}

impl Shared {
    /// Registration `key` no longer announces `addrs`: announced members it was the last
    /// owner of leave (their tasks stop, the views are recomputed on the CDC's thread).
    pub(super) fn withdraw(&self, key: &RegKey, addrs: Vec<SocketAddr>) {
        if addrs.is_empty() {
            return;
        }
        let mut gone = Vec::new();
        {
            let mut st = self.lock();
            for a in addrs {
                let Some(m) = st.members.get_mut(&a) else {
                    continue;
                };
                if !m.announced {
                    continue;
                }
                m.owners.remove(key);
                if m.owners.is_empty() {
                    tracing::info!(member = %a, "central discovery: announced member withdrawn");
                    st.members.remove(&a);
                    gone.push(a);
                }
            }
            if !gone.is_empty() {
                st.epoch += 1;
            }
        }
        let refresh = !gone.is_empty();
        for a in gone {
            let _ = self.tx.send(Cmd::Remove(a));
        }
        if refresh {
            let _ = self.tx.send(Cmd::Refresh);
        }
    }
}

/// A new host refused because every known host was served recently (logged at a bounded
/// rate).
fn refused_host(hostnqn: &str) {
    nvmf_target::warn_every!(host = %hostnqn, "central discovery: host table full of active hosts, new host waits");
}

/// The NVMe/TCP discovery services a discovery controller announced with DIM (TP 8010 pull
/// registration: ETYPE DDC, one transport entry per discovery port).
fn announced_addrs(reg: &DimRegistration) -> Vec<SocketAddr> {
    if reg.entity_type != EntityType::Ddc {
        return Vec::new();
    }
    let mut out = Vec::new();
    for e in &reg.entries {
        if e.trtype != nvme_spec::discovery::trtype::TCP {
            continue;
        }
        let (Ok(ip), Ok(port)) = (
            e.traddr.trim().parse::<std::net::IpAddr>(),
            e.trsvcid.trim().parse::<u16>(),
        ) else {
            continue;
        };
        let a = SocketAddr::new(ip, port);
        if !out.contains(&a) {
            out.push(a);
        }
    }
    out
}
