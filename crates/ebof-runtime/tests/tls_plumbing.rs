//! The reactor's TLS plumbing over loopback, with a toy session instead of real TLS (the real
//! one, OpenSSL with PSKs, is tested in `nvmf-tls` and end to end by `ebof`): how the first
//! byte is judged on required / optional listeners, ciphertext in → plaintext to the decoder,
//! a round's whole output (zero-copy RAM reads included) encrypted in one batch, the PSK's NQNs
//! binding Connect, and refusals counted.
//!
//! The toy: the host opens with `16h "HELLO"`, the server answers `16h "OK"`, and from then on
//! every byte both ways is XORed with [`KEY`]. [`CLOSE`] from the host stands for its
//! close_notify (the toy then discards all input, as the real session does), [`BYE`] from the
//! server for ours.

mod common;

use common::client::{Client, HOSTNQN, NQN, rw};
use ebof_backend::BackendSpec;
use ebof_runtime::tls::{TlsAcceptor, TlsError, TlsSession};
use ebof_runtime::{Server, ServerConfig, ServerHandle};
use nvme_spec::opcode::io;
use nvmf_target::{ListenerInfo, ListenerTls, Target, TargetLimits};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const KEY: u8 = 0x5A;
const HELLO: &[u8] = b"\x16HELLO";
const OK: &[u8] = b"\x16OK";
const CLOSE: &[u8] = b"\x15CLOSE\x15";
const BYE: &[u8] = b"\x15BYE";

#[derive(Default)]
struct Stats {
    /// `write_plain` calls and the PDUs' bytes they carried.
    batches: AtomicUsize,
    bytes: AtomicUsize,
    /// Bytes received after the host's close_notify (discarded).
    discarded: AtomicUsize,
    /// close_notify calls.
    close_notifies: AtomicUsize,
    /// `read_plain` calls that paused.
    pauses: AtomicUsize,
}

struct Toy {
    hello: Vec<u8>,
    done: bool,
    plain_in: Vec<u8>,
    out: Vec<u8>,
    peer: (String, String),
    stats: Arc<Stats>,
    /// How much of [`CLOSE`] the input has matched so far; `closed` once whole.
    close_seen: usize,
    closed: bool,
    /// Pause every other `read_plain` that would return data (as the real session does
    /// when its budget is spent).
    pause: bool,
    flip: bool,
    paused: bool,
}

impl TlsSession for Toy {
    fn feed(&mut self, mut cipher: &[u8]) -> Result<(), TlsError> {
        if !self.done {
            let need = HELLO.len() - self.hello.len();
            let take = need.min(cipher.len());
            self.hello.extend_from_slice(&cipher[..take]);
            cipher = &cipher[take..];
            if !HELLO.starts_with(&self.hello) {
                self.out.extend_from_slice(b"\x15ALERT");
                return Err(TlsError("toy handshake: bad hello".into()));
            }
            if self.hello.len() == HELLO.len() {
                self.done = true;
                self.out.extend_from_slice(OK);
            }
        }
        for &b in cipher {
            if self.closed {
                self.stats.discarded.fetch_add(1, Ordering::Relaxed);
            } else if b == CLOSE[self.close_seen] {
                self.close_seen += 1;
                self.closed = self.close_seen == CLOSE.len();
            } else {
                let seen = std::mem::take(&mut self.close_seen);
                self.plain_in.extend(CLOSE[..seen].iter().map(|x| x ^ KEY));
                self.plain_in.push(b ^ KEY);
            }
        }
        Ok(())
    }

    fn read_plain(&mut self, dst: &mut [u8]) -> Result<usize, TlsError> {
        self.paused = false;
        if self.pause && !self.plain_in.is_empty() {
            self.flip = !self.flip;
            if self.flip {
                self.paused = true;
                self.stats.pauses.fetch_add(1, Ordering::Relaxed);
                return Ok(0);
            }
        }
        let n = dst.len().min(self.plain_in.len());
        dst[..n].copy_from_slice(&self.plain_in[..n]);
        self.plain_in.drain(..n);
        Ok(n)
    }

    fn write_plain(&mut self, bufs: &[&[u8]]) -> Result<(), TlsError> {
        self.stats.batches.fetch_add(1, Ordering::Relaxed);
        for b in bufs {
            self.stats.bytes.fetch_add(b.len(), Ordering::Relaxed);
            self.out.extend(b.iter().map(|x| x ^ KEY));
        }
        Ok(())
    }

    fn pending_cipher(&self) -> &[u8] {
        &self.out
    }

    fn consume_cipher(&mut self, n: usize) {
        self.out.drain(..n);
    }

    fn handshake_done(&self) -> bool {
        self.done
    }

    fn peer(&self) -> Option<(String, String)> {
        self.done.then(|| self.peer.clone())
    }

    fn peer_closed(&self) -> bool {
        self.closed && self.plain_in.is_empty()
    }

    fn read_paused(&self) -> bool {
        self.paused
    }

    fn close_notify(&mut self) {
        // Like the real session: nothing after a failed handshake (its alert says it).
        if self.done {
            self.stats.close_notifies.fetch_add(1, Ordering::Relaxed);
            self.out.extend_from_slice(BYE);
        }
    }
}

struct ToyAcceptor {
    peer: Mutex<(String, String)>,
    stats: Arc<Stats>,
    /// Sessions pause every other read ([`Toy::pause`]).
    pause: std::sync::atomic::AtomicBool,
}

impl TlsAcceptor for ToyAcceptor {
    fn accept(&self) -> Result<Box<dyn TlsSession>, TlsError> {
        Ok(Box::new(Toy {
            hello: Vec::new(),
            done: false,
            plain_in: Vec::new(),
            out: Vec::new(),
            peer: self.peer.lock().unwrap().clone(),
            stats: self.stats.clone(),
            close_seen: 0,
            closed: false,
            pause: self.pause.load(Ordering::Relaxed),
            flip: false,
            paused: false,
        }))
    }
}

struct Running {
    handle: Option<ServerHandle>,
    addr: SocketAddr,
    target: Arc<Target>,
    acceptor: Arc<ToyAcceptor>,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            h.stop();
        }
    }
}

fn start(mode: ListenerTls) -> Running {
    let backend = ebof_backend::open(&BackendSpec::Ram { size: 8 << 20 }).unwrap();
    let sub = common::subsystem(NQN, backend, None);
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let target = Arc::new(Target::new(
        vec![sub],
        vec![],
        TargetLimits::default(),
        Instant::now(),
    ));
    let acceptor = Arc::new(ToyAcceptor {
        peer: Mutex::new((HOSTNQN.into(), NQN.into())),
        stats: Arc::default(),
        pause: Default::default(),
    });
    let cfg = ServerConfig {
        tls: Some(acceptor.clone() as Arc<dyn TlsAcceptor>),
        ..ServerConfig::new(vec![any], vec![0])
    };
    let handle = Server::start(target.clone(), cfg).unwrap();
    let addr = handle.bound[0];
    // The listener's TLS mode is looked up by address at accept.
    target.set_listeners(vec![ListenerInfo {
        addr,
        portid: 1,
        tls: mode,
        transport: Default::default(),
    }]);
    Running {
        handle: Some(handle),
        addr,
        target,
        acceptor,
    }
}

/// A toy-TLS connection, past the handshake, then ICReq.
fn toy_client(addr: SocketAddr) -> Client {
    let mut s = Client::raw(addr);
    s.write_all(HELLO).unwrap();
    let mut ok = [0u8; 3];
    s.read_exact(&mut ok).unwrap();
    assert_eq!(ok, OK);
    Client::connect_on(s, Some(KEY), false)
}

/// The connection is closed by the target, with nothing (or only `expect`) sent first.
fn refused(mut s: TcpStream, expect: &[u8]) {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    assert_eq!(got, expect);
}

#[test]
fn io_through_a_required_tls_listener_in_batches() {
    let r = start(ListenerTls::Required);
    let mut a = toy_client(r.addr);
    let c = a.fabrics_connect(0, 0xFFFF);
    assert!(c.status.is_success(), "{c:?}");
    a.enable();
    let mut q = toy_client(r.addr);
    assert!(q.fabrics_connect(1, c.dw0 as u16).status.is_success());
    // 64 KiB written (R2T + H2CData through the toy cipher) and read back: the read goes out
    // from the RAM namespace's memory (zero-copy segments), encrypted.
    let data: Vec<u8> = (0..64 * 1024).map(|i| (i * 7 + 3) as u8).collect();
    let (c, _) = q.cmd(rw(io::WRITE, 0, 128), &data, false);
    assert!(c.status.is_success(), "{c:?}");
    let batches = r.acceptor.stats.batches.load(Ordering::Relaxed);
    let (c, back) = q.cmd(rw(io::READ, 0, 128), &[], false);
    assert!(c.status.is_success(), "{c:?}");
    assert_eq!(back, data);
    // One read: its C2HData PDUs and the response, each round's output in one batch.
    let read_batches = r.acceptor.stats.batches.load(Ordering::Relaxed) - batches;
    assert!(
        (1..=2).contains(&read_batches),
        "a 64 KiB read took {read_batches} encryption calls"
    );
}

#[test]
fn plaintext_on_a_required_listener_is_refused_and_counted() {
    let r = start(ListenerTls::Required);
    let mut s = Client::raw(r.addr);
    s.write_all(&common::client::icreq()).unwrap();
    refused(s, b"");
    // A bad handshake: the session's alert goes out before the close.
    let mut s = Client::raw(r.addr);
    s.write_all(b"\x16HELP!").unwrap();
    refused(s, b"\x15ALERT");
    let deadline = Instant::now() + Duration::from_secs(5);
    while r.target.events.tls_failures.load(Ordering::Relaxed) < 2 {
        assert!(Instant::now() < deadline, "TLS refusals not counted");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn an_optional_listener_takes_both() {
    let r = start(ListenerTls::Optional);
    let mut plain = Client::connect(r.addr, false);
    assert!(plain.fabrics_connect(0, 0xFFFF).status.is_success());
    let mut toy = toy_client(r.addr);
    assert!(toy.fabrics_connect(0, 0xFFFF).status.is_success());
}

#[test]
fn the_psk_names_who_may_connect() {
    let r = start(ListenerTls::Required);
    *r.acceptor.peer.lock().unwrap() = (
        "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000bb".into(),
        NQN.into(),
    );
    let mut a = toy_client(r.addr);
    let c = a.fabrics_connect(0, 0xFFFF);
    assert_eq!(c.status, nvme_spec::Status::CONNECT_INVALID_HOST, "{c:?}");
}

#[test]
fn a_plain_listener_is_untouched() {
    let r = start(ListenerTls::Off);
    let mut plain = Client::connect(r.addr, false);
    assert!(plain.fabrics_connect(0, 0xFFFF).status.is_success());
    assert_eq!(r.acceptor.stats.batches.load(Ordering::Relaxed), 0);
}

/// T2: after the host's close_notify the target stops taking input and closes the connection
/// (our close_notify first), although the host keeps writing.
#[test]
fn close_notify_ends_the_connection() {
    let r = start(ListenerTls::Required);
    let mut s = Client::raw(r.addr);
    s.write_all(HELLO).unwrap();
    let mut ok = [0u8; 3];
    s.read_exact(&mut ok).unwrap();
    assert_eq!(ok, OK);
    s.write_all(CLOSE).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(10))).unwrap();
    s.set_write_timeout(Some(Duration::from_millis(10)))
        .unwrap();
    let junk = vec![0x17u8; 64 * 1024];
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut eof = false;
    while Instant::now() < deadline {
        // Keep writing (a failed write means the target closed: fine).
        let _ = s.write(&junk);
        let mut buf = [0u8; 64];
        match s.read(&mut buf) {
            Ok(0) => {
                eof = true;
                break;
            }
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => {
                eof = true;
                break;
            }
        }
    }
    assert!(
        eof,
        "the target kept the connection open after close_notify"
    );
    assert_eq!(got, BYE, "our close_notify before the close");
    assert_eq!(r.acceptor.stats.close_notifies.load(Ordering::Relaxed), 1);
}

/// T3: a session that pauses its reads (budget spent) is come back to without new input from
/// the socket: I/O still completes.
#[test]
fn a_paused_session_is_resumed_by_the_reactor() {
    let r = start(ListenerTls::Required);
    r.acceptor.pause.store(true, Ordering::Relaxed);
    let mut a = toy_client(r.addr);
    let c = a.fabrics_connect(0, 0xFFFF);
    assert!(c.status.is_success(), "{c:?}");
    a.enable();
    let mut q = toy_client(r.addr);
    assert!(q.fabrics_connect(1, c.dw0 as u16).status.is_success());
    let data: Vec<u8> = (0..64 * 1024).map(|i| (i * 5 + 1) as u8).collect();
    for _ in 0..10 {
        let (c, _) = q.cmd(rw(io::WRITE, 0, 128), &data, false);
        assert!(c.status.is_success(), "{c:?}");
        let (c, back) = q.cmd(rw(io::READ, 0, 128), &[], false);
        assert!(c.status.is_success(), "{c:?}");
        assert_eq!(back, data);
    }
    assert!(r.acceptor.stats.pauses.load(Ordering::Relaxed) > 10);
}
