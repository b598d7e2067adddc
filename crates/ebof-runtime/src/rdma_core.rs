//! The sans-IO target side of one NVMe/RDMA queue: [`RdmaQueueCore`], the NVMe/RDMA
//! [`Driver`] (the sibling of [`crate::conn::ConnCore`]).
//!
//! The poller (verbs, [`crate::rdma`]) hands it what the completion queue reports — a
//! command capsule received, an RDMA READ done, a SEND done — and posts the work requests it
//! returns ([`Op`]). Between the two sits the transport-agnostic controller
//! (`nvmf_target::Queue`), with the duties every driver owes it ([`crate::duties`]: deferred
//! retries, the tick, deadlines, idle buffers) done by the same code as for NVMe/TCP:
//!
//! ```text
//! RECV capsule ─► decode SQE + SGL1 (wire::decode_sgl, bounds-checked against the bytes received)
//!   in-capsule data ─► Queue::handle_command(sqe, icd)
//!   keyed SGL       ─► Queue::handle_command(sqe, [])
//!        NeedData{ttag} ─► Op::Read (host memory ─► namespace memory when registered: zero
//!                          copy; else ─► a staging buffer) … on_read_done ─► Queue::handle_h2c_*
//!        Execute{slot}  ─► duties: inline (RAM) or the driver's offload (file, block),
//!                          then deferred commands retried
//! completions (Queue::drain_completions) ─► [Op::Write of the data] + Op::Send of the CQE
//!   (send with invalidate when the SGL asked for it); the CQE is an inline SEND
//! SEND done ─► staging buffers back to the pool; streamed reads leave the namespace gate
//! ```
//!
//! Memory comes from the driver through [`Memory`]: registered staging buffers, and the key of
//! namespace memory the driver registered (RAM namespaces). The core never touches a verb, so
//! the whole command/data state machine runs in the tests with plain heap memory.
//!
//! What is copied (ADR 0017): nothing for reads and writes of RAM namespaces (RDMA WRITE from
//! and RDMA READ into the namespace's registered memory); for other backends a read goes
//! backend → staging buffer → wire, a write wire → staging → the command's buffer → backend
//! (the controller owns command buffers; a registered pool of its own would remove one copy);
//! admin data (Identify, log pages) is small and copied into staging; in-capsule data is copied
//! out of the receive buffer so the buffer can be posted again at once.

use crate::duties::{self, Close, Driver, Duties, Offload};
use ebof_backend::{Backend, BackendError};
use nvme_spec::Sqe;
use nvmf_rdma::wire::{self, DataDesc};
use nvmf_target::{C2hData, Disposition, Queue, Target, Transport};
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::{Duration, Instant};
use thiserror::Error;

/// A registered buffer (staging memory) lent by the driver.
#[derive(Debug, PartialEq, Eq)]
pub struct Buf {
    /// Start of the buffer.
    pub ptr: NonNull<u8>,
    /// Its length in bytes.
    pub len: usize,
    /// The local key of its registration.
    pub lkey: u32,
}

impl Buf {
    /// The buffer's bytes.
    ///
    /// # Safety
    /// The driver keeps the memory valid while the buffer is lent; nothing else writes to it.
    unsafe fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: the caller's promise.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

/// Local memory, from the driver: registered staging buffers and the keys of registered
/// namespace memory.
pub trait Memory {
    /// A staging buffer of at least `len` bytes, or `None` when none can be had now.
    fn staging(&mut self, len: usize) -> Option<Buf>;
    /// Give a staging buffer back.
    fn release(&mut self, b: Buf);
    /// The local key of registered memory holding `[p, p + len)`, if registered.
    fn lkey(&self, p: *const u8, len: usize) -> Option<u32>;
}

/// A local segment of a work request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Local {
    /// Start of the segment.
    pub ptr: *const u8,
    /// Its length in bytes.
    pub len: u32,
    /// The local key of the registration holding it.
    pub lkey: u32,
}

/// A work request to post, in order, on the queue pair's send queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// RDMA READ the host's (addr, rkey) into `local`; signaled; report with
    /// [`RdmaQueueCore::on_read_done`]`(tag)`.
    Read {
        /// The core's tag for this READ, given back to [`RdmaQueueCore::on_read_done`].
        tag: u32,
        /// Host memory address (from the command's keyed SGL).
        addr: u64,
        /// Host's remote key for that memory.
        rkey: u32,
        /// Local buffer the data lands in.
        local: Local,
    },
    /// RDMA WRITE `local` to the host's (addr, rkey); unsignaled (the SEND after it completes
    /// after it: reliable-connected ordering).
    Write {
        /// Host memory address (from the command's keyed SGL).
        addr: u64,
        /// Host's remote key for that memory.
        rkey: u32,
        /// Local data to write.
        local: Local,
    },
    /// SEND the response capsule (16 bytes, inline), with invalidate of `invalidate` when set;
    /// signaled; report with [`RdmaQueueCore::on_send_done`]`(tag)`.
    Send {
        /// The core's tag for this SEND, given back to [`RdmaQueueCore::on_send_done`].
        tag: u32,
        /// The completion queue entry, as wire bytes.
        cqe: [u8; 16],
        /// The host's rkey to invalidate with the SEND (keyed SGL subtype Fh), if any.
        invalidate: Option<u32>,
    },
}

/// The host broke the transport's rules: the driver disconnects the queue.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum RdmaError {
    /// A received capsule (of this many bytes) is shorter than a 64-byte SQE.
    #[error("capsule of {0} bytes is shorter than a command")]
    ShortCapsule(usize),
    /// More commands with host-memory data outstanding than the core tracks (65535): the host
    /// overran any queue size it could have been given.
    #[error("more commands outstanding than the queue holds")]
    Overrun,
}

/// Tunables of a queue.
#[derive(Clone, Copy, Debug)]
pub struct RdmaQueueConfig {
    /// RDMA READs in flight at once (the initiator depth agreed at connect).
    pub max_reads: u32,
    /// A queue that has not completed Fabrics Connect this long after it was accepted is
    /// closed (`[target] handshake_timeout_ms`).
    pub handshake_timeout: Duration,
}

impl Default for RdmaQueueConfig {
    fn default() -> Self {
        RdmaQueueConfig {
            max_reads: 16,
            handshake_timeout: crate::conn::DEFAULT_HANDSHAKE_TIMEOUT,
        }
    }
}

/// An RDMA READ waiting for its turn or in flight.
#[derive(Debug)]
struct PendingRead {
    ttag: u16,
    addr: u64,
    rkey: u32,
    len: u32,
}

/// What a READ in flight lands in.
#[derive(Debug)]
enum ReadDest {
    /// Straight into namespace memory.
    Placed { ttag: u16, len: u32 },
    /// Into a staging buffer.
    Staged { ttag: u16, len: u32, buf: Buf },
}

/// What a SEND in flight holds until it completes.
#[derive(Debug, Default)]
struct SendCtx {
    bufs: Vec<Buf>,
    /// Data went straight from namespace memory (inside the namespace gate until sent).
    zero_copy: bool,
}

/// Sans-IO core of one NVMe/RDMA queue (see the module doc).
pub struct RdmaQueueCore {
    /// The controller side of the queue.
    pub queue: Queue,
    cfg: RdmaQueueConfig,
    /// Keyed SGL of each outstanding command, by CID.
    remote: HashMap<u16, DataDesc>,
    reads_waiting: VecDeque<PendingRead>,
    reads: HashMap<u32, ReadDest>,
    sends: HashMap<u32, SendCtx>,
    next_tag: u32,
    /// SENDs in flight carrying data straight from namespace memory.
    zero_copy_sends: usize,
    ops: Vec<Op>,
    /// The driver duties' state (ready slots, deadlines, activity).
    duties: Duties,
}

impl RdmaQueueCore {
    /// The core of a queue accepted at `now` on `local`.
    pub fn new(target: Arc<Target>, local: SocketAddr, now: Instant, cfg: RdmaQueueConfig) -> Self {
        let mut queue = Queue::new(target, local, now);
        queue.set_transport(Transport::Rdma);
        RdmaQueueCore {
            queue,
            cfg,
            remote: HashMap::new(),
            reads_waiting: VecDeque::new(),
            reads: HashMap::new(),
            sends: HashMap::new(),
            next_tag: 0,
            zero_copy_sends: 0,
            ops: Vec::new(),
            duties: Duties::new(now, cfg.handshake_timeout),
        }
    }

    /// Measure command latency with the run loop's clock (`Instant::now`); without one it is
    /// measured to the last `now` given (tests).
    pub fn set_clock(&mut self, clock: duties::Clock) {
        self.duties.set_clock(clock);
    }

    /// The one deadline of the queue ([`duties::poll_timeout`]): call
    /// [`RdmaQueueCore::handle_timeout`] once it has come. Already past while commands are
    /// deferred.
    #[inline]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.duties.poll_timeout(&self.queue)
    }

    /// Do what is due at `now` ([`duties::handle_timeout`]): deferred and throttled commands,
    /// the periodic timers, deadlines and idle buffers; queues what that completed as work
    /// requests. `Ok(ran)`: whether a deferred or throttled command ran; `Err` when the queue
    /// must close.
    pub fn handle_timeout(
        &mut self,
        now: Instant,
        mem: &mut dyn Memory,
        offload: &mut dyn Offload,
    ) -> Result<bool, Close> {
        duties::handle_timeout(self, mem, now, offload)
    }

    /// The periodic part of [`RdmaQueueCore::handle_timeout`], now ([`duties::on_tick`]):
    /// timers and events, the handshake and authentication deadlines, idle buffers. `Some`
    /// when the queue must close.
    pub fn tick(&mut self, now: Instant, mem: &mut dyn Memory) -> Option<Close> {
        duties::on_tick(self, mem, now)
    }

    /// The batch duties without new input ([`duties::after_batch`]): run ready slots, retry
    /// deferred commands, queue completions as work requests. Returns whether a deferred
    /// command ran.
    pub fn run_duties(
        &mut self,
        now: Instant,
        mem: &mut dyn Memory,
        offload: &mut dyn Offload,
    ) -> bool {
        duties::after_batch(self, mem, now, offload)
    }

    /// Work requests to post, in order.
    pub fn take_ops(&mut self) -> std::vec::Drain<'_, Op> {
        self.ops.drain(..)
    }

    /// True if there are work requests to post.
    pub fn has_ops(&self) -> bool {
        !self.ops.is_empty()
    }

    /// Work requests in flight (READs and SENDs; unsignaled WRITEs ride with their SEND).
    pub fn in_flight(&self) -> usize {
        self.reads.len() + self.sends.len()
    }

    fn tag(&mut self) -> u32 {
        self.next_tag = self.next_tag.wrapping_add(1);
        self.next_tag
    }

    /// A command capsule arrived: `bytes` is what the SEND carried (the receive buffer may be
    /// posted again as soon as this returns). Runs what can run and queues work requests.
    pub fn on_recv(
        &mut self,
        bytes: &[u8],
        now: Instant,
        mem: &mut dyn Memory,
        offload: &mut dyn Offload,
    ) -> Result<(), RdmaError> {
        let Some(sqe) = Sqe::from_slice(bytes) else {
            return Err(RdmaError::ShortCapsule(bytes.len()));
        };
        let cid = sqe.cid().0;
        let (icd, desc): (&[u8], _) = match wire::decode_sgl(&sqe) {
            Ok(DataDesc::InCapsule { offset, len }) => {
                // In-capsule data must lie inside what was received; otherwise the queue sees
                // no data and fails the command (SGL Data Block Invalid).
                let start = usize::try_from(offset).ok().and_then(|o| o.checked_add(64));
                let range = start.and_then(|s| Some(s..s.checked_add(len as usize)?));
                let icd = range.and_then(|r| bytes.get(r)).unwrap_or(&[]);
                (icd, None)
            }
            Ok(d @ DataDesc::Keyed { .. }) => (&[][..], Some(d)),
            // No data, or a descriptor type the queue rejects with the right status itself.
            Ok(DataDesc::None) | Err(_) => (&[][..], None),
        };
        if let Some(d) = desc {
            if self.remote.len() > usize::from(u16::MAX) {
                return Err(RdmaError::Overrun);
            }
            self.remote.insert(cid, d);
        }
        self.duties.input();
        let disp = self.queue.handle_command(&sqe, icd, now);
        self.queue.touch(now);
        self.dispose(disp);
        duties::after_batch(self, mem, now, offload);
        Ok(())
    }

    fn dispose(&mut self, disp: Disposition) {
        match disp {
            Disposition::NeedData { ttag, cccid, len } => match self.remote.get(&cccid) {
                Some(DataDesc::Keyed { addr, key, .. }) => {
                    self.reads_waiting.push_back(PendingRead {
                        ttag,
                        addr: *addr,
                        rkey: *key,
                        len,
                    });
                }
                // The queue asks for data only when SGL1 is a keyed data block of this length.
                _ => {
                    let d = self.queue.handle_h2c_failed(ttag);
                    self.dispose(d);
                }
            },
            Disposition::Execute { slot } => self.duties.execute_later(slot),
            Disposition::Done | Disposition::Parked | Disposition::Pending => {}
        }
    }

    /// Start waiting RDMA READs, up to the agreed depth, while staging memory lasts.
    fn start_reads(&mut self, mem: &mut dyn Memory) {
        while self.reads.len() < self.cfg.max_reads as usize {
            let Some(r) = self.reads_waiting.front() else {
                break;
            };
            let (ttag, addr, rkey, len) = (r.ttag, r.addr, r.rkey, r.len);
            // Straight into a registered namespace when the write goes there directly.
            let placed = self.queue.direct_target(ttag).and_then(|(b, off)| {
                let p = b.memory(off, len as usize)?;
                let lkey = mem.lkey(p.as_ptr(), len as usize)?;
                Some(Local {
                    ptr: p.as_ptr(),
                    len,
                    lkey,
                })
            });
            let (local, dest) = match placed {
                Some(l) => (l, ReadDest::Placed { ttag, len }),
                None => {
                    let Some(buf) = mem.staging(len as usize) else {
                        break; // retried when a SEND gives a buffer back
                    };
                    let l = Local {
                        ptr: buf.ptr.as_ptr(),
                        len,
                        lkey: buf.lkey,
                    };
                    (l, ReadDest::Staged { ttag, len, buf })
                }
            };
            self.reads_waiting.pop_front();
            let tag = self.tag();
            self.reads.insert(tag, dest);
            self.ops.push(Op::Read {
                tag,
                addr,
                rkey,
                local,
            });
        }
    }

    /// The RDMA READ `tag` completed (`ok`: successfully).
    pub fn on_read_done(
        &mut self,
        tag: u32,
        ok: bool,
        now: Instant,
        mem: &mut dyn Memory,
        offload: &mut dyn Offload,
    ) {
        let Some(dest) = self.reads.remove(&tag) else {
            return;
        };
        let disp = match dest {
            ReadDest::Placed { ttag, len } if ok => self.queue.handle_h2c_placed(ttag, len),
            ReadDest::Placed { ttag, .. } => self.queue.handle_h2c_failed(ttag),
            ReadDest::Staged { ttag, len, mut buf } => {
                let d = if ok {
                    // SAFETY: the READ that filled the buffer has completed; the buffer is ours
                    // until released.
                    let data = unsafe { &buf.bytes_mut()[..len as usize] };
                    self.queue.handle_h2c_data(ttag, 0, data, true)
                } else {
                    self.queue.handle_h2c_failed(ttag)
                };
                mem.release(buf);
                d
            }
        };
        self.dispose(disp);
        duties::after_batch(self, mem, now, offload);
    }

    /// The SEND `tag` completed (successfully or flushed): its buffers go back.
    pub fn on_send_done(&mut self, tag: u32, mem: &mut dyn Memory) {
        if let Some(ctx) = self.sends.remove(&tag) {
            for b in ctx.bufs {
                mem.release(b);
            }
            if ctx.zero_copy {
                self.zero_copy_sends -= 1;
                if self.zero_copy_sends == 0 {
                    // Everything drained so far has left: streamed reads leave the gate.
                    self.queue.output_sent();
                }
            }
        }
        // Buffers came back: READs waiting for one may go.
        self.start_reads(mem);
    }

    /// The queue pair is gone (destroyed: no more DMA into or out of lent memory): every
    /// staging buffer still lent goes back, reads streamed from the namespace leave its gate.
    pub fn release_all(&mut self, mem: &mut dyn Memory) {
        for (_, d) in self.reads.drain() {
            if let ReadDest::Staged { buf, .. } = d {
                mem.release(buf);
            }
        }
        for (_, ctx) in self.sends.drain() {
            for b in ctx.bufs {
                mem.release(b);
            }
        }
        self.reads_waiting.clear();
        self.zero_copy_sends = 0;
        self.queue.output_sent();
    }

    /// Offloaded I/O of `slot` finished (file, block backends): [`duties::io_done`].
    pub fn complete_io(
        &mut self,
        slot: u16,
        status: nvme_spec::Status,
        buf: Vec<u8>,
        mem: &mut dyn Memory,
    ) {
        duties::io_done(self, mem, slot, status, buf);
    }

    /// Turn every finished command into work requests: the data (RDMA WRITE) then the
    /// response (SEND).
    pub fn flush_completions(&mut self, mem: &mut dyn Memory) {
        let remote = &mut self.remote;
        let ops = &mut self.ops;
        let sends = &mut self.sends;
        let next_tag = &mut self.next_tag;
        let zc = &mut self.zero_copy_sends;
        let clock = self.duties.clock();
        self.queue
            .drain_completions_at(clock, |cqe, data, _shortcut| {
                let desc = remote.get(&cqe.cid).copied();
                let mut ctx = SendCtx::default();
                if !data.is_empty() {
                    // The queue checked SGL1 is a keyed block of exactly this length.
                    let Some(DataDesc::Keyed { addr, key, .. }) = desc else {
                        return Err(BackendError::Io(std::io::Error::other(
                            "no keyed SGL for command data",
                        )));
                    };
                    let local = match data {
                        C2hData::Read {
                            backend,
                            offset,
                            len,
                        } => stage_read(mem, backend, offset, len, &mut ctx)?,
                        C2hData::Bytes(d) => {
                            let mut b = mem.staging(d.len()).ok_or_else(no_staging)?;
                            // SAFETY: a lent buffer is ours until released.
                            unsafe { b.bytes_mut()[..d.len()].copy_from_slice(d) };
                            let l = Local {
                                ptr: b.ptr.as_ptr(),
                                len: d.len() as u32,
                                lkey: b.lkey,
                            };
                            ctx.bufs.push(b);
                            l
                        }
                    };
                    ops.push(Op::Write {
                        addr,
                        rkey: key,
                        local,
                    });
                }
                remote.remove(&cqe.cid);
                if ctx.zero_copy {
                    *zc += 1;
                }
                *next_tag = next_tag.wrapping_add(1);
                let tag = *next_tag;
                let invalidate = match desc {
                    Some(DataDesc::Keyed {
                        key,
                        invalidate: true,
                        ..
                    }) => Some(key),
                    _ => None,
                };
                ops.push(Op::Send {
                    tag,
                    cqe: cqe.to_bytes(),
                    invalidate,
                });
                sends.insert(tag, ctx);
                Ok(())
            });
        if self.zero_copy_sends == 0 {
            // Reads drained so far were copied into staging: their data has left the
            // namespace, so they leave its gate now (zero-copy ones leave when their SEND is
            // done, `on_send_done`).
            self.queue.output_sent();
        }
    }
}

impl Driver for RdmaQueueCore {
    type Io<'a> = dyn Memory + 'a;

    #[inline]
    fn parts(&mut self) -> (&mut Queue, &mut Duties) {
        (&mut self.queue, &mut self.duties)
    }

    /// RDMA READs waiting for a buffer go first, then the finished commands' WRITEs and SENDs.
    fn flush(&mut self, mem: &mut (dyn Memory + '_)) {
        self.start_reads(mem);
        self.flush_completions(mem);
    }

    /// The queue's slots and buffers, and this core's tables when nothing is in flight.
    fn release_idle(&mut self, _: &mut (dyn Memory + '_)) {
        self.queue.release_idle_buffers();
        if self.reads.is_empty() && self.sends.is_empty() && self.reads_waiting.is_empty() {
            self.reads = HashMap::new();
            self.sends = HashMap::new();
            self.reads_waiting = VecDeque::new();
        }
        if self.remote.is_empty() {
            self.remote = HashMap::new();
        }
        if self.ops.is_empty() {
            self.ops = Vec::new();
        }
    }
}

fn no_staging() -> BackendError {
    BackendError::Io(std::io::Error::other("no registered staging memory"))
}

/// The local segment a read's data leaves from: the namespace's registered memory itself, or a
/// staging buffer the backend reads into.
fn stage_read(
    mem: &mut dyn Memory,
    backend: &Arc<dyn Backend>,
    offset: u64,
    len: usize,
    ctx: &mut SendCtx,
) -> Result<Local, BackendError> {
    if let Some(p) = backend.memory(offset, len)
        && let Some(lkey) = mem.lkey(p.as_ptr(), len)
    {
        ctx.zero_copy = true;
        return Ok(Local {
            ptr: p.as_ptr(),
            len: len as u32,
            lkey,
        });
    }
    let mut b = mem.staging(len).ok_or_else(no_staging)?;
    // SAFETY: a lent buffer is ours until released.
    let r = backend.read(offset, unsafe { &mut b.bytes_mut()[..len] });
    if let Err(e) = r {
        mem.release(b);
        return Err(e);
    }
    let l = Local {
        ptr: b.ptr.as_ptr(),
        len: len as u32,
        lkey: b.lkey,
    };
    ctx.bufs.push(b);
    Ok(l)
}
