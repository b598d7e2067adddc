//! The connection driver: one task per TCP connection, on the core that accepted it for life.
//!
//! Each wake-up: read everything the socket has (bulk, into one receive buffer), decode every
//! complete PDU, hand each to the queue, run non-blocking backend I/O inline, then drain all
//! completions into one send buffer and write it with one call. Reads from non-blocking
//! backends are done during that drain, straight from the backend into the send buffer (one
//! userspace copy). Backends that may block run on the runtime's blocking pool; their
//! completions come back through a channel.

use nvme_spec::Status;
use nvmf_target::{C2hData, Disposition, Queue, Target, execute_io};
use nvmf_tcp::{ProtocolError, TargetConn, TargetConnConfig, TargetEvent};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::mpsc;

/// Receive buffer floor; grows to hold at least two maximal PDUs.
const RECV_BUF_MIN: usize = 256 * 1024;
/// How often timers (keep-alive, controller teardown) are checked.
const TICK: Duration = Duration::from_millis(500);
/// Grace period after a C2HTermReq before the socket is closed.
const TERM_GRACE: Duration = Duration::from_millis(200);

/// Why a connection ended (for the log).
#[derive(Debug)]
pub enum ConnEnd {
    /// The peer closed the socket.
    PeerClosed,
    /// A protocol violation; C2HTermReq sent.
    Protocol(ProtocolError),
    /// The host sent H2CTermReq.
    HostTerminated { fes: u16, fei: u32 },
    /// The controller was torn down (keep-alive expiry, reset, admin queue gone).
    ControllerGone,
    /// Socket error.
    Io(std::io::Error),
}

/// Completion of an I/O executed on a worker thread.
struct Offloaded {
    slot: u16,
    status: Status,
    buf: Vec<u8>,
}

/// Sans-IO core of a connection: receive buffer in, send buffer out. The socket loop in
/// [`drive`] and the tests both use it.
pub struct ConnCore {
    pub conn: TargetConn,
    pub queue: Queue,
    /// Bytes received and not yet consumed: `rbuf[rpos..rlen]`.
    rbuf: Vec<u8>,
    rpos: usize,
    rlen: usize,
    /// Output to send.
    pub out: Vec<u8>,
    /// Slots to execute after the decode pass.
    to_execute: Vec<u16>,
}

/// Outcome of processing received bytes.
pub enum Step {
    Continue,
    Close(ConnEnd),
}

impl ConnCore {
    pub fn new(
        target: Arc<Target>,
        cfg: TargetConnConfig,
        local: SocketAddr,
        now: Instant,
    ) -> ConnCore {
        let queue = Queue::new(target, local, now);
        let cfg = TargetConnConfig {
            max_ttags: queue.max_ttags(),
            ..cfg
        };
        let conn = TargetConn::new(cfg);
        let cap = RECV_BUF_MIN.max(conn.max_pdu_len() * 2);
        ConnCore {
            conn,
            queue,
            rbuf: vec![0; cap],
            rpos: 0,
            rlen: 0,
            out: Vec::with_capacity(RECV_BUF_MIN),
            to_execute: Vec::with_capacity(64),
        }
    }

    /// Free space to read into (compacting first if needed).
    pub fn recv_space(&mut self) -> &mut [u8] {
        if self.rpos == self.rlen {
            self.rpos = 0;
            self.rlen = 0;
        } else if self.rpos > 0 && self.rbuf.len() - self.rlen < self.rbuf.len() / 2 {
            self.rbuf.copy_within(self.rpos..self.rlen, 0);
            self.rlen -= self.rpos;
            self.rpos = 0;
        }
        &mut self.rbuf[self.rlen..]
    }

    /// Account for `n` bytes written into [`ConnCore::recv_space`].
    pub fn received(&mut self, n: usize) {
        self.rlen = (self.rlen + n).min(self.rbuf.len());
    }

    /// Decode and handle every complete PDU; I/O on non-blocking backends runs inline; slots
    /// whose backend may block are returned through `offload`.
    pub fn process(&mut self, now: Instant, mut offload: impl FnMut(&mut Queue, u16)) -> Step {
        let mut commands = 0usize;
        loop {
            let res = self
                .conn
                .decode_one(&self.rbuf[self.rpos..self.rlen], &mut self.out);
            let (ev, n) = match res {
                Ok(Some(x)) => x,
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "protocol error; sending C2HTermReq");
                    self.conn.encode_term_req(&mut self.out, &e);
                    return Step::Close(ConnEnd::Protocol(e));
                }
            };
            let disp = match ev {
                TargetEvent::Established {
                    hpda,
                    digests,
                    maxr2t,
                } => {
                    tracing::debug!(hpda, ?digests, maxr2t, "ICReq accepted");
                    None
                }
                TargetEvent::Command { sqe, icd } => {
                    commands += 1;
                    Some(self.queue.handle_command(&sqe, icd, now))
                }
                TargetEvent::H2cData {
                    ttag,
                    datao,
                    data,
                    last,
                    ..
                } => Some(self.queue.handle_h2c_data(ttag, datao, data, last)),
                TargetEvent::CommandDataDigestError { sqe } => {
                    tracing::warn!(cid = sqe.cid().0, "in-capsule data digest error");
                    Some(self.queue.handle_command_digest_error(&sqe, now))
                }
                TargetEvent::H2cDataDigestError { ttag, last, .. } => {
                    tracing::warn!(ttag, "H2CData digest error");
                    Some(self.queue.handle_h2c_digest_error(ttag, last))
                }
                TargetEvent::TermReq { fes, fei } => {
                    self.rpos += n;
                    return Step::Close(ConnEnd::HostTerminated { fes, fei });
                }
            };
            self.rpos += n;
            match disp {
                Some(Disposition::NeedData { ttag, cccid, len }) => {
                    if !self.conn.send_r2t(&mut self.out, cccid, ttag, 0, len) {
                        tracing::error!(ttag, "transfer tag busy; closing");
                        return Step::Close(ConnEnd::ControllerGone);
                    }
                }
                Some(Disposition::Execute { slot }) => self.to_execute.push(slot),
                Some(Disposition::Done | Disposition::Parked | Disposition::Pending) | None => {}
            }
        }
        if commands > 0 {
            self.queue.touch(now);
        }
        for i in 0..self.to_execute.len() {
            let slot = self.to_execute[i];
            if self.queue.io_request(slot).is_some_and(|r| r.may_block()) {
                offload(&mut self.queue, slot);
            } else {
                self.queue.execute_inline(slot);
            }
        }
        self.to_execute.clear();
        Step::Continue
    }

    /// Encode every finished command into `out` (C2HData + CapsuleResp, or C2HData with
    /// SUCCESS when SQ flow control is off). Reads from backends that do not block happen here,
    /// straight from the backend into `out`.
    pub fn flush_completions(&mut self) {
        let conn = &self.conn;
        let out = &mut self.out;
        self.queue.drain_completions(|cqe, data, shortcut| {
            match data {
                C2hData::Bytes(d) => {
                    if !d.is_empty() {
                        conn.encode_c2h_data(out, cqe.cid, 0, d, true, shortcut);
                    }
                }
                C2hData::Read {
                    backend,
                    offset,
                    len,
                } => {
                    // On error nothing was appended; the queue calls us again with the error.
                    conn.encode_c2h_data_with(out, cqe.cid, 0, len, true, shortcut, |buf, off| {
                        backend.read(offset + off, buf)
                    })?;
                }
            }
            if !shortcut {
                conn.encode_resp(out, cqe);
            }
            Ok(())
        });
    }
}

/// Serve one connection until it ends. `poll` > 0 enables a busy-poll window: after each
/// batch the reactor keeps checking the socket for that long before sleeping in epoll (lower
/// latency for back-to-back batches, at the cost of CPU while traffic flows; an idle
/// connection still sleeps).
pub async fn drive(
    mut stream: TcpStream,
    target: Arc<Target>,
    cfg: TargetConnConfig,
    local: SocketAddr,
    discovery_only: bool,
    poll: Duration,
) -> ConnEnd {
    let _ = stream.set_nodelay(true);
    let fd = stream.as_raw_fd();
    let mut core = ConnCore::new(target, cfg, local, Instant::now());
    core.queue.set_discovery_only(discovery_only);
    let (tx, mut rx) = mpsc::unbounded_channel::<Offloaded>();
    let mut offloaded = 0usize;
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let end = loop {
        // Busy-poll window (opt-in): raw non-blocking reads, bypassing the readiness cache.
        let mut input = Input::Nothing;
        if !poll.is_zero() && offloaded == 0 {
            let deadline = Instant::now() + poll;
            loop {
                match recv_nonblocking(fd, core.recv_space()) {
                    Ok(0) => {
                        input = Input::Closed;
                        break;
                    }
                    Ok(n) => {
                        core.received(n);
                        input = Input::Data;
                        break;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) => {
                        input = Input::Error(e);
                        break;
                    }
                }
                if Instant::now() >= deadline {
                    break;
                }
                std::hint::spin_loop();
            }
        }
        if matches!(input, Input::Nothing) {
            tokio::select! {
                biased;
                r = stream.readable() => {
                    input = match r {
                        Err(e) => Input::Error(e),
                        Ok(()) => read_available(&stream, &mut core),
                    };
                }
                Some(done) = rx.recv(), if offloaded > 0 => {
                    offloaded -= 1;
                    core.queue.complete_io(done.slot, done.status, done.buf);
                    while let Ok(done) = rx.try_recv() {
                        offloaded -= 1;
                        core.queue.complete_io(done.slot, done.status, done.buf);
                    }
                    core.flush_completions();
                }
                _ = tick.tick() => {
                    if core.queue.poll_timers(Instant::now()) {
                        break ConnEnd::ControllerGone;
                    }
                }
            }
        }
        match input {
            Input::Nothing => {}
            Input::Error(e) => break ConnEnd::Io(e),
            Input::Data | Input::DataThenClosed => {
                let now = Instant::now();
                let step = core.process(now, |q, slot| {
                    let Some(req) = q.io_request(slot).cloned() else {
                        return;
                    };
                    let mut buf = q.take_io_buffer(slot);
                    let tx = tx.clone();
                    offloaded += 1;
                    tokio::task::spawn_blocking(move || {
                        let status = execute_io(&req, &mut buf);
                        let _ = tx.send(Offloaded { slot, status, buf });
                    });
                });
                core.flush_completions();
                if let Step::Close(end) = step {
                    let _ = stream.write_all(&core.out).await;
                    if matches!(end, ConnEnd::Protocol(_)) {
                        let _ = stream.shutdown().await;
                        tokio::time::sleep(TERM_GRACE).await;
                    }
                    break end;
                }
                if matches!(input, Input::DataThenClosed) {
                    let _ = stream.write_all(&core.out).await;
                    break ConnEnd::PeerClosed;
                }
            }
            Input::Closed => break ConnEnd::PeerClosed,
        }
        if !core.out.is_empty() {
            if let Err(e) = stream.write_all(&core.out).await {
                break ConnEnd::Io(e);
            }
            core.out.clear();
        }
        if core.queue.should_close() {
            break ConnEnd::ControllerGone;
        }
    };
    // Let offloaded I/O finish before the queue (and its buffers) go away, bounded.
    let deadline = Instant::now() + Duration::from_secs(30);
    while offloaded > 0 && Instant::now() < deadline {
        match tokio::time::timeout(Duration::from_secs(1), rx.recv()).await {
            Ok(Some(done)) => {
                offloaded -= 1;
                core.queue.complete_io(done.slot, done.status, done.buf);
            }
            Ok(None) => break,
            Err(_) => {}
        }
    }
    end
}

/// What one read attempt produced.
enum Input {
    Nothing,
    Data,
    DataThenClosed,
    Closed,
    Error(std::io::Error),
}

/// Read what the socket has, in bulk, until it is drained or the buffer is full.
fn read_available(stream: &TcpStream, core: &mut ConnCore) -> Input {
    let mut got = false;
    loop {
        let space = core.recv_space();
        if space.is_empty() {
            break;
        }
        match stream.try_read(space) {
            Ok(0) => {
                return if got {
                    Input::DataThenClosed
                } else {
                    Input::Closed
                };
            }
            Ok(n) => {
                core.received(n);
                got = true;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => return Input::Error(e),
        }
    }
    if got { Input::Data } else { Input::Nothing }
}

/// One non-blocking `recv` on the raw socket (busy-poll path).
fn recv_nonblocking(fd: std::os::fd::RawFd, buf: &mut [u8]) -> std::io::Result<usize> {
    if buf.is_empty() {
        return Err(std::io::ErrorKind::WouldBlock.into());
    }
    // SAFETY: `buf` is a valid, writable slice for its whole length; `fd` is the connection's
    // socket, owned by the `TcpStream` that outlives this call.
    let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
    if n < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}
