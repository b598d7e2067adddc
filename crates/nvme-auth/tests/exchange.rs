//! Host ↔ target round trips through both state machines, byte for byte.

mod common;

use std::time::Instant;

use common::*;
use nvme_auth::dh::DhPrivateKey;
use nvme_auth::msg::{self, Message};
use nvme_auth::{
    AuthConfig, DhGroup, FailureCause, FailureReason, HashId, HostErrorKind, HostState, TargetState,
};

fn configs(hash: HashId, group: DhGroup, bidirectional: bool) -> (AuthConfig, AuthConfig) {
    let hs = secret(1, 1, 32);
    let cs = secret(2, 2, 48);
    let ctrl = bidirectional.then_some(&cs);
    let tcfg = AuthConfig::new(&hs, Some(&cs), HOSTNQN, SUBNQN)
        .with_hashes(vec![hash])
        .with_dh_groups(vec![group]);
    let hcfg = AuthConfig::new(&hs, ctrl, HOSTNQN, SUBNQN);
    (tcfg, hcfg)
}

fn assert_success(hash: HashId, group: DhGroup, bidirectional: bool, seed: u64) {
    let (tcfg, hcfg) = configs(hash, group, bidirectional);
    let mut t = target(tcfg, seed);
    let mut h = host(hcfg, seed + 100);
    let tr = exchange(&mut h, &mut t, 7);
    let what = format!("{hash} {group} bidirectional={bidirectional}");
    assert!(
        tr.target_errors.is_empty(),
        "{what}: {:?}",
        tr.target_errors
    );
    assert!(tr.host_error.is_none(), "{what}: {:?}", tr.host_error);
    assert_eq!(t.state(), TargetState::Authenticated, "{what}");
    assert!(t.is_authenticated(), "{what}");
    assert_eq!(h.state(), HostState::Authenticated, "{what}");
    assert_eq!(t.negotiated(), Some((hash, group)), "{what}");
    assert_eq!(h.negotiated(), Some((hash, group)), "{what}");
    assert!(!t.exchange_in_progress());
}

#[test]
fn every_hash_null_and_ffdhe2048_one_way_and_bidirectional() {
    let mut seed = 10;
    for hash in HashId::ALL {
        for group in [DhGroup::Null, DhGroup::Ffdhe2048] {
            for bidi in [false, true] {
                assert_success(hash, group, bidi, seed);
                seed += 1;
            }
        }
    }
}

#[test]
fn larger_groups_once_each() {
    assert_success(HashId::Sha384, DhGroup::Ffdhe3072, true, 40);
    assert_success(HashId::Sha256, DhGroup::Ffdhe4096, false, 41);
    assert_success(HashId::Sha512, DhGroup::Ffdhe6144, true, 42);
    assert_success(HashId::Sha512, DhGroup::Ffdhe8192, true, 43);
    assert_success(HashId::Sha256, DhGroup::Ffdhe8192, false, 44);
}

#[test]
fn target_preference_order_wins() {
    let hs = secret(1, 0, 64);
    let tcfg = AuthConfig::new(&hs, None, HOSTNQN, SUBNQN)
        .with_hashes(vec![HashId::Sha512, HashId::Sha256])
        .with_dh_groups(vec![DhGroup::Ffdhe3072, DhGroup::Null]);
    // The host offers everything in Linux's order; the target's first choice is taken.
    let mut t = target(tcfg, 1);
    let mut h = host(AuthConfig::new(&hs, None, HOSTNQN, SUBNQN), 2);
    let tr = exchange(&mut h, &mut t, 1);
    assert!(tr.host_error.is_none() && tr.target_errors.is_empty());
    assert_eq!(t.negotiated(), Some((HashId::Sha512, DhGroup::Ffdhe3072)));
}

#[test]
fn wrong_host_key_gets_failure1_authentication_failed() {
    let right = secret(1, 1, 32);
    let wrong = secret(9, 1, 32);
    for group in [DhGroup::Null, DhGroup::Ffdhe2048] {
        let mut t = target(
            AuthConfig::new(&right, None, HOSTNQN, SUBNQN).with_dh_groups(vec![group]),
            3,
        );
        let mut h = host(AuthConfig::new(&wrong, None, HOSTNQN, SUBNQN), 4);
        let tr = exchange(&mut h, &mut t, 5);
        assert_eq!(tr.target_errors.len(), 1);
        assert_eq!(tr.target_errors[0].reason, FailureReason::Failed);
        assert_eq!(tr.target_errors[0].cause, FailureCause::ResponseMismatch);
        let f1 = tr.failure1.expect("failure1 returned by AUTH_Receive");
        assert_eq!(f1, [0x00, 0xF1, 0, 0, 5, 0, 0x01, 0x01]);
        let he = tr.host_error.expect("host fails");
        assert_eq!(
            he.kind,
            HostErrorKind::ControllerFailure {
                reason_code: 1,
                explanation: 1
            }
        );
        assert_eq!(he.failure2, None, "no Failure2 after a Failure1");
        assert_eq!(t.state(), TargetState::Failed);
        assert!(!t.is_authenticated());
        assert_eq!(h.state(), HostState::Failed);
    }
}

#[test]
fn same_key_but_other_host_nqn_fails() {
    // The key transformation binds the host NQN: a host claiming another NQN with the same
    // NN≠0 secret computes a different Kh'.
    let s = secret(1, 2, 48);
    let mut t = target(AuthConfig::new(&s, None, HOSTNQN, SUBNQN), 3);
    let mut h = host(
        AuthConfig::new(&s, None, "nqn.2014-08.org.nvmexpress:uuid:other", SUBNQN),
        4,
    );
    let tr = exchange(&mut h, &mut t, 5);
    assert_eq!(tr.target_errors[0].cause, FailureCause::ResponseMismatch);
}

#[test]
fn wrong_controller_key_makes_the_host_send_failure2() {
    let hs = secret(1, 1, 32);
    let target_ctrl = secret(2, 3, 64);
    let host_ctrl = secret(3, 3, 64);
    for group in [DhGroup::Null, DhGroup::Ffdhe2048] {
        let mut t = target(
            AuthConfig::new(&hs, Some(&target_ctrl), HOSTNQN, SUBNQN).with_dh_groups(vec![group]),
            5,
        );
        let mut h = host(AuthConfig::new(&hs, Some(&host_ctrl), HOSTNQN, SUBNQN), 6);
        let tr = exchange(&mut h, &mut t, 0x1234);
        let he = tr.host_error.expect("host rejects the controller");
        assert_eq!(he.kind, HostErrorKind::ControllerResponseMismatch);
        assert_eq!(
            he.failure2.as_deref(),
            Some(&[0x00, 0xF0, 0, 0, 0x34, 0x12, 0x01, 0x01][..])
        );
        assert_eq!(tr.target_errors.len(), 1);
        assert_eq!(
            tr.target_errors[0].cause,
            FailureCause::HostFailure2 {
                reason_code: 1,
                explanation: 1
            }
        );
        assert_eq!(t.state(), TargetState::Failed);
        assert!(!t.is_authenticated());
    }
}

#[test]
fn bidirectional_request_without_controller_key_fails() {
    let hs = secret(1, 0, 32);
    let cs = secret(2, 0, 32);
    let mut t = target(AuthConfig::new(&hs, None, HOSTNQN, SUBNQN), 1);
    let mut h = host(AuthConfig::new(&hs, Some(&cs), HOSTNQN, SUBNQN), 2);
    let tr = exchange(&mut h, &mut t, 1);
    assert_eq!(tr.target_errors[0].cause, FailureCause::NoControllerKey);
    assert!(matches!(
        tr.host_error.map(|e| e.kind),
        Some(HostErrorKind::ControllerFailure { explanation: 1, .. })
    ));
}

#[test]
fn no_common_hash_or_group() {
    let hs = secret(1, 0, 32);
    let mut t = target(
        AuthConfig::new(&hs, None, HOSTNQN, SUBNQN).with_hashes(vec![HashId::Sha384]),
        1,
    );
    let mut h = host(
        AuthConfig::new(&hs, None, HOSTNQN, SUBNQN).with_hashes(vec![HashId::Sha256]),
        2,
    );
    let tr = exchange(&mut h, &mut t, 1);
    assert_eq!(tr.target_errors[0].reason, FailureReason::HashUnusable);
    assert!(matches!(
        tr.host_error.map(|e| e.kind),
        Some(HostErrorKind::ControllerFailure { explanation: 4, .. })
    ));

    let mut t = target(
        AuthConfig::new(&hs, None, HOSTNQN, SUBNQN).with_dh_groups(vec![DhGroup::Ffdhe8192]),
        1,
    );
    let mut h = host(
        AuthConfig::new(&hs, None, HOSTNQN, SUBNQN).with_dh_groups(vec![DhGroup::Null]),
        2,
    );
    let tr = exchange(&mut h, &mut t, 1);
    assert_eq!(tr.target_errors[0].cause, FailureCause::NoCommonDhGroup);
    assert!(matches!(
        tr.host_error.map(|e| e.kind),
        Some(HostErrorKind::ControllerFailure { explanation: 5, .. })
    ));
}

#[test]
fn reauthentication_restarts_and_keeps_the_queue_until_it_fails() {
    let hs = secret(1, 1, 32);
    let cs = secret(2, 1, 32);
    let (mut t, mut h) = (
        target(AuthConfig::new(&hs, Some(&cs), HOSTNQN, SUBNQN), 1),
        host(AuthConfig::new(&hs, Some(&cs), HOSTNQN, SUBNQN), 2),
    );
    assert!(exchange(&mut h, &mut t, 1).host_error.is_none());
    assert!(t.is_authenticated());
    // Re-authentication: a new Negotiate on the authenticated queue.
    let neg = h.start(2);
    t.on_send(&neg).expect("negotiate accepted");
    assert_eq!(t.state(), TargetState::ChallengePending);
    assert!(
        t.is_authenticated(),
        "still authenticated while re-authenticating"
    );
    // A timeout mid-exchange leaves it authenticated.
    t.abort_exchange();
    assert_eq!(t.state(), TargetState::Authenticated);
    // A complete second exchange works with a new T_ID.
    let tr = exchange(&mut h, &mut t, 3);
    assert!(tr.host_error.is_none() && tr.target_errors.is_empty());
    assert!(t.is_authenticated());
    // A failed re-authentication drops it.
    let mut bad = host(AuthConfig::new(&secret(7, 1, 32), None, HOSTNQN, SUBNQN), 3);
    let tr = exchange(&mut bad, &mut t, 4);
    assert_eq!(tr.target_errors[0].cause, FailureCause::ResponseMismatch);
    assert!(!t.is_authenticated());
    // And a fresh exchange after the failure succeeds again (policy is the caller's).
    assert!(exchange(&mut h, &mut t, 5).host_error.is_none());
    assert!(t.is_authenticated());
}

#[test]
fn one_way_success1_has_no_response_and_bidirectional_has_one() {
    let hs = secret(1, 0, 32);
    let cs = secret(2, 0, 32);
    for (ctrl, rvalid) in [(None, false), (Some(&cs), true)] {
        let mut t = target(AuthConfig::new(&hs, Some(&cs), HOSTNQN, SUBNQN), 1);
        let mut h = host(AuthConfig::new(&hs, ctrl, HOSTNQN, SUBNQN), 2);
        t.on_send(&h.start(9)).expect("negotiate");
        let ch = t.on_receive(4096).expect("challenge");
        let reply = h.handle_challenge(&ch).expect("reply");
        t.on_send(&reply).expect("reply accepted");
        let s1 = t.on_receive(4096).expect("success1");
        match msg::decode(&s1).expect("decode") {
            Message::Success1(s) => {
                assert_eq!(s.t_id, 9);
                assert_eq!(s.hl, 32);
                assert_eq!(s.response.is_some(), rvalid);
            }
            other => panic!("expected success1, got {other:?}"),
        }
        // One-way: authenticated as Success1 is handed out; bidirectional: after Success2.
        assert_eq!(t.is_authenticated(), !rvalid);
        let s2 = h.handle_success1(&s1).expect("host accepts");
        assert_eq!(s2.is_some(), rvalid);
        if let Some(s2) = s2 {
            t.on_send(&s2).expect("success2");
        }
        assert!(t.is_authenticated());
    }
}

/// DH cost per exchange side: key generation (g^x) + shared secret (y^x), the controller's DH
/// work per queue. Prints the figures; run
/// `cargo test -p nvme-auth --release --test exchange -- --nocapture dh_timing`.
#[test]
fn dh_timing() {
    let mut rng = TestRng(77);
    for group in &DhGroup::ALL[1..] {
        let peer = DhPrivateKey::generate(*group, &mut rng)
            .expect("peer")
            .public_value();
        let rounds = 3;
        let start = Instant::now();
        for _ in 0..rounds {
            let k = DhPrivateKey::generate(*group, &mut rng).expect("key");
            let public = k.public_value();
            let shared = k.shared_secret(&peer).expect("shared");
            assert_eq!(public.len(), group.value_len());
            assert_eq!(shared.len(), group.value_len());
        }
        let per = start.elapsed() / rounds;
        eprintln!(
            "{group}: keygen + public value + shared secret {per:?} per side ({} build)",
            if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            }
        );
    }
}

#[test]
fn debug_output_redacts_keys() {
    let hs = secret(1, 0, 32);
    let cs = secret(2, 1, 32);
    let cfg = AuthConfig::new(&hs, Some(&cs), HOSTNQN, SUBNQN);
    let raw_hex: String = hs.key_bytes().iter().map(|b| format!("{b:02x}")).collect();
    let transformed = cs.transform(SUBNQN);
    let t_hex: String = transformed
        .as_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let mut t = target(cfg.clone(), 1);
    let mut h = host(cfg.clone(), 2);
    exchange(&mut h, &mut t, 1);
    let dbg = format!("{cfg:?} {t:?} {h:?} {hs:?}");
    assert!(dbg.contains("redacted"), "{dbg}");
    for needle in [
        &raw_hex[..16],
        &t_hex[..16],
        &format!("{:?}", &hs.key_bytes()[..4]),
    ] {
        assert!(!dbg.contains(needle), "{dbg}");
    }
}
