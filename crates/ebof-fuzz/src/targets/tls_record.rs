//! Arbitrary records into an established TLS session's record decoder (`nvmf-tls`'s own
//! record layer, `record.rs`, ADR 0024): the ciphertext a peer sends after the handshake.
//!
//! Per input, a client and a server finish a real PSK handshake (TLS_AES_128_GCM_SHA256, or
//! TLS_AES_256_GCM_SHA384 by `mode` bit 0); then the input is a list of operations by the
//! client, each `[op, len_lo, len_hi, bytes(len)]` (the length is cut to what is left), and
//! what they produce reaches the server in reads of `chunk` bytes (`mode` bits 1-7, +1):
//! - op % 6 == 0: `bytes` as raw ciphertext (headers, lengths, garbage);
//! - 1: `bytes` sealed verbatim as a TLSInnerPlaintext under the right key (any content type,
//!   padding, handshake messages such as KeyUpdate and NewSessionTicket, alerts);
//! - 2: `bytes` as application data (`write_plain`), honest;
//! - 3: a KeyUpdate (update requested if the first byte is odd);
//! - 4: an honest record (of at most 16 KiB of `bytes`) with one bit flipped (position from
//!   `bytes`);
//! - 5: the client's close_notify.
//!
//! The server is read the way the reactor reads it: `read_plain_into` again while
//! `read_paused` (its budget of records without plaintext, or KeyUpdate answers waiting),
//! sending what it queued in between.
//!
//! Checked, beyond "never panics": while only honest operations happened, the server reads
//! exactly the application data sent, in order, with no error (more than 32 KeyUpdates in a row
//! without data count as dishonest: the server refuses them); once it errs, it stays failed;
//! its alert (if any) makes the client fail with a `PeerAlert`; what the server returns is
//! always a prefix of the application data sent (honestly, or as well-formed inner plaintext
//! of type 23).

use std::sync::{Arc, OnceLock};

use crate::Features;
use nvmf_tls::psk::{PskHash, TlsPsk};
use nvmf_tls::{TlsClient, TlsClientConfig, TlsError, TlsServer, TlsServerConfig};

const F_OP: u8 = 1;
const F_ERR: u8 = 2;
const F_END: u8 = 3;

const IDENTITY: &[u8] = b"NVMe0R01 nqn.2014-08.org.nvmexpress:uuid:fuzz nqn.2026-11.io.ebof:fuzz";

fn key(hash: PskHash) -> TlsPsk {
    TlsPsk::new(hash, &vec![0x5a; hash.len()]).expect("fuzz key")
}

fn configs() -> &'static (Arc<TlsClientConfig>, Arc<TlsServerConfig>) {
    static C: OnceLock<(Arc<TlsClientConfig>, Arc<TlsServerConfig>)> = OnceLock::new();
    C.get_or_init(|| {
        let client = TlsClientConfig::new().expect("client config");
        let server = TlsServerConfig::new(|id: &[u8]| {
            (id == IDENTITY).then(|| {
                // The identity does not name the hash here: the suite decides the PSK.
                key(PskHash::Sha256)
            })
        })
        .expect("server config");
        (client, server)
    })
}

fn established(sha384: bool) -> (TlsClient, TlsServer) {
    let (cc, _) = configs();
    let hash = if sha384 {
        PskHash::Sha384
    } else {
        PskHash::Sha256
    };
    let server_cfg = if sha384 {
        static S384: OnceLock<Arc<TlsServerConfig>> = OnceLock::new();
        S384.get_or_init(|| {
            TlsServerConfig::new(|id: &[u8]| (id == IDENTITY).then(|| key(PskHash::Sha384)))
                .expect("server config")
        })
        .clone()
    } else {
        configs().1.clone()
    };
    let mut c = TlsClient::new(cc, IDENTITY, key(hash)).expect("client");
    let mut s = TlsServer::new(&server_cfg).expect("server");
    for _ in 0..8 {
        if c.handshake_done() && s.handshake_done() {
            break;
        }
        let x = c.take_cipher();
        s.feed(&x).expect("honest handshake");
        let y = s.take_cipher();
        c.feed(&y).expect("honest handshake");
    }
    assert!(c.own_record_layer() && s.own_record_layer());
    (c, s)
}

/// One input (see the module doc).
pub fn run(data: &[u8], feat: &mut Features) {
    let Some((&mode, mut ops)) = data.split_first() else {
        return;
    };
    let (mut c, mut s) = established(mode & 1 != 0);
    let chunk = usize::from(mode >> 1) + 1;
    let mut honest = true;
    let mut sent = Vec::new();
    let mut got = Vec::new();
    let mut failed: Option<TlsError> = None;
    // KeyUpdates since the last application data (the server takes 32 in a row).
    let mut updates_in_row = 0u32;
    while let [op, lo, hi, rest @ ..] = ops {
        let len = usize::from(u16::from_le_bytes([*lo, *hi])).min(rest.len());
        let op = *op;
        let (bytes, tail) = rest.split_at(len);
        ops = tail;
        let op = op % 6;
        feat.add(F_OP, u64::from(op));
        let mut wire = Vec::new();
        match op {
            0 => {
                honest = false;
                wire.extend_from_slice(bytes);
            }
            1 => {
                honest = false;
                if c.write_raw_inner_plaintext(bytes).is_err() {
                    continue;
                }
                // Application data in valid form is delivered like honest data.
                if let Some(at) = bytes.iter().rposition(|&b| b != 0)
                    && bytes[at] == 23
                    && at <= 16384
                {
                    sent.extend_from_slice(&bytes[..at]);
                }
                wire = c.take_cipher();
            }
            2 => {
                if c.write_plain(&[bytes]).is_err() {
                    continue;
                }
                if !bytes.is_empty() {
                    updates_in_row = 0;
                }
                sent.extend_from_slice(bytes);
                wire = c.take_cipher();
            }
            3 => {
                if c.key_update(bytes.first().is_some_and(|b| b & 1 == 1))
                    .is_err()
                {
                    continue;
                }
                updates_in_row += 1;
                if updates_in_row > 32 {
                    honest = false;
                }
                wire = c.take_cipher();
            }
            4 => {
                // One record only: a record before the tampered one would be delivered.
                if c.write_plain(&[&bytes[..bytes.len().min(16384)]]).is_err() {
                    continue;
                }
                wire = c.take_cipher();
                if !wire.is_empty() {
                    honest = false;
                    let at = bytes.iter().map(|&b| usize::from(b)).sum::<usize>() % wire.len();
                    wire[at] ^= 1 << (bytes.len() % 8);
                }
            }
            _ => {
                if c.close_notify().is_err() {
                    continue;
                }
                wire = c.take_cipher();
            }
        }
        let mut back = Vec::new();
        for piece in wire.chunks(chunk) {
            let r = s
                .feed(piece)
                .and_then(|_| read_all(&mut s, &mut got, &mut back));
            if let Err(e) = r {
                if let Some(first) = &failed {
                    assert!(
                        matches!(e, TlsError::Failed(_)),
                        "a failed session must stay failed: {first} then {e}"
                    );
                } else {
                    feat.add_variant(F_ERR, &e);
                    feat.add_str(F_ERR, &e.to_string().chars().take(40).collect::<String>());
                    failed = Some(e);
                }
            }
        }
        // The server's answers (KeyUpdate responses, alerts) go back to the client.
        back.extend(s.take_cipher());
        if !back.is_empty() && c.feed(&back).is_ok() {
            let mut sink = Vec::new();
            let r = c.read_plain_into(&mut sink);
            if failed.is_some() && failed_with_alert(failed.as_ref()) {
                assert!(
                    matches!(
                        r,
                        Err(TlsError::PeerAlert { .. }) | Err(TlsError::Failed(_))
                    ),
                    "the server's alert must fail the client: {r:?}"
                );
            }
        }
        assert!(
            got.len() <= sent.len() && got == sent[..got.len()],
            "the server returned plaintext that was not sent honestly"
        );
        if honest {
            assert!(failed.is_none(), "honest records failed: {failed:?}");
        }
    }
    if honest && !s.peer_closed() {
        assert_eq!(got, sent, "honest data must arrive whole");
    }
    feat.add(
        F_END,
        u64::from(failed.is_some()) | u64::from(s.peer_closed()) << 1,
    );
}

/// What the reactor does: read until the session has nothing more, sending its output (into
/// `back`) whenever it pauses. Bounded: every round opens at least one buffered record.
fn read_all(s: &mut TlsServer, got: &mut Vec<u8>, back: &mut Vec<u8>) -> Result<usize, TlsError> {
    let mut n = s.read_plain_into(got)?;
    while s.read_paused() {
        back.extend(s.take_cipher());
        n += s.read_plain_into(got)?;
    }
    Ok(n)
}

/// Errors after which the server queued an alert for the client.
fn failed_with_alert(e: Option<&TlsError>) -> bool {
    matches!(e, Some(TlsError::Record(m)) if !m.starts_with("AEAD") && !m.contains("internal"))
}
