//! A CDC over real ebof targets on loopback, and stock-shaped hosts (nvmf-host) with different
//! host NQNs: the union per host, host lists, the first-time hold, events on change, members
//! going away and coming back, live member add/remove.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ebof_backend::BackendSpec;
use ebof_cdc::{Cdc, CdcConfig};
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
        let target = Arc::new(Target::new(
            subsystems,
            vec![],
            TargetLimits::default(),
            Instant::now(),
        ));
        Box1::serve(target, "127.0.0.1:0".parse().unwrap())
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
    let b = Box1::start(vec![]);
    let mut cfg = CdcConfig::new(members.to_vec(), "nqn.2026-11.io.example:cdc".into());
    cfg.fetch_timeout = Duration::from_secs(1);
    cfg.backoff_max = Duration::from_millis(400);
    let c = Cdc::start(&b.target, cfg).unwrap();
    (b, c)
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
    let (c, cdc) = cdc(&[]);
    let (h, mut ev) = persistent(c.addr, HOST1).await;
    assert!(nqns(&h.discovery_log().await.unwrap()).is_empty());
    let t0 = Instant::now();
    let ann = ebof_cdc::Announcer::start(ebof_cdc::AnnounceConfig {
        cdc: c.addr,
        nqn: "nqn.2026-11.io.example:box-a".into(),
        addrs: vec![a.addr],
        name: "box-a".into(),
        backoff_max: Duration::from_millis(400),
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
