//! Hostile input: truncated and lying messages, bad DH values, unknown ids, messages out of
//! order or repeated, and a bounded random-bytes loop. Everything must end in a typed error
//! (a Failure1 for the target, a HostError for the host), never a panic.

mod common;

use common::*;
use nvme_auth::dh::{DhError, DhPrivateKey, check_peer_value};
use nvme_auth::msg::{
    self, Challenge, DecodeError, DhchapDescriptor, Failure, Message, Negotiate, Reply, Success1,
};
use nvme_auth::{
    AuthConfig, DhGroup, FailureCause, FailureReason, HashId, HostErrorKind, RandomSource,
    ReceiveError, TargetAuth, TargetState,
};

fn cfg() -> AuthConfig {
    AuthConfig::new(&secret(1, 1, 32), Some(&secret(2, 2, 48)), HOSTNQN, SUBNQN)
}

fn negotiate(t_id: u16, hashes: &[u8], groups: &[u8]) -> Vec<u8> {
    Message::Negotiate(Negotiate {
        t_id,
        sc_c: 0,
        napd: 1,
        dhchap: Some(DhchapDescriptor {
            hash_ids: hashes.to_vec(),
            dh_group_ids: groups.to_vec(),
        }),
    })
    .encode()
}

/// A target that has sent its Challenge for `group` (SHA-256), plus that Challenge.
fn target_awaiting_reply(group: DhGroup) -> (TargetAuth<TestRng>, Challenge) {
    let mut t = target(cfg(), 11);
    t.on_send(&negotiate(3, &[1], &[group.id()]))
        .expect("negotiate");
    let ch = t.on_receive(4096).expect("challenge");
    assert_eq!(t.state(), TargetState::AwaitingReply);
    match msg::decode(&ch).expect("own challenge decodes") {
        Message::Challenge(c) => (t, c),
        other => panic!("not a challenge: {other:?}"),
    }
}

fn failure1_reason(t: &mut TargetAuth<TestRng>) -> u8 {
    let f = t.on_receive(4096).expect("failure1");
    assert!(is_failure1(&f), "{f:?}");
    assert_eq!(t.state(), TargetState::Failed);
    assert!(!t.is_authenticated());
    f[7]
}

fn samples() -> Vec<Message> {
    vec![
        Message::Negotiate(Negotiate {
            t_id: 1,
            sc_c: 0,
            napd: 1,
            dhchap: Some(DhchapDescriptor {
                hash_ids: vec![1, 2, 3],
                dh_group_ids: vec![0, 1, 5],
            }),
        }),
        Message::Challenge(Challenge {
            t_id: 1,
            hash: HashId::Sha256,
            dh_group: DhGroup::Ffdhe2048,
            seqnum: 1,
            challenge: vec![1; 32],
            dh_value: vec![2; 256],
        }),
        Message::Reply(Reply {
            t_id: 1,
            response: vec![3; 48],
            challenge: Some(vec![4; 48]),
            seqnum: 2,
            dh_value: vec![5; 300],
        }),
        Message::Success1(Success1 {
            t_id: 1,
            hl: 64,
            response: Some(vec![6; 64]),
        }),
        Message::Success2 { t_id: 1 },
        Message::Failure1(Failure::new(1, FailureReason::Failed)),
        Message::Failure2(Failure::new(1, FailureReason::IncorrectPayload)),
    ]
}

#[test]
fn every_truncation_is_a_typed_error() {
    for m in samples() {
        let wire = m.encode();
        assert_eq!(msg::decode(&wire), Ok(m.clone()));
        for cut in 0..wire.len() {
            let r = msg::decode(&wire[..cut]);
            assert!(
                matches!(r, Err(DecodeError::Truncated { len, .. }) if len == cut),
                "{} cut at {cut}: {r:?}",
                m.name()
            );
            // The target turns it into a Failure1 "incorrect payload".
            let mut t = target(cfg(), 1);
            let e = t.on_send(&wire[..cut]).expect_err("truncated");
            assert_eq!(e.reason, FailureReason::IncorrectPayload);
            assert_eq!(failure1_reason(&mut t), 6);
        }
    }
}

#[test]
fn lengths_pointing_outside_the_buffer() {
    // Challenge claiming a 65535-byte DH value in a 48-byte buffer.
    let mut ch = vec![0u8; 48];
    ch[..2].copy_from_slice(&[1, 1]);
    ch[6] = 32;
    ch[8] = 1;
    ch[9] = 1;
    ch[10..12].copy_from_slice(&u16::MAX.to_le_bytes());
    assert_eq!(
        msg::decode(&ch),
        Err(DecodeError::Truncated {
            needed: 16 + 32 + 65535,
            len: 48
        })
    );
    // Reply with HL 64 in a 16-byte buffer.
    let mut r = vec![0u8; 16];
    r[..2].copy_from_slice(&[1, 2]);
    r[6] = 64;
    assert_eq!(
        msg::decode(&r),
        Err(DecodeError::Truncated {
            needed: 16 + 128,
            len: 16
        })
    );
    // Reply whose HL is not a digest length.
    r[6] = 33;
    assert_eq!(msg::decode(&r), Err(DecodeError::HashLength(33)));
    // Negotiate announcing 255 descriptors.
    let mut n = negotiate(1, &[1], &[0]);
    n[7] = 255;
    assert!(matches!(
        msg::decode(&n),
        Err(DecodeError::Truncated { needed, .. }) if needed == 8 + 255 * 64
    ));
    // Descriptor with HALEN 31.
    let mut n = negotiate(1, &[1], &[0]);
    n[10] = 31;
    assert_eq!(
        msg::decode(&n),
        Err(DecodeError::TooManyIds {
            halen: 31,
            dhlen: 1
        })
    );
    // Success1 with RVALID and HL 64 but no response bytes.
    let mut s = vec![0u8; 16];
    s[..2].copy_from_slice(&[1, 3]);
    s[6] = 64;
    s[8] = 1;
    assert!(matches!(
        msg::decode(&s),
        Err(DecodeError::Truncated { needed: 80, .. })
    ));
}

#[test]
fn dh_values_out_of_range_or_oversized() {
    let g = DhGroup::Ffdhe2048;
    let p = g.prime().expect("prime");
    let mut p_minus_1 = p.clone();
    p_minus_1[255] -= 1; // p is odd: no borrow
    let bad: Vec<(Vec<u8>, DhError)> = vec![
        (vec![], DhError::Empty),
        (vec![0; 256], DhError::OutOfRange),
        (vec![0], DhError::OutOfRange),
        (vec![1], DhError::OutOfRange),
        (p_minus_1.clone(), DhError::OutOfRange),
        (p.clone(), DhError::OutOfRange),
        (vec![0xff; 256], DhError::OutOfRange),
        (vec![2; 257], DhError::TooLong { len: 257, max: 256 }),
        (
            vec![0; 1025],
            DhError::TooLong {
                len: 1025,
                max: 256,
            },
        ),
    ];
    for (v, want) in &bad {
        assert_eq!(check_peer_value(g, v), Err(*want), "{} bytes", v.len());
        let k = DhPrivateKey::from_be_bytes(g, &[7; 28]).expect("x");
        assert_eq!(k.shared_secret(v).map(|_| ()), Err(*want));
    }
    // Short but valid (SPDK drops leading zero bytes): accepted, same as padded.
    assert_eq!(check_peer_value(g, &[2]), Ok(()));
    let k = DhPrivateKey::from_be_bytes(g, &[7; 28]).expect("x");
    let mut padded = vec![0u8; 256];
    padded[255] = 2;
    assert_eq!(
        k.shared_secret(&[2]).expect("short"),
        k.shared_secret(&padded).expect("padded")
    );
    assert_eq!(
        check_peer_value(DhGroup::Null, &[2]),
        Err(DhError::NullGroup)
    );

    // Through the target: each bad host value is Failure1 "DH group not usable" (or incorrect
    // payload when the decoder already refuses the length).
    for (v, want) in bad {
        let (mut t, c) = target_awaiting_reply(g);
        let reply = Message::Reply(Reply {
            t_id: c.t_id,
            response: vec![0; 32],
            challenge: None,
            seqnum: 0,
            dh_value: v,
        })
        .encode();
        let e = t.on_send(&reply).expect_err("bad DH value");
        match want {
            DhError::Empty => assert_eq!(e.cause, FailureCause::DhValue(DhError::Empty)),
            w => assert_eq!(e.cause, FailureCause::DhValue(w)),
        }
        assert_eq!(
            failure1_reason(&mut t),
            FailureReason::DhGroupUnusable as u8
        );
    }
    // A DH value with the null group.
    let (mut t, c) = target_awaiting_reply(DhGroup::Null);
    let reply = Message::Reply(Reply {
        t_id: c.t_id,
        response: vec![0; 32],
        challenge: None,
        seqnum: 0,
        dh_value: vec![2; 8],
    })
    .encode();
    assert_eq!(
        t.on_send(&reply).expect_err("dh value with null").cause,
        FailureCause::UnexpectedDhValue
    );
}

#[test]
fn host_refuses_bad_challenges_with_failure2() {
    let bad_challenges: Vec<(Vec<u8>, HostErrorKind, u8)> = {
        let good = Challenge {
            t_id: 4,
            hash: HashId::Sha256,
            dh_group: DhGroup::Ffdhe2048,
            seqnum: 1,
            challenge: vec![1; 32],
            dh_value: vec![1; 256],
        };
        let mut unknown_hash = Message::Challenge(good.clone()).encode();
        unknown_hash[8] = 9;
        let mut unknown_group = Message::Challenge(good.clone()).encode();
        unknown_group[9] = 7;
        let mut oversized = Message::Challenge(Challenge {
            dh_value: vec![3; 257],
            ..good.clone()
        })
        .encode();
        oversized.truncate(16 + 32 + 257);
        vec![
            (
                unknown_hash,
                HostErrorKind::Decode(DecodeError::UnknownHash(9)),
                4,
            ),
            (
                unknown_group,
                HostErrorKind::Decode(DecodeError::UnknownDhGroup(7)),
                5,
            ),
            (
                oversized,
                HostErrorKind::Decode(DecodeError::DhValueLength {
                    group: DhGroup::Ffdhe2048,
                    len: 257,
                }),
                5,
            ),
            (
                Message::Challenge(Challenge {
                    dh_value: vec![1],
                    ..good.clone()
                })
                .encode(),
                HostErrorKind::DhValue(DhError::OutOfRange),
                6,
            ),
            (
                Message::Challenge(Challenge {
                    t_id: 5,
                    ..good.clone()
                })
                .encode(),
                HostErrorKind::TransactionId {
                    expected: 4,
                    got: 5,
                },
                7,
            ),
            (
                Message::Success2 { t_id: 4 }.encode(),
                HostErrorKind::UnexpectedMessage {
                    expected: "challenge",
                    got: "success2",
                },
                7,
            ),
            (
                Message::Challenge(Challenge {
                    dh_group: DhGroup::Null,
                    dh_value: vec![],
                    ..good.clone()
                })
                .encode(),
                HostErrorKind::DhGroupNotOffered(DhGroup::Null),
                5,
            ),
        ]
    };
    for (wire, kind, explanation) in bad_challenges {
        let mut h = host(
            cfg()
                .with_dh_groups(vec![DhGroup::Ffdhe2048])
                .with_hashes(vec![HashId::Sha256]),
            1,
        );
        h.start(4);
        let e = h.handle_challenge(&wire).expect_err("bad challenge");
        assert_eq!(e.kind, kind);
        let f2 = e.failure2.expect("failure2 due");
        assert_eq!(f2, [0x00, 0xF0, 0, 0, 4, 0, 1, explanation], "{kind:?}");
        // Further calls are refused without panicking.
        assert_eq!(
            h.handle_success1(&wire).expect_err("wrong state").kind,
            HostErrorKind::WrongState
        );
    }
}

#[test]
fn host_refuses_success1_without_or_with_wrong_response() {
    let (tcfg, hcfg) = (cfg(), cfg());
    let mut t = target(tcfg, 1);
    let mut h = host(hcfg, 2);
    t.on_send(&h.start(8)).expect("negotiate");
    let reply = h
        .handle_challenge(&t.on_receive(4096).expect("challenge"))
        .expect("reply");
    t.on_send(&reply).expect("reply ok");
    // The controller (a fake one) answers without R2 although the host asked for it.
    let fake = Message::Success1(Success1 {
        t_id: 8,
        hl: 32,
        response: None,
    })
    .encode();
    let e = h.handle_success1(&fake).expect_err("missing R2");
    assert_eq!(e.kind, HostErrorKind::MissingControllerResponse);
    assert_eq!(
        e.failure2.as_deref(),
        Some(&[0, 0xF0, 0, 0, 8, 0, 1, 1][..])
    );
}

#[test]
fn unknown_ids_and_unusable_negotiations() {
    let cases: Vec<(Vec<u8>, FailureReason, FailureCause)> = vec![
        (
            negotiate(1, &[0x10, 0xFF], &[0, 1]),
            FailureReason::HashUnusable,
            FailureCause::NoCommonHash,
        ),
        (
            negotiate(1, &[1], &[7, 0xFF]),
            FailureReason::DhGroupUnusable,
            FailureCause::NoCommonDhGroup,
        ),
        (
            negotiate(1, &[], &[]),
            FailureReason::HashUnusable,
            FailureCause::NoCommonHash,
        ),
        (
            Message::Negotiate(Negotiate {
                t_id: 1,
                sc_c: 0,
                napd: 0,
                dhchap: None,
            })
            .encode(),
            FailureReason::ProtocolNotUsable,
            FailureCause::NoDhchapProtocol,
        ),
        (
            {
                let mut n = negotiate(1, &[1], &[0]);
                n[8] = 0x02; // AUTHID of some other protocol
                n
            },
            FailureReason::ProtocolNotUsable,
            FailureCause::NoDhchapProtocol,
        ),
        (
            {
                let mut n = negotiate(1, &[1], &[0]);
                n[6] = 1; // SC_C: new TLS PSK
                n
            },
            FailureReason::ConcatMismatch,
            FailureCause::SecureChannelUnsupported(1),
        ),
        (
            vec![0x05, 0x00, 0, 0, 1, 0, 0, 0],
            FailureReason::IncorrectMessage,
            FailureCause::Decode(DecodeError::UnknownMessage {
                auth_type: 5,
                auth_id: 0,
            }),
        ),
    ];
    for (wire, reason, cause) in cases {
        let mut t = target(cfg(), 1);
        let e = t.on_send(&wire).expect_err("refused");
        assert_eq!((e.reason, e.cause), (reason, cause));
        assert_eq!(failure1_reason(&mut t), reason as u8);
    }
    // Unknown ids next to known ones are skipped, not fatal.
    let mut t = target(cfg(), 1);
    t.on_send(&negotiate(1, &[0x10, 2], &[0x33, 1]))
        .expect("usable");
    assert_eq!(t.negotiated(), Some((HashId::Sha384, DhGroup::Ffdhe2048)));
    // A second DH-HMAC-CHAP-less descriptor before ours is skipped too.
    let mut two = negotiate(1, &[3], &[0]);
    let desc = two[8..72].to_vec();
    two[7] = 2;
    two[8..72].fill(0);
    two[8] = 0x7F;
    two.extend_from_slice(&desc);
    let mut t = target(cfg(), 1);
    t.on_send(&two).expect("usable");
    assert_eq!(t.negotiated(), Some((HashId::Sha512, DhGroup::Null)));
}

#[test]
fn messages_out_of_order_or_repeated() {
    let host_msgs = |t_id| {
        vec![
            Message::Reply(Reply {
                t_id,
                response: vec![0; 32],
                challenge: None,
                seqnum: 0,
                dh_value: vec![],
            })
            .encode(),
            Message::Success2 { t_id }.encode(),
            Message::Challenge(Challenge {
                t_id,
                hash: HashId::Sha256,
                dh_group: DhGroup::Null,
                seqnum: 1,
                challenge: vec![0; 32],
                dh_value: vec![],
            })
            .encode(),
            Message::Success1(Success1 {
                t_id,
                hl: 32,
                response: None,
            })
            .encode(),
            Message::Failure1(Failure::new(t_id, FailureReason::Failed)).encode(),
        ]
    };
    // Before any Negotiate, nothing but a Negotiate is acceptable.
    for m in host_msgs(0) {
        let mut t = target(cfg(), 1);
        let e = t.on_send(&m).expect_err("out of order");
        assert_eq!(e.reason, FailureReason::IncorrectMessage);
        assert!(matches!(
            e.cause,
            FailureCause::UnexpectedMessage {
                expected: "negotiate",
                ..
            }
        ));
        assert_eq!(failure1_reason(&mut t), 7);
    }
    // After the Negotiate, before AUTH_Receive fetched the Challenge.
    let mut t = target(cfg(), 1);
    t.on_send(&negotiate(2, &[1], &[0])).expect("negotiate");
    let e = t
        .on_send(&host_msgs(2)[0])
        .expect_err("reply before challenge");
    assert_eq!(e.reason, FailureReason::IncorrectMessage);
    // AUTH_Receive with nothing to send: Failure1 right away.
    let mut t = target(cfg(), 1);
    assert_eq!(failure1_reason(&mut t), 7);
    let (mut t, _) = target_awaiting_reply(DhGroup::Null);
    assert_eq!(failure1_reason(&mut t), 7, "second AUTH_Receive");
    // Reply with the wrong T_ID.
    let (mut t, c) = target_awaiting_reply(DhGroup::Null);
    let e = t.on_send(&host_msgs(c.t_id + 1)[0]).expect_err("t_id");
    assert_eq!(
        (e.reason, e.cause),
        (
            FailureReason::IncorrectPayload,
            FailureCause::TransactionId {
                expected: c.t_id,
                got: c.t_id + 1
            }
        )
    );
    // Reply with a SHA-384-sized response to a SHA-256 challenge.
    let (mut t, c) = target_awaiting_reply(DhGroup::Null);
    let r = Message::Reply(Reply {
        t_id: c.t_id,
        response: vec![0; 48],
        challenge: None,
        seqnum: 0,
        dh_value: vec![],
    })
    .encode();
    assert_eq!(
        t.on_send(&r).expect_err("hl").cause,
        FailureCause::HashLength {
            expected: 32,
            got: 48
        }
    );
    // A correct exchange, then the same Reply again (replay) and a repeated Success2.
    let mut t = target(cfg(), 1);
    let mut h = host(cfg(), 2);
    t.on_send(&h.start(6)).expect("negotiate");
    let reply = h
        .handle_challenge(&t.on_receive(4096).expect("challenge"))
        .expect("reply");
    t.on_send(&reply).expect("reply");
    let e = t.on_send(&reply).expect_err("replayed reply");
    assert_eq!(e.reason, FailureReason::IncorrectMessage);
    assert!(!t.is_authenticated());
    // Repeated Negotiate just restarts.
    let mut t = target(cfg(), 1);
    t.on_send(&negotiate(1, &[1], &[0])).expect("first");
    t.on_send(&negotiate(2, &[1], &[0])).expect("again");
    assert_eq!(t.state(), TargetState::ChallengePending);
    let ch = msg::decode(&t.on_receive(4096).expect("challenge")).expect("decode");
    assert_eq!(ch.t_id(), 2);
    // Repeated Success2 after a completed bidirectional exchange.
    let mut t = target(cfg(), 1);
    let mut h = host(cfg(), 2);
    assert!(exchange(&mut h, &mut t, 1).host_error.is_none());
    let e = t
        .on_send(&Message::Success2 { t_id: 1 }.encode())
        .expect_err("repeated success2");
    assert_eq!(e.reason, FailureReason::IncorrectMessage);
    assert!(!t.is_authenticated());
}

#[test]
fn small_allocation_length_keeps_the_state() {
    let mut t = target(cfg(), 1);
    t.on_send(&negotiate(1, &[3], &[5])).expect("negotiate");
    assert_eq!(
        t.on_receive(100),
        Err(ReceiveError::AllocationTooSmall {
            needed: 16 + 64 + 1024,
            al: 100
        })
    );
    assert_eq!(t.state(), TargetState::ChallengePending);
    let ch = t.on_receive(16 + 64 + 1024).expect("exact AL works");
    assert_eq!(ch.len(), 16 + 64 + 1024);
}

/// Bounded random-bytes loop into every entry point; mutations of valid messages too.
#[test]
fn random_bytes_never_panic() {
    let mut rng = TestRng(0xF00D);
    let valid: Vec<Vec<u8>> = samples().iter().map(Message::encode).collect();
    let mut decoded_ok = 0;
    for i in 0..10_000u32 {
        let mut buf = if i % 2 == 0 {
            let len = (rng.next_u64() % 200) as usize;
            let mut b = vec![0u8; len];
            rng.fill(&mut b).expect("rng");
            // Bias toward real headers so the decoder's inner checks are reached.
            if len >= 2 && i % 4 == 0 {
                let v = &valid[(rng.next_u64() % valid.len() as u64) as usize];
                b[0] = v[0];
                b[1] = v[1];
            }
            b
        } else {
            let mut b = valid[(rng.next_u64() % valid.len() as u64) as usize].clone();
            for _ in 0..1 + rng.next_u64() % 4 {
                let at = (rng.next_u64() % b.len() as u64) as usize;
                b[at] = rng.next_u64() as u8;
            }
            b
        };
        if let Ok(m) = msg::decode(&buf) {
            decoded_ok += 1;
            // Whatever decodes re-encodes to something that decodes to the same message.
            assert_eq!(msg::decode(&m.encode()), Ok(m));
        }
        let mut t = target(cfg(), u64::from(i));
        let _ = t.on_send(&buf);
        let _ = t.on_receive(4096);
        let mut h = host(cfg(), u64::from(i));
        h.start(1);
        let _ = h.handle_challenge(&buf);
        buf.truncate(buf.len() / 2);
        let _ = h.handle_success1(&buf);
    }
    assert!(
        decoded_ok > 500,
        "the loop reached the decoders ({decoded_ok})"
    );
}
