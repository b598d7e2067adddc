//! The CDC's unit tests.

use super::members::refresh_views;
use super::shared::Shared;
use super::state::{Host, Member, State, union_of};
use super::*;
use crate::derived_hostid;
use nvme_spec::dim::EntityType;
use nvme_spec::discovery::{DiscoveryLogEntry, subtype};
use nvmf_target::DimRegistration;
use std::sync::Weak;
use std::time::Instant;

#[test]
fn machine_id_becomes_a_uuid_nqn() {
    assert_eq!(
        machine_id_nqn("0123456789ABCDEF0123456789abcdef").as_deref(),
        Some("nqn.2014-08.org.nvmexpress:uuid:01234567-89ab-cdef-0123-456789abcdef")
    );
    assert_eq!(machine_id_nqn("short"), None);
    assert_eq!(machine_id_nqn(&"g".repeat(32)), None);
    assert!(nvme_spec::is_valid_nqn(&default_hostnqn()));
}

#[test]
fn hostid_is_stable_and_differs_per_host() {
    assert_eq!(derived_hostid("nqn.a:1"), derived_hostid("nqn.a:1"));
    assert_ne!(derived_hostid("nqn.a:1"), derived_hostid("nqn.a:2"));
}

fn e(nqn: &str, port: &str) -> DiscoveryLogEntry {
    DiscoveryLogEntry {
        subtype: subtype::NVME,
        subnqn: nqn.into(),
        traddr: "10.0.0.1".into(),
        trsvcid: port.into(),
        ..Default::default()
    }
}

#[test]
fn union_keeps_live_members_in_order_once() {
    let a: SocketAddr = "10.0.0.1:8009".parse().unwrap();
    let b: SocketAddr = "10.0.0.2:8009".parse().unwrap();
    let mut st = State::new(vec![], 1);
    for (addr, entries) in [
        (a, vec![e("nqn.x:1", "4420"), e("nqn.x:s", "4420")]),
        (b, vec![e("nqn.x:s", "4420"), e("nqn.x:2", "4420")]),
    ] {
        let mut m = Member {
            live: true,
            ..Default::default()
        };
        m.logs.insert("nqn.h:1".into(), Arc::new(entries));
        st.members.insert(addr, m);
    }
    st.hosts.insert(
        "nqn.h:1".into(),
        Host {
            last_seen: Instant::now(),
            served: false,
            view: None,
        },
    );
    let names: Vec<String> = st.union("nqn.h:1").into_iter().map(|e| e.subnqn).collect();
    assert_eq!(names, ["nqn.x:1", "nqn.x:s", "nqn.x:2"]);
    assert!(st.union("nqn.h:other").is_empty());
    // First view: created, no change reported; then a member goes away: changed.
    assert!(!st.recompute("nqn.h:1", true));
    assert_eq!(st.hosts["nqn.h:1"].view.as_ref().map(|v| v.len()), Some(3));
    st.members.get_mut(&a).unwrap().live = false;
    assert!(st.recompute_all());
    assert_eq!(st.hosts["nqn.h:1"].view.as_ref().map(|v| v.len()), Some(2));
    assert!(!st.recompute_all());
}

/// C5: the union is linear (a hash set) and bounded per view.
#[test]
fn union_is_bounded_and_fast() {
    let many = |tag: &str| {
        Arc::new(
            (0..1024)
                .map(|i| e(&format!("nqn.x:{tag}{i}"), "4420"))
                .collect::<Vec<_>>(),
        )
    };
    let (a, b) = (many("a"), many("b"));
    let t0 = Instant::now();
    let v = union_of([&a, &a, &b].into_iter(), usize::MAX);
    assert_eq!(v.len(), 2048);
    let v = union_of([&a, &b].into_iter(), 1024);
    assert_eq!(v.len(), 1024);
    assert!(
        t0.elapsed() < Duration::from_millis(500),
        "{:?}",
        t0.elapsed()
    );
}

/// C5: recomputing every view (256 hosts × 2 members × 512 entries each, all distinct)
/// holds the lock the reactors take only briefly: a thread that takes it meanwhile (as
/// `entries` does for a discovery Connect) never waits long.
#[test]
fn views_are_computed_outside_the_lock() {
    let (tx, _rx) = mpsc::unbounded_channel();
    let shared = Arc::new(Shared {
        cfg: CdcConfig::new(vec![], "nqn.x:cdc".into()),
        st: Mutex::new(State::new(vec![], 1)),
        tx,
        target: Weak::new(),
    });
    {
        let mut st = shared.lock();
        for (i, port) in ["4420", "4421"].iter().enumerate() {
            let log = Arc::new(
                (0..512)
                    .map(|k| e(&format!("nqn.x:m{i}-{k}"), port))
                    .collect::<Vec<_>>(),
            );
            let mut m = Member {
                live: true,
                ..Member::default()
            };
            for h in 0..256 {
                m.logs.insert(format!("nqn.h:{h}"), log.clone());
            }
            st.members
                .insert(SocketAddr::from(([10, 0, 0, i as u8 + 1], 8009)), m);
        }
        for h in 0..256 {
            st.hosts.insert(
                format!("nqn.h:{h}"),
                Host {
                    last_seen: Instant::now(),
                    served: true,
                    view: Some(Arc::new(Vec::new())),
                },
            );
        }
    }
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (s2, stop2) = (shared.clone(), stop.clone());
    let prober = std::thread::spawn(move || {
        let mut worst = Duration::ZERO;
        while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
            let t0 = Instant::now();
            drop(s2.lock());
            worst = worst.max(t0.elapsed());
            std::thread::sleep(Duration::from_micros(200));
        }
        worst
    });
    let t0 = Instant::now();
    assert!(refresh_views(&shared));
    let total = t0.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let worst = prober.join().unwrap();
    eprintln!("recompute of 256 views: {total:?}; longest lock wait meanwhile {worst:?}");
    assert_eq!(
        shared.lock().hosts["nqn.h:7"]
            .view
            .as_ref()
            .map(|v| v.len()),
        Some(1024)
    );
    assert!(worst * 4 < total, "lock held {worst:?} of {total:?}");
}

fn reg(hostnqn: &str, peer: &str, authenticated: bool) -> DimRegistration {
    let now = Instant::now();
    DimRegistration {
        hostnqn: hostnqn.into(),
        hostid: [0; 16],
        entity_type: EntityType::Ddc,
        entity_nqn: hostnqn.into(),
        name: String::new(),
        version: String::new(),
        symname: None,
        entries: vec![],
        local: "10.0.0.9:8009".parse().unwrap(),
        peer: Some(peer.parse().unwrap()),
        registered: now,
        updated: now,
        authenticated,
        admitted: false,
    }
}

/// C1: who the CDC trusts to announce: listed addresses and NQNs, configured members'
/// addresses, authenticated connections; nobody else (empty by default).
#[test]
fn trust_is_explicit() {
    let mut st = State::new(vec![], 1);
    let evil = reg("nqn.x:evil", "10.0.0.66:1234", false);
    assert!(!st.trusts(&evil));
    assert!(st.trusts(&reg("nqn.x:evil", "10.0.0.66:1234", true)));
    st.members
        .insert("10.0.0.1:8009".parse().unwrap(), Member::default());
    assert!(st.trusts(&reg("nqn.x:a", "10.0.0.1:40000", false)));
    // An announced member's address is not a reason to trust.
    st.members.insert(
        "10.0.0.66:8009".parse().unwrap(),
        Member {
            announced: true,
            ..Member::default()
        },
    );
    assert!(!st.trusts(&evil));
    st.trusted = vec![Trusted::Address("10.0.0.66".parse().unwrap())];
    assert!(st.trusts(&evil));
    st.trusted = vec![Trusted::Nqn("nqn.x:evil".into())];
    assert!(st.trusts(&evil));
    assert!(!st.trusts(&reg("nqn.x:other", "10.0.0.66:1234", false)));
}
