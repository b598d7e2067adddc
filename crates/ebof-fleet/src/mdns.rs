//! mDNS / DNS-SD publication of the discovery listeners (NVMe TP 8009).
//!
//! **What it is**: every listener of `ebof serve` answers discovery (each `[[listeners]]` entry
//! and the dedicated `[discovery]` listener), and each can be announced on its link as a
//! DNS-SD service, so that hosts with an empty configuration find the box: nvme-stas's
//! `stafd` (through avahi-daemon's browser), SPDK's `bdev_nvme_start_mdns_discovery`,
//! `avahi-browse -r _nvme-disc._tcp`. The record has SPDK's shape
//! (`lib/nvmf/mdns_server.c`): service type `_nvme-disc._tcp`, TXT `p=tcp` and
//! `nqn=nqn.2014-08.org.nvmexpress.discovery`, port = the listener's port. nvme-stas reads
//! `p` (required: `tcp`, or `roce`/`iwarp`/`rdma` for NVMe/RDMA; keys are case-insensitive),
//! `nqn`, the resolved address and port, and takes the interface the answer came in on as
//! `host-iface`; it then checks the port with a TCP connect before using it.
//!
//! - **Which listeners** ([`Mode`], `[discovery] mdns`): `auto` (key absent) publishes every
//!   listener not on a loopback address; `on` (`mdns = true`) every listener, loopback ones
//!   too (a loopback interface needs the MULTICAST flag for that: `ip link set lo multicast
//!   on`); `off` (`mdns = false`) none.
//! - **Where**: a listener on an address is published on the interface that owns that
//!   address only, with that address in the host's A/AAAA record. A listener on `0.0.0.0`
//!   is published on every interface that is up and multicast-capable (not loopback, unless
//!   `on`), each with its own IPv4 addresses; one on `::` likewise with IPv6 addresses (the
//!   runtime binds `::` IPv6-only). Interfaces are read when the set of records is
//!   computed: at start, when a listener is added or removed, when the mode is set (setting
//!   the same mode again re-reads them).
//! - **Names**: one host name and one instance name per listener, derived from the
//!   machine's host name, the address and the port (`<host>-10-77-0-11-8009.local.`,
//!   instance `ebof-<host>-10-77-0-11-8009`), so several `ebof serve` on different
//!   addresses of one network namespace, and several listeners of one serve, never claim
//!   the same name.
//! - **NVMe/RDMA** listeners are published too, as `_nvme-disc._udp` with `p=roce` (RoCEv2 is
//!   RDMA over UDP; nvme-stas ≥ 2.1.2 browses `_nvme-disc._udp` and maps `roce`, `iwarp` and
//!   `rdma` alike to the rdma transport). SPDK skips RDMA listeners because it cannot tell
//!   RoCE from iWARP; on iWARP the record says `roce` but the host connects the same way.
//! - **Withdrawal**: a record is withdrawn with goodbye packets (TTL 0, sent twice, 120 ms
//!   apart) when its listener is removed, when the mode leaves it out, and at shutdown; the
//!   responder waits (bounded) until they are sent.
//! - **Best effort**: a listener whose address no multicast-capable interface owns, or a
//!   socket the responder cannot open, is logged and shown in `ebof ctl show` / `GET
//!   /v1/mdns`; NVMe is served regardless.
//!
//! **How**: the pure-Rust `mdns-sd` responder (its own thread on mio; no avahi-daemon
//! needed). Its sockets bind UDP 5353 with SO_REUSEADDR and SO_REUSEPORT, so it shares the
//! port with an avahi-daemon on the same machine (avahi sets SO_REUSEADDR too; Linux lets
//! UDP sockets that all set SO_REUSEADDR share a port, and delivers each multicast datagram
//! to every one of them) and with other `ebof serve` processes. The responder only enables
//! the addresses its records need, so it joins the mDNS group on those interfaces only.
//!
//! (The management API's side — `GET`/`PUT /v1/mdns`, keeping the records in step with the
//! running configuration — is `ebof_mgmt::mdns`.)
//!
//! **Layout**: [`plan`] is the deterministic core (mode + listeners + interfaces → records,
//! each published or skipped or failed with a reason), unit-tested without sockets;
//! [`Responder`] is the thin shell that reads the interfaces, diffs the plan against what it
//! published, and drives `mdns-sd`.

use ebof_api::{MdnsRecordView, MdnsView};
use ebof_config::{Config, DISCOVERY_NQN, Transport};
use mdns_sd::{DaemonEvent, IfKind, ServiceDaemon, ServiceInfo};
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// DNS-SD service type of an NVMe/TCP discovery service (TP 8009).
pub const SERVICE_TCP: &str = "_nvme-disc._tcp.local.";
/// DNS-SD service type of an NVMe/RDMA (RoCEv2) discovery service.
pub const SERVICE_UDP: &str = "_nvme-disc._udp.local.";
/// The longest a DNS label may be (RFC 1035 §2.3.4).
const LABEL_MAX: usize = 63;
/// How long a withdrawal waits for the responder to confirm each record's goodbye.
const GOODBYE_WAIT: Duration = Duration::from_secs(1);
/// `mdns-sd` repeats a goodbye 120 ms after the first; give it time to leave.
const GOODBYE_REPEAT: Duration = Duration::from_millis(250);

/// Which discovery listeners are published (`[discovery] mdns`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// Every listener not on a loopback address (the key is absent).
    #[default]
    Auto,
    /// Every listener, loopback ones too (`mdns = true`).
    On,
    /// None (`mdns = false`).
    Off,
}

impl Mode {
    /// The mode a configuration's `[discovery] mdns` asks for.
    pub fn from_setting(s: Option<bool>) -> Mode {
        match s {
            None => Mode::Auto,
            Some(true) => Mode::On,
            Some(false) => Mode::Off,
        }
    }

    /// What `[discovery] mdns` holds for this mode.
    pub fn setting(self) -> Option<bool> {
        match self {
            Mode::Auto => None,
            Mode::On => Some(true),
            Mode::Off => Some(false),
        }
    }

    /// `auto`, `on` or `off`.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Auto => "auto",
            Mode::On => "on",
            Mode::Off => "off",
        }
    }

    /// The mode named `s` (`auto`, `on`/`true`, `off`/`false`).
    pub fn parse(s: &str) -> Option<Mode> {
        match s {
            "auto" => Some(Mode::Auto),
            "on" | "true" => Some(Mode::On),
            "off" | "false" => Some(Mode::Off),
            _ => None,
        }
    }
}

/// A listener that answers discovery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiscoveryListener {
    /// Where it listens (port resolved).
    pub addr: SocketAddr,
    /// Its transport.
    pub transport: Transport,
}

/// The listeners published as discovery services: the dedicated `[discovery]` listener when
/// there is one (as SPDK publishes only its discovery listeners: a host that found the box
/// once should not keep two discovery controllers to it), else every `[[listeners]]` entry
/// (each answers discovery too).
pub fn discovery_listeners(cfg: &Config) -> Vec<DiscoveryListener> {
    let chosen: Vec<&ebof_config::Listener> = match &cfg.discovery {
        Some(d) => vec![d],
        None => cfg.listeners.iter().collect(),
    };
    chosen
        .into_iter()
        .map(|l| DiscoveryListener {
            addr: l.socket_addr(),
            transport: cfg.transport(l),
        })
        .collect()
}

/// One address of a network interface, as the planner sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interface {
    /// Interface name (`eth0`).
    pub name: String,
    /// The address.
    pub ip: IpAddr,
    /// IFF_UP.
    pub up: bool,
    /// IFF_LOOPBACK.
    pub loopback: bool,
    /// IFF_MULTICAST.
    pub multicast: bool,
}

/// What becomes of a planned record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Publish it.
    Publish,
    /// The mode leaves it out (a loopback listener in `auto`).
    Skipped(String),
    /// It cannot be published (no multicast-capable interface owns the address).
    Failed(String),
}

/// One DNS-SD service instance for one discovery listener.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The listener.
    pub listener: DiscoveryListener,
    /// Service type ([`SERVICE_TCP`] or [`SERVICE_UDP`]).
    pub service: &'static str,
    /// Instance name (one DNS label).
    pub instance: String,
    /// Host name of the SRV record, `<label>.local.`.
    pub host: String,
    /// The host's addresses, each with the interface that owns it.
    pub addresses: Vec<(String, IpAddr)>,
    /// TXT record, `(key, value)`.
    pub txt: Vec<(&'static str, String)>,
    /// Publish, skip or fail.
    pub outcome: Outcome,
}

impl Record {
    /// The instance's full DNS-SD name, `<instance>.<service>`.
    pub fn fullname(&self) -> String {
        format!("{}.{}", self.instance, self.service)
    }
}

/// The records `mode` asks for, one per listener in `listeners` (none in `off` mode), on the
/// interface addresses `ifaces`; `machine` is this machine's host name. Deterministic: the
/// same inputs give the same records.
pub fn plan(
    mode: Mode,
    listeners: &[DiscoveryListener],
    ifaces: &[Interface],
    machine: &str,
) -> Vec<Record> {
    if mode == Mode::Off {
        return Vec::new();
    }
    listeners
        .iter()
        .map(|l| {
            let (service, proto) = match l.transport {
                Transport::Tcp => (SERVICE_TCP, "tcp"),
                Transport::Rdma => (SERVICE_UDP, "roce"),
            };
            let label = host_label(machine, l.addr);
            let (addresses, outcome) = place(mode, l.addr.ip(), ifaces);
            Record {
                listener: *l,
                service,
                instance: format!("ebof-{label}"),
                host: format!("{label}.local."),
                addresses,
                txt: vec![("p", proto.to_string()), ("nqn", DISCOVERY_NQN.to_string())],
                outcome,
            }
        })
        .collect()
}

/// The interface addresses a listener on `ip` is published with, or why it is not.
fn place(mode: Mode, ip: IpAddr, ifaces: &[Interface]) -> (Vec<(String, IpAddr)>, Outcome) {
    let usable = |i: &Interface| i.up && i.multicast && (!i.loopback || mode == Mode::On);
    if ip.is_unspecified() {
        let family = if ip.is_ipv4() { "IPv4" } else { "IPv6" };
        let addrs: Vec<(String, IpAddr)> = ifaces
            .iter()
            .filter(|i| i.ip.is_ipv4() == ip.is_ipv4() && usable(i))
            .map(|i| (i.name.clone(), i.ip))
            .collect();
        if addrs.is_empty() {
            let why = format!(
                "no interface that is up and multicast-capable{} has an {family} address",
                if mode == Mode::On {
                    ""
                } else {
                    " (loopback aside)"
                }
            );
            return (addrs, Outcome::Failed(why));
        }
        return (addrs, Outcome::Publish);
    }
    if ip.is_loopback() && mode == Mode::Auto {
        return (
            Vec::new(),
            Outcome::Skipped(
                "loopback address (mdns = true, `ebof ctl mdns on`, publishes it)".into(),
            ),
        );
    }
    let owners: Vec<&Interface> = ifaces.iter().filter(|i| i.ip == ip).collect();
    let Some(first) = owners.first() else {
        return (
            Vec::new(),
            Outcome::Failed(format!("no interface has the address {ip}")),
        );
    };
    let addrs: Vec<(String, IpAddr)> = owners
        .iter()
        .filter(|i| usable(i))
        .map(|i| (i.name.clone(), i.ip))
        .collect();
    if addrs.is_empty() {
        let why = if !first.up {
            format!("interface {} (which has {ip}) is down", first.name)
        } else {
            format!(
                "interface {} (which has {ip}) is not multicast-capable (no MULTICAST flag{})",
                first.name,
                if first.loopback {
                    "; `ip link set lo multicast on` gives it one"
                } else {
                    ""
                }
            )
        };
        return (addrs, Outcome::Failed(why));
    }
    (addrs, Outcome::Publish)
}

/// One DNS label for a listener: `<machine>-<address>-<port>`, the address with `-` for its
/// separators, the machine's name cut (never the address or port) to fit in 52 bytes so
/// that `ebof-` plus the label fits one instance label too.
pub fn host_label(machine: &str, addr: SocketAddr) -> String {
    let ip: String = addr
        .ip()
        .to_string()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let tail = format!("{ip}-{}", addr.port());
    let mut m: String = machine
        .chars()
        .map(|c| c.to_ascii_lowercase())
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    while m.contains("--") {
        m = m.replace("--", "-");
    }
    let m = m.trim_matches('-');
    let room = (LABEL_MAX - "ebof-".len()).saturating_sub(tail.len() + 1);
    let m = m
        .get(..room.min(m.len()))
        .unwrap_or("")
        .trim_end_matches('-');
    if m.is_empty() {
        tail
    } else {
        format!("{m}-{tail}")
    }
}

/// This machine's host name (its UTS namespace's), `ebof` when it cannot be read.
fn machine_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "ebof".into())
}

/// Every address of every interface, with its flags (`getifaddrs(3)`). The crate's only
/// `unsafe`: the C list is read and freed here, each step with its SAFETY argument.
#[allow(unsafe_code)]
pub fn interfaces() -> std::io::Result<Vec<Interface>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list that stays valid until freeifaddrs below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut p = head;
    while !p.is_null() {
        // SAFETY: `p` is a node of the list getifaddrs returned (not yet freed).
        let ifa = unsafe { &*p };
        p = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() {
            continue;
        }
        // SAFETY: ifa_addr points to a sockaddr of the family it names; the casts below
        // follow that family.
        let ip = unsafe {
            match i32::from((*ifa.ifa_addr).sa_family) {
                libc::AF_INET => {
                    let sin = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                    IpAddr::from(u32::from_be(sin.sin_addr.s_addr).to_be_bytes())
                }
                libc::AF_INET6 => {
                    let sin6 = &*(ifa.ifa_addr as *const libc::sockaddr_in6);
                    IpAddr::from(sin6.sin6_addr.s6_addr)
                }
                _ => continue,
            }
        };
        // SAFETY: ifa_name is a NUL-terminated string owned by the list.
        let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        let flags = ifa.ifa_flags;
        out.push(Interface {
            name,
            ip,
            up: flags & libc::IFF_UP as u32 != 0,
            loopback: flags & libc::IFF_LOOPBACK as u32 != 0,
            multicast: flags & libc::IFF_MULTICAST as u32 != 0,
        });
    }
    // SAFETY: `head` came from getifaddrs and is freed once; no reference into it remains.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

/// What the responder's thread reported (drained by a small logger thread).
#[derive(Debug, Default)]
struct Events {
    /// Full names (lower case) announced on the wire.
    announced: BTreeSet<String>,
    /// Addresses the responder found after start (an interface that got its carrier late):
    /// it announces every record on such an interface as it adds it.
    late_ips: BTreeSet<IpAddr>,
    /// What is registered now (a copy of the shell's `published`, for the log thread).
    registered: BTreeMap<String, Record>,
    /// The latest error of the responder itself.
    error: Option<String>,
}

/// The running `mdns-sd` responder and what it was told to enable.
struct Daemon {
    sd: ServiceDaemon,
    enabled: BTreeSet<IpAddr>,
}

/// The shell's state, under one mutex.
#[derive(Default)]
struct Shell {
    mode: Mode,
    /// The latest plan (what `view` shows).
    plan: Vec<Record>,
    /// Registered records by full name (lower case).
    published: BTreeMap<String, Record>,
    /// Records whose registration the responder refused, by full name (lower case).
    refused: BTreeMap<String, String>,
    daemon: Option<Daemon>,
    /// Failure to read the interfaces or start the responder.
    error: Option<String>,
}

/// The mDNS responder of one `ebof serve`: publishes what [`plan`] asks for, withdraws what it
/// no longer asks for. Starts `mdns-sd` only when there is something to publish, and stops
/// it (port 5353 released) when there is nothing left.
pub struct Responder {
    /// Serialises applies (held across a whole apply, goodbye waits included).
    turn: Mutex<()>,
    /// The state (held briefly).
    shell: Mutex<Shell>,
    events: Arc<Mutex<Events>>,
    machine: String,
}

impl std::fmt::Debug for Responder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Responder")
            .field("machine", &self.machine)
            .finish_non_exhaustive()
    }
}

impl Default for Responder {
    fn default() -> Self {
        Responder::new()
    }
}

impl Responder {
    /// A responder that publishes nothing yet.
    pub fn new() -> Responder {
        Responder {
            turn: Mutex::new(()),
            shell: Mutex::new(Shell::default()),
            events: Arc::new(Mutex::new(Events::default())),
            machine: machine_name(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Shell> {
        self.shell.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Publish what the configuration `cfg()` returns asks for (its `[discovery] mdns` mode
    /// and its listeners, ports as bound), withdraw the rest. `cfg` is called once this
    /// responder's turn has come, so concurrent changes end with the latest configuration
    /// published.
    pub fn apply_config(&self, cfg: impl FnOnce() -> Config) -> MdnsView {
        let _turn = self.turn.lock().unwrap_or_else(|e| e.into_inner());
        let cfg = cfg();
        self.apply_turn(
            Mode::from_setting(cfg.discovery_settings.mdns),
            &discovery_listeners(&cfg),
        )
    }

    /// Publish what `mode` asks for `listeners`, withdraw the rest; the view afterwards.
    pub fn apply(&self, mode: Mode, listeners: &[DiscoveryListener]) -> MdnsView {
        let _turn = self.turn.lock().unwrap_or_else(|e| e.into_inner());
        self.apply_turn(mode, listeners)
    }

    /// [`Responder::apply`] with the turn taken. The state lock is held only between the
    /// responder's calls, never while a goodbye is waited for, so views never wait long.
    fn apply_turn(&self, mode: Mode, listeners: &[DiscoveryListener]) -> MdnsView {
        let ifaces = if mode == Mode::Off || listeners.is_empty() {
            Ok(Vec::new())
        } else {
            interfaces()
        };
        let plan = match ifaces {
            Ok(ifaces) => plan(mode, listeners, &ifaces, &self.machine),
            Err(e) => {
                let why = format!("cannot list the network interfaces: {e}");
                let mut p = plan(mode, listeners, &[], &self.machine);
                for r in &mut p {
                    if r.outcome == Outcome::Publish || matches!(r.outcome, Outcome::Failed(_)) {
                        r.outcome = Outcome::Failed(why.clone());
                    }
                }
                p
            }
        };
        for r in &plan {
            if let Outcome::Failed(why) = &r.outcome {
                tracing::warn!(listener = %r.listener.addr, reason = %why, "mDNS: not published");
            }
        }
        let wanted: BTreeMap<String, Record> = plan
            .iter()
            .filter(|r| r.outcome == Outcome::Publish)
            .map(|r| (r.fullname().to_lowercase(), r.clone()))
            .collect();
        // Withdraw what is no longer wanted, or wanted with other content.
        let waits = {
            let mut sh = self.lock();
            sh.mode = mode;
            sh.error = None;
            let gone: Vec<String> = sh
                .published
                .iter()
                .filter(|(k, r)| wanted.get(*k) != Some(*r))
                .map(|(k, _)| k.clone())
                .collect();
            sh.refused.retain(|k, _| wanted.contains_key(k));
            withdraw(&mut sh, &gone)
        };
        wait_goodbyes(waits);
        let mut sh = self.lock();
        let fresh: Vec<Record> = wanted
            .iter()
            .filter(|(k, _)| !sh.published.contains_key(*k))
            .map(|(_, r)| r.clone())
            .collect();
        let needed: BTreeSet<IpAddr> = wanted
            .values()
            .flat_map(|r| r.addresses.iter().map(|(_, ip)| *ip))
            .collect();
        if needed.is_empty() {
            if let Some(d) = sh.daemon.take() {
                stop(d);
            }
        } else {
            match self.daemon(&mut sh) {
                Ok(d) => {
                    let add: Vec<IfKind> = needed
                        .difference(&d.enabled)
                        .map(|ip| IfKind::Addr(*ip))
                        .collect();
                    let drop: Vec<IfKind> = d
                        .enabled
                        .difference(&needed)
                        .map(|ip| IfKind::Addr(*ip))
                        .collect();
                    let mut failed = None;
                    if !drop.is_empty()
                        && let Err(e) = d.sd.disable_interface(drop)
                    {
                        failed = Some(e.to_string());
                    }
                    if !add.is_empty()
                        && let Err(e) = d.sd.enable_interface(add)
                    {
                        failed = Some(e.to_string());
                    }
                    d.enabled = needed;
                    let results: Vec<(Record, Result<(), String>)> = fresh
                        .into_iter()
                        .map(|r| {
                            let res = register(&d.sd, &r);
                            (r, res)
                        })
                        .collect();
                    for (r, res) in results {
                        let key = r.fullname().to_lowercase();
                        match res {
                            Ok(()) => {
                                tracing::info!(
                                    listener = %r.listener.addr,
                                    instance = %r.instance,
                                    host = %r.host,
                                    addresses = %r.addresses.iter().map(|(i, a)| format!("{a}%{i}")).collect::<Vec<_>>().join(", "),
                                    "mDNS: publishing {}",
                                    r.service
                                );
                                sh.published.insert(key, r);
                            }
                            Err(e) => {
                                tracing::warn!(listener = %r.listener.addr, error = %e, "mDNS: not published");
                                sh.refused.insert(key, e);
                            }
                        }
                    }
                    if let Some(e) = failed {
                        tracing::warn!(error = %e, "mDNS: the responder refused an interface change");
                        sh.error = Some(e);
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "mDNS: the responder cannot start; nothing is published (NVMe is served regardless)");
                    sh.error = Some(e);
                }
            }
        }
        sh.plan = plan;
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .registered = sh.published.clone();
        self.view_locked(&sh)
    }

    /// The running daemon, started (every interface disabled) if there is none.
    fn daemon<'a>(&self, sh: &'a mut Shell) -> Result<&'a mut Daemon, String> {
        if sh.daemon.is_none() {
            let sd = ServiceDaemon::new().map_err(|e| e.to_string())?;
            // mdns-sd enables every interface (loopback too) by default: start from none and
            // enable exactly the addresses the records need.
            sd.disable_interface(IfKind::All)
                .map_err(|e| e.to_string())?;
            let monitor = sd.monitor().map_err(|e| e.to_string())?;
            let sd2 = sd.clone();
            let events = self.events.clone();
            if let Ok(mut ev) = events.lock() {
                *ev = Events::default();
            }
            // Log what the responder's thread reports; the thread ends when it stops.
            let spawned = std::thread::Builder::new()
                .name("ebof-mdns-log".into())
                .spawn(move || {
                    while let Ok(ev) = monitor.recv() {
                        let mut e = events.lock().unwrap_or_else(|e| e.into_inner());
                        match ev {
                            DaemonEvent::Announce(name, addrs) => {
                                tracing::debug!(%name, %addrs, "mDNS: announced");
                                e.announced.insert(name.to_lowercase());
                            }
                            DaemonEvent::IpAdd(ip) => {
                                // mdns-sd brings only services with automatic addresses up
                                // on an interface it finds late (no carrier at start: a tap
                                // whose VM starts later); ours list their address, so
                                // registering them again announces them there.
                                e.late_ips.insert(ip);
                                let again: Vec<Record> = e
                                    .registered
                                    .values()
                                    .filter(|r| r.addresses.iter().any(|(_, a)| *a == ip))
                                    .cloned()
                                    .collect();
                                drop(e);
                                for r in again {
                                    match register(&sd2, &r) {
                                        Ok(()) => tracing::info!(%ip, instance = %r.instance, "mDNS: interface came up; announced"),
                                        Err(err) => tracing::warn!(%ip, instance = %r.instance, error = %err, "mDNS: announcing on a new interface failed"),
                                    }
                                }
                            }
                            DaemonEvent::IpDel(ip) => {
                                e.late_ips.remove(&ip);
                            }
                            DaemonEvent::Error(err) => {
                                tracing::warn!(error = %err, "mDNS responder");
                                e.error = Some(err.to_string());
                            }
                            DaemonEvent::NameChange(c) => tracing::warn!(
                                original = %c.original,
                                new = %c.new_name,
                                "mDNS: name conflict on the link; renamed"
                            ),
                            other => tracing::trace!(event = ?other, "mDNS"),
                        }
                    }
                });
            if let Err(e) = spawned {
                let _ = sd.shutdown();
                return Err(format!("cannot start the mDNS log thread: {e}"));
            }
            sh.daemon = Some(Daemon {
                sd,
                enabled: BTreeSet::new(),
            });
        }
        sh.daemon
            .as_mut()
            .ok_or_else(|| "the mDNS responder is not running".to_string())
    }

    /// What is published now.
    pub fn view(&self) -> MdnsView {
        let sh = self.lock();
        self.view_locked(&sh)
    }

    fn view_locked(&self, sh: &Shell) -> MdnsView {
        let ev = self.events.lock().unwrap_or_else(|e| e.into_inner());
        let records = sh
            .plan
            .iter()
            .map(|r| {
                let key = r.fullname().to_lowercase();
                let (state, reason) = match &r.outcome {
                    Outcome::Skipped(why) => ("skipped", Some(why.clone())),
                    Outcome::Failed(why) => ("failed", Some(why.clone())),
                    Outcome::Publish => {
                        if let Some(why) = sh.refused.get(&key) {
                            ("failed", Some(why.clone()))
                        } else if !sh.published.contains_key(&key) {
                            ("failed", sh.error.clone())
                        } else if ev.announced.contains(&key)
                            || r.addresses.iter().any(|(_, ip)| ev.late_ips.contains(ip))
                        {
                            ("announced", None)
                        } else {
                            ("probing", None)
                        }
                    }
                };
                MdnsRecordView {
                    listener: r.listener.addr.to_string(),
                    transport: match r.listener.transport {
                        Transport::Tcp => "tcp".into(),
                        Transport::Rdma => "rdma".into(),
                    },
                    service: r.service.to_string(),
                    instance: r.instance.clone(),
                    host: r.host.clone(),
                    addresses: r
                        .addresses
                        .iter()
                        .map(|(i, a)| format!("{a}%{i}"))
                        .collect(),
                    txt: r.txt.iter().map(|(k, v)| format!("{k}={v}")).collect(),
                    state: state.into(),
                    reason,
                }
            })
            .collect();
        let error = sh.error.clone().or_else(|| {
            sh.daemon
                .as_ref()
                .and_then(|_| ev.error.clone())
                .map(|e| format!("responder: {e}"))
        });
        MdnsView {
            mode: sh.mode.name().into(),
            records,
            error,
        }
    }

    /// Withdraw every record (goodbye packets, waited for within a bound) and stop the
    /// responder. For shutdown; a later [`Responder::apply`] starts again.
    pub fn shutdown(&self) {
        let _turn = self.turn.lock().unwrap_or_else(|e| e.into_inner());
        let waits = {
            let mut sh = self.lock();
            let all: Vec<String> = sh.published.keys().cloned().collect();
            withdraw(&mut sh, &all)
        };
        wait_goodbyes(waits);
        let mut sh = self.lock();
        if let Some(d) = sh.daemon.take() {
            stop(d);
        }
        sh.plan.clear();
    }
}

/// Register `r` with the responder.
fn register(sd: &ServiceDaemon, r: &Record) -> Result<(), String> {
    let ips: Vec<IpAddr> = r.addresses.iter().map(|(_, ip)| *ip).collect();
    let txt: Vec<(&str, &str)> = r.txt.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let info = ServiceInfo::new(
        r.service,
        &r.instance,
        &r.host,
        &ips[..],
        r.listener.addr.port(),
        &txt[..],
    )
    .map_err(|e| format!("bad record: {e}"))?;
    // No probing (RFC 6762 8.1): the names are unique by construction (machine, address and
    // port), so probing would only delay the first answer. Conflicts are still reported
    // (`NameChange`). A late interface is handled by registering again (`IpAdd` above).
    let mut info = info;
    info.set_requires_probe(false);
    sd.register(info)
        .map_err(|e| format!("the responder refused the record: {e}"))
}

/// A goodbye to wait for: the instance and the responder's confirmation.
type Goodbye = (String, mdns_sd::Receiver<mdns_sd::UnregisterStatus>);

/// Unregister the records `keys` (the responder sends goodbye packets); what to wait for.
fn withdraw(sh: &mut Shell, keys: &[String]) -> Vec<Goodbye> {
    let mut waits = Vec::new();
    for k in keys {
        let Some(r) = sh.published.remove(k) else {
            continue;
        };
        tracing::info!(listener = %r.listener.addr, instance = %r.instance, "mDNS: withdrawing");
        if let Some(d) = &sh.daemon {
            match d.sd.unregister(&r.fullname()) {
                Ok(rx) => waits.push((r.instance, rx)),
                Err(e) => {
                    tracing::warn!(instance = %r.instance, error = %e, "mDNS: withdrawal failed")
                }
            }
        }
    }
    waits
}

/// Wait, bounded, until the goodbyes are sent (and repeated).
fn wait_goodbyes(waits: Vec<Goodbye>) {
    if waits.is_empty() {
        return;
    }
    let deadline = Instant::now() + GOODBYE_WAIT;
    for (instance, rx) in &waits {
        let left = deadline.saturating_duration_since(Instant::now());
        if rx.recv_timeout(left).is_err() {
            tracing::warn!(%instance, "mDNS: no confirmation that the goodbye was sent");
        }
    }
    std::thread::sleep(GOODBYE_REPEAT);
}

/// Stop the responder and wait (bounded) for its thread to confirm.
fn stop(d: Daemon) {
    match d.sd.shutdown() {
        Ok(rx) => {
            let _ = rx.recv_timeout(GOODBYE_WAIT);
        }
        Err(e) => tracing::debug!(error = %e, "mDNS: responder already stopped"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(s: &str) -> DiscoveryListener {
        DiscoveryListener {
            addr: s.parse().unwrap(),
            transport: Transport::Tcp,
        }
    }

    fn intf(name: &str, ip: &str, loopback: bool, multicast: bool) -> Interface {
        Interface {
            name: name.into(),
            ip: ip.parse().unwrap(),
            up: true,
            loopback,
            multicast,
        }
    }

    fn machine() -> Vec<Interface> {
        vec![
            intf("lo", "127.0.0.1", true, false),
            intf("lo", "::1", true, false),
            intf("eth0", "10.77.0.11", false, true),
            intf("eth0", "10.77.0.12", false, true),
            intf("eth0", "fd00::11", false, true),
            intf("eth1", "192.168.5.2", false, true),
            intf("tun0", "10.9.0.1", false, false),
        ]
    }

    #[test]
    fn a_record_has_spdk_s_shape_on_the_owning_interface() {
        let p = plan(
            Mode::Auto,
            &[tcp("10.77.0.11:8009")],
            &machine(),
            "Box-1.example",
        );
        assert_eq!(p.len(), 1);
        let r = &p[0];
        assert_eq!(r.outcome, Outcome::Publish);
        assert_eq!(r.service, "_nvme-disc._tcp.local.");
        assert_eq!(
            r.txt,
            vec![
                ("p", "tcp".to_string()),
                ("nqn", "nqn.2014-08.org.nvmexpress.discovery".to_string())
            ]
        );
        assert_eq!(
            r.addresses,
            vec![("eth0".to_string(), "10.77.0.11".parse().unwrap())]
        );
        assert_eq!(r.host, "box-1-example-10-77-0-11-8009.local.");
        assert_eq!(r.instance, "ebof-box-1-example-10-77-0-11-8009");
        assert_eq!(
            r.fullname(),
            "ebof-box-1-example-10-77-0-11-8009._nvme-disc._tcp.local."
        );
    }

    #[test]
    fn names_are_unique_per_address_and_port() {
        let ls = [
            tcp("10.77.0.11:4420"),
            tcp("10.77.0.11:8009"),
            tcp("10.77.0.12:8009"),
            tcp("[fd00::11]:8009"),
        ];
        let p = plan(Mode::Auto, &ls, &machine(), "h");
        let hosts: BTreeSet<&str> = p.iter().map(|r| r.host.as_str()).collect();
        let inst: BTreeSet<&str> = p.iter().map(|r| r.instance.as_str()).collect();
        assert_eq!(hosts.len(), 4);
        assert_eq!(inst.len(), 4);
        assert_eq!(p[3].host, "h-fd00--11-8009.local.");
        assert!(p.iter().all(|r| r.outcome == Outcome::Publish));
    }

    #[test]
    fn labels_fit_one_dns_label_and_keep_the_address() {
        let long = "a".repeat(200);
        let a: SocketAddr = "[fd00:1234:5678:9abc:def0:1234:5678:9abc]:65535"
            .parse()
            .unwrap();
        let l = host_label(&long, a);
        assert!(l.len() + "ebof-".len() <= LABEL_MAX, "{l}");
        assert!(
            l.ends_with("fd00-1234-5678-9abc-def0-1234-5678-9abc-65535"),
            "{l}"
        );
        assert_eq!(host_label("", "10.0.0.1:1".parse().unwrap()), "10-0-0-1-1");
        assert_eq!(
            host_label("--My_Host..lan--", "10.0.0.1:1".parse().unwrap()),
            "my-host-lan-10-0-0-1-1"
        );
    }

    #[test]
    fn loopback_is_skipped_in_auto_and_needs_multicast_in_on() {
        let l = [tcp("127.0.0.1:8009")];
        let p = plan(Mode::Auto, &l, &machine(), "h");
        assert!(matches!(p[0].outcome, Outcome::Skipped(_)), "{p:?}");
        let p = plan(Mode::On, &l, &machine(), "h");
        match &p[0].outcome {
            Outcome::Failed(why) => assert!(why.contains("ip link set lo multicast on"), "{why}"),
            o => panic!("{o:?}"),
        }
        let mut m = machine();
        m[0].multicast = true;
        let p = plan(Mode::On, &l, &m, "h");
        assert_eq!(p[0].outcome, Outcome::Publish);
        assert_eq!(
            p[0].addresses,
            vec![("lo".into(), "127.0.0.1".parse().unwrap())]
        );
    }

    #[test]
    fn off_publishes_nothing() {
        assert!(plan(Mode::Off, &[tcp("10.77.0.11:8009")], &machine(), "h").is_empty());
    }

    #[test]
    fn an_address_no_usable_interface_owns_fails_with_the_reason() {
        let p = plan(
            Mode::Auto,
            &[tcp("10.1.1.1:8009"), tcp("10.9.0.1:8009")],
            &machine(),
            "h",
        );
        assert_eq!(
            p[0].outcome,
            Outcome::Failed("no interface has the address 10.1.1.1".into())
        );
        match &p[1].outcome {
            Outcome::Failed(why) => assert!(why.contains("tun0") && why.contains("MULTICAST")),
            o => panic!("{o:?}"),
        }
        let mut m = machine();
        m[5].up = false;
        let p = plan(Mode::Auto, &[tcp("192.168.5.2:8009")], &m, "h");
        assert_eq!(
            p[0].outcome,
            Outcome::Failed("interface eth1 (which has 192.168.5.2) is down".into())
        );
    }

    #[test]
    fn wildcards_take_every_multicast_interface_of_their_family() {
        let p = plan(
            Mode::Auto,
            &[tcp("0.0.0.0:8009"), tcp("[::]:8009")],
            &machine(),
            "h",
        );
        let ips = |r: &Record| -> Vec<String> {
            r.addresses
                .iter()
                .map(|(i, a)| format!("{a}%{i}"))
                .collect()
        };
        assert_eq!(
            ips(&p[0]),
            ["10.77.0.11%eth0", "10.77.0.12%eth0", "192.168.5.2%eth1"]
        );
        assert_eq!(ips(&p[1]), ["fd00::11%eth0"]);
        // `on` adds a multicast-capable loopback.
        let mut m = machine();
        m[0].multicast = true;
        let p = plan(Mode::On, &[tcp("0.0.0.0:8009")], &m, "h");
        assert_eq!(ips(&p[0])[0], "127.0.0.1%lo");
        // Nothing usable.
        let p = plan(Mode::Auto, &[tcp("0.0.0.0:8009")], &m[..2], "h");
        assert!(matches!(p[0].outcome, Outcome::Failed(_)));
    }

    #[test]
    fn rdma_listeners_are_published_as_roce() {
        let l = DiscoveryListener {
            addr: "10.77.0.11:4420".parse().unwrap(),
            transport: Transport::Rdma,
        };
        let p = plan(Mode::Auto, &[l], &machine(), "h");
        assert_eq!(p[0].service, "_nvme-disc._udp.local.");
        assert_eq!(p[0].txt[0], ("p", "roce".to_string()));
    }

    #[test]
    fn modes_round_trip_the_setting() {
        for m in [Mode::Auto, Mode::On, Mode::Off] {
            assert_eq!(Mode::from_setting(m.setting()), m);
            assert_eq!(Mode::parse(m.name()), Some(m));
        }
        assert_eq!(Mode::parse("yes"), None);
    }

    #[test]
    fn interfaces_lists_loopback() {
        let all = interfaces().unwrap();
        assert!(
            all.iter()
                .any(|i| i.loopback && i.ip == IpAddr::from([127, 0, 0, 1])),
            "{all:?}"
        );
    }

    #[test]
    fn the_dedicated_discovery_listener_is_published_else_every_listener() {
        let base = "[[listeners]]\naddress = \"10.0.0.1\"\n[[listeners]]\naddress = \"10.0.0.1\"\nport = 4421\ntransport = \"rdma\"\n[[subsystems]]\nnqn = \"nqn.2026-11.io.ebof:a\"\nallow_any_host = true\n[[subsystems.namespaces]]\nnsid = 1\nbackend = \"ram\"\nsize = \"1M\"\n";
        let names = |toml: &str| -> Vec<String> {
            let cfg = Config::from_toml_str(toml).unwrap();
            discovery_listeners(&cfg)
                .iter()
                .map(|l| format!("{} {:?}", l.addr, l.transport))
                .collect()
        };
        assert_eq!(names(base), ["10.0.0.1:4420 Tcp", "10.0.0.1:4421 Rdma"]);
        let with_disc = format!("{base}[discovery]\naddress = \"10.0.0.1\"\n");
        assert_eq!(names(&with_disc), ["10.0.0.1:8009 Tcp"]);
    }
}
