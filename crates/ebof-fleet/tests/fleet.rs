//! A CDC over real ebof targets on loopback, and stock-shaped hosts (nvmf-host) with different
//! host NQNs: the union per host, host lists, the first-time hold, events on change, members
//! going away and coming back, live member add/remove.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ebof_backend::BackendSpec;
use ebof_fleet::{Cdc, CdcConfig};
use ebof_runtime::{Server, ServerConfig, ServerHandle};
use nvme_spec::discovery::subtype;
use nvmf_host::{AsyncEvent, Controller, HostConfig};
use nvmf_target::{ListenerInfo, Namespace, Subsystem, Target, TargetLimits};
use tokio::sync::mpsc;

const HOST1: &str = "nqn.2026-11.io.example:host-1";
const HOST2: &str = "nqn.2026-11.io.example:host-2";

fn subsystem(nqn: &str, hosts: Option<&[&str]>) -> Subsystem {
    let backend = ebof_backend::open(&BackendSpec::Ram { size: 1 << 20 }).unwrap();
    Subsystem {
        nqn: nqn.into(),
        serial: "EBOFCDC".into(),
        model: "ebof-test".into(),
        allow_any_host: hosts.is_none(),
        hosts: hosts
            .unwrap_or_default()
            .iter()
            .map(|h| h.to_string())
            .collect(),
        namespaces: vec![Arc::new(Namespace::new(1, backend, 512, [0x22; 16]))],
        ns_hosts: Default::default(),
    }
}

/// An ebof target on 127.0.0.1 (one listener, which also answers discovery).
struct Box1 {
    target: Arc<Target>,
    handle: Option<ServerHandle>,
    addr: SocketAddr,
}

impl Box1 {
    fn start(subsystems: Vec<Subsystem>) -> Box1 {
        Box1::start_on("127.0.0.1", subsystems)
    }

    /// A box on loopback address `ip` (connections to it still come from 127.0.0.1).
    fn start_on(ip: &str, subsystems: Vec<Subsystem>) -> Box1 {
        let target = Arc::new(Target::new(
            subsystems,
            vec![],
            TargetLimits::default(),
            Instant::now(),
        ));
        Box1::serve(target, format!("{ip}:0").parse().unwrap())
    }

    /// TCP connections the box accepted so far.
    fn accepted(&self) -> u64 {
        self.target
            .events
            .connections_accepted
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    fn serve(target: Arc<Target>, at: SocketAddr) -> Box1 {
        let handle = Server::start(target.clone(), ServerConfig::new(vec![at], vec![0])).unwrap();
        let addr = handle.bound[0];
        target.set_listeners(vec![ListenerInfo {
            addr,
            portid: 1,
            tls: Default::default(),
            transport: Default::default(),
        }]);
        Box1 {
            target,
            handle: Some(handle),
            addr,
        }
    }

    fn stop(&mut self) {
        if let Some(h) = self.handle.take() {
            h.stop();
        }
    }

    /// Serve the same target on the same address again.
    fn restart(&mut self) {
        self.stop();
        let again = Box1::serve(self.target.clone(), self.addr);
        let mut again = again;
        self.handle = again.handle.take();
    }

    fn add(&self, s: Subsystem) {
        self.target
            .update_table(|t| {
                let mut v = t.to_vec();
                v.push(Arc::new(s));
                Ok::<_, ()>(v)
            })
            .unwrap();
    }

    fn remove(&self, nqn: &str) {
        self.target
            .update_table(|t| Ok::<_, ()>(t.iter().filter(|s| s.nqn != nqn).cloned().collect()))
            .unwrap();
    }
}

impl Drop for Box1 {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A CDC box (no subsystems of its own) over `members`.
fn cdc(members: &[SocketAddr]) -> (Box1, Cdc) {
    cdc_with(members, |_| {})
}

/// A CDC box over `members`, its configuration changed by `f`.
fn cdc_with(members: &[SocketAddr], f: impl FnOnce(&mut CdcConfig)) -> (Box1, Cdc) {
    let b = Box1::start(vec![]);
    let mut cfg = CdcConfig::new(members.to_vec(), "nqn.2026-11.io.example:cdc".into());
    cfg.fetch_timeout = Duration::from_secs(1);
    cfg.backoff_max = Duration::from_millis(400);
    f(&mut cfg);
    let c = Cdc::start(&b.target, cfg).unwrap();
    (b, c)
}

/// Loopback connections come from 127.0.0.1: trust it to announce.
fn trust_loopback(cfg: &mut CdcConfig) {
    cfg.trusted = vec![ebof_fleet::Trusted::Address("127.0.0.1".parse().unwrap())];
}

fn host(nqn: &str) -> HostConfig {
    HostConfig {
        hostnqn: nqn.into(),
        hostid: [nqn.len() as u8; 16],
        kato_ms: 5_000,
        io_queues: 0,
        async_events: true,
        connect_timeout: Duration::from_secs(5),
        admin_timeout: Duration::from_secs(5),
        ..HostConfig::default()
    }
}

/// NVM subsystem NQNs of a discovery log, sorted.
fn nqns(log: &nvmf_host::DiscoveryLog) -> Vec<String> {
    let mut v: Vec<String> = log
        .entries
        .iter()
        .filter(|e| e.subtype == subtype::NVME)
        .map(|e| e.subnqn.clone())
        .collect();
    v.sort();
    v
}

async fn discover(at: SocketAddr, hostnqn: &str) -> Vec<String> {
    nqns(&nvmf_host::discover(at, &host(hostnqn)).await.unwrap())
}

async fn wait_connected(c: &Cdc, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while c.members().iter().filter(|m| m.connected).count() != n {
        assert!(Instant::now() < deadline, "members: {:?}", c.members());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A persistent discovery connection to the CDC as `hostnqn`.
async fn persistent(at: SocketAddr, hostnqn: &str) -> (Controller, mpsc::Receiver<AsyncEvent>) {
    let mut c = Controller::connect(at, nvme_spec::DISCOVERY_NQN, &host(hostnqn))
        .await
        .unwrap();
    let ev = c.take_events().unwrap();
    // Reading the log arms the event.
    c.discovery_log().await.unwrap();
    (c, ev)
}

/// Wait for a Discovery Log Page Change event, then read the log; returns the time waited.
async fn next_change(
    c: &Controller,
    ev: &mut mpsc::Receiver<AsyncEvent>,
) -> (Duration, Vec<String>) {
    let t0 = Instant::now();
    let e = tokio::time::timeout(Duration::from_secs(5), ev.recv())
        .await
        .expect("no Discovery Log Page Change event within 5 s")
        .unwrap();
    let waited = t0.elapsed();
    assert_eq!((e.info, e.log_page), (0xF0, 0x70), "{e:?}");
    (waited, nqns(&c.discovery_log().await.unwrap()))
}

/// Read until the log shows `want` (events may come in bursts: several per change).
async fn until(c: &Controller, ev: &mut mpsc::Receiver<AsyncEvent>, want: &[&str]) -> Duration {
    let t0 = Instant::now();
    loop {
        let (_, now) = next_change(c, ev).await;
        if now == want {
            return t0.elapsed();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "log {now:?}, want {want:?}"
        );
    }
}

#[tokio::test]
async fn union_per_host_honours_member_host_lists() {
    let a = Box1::start(vec![
        subsystem("nqn.2026-11.io.example:a-any", None),
        subsystem("nqn.2026-11.io.example:a-host1", Some(&[HOST1])),
    ]);
    let b = Box1::start(vec![subsystem("nqn.2026-11.io.example:b-any", None)]);
    let (c, cdc) = cdc(&[a.addr, b.addr]);
    wait_connected(&cdc, 2).await;
    // First-time hosts: the target holds CSTS.RDY until their views are read, so the very
    // first log is complete.
    let t0 = Instant::now();
    let log = nvmf_host::discover(c.addr, &host(HOST1)).await.unwrap();
    eprintln!("first-time host: complete log after {:?}", t0.elapsed());
    assert_eq!(
        nqns(&log),
        [
            "nqn.2026-11.io.example:a-any",
            "nqn.2026-11.io.example:a-host1",
            "nqn.2026-11.io.example:b-any"
        ]
    );
    // Every member entry points at the member, not at the CDC; the only other entry is the
    // CDC's own current discovery subsystem.
    for e in &log.entries {
        if e.subtype == subtype::NVME {
            let at: SocketAddr = format!("{}:{}", e.traddr, e.trsvcid).parse().unwrap();
            assert!(at == a.addr || at == b.addr, "{e:?}");
        } else {
            assert_eq!(e.subtype, subtype::CURRENT_DISCOVERY);
            assert_eq!(e.trsvcid, c.addr.port().to_string());
        }
    }
    assert_eq!(log.entries.len(), 4);
    assert_eq!(
        discover(c.addr, HOST2).await,
        [
            "nqn.2026-11.io.example:a-any",
            "nqn.2026-11.io.example:b-any"
        ]
    );
    let st = cdc.members();
    assert_eq!(st.len(), 2);
    assert_eq!(st.iter().map(|m| m.entries).sum::<usize>(), 3, "{st:?}");
    assert_eq!(cdc.known_hosts(), 2);
    cdc.stop();
}

#[tokio::test]
async fn member_changes_reach_hosts_as_events() {
    let a = Box1::start(vec![subsystem("nqn.2026-11.io.example:a-1", None)]);
    let b = Box1::start(vec![subsystem("nqn.2026-11.io.example:b-1", None)]);
    let (c, cdc) = cdc(&[a.addr, b.addr]);
    wait_connected(&cdc, 2).await;
    let (h, mut ev) = persistent(c.addr, HOST1).await;
    assert_eq!(
        nqns(&h.discovery_log().await.unwrap()),
        ["nqn.2026-11.io.example:a-1", "nqn.2026-11.io.example:b-1"]
    );
    let mut added = Vec::new();
    let mut removed = Vec::new();
    for _ in 0..5 {
        // A subsystem added on member A…
        let t0 = Instant::now();
        a.add(subsystem("nqn.2026-11.io.example:a-new", None));
        let first = until(
            &h,
            &mut ev,
            &[
                "nqn.2026-11.io.example:a-1",
                "nqn.2026-11.io.example:a-new",
                "nqn.2026-11.io.example:b-1",
            ],
        )
        .await;
        added.push(first.min(t0.elapsed()));
        // …and removed.
        let t0 = Instant::now();
        a.remove("nqn.2026-11.io.example:a-new");
        until(
            &h,
            &mut ev,
            &["nqn.2026-11.io.example:a-1", "nqn.2026-11.io.example:b-1"],
        )
        .await;
        removed.push(t0.elapsed());
    }
    added.sort();
    removed.sort();
    eprintln!(
        "member change -> host AEN (loopback): add median {:?} max {:?}; remove median {:?} max {:?}",
        added[2], added[4], removed[2], removed[4]
    );
    // A subsystem only host 2 may see changes host 2's view only: host 1 reads the same log.
    a.add(subsystem("nqn.2026-11.io.example:a-host2", Some(&[HOST2])));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        nqns(&h.discovery_log().await.unwrap()),
        ["nqn.2026-11.io.example:a-1", "nqn.2026-11.io.example:b-1"]
    );
    assert_eq!(
        discover(c.addr, HOST2).await,
        [
            "nqn.2026-11.io.example:a-1",
            "nqn.2026-11.io.example:a-host2",
            "nqn.2026-11.io.example:b-1"
        ]
    );
    h.disconnect().await;
    cdc.stop();
}

#[tokio::test]
async fn a_member_that_goes_away_leaves_and_comes_back() {
    let a = Box1::start(vec![subsystem("nqn.2026-11.io.example:a-1", None)]);
    let mut b = Box1::start(vec![subsystem("nqn.2026-11.io.example:b-1", None)]);
    let (c, cdc) = cdc(&[a.addr, b.addr]);
    wait_connected(&cdc, 2).await;
    let (h, mut ev) = persistent(c.addr, HOST1).await;
    b.stop();
    let gone = until(&h, &mut ev, &["nqn.2026-11.io.example:a-1"]).await;
    let st = cdc.members();
    let sb = st.iter().find(|m| m.address == b.addr).unwrap();
    assert!(
        !sb.connected && sb.last_error.is_some() && sb.entries == 0,
        "{sb:?}"
    );
    b.restart();
    let back = until(
        &h,
        &mut ev,
        &["nqn.2026-11.io.example:a-1", "nqn.2026-11.io.example:b-1"],
    )
    .await;
    eprintln!("member stopped -> gone from the view in {gone:?}; restarted -> back in {back:?}");
    wait_connected(&cdc, 2).await;
    h.disconnect().await;
    cdc.stop();
}

#[tokio::test]
async fn members_added_and_removed_live() {
    let a = Box1::start(vec![subsystem("nqn.2026-11.io.example:a-1", None)]);
    let b = Box1::start(vec![subsystem("nqn.2026-11.io.example:b-1", None)]);
    let (c, cdc) = cdc(&[a.addr]);
    wait_connected(&cdc, 1).await;
    let (h, mut ev) = persistent(c.addr, HOST1).await;
    assert_eq!(
        nqns(&h.discovery_log().await.unwrap()),
        ["nqn.2026-11.io.example:a-1"]
    );
    assert!(cdc.add_member(b.addr));
    assert!(!cdc.add_member(b.addr), "already a member");
    until(
        &h,
        &mut ev,
        &["nqn.2026-11.io.example:a-1", "nqn.2026-11.io.example:b-1"],
    )
    .await;
    assert!(cdc.remove_member(a.addr));
    assert!(!cdc.remove_member(a.addr));
    until(&h, &mut ev, &["nqn.2026-11.io.example:b-1"]).await;
    assert_eq!(
        cdc.members().iter().map(|m| m.address).collect::<Vec<_>>(),
        [b.addr]
    );
    h.disconnect().await;
    // A CDC with no member answers at once with an empty view.
    assert!(cdc.remove_member(b.addr));
    assert!(discover(c.addr, HOST2).await.is_empty());
    // Stopping is bounded and makes the target a plain discovery controller again.
    let t0 = Instant::now();
    cdc.stop();
    assert!(t0.elapsed() < Duration::from_secs(3));
    assert!(c.target.central().is_none());
}

#[tokio::test]
async fn a_first_time_host_waits_for_a_member_that_does_not_answer() {
    // A "member" that accepts TCP connections and never answers: the first view is not held
    // up by it, and the answering member's entries are in it.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let a = Box1::start(vec![subsystem("nqn.2026-11.io.example:a-1", None)]);
    let (c, cdc) = cdc(&[a.addr]);
    wait_connected(&cdc, 1).await;
    assert!(cdc.add_member(silent.local_addr().unwrap()));
    let t0 = Instant::now();
    assert_eq!(
        discover(c.addr, HOST1).await,
        ["nqn.2026-11.io.example:a-1"]
    );
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    cdc.stop();
}

#[tokio::test]
async fn a_member_announces_itself_by_dim() {
    let a = Box1::start(vec![subsystem("nqn.2026-11.io.example:a-1", None)]);
    let (c, cdc) = cdc_with(&[], trust_loopback);
    let (h, mut ev) = persistent(c.addr, HOST1).await;
    assert!(nqns(&h.discovery_log().await.unwrap()).is_empty());
    let t0 = Instant::now();
    let ann = ebof_fleet::Announcer::start(ebof_fleet::AnnounceConfig {
        cdc: c.addr,
        nqn: "nqn.2026-11.io.example:box-a".into(),
        addrs: vec![a.addr],
        name: "box-a".into(),
        backoff_max: Duration::from_millis(400),
        dhchap: None,
    })
    .unwrap();
    until(&h, &mut ev, &["nqn.2026-11.io.example:a-1"]).await;
    eprintln!(
        "announced member in the host's view after {:?}",
        t0.elapsed()
    );
    let st = cdc.members();
    assert_eq!(st.len(), 1);
    assert!(st[0].announced && st[0].address == a.addr, "{st:?}");
    // The registration is in the CDC target's DIM registry too.
    assert!(
        c.target
            .dim_registrations()
            .iter()
            .any(|r| r.entity_nqn == "nqn.2026-11.io.example:box-a")
    );
    // Stopping the announcement deregisters: the member leaves.
    ann.stop();
    until(&h, &mut ev, &[]).await;
    assert!(cdc.members().is_empty());
    h.disconnect().await;
    cdc.stop();
}

/// DIM as a discovery controller sends it: `task` for ETYPE DDC `eid` with one NVMe/TCP entry
/// per address of `addrs`. Returns the completion's status.
async fn send_dim(
    ctrl: &Controller,
    task: nvme_spec::dim::DimTask,
    eid: &str,
    addrs: &[SocketAddr],
) -> Result<(), String> {
    let data = nvme_spec::dim::DimData::discovery_controller(
        nvme_spec::dim::EntityType::Ddc,
        eid,
        "x",
        "x",
        addrs,
    )
    .encode();
    let mut sqe = nvme_spec::Sqe::new(
        nvme_spec::opcode::admin::DISCOVERY_INFO_MGMT,
        nvme_spec::CommandId(0),
    );
    sqe.set_cdw(10, task.cdw10());
    ctrl.admin(sqe, nvmf_host::DataDir::ToController, data, 0)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Review C1: a client with any host NQN announces an "attacker" box by DIM; the CDC must not
/// serve its entries to anybody unless it trusts the sender.
#[tokio::test]
async fn an_untrusted_discovery_controller_cannot_announce() {
    let a = Box1::start_on(
        "127.0.0.2",
        vec![subsystem("nqn.2026-11.io.example:a-1", None)],
    );
    let x = Box1::start_on(
        "127.0.0.3",
        vec![subsystem("nqn.2026-11.io.example:a-1", None)],
    );
    let (c, cdc) = cdc(&[a.addr]);
    wait_connected(&cdc, 1).await;
    let client = Controller::connect(
        c.addr,
        nvme_spec::DISCOVERY_NQN,
        &host("nqn.2026-11.io.evil:ddc"),
    )
    .await
    .unwrap();
    let r = send_dim(
        &client,
        nvme_spec::dim::DimTask::Register,
        "nqn.2026-11.io.evil:ddc",
        &[x.addr],
    )
    .await;
    let e = r.expect_err("an untrusted pull registration was accepted");
    assert!(e.contains("sct 2 sc 0x86"), "Access Denied: {e}");
    assert!(c.target.dim_registrations().is_empty());
    let log = nvmf_host::discover(c.addr, &host(HOST1)).await.unwrap();
    for e in &log.entries {
        assert_ne!(e.traddr, "127.0.0.3", "the attacker's box is served: {e:?}");
    }
    assert_eq!(cdc.members().len(), 1);
    assert_eq!(
        c.target
            .events
            .dim_refusals
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    // Trusted live: the same registration is admitted now.
    cdc.set_trusted(vec![ebof_fleet::Trusted::Nqn(
        "nqn.2026-11.io.evil:ddc".into(),
    )]);
    send_dim(
        &client,
        nvme_spec::dim::DimTask::Register,
        "nqn.2026-11.io.evil:ddc",
        &[x.addr],
    )
    .await
    .unwrap();
    wait_connected(&cdc, 2).await;
    client.disconnect().await;
    cdc.stop();
}

/// Review C2: re-registration withdraws what it replaces, deregistration leaves nothing, and
/// an announced member that cannot be reached leaves after a bounded number of attempts.
#[tokio::test]
async fn announced_members_are_replaced_withdrawn_and_expire() {
    let (c, cdc) = cdc_with(&[], |cfg| {
        trust_loopback(cfg);
        cfg.announced_attempts = 3;
        cfg.backoff_max = Duration::from_millis(100);
    });
    // Ports nobody listens on (bound, then closed).
    let dead: Vec<SocketAddr> = (0..160)
        .map(|_| {
            std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
        })
        .collect();
    let me = "nqn.2026-11.io.example:ddc-moving";
    let client = Controller::connect(c.addr, nvme_spec::DISCOVERY_NQN, &host(me))
        .await
        .unwrap();
    for round in dead.chunks(16).take(10) {
        send_dim(&client, nvme_spec::dim::DimTask::Register, me, round)
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(cdc.members().len() <= 32, "{}", cdc.members().len());
    }
    send_dim(
        &client,
        nvme_spec::dim::DimTask::Deregister,
        me,
        &dead[144..],
    )
    .await
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !cdc.members().is_empty() {
        assert!(
            Instant::now() < deadline,
            "{} members left",
            cdc.members().len()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Registered and never reachable: gone after three attempts, registration or not.
    send_dim(&client, nvme_spec::dim::DimTask::Register, me, &dead[..1])
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while cdc.members().is_empty() {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    while !cdc.members().is_empty() {
        assert!(Instant::now() < deadline, "{:?}", cdc.members());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // It comes back when it registers again.
    send_dim(&client, nvme_spec::dim::DimTask::Register, me, &dead[..1])
        .await
        .unwrap();
    while cdc.members().is_empty() {
        assert!(Instant::now() < deadline + Duration::from_secs(5));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    client.disconnect().await;
    cdc.stop();
}

/// The CDC's member limit: an announcement beyond it is refused (Insufficient Discovery
/// Resources) and adds nothing.
#[tokio::test]
async fn announcements_beyond_the_member_limit_are_refused() {
    let (c, cdc) = cdc_with(&[], |cfg| {
        trust_loopback(cfg);
        cfg.max_members = 4;
    });
    let dead: Vec<SocketAddr> = (0..5)
        .map(|_| {
            std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
        })
        .collect();
    let me = "nqn.2026-11.io.example:ddc-many";
    let client = Controller::connect(c.addr, nvme_spec::DISCOVERY_NQN, &host(me))
        .await
        .unwrap();
    send_dim(&client, nvme_spec::dim::DimTask::Register, me, &dead[..4])
        .await
        .unwrap();
    let r = send_dim(
        &client,
        nvme_spec::dim::DimTask::Register,
        "nqn.2026-11.io.example:ddc-more",
        &dead[4..],
    )
    .await;
    let e = r.expect_err("fifth member admitted");
    assert!(e.contains("sct 1 sc 0x32"), "{e}");
    assert!(cdc.members().len() <= 4, "{:?}", cdc.members());
    client.disconnect().await;
    cdc.stop();
}

/// Review C4: a flood of fresh host NQNs neither evicts a real host's view nor makes the
/// members take one connection per NQN: new hosts are admitted at a bounded rate, first reads
/// run a bounded number at once, and a full table forgets hosts never served first.
#[tokio::test]
async fn a_flood_of_host_nqns_neither_evicts_nor_amplifies() {
    let boxes: Vec<Box1> = (0..3)
        .map(|i| {
            Box1::start(vec![subsystem(
                &format!("nqn.2026-11.io.example:m{i}"),
                None,
            )])
        })
        .collect();
    let addrs: Vec<SocketAddr> = boxes.iter().map(|b| b.addr).collect();
    let (c, cdc) = cdc_with(&addrs, |cfg| {
        cfg.max_hosts = 16;
        cfg.new_hosts_per_sec = 100;
    });
    wait_connected(&cdc, 3).await;
    assert_eq!(discover(c.addr, HOST1).await.len(), 3);
    let before: u64 = boxes.iter().map(|b| b.accepted()).sum();
    let central = c.target.central().unwrap();
    let t0 = Instant::now();
    for i in 0..2000 {
        // What a discovery Connect with this host NQN does.
        central.host_seen(&format!("nqn.2026-11.io.flood:h{i}"));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let spent = t0.elapsed().as_secs_f64();
    let after: u64 = boxes.iter().map(|b| b.accepted()).sum();
    let conns = after - before;
    eprintln!("2000 host NQNs in {spent:.2} s: {conns} member connections");
    // At most (burst + rate × time) hosts, one read per member each.
    assert!(
        conns as f64 <= 3.0 * (100.0 + 100.0 * spent) + 3.0,
        "{conns}"
    );
    assert!(cdc.known_hosts() <= 16);
    // HOST1 (served, recently active) kept its view: answered at once, without a read.
    let n = boxes.iter().map(|b| b.accepted()).sum::<u64>();
    assert!(central.entries(HOST1).is_some_and(|v| v.len() == 3));
    assert_eq!(boxes.iter().map(|b| b.accepted()).sum::<u64>(), n);
    cdc.stop();
}

/// A DH-HMAC-CHAP secret (the RFC-style test key of crates/ebof/tests/security.rs).
const HOST1_KEY: &str = "DHHC-1:01:VZi5tbir3nYufwfgCrjX0O2mmPHFkObvzamIRZnYUahWiFGg:";

/// Discovery DH-HMAC-CHAP across the fleet: a member requires HOST1 (which has a secret there)
/// to authenticate its discovery, as nvmet does for `nvme discover --dhchap-secret`; a host
/// without the secret is refused, and the CDC reads HOST1's view with HOST1's secret from its
/// own `[[hosts]]`. A discovery controller that authenticated may announce itself.
#[tokio::test]
async fn discovery_authenticates_hosts_with_secrets_across_the_fleet() {
    let a = Box1::start(vec![subsystem(
        "nqn.2026-11.io.example:a-h1",
        Some(&[HOST1]),
    )]);
    let cfg = ebof_config::Config::from_toml_str(&format!(
        "[[listeners]]\naddress = \"127.0.0.1\"\nport = 0\n\
         [[hosts]]\nnqn = \"{HOST1}\"\ndhchap_key = \"{HOST1_KEY}\"\n"
    ))
    .unwrap();
    a.target
        .set_auth_policy(ebof_mgmt::security::auth_policy(&cfg).unwrap());
    let keys = ebof_mgmt::cdc::host_keys(&cfg).unwrap();
    let with_key = HostConfig {
        dhchap: keys.get(HOST1).cloned(),
        ..host(HOST1)
    };
    // Directly: without the secret the discovery controller stays gated; with it, served.
    assert!(nvmf_host::discover(a.addr, &host(HOST1)).await.is_err());
    assert_eq!(
        nqns(&nvmf_host::discover(a.addr, &with_key).await.unwrap()),
        ["nqn.2026-11.io.example:a-h1"]
    );
    // Hosts without a secret: unauthenticated, as before.
    assert!(discover(a.addr, HOST2).await.is_empty());
    // Through a CDC that has HOST1's secret.
    {
        let (c, central) = cdc_with(&[a.addr], |cfg| cfg.host_keys = keys.clone());
        wait_connected(&central, 1).await;
        assert_eq!(
            discover(c.addr, HOST1).await,
            ["nqn.2026-11.io.example:a-h1"]
        );
        central.stop();
    }
    // A CDC that authenticates HOST1 admits its announcement although nothing lists it.
    let b = Box1::start(vec![subsystem("nqn.2026-11.io.example:b-1", None)]);
    let (c, cdc) = cdc(&[]);
    c.target
        .set_auth_policy(ebof_mgmt::security::auth_policy(&cfg).unwrap());
    let ann = ebof_fleet::Announcer::start(ebof_fleet::AnnounceConfig {
        cdc: c.addr,
        nqn: HOST1.into(),
        addrs: vec![b.addr],
        name: "box-b".into(),
        backoff_max: Duration::from_millis(400),
        dhchap: keys.get(HOST1).cloned(),
    })
    .unwrap();
    wait_connected(&cdc, 1).await;
    let r = &c.target.dim_registrations()[0];
    assert!(r.authenticated && r.admitted, "{r:?}");
    ann.stop();
    cdc.stop();
}
