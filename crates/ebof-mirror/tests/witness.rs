//! The witness client against a real in-process witness: the server (`ebof_runtime::Server`)
//! with the witness subsystem (no namespace) and a lease table. Two boxes ask for one volume:
//! the second takes it over only after the first's lease expired, and never when the first's
//! last report said its peer was not in sync.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ebof_mirror::witness::{LeaseClock, LeaseOpCode, WITNESS_NQN, WitnessClient, WitnessError};
use ebof_runtime::{Server, ServerConfig, ServerHandle};
use nvmf_target::witness::LeaseTable;
use nvmf_target::{ListenerInfo, Subsystem, Target, TargetLimits};

const MAX: Duration = Duration::from_millis(600);
const LEASE: Duration = Duration::from_millis(400);

struct Witness(Option<ServerHandle>, SocketAddr, Arc<Target>);

impl Drop for Witness {
    fn drop(&mut self) {
        if let Some(h) = self.0.take() {
            h.stop();
        }
    }
}

/// A witness whose table was made `MAX` ago (its grace is over).
fn witness() -> Witness {
    assert_eq!(WITNESS_NQN, nvmf_target::witness::WITNESS_NQN);
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let sub = Subsystem {
        nqn: WITNESS_NQN.into(),
        serial: "EBOFWITNESS".into(),
        model: "ebof-test".into(),
        allow_any_host: true,
        hosts: vec![],
        namespaces: vec![],
        ns_hosts: Default::default(),
    };
    let target = Arc::new(Target::new(
        vec![sub],
        vec![ListenerInfo {
            addr,
            portid: 1,
            tls: Default::default(),
            transport: Default::default(),
        }],
        TargetLimits::default(),
        Instant::now(),
    ));
    target.set_witness(Some(LeaseTable::new(Instant::now() - MAX, MAX)));
    let h = Server::start(target.clone(), ServerConfig::new(vec![addr], vec![0])).expect("witness");
    let a = h.bound[0];
    Witness(Some(h), a, target)
}

fn client(w: &Witness, n: u8) -> WitnessClient {
    let host = nvmf_host::HostConfig {
        hostnqn: format!("nqn.2026-11.io.ebof:box{n}"),
        hostid: [n; 16],
        ..Default::default()
    };
    WitnessClient::new(w.1, host, Duration::from_secs(5))
}

const VOL: [u8; 16] = [0x42; 16];

async fn acquire(c: &mut WitnessClient, holder: u8, epoch: u64, in_sync: bool) -> bool {
    c.request(
        VOL,
        [holder; 16],
        epoch,
        LEASE,
        LeaseOpCode::Acquire,
        in_sync,
    )
    .await
    .expect("witness answers")
    .granted
}

#[tokio::test]
async fn takeover_only_after_expiry_and_only_from_an_in_sync_holder() {
    let w = witness();
    let (mut a, mut b) = (client(&w, 1), client(&w, 2));
    let mut clock = LeaseClock::new(LEASE);
    let sent = Instant::now();
    clock.sent(sent);
    assert!(acquire(&mut a, 1, 1, true).await);
    clock.granted(sent);
    assert!(clock.is_valid(Instant::now()));
    // the secondary asks while the lease runs: refused, told the time left
    let r = b
        .request(VOL, [2; 16], 2, LEASE, LeaseOpCode::Acquire, true)
        .await
        .unwrap();
    assert!(!r.granted);
    assert!(r.left > Duration::ZERO && r.left <= LEASE, "{r:?}");
    // the primary renews; then stops (dies); our clock gives up before the witness's does
    assert!(acquire(&mut a, 1, 1, true).await);
    let renewed = Instant::now();
    tokio::time::sleep(LEASE + Duration::from_millis(50)).await;
    assert!(!clock.is_valid(renewed + LEASE.mul_f64(0.9)));
    assert!(acquire(&mut b, 2, 2, true).await, "expired: taken over");
    // the old primary comes back: refused
    assert!(!acquire(&mut a, 1, 1, true).await);
    a.close().await;
    b.close().await;
}

#[tokio::test]
async fn no_takeover_when_the_last_report_said_not_in_sync() {
    let w = witness();
    let (mut a, mut b) = (client(&w, 1), client(&w, 2));
    assert!(acquire(&mut a, 1, 5, true).await);
    // degraded: the primary says so before completing a write alone
    assert!(acquire(&mut a, 1, 5, false).await);
    tokio::time::sleep(LEASE + Duration::from_millis(50)).await;
    assert!(!acquire(&mut b, 2, 6, true).await, "a stale secondary");
    // the old primary may come back
    assert!(acquire(&mut a, 1, 6, false).await);
    a.close().await;
    b.close().await;
}

#[tokio::test]
async fn an_unreachable_witness_is_an_error_and_the_client_reconnects() {
    let w = witness();
    let mut a = client(&w, 1);
    assert!(acquire(&mut a, 1, 1, true).await);
    // the box stops being a witness: an error status, the connection is dropped
    w.2.set_witness(None);
    let e = a
        .request(VOL, [1; 16], 1, LEASE, LeaseOpCode::Acquire, true)
        .await;
    assert!(matches!(e, Err(WitnessError::Status { .. })), "{e:?}");
    // a witness again (a fresh table, past its grace): the next request reconnects
    w.2.set_witness(Some(LeaseTable::new(Instant::now() - MAX, MAX)));
    assert!(acquire(&mut a, 1, 1, true).await);
    let addr = w.1;
    drop(w);
    let e = a
        .request(VOL, [1; 16], 1, LEASE, LeaseOpCode::Acquire, true)
        .await;
    assert!(
        matches!(e, Err(WitnessError::Host { .. } | WitnessError::Timeout(_))),
        "{e:?}"
    );
    assert_eq!(a.addr(), addr);
    // a bad lease is refused before any I/O
    let e = a
        .request(VOL, [1; 16], 1, Duration::ZERO, LeaseOpCode::Query, true)
        .await;
    assert!(matches!(e, Err(WitnessError::Lease(_))), "{e:?}");
}
