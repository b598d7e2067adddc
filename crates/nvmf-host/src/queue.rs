//! One NVMe queue over one TCP connection: the engine under both the admin queue and the I/O
//! queues.
//!
//! Shape (a sans-IO core driven by a thin I/O shell):
//! - **Slots**: `entries - 1` preallocated command slots; the CID of a command *is* its slot
//!   index, and a free list hands them out. Each slot owns a reusable data buffer that grows to
//!   the largest transfer it has seen and is never shrunk, so steady-state I/O allocates nothing.
//! - **Submission** only appends the CapsuleCmd to the transmit buffer; the next
//!   [`Queue::try_io`] sends everything queued since the last one in one `writev`. Write data
//!   (in-capsule, or H2CData answering an R2T) of [`SPLICE_MIN`] bytes or more is not copied
//!   into the transmit buffer: it is sent from the slot's buffer, which stays pinned (not
//!   reused) until it is out, even if the command completes first ([`TxBuf`]).
//! - **Reception** reads in bulk into a receive buffer sized for the largest PDU plus a read
//!   window, and feeds `nvmf_tcp::HostConn::decode_one` until it asks for more bytes.
//! - **Never blocks writing while the controller is blocked writing to us**: writing and reading
//!   are both non-blocking (`try_write`/`try_read`), and the wait is on readiness for either.
//!
//! SQ flow control (NVMe-oF 1.1, 3.3.2): at most `entries - 1` commands are outstanding, and the
//! number the controller has not yet fetched (tail − SQHD) is tracked from each response's SQHD.
//! When the queue was connected with CATTR.DISSQFC and the controller agreed (SQHD 0xFFFF in the
//! Connect response) SQHD is ignored and C2HData SUCCESS completes a read without a response.

use std::net::SocketAddr;
use std::time::Duration;

use nvme_spec::fabrics::{ConnectCmd, ConnectData};
use nvme_spec::{CommandId, ControllerId, Cqe, QueueId, Sqe, Status};
use nvmf_tcp::{Digests, HostConn, HostConnConfig, HostEvent};
use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};
use tokio::net::TcpStream;

use crate::error::{HostError, Result};

/// A `read` is issued only with at least this much space free (bulk reads, never a few bytes at
/// a time); when less is left, the partial PDU at the head moves to the front.
const RX_READ_WINDOW: usize = 64 * 1024;
/// The receive buffer holds at least two of the largest PDUs and at least this much, so the
/// partial-PDU move above happens about once per this many bytes received, not once per PDU.
const RX_MIN_BUF: usize = 1 << 20;
/// How many write/read/decode rounds [`Queue::try_io`] runs before yielding to its caller.
const IO_BUDGET: usize = 64;
/// In-capsule data limit on the admin queue (NVMe/TCP: admin and Fabrics commands accept up to
/// 8 KiB of in-capsule data; Linux `NVME_TCP_ADMIN_CCSZ`).
pub(crate) const ADMIN_ICD_MAX: usize = 8192;
/// Write data at least this large goes to the socket from the slot's buffer (`writev`); smaller
/// data is copied into the transmit buffer (an iovec entry costs more than a small copy).
const SPLICE_MIN: usize = 2048;
/// [`TxBuf::slices`] found a spliced range outside its slot's buffer (cannot happen: a pinned
/// slot is neither reused nor resized).
const SPLICE_LOST: HostError = HostError::Unsupported("transmit buffer lost spliced write data");
/// Most iovec entries one `writev` is given.
const TX_IOV_MAX: usize = 64;
/// SQHD value meaning "SQ flow control disabled" (NVMe-oF 1.1, 3.3.2).
const SQHD_DISABLED: u16 = 0xFFFF;

/// Direction of a command's data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataDir {
    /// No data (Flush, Keep Alive, Write Zeroes...).
    None,
    /// Host to controller (Write, Dataset Management, Connect): in-capsule when it fits in the
    /// queue's in-capsule limit, otherwise on R2T with H2CData PDUs.
    ToController,
    /// Controller to host (Read, Identify, Get Log Page): C2HData PDUs.
    FromController,
}

/// One finished command, handed to the completion callback. `data` borrows the slot's buffer
/// (the bytes received for a read; empty otherwise) and is valid only during the callback.
#[derive(Debug)]
pub struct Completion<'a> {
    /// The command's CID (its slot index).
    pub cid: CommandId,
    /// The caller's tag given at submission.
    pub user: u64,
    /// The completion entry. For a read completed by C2HData SUCCESS (no CapsuleResp), a CQE
    /// with status Success and the queue's last known SQHD is synthesized.
    pub cqe: Cqe,
    /// Data received from the controller (length = bytes received).
    pub data: &'a [u8],
}

impl Completion<'_> {
    /// The command's completion status.
    pub fn status(&self) -> Status {
        self.cqe.status
    }
    /// True if the command completed with Successful Completion.
    pub fn is_success(&self) -> bool {
        self.cqe.status.is_success()
    }
}

/// Where and how to open a connection.
#[derive(Clone, Debug)]
pub(crate) struct LinkParams {
    pub addr: SocketAddr,
    pub digests: Digests,
    /// Largest C2HData DATA accepted in one PDU; bounds the receive buffer.
    pub max_c2h_data: u32,
    pub connect_timeout: Duration,
    /// TLS: the configured key (the identity and PSK are derived per queue from the NQNs).
    pub tls: Option<crate::config::TlsKey>,
}

/// What the Fabrics Connect carries.
#[derive(Clone, Debug)]
pub(crate) struct ConnectParams {
    pub qid: QueueId,
    /// SQ entries (SQSIZE + 1), ≥ 2.
    pub entries: u16,
    pub dissqfc: bool,
    pub kato_ms: u32,
    pub cntlid: ControllerId,
    pub hostid: [u8; 16],
    pub hostnqn: String,
    pub subnqn: String,
    /// In-capsule data limit for this queue (admin: 8 KiB; I/O: IOCCSZ*16 - 64).
    pub icd_max: usize,
    /// DH-HMAC-CHAP secrets, for a controller that asks for authentication.
    pub dhchap: Option<crate::config::DhchapKeys>,
}

struct Slot {
    busy: bool,
    dir: DataDir,
    /// Data sent in the capsule (no R2T expected).
    inline: bool,
    /// Transfer length of the command.
    len: usize,
    /// Bytes transferred so far: received (C2HData) or requested and sent (R2T/H2CData).
    done: usize,
    /// Some C2HData of this command failed its data digest: the command fails with Transient
    /// Transport Error whatever its response says (NVMe/TCP 1.0, 3.5).
    digest_error: bool,
    /// Pieces of `buf` waiting in the transmit buffer ([`TxBuf`]): the slot is not reused (nor
    /// its buffer touched) until they are sent.
    pins: u32,
    /// Released while pinned: goes back to the free list when unpinned.
    parked: bool,
    user: u64,
    buf: Vec<u8>,
}

impl Slot {
    fn new(prealloc: usize) -> Slot {
        Slot {
            busy: false,
            dir: DataDir::None,
            inline: false,
            len: 0,
            done: 0,
            digest_error: false,
            pins: 0,
            parked: false,
            user: 0,
            buf: vec![0; prealloc],
        }
    }
}

/// Output waiting to be sent: PDU bytes, with write data spliced in from command slots.
#[derive(Default)]
struct TxBuf {
    bytes: Vec<u8>,
    /// Slot data sent right after `bytes[..at]`, in order of `at`.
    ext: Splices,
    /// Bytes of the output, in wire order, already sent.
    sent: usize,
    /// `ext[..released]` is sent and its slots unpinned; `released_len` is its total length.
    released: usize,
    released_len: usize,
}

/// `slots[slot].buf[start..start + len]`, spliced into the output at `at`.
struct TxExt {
    at: usize,
    slot: u16,
    start: usize,
    len: usize,
}

/// The spliced pieces of a [`TxBuf`] and their total length.
#[derive(Default)]
struct Splices {
    list: Vec<TxExt>,
    len: usize,
}

impl Splices {
    /// Record `slots[slot].buf[range]` at offset `at` of the bytes (the caller pins the slot).
    fn push(&mut self, at: usize, slot: u16, range: std::ops::Range<usize>) {
        self.len += range.len();
        self.list.push(TxExt {
            at,
            slot,
            start: range.start,
            len: range.len(),
        });
    }
}

impl TxBuf {
    fn pending(&self) -> bool {
        self.sent < self.bytes.len() + self.ext.len
    }

    /// Splice `slots[slot].buf[range]` in at offset `at` of the bytes (not before any earlier
    /// splice), pinning the slot.
    fn splice_at(
        &mut self,
        slots: &mut [Slot],
        at: usize,
        slot: u16,
        range: std::ops::Range<usize>,
    ) {
        if let Some(s) = slots.get_mut(usize::from(slot)) {
            s.pins += 1;
        }
        self.ext.push(at, slot, range);
    }

    /// The unsent output in wire order, as at most `N` slices into `out`; returns how many.
    /// `None` if a spliced range is no longer inside its slot's buffer (a bug: pinned slots are
    /// not resized).
    fn slices<'a, const N: usize>(
        &'a self,
        slots: &'a [Slot],
        out: &mut [&'a [u8]; N],
    ) -> Option<usize> {
        let mut n = 0;
        let mut skip = self.sent;
        let mut push = |piece: &'a [u8]| {
            if n == N || piece.is_empty() {
                return;
            }
            if skip >= piece.len() {
                skip -= piece.len();
                return;
            }
            out[n] = &piece[skip..];
            skip = 0;
            n += 1;
        };
        let mut pos = 0;
        for e in &self.ext.list {
            push(&self.bytes[pos..e.at]);
            let buf = &slots.get(usize::from(e.slot))?.buf;
            push(buf.get(e.start..e.start.checked_add(e.len)?)?);
            pos = e.at;
        }
        push(&self.bytes[pos..]);
        Some(n)
    }

    /// `n` more bytes were sent. When that was all of it, clear the output and unpin its slots.
    /// Slots whose spliced data is all out are unpinned at once (not when the whole output is),
    /// so that a queue kept busy never runs short of slots.
    fn advance(&mut self, n: usize, st: &mut Slots) {
        self.sent += n;
        if !self.pending() {
            self.clear(st);
            return;
        }
        while let Some(e) = self.ext.list.get(self.released) {
            // Wire offset of the end of `e`: its place in the bytes plus all spliced data up to
            // and including it.
            if e.at + self.released_len + e.len > self.sent {
                break;
            }
            st.unpin(usize::from(e.slot));
            self.released_len += e.len;
            self.released += 1;
        }
    }

    /// Forget the output (sent or abandoned) and unpin the slots not unpinned yet.
    fn clear(&mut self, st: &mut Slots) {
        for e in self.ext.list.drain(..).skip(self.released) {
            st.unpin(usize::from(e.slot));
        }
        self.bytes.clear();
        self.ext.len = 0;
        self.sent = 0;
        self.released = 0;
        self.released_len = 0;
    }

    /// The unsent output as one byte vector (slot data copied in); the output is cleared.
    fn take(&mut self, st: &mut Slots) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.bytes.len() + self.ext.len);
        while self.pending() {
            let mut pieces = [&[][..]; 16];
            let Some(n) = self.slices(&st.slots, &mut pieces).filter(|&n| n > 0) else {
                break;
            };
            let mut k = 0;
            for p in &pieces[..n] {
                v.extend_from_slice(p);
                k += p.len();
            }
            self.sent += k;
        }
        self.clear(st);
        v
    }
}

/// Command slots and SQ accounting: everything about a queue except the socket.
struct Slots {
    slots: Vec<Slot>,
    /// Free slot indices (a stack: recently freed, cache-warm slots are reused first).
    free: Vec<u16>,
    in_flight: usize,
    qid: QueueId,
    /// SQ entries (SQSIZE + 1).
    entries: u16,
    sq_tail: u16,
    sq_head: u16,
    flow_control: bool,
    icd_max: usize,
}

impl Slots {
    fn new(qid: QueueId, entries: u16, icd_max: usize, prealloc: usize) -> Slots {
        let n = usize::from(entries.saturating_sub(1)).max(1);
        Slots {
            slots: (0..n).map(|_| Slot::new(prealloc)).collect(),
            free: (0..n as u16).rev().collect(),
            in_flight: 0,
            qid,
            entries,
            sq_tail: 0,
            sq_head: 0,
            flow_control: true,
            icd_max,
        }
    }

    /// Commands the controller has not fetched yet, as far as SQHD tells; never more than the
    /// outstanding count (a controller that completes without a response, or sends a stale
    /// SQHD, must not wedge the queue).
    fn sq_occupancy(&self) -> usize {
        let e = u32::from(self.entries);
        let occ = (u32::from(self.sq_tail) + e - u32::from(self.sq_head)) % e;
        (occ as usize).min(self.in_flight)
    }

    fn can_submit(&self) -> bool {
        !self.free.is_empty()
            && (!self.flow_control || self.sq_occupancy() + 1 < usize::from(self.entries))
    }

    fn release(&mut self, idx: usize) {
        let s = &mut self.slots[idx];
        s.busy = false;
        self.in_flight -= 1;
        if s.pins > 0 {
            s.parked = true;
        } else {
            self.free.push(idx as u16);
        }
    }

    /// The slot's data left the transmit buffer; a slot released meanwhile becomes free.
    fn unpin(&mut self, idx: usize) {
        let Some(s) = self.slots.get_mut(idx) else {
            return;
        };
        s.pins = s.pins.saturating_sub(1);
        if s.pins == 0 && s.parked {
            s.parked = false;
            self.free.push(idx as u16);
        }
    }

    /// The CQE of a command completed without a CapsuleResp (C2HData SUCCESS), carrying the
    /// last SQHD the controller reported.
    fn synthesized_cqe(&self, cid: u16, status: Status) -> Cqe {
        Cqe {
            dw0: 0,
            dw1: 0,
            sqhd: self.sq_head,
            sqid: self.qid.0,
            cid,
            status,
        }
    }

    /// Claim a slot for `sqe` and append its capsule (with in-capsule data when it fits) to
    /// `tx`; see [`Queue::submit`].
    #[allow(clippy::too_many_arguments)]
    fn submit(
        &mut self,
        conn: &HostConn,
        tx: &mut TxBuf,
        mut sqe: Sqe,
        dir: DataDir,
        len: usize,
        user: u64,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<Option<CommandId>> {
        if u32::try_from(len).is_err() {
            return Err(HostError::InvalidArgument(format!(
                "transfer of {len} bytes"
            )));
        }
        if !self.can_submit() {
            return Ok(None);
        }
        let dir = if len == 0 { DataDir::None } else { dir };
        let Some(idx) = self.free.pop() else {
            return Ok(None);
        };
        let icd_max = self.icd_max;
        let slots = &mut self.slots;
        let slot = &mut slots[usize::from(idx)];
        let cid = CommandId(idx);
        sqe.set_cid(cid);
        if slot.buf.len() < len {
            slot.buf.resize(len, 0);
        }
        slot.inline = false;
        match dir {
            DataDir::ToController => {
                fill(&mut slot.buf[..len]);
                if len <= icd_max {
                    slot.inline = true;
                    sqe.set_sgl_icd(len as u32);
                    if len >= SPLICE_MIN {
                        let at = conn.encode_capsule_spliced(&mut tx.bytes, &sqe, &slot.buf[..len]);
                        tx.splice_at(slots, at, idx, 0..len);
                    } else {
                        conn.encode_capsule(&mut tx.bytes, &sqe, &slot.buf[..len]);
                    }
                } else {
                    sqe.set_sgl_transport(len as u32);
                    conn.encode_capsule(&mut tx.bytes, &sqe, &[]);
                }
            }
            DataDir::FromController | DataDir::None => {
                sqe.set_sgl_transport(len as u32);
                conn.encode_capsule(&mut tx.bytes, &sqe, &[]);
            }
        }
        let slot = &mut slots[usize::from(idx)];
        slot.busy = true;
        slot.digest_error = false;
        slot.dir = dir;
        slot.len = len;
        slot.done = 0;
        slot.user = user;
        self.in_flight += 1;
        self.sq_tail = (self.sq_tail + 1) % self.entries;
        Ok(Some(cid))
    }

    /// Decode every whole PDU in `rx[*head..]`, advancing `*head` past each one handled.
    /// Returns the number of commands completed.
    fn process<F: FnMut(Completion<'_>)>(
        &mut self,
        conn: &mut HostConn,
        rx: &[u8],
        head: &mut usize,
        tx: &mut TxBuf,
        f: &mut F,
    ) -> Result<usize> {
        let mut completed = 0;
        while *head < rx.len() {
            let Some((ev, used)) = conn.decode_one(&rx[*head..])? else {
                break;
            };
            completed += self.handle_event(ev, conn, tx, f)?;
            *head += used;
        }
        Ok(completed)
    }

    fn busy_slot(&mut self, cid: u16, reason: &'static str) -> Result<&mut Slot> {
        match self.slots.get_mut(usize::from(cid)) {
            Some(s) if s.busy => Ok(s),
            _ => Err(HostError::UnexpectedPdu { reason, cid }),
        }
    }

    /// Apply one decoded event. Returns the number of commands completed (0 or 1).
    fn handle_event<F: FnMut(Completion<'_>)>(
        &mut self,
        ev: HostEvent<'_>,
        conn: &HostConn,
        tx: &mut TxBuf,
        f: &mut F,
    ) -> Result<usize> {
        match ev {
            HostEvent::Response(mut cqe) => {
                if self.flow_control && cqe.sqhd != SQHD_DISABLED && cqe.sqhd < self.entries {
                    self.sq_head = cqe.sqhd;
                }
                let slot =
                    self.busy_slot(cqe.cid, "response for a command that is not outstanding")?;
                if slot.digest_error {
                    cqe.status = Status::TRANSIENT_TRANSPORT;
                }
                if cqe.status.is_success()
                    && slot.dir != DataDir::None
                    && !slot.inline
                    && slot.done != slot.len
                {
                    return Err(HostError::UnexpectedPdu {
                        reason: "successful response before all data was transferred",
                        cid: cqe.cid,
                    });
                }
                let data: &[u8] = match slot.dir {
                    DataDir::FromController if !slot.digest_error => &slot.buf[..slot.done],
                    DataDir::FromController | DataDir::None | DataDir::ToController => &[],
                };
                f(Completion {
                    cid: CommandId(cqe.cid),
                    user: slot.user,
                    cqe,
                    data,
                });
                self.release(usize::from(cqe.cid));
                Ok(1)
            }
            HostEvent::C2hData {
                cccid,
                datao,
                data,
                last,
                success,
            } => {
                // Used only if this PDU completes the command (SUCCESS flag).
                let cqe = self.synthesized_cqe(cccid, Status::SUCCESS);
                let slot =
                    self.busy_slot(cccid, "C2HData for a command that is not outstanding")?;
                if slot.dir != DataDir::FromController {
                    return Err(HostError::UnexpectedPdu {
                        reason: "C2HData for a command without read data",
                        cid: cccid,
                    });
                }
                if datao as usize != slot.done {
                    return Err(HostError::UnexpectedPdu {
                        reason: "C2HData offset out of order",
                        cid: cccid,
                    });
                }
                let end = slot.done + data.len();
                if end > slot.len {
                    return Err(HostError::UnexpectedPdu {
                        reason: "C2HData beyond the command's length",
                        cid: cccid,
                    });
                }
                // The whole read in one PDU that also completes it: the caller gets the data
                // straight from the receive buffer, no copy.
                let zero_copy = success && last && slot.done == 0 && end == slot.len;
                if !zero_copy {
                    slot.buf[slot.done..end].copy_from_slice(data);
                    slot.done = end;
                    if !success {
                        return Ok(0);
                    }
                    // C2HData SUCCESS: completed successfully, no CapsuleResp follows (NVMe/TCP
                    // 1.0, 3.3.8.1; legal only with SQ flow control disabled, tolerated otherwise
                    // since the outstanding count bounds the SQ anyway).
                    if !last || slot.done != slot.len {
                        return Err(HostError::UnexpectedPdu {
                            reason: "C2HData SUCCESS before the last byte of the transfer",
                            cid: cccid,
                        });
                    }
                }
                let data = if zero_copy {
                    data
                } else {
                    &slot.buf[..slot.done]
                };
                f(Completion {
                    cid: CommandId(cccid),
                    user: slot.user,
                    cqe,
                    data,
                });
                self.release(usize::from(cccid));
                Ok(1)
            }
            HostEvent::C2hDataDigestError {
                cccid,
                datao,
                datal,
                last,
                success,
            } => {
                let cqe = self.synthesized_cqe(cccid, Status::TRANSIENT_TRANSPORT);
                let slot =
                    self.busy_slot(cccid, "C2HData for a command that is not outstanding")?;
                let end = (datao as usize).saturating_add(datal as usize);
                if slot.dir != DataDir::FromController
                    || datao as usize != slot.done
                    || end > slot.len
                {
                    return Err(HostError::UnexpectedPdu {
                        reason: "C2HData out of the command's range",
                        cid: cccid,
                    });
                }
                tracing::warn!(cid = cccid, datao, datal, "C2HData data digest mismatch");
                slot.done = end;
                slot.digest_error = true;
                if !(success && last) {
                    return Ok(0);
                }
                f(Completion {
                    cid: CommandId(cccid),
                    user: slot.user,
                    cqe,
                    data: &[],
                });
                self.release(usize::from(cccid));
                Ok(1)
            }
            HostEvent::R2t(r2t) => {
                let slot =
                    self.busy_slot(r2t.cccid, "R2T for a command that is not outstanding")?;
                if slot.dir != DataDir::ToController || slot.inline {
                    return Err(HostError::UnexpectedPdu {
                        reason: "R2T for a command with no data to send",
                        cid: r2t.cccid,
                    });
                }
                let start = r2t.r2to as usize;
                let end = start.saturating_add(r2t.r2tl as usize);
                if start != slot.done || r2t.r2tl == 0 || end > slot.len {
                    return Err(HostError::UnexpectedPdu {
                        reason: "R2T offset or length out of range",
                        cid: r2t.cccid,
                    });
                }
                slot.done = end;
                if end - start < SPLICE_MIN {
                    let data = &slot.buf[start..end];
                    conn.encode_h2c_data(&mut tx.bytes, r2t.cccid, r2t.ttag, r2t.r2to, data);
                    return Ok(0);
                }
                // Zero-copy: the PDUs' data stays in the slot, pinned until it is sent.
                let cccid = r2t.cccid;
                let mut pins = 0;
                let data = &slot.buf[start..end];
                let (bytes, ext) = (&mut tx.bytes, &mut tx.ext);
                conn.encode_h2c_data_spliced(bytes, cccid, r2t.ttag, r2t.r2to, data, |at, r| {
                    pins += 1;
                    ext.push(at, cccid, start + r.start..start + r.end);
                });
                slot.pins += pins;
                Ok(0)
            }
            HostEvent::TermReq { fes, fei } => Err(HostError::TermReq { fes, fei }),
            HostEvent::Established { .. } => Err(HostError::UnexpectedPdu {
                reason: "second ICResp",
                cid: 0,
            }),
        }
    }
}

/// What a failed DH-HMAC-CHAP exchange means, in words a person can act on.
fn auth_failure_text(k: &nvme_auth::HostErrorKind) -> String {
    use nvme_auth::{FailureReason, HostErrorKind};
    let hint = match k {
        HostErrorKind::ControllerFailure { explanation, .. } => {
            match FailureReason::from_u8(*explanation) {
                Some(FailureReason::Failed) => {
                    "the controller rejected our response: wrong --dhchap-secret for this host NQN?"
                }
                Some(FailureReason::HashUnusable) => "no hash function both sides accept",
                Some(FailureReason::DhGroupUnusable) => "no DH group both sides accept",
                Some(FailureReason::ConcatMismatch) => "secure channel concatenation mismatch",
                _ => "",
            }
        }
        HostErrorKind::ControllerResponseMismatch => {
            "the controller's response is wrong: wrong --dhchap-ctrl-secret, or not the \
             controller we meant"
        }
        _ => "",
    };
    if hint.is_empty() {
        k.to_string()
    } else {
        format!("{hint} ({k})")
    }
}

fn tls_err(e: nvmf_tls::TlsError) -> HostError {
    HostError::Tls(e.to_string())
}

/// The socket, the sans-IO connection and the byte buffers.
struct Link {
    stream: TcpStream,
    /// TLS session (records in and out of `stream`), when the queue uses TLS.
    tls: Option<Box<nvmf_tls::TlsClient>>,
    /// TLS: the session may hold decrypted bytes the receive buffer had no room for.
    tls_more: bool,
    conn: HostConn,
    rx: Vec<u8>,
    rx_head: usize,
    rx_tail: usize,
    tx: TxBuf,
    peer: SocketAddr,
    maxh2cdata: u32,
    /// Busy polling: read with a raw non-blocking `recv`, not through tokio's readiness cache
    /// (which only learns of new data when the runtime next polls epoll, i.e. at a yield).
    raw_reads: bool,
}

impl Link {
    /// TCP connect, TLS handshake (if `tls`: identity and PSK), ICReq → ICResp.
    async fn open(p: &LinkParams, tls: Option<(Vec<u8>, nvmf_tls::psk::TlsPsk)>) -> Result<Link> {
        let stream = tokio::time::timeout(p.connect_timeout, TcpStream::connect(p.addr))
            .await
            .map_err(|_| HostError::Timeout("TCP connect"))??;
        stream.set_nodelay(true)?;
        let conn = HostConn::new(HostConnConfig {
            digests: p.digests,
            hpda: 0,
            maxr2t: 0,
            max_c2h_data: p.max_c2h_data,
        });
        let tls = match tls {
            None => None,
            Some((identity, psk)) => {
                let cfg = nvmf_tls::TlsClientConfig::new().map_err(tls_err)?;
                Some(Box::new(
                    nvmf_tls::TlsClient::new(&cfg, &identity, psk).map_err(tls_err)?,
                ))
            }
        };
        let mut link = Link {
            stream,
            tls,
            tls_more: false,
            conn,
            rx: Vec::new(),
            rx_head: 0,
            rx_tail: 0,
            tx: TxBuf {
                bytes: Vec::with_capacity(64 * 1024),
                ..TxBuf::default()
            },
            peer: p.addr,
            maxh2cdata: 0,
            raw_reads: false,
        };
        if link.tls.is_some() {
            tokio::time::timeout(p.connect_timeout, link.tls_handshake())
                .await
                .map_err(|_| HostError::Timeout("TLS handshake"))??;
        }
        tokio::time::timeout(p.connect_timeout, link.initialize(p.digests))
            .await
            .map_err(|_| HostError::Timeout("ICReq/ICResp exchange"))??;
        Ok(link)
    }

    /// Send ClientHello, read until the handshake is done.
    async fn tls_handshake(&mut self) -> Result<()> {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let Some(t) = self.tls.as_mut() else {
                return Ok(());
            };
            let out = t.take_cipher();
            if !out.is_empty() {
                self.stream.write_all(&out).await?;
            }
            let Some(t) = self.tls.as_mut() else {
                return Ok(());
            };
            if t.handshake_done() {
                return Ok(());
            }
            let n = self.stream.read(&mut buf).await?;
            if n == 0 {
                return Err(HostError::Tls(
                    "the target closed the connection during the TLS handshake (no TLS on this \
                     port, or no key for this host and subsystem?)"
                        .into(),
                ));
            }
            t.feed(&buf[..n]).map_err(tls_err)?;
        }
    }

    /// Send `data` (through TLS when on), waiting for the socket.
    async fn send_all(&mut self, data: &[u8]) -> Result<()> {
        match self.tls.as_mut() {
            None => self.stream.write_all(data).await?,
            Some(t) => {
                t.write_plain(&[data]).map_err(tls_err)?;
                let out = t.take_cipher();
                self.stream.write_all(&out).await?;
            }
        }
        Ok(())
    }

    /// Receive some bytes (decrypted when TLS is on), waiting for the socket. 0: closed.
    async fn recv_some(&mut self, buf: &mut [u8]) -> Result<usize> {
        if self.tls.is_none() {
            return Ok(self.stream.read(buf).await?);
        }
        let mut cipher = vec![0u8; 16 * 1024];
        loop {
            let Some(t) = self.tls.as_mut() else {
                return Ok(0);
            };
            let n = t.read_plain(buf).map_err(tls_err)?;
            if n > 0 {
                return Ok(n);
            }
            if t.peer_closed() {
                // close_notify: nothing more comes (the session discards what follows).
                return Ok(0);
            }
            if t.read_paused() {
                // Records without plaintext were opened up to the session's budget: send its
                // KeyUpdate answers, then go on with what is buffered.
                let out = t.take_cipher();
                self.stream.write_all(&out).await?;
                continue;
            }
            let k = self.stream.read(&mut cipher).await?;
            if k == 0 {
                return Ok(0);
            }
            let Some(t) = self.tls.as_mut() else {
                return Ok(0);
            };
            t.feed(&cipher[..k]).map_err(tls_err)?;
        }
    }

    async fn initialize(&mut self, want: Digests) -> Result<()> {
        let mut icreq = Vec::new();
        self.conn.encode_icreq(&mut icreq);
        self.send_all(&icreq).await?;
        // ICResp is 128 bytes; nothing else may arrive before our first capsule.
        let mut buf = vec![0u8; 4096];
        let mut have = 0;
        let (digests, maxh2cdata, used) = loop {
            let n = self.recv_some(&mut buf[have..]).await?;
            if n == 0 {
                return Err(if self.tls.is_none() {
                    HostError::Negotiation(
                        "the target closed the connection without answering the ICReq (a port \
                         that requires TLS? try --tls --tls-key)"
                            .into(),
                    )
                } else {
                    HostError::Disconnected
                });
            }
            have += n;
            match self.conn.decode_one(&buf[..have])? {
                None if have < buf.len() => continue,
                None => {
                    return Err(HostError::UnexpectedPdu {
                        reason: "oversized ICResp",
                        cid: 0,
                    });
                }
                Some((
                    HostEvent::Established {
                        digests,
                        maxh2cdata,
                        ..
                    },
                    used,
                )) => break (digests, maxh2cdata, used),
                Some((HostEvent::TermReq { fes, fei }, _)) => {
                    return Err(HostError::TermReq { fes, fei });
                }
                Some(_) => {
                    return Err(HostError::UnexpectedPdu {
                        reason: "expected ICResp",
                        cid: 0,
                    });
                }
            }
        };
        if digests != want {
            return Err(HostError::Negotiation(format!(
                "asked for header digest {} / data digest {}, controller granted {} / {}",
                want.hdgst, want.ddgst, digests.hdgst, digests.ddgst
            )));
        }
        self.maxh2cdata = maxh2cdata;
        self.rx = vec![0u8; (2 * self.conn.max_pdu_len()).max(RX_MIN_BUF) + RX_READ_WINDOW];
        let rest = &buf[used..have];
        self.rx[..rest.len()].copy_from_slice(rest);
        self.rx_tail = rest.len();
        Ok(())
    }

    fn tx_pending(&self) -> bool {
        self.tx.pending()
            || self
                .tls
                .as_ref()
                .is_some_and(|t| !t.pending_cipher().is_empty())
    }

    /// TLS: encrypt the pending output (one batch; slot data straight into the records), then
    /// send what the socket takes.
    fn try_write_tls(&mut self, st: &mut Slots) -> Result<usize> {
        let Some(t) = self.tls.as_mut() else {
            return Ok(0);
        };
        let mut n = 0;
        while self.tx.pending() {
            let mut pieces = [&[][..]; TX_IOV_MAX];
            let k = self.tx.slices(&st.slots, &mut pieces).ok_or(SPLICE_LOST)?;
            let len: usize = pieces[..k].iter().map(|p| p.len()).sum();
            if len == 0 {
                return Err(SPLICE_LOST);
            }
            t.write_plain(&pieces[..k]).map_err(tls_err)?;
            n += len;
            self.tx.advance(len, st);
        }
        loop {
            let p = t.pending_cipher();
            if p.is_empty() {
                break;
            }
            match self.stream.try_write(p) {
                Ok(k) => {
                    t.consume_cipher(k);
                    n = n.max(1);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e.into()),
            }
        }
        Ok(n)
    }

    /// TLS: decrypted bytes the session holds, then ciphertext from the socket.
    fn try_read_tls(&mut self) -> Result<(usize, bool)> {
        let Some(t) = self.tls.as_mut() else {
            return Ok((0, true));
        };
        let mut got = 0;
        let mut fed = false;
        loop {
            let space = &mut self.rx[self.rx_tail..];
            if space.is_empty() {
                self.tls_more = true;
                return Ok((got, false));
            }
            let n = t.read_plain(space).map_err(tls_err)?;
            if n > 0 {
                self.rx_tail += n;
                got += n;
                continue;
            }
            if t.peer_closed() {
                // The target's close_notify: what came before it is handed over first; the
                // session discards anything after it, and the queue ends.
                if got > 0 {
                    return Ok((got, true));
                }
                return Err(HostError::Disconnected);
            }
            if t.read_paused() {
                // The session bounded its work (records without plaintext, KeyUpdate answers
                // not yet sent): come back without waiting for the socket, after sending.
                self.tls_more = true;
                return Ok((got, false));
            }
            if fed {
                break;
            }
            // Ciphertext goes straight into the session's buffer, where its records are
            // opened in place.
            let space = t.cipher_space();
            let room = space.len();
            let r = if self.raw_reads {
                recv_nonblocking(&self.stream, space)
            } else {
                self.stream.try_read(space)
            };
            match r {
                Ok(0) => return Err(HostError::Disconnected),
                Ok(k) => {
                    t.cipher_filled(k).map_err(tls_err)?;
                    fed = k < room;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e.into()),
            }
        }
        self.tls_more = false;
        Ok((got, true))
    }

    /// Make room at the end of the receive buffer: start over when it is empty, move the
    /// partial PDU to the front when less than a read window is left.
    fn compact_rx(&mut self) {
        if self.rx_head == self.rx_tail {
            self.rx_head = 0;
            self.rx_tail = 0;
        } else if self.rx.len() - self.rx_tail < RX_READ_WINDOW {
            self.rx.copy_within(self.rx_head..self.rx_tail, 0);
            self.rx_tail -= self.rx_head;
            self.rx_head = 0;
        }
    }

    /// Write as much of the pending output as the socket takes now (one `writev`). Returns
    /// bytes written.
    fn try_write(&mut self, st: &mut Slots) -> Result<usize> {
        if self.tls.is_some() {
            return self.try_write_tls(st);
        }
        if !self.tx.pending() {
            return Ok(0);
        }
        let mut pieces = [&[][..]; TX_IOV_MAX];
        let k = self.tx.slices(&st.slots, &mut pieces).ok_or(SPLICE_LOST)?;
        let mut iov = [std::io::IoSlice::new(&[]); TX_IOV_MAX];
        for (v, p) in iov.iter_mut().zip(&pieces[..k]) {
            *v = std::io::IoSlice::new(p);
        }
        match self.stream.try_write_vectored(&iov[..k]) {
            Ok(n) => {
                self.tx.advance(n, st);
                Ok(n)
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(0),
            Err(e) => Err(e.into()),
        }
    }

    /// Read whatever the socket has into the receive buffer. Returns bytes read, and whether
    /// the socket was drained (the read came back shorter than the space offered).
    fn try_read(&mut self) -> Result<(usize, bool)> {
        self.compact_rx();
        if self.tls.is_some() {
            return self.try_read_tls();
        }
        let space = self.rx.len() - self.rx_tail;
        let r = if self.raw_reads {
            recv_nonblocking(&self.stream, &mut self.rx[self.rx_tail..])
        } else {
            self.stream.try_read(&mut self.rx[self.rx_tail..])
        };
        match r {
            Ok(0) => Err(HostError::Disconnected),
            Ok(n) => {
                self.rx_tail += n;
                Ok((n, n < space))
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok((0, true)),
            Err(e) => Err(e.into()),
        }
    }
}

/// One `recv(MSG_DONTWAIT)` on the socket, bypassing tokio's readiness cache.
fn recv_nonblocking(stream: &TcpStream, buf: &mut [u8]) -> std::io::Result<usize> {
    use std::os::fd::AsRawFd;
    if buf.is_empty() {
        return Err(std::io::ErrorKind::WouldBlock.into());
    }
    // SAFETY: `buf` is a valid, writable slice for its whole length; the descriptor belongs to
    // `stream`, which is borrowed for the duration of the call.
    let n = unsafe {
        libc::recv(
            stream.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// One queue: a connection, its slots, and the SQ state.
pub(crate) struct Queue {
    link: Link,
    st: Slots,
    broken: bool,
}

impl Queue {
    /// Open the connection and run the Fabrics Connect for `cp`. Returns the queue and the
    /// controller ID from the Connect response.
    pub(crate) async fn connect(
        lp: &LinkParams,
        cp: &ConnectParams,
        prealloc: usize,
    ) -> Result<(Queue, ControllerId)> {
        if cp.entries < 2 {
            return Err(HostError::InvalidArgument(format!(
                "queue size {} (need at least 2 entries)",
                cp.entries
            )));
        }
        let tls = match &lp.tls {
            None => None,
            Some(k) => Some(
                k.for_queue(&cp.hostnqn, &cp.subnqn)
                    .map_err(HostError::InvalidArgument)?,
            ),
        };
        let link = Link::open(lp, tls).await?;
        let mut q = Queue {
            link,
            st: Slots::new(cp.qid, cp.entries, cp.icd_max, prealloc),
            broken: false,
        };
        let cqe = fabrics_connect(&mut q, lp.connect_timeout, cp).await?;
        if cp.dissqfc && cqe.sqhd == SQHD_DISABLED {
            q.st.flow_control = false;
        } else if cqe.sqhd < cp.entries {
            q.st.sq_head = cqe.sqhd;
        }
        tracing::debug!(peer = %lp.addr, qid = cp.qid.0, cntlid = cqe.dw0 & 0xFFFF, flow_control = q.st.flow_control, "queue connected");
        Ok((q, ControllerId((cqe.dw0 & 0xFFFF) as u16)))
    }

    pub(crate) fn qid(&self) -> QueueId {
        self.st.qid
    }
    pub(crate) fn peer(&self) -> SocketAddr {
        self.link.peer
    }
    pub(crate) fn in_flight(&self) -> usize {
        self.st.in_flight
    }
    /// Most commands that can be outstanding at once.
    pub(crate) fn capacity(&self) -> usize {
        self.st.slots.len()
    }
    pub(crate) fn flow_control(&self) -> bool {
        self.st.flow_control
    }
    pub(crate) fn icd_max(&self) -> usize {
        self.st.icd_max
    }
    pub(crate) fn maxh2cdata(&self) -> u32 {
        self.link.maxh2cdata
    }
    pub(crate) fn digests(&self) -> Digests {
        self.link.conn.digests()
    }
    pub(crate) fn is_broken(&self) -> bool {
        self.broken
    }
    pub(crate) fn can_submit(&self) -> bool {
        !self.broken && self.st.can_submit()
    }

    /// Queue a command for sending. The CID and SGL of `sqe` are filled in here. For
    /// [`DataDir::ToController`], `fill` writes the `len` bytes to send into the slot's buffer
    /// (it is not called otherwise). Returns `Ok(None)` when the queue is full.
    pub(crate) fn submit(
        &mut self,
        sqe: Sqe,
        dir: DataDir,
        len: usize,
        user: u64,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<Option<CommandId>> {
        if self.broken {
            return Err(HostError::Disconnected);
        }
        let link = &mut self.link;
        self.st
            .submit(&link.conn, &mut link.tx, sqe, dir, len, user, fill)
    }

    /// Do all the I/O possible without waiting: send pending output, read what has arrived,
    /// decode it and call `f` for each completed command. Returns the number completed.
    /// On error the queue is broken: every later call fails with [`HostError::Disconnected`].
    pub(crate) fn try_io<F: FnMut(Completion<'_>)>(&mut self, f: &mut F) -> Result<usize> {
        if self.broken {
            return Err(HostError::Disconnected);
        }
        let r = self.try_io_inner(f);
        if let Err(e) = &r {
            self.break_link(e);
        }
        r
    }

    fn try_io_inner<F: FnMut(Completion<'_>)>(&mut self, f: &mut F) -> Result<usize> {
        let mut completed = 0;
        for _ in 0..IO_BUDGET {
            let wrote = self.link.try_write(&mut self.st)?;
            let (read, drained) = self.link.try_read()?;
            if read > 0 {
                completed += self.process(f)?;
            }
            // A short read means the socket was empty at that moment: do not spend another
            // syscall to learn it again, unless processing produced output (H2CData for R2Ts).
            if (wrote == 0 && read == 0) || (drained && !self.link.tx_pending()) {
                break;
            }
        }
        Ok(completed)
    }

    /// Decode every whole PDU in the receive buffer.
    fn process<F: FnMut(Completion<'_>)>(&mut self, f: &mut F) -> Result<usize> {
        let link = &mut self.link;
        let rx = &link.rx[..link.rx_tail];
        self.st
            .process(&mut link.conn, rx, &mut link.rx_head, &mut link.tx, f)
    }

    /// Mark the queue dead; for a protocol error, tell the controller why (best effort).
    fn break_link(&mut self, e: &HostError) {
        if self.broken {
            return;
        }
        self.broken = true;
        tracing::debug!(peer = %self.link.peer, qid = self.st.qid.0, error = %e, "queue failed");
        if let HostError::Protocol(p) = e
            && self.link.tls.is_none()
        {
            let mut out = Vec::new();
            self.link
                .conn
                .encode_term_req(&mut out, p.fes as u16, p.fei, p.header());
            let _ = self.link.stream.try_write(&out);
        }
    }

    /// Wait until the socket can make progress (readable, or writable while output is pending).
    /// Cancel-safe.
    pub(crate) async fn wait_ready(&self) -> Result<()> {
        if self.link.tls_more {
            // Decrypted bytes wait in the TLS session: no need to wait for the socket.
            return Ok(());
        }
        let mut interest = Interest::READABLE;
        if self.link.tx_pending() {
            interest |= Interest::WRITABLE;
        }
        self.link.stream.ready(interest).await?;
        Ok(())
    }

    /// See [`drive_poll`].
    pub(crate) async fn poll<F: FnMut(Completion<'_>)>(
        &mut self,
        f: &mut F,
        idle_timeout: Duration,
        busy: bool,
    ) -> Result<usize> {
        self.link.raw_reads = busy;
        drive_poll(self, f, idle_timeout, busy).await
    }

    /// See [`drive_execute`].
    pub(crate) async fn execute(
        &mut self,
        sqe: Sqe,
        dir: DataDir,
        out: &[u8],
        in_len: usize,
    ) -> Result<(Cqe, Vec<u8>)> {
        drive_execute(self, sqe, dir, out, in_len).await
    }

    /// Forget every outstanding command (calling `f` with each one's user tag) and mark the
    /// queue dead: once commands are abandoned their CIDs cannot be reused safely.
    pub(crate) fn fail_in_flight(&mut self, mut f: impl FnMut(u64)) {
        if !self.broken {
            self.break_link(&HostError::Disconnected);
        }
        for idx in 0..self.st.slots.len() {
            if self.st.slots[idx].busy {
                f(self.st.slots[idx].user);
                self.st.release(idx);
            }
        }
        // The output will never be sent: its slots are free again.
        self.link.tx.clear(&mut self.st);
    }
}

/// What the generic driving loops ([`drive_poll`], [`drive_execute`], [`fabrics_connect`]) need
/// of a queue: the TCP queue and the RDMA queue implement it; calls are statically dispatched.
pub(crate) trait Driver {
    /// Do all the I/O possible without waiting; completions go to `f`.
    fn try_io<F: FnMut(Completion<'_>)>(&mut self, f: &mut F) -> Result<usize>;
    /// Nothing outstanding and nothing left to send.
    fn idle(&self) -> bool;
    fn in_flight(&self) -> usize;
    /// Wait until the transport can make progress (cancel-safe).
    fn wait_ready(&mut self) -> impl std::future::Future<Output = Result<()>>;
    /// Mark the queue dead after `e`.
    fn break_link(&mut self, e: &HostError);
    fn submit(
        &mut self,
        sqe: Sqe,
        dir: DataDir,
        len: usize,
        user: u64,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<Option<CommandId>>;
}

impl Driver for Queue {
    fn try_io<F: FnMut(Completion<'_>)>(&mut self, f: &mut F) -> Result<usize> {
        Queue::try_io(self, f)
    }
    fn idle(&self) -> bool {
        self.st.in_flight == 0 && !self.link.tx_pending()
    }
    fn in_flight(&self) -> usize {
        self.st.in_flight
    }
    async fn wait_ready(&mut self) -> Result<()> {
        Queue::wait_ready(self).await
    }
    fn break_link(&mut self, e: &HostError) {
        Queue::break_link(self, e)
    }
    fn submit(
        &mut self,
        sqe: Sqe,
        dir: DataDir,
        len: usize,
        user: u64,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<Option<CommandId>> {
        Queue::submit(self, sqe, dir, len, user, fill)
    }
}

/// Drive I/O until at least one command completes. Returns 0 at once when nothing is in
/// flight and nothing is left to send. With commands in flight, `idle_timeout` bounds how
/// long the controller may stay silent before the queue is declared dead. `busy`: never
/// sleep; retry the socket, yielding to the thread's other tasks every few attempts.
pub(crate) async fn drive_poll<Q: Driver, F: FnMut(Completion<'_>)>(
    q: &mut Q,
    f: &mut F,
    idle_timeout: Duration,
    busy: bool,
) -> Result<usize> {
    // Busy mode: attempts between yields to the runtime (and clock reads); a yield costs a
    // trip through tokio's driver, a miss only one raw `recv`.
    const SPINS_PER_YIELD: u32 = 16;
    let mut since: Option<std::time::Instant> = None;
    let mut spins = 0u32;
    loop {
        let n = q.try_io(f)?;
        if n > 0 {
            // Under sustained load there is always something to read and this future never
            // waits; spend tokio's cooperative budget so other queues on the same thread run.
            tokio::task::coop::consume_budget().await;
            return Ok(n);
        }
        if q.idle() {
            return Ok(0);
        }
        let waited = if busy {
            spins += 1;
            if spins < SPINS_PER_YIELD {
                std::hint::spin_loop();
                continue;
            }
            spins = 0;
            let start = *since.get_or_insert_with(std::time::Instant::now);
            if start.elapsed() > idle_timeout {
                Err(HostError::Timeout("no response from the controller"))
            } else {
                tokio::task::yield_now().await;
                Ok(())
            }
        } else {
            match tokio::time::timeout(idle_timeout, q.wait_ready()).await {
                Ok(r) => r,
                Err(_) => Err(HostError::Timeout("no response from the controller")),
            }
        };
        if let Err(e) = waited {
            q.break_link(&e);
            return Err(e);
        }
    }
}

/// Run one command alone on the queue and wait for it: the status is not checked.
pub(crate) async fn drive_execute<Q: Driver>(
    q: &mut Q,
    sqe: Sqe,
    dir: DataDir,
    out: &[u8],
    in_len: usize,
) -> Result<(Cqe, Vec<u8>)> {
    if q.in_flight() != 0 {
        return Err(HostError::QueueBusy);
    }
    let len = match dir {
        DataDir::ToController => out.len(),
        DataDir::FromController => in_len,
        DataDir::None => 0,
    };
    q.submit(sqe, dir, len, 0, |b| b.copy_from_slice(out))?
        .ok_or(HostError::QueueBusy)?;
    let mut result = None;
    while result.is_none() {
        drive_poll(
            q,
            &mut |c: Completion<'_>| result = Some((c.cqe, c.data.to_vec())),
            Duration::from_secs(3600), // bounded by the caller's timeout
            false,
        )
        .await?;
    }
    result.ok_or(HostError::Disconnected)
}

/// Fabrics Connect on a fresh queue (and DH-HMAC-CHAP when the controller asks for it), each
/// step bounded by `timeout`. Returns the Connect response (CNTLID in DW0 15:0, SQHD).
pub(crate) async fn fabrics_connect<Q: Driver>(
    q: &mut Q,
    timeout: Duration,
    cp: &ConnectParams,
) -> Result<Cqe> {
    let sqe = ConnectCmd {
        recfmt: 0,
        qid: cp.qid,
        sqsize: cp.entries - 1,
        cattr: if cp.dissqfc { 1 << 2 } else { 0 },
        kato: cp.kato_ms,
    }
    .to_sqe(CommandId(0));
    let data = ConnectData {
        hostid: cp.hostid,
        cntlid: cp.cntlid,
        subnqn: cp.subnqn.clone(),
        hostnqn: cp.hostnqn.clone(),
    }
    .encode();
    let (cqe, _) = tokio::time::timeout(
        timeout,
        drive_execute(q, sqe, DataDir::ToController, &data, 0),
    )
    .await
    .map_err(|_| HostError::Timeout("Fabrics Connect"))??;
    if !cqe.status.is_success() {
        return Err(HostError::ConnectRejected {
            status: cqe.status,
            dw0: cqe.dw0,
        });
    }
    // Connect response DW0: bits 15:0 CNTLID, bit 17 ATR (authentication required).
    if cqe.dw0 & (1 << 17) != 0 {
        let Some(keys) = &cp.dhchap else {
            return Err(HostError::Auth(
                "the controller requires DH-HMAC-CHAP authentication; give the host's secret \
                 (--dhchap-secret)"
                    .into(),
            ));
        };
        tokio::time::timeout(timeout, authenticate(q, cp, keys))
            .await
            .map_err(|_| HostError::Timeout("DH-HMAC-CHAP authentication"))??;
    }
    Ok(cqe)
}

/// DH-HMAC-CHAP on this queue (NVMe Base 2.x 8.3.4.5): Negotiate, Challenge, Reply,
/// Success1 and, bidirectionally, Success2 — or the Failure2 the exchange calls for.
async fn authenticate<Q: Driver>(
    q: &mut Q,
    cp: &ConnectParams,
    keys: &crate::config::DhchapKeys,
) -> Result<()> {
    use nvme_auth::host::RECEIVE_ALLOC_LEN;
    let cfg = std::sync::Arc::new(nvme_auth::AuthConfig::new(
        &keys.host,
        keys.ctrl.as_ref(),
        &cp.hostnqn,
        &cp.subnqn,
    ));
    let mut a = nvme_auth::HostAuth::with_os_random(cfg);
    let negotiate = a.start(cp.qid.0);
    auth_send(q, &negotiate).await?;
    let challenge = auth_receive(q, RECEIVE_ALLOC_LEN).await?;
    let reply = match a.handle_challenge(&challenge) {
        Ok(r) => r,
        Err(e) => return Err(auth_failed(q, e).await),
    };
    auth_send(q, &reply).await?;
    let success1 = auth_receive(q, RECEIVE_ALLOC_LEN).await?;
    match a.handle_success1(&success1) {
        Ok(Some(success2)) => auth_send(q, &success2).await?,
        Ok(None) => {}
        Err(e) => return Err(auth_failed(q, e).await),
    }
    if let Some((hash, group)) = a.negotiated() {
        tracing::debug!(qid = cp.qid.0, %hash, dhgroup = %group.name(), bidirectional = keys.ctrl.is_some(), "authenticated (DH-HMAC-CHAP)");
    }
    Ok(())
}

/// Send the Failure2 the host's side calls for (best effort), and say why.
async fn auth_failed<Q: Driver>(q: &mut Q, e: nvme_auth::HostError) -> HostError {
    if let Some(f2) = &e.failure2 {
        let _ = auth_send(q, f2).await;
    }
    HostError::Auth(auth_failure_text(&e.kind))
}

async fn auth_send<Q: Driver>(q: &mut Q, payload: &[u8]) -> Result<()> {
    let mut sqe = Sqe::new(nvme_spec::opcode::admin::FABRICS, CommandId(0));
    sqe.set_fctype(nvme_spec::opcode::fctype::AUTH_SEND);
    sqe.set_cdw(10, nvme_auth::msg::command_cdw10());
    sqe.set_cdw(11, payload.len() as u32);
    let (cqe, _) = drive_execute(q, sqe, DataDir::ToController, payload, 0).await?;
    if !cqe.status.is_success() {
        return Err(HostError::Status(cqe.status));
    }
    Ok(())
}

async fn auth_receive<Q: Driver>(q: &mut Q, al: u32) -> Result<Vec<u8>> {
    let mut sqe = Sqe::new(nvme_spec::opcode::admin::FABRICS, CommandId(0));
    sqe.set_fctype(nvme_spec::opcode::fctype::AUTH_RECV);
    sqe.set_cdw(10, nvme_auth::msg::command_cdw10());
    sqe.set_cdw(11, al);
    let (cqe, data) = drive_execute(q, sqe, DataDir::FromController, &[], al as usize).await?;
    if !cqe.status.is_success() {
        return Err(HostError::Status(cqe.status));
    }
    Ok(data)
}

/// The queue engine without its socket — slots, SQ flow control, R2T/H2CData and
/// C2HData/response handling — driven through byte buffers. It exists for the fuzz targets
/// (`crates/ebof-fuzz`), which feed it arbitrary controller PDUs; it is not part of the API.
#[doc(hidden)]
pub struct QueueCore {
    conn: HostConn,
    st: Slots,
    tx: TxBuf,
}

#[doc(hidden)]
impl QueueCore {
    /// A queue of `entries` SQ entries (`entries - 1` slots) on `conn`, which the caller
    /// establishes with [`QueueCore::conn`] (ICReq out, ICResp in). `flow_control: false` is
    /// the state after a Connect that agreed to CATTR.DISSQFC.
    pub fn new(
        conn: HostConn,
        qid: QueueId,
        entries: u16,
        icd_max: usize,
        flow_control: bool,
    ) -> Self {
        let mut st = Slots::new(qid, entries.max(2), icd_max, 0);
        st.flow_control = flow_control;
        QueueCore {
            conn,
            st,
            tx: TxBuf::default(),
        }
    }

    /// The sans-IO connection.
    pub fn conn(&mut self) -> &mut HostConn {
        &mut self.conn
    }

    /// As [`Queue::submit`].
    pub fn submit(
        &mut self,
        sqe: Sqe,
        dir: DataDir,
        len: usize,
        user: u64,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<Option<CommandId>> {
        self.st
            .submit(&self.conn, &mut self.tx, sqe, dir, len, user, fill)
    }

    /// Handle every whole PDU in `rx[*head..]` as [`Queue::try_io`] does with what it read,
    /// advancing `*head`; `f` is called per completed command. An error leaves the queue
    /// unusable (the real queue is then broken).
    pub fn receive<F: FnMut(Completion<'_>)>(
        &mut self,
        rx: &[u8],
        head: &mut usize,
        f: &mut F,
    ) -> Result<usize> {
        self.st.process(&mut self.conn, rx, head, &mut self.tx, f)
    }

    /// Everything the queue would have sent (capsules, H2CData) since the last call.
    pub fn take_output(&mut self) -> Vec<u8> {
        self.tx.take(&mut self.st)
    }

    /// Commands outstanding.
    pub fn in_flight(&self) -> usize {
        self.st.in_flight
    }

    /// Whether another command may be submitted now (a free slot and SQ room).
    pub fn can_submit(&self) -> bool {
        self.st.can_submit()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn concat(tx: &TxBuf, st: &Slots) -> Vec<u8> {
        let mut pieces = [&[][..]; TX_IOV_MAX];
        let n = tx.slices(&st.slots, &mut pieces).unwrap();
        pieces[..n].concat()
    }

    /// Two commands' write data spliced between PDU bytes: the slices are the wire order, a
    /// partial send resumes mid-piece, and a slot released before its data is out only becomes
    /// free once the data is sent.
    #[test]
    fn spliced_data_pins_its_slot_until_sent() {
        let mut st = Slots::new(QueueId(1), 4, 0, 0);
        st.slots[0].buf = vec![0xAA; 5000];
        st.slots[1].buf = vec![0xBB; 3000];
        for i in [0u16, 1] {
            st.free.retain(|&f| f != i);
            st.slots[usize::from(i)].busy = true;
            st.in_flight += 1;
        }
        let mut tx = TxBuf::default();
        tx.bytes.extend_from_slice(b"head0");
        tx.splice_at(&mut st.slots, 5, 0, 100..4100);
        tx.bytes.extend_from_slice(b"mid");
        tx.splice_at(&mut st.slots, 8, 1, 0..3000);
        tx.bytes.extend_from_slice(b"tail");
        let mut want = b"head0".to_vec();
        want.extend_from_slice(&[0xAA; 4000]);
        want.extend_from_slice(b"mid");
        want.extend_from_slice(&[0xBB; 3000]);
        want.extend_from_slice(b"tail");
        assert_eq!(concat(&tx, &st), want);
        {
            let mut two = [&[][..]; 2];
            assert_eq!(tx.slices(&st.slots, &mut two), Some(2));
            assert_eq!(two[1].len(), 4000);
        }

        // Command 0 completes before its data is out: its slot is not reusable yet.
        st.release(0);
        assert!(!st.free.contains(&0));
        tx.advance(5 + 3999, &mut st);
        assert!(!st.free.contains(&0));
        assert_eq!(concat(&tx, &st), want[5 + 3999..]);
        tx.advance(1, &mut st);
        assert!(st.free.contains(&0), "slot 0's data is out");
        assert_eq!(st.slots[1].pins, 1);
        st.release(1);
        tx.advance(3 + 3000, &mut st);
        assert!(st.free.contains(&1));
        assert_eq!(concat(&tx, &st), b"tail");
        tx.advance(4, &mut st);
        assert!(!tx.pending());
        assert!(tx.ext.list.is_empty() && tx.bytes.is_empty());
        assert_eq!(st.in_flight, 0);
    }

    /// A chunked transfer pins its slot once per piece; abandoning the output unpins all, and
    /// `take` copies the spliced data in.
    #[test]
    fn abandoned_and_taken_output_unpins() {
        let mut st = Slots::new(QueueId(1), 3, 0, 0);
        st.slots[0].buf = (0..9000u32).map(|i| i as u8).collect();
        st.free.retain(|&f| f != 0);
        st.slots[0].busy = true;
        st.in_flight = 1;
        let mut tx = TxBuf::default();
        for (i, r) in [0..4096, 4096..8192, 8192..9000].into_iter().enumerate() {
            tx.bytes.push(i as u8);
            let at = tx.bytes.len();
            tx.splice_at(&mut st.slots, at, 0, r);
        }
        assert_eq!(st.slots[0].pins, 3);
        st.release(0);
        tx.advance(1 + 4096 + 1, &mut st);
        assert_eq!(st.slots[0].pins, 2);
        let rest = tx.take(&mut st);
        let mut expect = Vec::new();
        expect.extend_from_slice(&st.slots[0].buf[4096..8192]);
        expect.push(2);
        expect.extend_from_slice(&st.slots[0].buf[8192..9000]);
        assert_eq!(rest, expect);
        assert_eq!(st.slots[0].pins, 0);
        assert!(st.free.contains(&0));
    }

    /// A spliced range no longer inside its slot's buffer is reported, never sliced past.
    #[test]
    fn lost_splice_is_an_error() {
        let mut st = Slots::new(QueueId(1), 2, 0, 0);
        st.slots[0].buf = vec![1; 100];
        let mut tx = TxBuf::default();
        tx.splice_at(&mut st.slots, 0, 0, 50..100);
        st.slots[0].buf.truncate(60);
        assert_eq!(tx.slices(&st.slots, &mut [&[][..]; 4]), None);
        tx.splice_at(&mut st.slots, 0, 7, 0..1);
        st.slots[0].buf = vec![1; 100];
        assert_eq!(tx.slices(&st.slots, &mut [&[][..]; 4]), None);
    }

    /// A TLS target (our server session on a thread) that answers the ICReq, then sends
    /// close_notify and keeps writing until the host goes (at most `junk` bytes).
    fn closing_tls_target(junk: usize) -> (SocketAddr, std::thread::JoinHandle<()>) {
        use std::io::{Read, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let key = nvmf_tls::psk::TlsPsk::new(nvmf_tls::psk::PskHash::Sha256, &[9; 32]);
            let key = key.unwrap();
            let cfg = nvmf_tls::TlsServerConfig::new(move |_: &[u8]| Some(key.clone())).unwrap();
            let mut tls = nvmf_tls::TlsServer::new(&cfg).unwrap();
            let mut buf = vec![0u8; 64 * 1024];
            let mut plain = Vec::new();
            while plain.len() < 128 {
                let n = s.read(&mut buf).unwrap();
                assert!(n > 0, "host went away during the handshake");
                tls.feed(&buf[..n]).unwrap();
                s.write_all(&tls.take_cipher()).unwrap();
                tls.read_plain_into(&mut plain).unwrap();
            }
            let mut resp = Vec::new();
            nvmf_tcp::pdu::encode_ic_resp(
                &mut resp,
                &nvmf_tcp::pdu::IcResp {
                    pfv: 0,
                    cpda: 0,
                    digests: Digests::NONE,
                    maxh2cdata: 131072,
                },
            );
            tls.write_plain(&[&resp]).unwrap();
            tls.close_notify().unwrap();
            s.write_all(&tls.take_cipher()).unwrap();
            // Data after close_notify (records that look real), until the host closes.
            let chunk = vec![0x17u8; 256 * 1024];
            let mut sent = 0;
            while sent < junk && s.write_all(&chunk).is_ok() {
                sent += chunk.len();
            }
            // Then hold the connection open until the host ends it.
            while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
        });
        (addr, t)
    }

    /// T2, host side: after the target's close_notify the queue ends (Disconnected) and the
    /// session does not buffer what the target keeps sending.
    #[tokio::test(flavor = "current_thread")]
    async fn close_notify_from_the_target_ends_the_tls_queue() {
        let (addr, target) = closing_tls_target(64 << 20);
        let p = LinkParams {
            addr,
            digests: Digests::NONE,
            max_c2h_data: 128 * 1024,
            connect_timeout: Duration::from_secs(10),
            tls: None,
        };
        let key = nvmf_tls::psk::TlsPsk::new(nvmf_tls::psk::PskHash::Sha256, &[9; 32]).unwrap();
        let mut link = Link::open(&p, Some((b"NVMe0R01 h s".to_vec(), key)))
            .await
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let err = loop {
            assert!(
                std::time::Instant::now() < deadline,
                "the queue did not end"
            );
            match link.try_read() {
                Ok(_) => {
                    let buffered = link.tls.as_ref().map_or(0, |t| t.buffered_cipher());
                    assert!(
                        buffered < 1 << 20,
                        "{buffered} bytes buffered after close_notify"
                    );
                    tokio::time::timeout(Duration::from_millis(100), link.stream.readable())
                        .await
                        .ok();
                }
                Err(e) => break e,
            }
        };
        assert!(matches!(err, HostError::Disconnected), "{err}");
        let buffered = link.tls.as_ref().map_or(0, |t| t.buffered_cipher());
        assert!(
            buffered < 1 << 20,
            "{buffered} bytes buffered after close_notify"
        );
        drop(link);
        target.join().unwrap();
    }
}
