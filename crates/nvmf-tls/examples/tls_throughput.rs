//! Cost of TLS on one core, for the integrator: `cargo run --release -p nvmf-tls --example
//! tls_throughput`. In memory (no sockets): full PSK handshakes per second, then 128 KiB
//! batches encrypted by one side and decrypted by the other, for both suites, the way the
//! reactor does it: `write_plain` of the batch, the ciphertext copied into the peer's
//! `cipher_space` (standing in for the socket read), `read_plain` into a receive buffer.
//! Prints plaintext GB/s (1e9 bytes per second) for encrypt only, decrypt only, and both on
//! the same core. Compare with `openssl speed -evp aes-128-gcm -bytes 16384` (ADR 0024).

use std::hint::black_box;
use std::time::{Duration, Instant};

use nvmf_tls::psk::{PskHash, TlsPsk};
use nvmf_tls::{TlsClient, TlsClientConfig, TlsServer, TlsServerConfig};

const BATCH: usize = 128 * 1024;
const RUN: Duration = Duration::from_secs(2);

fn pair(hash: PskHash) -> (TlsClient, TlsServer) {
    let key = TlsPsk::new(hash, &vec![0x5a; hash.len()]).expect("key");
    let server_key = key.clone();
    let config = TlsServerConfig::new(move |_: &[u8]| Some(server_key.clone())).expect("config");
    let mut c =
        TlsClient::new(&TlsClientConfig::new().expect("cc"), b"NVMe0R01 h s", key).expect("client");
    let mut s = TlsServer::new(&config).expect("server");
    while !(c.handshake_done() && s.handshake_done()) {
        let x = c.take_cipher();
        s.feed(&x).expect("server feed");
        let y = s.take_cipher();
        c.feed(&y).expect("client feed");
    }
    (c, s)
}

fn handshakes_per_second(hash: PskHash) -> f64 {
    let start = Instant::now();
    let mut n = 0u32;
    while start.elapsed() < RUN / 2 {
        black_box(pair(hash));
        n += 1;
    }
    f64::from(n) / start.elapsed().as_secs_f64()
}

fn main() {
    println!(
        "nvmf-tls on one core, {} KiB batches, OpenSSL {}",
        BATCH / 1024,
        openssl::version::version()
    );
    for hash in [PskHash::Sha256, PskHash::Sha384] {
        let hs = handshakes_per_second(hash);
        let (mut c, mut s) = pair(hash);
        let suite = s.cipher_suite().unwrap_or("?");
        let data = vec![0xA5u8; BATCH];
        let mut recv = vec![0u8; 2 * BATCH];

        // Encrypt + decrypt on this core (what one reactor pays per byte if it did both ends).
        let (mut enc, mut dec, mut bytes) = (Duration::ZERO, Duration::ZERO, 0u64);
        let start = Instant::now();
        while start.elapsed() < RUN {
            let t0 = Instant::now();
            s.write_plain(&[&data]).expect("write");
            let t1 = Instant::now();
            let mut rest = s.pending_cipher();
            while !rest.is_empty() {
                let space = c.cipher_space();
                let n = space.len().min(rest.len());
                space[..n].copy_from_slice(&rest[..n]);
                c.cipher_filled(n).expect("filled");
                rest = &rest[n..];
            }
            let n = s.pending_cipher().len();
            s.consume_cipher(n);
            let mut got = 0;
            loop {
                let k = c.read_plain(&mut recv[got..]).expect("read");
                if k == 0 {
                    break;
                }
                got += k;
            }
            let t2 = Instant::now();
            assert_eq!(got, BATCH);
            enc += t1 - t0;
            dec += t2 - t1;
            bytes += BATCH as u64;
        }
        let gbps = |d: Duration| bytes as f64 / d.as_secs_f64() / 1e9;
        println!(
            "{suite}: handshake {:.0}/s ({:.0} µs each, both ends); encrypt {:.2} GB/s, decrypt {:.2} GB/s, encrypt+decrypt {:.2} GB/s",
            hs,
            1e6 / hs,
            gbps(enc),
            gbps(dec),
            gbps(enc + dec)
        );
    }
}
