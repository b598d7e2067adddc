//! The sans-IO core of one connection: received bytes in, bytes to send out.
//!
//! The reactor ([`crate::reactor`]) reads everything the socket has into [`ConnCore`]'s receive
//! buffer, calls [`ConnCore::process`] (decode every complete PDU, hand each to the queue, then
//! the batch duties of [`crate::duties`]: run non-blocking backend I/O inline, retry deferred
//! commands, drain every finished command into the output), then sends the output with one
//! `writev`. [`ConnCore`] is the NVMe/TCP [`Driver`]; its tick is [`ConnCore::tick`].
//!
//! Output is the send buffer `out` plus, for reads from memory backends (RAM), *external
//! segments*: the C2HData header goes into `out` and the data is sent straight from the
//! backend's memory (no userspace copy). [`ConnCore::iovecs`] lists the wire order;
//! [`ConnCore::take_output`] flattens it for tests.

use crate::duties::{self, Close, Driver, Duties, Offload};
use ebof_backend::Backend;
use nvmf_target::{C2hData, Disposition, Queue, Target};
use nvmf_tcp::{TargetConn, TargetConnConfig, TargetEvent};
use std::net::SocketAddr;
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Receive buffer allocated when a connection first has bytes to read (a new or idle
/// connection holds none): room for the ICReq, Connect and a few commands with in-capsule
/// data. It grows (doubling) when a read fills it, up to the working size.
const RECV_BUF_INITIAL: usize = 8 * 1024;
/// Floor of the working size; the working size holds at least four maximal PDUs, so that
/// moving a partial PDU to the front (compaction, at most one PDU) happens at most once per
/// half buffer consumed.
const RECV_BUF_MIN: usize = 512 * 1024;
/// Send buffer kept by an idle connection; larger ones are released when it goes idle.
const SEND_BUF_IDLE: usize = 16 * 1024;
/// Reads at least this large go out zero-copy from a memory backend; smaller ones are copied
/// (an iovec entry per small read costs more than the copy).
const ZERO_COPY_MIN: usize = 2048;

/// The C2HData heads of a read of `len` bytes at `ptr` (backend memory valid for all `len`
/// bytes), one per split size, each followed on the wire by its piece of that memory (an
/// [`ExtSeg`]). False, with nothing appended, when a head cannot go zero-copy (a data digest).
fn zero_copy_heads(
    conn: &TargetConn,
    out: &mut Vec<u8>,
    ext: &mut Vec<ExtSeg>,
    cid: u16,
    ptr: NonNull<u8>,
    len: usize,
    success: bool,
) -> bool {
    let max = conn.c2h_max();
    let (out_len, ext_len) = (out.len(), ext.len());
    let mut off = 0usize;
    while off < len {
        let piece = (len - off).min(max);
        let last = off + piece == len;
        let datao = u32::try_from(off).unwrap_or(u32::MAX);
        if !conn.encode_c2h_data_head(out, cid, datao, piece, last, success) {
            out.truncate(out_len);
            ext.truncate(ext_len);
            return false;
        }
        // SAFETY: `off < len`, and the backend's memory is valid for all `len` bytes.
        let at = unsafe { ptr.add(off) };
        ext.push(ExtSeg {
            at: out.len(),
            ptr: at,
            len: piece,
        });
        off += piece;
    }
    true
}

/// Backend memory sent right after `out[..at]`.
struct ExtSeg {
    at: usize,
    ptr: NonNull<u8>,
    len: usize,
}

/// Sans-IO core of a connection: receive buffer in, send buffer out. The socket loop in
/// [`drive`] and the tests both use it.
pub struct ConnCore {
    /// The NVMe/TCP PDU layer of the connection (framing, digests, R2T and C2HData state).
    pub conn: TargetConn,
    /// The NVMe queue the connection carries.
    pub queue: Queue,
    /// Bytes received and not yet consumed: `rbuf[rpos..rlen]`.
    rbuf: Vec<u8>,
    rpos: usize,
    rlen: usize,
    /// Largest receive buffer (the working size).
    rmax: usize,
    /// Output to send (with `ext` spliced in).
    out: Vec<u8>,
    /// Zero-copy segments, in order of `at`.
    ext: Vec<ExtSeg>,
    /// Keeps the backends that `ext` points into alive until the output is sent.
    keep: Vec<Arc<dyn Backend>>,
    /// The driver duties' state (ready slots, deadlines, activity).
    duties: Duties,
}

/// Why a connection ended (for the log).
#[derive(Debug)]
pub enum ConnEnd {
    /// The peer closed the socket.
    PeerClosed,
    /// A protocol violation; C2HTermReq sent.
    Protocol(nvmf_tcp::ProtocolError),
    /// The host sent H2CTermReq.
    HostTerminated {
        /// Fatal Error Status (FES) of the H2CTermReq.
        fes: u16,
        /// Fatal Error Information (FEI): e.g. the offset of the offending field.
        fei: u32,
    },
    /// The controller was torn down (keep-alive expiry, reset, admin queue gone).
    ControllerGone,
    /// Socket error.
    Io(std::io::Error),
    /// The server is stopping.
    Stopped,
    /// No ICReq and Fabrics Connect within the handshake deadline.
    HandshakeTimeout(Duration),
    /// Connected, but DH-HMAC-CHAP not completed within [`duties::AUTH_TIMEOUT`] of Connect.
    AuthTimeout,
    /// TLS refused or failed (bad handshake, unknown PSK, plaintext on a TLS-only listener).
    Tls(crate::tls::TlsError),
}

/// Outcome of processing received bytes.
pub enum Step {
    /// Keep the connection open.
    Continue,
    /// Close the connection, for this reason.
    Close(ConnEnd),
}

impl ConnCore {
    /// The core of a connection accepted at `now` on `local`, with the default handshake
    /// timeout ([`ConnCore::set_handshake_timeout`] changes it).
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
        let rmax = RECV_BUF_MIN.max(conn.max_pdu_len() * 4);
        ConnCore {
            conn,
            queue,
            rbuf: Vec::new(),
            rpos: 0,
            rlen: 0,
            rmax,
            out: Vec::new(),
            ext: Vec::new(),
            keep: Vec::new(),
            duties: Duties::new(now, DEFAULT_HANDSHAKE_TIMEOUT),
        }
    }

    /// Close the connection if it has not connected within `t` of `now`, its accept time
    /// (`[target] handshake_timeout_ms`).
    pub fn set_handshake_timeout(&mut self, now: Instant, t: Duration) {
        self.duties.deadlines = duties::Deadlines::new(now, t);
    }

    /// Measure command latency with the run loop's clock (`Instant::now`); without one it is
    /// measured to the last `now` given (tests, replays).
    pub fn set_clock(&mut self, clock: duties::Clock) {
        self.duties.set_clock(clock);
    }

    /// The one deadline of the connection ([`duties::poll_timeout`]): call
    /// [`ConnCore::handle_timeout`] once it has come. Already past while commands are deferred.
    #[inline]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.duties.poll_timeout(&self.queue)
    }

    /// Do what is due at `now` ([`duties::handle_timeout`]): deferred and throttled commands,
    /// the periodic timers, deadlines and idle buffers. `Ok(ran)`: whether a deferred or
    /// throttled command ran; `Err` when the connection must close.
    pub fn handle_timeout(
        &mut self,
        now: Instant,
        offload: &mut dyn Offload,
    ) -> Result<bool, Close> {
        duties::handle_timeout(self, &mut (), now, offload)
    }

    /// The periodic part of [`ConnCore::handle_timeout`], now ([`duties::on_tick`]): timers
    /// and events, the handshake and authentication deadlines, idle buffers. `Some` when the
    /// connection must close.
    pub fn tick(&mut self, now: Instant) -> Option<Close> {
        duties::on_tick(self, &mut (), now)
    }

    /// The batch duties without new input ([`duties::after_batch`]): run ready slots, retry
    /// deferred commands, drain completions. Returns whether a deferred command ran.
    pub fn run_duties(&mut self, now: Instant, offload: &mut dyn Offload) -> bool {
        duties::after_batch(self, &mut (), now, offload)
    }

    /// Bytes of output waiting to be sent.
    pub fn output_len(&self) -> usize {
        self.out.len() + self.ext.iter().map(|e| e.len).sum::<usize>()
    }

    /// True if there is output to send.
    pub fn has_output(&self) -> bool {
        !self.out.is_empty() || !self.ext.is_empty()
    }

    /// The output in wire order, skipping its first `skip` bytes (already sent), as iovecs
    /// appended to `iov` (at most `max` entries). The entries stay valid until the output is
    /// changed ([`ConnCore::process`], [`ConnCore::flush_completions`], [`ConnCore::consume`]).
    pub fn iovecs(&self, mut skip: usize, iov: &mut Vec<libc::iovec>, max: usize) {
        let mut push = |base: *const u8, len: usize, iov: &mut Vec<libc::iovec>| {
            if len == 0 || iov.len() >= max {
                return;
            }
            if skip >= len {
                skip -= len;
                return;
            }
            iov.push(libc::iovec {
                // SAFETY: `base` points to a segment of `len` bytes (a part of `out`, or a
                // zero-copy segment kept alive by `keep`) and `skip < len` (returned above
                // otherwise), so `base + skip` stays within that segment.
                iov_base: unsafe { base.add(skip) } as *mut libc::c_void,
                iov_len: len - skip,
            });
            skip = 0;
        };
        let mut pos = 0usize;
        for e in &self.ext {
            push(self.out[pos..e.at].as_ptr(), e.at - pos, iov);
            push(e.ptr.as_ptr(), e.len, iov);
            pos = e.at;
        }
        push(self.out[pos..].as_ptr(), self.out.len() - pos, iov);
    }

    /// The whole output has been sent: clear it.
    pub fn consume(&mut self) {
        self.out.clear();
        self.ext.clear();
        self.keep.clear();
        // Reads streamed from namespace memory are out: they leave the namespace gate.
        self.queue.output_sent();
    }

    /// Take the output as one byte vector (external segments copied in), for tests and for
    /// the last words on a closing connection.
    pub fn take_output(&mut self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.output_len());
        let mut pos = 0usize;
        for e in &self.ext {
            v.extend_from_slice(&self.out[pos..e.at]);
            let start = v.len();
            v.resize(start + e.len, 0);
            // SAFETY: `e.ptr..e.ptr + e.len` is backend memory kept alive by `self.keep`
            // (`Backend::memory`); it is copied with `ptr::copy`, never referenced.
            unsafe { std::ptr::copy(e.ptr.as_ptr(), v[start..].as_mut_ptr(), e.len) };
            pos = e.at;
        }
        v.extend_from_slice(&self.out[pos..]);
        self.consume();
        v
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
        self.duties.input();
    }

    /// The receive buffer is full (or not allocated yet): double it (up to the working size).
    /// Returns false if it is already at the working size (the reader waits for
    /// [`ConnCore::process`]).
    pub fn grow_recv(&mut self) -> bool {
        if self.rbuf.len() >= self.rmax {
            return false;
        }
        let want = (self.rbuf.len() * 2).clamp(RECV_BUF_INITIAL, self.rmax);
        self.rbuf.resize(want, 0);
        true
    }

    /// Copy `bytes` into the receive buffer (growing it as a reader would), for drivers
    /// without a socket (tests, fuzzing, replays). Returns how many were taken: fewer only if
    /// the buffer is at its working size and full (call [`ConnCore::process`] first).
    pub fn feed(&mut self, bytes: &[u8]) -> usize {
        let mut taken = 0;
        while taken < bytes.len() {
            if self.recv_space().is_empty() && !self.grow_recv() {
                break;
            }
            let space = self.recv_space();
            let n = space.len().min(bytes.len() - taken);
            space[..n].copy_from_slice(&bytes[taken..taken + n]);
            self.received(n);
            taken += n;
        }
        taken
    }

    /// Bytes of receive buffer held.
    pub fn recv_capacity(&self) -> usize {
        self.rbuf.len()
    }

    /// Decode and handle every complete PDU, then do the batch duties
    /// ([`duties::after_batch`]): I/O on non-blocking backends runs inline, slots whose backend
    /// may block are handed to `offload`, deferred commands are retried, and completions are
    /// drained into the output.
    pub fn process(&mut self, now: Instant, offload: &mut dyn Offload) -> Step {
        let mut commands = 0usize;
        loop {
            let res = self
                .conn
                .decode_one(&self.rbuf[self.rpos..self.rlen], &mut self.out);
            let (ev, n) = match res {
                Ok(Some(x)) => x,
                Ok(None) => break,
                Err(e) => {
                    nvmf_target::warn_every!(error = %e, "protocol error; sending C2HTermReq");
                    // Commands completed earlier in this batch go out first: the C2HTermReq
                    // is the last PDU of the connection (nothing may follow it).
                    self.flush_completions();
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
                    nvmf_target::warn_every!(cid = sqe.cid().0, "in-capsule data digest error");
                    Some(self.queue.handle_command_digest_error(&sqe, now))
                }
                TargetEvent::H2cDataDigestError { ttag, last, .. } => {
                    nvmf_target::warn_every!(ttag, "H2CData digest error");
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
                Some(Disposition::Execute { slot }) => self.duties.execute_later(slot),
                Some(Disposition::Done | Disposition::Parked | Disposition::Pending) | None => {}
            }
        }
        if commands > 0 {
            self.queue.touch(now);
        }
        duties::after_batch(self, &mut (), now, offload);
        Step::Continue
    }

    /// Encode every finished command into `out` (C2HData + CapsuleResp, or C2HData with
    /// SUCCESS when SQ flow control is off). Reads from backends that do not block happen here,
    /// straight from the backend into `out`.
    pub fn flush_completions(&mut self) {
        let conn = &self.conn;
        let out = &mut self.out;
        let ext = &mut self.ext;
        let keep = &mut self.keep;
        let clock = self.duties.clock();
        self.queue
            .drain_completions_at(clock, |cqe, data, shortcut| {
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
                        if len >= ZERO_COPY_MIN
                            && let Some(ptr) = backend.memory(offset, len)
                            && zero_copy_heads(conn, out, ext, cqe.cid, ptr, len, shortcut)
                        {
                            if !keep.iter().any(|k| Arc::ptr_eq(k, backend)) {
                                keep.push(backend.clone());
                            }
                            if !shortcut {
                                conn.encode_resp(out, cqe);
                            }
                            return Ok(());
                        }
                        // On error nothing was appended; the queue calls us again with the error.
                        conn.encode_c2h_data_with(
                            out,
                            cqe.cid,
                            0,
                            len,
                            true,
                            shortcut,
                            |buf, off| backend.read(offset + off, buf),
                        )?;
                    }
                }
                if !shortcut {
                    conn.encode_resp(out, cqe);
                }
                Ok(())
            });
    }
}

/// Handshake timeout of a core made by [`ConnCore::new`] (the configuration's default).
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

impl Driver for ConnCore {
    type Io<'a> = ();

    #[inline]
    fn parts(&mut self) -> (&mut Queue, &mut Duties) {
        (&mut self.queue, &mut self.duties)
    }

    fn flush(&mut self, _: &mut ()) {
        self.flush_completions();
    }

    /// Receive buffer (when no partial PDU is held), a send buffer grown past
    /// [`SEND_BUF_IDLE`] (when nothing waits to be sent), and the queue's slots and buffers:
    /// an idle queue costs its initial size, not the size of its largest burst.
    fn release_idle(&mut self, _: &mut ()) {
        if self.rpos == self.rlen && !self.rbuf.is_empty() {
            self.rbuf = Vec::new();
            self.rpos = 0;
            self.rlen = 0;
        }
        if !self.has_output() && self.out.capacity() > SEND_BUF_IDLE {
            self.out = Vec::new();
        }
        self.queue.release_idle_buffers();
    }
}
