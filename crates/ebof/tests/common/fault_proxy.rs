//! A fault-injecting TCP proxy for tests (userspace stand-in for `tc netem`, which needs the
//! `sch_netem` kernel module): it listens on a loopback port, connects each accepted connection
//! to `upstream`, and forwards both ways under the [`Fault`] the test sets, plus resets on
//! demand (abrupt: RST on both sides, optionally mid-PDU).
//!
//! Bounded: every thread checks the stop flag at least every [`TICK`]; at most [`MAX_CONNS`]
//! connections are accepted; `Drop` stops and joins every thread.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often a blocked thread looks at the flags.
const TICK: Duration = Duration::from_millis(20);
/// Connections accepted at most over the proxy's life.
const MAX_CONNS: u64 = 1000;
/// A tear waits for a piece at least this long from the client (a data PDU, not a keep-alive).
const TEAR_MIN: usize = 600;

/// What the proxy does to the bytes it forwards (both directions).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Forward as they come.
    Pass,
    /// Hold every byte this long before forwarding it.
    Delay(Duration),
    /// Forward in pieces of 1..=N bytes, each written on its own (TCP_NODELAY).
    Trickle(usize),
    /// Forward nothing: bytes are dropped, as with packet loss that never recovers. The
    /// connections that lost bytes are reset when the fault ends (their streams cannot resume).
    Blackhole,
}

struct Ctl {
    fault: Mutex<Fault>,
    stop: AtomicBool,
    /// Armed by [`FaultProxy::tear`].
    tear: AtomicBool,
    tears: AtomicU64,
    accepted: AtomicU64,
    /// The connections (weak: a connection's pumps own it, and its sockets close, with RST,
    /// when the last of them ends).
    conns: Mutex<Vec<Weak<Conn>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Ctl {
    fn fault(&self) -> Fault {
        *self.fault.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reset every connection (RST both sides).
    fn reset_all(&self) {
        for c in self.open() {
            c.kill();
        }
    }

    /// The connections still open (the registry pruned of the others).
    fn open(&self) -> Vec<Arc<Conn>> {
        let mut conns = self.conns.lock().unwrap_or_else(|e| e.into_inner());
        conns.retain(|c| c.upgrade().is_some_and(|c| !c.dead.load(Ordering::Acquire)));
        conns.iter().filter_map(Weak::upgrade).collect()
    }
}

/// One proxied connection: the client's socket and the upstream one.
struct Conn {
    client: TcpStream,
    server: TcpStream,
    dead: AtomicBool,
    /// Bytes were dropped (blackhole): the stream is broken for good.
    lost: AtomicBool,
    /// Every byte of this connection, and its close, arrives this many ms late, from the
    /// client and to it ([`Lagged::set`]); 0: not lagging.
    lag_ms: [AtomicU64; 2],
}

impl Conn {
    fn lagging(&self) -> bool {
        self.lag_ms[0].load(Ordering::Acquire) != 0
    }

    /// Abort both sides: SO_LINGER 0 makes the last close send RST; shutting the read side
    /// down wakes the pumps, which drop their handles.
    fn kill(&self) {
        if self.dead.swap(true, Ordering::AcqRel) {
            return;
        }
        for s in [&self.client, &self.server] {
            let lg = libc::linger {
                l_onoff: 1,
                l_linger: 0,
            };
            // SAFETY: a valid socket descriptor owned by `s`, and a `linger` of the right size.
            unsafe {
                libc::setsockopt(
                    s.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_LINGER,
                    (&lg as *const libc::linger).cast(),
                    std::mem::size_of::<libc::linger>() as libc::socklen_t,
                );
            }
            let _ = s.shutdown(Shutdown::Read);
        }
    }
}

enum Item {
    Data(Instant, Vec<u8>),
    /// The side read from closed (a lagging connection: its close arrives late too).
    Close(Instant),
    /// Reset every connection once the data before it is forwarded.
    ResetAll,
}

/// The proxy; stopped (every connection reset, every thread joined) on drop.
pub struct FaultProxy {
    ctl: Arc<Ctl>,
    /// Where it listens.
    pub addr: SocketAddr,
    accept: Option<JoinHandle<()>>,
}

impl FaultProxy {
    /// Listen on `listen` and forward to `upstream`, faultless until told otherwise.
    pub fn start(listen: SocketAddr, upstream: SocketAddr) -> FaultProxy {
        let l = TcpListener::bind(listen).expect("bind the fault proxy");
        l.set_nonblocking(true).unwrap();
        let ctl = Arc::new(Ctl {
            fault: Mutex::new(Fault::Pass),
            stop: AtomicBool::new(false),
            tear: AtomicBool::new(false),
            tears: AtomicU64::new(0),
            accepted: AtomicU64::new(0),
            conns: Mutex::new(Vec::new()),
            threads: Mutex::new(Vec::new()),
        });
        let c = ctl.clone();
        let accept = std::thread::Builder::new()
            .name("fault-proxy".into())
            .spawn(move || accept_loop(&c, &l, upstream))
            .unwrap();
        FaultProxy {
            ctl,
            addr: listen,
            accept: Some(accept),
        }
    }

    /// Set the fault; leaving a blackhole resets the connections that lost bytes.
    pub fn set(&self, f: Fault) {
        *self.ctl.fault.lock().unwrap_or_else(|e| e.into_inner()) = f;
        if f != Fault::Blackhole {
            for c in self.ctl.open() {
                if c.lost.load(Ordering::Acquire) {
                    c.kill();
                }
            }
        }
    }

    /// The connections open now, to make their bytes arrive late ([`Lagged::set`]) while
    /// newer connections pass: packets stuck on one path (a queue filling up, retransmissions
    /// after a backoff) land after those of a newer connection on another path.
    pub fn open_now(&self) -> Lagged {
        Lagged(self.ctl.open().iter().map(Arc::downgrade).collect())
    }

    /// Reset every connection now (RST both sides).
    pub fn reset(&self) {
        self.ctl.reset_all();
    }

    /// Arm a torn transfer: the next piece of at least 600 bytes from a client is forwarded
    /// only up to an odd byte (mid-PDU: NVMe/TCP PDUs are 4-byte multiples), then every
    /// connection is reset.
    pub fn tear(&self) {
        self.ctl.tear.store(true, Ordering::Release);
    }

    /// Tears done so far.
    pub fn tears(&self) -> u64 {
        self.ctl.tears.load(Ordering::Acquire)
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.ctl.accepted.load(Ordering::Acquire)
    }
}

/// Some connections of a [`FaultProxy`] (from [`FaultProxy::open_now`]).
pub struct Lagged(Vec<Weak<Conn>>);

impl Lagged {
    /// From now on every byte of these connections, and their close, is held `up` long from
    /// the client and `down` long to it (counted from when the proxy read it).
    pub fn set(&self, up: Duration, down: Duration) {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1);
        for c in self.0.iter().filter_map(Weak::upgrade) {
            c.lag_ms[0].store(ms(up), Ordering::Release);
            c.lag_ms[1].store(ms(down), Ordering::Release);
        }
    }

    /// End these connections towards the client only (FIN), as a middlebox dropping the
    /// connection on one side would: the client sees it closed at once, while what it sent
    /// still reaches the server (late, if lagging), then its close.
    pub fn close_to_client(&self) {
        for c in self.0.iter().filter_map(Weak::upgrade) {
            let _ = c.client.shutdown(Shutdown::Write);
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.ctl.stop.store(true, Ordering::Release);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
        self.ctl.reset_all();
        let threads = std::mem::take(&mut *self.ctl.threads.lock().unwrap());
        for t in threads {
            let _ = t.join();
        }
    }
}

fn accept_loop(ctl: &Arc<Ctl>, l: &TcpListener, upstream: SocketAddr) {
    while !ctl.stop.load(Ordering::Acquire) {
        let client = match l.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                std::thread::sleep(TICK / 2);
                continue;
            }
            Err(_) => continue,
        };
        if ctl.accepted.fetch_add(1, Ordering::AcqRel) >= MAX_CONNS {
            continue;
        }
        let Ok(server) = TcpStream::connect_timeout(&upstream, Duration::from_secs(1)) else {
            continue;
        };
        let setup = |s: &TcpStream| {
            s.set_nonblocking(false)?;
            s.set_nodelay(true)?;
            s.set_read_timeout(Some(TICK))
        };
        if setup(&client).is_err() || setup(&server).is_err() {
            continue;
        }
        let conn = Arc::new(Conn {
            client,
            server,
            dead: AtomicBool::new(false),
            lost: AtomicBool::new(false),
            lag_ms: [AtomicU64::new(0), AtomicU64::new(0)],
        });
        ctl.conns.lock().unwrap().push(Arc::downgrade(&conn));
        let mut threads = ctl.threads.lock().unwrap();
        for up in [true, false] {
            let (tx, rx) = mpsc::channel();
            let (c1, k1, c2, k2) = (conn.clone(), ctl.clone(), conn.clone(), ctl.clone());
            threads.push(std::thread::spawn(move || read_side(&k1, &c1, up, &tx)));
            threads.push(std::thread::spawn(move || write_side(&k2, &c2, up, &rx)));
        }
    }
}

/// Read from one side (`up`: the client's) and queue the bytes for the other, stamped.
fn read_side(ctl: &Ctl, c: &Conn, up: bool, tx: &mpsc::Sender<Item>) {
    let mut src = if up { &c.client } else { &c.server };
    let mut buf = vec![0u8; 64 * 1024];
    while !ctl.stop.load(Ordering::Acquire) && !c.dead.load(Ordering::Acquire) {
        let r = src.read(&mut buf);
        if matches!(r, Ok(0) | Err(_)) && c.lagging() {
            if let Err(e) = &r
                && matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
            {
                continue;
            }
            let _ = tx.send(Item::Close(Instant::now()));
            return;
        }
        let n = match r {
            Ok(0) if ctl.fault() == Fault::Blackhole => {
                // Even the close is lost: the other side learns nothing until the fault ends.
                c.lost.store(true, Ordering::Release);
                return;
            }
            Ok(0) => return c.kill(),
            Ok(n) => n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(_) => return c.kill(),
        };
        if ctl.fault() == Fault::Blackhole {
            c.lost.store(true, Ordering::Release);
            continue;
        }
        let now = Instant::now();
        if up && n >= TEAR_MIN && ctl.tear.swap(false, Ordering::AcqRel) {
            let cut = (n / 2) | 1;
            let _ = tx.send(Item::Data(now, buf[..cut].to_vec()));
            let _ = tx.send(Item::ResetAll);
            return;
        }
        if tx.send(Item::Data(now, buf[..n].to_vec())).is_err() {
            return;
        }
    }
}

/// Write what `read_side` queued to the other side, after the fault's delay or in pieces.
fn write_side(ctl: &Ctl, c: &Conn, up: bool, rx: &mpsc::Receiver<Item>) {
    let mut dst = if up { &c.server } else { &c.client };
    let alive = || !ctl.stop.load(Ordering::Acquire) && !c.dead.load(Ordering::Acquire);
    let mut piece = 0usize;
    while alive() {
        let (at, data) = match rx.recv_timeout(TICK) {
            Ok(Item::Data(at, d)) => (at, Some(d)),
            Ok(Item::Close(at)) => (at, None),
            Ok(Item::ResetAll) => {
                ctl.tears.fetch_add(1, Ordering::AcqRel);
                return ctl.reset_all();
            }
            Err(mpsc::RecvTimeoutError::Timeout) => continue,
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        };
        loop {
            let lag = Duration::from_millis(c.lag_ms[usize::from(!up)].load(Ordering::Acquire));
            let delay = match ctl.fault() {
                Fault::Delay(d) => d.max(lag),
                _ => lag,
            };
            let wait = (at + delay).saturating_duration_since(Instant::now());
            if wait.is_zero() || !alive() {
                break;
            }
            std::thread::sleep(wait.min(TICK));
        }
        let Some(data) = data else {
            return c.kill();
        };
        let res = match ctl.fault() {
            Fault::Trickle(max) => {
                let (mut off, mut r) = (0, Ok(()));
                while off < data.len() && r.is_ok() {
                    piece = piece % max.max(1) + 1;
                    let end = (off + piece).min(data.len());
                    r = dst.write_all(&data[off..end]);
                    off = end;
                }
                Some(r)
            }
            Fault::Blackhole => {
                c.lost.store(true, Ordering::Release);
                None
            }
            Fault::Pass | Fault::Delay(_) => Some(dst.write_all(&data)),
        };
        if alive() && matches!(res, Some(Err(_))) {
            // A lagging connection's other direction still arrives, late.
            if !c.lagging() {
                c.kill();
            }
            return;
        }
    }
}
