//! The reactor with real TLS sessions (`nvmf-tls`, as `ebof serve` wires them) under hostile
//! record streams (security review 2026-11, T2/T3): one authenticated client floods records
//! without plaintext while a second connection on the same reactor core runs QD1 reads, whose
//! latency must stay bounded; a client that sends close_notify and keeps writing is cut off.

mod common;

use common::client::{Client, HOSTNQN, NQN, rw};
use ebof_backend::BackendSpec;
use ebof_runtime::tls::{TlsAcceptor, TlsError, TlsSession};
use ebof_runtime::{Server, ServerConfig, ServerHandle};
use nvme_spec::opcode::io;
use nvmf_target::{ListenerInfo, ListenerTls, Target, TargetLimits};
use nvmf_tls::psk::{PskHash, TlsPsk};
use nvmf_tls::{TlsClient, TlsClientConfig, TlsServer, TlsServerConfig};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

const IDENTITY: &[u8] = b"NVMe0R01 nqn.2014-08.org.nvmexpress:uuid:flood nqn.2026-11.io.ebof:flood";

fn psk() -> TlsPsk {
    TlsPsk::new(PskHash::Sha256, &[0x33; 32]).unwrap()
}

/// `nvmf_tls::TlsServer` behind the reactor's trait, as `ebof-mgmt` does it.
struct Session(TlsServer);

fn err(e: nvmf_tls::TlsError) -> TlsError {
    TlsError(e.to_string())
}

impl TlsSession for Session {
    fn feed(&mut self, cipher: &[u8]) -> Result<(), TlsError> {
        self.0.feed(cipher).map(|_| ()).map_err(err)
    }
    fn cipher_space(&mut self) -> Option<&mut [u8]> {
        Some(self.0.cipher_space())
    }
    fn cipher_filled(&mut self, n: usize) -> Result<(), TlsError> {
        self.0.cipher_filled(n).map_err(err)
    }
    fn read_plain(&mut self, dst: &mut [u8]) -> Result<usize, TlsError> {
        self.0.read_plain(dst).map_err(err)
    }
    fn write_plain(&mut self, bufs: &[&[u8]]) -> Result<(), TlsError> {
        self.0.write_plain(bufs).map(|_| ()).map_err(err)
    }
    fn pending_cipher(&self) -> &[u8] {
        self.0.pending_cipher()
    }
    fn consume_cipher(&mut self, n: usize) {
        self.0.consume_cipher(n)
    }
    fn handshake_done(&self) -> bool {
        self.0.handshake_done()
    }
    fn peer(&self) -> Option<(String, String)> {
        // The flooding client never sends a Connect: any names do.
        self.0
            .handshake_done()
            .then(|| (HOSTNQN.to_string(), NQN.to_string()))
    }
    fn peer_closed(&self) -> bool {
        self.0.peer_closed()
    }
    fn read_paused(&self) -> bool {
        self.0.read_paused()
    }
    fn close_notify(&mut self) {
        let _ = self.0.close_notify();
    }
}

struct Acceptor(Arc<TlsServerConfig>);

impl TlsAcceptor for Acceptor {
    fn accept(&self) -> Result<Box<dyn TlsSession>, TlsError> {
        Ok(Box::new(Session(TlsServer::new(&self.0).map_err(err)?)))
    }
}

struct Running {
    handle: Option<ServerHandle>,
    addr: SocketAddr,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            h.stop();
        }
    }
}

/// One reactor core, an optional-TLS listener (plain and TLS clients side by side).
fn start() -> Running {
    let backend = ebof_backend::open(&BackendSpec::Ram { size: 8 << 20 }).unwrap();
    let sub = common::subsystem(NQN, backend, None);
    let target = Arc::new(Target::new(
        vec![sub],
        vec![],
        TargetLimits::default(),
        Instant::now(),
    ));
    let config = TlsServerConfig::new(|id: &[u8]| (id == IDENTITY).then(psk)).unwrap();
    let cfg = ServerConfig {
        tls: Some(Arc::new(Acceptor(config)) as Arc<dyn TlsAcceptor>),
        ..ServerConfig::new(vec!["127.0.0.1:0".parse().unwrap()], vec![0])
    };
    let handle = Server::start(target.clone(), cfg).unwrap();
    let addr = handle.bound[0];
    target.set_listeners(vec![ListenerInfo {
        addr,
        portid: 1,
        tls: ListenerTls::Optional,
        transport: Default::default(),
    }]);
    Running {
        handle: Some(handle),
        addr,
    }
}

/// A TLS client past the handshake on a blocking socket.
fn tls_client(addr: SocketAddr) -> (TcpStream, TlsClient) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.set_nodelay(true).unwrap();
    let mut c = TlsClient::new(&TlsClientConfig::new().unwrap(), IDENTITY, psk()).unwrap();
    let mut buf = vec![0u8; 16 * 1024];
    while !c.handshake_done() {
        s.write_all(&c.take_cipher()).unwrap();
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "the target closed during the handshake");
        c.feed(&buf[..n]).unwrap();
    }
    s.write_all(&c.take_cipher()).unwrap();
    (s, c)
}

/// T3: millions of empty records from one client do not hold the reactor: a QD1 reader on
/// another connection of the same core keeps its latency.
#[test]
fn a_flood_of_empty_records_does_not_starve_the_core() {
    let r = start();
    let mut a = Client::connect(r.addr, false);
    let c = a.fabrics_connect(0, 0xFFFF);
    assert!(c.status.is_success(), "{c:?}");
    a.enable();
    let mut q = Client::connect(r.addr, false);
    assert!(q.fabrics_connect(1, c.dw0 as u16).status.is_success());
    let (cmd, _) = q.cmd(rw(io::READ, 0, 8), &[], false);
    assert!(cmd.status.is_success(), "{cmd:?}");

    // 3 million empty records (22 bytes each, 66 MB), sealed before the clock starts.
    let (mut s, mut tls) = tls_client(r.addr);
    let mut flood = Vec::with_capacity(3_000_000 * 22);
    for _ in 0..3_000_000 {
        tls.write_raw_inner_plaintext(&[23]).unwrap();
        flood.extend_from_slice(tls.pending_cipher());
        let n = tls.pending_cipher().len();
        tls.consume_cipher(n);
    }
    let writer = std::thread::spawn(move || {
        let t = Instant::now();
        s.write_all(&flood).unwrap();
        (s, t.elapsed())
    });
    // QD1 reads while the flood goes in (and at least until it is all written).
    let mut worst = Duration::ZERO;
    let mut reads = 0;
    let start = Instant::now();
    while !writer.is_finished() || reads < 50 {
        assert!(start.elapsed() < Duration::from_secs(60), "bounded");
        let t = Instant::now();
        let (cmd, data) = q.cmd(rw(io::READ, 0, 8), &[], false);
        assert!(cmd.status.is_success(), "{cmd:?}");
        assert_eq!(data.len(), 4096);
        worst = worst.max(t.elapsed());
        reads += 1;
    }
    let (mut s, took) = writer.join().unwrap();
    eprintln!("flood written in {took:?}; {reads} QD1 reads, worst {worst:?}");
    assert!(
        worst < Duration::from_millis(250),
        "a QD1 read waited {worst:?} behind the flood ({reads} reads, flood written in {took:?})"
    );
    // The flood is worked off without more input (not left buffered for the next read): an
    // ICReq behind it is answered.
    tls.write_plain(&[&common::client::icreq()]).unwrap();
    s.write_all(&tls.take_cipher()).unwrap();
    let t = Instant::now();
    let mut plain = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    while plain.len() < 128 {
        let n = s
            .read(&mut buf)
            .expect("the ICResp within the read timeout");
        assert!(n > 0, "the target closed the flooding connection");
        tls.feed(&buf[..n]).unwrap();
        tls.read_plain_into(&mut plain).unwrap();
    }
    eprintln!("ICResp behind the flood after {:?}", t.elapsed());
    assert_eq!(plain[0], 0x01, "ICResp");
}

/// T2: close_notify, then megabytes more: the target closes the connection (after its own
/// close_notify) instead of buffering them.
#[test]
fn data_after_close_notify_closes_the_connection() {
    let r = start();
    let (mut s, mut tls) = tls_client(r.addr);
    tls.close_notify().unwrap();
    s.write_all(&tls.take_cipher()).unwrap();
    s.set_write_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    s.set_read_timeout(Some(Duration::from_millis(10))).unwrap();
    let junk = vec![0x17u8; 256 * 1024];
    let mut back = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    let closed = loop {
        if Instant::now() > deadline {
            break false;
        }
        let _ = s.write(&junk);
        let mut buf = [0u8; 4096];
        match s.read(&mut buf) {
            Ok(0) => break true,
            Ok(n) => back.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break true,
        }
    };
    assert!(closed, "the target kept the connection after close_notify");
    // What came back is the target's close_notify, which our client opens as such.
    tls.feed(&back).unwrap();
    let mut plain = Vec::new();
    tls.read_plain_into(&mut plain).unwrap();
    assert!(plain.is_empty());
    assert!(tls.peer_closed(), "the target's close_notify");
}
