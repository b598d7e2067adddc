//! Known-answer tests. Every expected value comes from `tests/vectors/gen.py` (Python standard
//! library: hashlib, hmac, base64, zlib, pow — an independent computation), whose output is
//! `tests/vectors/generated.rs`, or from published secrets (the NVMe specification's example
//! secret and keys printed by `nvme gen-dhchap-key`, decoded by the same script).

#[allow(dead_code)]
mod v {
    include!("vectors/generated.rs");
}

use nvme_auth::chap::{ChapContext, augmented_challenge};
use nvme_auth::dh::{DhGroup, DhPrivateKey};
use nvme_auth::secret::{DhchapSecret, KeyTransform, TransformedKey};
use nvme_auth::{HashId, SecretError};

fn unhex(s: &str) -> Vec<u8> {
    assert!(s.len().is_multiple_of(2), "odd hex length");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex digit"))
        .collect()
}

#[test]
fn ffdhe_primes_match_rfc7919_formula() {
    let cases = [
        (DhGroup::Ffdhe2048, v::FFDHE2048_P),
        (DhGroup::Ffdhe3072, v::FFDHE3072_P),
        (DhGroup::Ffdhe4096, v::FFDHE4096_P),
        (DhGroup::Ffdhe6144, v::FFDHE6144_P),
        (DhGroup::Ffdhe8192, v::FFDHE8192_P),
    ];
    for (g, p) in cases {
        let prime = g.prime().expect("ffdhe group has a prime");
        assert_eq!(prime.len(), g.value_len());
        assert_eq!(prime, unhex(p), "{g}");
    }
    assert_eq!(DhGroup::Null.prime(), None);
}

#[test]
fn dhhc1_strings_and_transformations() {
    let keys = [
        (
            v::KEY32,
            [
                (v::KEY32_NN0_DHHC1, v::KEY32_NN0_T_HOST, v::KEY32_NN0_T_SUB),
                (v::KEY32_NN1_DHHC1, v::KEY32_NN1_T_HOST, v::KEY32_NN1_T_SUB),
                (v::KEY32_NN2_DHHC1, v::KEY32_NN2_T_HOST, v::KEY32_NN2_T_SUB),
                (v::KEY32_NN3_DHHC1, v::KEY32_NN3_T_HOST, v::KEY32_NN3_T_SUB),
            ],
        ),
        (
            v::KEY48,
            [
                (v::KEY48_NN0_DHHC1, v::KEY48_NN0_T_HOST, v::KEY48_NN0_T_SUB),
                (v::KEY48_NN1_DHHC1, v::KEY48_NN1_T_HOST, v::KEY48_NN1_T_SUB),
                (v::KEY48_NN2_DHHC1, v::KEY48_NN2_T_HOST, v::KEY48_NN2_T_SUB),
                (v::KEY48_NN3_DHHC1, v::KEY48_NN3_T_HOST, v::KEY48_NN3_T_SUB),
            ],
        ),
        (
            v::KEY64,
            [
                (v::KEY64_NN0_DHHC1, v::KEY64_NN0_T_HOST, v::KEY64_NN0_T_SUB),
                (v::KEY64_NN1_DHHC1, v::KEY64_NN1_T_HOST, v::KEY64_NN1_T_SUB),
                (v::KEY64_NN2_DHHC1, v::KEY64_NN2_T_HOST, v::KEY64_NN2_T_SUB),
                (v::KEY64_NN3_DHHC1, v::KEY64_NN3_T_HOST, v::KEY64_NN3_T_SUB),
            ],
        ),
    ];
    for (key, per_nn) in keys {
        let key = unhex(key);
        for (nn, (text, t_host, t_sub)) in per_nn.into_iter().enumerate() {
            let s = DhchapSecret::parse(text).expect("generated secret parses");
            assert_eq!(s.key_bytes(), &key[..]);
            assert_eq!(s.transform_kind().nn() as usize, nn);
            // Formatting is the inverse (same base64, CRC, NN).
            let built = DhchapSecret::from_key(s.transform_kind(), &key).expect("length");
            assert_eq!(&*built.encode(), text);
            assert_eq!(s.transform(v::HOSTNQN).as_bytes(), &unhex(t_host)[..]);
            assert_eq!(s.transform(v::SUBNQN).as_bytes(), &unhex(t_sub)[..]);
        }
    }
}

#[test]
fn published_secrets_parse() {
    for (text, key, nn) in [
        (v::PUBLISHED0, v::PUBLISHED0_KEY, 0),
        (v::PUBLISHED1, v::PUBLISHED1_KEY, 1),
        (v::PUBLISHED2, v::PUBLISHED2_KEY, 2),
    ] {
        let s = DhchapSecret::parse(text).expect("published secret parses");
        assert_eq!(s.key_bytes(), &unhex(key)[..]);
        assert_eq!(s.transform_kind(), KeyTransform::from_nn(nn).expect("nn"));
        assert_eq!(&*s.encode(), text);
    }
    // One flipped base64 character breaks the CRC (or the length), never silently accepted.
    let mut bad = v::PUBLISHED1.to_string();
    bad.replace_range(20..21, if &bad[20..21] == "A" { "B" } else { "A" });
    assert!(matches!(
        DhchapSecret::parse(&bad),
        Err(SecretError::CrcMismatch)
    ));
}

#[test]
fn ffdhe_public_values_and_shared_secrets() {
    let cases = [
        (
            DhGroup::Ffdhe2048,
            v::FFDHE2048_X,
            v::FFDHE2048_Y,
            v::FFDHE2048_GX,
            v::FFDHE2048_GY,
            v::FFDHE2048_K,
        ),
        (
            DhGroup::Ffdhe3072,
            v::FFDHE3072_X,
            v::FFDHE3072_Y,
            v::FFDHE3072_GX,
            v::FFDHE3072_GY,
            v::FFDHE3072_K,
        ),
        (
            DhGroup::Ffdhe8192,
            v::FFDHE8192_X,
            v::FFDHE8192_Y,
            v::FFDHE8192_GX,
            v::FFDHE8192_GY,
            v::FFDHE8192_K,
        ),
    ];
    for (g, x, y, gx, gy, k) in cases {
        let ctrl = DhPrivateKey::from_be_bytes(g, &unhex(x)).expect("x");
        let host = DhPrivateKey::from_be_bytes(g, &unhex(y)).expect("y");
        assert_eq!(ctrl.public_value(), unhex(gx), "{g} g^x");
        assert_eq!(host.public_value(), unhex(gy), "{g} g^y");
        assert_eq!(
            &ctrl.shared_secret(&unhex(gy)).expect("k")[..],
            &unhex(k)[..],
            "{g} k"
        );
        assert_eq!(
            &host.shared_secret(&unhex(gx)).expect("k")[..],
            &unhex(k)[..],
            "{g} k"
        );
    }
}

#[test]
fn chap_responses_null_and_ffdhe2048() {
    let host_secret = DhchapSecret::parse(v::CHAP_HOST_SECRET).expect("host secret");
    let ctrl_secret = DhchapSecret::parse(v::CHAP_CTRL_SECRET).expect("ctrl secret");
    let kh = host_secret.transform(v::HOSTNQN);
    let kc = ctrl_secret.transform(v::SUBNQN);
    // The host secret is keyed by the host NQN, the controller secret by the subsystem NQN.
    assert_eq!(kh, TransformedKey::from_bytes(&unhex(v::KEY48_NN1_T_HOST)));
    assert_eq!(kc, TransformedKey::from_bytes(&unhex(v::KEY64_NN3_T_SUB)));

    let ks = {
        let x = DhPrivateKey::from_be_bytes(DhGroup::Ffdhe2048, &unhex(v::FFDHE2048_X)).expect("x");
        x.shared_secret(&unhex(v::FFDHE2048_GY)).expect("ks")
    };
    assert_eq!(&ks[..], &unhex(v::FFDHE2048_K)[..]);

    let per_hash = [
        (
            HashId::Sha256,
            [
                v::CHAP_H1_C1,
                v::CHAP_H1_C2,
                v::CHAP_H1_NULL_R1,
                v::CHAP_H1_NULL_R2,
                v::CHAP_H1_2048_C1AUG,
                v::CHAP_H1_2048_C2AUG,
                v::CHAP_H1_2048_R1,
                v::CHAP_H1_2048_R2,
            ],
        ),
        (
            HashId::Sha384,
            [
                v::CHAP_H2_C1,
                v::CHAP_H2_C2,
                v::CHAP_H2_NULL_R1,
                v::CHAP_H2_NULL_R2,
                v::CHAP_H2_2048_C1AUG,
                v::CHAP_H2_2048_C2AUG,
                v::CHAP_H2_2048_R1,
                v::CHAP_H2_2048_R2,
            ],
        ),
        (
            HashId::Sha512,
            [
                v::CHAP_H3_C1,
                v::CHAP_H3_C2,
                v::CHAP_H3_NULL_R1,
                v::CHAP_H3_NULL_R2,
                v::CHAP_H3_2048_C1AUG,
                v::CHAP_H3_2048_C2AUG,
                v::CHAP_H3_2048_R1,
                v::CHAP_H3_2048_R2,
            ],
        ),
    ];
    for (hash, [c1, c2, nr1, nr2, a1, a2, r1, r2]) in per_hash {
        let (c1, c2) = (unhex(c1), unhex(c2));
        let null = ChapContext {
            hash,
            t_id: v::CHAP_TID,
            sc_c: 0,
            hostnqn: v::HOSTNQN,
            subnqn: v::SUBNQN,
            session_key: None,
        };
        assert_eq!(
            null.host_response(&kh, &c1, v::CHAP_S1),
            unhex(nr1),
            "{hash} null R1"
        );
        assert_eq!(
            null.controller_response(&kc, &c2, v::CHAP_S2),
            unhex(nr2),
            "{hash} null R2"
        );

        assert_eq!(augmented_challenge(hash, &ks, &c1), unhex(a1), "{hash} C1'");
        assert_eq!(augmented_challenge(hash, &ks, &c2), unhex(a2), "{hash} C2'");
        let dh = ChapContext {
            session_key: Some(&ks),
            ..null
        };
        assert_eq!(
            dh.host_response(&kh, &c1, v::CHAP_S1),
            unhex(r1),
            "{hash} dh R1"
        );
        assert_eq!(
            dh.controller_response(&kc, &c2, v::CHAP_S2),
            unhex(r2),
            "{hash} dh R2"
        );
    }
}
