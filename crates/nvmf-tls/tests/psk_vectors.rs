//! Known-answer tests for the PSK module.
//!
//! Two independent sources:
//! * libnvme's own test vectors (`test/psk.c` in linux-nvme/libnvme: the interchange strings of
//!   a fixed key and the version-1 identities, RFC 8446 and compat encodings), copied below;
//! * `vectors/vectors.txt`, printed by `vectors/gen.py` (Python stdlib, HKDF and CRC-32 written
//!   out by hand) — it reproduces the libnvme values above, then adds retained PSKs, digests and
//!   TLS PSKs for both encodings, both identity versions, all transforms and two NQN pairs.

use std::collections::HashMap;

use nvmf_tls::psk::{
    ConfiguredPsk, Derivation, IdentityVersion, KeyTransform, PskError, PskHash, PskIdentity,
    RetainedPsk, tls_psk_for_identity,
};

const K32: [u8; 32] = [
    0x55, 0x12, 0xDB, 0xB6, 0x73, 0x7D, 0x01, 0x06, 0xF6, 0x59, 0x75, 0xB7, 0x73, 0xDF, 0xB0, 0x11,
    0xFF, 0xC3, 0x44, 0xBC, 0xF4, 0x42, 0xE2, 0xDD, 0x6D, 0x8B, 0xC4, 0x87, 0x0B, 0x5D, 0x5B, 0x03,
];

fn k48() -> Vec<u8> {
    let mut k = K32.to_vec();
    k.extend_from_slice(&K32[16..]);
    k
}

// ---- libnvme test/psk.c, verbatim values ----

#[test]
fn libnvme_interchange_vectors() {
    let cases: [(&str, KeyTransform, Vec<u8>); 3] = [
        (
            "NVMeTLSkey-1:00:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:",
            KeyTransform::None,
            K32.to_vec(),
        ),
        (
            "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:",
            KeyTransform::Sha256,
            K32.to_vec(),
        ),
        (
            "NVMeTLSkey-1:02:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwP/w0S89ELi3W2LxIcLXVsDn8kXZQ==:",
            KeyTransform::Sha384,
            k48(),
        ),
    ];
    for (text, transform, key) in cases {
        let psk = ConfiguredPsk::parse(text).expect(text);
        assert_eq!(psk.transform(), transform);
        assert_eq!(psk.key(), &key[..]);
        let built = ConfiguredPsk::new(transform, &key).expect("valid length");
        assert_eq!(&*built.to_interchange(), text);
    }
}

#[test]
fn libnvme_v1_identity_vectors() {
    let host = "nqn.psk-test-host";
    let sub = "nqn.psk-test-subsys";
    let cases = [
        (
            KeyTransform::Sha256,
            K32.to_vec(),
            Derivation::Rfc8446,
            "NVMe1R01 nqn.psk-test-host nqn.psk-test-subsys iSbjiStwJ/1TrTvDlt2fjFmzvsytOJelidNnA+X5lEU=",
        ),
        (
            KeyTransform::Sha384,
            k48(),
            Derivation::Rfc8446,
            "NVMe1R02 nqn.psk-test-host nqn.psk-test-subsys QhW2+Rp6RzHlNtCslyRxMnwJ11tKKhz8JCAQpQ+XUD8f9td1VeH5h53yz2wKJG1a",
        ),
        (
            KeyTransform::Sha256,
            K32.to_vec(),
            Derivation::Compat,
            "NVMe1R01 nqn.psk-test-host nqn.psk-test-subsys 66GuqV08TsAGII39teWUfwQwizjv06Jy8jOcX3NAAzM=",
        ),
        (
            KeyTransform::Sha384,
            k48(),
            Derivation::Compat,
            "NVMe1R02 nqn.psk-test-host nqn.psk-test-subsys RsKmYJ3nAn1ApjjMloJFbAkLPivONDAX/xW327YBUsn2eGShXSjCZvBaOxscLqmz",
        ),
    ];
    for (transform, key, derivation, want) in cases {
        let psk = ConfiguredPsk::new(transform, &key).expect("key");
        let (id, _) = psk
            .host_identity(host, sub, IdentityVersion::V1, derivation)
            .expect("derive");
        assert_eq!(id.to_string(), want);
        // And the identity parses back to the same thing.
        assert_eq!(PskIdentity::parse(want.as_bytes()).expect("parse"), id);
    }
}

// ---- gen.py output ----

fn vectors() -> HashMap<String, String> {
    include_str!("vectors/vectors.txt")
        .lines()
        .filter_map(|l| l.split_once(" = "))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

#[test]
fn gen_py_vectors() {
    let v = vectors();
    assert_eq!(v.len(), 100, "vectors.txt is complete");
    let pairs = [
        ("t", "nqn.psk-test-host", "nqn.psk-test-subsys"),
        (
            "l",
            "nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6",
            "nqn.2024-01.io.ebof:disk1",
        ),
    ];
    let mut checked = 0;
    for case in ["k01", "k02", "k00", "k00l"] {
        let psk = ConfiguredPsk::parse(&v[&format!("{case}.interchange")]).expect("interchange");
        assert_eq!(&*psk.to_interchange(), &v[&format!("{case}.interchange")]);
        for (p, host, sub) in pairs {
            for (dname, derivation) in
                [("compat", Derivation::Compat), ("rfc", Derivation::Rfc8446)]
            {
                let key = |f: &str| v[&format!("{case}.{p}.{dname}.{f}")].clone();
                let retained = psk.retained(host, derivation).expect("retained");
                assert_eq!(
                    retained.key(),
                    &hex(&key("retained"))[..],
                    "{case} {p} {dname}"
                );
                assert_eq!(retained.digest(host, sub).expect("digest"), key("digest"));

                for (version, idf, pskf) in [
                    (IdentityVersion::V0, "id0", "psk0"),
                    (IdentityVersion::V1, "id1", "psk1"),
                ] {
                    let (id, tls) = psk
                        .host_identity(host, sub, version, derivation)
                        .expect("host identity");
                    assert_eq!(id.to_string(), key(idf));
                    assert_eq!(tls.key(), &hex(&key(pskf))[..], "{case} {p} {dname} {pskf}");
                    assert_eq!(tls.hash(), psk.hash());

                    // Target side: parse what the host sends, derive the same TLS PSK.
                    let parsed = PskIdentity::parse(key(idf).as_bytes()).expect("parse");
                    let (server, used) =
                        tls_psk_for_identity(&psk, &parsed, derivation).expect("server derive");
                    assert_eq!(server.key(), tls.key());
                    assert_eq!(used, derivation);
                    if version == IdentityVersion::V1 && psk.transform() != KeyTransform::None {
                        // The digest tells the encodings apart even if the target prefers the
                        // other one.
                        let (server, used) =
                            tls_psk_for_identity(&psk, &parsed, derivation.other())
                                .expect("auto-detect");
                        assert_eq!(server.key(), tls.key());
                        assert_eq!(used, derivation);
                    }
                    checked += 1;
                }
            }
        }
    }
    assert_eq!(checked, 32);
}

#[test]
fn hash_choice_follows_transform_and_length() {
    let v = vectors();
    let k00l = ConfiguredPsk::parse(&v["k00l.interchange"]).expect("48-byte 00 key");
    assert_eq!(k00l.hash(), PskHash::Sha384);
    // Transform 00: the retained PSK is the configured key.
    assert_eq!(
        k00l.retained("nqn.h", Derivation::Compat).expect("r").key(),
        &k48()[..]
    );
}

#[test]
fn server_refuses_mismatches() {
    let v = vectors();
    let psk = ConfiguredPsk::parse(&v["k01.interchange"]).expect("key");
    let other = ConfiguredPsk::new(KeyTransform::Sha256, &[7u8; 32]).expect("key");

    // A version-1 identity made with another key: the digest does not match.
    let id1 = PskIdentity::parse(v["k01.t.compat.id1"].as_bytes()).expect("id");
    assert_eq!(
        tls_psk_for_identity(&other, &id1, Derivation::Compat),
        Err(PskError::DigestMismatch)
    );
    // A SHA-384 identity for a SHA-256 key.
    let id384 = PskIdentity::parse(v["k02.t.compat.id0"].as_bytes()).expect("id");
    assert!(matches!(
        tls_psk_for_identity(&psk, &id384, Derivation::Compat),
        Err(PskError::HashMismatch {
            identity: PskHash::Sha384,
            key: PskHash::Sha256
        })
    ));
    // Generated identities are for secure channel concatenation only.
    let digest = &v["k01.t.compat.digest"];
    let gen_id = format!("NVMe1G01 nqn.psk-test-host nqn.psk-test-subsys {digest}");
    let gen_id = PskIdentity::parse(gen_id.as_bytes()).expect("G identity parses");
    assert_eq!(
        tls_psk_for_identity(&psk, &gen_id, Derivation::Compat),
        Err(PskError::GeneratedIdentity)
    );
    // But a generated PSK can be turned into a TLS PSK for it (RFC encoding, as Linux does).
    let generated = RetainedPsk::new(PskHash::Sha256, &[9u8; 32]).expect("generated");
    assert!(generated.tls_psk(&gen_id, Derivation::Rfc8446).is_ok());
}

/// Random bytes and random mutations of valid strings never panic the parsers, and whatever
/// parses round-trips.
#[test]
fn parsers_survive_hostile_input() {
    let v = vectors();
    let mut state = 0x0123_4567_89AB_CDEFu64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let seeds: Vec<String> = v
        .iter()
        .filter(|(k, _)| k.ends_with("id0") || k.ends_with("id1") || k.ends_with("interchange"))
        .map(|(_, val)| val.clone())
        .collect();
    let mut parsed = 0;
    for i in 0..20_000 {
        let mut bytes = if i % 2 == 0 {
            seeds[(next() as usize) % seeds.len()].clone().into_bytes()
        } else {
            (0..(next() % 700)).map(|_| next() as u8).collect()
        };
        for _ in 0..(next() % 4) {
            if bytes.is_empty() {
                break;
            }
            let at = (next() as usize) % bytes.len();
            match next() % 3 {
                0 => bytes[at] = next() as u8,
                1 => {
                    bytes.remove(at);
                }
                _ => bytes.insert(at, b" :=0"[(next() % 4) as usize]),
            }
        }
        if let Ok(id) = PskIdentity::parse(&bytes) {
            assert_eq!(id.to_string().as_bytes(), &bytes[..]);
            parsed += 1;
        }
        if let Ok(text) = std::str::from_utf8(&bytes)
            && let Ok(psk) = ConfiguredPsk::parse(text)
        {
            assert_eq!(&*psk.to_interchange(), text.trim());
            parsed += 1;
        }
    }
    assert!(
        parsed > 1000,
        "the mutations leave many inputs valid ({parsed})"
    );
}
