//! A Central Discovery Controller (NVMe TP 8010): one discovery service that shows each host
//! the NVM subsystems every member of the fleet would show *that host*.
//!
//! [`Cdc::start`] installs itself on a [`Target`] as its [`CentralDiscovery`](nvmf_target::CentralDiscovery) (the target then
//! reports DCTYPE 2) and runs on its own thread with a single-threaded tokio runtime:
//!
//! - for every member it keeps a persistent discovery connection (the CDC's own host NQN,
//!   keep-alive, Discovery Log Page Change enabled with Set Features Asynchronous Event
//!   Configuration, one Asynchronous Event Request outstanding — [`nvmf_host`] does that for a
//!   discovery controller connected with a KATO and events), and reconnects with a bounded
//!   exponential backoff when it drops;
//! - members apply their own host lists, so the CDC reads each member's log *as each host*
//!   (a short discovery connection with that host's NQN, like `nvme discover`), for every host
//!   it knows (hosts that connected to the CDC's discovery service, at most
//!   [`CdcConfig::max_hosts`], forgotten after [`CdcConfig::host_idle`] without a connection),
//!   and caches the result per (member, host). It reads again for every known host when the
//!   member raises Discovery Log Page Change or its persistent connection comes back;
//! - only NVM subsystem entries (SUBTYPE 2) are kept from members (their current-discovery and
//!   referral entries point at the members, which a host of the CDC never needs); an entry two
//!   members both return identically is shown once;
//! - a member whose connection is lost keeps its entries until a reconnect fails, then they
//!   leave every view, and come back when it does;
//! - whenever any host's view changes the target's discovery generation counter moves and its
//!   discovery controllers get a Discovery Log Page Change event
//!   ([`Target::discovery_log_changed`]).
//!
//! Who may join: members are configured (`[cdc] members`, the API), or announce themselves by
//! DIM pull registration — admitted only from a discovery controller the CDC trusts
//! ([`CdcConfig::trusted`]: a source address or host NQN, a configured member's address, or a
//! connection that authenticated with DH-HMAC-CHAP), at most [`CdcConfig::max_members`]
//! members in all. An announced member serves only entries that point at its own addresses,
//! leaves when the registrations that announced it are withdrawn, replaced or expire, and
//! leaves after [`CdcConfig::announced_attempts`] failed connection attempts.
//!
//! Bounds against hostile hosts and members: new hosts are admitted at most
//! [`CdcConfig::new_hosts_per_sec`] (a host not admitted yet keeps CSTS.RDY at 0 and is
//! admitted on a later poll), at most [`CdcConfig::max_first_reads`] first reads run at once,
//! a full host table forgets a host never served (or one idle for
//! [`CdcConfig::host_protect`]) and never a recently active one, a member's log for one host
//! keeps at most [`CdcConfig::max_member_entries`] entries and a view at most
//! [`CdcConfig::max_view_entries`]. Views are computed outside the lock the reactors take and
//! swapped in.
//!
//! A host seen for the first time has no view until the first reads complete (each bounded by
//! [`CdcConfig::fetch_timeout`], so a member that does not answer delays it by at most that):
//! meanwhile [`CentralDiscovery::entries`](nvmf_target::CentralDiscovery::entries) answers `None` and the target holds CSTS.RDY at 0.
//! Every [`CentralDiscovery`](nvmf_target::CentralDiscovery) method only takes a short lock and returns at once.

mod members;
mod shared;
mod state;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use nvmf_host::DhchapKeys;
use nvmf_target::Target;
use tokio::sync::mpsc;

use members::{refresh_views, run};
use shared::Shared;
use state::{EntryKey, Member, State, entry_key};

/// The port of a member's discovery service when none is given (the NVMe-oF discovery port).
pub const DEFAULT_MEMBER_PORT: u16 = 8009;

/// Host NQN of the CDC's connections when nothing better is known.
const FALLBACK_HOSTNQN: &str = "nqn.2026-11.io.ebof:cdc";

/// Who may announce a discovery controller to the CDC (`[cdc] trusted`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Trusted {
    /// The source IP address of the registering discovery connection.
    Address(IpAddr),
    /// The host NQN of the registering discovery connection. Host NQNs are self-declared:
    /// give this NQN a DH-HMAC-CHAP secret in the CDC's `[[hosts]]` so that the discovery
    /// connection must prove it.
    Nqn(String),
}

impl std::fmt::Display for Trusted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Trusted::Address(a) => write!(f, "{a}"),
            Trusted::Nqn(n) => f.write_str(n),
        }
    }
}

/// How a CDC runs.
#[derive(Clone, Debug)]
pub struct CdcConfig {
    /// The members' discovery services.
    pub members: Vec<SocketAddr>,
    /// The host NQN of the CDC's persistent connections to its members ([`default_hostnqn`]).
    pub hostnqn: String,
    /// Keep Alive Timeout of the persistent connections (default 30 s).
    pub kato: Duration,
    /// Bound on one read of a member's log (connect, read, disconnect): default 2 s. A first-time
    /// host waits at most about this long for its view.
    pub fetch_timeout: Duration,
    /// Longest delay between two reconnect attempts to a member (default 10 s).
    pub backoff_max: Duration,
    /// Hosts remembered at most (default 1024); the one seen least recently is forgotten first.
    pub max_hosts: usize,
    /// A host with no discovery connection to the CDC for this long is forgotten (default
    /// 15 min); it gets a fresh view when it comes back.
    pub host_idle: Duration,
    /// Who may announce itself by DIM besides the configured members and DH-HMAC-CHAP
    /// authenticated connections (default: nobody). Changed live by [`Cdc::set_trusted`].
    pub trusted: Vec<Trusted>,
    /// Most members, configured and announced (default 256): an announcement beyond it is
    /// refused with Insufficient Discovery Resources. Configured members are never refused.
    pub max_members: usize,
    /// An announced member that fails this many connection attempts in a row leaves
    /// (default 5); it comes back when it registers again.
    pub announced_attempts: u32,
    /// Most NVM subsystem entries kept of one member's log for one host (default 512).
    pub max_member_entries: usize,
    /// Most entries of one host's view (default 1024, what a discovery log read holds).
    pub max_view_entries: usize,
    /// Most first reads (of every member, for a new host) running at once (default 16); at
    /// most four times as many new hosts wait for their first view, later ones are admitted
    /// on a later poll.
    pub max_first_reads: usize,
    /// New hosts admitted per second, with a burst of as many (default 32). A host not
    /// admitted yet sees CSTS.RDY 0 and is admitted on a later poll.
    pub new_hosts_per_sec: u32,
    /// A full host table never forgets a host served within this long (default 60 s): a
    /// flood of new host NQNs waits instead of evicting real hosts' views.
    pub host_protect: Duration,
    /// DH-HMAC-CHAP secrets by host NQN (the CDC's `[[hosts]]` for every subsystem or the
    /// discovery NQN): used when a member asks for authentication of a read made as that host
    /// (members authenticate discovery of hosts that have secrets), and of the CDC's own
    /// persistent connections (its [`CdcConfig::hostnqn`]). Without one, a member that
    /// requires it gives the CDC no view for that host.
    pub host_keys: HashMap<String, DhchapKeys>,
}

impl CdcConfig {
    /// Defaults for members `members` and host NQN `hostnqn`.
    pub fn new(members: Vec<SocketAddr>, hostnqn: String) -> CdcConfig {
        CdcConfig {
            members,
            hostnqn,
            kato: Duration::from_secs(30),
            fetch_timeout: Duration::from_secs(2),
            backoff_max: Duration::from_secs(10),
            max_hosts: 1024,
            host_idle: Duration::from_secs(15 * 60),
            trusted: Vec::new(),
            max_members: 256,
            announced_attempts: 5,
            max_member_entries: 512,
            max_view_entries: 1024,
            max_first_reads: 16,
            new_hosts_per_sec: 32,
            host_protect: Duration::from_secs(60),
            host_keys: HashMap::new(),
        }
    }
}

/// A stable host NQN for the CDC's own connections: the machine's `/etc/machine-id` as a UUID
/// NQN (`nqn.2014-08.org.nvmexpress:uuid:…`), else `nqn.2026-11.io.ebof:cdc`.
pub fn default_hostnqn() -> String {
    std::fs::read_to_string("/etc/machine-id")
        .ok()
        .and_then(|s| machine_id_nqn(s.trim()))
        .unwrap_or_else(|| FALLBACK_HOSTNQN.to_string())
}

/// `nqn.2014-08.org.nvmexpress:uuid:` + the 32 hex digits of a machine id as a UUID.
fn machine_id_nqn(id: &str) -> Option<String> {
    if id.len() != 32 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let h = id.to_ascii_lowercase();
    Some(format!(
        "nqn.2014-08.org.nvmexpress:uuid:{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    ))
}

/// What [`Cdc::members`] says of one member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberStatus {
    /// The member's discovery service.
    pub address: SocketAddr,
    /// The persistent discovery connection is up.
    pub connected: bool,
    /// Why the last connection attempt or read failed (cleared on a successful connect).
    pub last_error: Option<String>,
    /// Distinct NVM subsystem entries of this member over every known host's view.
    pub entries: usize,
    /// When what this member shows some host last changed.
    pub last_change: Option<SystemTime>,
    /// It announced itself (a DIM registration as a discovery controller), rather than
    /// being configured or added through the API.
    pub announced: bool,
}

/// A request to the CDC's thread.
enum Cmd {
    /// Read every member's log for this new host.
    HostSeen(String),
    /// Start the member task of this (already recorded) member.
    Add(SocketAddr),
    /// Stop the member task.
    Remove(SocketAddr),
    /// Members left: recompute the views (off the reactor threads) and tell the hosts.
    Refresh,
    /// Stop everything.
    Stop,
}

/// A running Central Discovery Controller (see the module docs). Stopped by [`Cdc::stop`] or
/// when dropped.
#[derive(Debug)]
pub struct Cdc {
    shared: Arc<Shared>,
    thread: Mutex<Option<(std::thread::JoinHandle<()>, std::sync::mpsc::Receiver<()>)>>,
}

/// How long [`Cdc::stop`] waits for the CDC's thread.
const STOP_WAIT: Duration = Duration::from_secs(3);

impl Cdc {
    /// Start a CDC over `cfg.members` and make it `target`'s [`CentralDiscovery`](nvmf_target::CentralDiscovery).
    pub fn start(target: &Arc<Target>, cfg: CdcConfig) -> std::io::Result<Cdc> {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut st = State::new(cfg.trusted.clone(), cfg.new_hosts_per_sec.max(1));
        for m in &cfg.members {
            st.members.insert(*m, Member::default());
        }
        let shared = Arc::new(Shared {
            cfg,
            st: Mutex::new(st),
            tx,
            target: Arc::downgrade(target),
        });
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("ebof-cdc".into())
            .spawn(move || {
                rt.block_on(run(s, rx));
                let _ = done_tx.send(());
            })?;
        target.set_central(Some(shared.clone()));
        tracing::info!(
            members = shared.cfg.members.len(),
            hostnqn = %shared.cfg.hostnqn,
            "central discovery controller started"
        );
        Ok(Cdc {
            shared,
            thread: Mutex::new(Some((thread, done_rx))),
        })
    }

    /// The host NQN of the CDC's connections to its members.
    pub fn hostnqn(&self) -> &str {
        &self.shared.cfg.hostnqn
    }

    /// Add member `addr`; false if it is already one.
    pub fn add_member(&self, addr: SocketAddr) -> bool {
        let mut st = self.shared.lock();
        if st.members.contains_key(&addr) {
            return false;
        }
        st.members.insert(addr, Member::default());
        let _ = self.shared.tx.send(Cmd::Add(addr));
        true
    }

    /// Remove member `addr` (its entries leave every view at once); false if it is not one.
    pub fn remove_member(&self, addr: SocketAddr) -> bool {
        {
            let mut st = self.shared.lock();
            if st.members.remove(&addr).is_none() {
                return false;
            }
            st.epoch += 1;
        }
        let _ = self.shared.tx.send(Cmd::Remove(addr));
        if refresh_views(&self.shared) {
            self.shared.changed();
        }
        true
    }

    /// Who may announce itself besides configured members and authenticated connections.
    pub fn trusted(&self) -> Vec<Trusted> {
        self.shared.lock().trusted.clone()
    }

    /// Replace the trusted list: later registrations are checked against it (members already
    /// announced stay until withdrawn, unreachable or removed).
    pub fn set_trusted(&self, list: Vec<Trusted>) {
        self.shared.lock().trusted = list;
    }

    /// Every member, in address order.
    pub fn members(&self) -> Vec<MemberStatus> {
        let st = self.shared.lock();
        st.members
            .iter()
            .map(|(a, m)| {
                let distinct: HashSet<EntryKey<'_>> = m
                    .logs
                    .values()
                    .flat_map(|l| l.iter())
                    .map(entry_key)
                    .collect();
                MemberStatus {
                    address: *a,
                    connected: m.connected,
                    last_error: m.last_error.clone(),
                    entries: if m.live { distinct.len() } else { 0 },
                    last_change: m.last_change,
                    announced: m.announced,
                }
            })
            .collect()
    }

    /// How many hosts the CDC keeps views for.
    pub fn known_hosts(&self) -> usize {
        self.shared.lock().hosts.len()
    }

    /// Stop: the target is no longer a CDC, the member connections close; waits at most 3 s.
    pub fn stop(&self) {
        let Some((thread, done)) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take()
        else {
            return;
        };
        if let Some(t) = self.shared.target.upgrade() {
            t.set_central(None);
        }
        let _ = self.shared.tx.send(Cmd::Stop);
        match done.recv_timeout(STOP_WAIT) {
            Ok(()) => {
                let _ = thread.join();
            }
            Err(_) => tracing::warn!("central discovery controller did not stop in time"),
        }
    }
}

impl Drop for Cdc {
    fn drop(&mut self) {
        self.stop();
    }
}
