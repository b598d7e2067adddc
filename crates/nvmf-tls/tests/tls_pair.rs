//! A TLS client and server connected by nothing but byte buffers: handshakes for both PSK
//! hashes, bulk data both ways, record batching, wrong keys, unknown identities and hostile
//! bytes before, inside and after the handshake.

use std::sync::Arc;

use nvmf_tls::psk::{
    ConfiguredPsk, Derivation, IdentityVersion, PskHash, TlsPsk, resolve_identity,
};
use nvmf_tls::{TlsClient, TlsClientConfig, TlsConn, TlsError, TlsServer, TlsServerConfig};

const ID256: &[u8] = b"NVMe0R01 nqn.2014-08.org.nvmexpress:uuid:host1 nqn.2024-01.io.ebof:disk1";
const ID384: &[u8] = b"NVMe0R02 nqn.2014-08.org.nvmexpress:uuid:host1 nqn.2024-01.io.ebof:disk1";

fn key(hash: PskHash, byte: u8) -> TlsPsk {
    TlsPsk::new(hash, &vec![byte; hash.len()]).expect("key length")
}

/// A server knowing ID256 → 0x11 × 32 and ID384 → 0x22 × 48.
fn server_config() -> Arc<TlsServerConfig> {
    TlsServerConfig::new(|id: &[u8]| match id {
        ID256 => Some(key(PskHash::Sha256, 0x11)),
        ID384 => Some(key(PskHash::Sha384, 0x22)),
        _ => None,
    })
    .expect("server config")
}

/// Tiny deterministic PRNG (xorshift64*) for chunking and garbage.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// Moves ciphertext from `from` to `to`, in random chunks when `rng` is given.
fn pump(from: &mut TlsConn, to: &mut TlsConn, rng: Option<&mut Rng>) -> Result<usize, TlsError> {
    let bytes = from.take_cipher();
    match rng {
        None => {
            to.feed(&bytes)?;
        }
        Some(rng) => {
            let mut rest = &bytes[..];
            while !rest.is_empty() {
                let n = 1 + rng.below(rest.len().min(3000));
                assert_eq!(to.feed(&rest[..n])?, n);
                rest = &rest[n..];
            }
        }
    }
    Ok(bytes.len())
}

/// Runs the handshake to completion or to the first error (returned with the side).
fn handshake(
    client: &mut TlsClient,
    server: &mut TlsServer,
) -> Result<(), (&'static str, TlsError)> {
    for _ in 0..10 {
        if client.handshake_done() && server.handshake_done() {
            return Ok(());
        }
        pump(client, server, None).map_err(|e| ("server", e))?;
        pump(server, client, None).map_err(|e| ("client", e))?;
    }
    panic!("handshake did not finish in 10 rounds");
}

fn pair(identity: &[u8], psk: TlsPsk) -> (TlsClient, TlsServer) {
    let client = TlsClient::new(
        &TlsClientConfig::new().expect("client config"),
        identity,
        psk,
    )
    .expect("client");
    let server = TlsServer::new(&server_config()).expect("server");
    (client, server)
}

#[test]
fn sha256_psk_handshake_and_suite() {
    let (mut c, mut s) = pair(ID256, key(PskHash::Sha256, 0x11));
    // The ClientHello is ready before anything is received, and starts like TLS.
    assert_eq!(nvmf_tls::looks_like_tls(c.pending_cipher()), Some(true));
    assert!(s.psk_identity().is_none());
    handshake(&mut c, &mut s).expect("handshake");
    assert_eq!(s.cipher_suite(), Some("TLS_AES_128_GCM_SHA256"));
    assert_eq!(c.cipher_suite(), Some("TLS_AES_128_GCM_SHA256"));
    assert_eq!(s.psk_identity(), Some(ID256));
    // No session tickets or other post-handshake records are queued by the server.
    assert!(s.pending_cipher().is_empty());
}

#[test]
fn sha384_psk_handshake_and_suite() {
    let (mut c, mut s) = pair(ID384, key(PskHash::Sha384, 0x22));
    handshake(&mut c, &mut s).expect("handshake");
    assert_eq!(s.cipher_suite(), Some("TLS_AES_256_GCM_SHA384"));
    assert_eq!(c.cipher_suite(), Some("TLS_AES_256_GCM_SHA384"));
    assert_eq!(s.psk_identity(), Some(ID384));
}

#[test]
fn nvme_keys_end_to_end() {
    // The target holds configured keys per (host, subsystem); the host derives its identity
    // and TLS PSK as nvme-cli does. Both encodings, both identity versions.
    let configured =
        ConfiguredPsk::parse("NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:")
            .expect("configured key");
    let (host, sub) = (
        "nqn.2014-08.org.nvmexpress:uuid:host1",
        "nqn.2024-01.io.ebof:disk1",
    );
    let target_key = configured.clone();
    let config = TlsServerConfig::with_reasons(move |raw: &[u8]| {
        resolve_identity(raw, Derivation::Compat, |id| {
            (id.hostnqn == host && id.subnqn == sub).then(|| target_key.clone())
        })
        .map(|(_, psk)| psk)
        .map_err(|e| e.to_string())
    })
    .expect("config");
    for version in [IdentityVersion::V0, IdentityVersion::V1] {
        for derivation in [Derivation::Compat, Derivation::Rfc8446] {
            let (id, psk) = configured
                .host_identity(host, sub, version, derivation)
                .expect("host side");
            let id = id.to_string();
            let mut c = TlsClient::new(&TlsClientConfig::new().expect("cc"), id.as_bytes(), psk)
                .expect("client");
            let mut s = TlsServer::new(&config).expect("server");
            let result = handshake(&mut c, &mut s);
            // The target prefers Compat: v0 + RFC cannot be told apart and must fail with a
            // wrong-key error; v1 identities carry a digest that selects the right encoding.
            if version == IdentityVersion::V0 && derivation == Derivation::Rfc8446 {
                let (side, err) = result.expect_err("v0 with the other encoding");
                assert_eq!(side, "server");
                assert!(matches!(err, TlsError::WrongPsk { .. }), "{err}");
            } else {
                result.expect("handshake");
                assert_eq!(s.psk_identity(), Some(id.as_bytes()));
                let peer = s.peer_identity().expect("an NVMe identity");
                assert_eq!((peer.hostnqn.as_str(), peer.subnqn.as_str()), (host, sub));
            }
        }
    }
    // A host without a key, and a non-NVMe identity: refused with the reason.
    for (id, reason) in [
        (
            format!("NVMe0R01 nqn.other-host {sub}"),
            format!("no TLS key is configured for host nqn.other-host and subsystem {sub}"),
        ),
        (
            "Client_identity".to_owned(),
            "PSK identity does not start with NVMe0R, NVMe1R or NVMe1G: \"Client_i\"".to_owned(),
        ),
    ] {
        let psk = TlsPsk::new(PskHash::Sha256, &[1; 32]).expect("key");
        let mut c = TlsClient::new(&TlsClientConfig::new().expect("cc"), id.as_bytes(), psk)
            .expect("client");
        let mut s = TlsServer::new(&config).expect("server");
        let (_, err) = handshake(&mut c, &mut s).expect_err("refused");
        assert_eq!(
            err,
            TlsError::UnknownIdentity {
                identity: id,
                reason
            }
        );
    }
}

/// Sends `bufs` from `a` to `b` in random chunks and returns what `b` decrypted.
fn transfer(a: &mut TlsConn, b: &mut TlsConn, bufs: &[&[u8]], rng: &mut Rng) -> (Vec<u8>, usize) {
    let total: usize = bufs.iter().map(|x| x.len()).sum();
    assert_eq!(a.write_plain(bufs).expect("write"), total);
    let wire = pump(a, b, Some(rng)).expect("feed");
    let mut got = Vec::new();
    b.read_plain_into(&mut got).expect("read");
    (got, wire)
}

#[test]
fn bulk_data_both_ways_and_record_batching() {
    for (id, psk) in [
        (ID256, key(PskHash::Sha256, 0x11)),
        (ID384, key(PskHash::Sha384, 0x22)),
    ] {
        let (mut c, mut s) = pair(id, psk);
        handshake(&mut c, &mut s).expect("handshake");
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);

        // 1 MiB as one buffer: 64 full records, each 5 (header) + 1 (type) + 16 (tag) over.
        let big = rng.bytes(1 << 20);
        let (got, wire) = transfer(&mut c, &mut s, &[&big], &mut rng);
        assert!(got == big, "1 MiB host → target intact");
        assert_eq!(wire, big.len() + 64 * 22);
        let (got, wire) = transfer(&mut s, &mut c, &[&big], &mut rng);
        assert!(got == big, "1 MiB target → host intact");
        assert_eq!(wire, big.len() + 64 * 22);

        // 1000 PDU-sized pieces (72 B each) gather into ceil(72000 / 16384) = 5 records.
        let pdus: Vec<Vec<u8>> = (0..1000).map(|_| rng.bytes(72)).collect();
        let refs: Vec<&[u8]> = pdus.iter().map(|p| p.as_slice()).collect();
        let (got, wire) = transfer(&mut s, &mut c, &refs, &mut rng);
        assert_eq!(got, pdus.concat());
        assert_eq!(wire, 72_000 + 5 * 22);

        // Mixed: small header, 128 KiB payload, small header — payload is not split oddly.
        let hdr = rng.bytes(24);
        let data = rng.bytes(128 * 1024);
        let (got, wire) = transfer(&mut s, &mut c, &[&hdr, &data, &hdr], &mut rng);
        assert_eq!(got, [&hdr[..], &data, &hdr].concat());
        let records = (24 + 128 * 1024 + 24usize).div_ceil(16384);
        assert_eq!(wire, 24 + 128 * 1024 + 24 + records * 22);
    }
}

#[test]
fn read_plain_with_small_buffer_and_split_records() {
    let (mut c, mut s) = pair(ID256, key(PskHash::Sha256, 0x11));
    handshake(&mut c, &mut s).expect("handshake");
    c.write_plain(&[b"hello ", b"world"]).expect("write");
    let wire = c.take_cipher();
    // Byte by byte: nothing is readable until the record is complete.
    let mut buf = [0u8; 4];
    for (i, b) in wire.iter().enumerate() {
        s.feed(std::slice::from_ref(b)).expect("feed");
        if i + 1 < wire.len() {
            assert_eq!(s.read_plain(&mut buf).expect("read"), 0);
        }
    }
    let mut got = Vec::new();
    loop {
        let n = s.read_plain(&mut buf).expect("read");
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    assert_eq!(got, b"hello world");
}

#[test]
fn wrong_psk_fails_on_both_sides() {
    for (id, hash) in [(ID256, PskHash::Sha256), (ID384, PskHash::Sha384)] {
        let (mut c, mut s) = pair(id, key(hash, 0x99));
        let (side, err) = handshake(&mut c, &mut s).expect_err("wrong key");
        assert_eq!(side, "server");
        let msg = err.to_string();
        assert!(
            matches!(err, TlsError::WrongPsk { ref identity } if identity.as_bytes() == id),
            "{msg}"
        );
        assert!(
            msg.contains("wrong PSK") && msg.contains("nqn.2024-01.io.ebof:disk1"),
            "{msg}"
        );
        // The server queued an alert (OpenSSL sends illegal_parameter for a bad binder; RFC
        // 8446 suggests decrypt_error); the client learns from it with a hint naming the PSK.
        let err = pump(&mut s, &mut c, None).expect_err("client sees the alert");
        assert!(
            matches!(err, TlsError::PeerAlert { ref alert, .. } if alert == "illegal parameter"),
            "{err}"
        );
        assert!(err.to_string().contains("PSK"), "{err}");
        // Both sessions are dead now, with the first error's message.
        assert!(matches!(s.feed(b"\x16\x03\x03"), Err(TlsError::Failed(_))));
        assert!(matches!(c.write_plain(&[b"x"]), Err(TlsError::Failed(_))));
    }
}

#[test]
fn unknown_identity_and_hash_mismatch() {
    let (mut c, mut s) = pair(b"NVMe0R01 nqn.stranger nqn.sub", key(PskHash::Sha256, 0x11));
    let (side, err) = handshake(&mut c, &mut s).expect_err("unknown identity");
    assert_eq!(side, "server");
    assert_eq!(
        err,
        TlsError::UnknownIdentity {
            identity: "NVMe0R01 nqn.stranger nqn.sub".into(),
            reason: "no key configured for it".into(),
        }
    );
    let err = pump(&mut s, &mut c, None).expect_err("client sees the alert");
    assert!(
        matches!(err, TlsError::PeerAlert { ref alert, .. } if alert == "handshake failure"),
        "{err}"
    );

    // The client holds a SHA-384 key for an identity the server maps to a SHA-256 key: the
    // suites do not match and the handshake fails cleanly (no panic, typed error).
    let (mut c, mut s) = pair(ID256, key(PskHash::Sha384, 0x11));
    let (_, err) = handshake(&mut c, &mut s).expect_err("hash mismatch");
    assert!(err.is_peer_error(), "{err}");
}

#[test]
fn plaintext_icreq_to_a_tls_port() {
    let mut s = TlsServer::new(&server_config()).expect("server");
    // ICReq: type 0x00, flags 0, HLEN 128, PDO 0, PLEN 128, PFV 0, HPDA, digest flags, MAXR2T.
    let mut icreq = vec![0u8; 128];
    icreq[2] = 128;
    icreq[4] = 128;
    let err = s.feed(&icreq).expect_err("plaintext ICReq");
    assert_eq!(
        err,
        TlsError::PlaintextNvmeTcp {
            pdu_type: 0,
            from_client: true
        }
    );
    let msg = err.to_string();
    assert!(
        msg.contains("ICReq") && msg.contains("does not use TLS"),
        "{msg}"
    );
    // Even one byte is enough to tell.
    let mut s = TlsServer::new(&server_config()).expect("server");
    assert!(matches!(
        s.feed(&[0]),
        Err(TlsError::PlaintextNvmeTcp { .. })
    ));
}

#[test]
fn plaintext_pdu_from_a_target_without_tls() {
    let (mut c, _) = pair(ID256, key(PskHash::Sha256, 0x11));
    let _ = c.take_cipher();
    // A C2HTermReq (type 0x03) from a target that parsed our ClientHello as a bad PDU.
    let err = c.feed(&[0x03, 0x00, 0x18, 0x00]).expect_err("not TLS");
    assert_eq!(
        err,
        TlsError::PlaintextNvmeTcp {
            pdu_type: 3,
            from_client: false
        }
    );
}

#[test]
fn garbage_before_the_handshake() {
    let mut rng = Rng(42);
    for i in 0..200 {
        let mut s = TlsServer::new(&server_config()).expect("server");
        let len = 1 + rng.below(600);
        let mut junk = rng.bytes(len);
        if i % 4 == 0 {
            // Looks like a handshake record header, then junk.
            junk[0] = 0x16;
            if junk.len() > 1 {
                junk[1] = 0x03;
            }
        }
        let mut failed = None;
        let chunk_len = 1 + rng.below(64);
        for chunk in junk.chunks(chunk_len) {
            if let Err(e) = s.feed(chunk) {
                failed = Some(e);
                break;
            }
        }
        match failed {
            Some(e) => {
                assert!(e.is_peer_error(), "{e}");
                assert!(!s.handshake_done());
            }
            // A plausible header with a length not reached yet: still waiting, not done.
            None => assert!(!s.handshake_done() && junk[0] == 0x16),
        }
    }
    let mut s = TlsServer::new(&server_config()).expect("server");
    let err = s.feed(b"GET / HTTP/1.1\r\n").expect_err("HTTP");
    assert_eq!(
        err,
        TlsError::NotTls {
            first: b"GET /".to_vec()
        }
    );
    assert!(err.to_string().contains("not TLS"), "{err}");
}

#[test]
fn truncated_and_corrupted_handshakes() {
    let mut rng = Rng(7);
    let config = TlsClientConfig::new().expect("cc");
    for round in 0..300 {
        let mut c = TlsClient::new(&config, ID256, key(PskHash::Sha256, 0x11)).expect("client");
        let mut s = TlsServer::new(&server_config()).expect("server");
        let mut hello = c.take_cipher();
        match round % 3 {
            // Truncated: the server waits for the rest and does not finish.
            0 => {
                let cut = 1 + rng.below(hello.len() - 1);
                s.feed(&hello[..cut])
                    .expect("partial hello is not an error");
                assert!(!s.handshake_done());
                assert!(s.pending_cipher().is_empty());
                continue;
            }
            // One corrupted byte past the record header in the client's first flight.
            1 => {
                let at = 5 + rng.below(hello.len() - 5);
                hello[at] ^= 1 << rng.below(8);
            }
            // Corrupt the server's flight instead.
            _ => {}
        }
        let server_result = s.feed(&hello);
        if round % 3 == 1 {
            // Corrupting a byte may still give a valid hello (e.g. the random); either way
            // nothing panics and errors are typed.
            if let Err(e) = server_result {
                assert!(e.is_peer_error(), "{e}");
            }
            continue;
        }
        server_result.expect("intact hello");
        let mut flight = s.take_cipher();
        let at = 5 + rng.below(flight.len() - 5);
        flight[at] ^= 1 << rng.below(8);
        match c.feed(&flight) {
            Ok(_) => assert!(
                !c.handshake_done() || flight.is_empty(),
                "corruption undetected"
            ),
            Err(e) => assert!(e.is_peer_error(), "{e}"),
        }
    }
}

#[test]
fn corrupted_record_after_the_handshake() {
    let (mut c, mut s) = pair(ID256, key(PskHash::Sha256, 0x11));
    handshake(&mut c, &mut s).expect("handshake");
    c.write_plain(&[&[0xAB; 1000]]).expect("write");
    let mut wire = c.take_cipher();
    wire[100] ^= 0x40;
    s.feed(&wire).expect("buffered");
    let mut out = Vec::new();
    let err = s.read_plain_into(&mut out).expect_err("bad MAC");
    assert!(matches!(err, TlsError::Record(_)), "{err}");
    assert!(out.is_empty());
    // Its alert tells the client.
    let err = pump(&mut s, &mut c, None)
        .and_then(|_| c.read_plain_into(&mut out))
        .expect_err("client sees the alert");
    assert!(matches!(err, TlsError::PeerAlert { .. }), "{err}");
}

#[test]
fn write_before_handshake_and_close_notify() {
    let (mut c, mut s) = pair(ID256, key(PskHash::Sha256, 0x11));
    assert_eq!(s.write_plain(&[b"early"]), Err(TlsError::NotEstablished));
    handshake(&mut c, &mut s).expect("handshake");
    c.write_plain(&[b"last words"]).expect("write");
    c.close_notify().expect("close");
    assert_eq!(c.write_plain(&[b"more"]), Err(TlsError::Closed));
    pump(&mut c, &mut s, None).expect("feed");
    let mut out = Vec::new();
    s.read_plain_into(&mut out).expect("read");
    assert_eq!(out, b"last words");
    assert!(s.peer_closed());
    // Half-close: the server may still answer, then closes too.
    s.write_plain(&[b"bye"]).expect("write after peer close");
    s.close_notify().expect("close");
    pump(&mut s, &mut c, None).expect("feed");
    let mut out = Vec::new();
    c.read_plain_into(&mut out).expect("read");
    assert_eq!(out, b"bye");
    assert!(c.peer_closed());
}

/// Rewrites the ClientHello's psk_key_exchange_modes from psk_dhe_ke to psk_ke.
#[test]
fn psk_without_dhe_is_refused() {
    let (mut c, mut s) = pair(ID256, key(PskHash::Sha256, 0x11));
    let mut hello = c.take_cipher();
    let pat = [0x00, 0x2d, 0x00, 0x02, 0x01, 0x01];
    let at = hello
        .windows(pat.len())
        .position(|w| w == pat)
        .expect("psk_key_exchange_modes = [psk_dhe_ke]");
    hello[at + 5] = 0x00;
    assert_eq!(s.feed(&hello), Err(TlsError::NoDheKeyExchange));
}

#[test]
fn certificate_client_without_psk_is_refused() {
    use openssl::ssl::{SslConnector, SslMethod, SslVerifyMode, SslVersion};
    let mut b = SslConnector::builder(SslMethod::tls_client()).expect("builder");
    b.set_min_proto_version(Some(SslVersion::TLS1_3))
        .expect("v");
    b.set_verify(SslVerifyMode::NONE);
    let ssl = b
        .build()
        .configure()
        .expect("cfg")
        .into_ssl("target")
        .expect("ssl");
    // Drive a plain OpenSSL client by hand over a Vec.
    let hello = match ssl.connect(Sink(Vec::new())) {
        Err(openssl::ssl::HandshakeError::WouldBlock(mid)) => mid.get_ref().0.clone(),
        Err(e) => panic!("client setup: {e}"),
        Ok(_) => panic!("cannot finish without a server"),
    };
    let mut s = TlsServer::new(&server_config()).expect("server");
    assert_eq!(s.feed(&hello), Err(TlsError::NoPskOffered));
}

#[derive(Debug)]
struct Sink(Vec<u8>);
impl std::io::Read for Sink {
    fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
        Err(std::io::ErrorKind::WouldBlock.into())
    }
}
impl std::io::Write for Sink {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn sessions_move_between_threads_and_configs_are_shared() {
    fn send<T: Send>() {}
    fn send_sync<T: Send + Sync>() {}
    send::<TlsServer>();
    send::<TlsClient>();
    send_sync::<TlsServerConfig>();
    send_sync::<TlsClientConfig>();
    // One config, sessions on several threads at once.
    let config = server_config();
    let client_config = TlsClientConfig::new().expect("cc");
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (config, client_config) = (config.clone(), client_config.clone());
            std::thread::spawn(move || {
                let mut c = TlsClient::new(&client_config, ID384, key(PskHash::Sha384, 0x22))
                    .expect("client");
                let mut s = TlsServer::new(&config).expect("server");
                handshake(&mut c, &mut s).expect("handshake");
                s.psk_identity().map(<[u8]>::to_vec)
            })
        })
        .collect();
    for t in threads {
        assert_eq!(t.join().expect("thread").as_deref(), Some(ID384));
    }
}

/// Our record layer takes over for both GCM suites, and data after the client's Finished in
/// the same read (here: the whole client flight plus its first records) is not lost.
#[test]
fn own_record_layer_and_data_right_after_finished() {
    for (id, psk, suite) in [
        (ID256, key(PskHash::Sha256, 0x11), "TLS_AES_128_GCM_SHA256"),
        (ID384, key(PskHash::Sha384, 0x22), "TLS_AES_256_GCM_SHA384"),
    ] {
        let (mut c, mut s) = pair(id, psk);
        pump(&mut c, &mut s, None).expect("hello");
        pump(&mut s, &mut c, None).expect("server flight");
        assert!(c.handshake_done() && !s.handshake_done());
        assert!(c.own_record_layer());
        // The client's Finished and its first data leave in one buffer.
        c.write_plain(&[b"icreq right behind Finished"])
            .expect("write");
        let wire = c.take_cipher();
        s.feed(&wire).expect("finished + data");
        assert!(s.handshake_done() && s.own_record_layer());
        assert_eq!(s.cipher_suite(), Some(suite));
        let mut out = Vec::new();
        s.read_plain_into(&mut out).expect("read");
        assert_eq!(out, b"icreq right behind Finished");
        let stats = s.record_stats().expect("stats");
        assert_eq!((stats.send_seq, stats.recv_seq), (0, 1));
    }
}

/// Two writes (two records) fed in two pieces split at every byte, through `cipher_space`
/// too.
#[test]
fn records_split_at_every_byte() {
    let (mut c, mut s) = pair(ID256, key(PskHash::Sha256, 0x11));
    handshake(&mut c, &mut s).expect("handshake");
    let mut expected = Vec::new();
    for round in 0..2 {
        c.write_plain(&[b"first record"]).expect("write");
        c.write_plain(&[b""]).expect("nothing");
        c.write_plain(&[b"second", b" record"]).expect("write");
        let wire = c.take_cipher();
        for k in 0..=wire.len() {
            // Re-send the same two records under fresh sequence numbers each time.
            let wire = if k == 0 {
                wire.clone()
            } else {
                c.write_plain(&[b"first record"]).expect("write");
                c.write_plain(&[b"second", b" record"]).expect("write");
                c.take_cipher()
            };
            let mut out = Vec::new();
            for piece in [&wire[..k], &wire[k..]] {
                if round == 0 {
                    s.feed(piece).expect("feed");
                } else {
                    let space = s.cipher_space();
                    assert!(space.len() >= 64 * 1024);
                    space[..piece.len()].copy_from_slice(piece);
                    s.cipher_filled(piece.len()).expect("filled");
                }
                let mut small = [0u8; 5];
                loop {
                    let n = s.read_plain(&mut small).expect("read");
                    if n == 0 {
                        break;
                    }
                    out.extend_from_slice(&small[..n]);
                }
            }
            assert_eq!(out, b"first recordsecond record", "split at {k}");
            expected.push(k);
        }
    }
    assert!(!expected.is_empty());
}

#[test]
fn key_update_between_our_client_and_server() {
    let (mut c, mut s) = pair(ID384, key(PskHash::Sha384, 0x22));
    handshake(&mut c, &mut s).expect("handshake");
    c.write_plain(&[b"one"]).expect("write");
    c.key_update(true).expect("key update");
    c.write_plain(&[b"two"]).expect("write");
    pump(&mut c, &mut s, None).expect("to server");
    let mut out = Vec::new();
    s.read_plain_into(&mut out).expect("read");
    assert_eq!(out, b"onetwo");
    let st = s.record_stats().expect("stats");
    assert_eq!((st.key_updates_received, st.key_updates_sent), (1, 1));
    // The server's answer went out; its data follows under its new key.
    s.write_plain(&[b"three"]).expect("write");
    s.key_update(false).expect("server-initiated");
    s.write_plain(&[b"four"]).expect("write");
    pump(&mut s, &mut c, None).expect("to client");
    out.clear();
    c.read_plain_into(&mut out).expect("read");
    assert_eq!(out, b"threefour");
    let st = c.record_stats().expect("stats");
    assert_eq!((st.key_updates_received, st.key_updates_sent), (2, 1));
    assert_eq!(st.send_seq, 1, "one record under the client's new key");
}

#[test]
fn key_update_at_a_tiny_record_threshold() {
    let (mut c, mut s) = pair(ID256, key(PskHash::Sha256, 0x11));
    c.set_key_update_interval(3);
    c.set_key_update_policy(nvmf_tls::KeyUpdatePolicy::Always);
    handshake(&mut c, &mut s).expect("handshake");
    let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let mut rng = Rng(7);
    c.write_plain(&[&data]).expect("write");
    pump(&mut c, &mut s, Some(&mut rng)).expect("feed");
    let mut out = Vec::new();
    s.read_plain_into(&mut out).expect("read");
    assert_eq!(out, data);
    // 13 records: a KeyUpdate before records 4, 7, 10, 13.
    assert_eq!(c.record_stats().expect("stats").key_updates_sent, 4);
    assert_eq!(s.record_stats().expect("stats").key_updates_received, 4);
}

#[test]
fn close_notify_through_our_record_layer() {
    let (mut c, mut s) = pair(ID256, key(PskHash::Sha256, 0x11));
    handshake(&mut c, &mut s).expect("handshake");
    s.write_plain(&[b"bye"]).expect("write");
    s.close_notify().expect("close");
    assert_eq!(s.key_update(false), Err(TlsError::Closed));
    pump(&mut s, &mut c, None).expect("feed");
    let mut out = Vec::new();
    c.read_plain_into(&mut out).expect("read");
    assert_eq!(out, b"bye");
    assert!(c.peer_closed());
    // Half-close: the client may still send.
    c.write_plain(&[b"ack"])
        .expect("write after the peer's close");
    pump(&mut c, &mut s, None).expect("feed");
    out.clear();
    s.read_plain_into(&mut out).expect("read");
    assert_eq!(out, b"ack");
}

/// Bytes that are not a protected record after the handshake: the alert goes back and the
/// session stays failed.
#[test]
fn garbage_after_the_handshake_is_refused_with_an_alert() {
    let (mut c, mut s) = pair(ID256, key(PskHash::Sha256, 0x11));
    handshake(&mut c, &mut s).expect("handshake");
    s.feed(&[0x17, 0x03, 0x03, 0xff, 0xff]).expect("buffered");
    let mut out = Vec::new();
    let e = s.read_plain_into(&mut out).expect_err("overflow");
    assert!(e.to_string().contains("record_overflow"), "{e}");
    assert!(!s.pending_cipher().is_empty(), "the alert is queued");
    assert!(matches!(s.feed(b"x"), Err(TlsError::Failed(_))));
    pump(&mut s, &mut c, None).expect("alert to the client");
    let e = c.read_plain_into(&mut out).expect_err("client sees it");
    assert!(e.to_string().contains("record overflow"), "{e}");
}

/// Full 16 KiB records from `from` to `to`, read out; returns the plaintext moved.
fn bulk(from: &mut TlsConn, to: &mut TlsConn, bytes: usize) -> usize {
    let chunk = vec![0x42u8; 128 * 1024];
    let mut moved = 0;
    let mut out = Vec::new();
    while moved < bytes {
        from.write_plain(&[&chunk]).expect("write");
        pump(from, to, None).expect("pump");
        out.clear();
        moved += to.read_plain_into(&mut out).expect("read");
    }
    moved
}

/// T1: a server past a low threshold keeps its key towards a peer that never sent a
/// KeyUpdate (the Linux host: kTLS takes no type-22 record), and counts the deferral.
#[test]
fn server_starts_no_key_update_towards_a_peer_that_sent_none() {
    let (mut c, mut s) = pair(ID256, key(PskHash::Sha256, 0x11));
    handshake(&mut c, &mut s).expect("handshake");
    s.set_key_update_interval(16);
    // 4 MiB = 256 full records: 16 thresholds crossed.
    bulk(&mut s, &mut c, 4 << 20);
    let st = s.record_stats().expect("stats");
    assert_eq!(st.key_updates_sent, 0, "no KeyUpdate towards this peer");
    assert_eq!(c.record_stats().expect("stats").key_updates_received, 0);
    assert_eq!(st.key_updates_deferred, 15, "{st:?}");
    assert!(st.send_seq >= 256, "one key all along: {st:?}");
    // Once the peer sent one, ours go out (at once: we are past the threshold).
    c.key_update(false).expect("client key update");
    pump(&mut c, &mut s, None).expect("pump");
    s.read_plain_into(&mut Vec::new()).expect("read");
    bulk(&mut s, &mut c, 1 << 20);
    let st = s.record_stats().expect("stats");
    assert_eq!(st.key_updates_sent, 4, "{st:?}");
    assert_eq!(c.record_stats().expect("stats").key_updates_received, 4);
}

/// T1: with the Always policy the threshold starts KeyUpdates without the peer's lead.
#[test]
fn always_policy_updates_at_the_threshold() {
    let (mut c, mut s) = pair(ID256, key(PskHash::Sha256, 0x11));
    s.set_key_update_interval(16);
    s.set_key_update_policy(nvmf_tls::KeyUpdatePolicy::Always);
    handshake(&mut c, &mut s).expect("handshake");
    bulk(&mut s, &mut c, 4 << 20);
    let st = s.record_stats().expect("stats");
    assert_eq!(
        (st.key_updates_sent, st.key_updates_deferred),
        (15, 0),
        "{st:?}"
    );
    assert_eq!(c.record_stats().expect("stats").key_updates_received, 15);
}

/// T2: after the peer's close_notify, more input is discarded, not buffered.
#[test]
fn input_after_close_notify_is_discarded() {
    let (mut c, mut s) = pair(ID256, key(PskHash::Sha256, 0x11));
    handshake(&mut c, &mut s).expect("handshake");
    c.write_plain(&[b"last words"]).expect("write");
    c.close_notify().expect("close");
    c.write_plain(&[b"x"]).expect_err("closed");
    // Bytes behind the close_notify in the same read are dropped too.
    let mut wire = c.take_cipher();
    wire.extend_from_slice(&[0x17; 5000]);
    s.feed(&wire).expect("feed");
    let mut out = Vec::new();
    s.read_plain_into(&mut out).expect("read");
    assert_eq!(out, b"last words");
    assert!(s.peer_closed());
    let mut fed = 0usize;
    let mut buf = vec![0u8; 64 * 1024];
    while fed < 64 << 20 {
        let space = s.cipher_space();
        let n = space.len().min(256 * 1024);
        space[..n].fill(0x17);
        s.cipher_filled(n).expect("filled");
        assert_eq!(s.read_plain(&mut buf).expect("read"), 0);
        fed += n;
    }
    assert!(
        s.buffered_cipher() < 1 << 20,
        "{} bytes buffered",
        s.buffered_cipher()
    );
    assert_eq!(s.buffered_cipher(), 0);
    assert_eq!(s.feed(&[1, 2, 3]).expect("feed"), 3);
    assert_eq!(s.buffered_cipher(), 0);
}

/// T3: a flood of KeyUpdates asking for ours: one read_plain does a bounded amount of work
/// and queues a bounded answer; past 32 in a row without data the peer is refused.
#[test]
fn key_update_flood_is_bounded() {
    let (mut c, mut s) = pair(ID256, key(PskHash::Sha256, 0x11));
    handshake(&mut c, &mut s).expect("handshake");
    for _ in 0..100_000 {
        c.key_update(true).expect("key update");
    }
    pump(&mut c, &mut s, None).expect("pump");
    let mut buf = vec![0u8; 4096];
    let r = s.read_plain(&mut buf);
    assert!(
        s.pending_cipher().len() <= 64 * 27 + 64,
        "{} bytes of answers",
        s.pending_cipher().len()
    );
    let e = match r {
        Err(e) => e,
        Ok(n) => {
            assert_eq!(n, 0);
            s.read_plain(&mut buf).expect_err("refused")
        }
    };
    assert!(e.to_string().contains("KeyUpdates without"), "{e}");
    assert!(s.pending_cipher().len() <= 64 * 27 + 64);
}

/// T3: records without plaintext are opened at most MAX_EMPTY_RECORDS_PER_CALL per call;
/// the caller is told to come back (`read_paused`), and the data behind them arrives.
#[test]
fn empty_records_have_a_per_call_budget() {
    let (mut c, mut s) = pair(ID256, key(PskHash::Sha256, 0x11));
    handshake(&mut c, &mut s).expect("handshake");
    for _ in 0..10_000 {
        c.write_raw_inner_plaintext(&[23]).expect("empty record");
    }
    c.write_plain(&[b"payload"]).expect("write");
    pump(&mut c, &mut s, None).expect("pump");
    let mut buf = vec![0u8; 4096];
    assert_eq!(s.read_plain(&mut buf).expect("read"), 0);
    assert!(s.read_paused());
    assert_eq!(
        s.record_stats().expect("stats").recv_seq,
        nvmf_tls::MAX_EMPTY_RECORDS_PER_CALL as u64
    );
    let mut calls = 1;
    let n = loop {
        let n = s.read_plain(&mut buf).expect("read");
        calls += 1;
        if n > 0 {
            break n;
        }
        assert!(s.read_paused(), "paused until the data");
    };
    assert_eq!(&buf[..n], b"payload");
    assert!(!s.read_paused());
    assert_eq!(calls, 10_000 / nvmf_tls::MAX_EMPTY_RECORDS_PER_CALL + 1);
}

/// T3: KeyUpdate requests interleaved with data: reading pauses while the answers are not
/// sent, so they cannot pile up in the send buffer.
#[test]
fn key_update_answers_pause_reading_until_sent() {
    let (mut c, mut s) = pair(ID256, key(PskHash::Sha256, 0x11));
    handshake(&mut c, &mut s).expect("handshake");
    for _ in 0..1000 {
        c.key_update(true).expect("key update");
        c.write_plain(&[b"d"]).expect("write");
    }
    pump(&mut c, &mut s, None).expect("pump");
    let mut buf = vec![0u8; 4096];
    let mut got = 0;
    let mut flushes = 0;
    loop {
        let n = s.read_plain(&mut buf).expect("read");
        got += n;
        assert!(s.pending_cipher().len() <= nvmf_tls::MAX_ANSWERS_QUEUED as usize * 27);
        if n == 0 {
            if !s.read_paused() {
                break;
            }
            // The reactor sends, then comes back.
            s.take_cipher();
            flushes += 1;
        }
    }
    assert_eq!(got, 1000);
    assert_eq!(flushes, 1000 / nvmf_tls::MAX_ANSWERS_QUEUED as usize);
}

/// T4: a sealing failure in the middle of a write leaves no plaintext in the send buffer:
/// only whole records, then the alert, all of which the peer can open.
#[test]
fn sealing_failure_leaves_no_plaintext_behind() {
    let (mut c, mut s) = pair(ID256, key(PskHash::Sha256, 0x11));
    handshake(&mut c, &mut s).expect("handshake");
    let marker: Vec<u8> = (0..40_000u32).map(|i| (i * 7 % 253) as u8 + 1).collect();
    c.fail_seal_after(1);
    c.write_plain(&[&marker])
        .expect_err("sealing fails at the second record");
    let wire = c.pending_cipher().to_vec();
    for at in [0, 16_384, 20_000, 32_768, 39_000] {
        let needle = &marker[at..at + 64];
        assert!(
            !wire.windows(64).any(|w| w == needle),
            "plaintext from byte {at} in the send buffer"
        );
    }
    s.feed(&wire).expect("feed");
    let mut out = Vec::new();
    let e = s.read_plain_into(&mut out).expect_err("the alert");
    assert!(e.to_string().contains("internal error"), "{e}");
    assert_eq!(out, &marker[..16384], "the first record, sealed whole");
}
