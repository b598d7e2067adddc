//! The CDC's thread: one task per member (its persistent discovery connection), the per-host
//! reads of members' logs, and the views recomputed from them.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use nvme_spec::discovery::{DiscoveryLogEntry, subtype};
use nvme_spec::log::lid;
use nvmf_host::{Controller, HostConfig};
use tokio::sync::mpsc;

use super::Cmd;
use super::shared::{Shared, forget_host};
use super::state::{Logs, State, union_of};
use crate::{BACKOFF_MIN, derived_hostid};

/// How many per-host reads of one member run at once.
const FETCH_PARALLEL: usize = 16;

/// The CDC's thread: member tasks, first reads of new hosts (a bounded number at once),
/// forgetting idle hosts.
pub(super) async fn run(shared: Arc<Shared>, mut rx: mpsc::UnboundedReceiver<Cmd>) {
    let mut tasks: HashMap<SocketAddr, tokio::task::JoinHandle<()>> = HashMap::new();
    let mut firsts = tokio::task::JoinSet::new();
    // New hosts whose first reads wait for a slot (bounded: hosts are admitted at a bounded
    // rate into a bounded table).
    let mut waiting: VecDeque<String> = VecDeque::new();
    let max_firsts = shared.cfg.max_first_reads.max(1);
    for m in shared.cfg.members.clone() {
        tasks.insert(m, tokio::spawn(member_loop(shared.clone(), m)));
    }
    let mut gc = tokio::time::interval(Duration::from_secs(30).min(shared.cfg.host_idle));
    gc.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        while firsts.len() < max_firsts
            && let Some(h) = waiting.pop_front()
        {
            firsts.spawn(first_reads(shared.clone(), h));
        }
        tokio::select! {
            cmd = rx.recv() => match cmd {
                Some(Cmd::HostSeen(h)) => waiting.push_back(h),
                Some(Cmd::Add(a)) => {
                    if let Some(old) = tasks.insert(a, tokio::spawn(member_loop(shared.clone(), a))) {
                        old.abort();
                    }
                }
                Some(Cmd::Remove(a)) => {
                    if let Some(t) = tasks.remove(&a) {
                        t.abort();
                    }
                }
                Some(Cmd::Refresh) => {
                    if refresh_views(&shared) {
                        shared.changed();
                    }
                }
                Some(Cmd::Stop) | None => break,
            },
            Some(_) = firsts.join_next(), if !firsts.is_empty() => {}
            _ = gc.tick() => {
                forget_idle_hosts(&shared);
                tasks.retain(|_, t| !t.is_finished());
            }
        }
    }
    for (_, t) in tasks.drain() {
        t.abort();
    }
    firsts.abort_all();
    // Let the aborted tasks drop their connections (closing the sockets).
    tokio::task::yield_now().await;
}

/// Recompute every host's view outside the lock and swap the new views in; true when any
/// changed. The inputs are `Arc`s of the members' logs taken under the lock; when what the
/// views are made of changed meanwhile (the epoch moved) it starts again, and after three
/// tries computes under the lock (bounded by the entry caps).
pub(super) fn refresh_views(shared: &Shared) -> bool {
    let max = shared.cfg.max_view_entries.max(1);
    for _ in 0..3 {
        let (epoch, inputs): (u64, Vec<(String, Logs)>) = {
            let st = shared.lock();
            (
                st.epoch,
                st.hosts
                    .iter()
                    .filter(|(_, h)| h.view.is_some())
                    .map(|(n, _)| (n.clone(), st.inputs(n)))
                    .collect(),
            )
        };
        let views: Vec<(String, Vec<DiscoveryLogEntry>)> = inputs
            .into_iter()
            .map(|(h, logs)| {
                let v = union_of(logs.iter(), max);
                (h, v)
            })
            .collect();
        let mut st = shared.lock();
        if st.epoch != epoch {
            continue;
        }
        let mut changed = false;
        for (h, v) in views {
            changed |= st.install(&h, v, false);
        }
        return changed;
    }
    let mut st = shared.lock();
    let names: Vec<String> = st.hosts.keys().cloned().collect();
    let mut changed = false;
    for h in names {
        let v = union_of(st.inputs(&h).iter(), max);
        changed |= st.install(&h, v, false);
    }
    changed
}

/// Forget hosts idle for longer than `host_idle` that have no discovery connection to the CDC.
fn forget_idle_hosts(shared: &Shared) {
    let connected: HashSet<String> = match shared.target.upgrade() {
        Some(t) => t
            .controllers()
            .iter()
            .filter(|c| c.is_discovery())
            .map(|c| c.hostnqn.clone())
            .collect(),
        None => return,
    };
    let now = Instant::now();
    let mut st = shared.lock();
    let idle: Vec<String> = st
        .hosts
        .iter_mut()
        .filter_map(|(n, h)| {
            if connected.contains(n) {
                h.last_seen = now;
                None
            } else {
                (now.duration_since(h.last_seen) > shared.cfg.host_idle).then(|| n.clone())
            }
        })
        .collect();
    for h in idle {
        tracing::debug!(host = %h, "central discovery: idle host forgotten");
        forget_host(&mut st, &h);
    }
}

/// Read member `addr`'s log as `host` (NVM subsystem entries only), bounded by `fetch_timeout`.
async fn fetch(
    shared: &Shared,
    addr: SocketAddr,
    host: &str,
) -> Result<Vec<DiscoveryLogEntry>, String> {
    let cfg = shared.host_config(host);
    match tokio::time::timeout(shared.cfg.fetch_timeout, nvmf_host::discover(addr, &cfg)).await {
        Ok(Ok(log)) => Ok(log
            .entries
            .into_iter()
            .filter(|e| e.subtype == subtype::NVME)
            .collect()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!(
            "no discovery log within {} ms",
            shared.cfg.fetch_timeout.as_millis()
        )),
    }
}

/// Store what member `addr` shows each host (an announced member: only entries pointing at
/// its own addresses; at most `max_entries` per host); true when the member's entries changed
/// for any.
fn store(
    st: &mut State,
    addr: SocketAddr,
    results: Vec<(String, Result<Vec<DiscoveryLogEntry>, String>)>,
    max_entries: usize,
) -> bool {
    let Some(m) = st.members.get_mut(&addr) else {
        return false;
    };
    let mut changed = false;
    for (host, r) in results {
        match r {
            Ok(mut entries) => {
                if m.announced {
                    let before = entries.len();
                    entries.retain(|e| {
                        e.traddr
                            .trim()
                            .parse::<IpAddr>()
                            .is_ok_and(|ip| m.own.contains(&ip))
                    });
                    if entries.len() != before {
                        nvmf_target::warn_every!(
                            member = %addr,
                            dropped = before - entries.len(),
                            "central discovery: announced member lists entries that are not its own"
                        );
                    }
                }
                if entries.len() > max_entries {
                    nvmf_target::warn_every!(member = %addr, entries = entries.len(), max_entries, "central discovery: member log truncated");
                    entries.truncate(max_entries);
                }
                if m.logs.get(&host).map(|l| &***l) != Some(&entries[..]) {
                    changed = true;
                    m.logs.insert(host, Arc::new(entries));
                }
            }
            Err(e) => {
                // Keep what was read last time: a stale view beats an empty one.
                tracing::debug!(member = %addr, %host, error = %e, "central discovery: read failed");
                m.last_error = Some(e);
            }
        }
    }
    if changed {
        m.last_change = Some(SystemTime::now());
        st.epoch += 1;
    }
    changed
}

/// Read member `addr`'s log for every host in `hosts`, a few at a time.
async fn read_for_hosts(
    shared: &Arc<Shared>,
    addr: SocketAddr,
    hosts: Vec<String>,
) -> Vec<(String, Result<Vec<DiscoveryLogEntry>, String>)> {
    let mut out = Vec::with_capacity(hosts.len());
    for chunk in hosts.chunks(FETCH_PARALLEL) {
        let mut set = tokio::task::JoinSet::new();
        for h in chunk {
            let (s, h) = (shared.clone(), h.clone());
            set.spawn(async move {
                let r = fetch(&s, addr, &h).await;
                (h, r)
            });
        }
        while let Some(r) = set.join_next().await {
            if let Ok(r) = r {
                out.push(r);
            }
        }
    }
    out
}

/// Read member `addr` again for every known host and update the views.
async fn refresh_member(shared: &Arc<Shared>, addr: SocketAddr) {
    let hosts: Vec<String> = shared.lock().hosts.keys().cloned().collect();
    if hosts.is_empty() {
        return;
    }
    let results = read_for_hosts(shared, addr, hosts).await;
    let stored = {
        let mut st = shared.lock();
        store(&mut st, addr, results, shared.cfg.max_member_entries)
    };
    if stored && refresh_views(shared) {
        tracing::debug!(member = %addr, "central discovery: views changed");
        shared.changed();
    }
}

/// A new host: read every live member's log as it (in parallel, each bounded), then give it
/// its first view.
async fn first_reads(shared: Arc<Shared>, host: String) {
    if !shared.lock().hosts.contains_key(&host) {
        // Forgotten while it waited for a slot.
        return;
    }
    let members: Vec<SocketAddr> = shared
        .lock()
        .members
        .iter()
        .filter(|(_, m)| m.live)
        .map(|(a, _)| *a)
        .collect();
    let mut set = tokio::task::JoinSet::new();
    for a in members {
        let (s, h) = (shared.clone(), host.clone());
        set.spawn(async move {
            let r = fetch(&s, a, &h).await;
            (a, h, r)
        });
    }
    let mut results = Vec::new();
    while let Some(r) = set.join_next().await {
        if let Ok(r) = r {
            results.push(r);
        }
    }
    let max = shared.cfg.max_view_entries.max(1);
    let (epoch, inputs) = {
        let mut st = shared.lock();
        for (a, h, r) in results {
            store(&mut st, a, vec![(h, r)], shared.cfg.max_member_entries);
        }
        (st.epoch, st.inputs(&host))
    };
    let view = union_of(inputs.iter(), max);
    let mut st = shared.lock();
    // A member removed meanwhile (the API, from another thread): compute again, under the
    // lock (one host, bounded).
    let view = if st.epoch == epoch {
        view
    } else {
        union_of(st.inputs(&host).iter(), max)
    };
    st.install(&host, view, true);
}

/// The persistent discovery connection to member `addr`, for as long as it is a member.
async fn member_loop(shared: Arc<Shared>, addr: SocketAddr) {
    let mut backoff = BACKOFF_MIN;
    let cfg = HostConfig {
        hostnqn: shared.cfg.hostnqn.clone(),
        hostid: derived_hostid(&shared.cfg.hostnqn),
        kato_ms: u32::try_from(shared.cfg.kato.as_millis())
            .unwrap_or(u32::MAX)
            .max(1000),
        io_queues: 0,
        async_events: true,
        connect_timeout: shared.cfg.fetch_timeout,
        admin_timeout: shared.cfg.fetch_timeout.max(Duration::from_secs(1)),
        shutdown_timeout: shared.cfg.fetch_timeout,
        dhchap: shared.cfg.host_keys.get(&shared.cfg.hostnqn).cloned(),
        ..HostConfig::default()
    };
    loop {
        match Controller::connect(addr, nvme_spec::DISCOVERY_NQN, &cfg).await {
            Ok(mut ctrl) => {
                backoff = BACKOFF_MIN;
                let Some(mut events) = ctrl.take_events() else {
                    return;
                };
                {
                    let mut st = shared.lock();
                    let Some(m) = st.members.get_mut(&addr) else {
                        return;
                    };
                    m.connected = true;
                    m.last_error = None;
                    m.failures = 0;
                    let was_live = std::mem::replace(&mut m.live, true);
                    if !was_live {
                        m.last_change = Some(SystemTime::now());
                        st.epoch += 1;
                    }
                }
                tracing::info!(member = %addr, "central discovery: member connected");
                // Reading the log also arms the Discovery Log Page Change event.
                if let Err(e) = ctrl.discovery_log().await {
                    tracing::debug!(member = %addr, error = %e, "central discovery: member log read failed");
                }
                refresh_member(&shared, addr).await;
                while let Some(ev) = events.recv().await {
                    if ev.log_page != lid::DISCOVERY {
                        continue;
                    }
                    tracing::debug!(member = %addr, "central discovery: member log changed");
                    // Re-arm the event first, so a change during the reads is not missed.
                    if let Err(e) = ctrl.discovery_log().await {
                        tracing::debug!(member = %addr, error = %e, "central discovery: member log read failed");
                    }
                    refresh_member(&shared, addr).await;
                }
                // The admin queue is gone: try again at once; the entries stay until that fails.
                ctrl.disconnect().await;
                let mut st = shared.lock();
                let Some(m) = st.members.get_mut(&addr) else {
                    return;
                };
                m.connected = false;
                m.last_error = Some("connection lost".into());
                tracing::warn!(member = %addr, "central discovery: member connection lost");
            }
            Err(e) => {
                let (was_live, leave) = {
                    let mut st = shared.lock();
                    let Some(m) = st.members.get_mut(&addr) else {
                        return;
                    };
                    m.connected = false;
                    m.last_error = Some(e.to_string());
                    m.failures = m.failures.saturating_add(1);
                    let leave = m.announced && m.failures >= shared.cfg.announced_attempts.max(1);
                    let was_live = std::mem::replace(&mut m.live, false);
                    if was_live {
                        m.logs.clear();
                        m.last_change = Some(SystemTime::now());
                        tracing::warn!(member = %addr, error = %e, "central discovery: member gone");
                    }
                    if leave {
                        tracing::warn!(member = %addr, attempts = m.failures, "central discovery: announced member unreachable, it leaves");
                        st.members.remove(&addr);
                    }
                    if was_live || leave {
                        st.epoch += 1;
                    }
                    (was_live, leave)
                };
                if (was_live || leave) && refresh_views(&shared) {
                    shared.changed();
                }
                if leave {
                    return;
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(shared.cfg.backoff_max.max(BACKOFF_MIN));
            }
        }
    }
}
