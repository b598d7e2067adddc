//! The sans-IO engine of a TCP queue ([`QueueCore`]): command capsules and H2CData into the
//! transmit buffer, controller PDUs out of the receive buffer, completions by CID. The real
//! queue ([`super::Queue`]) drives it from a socket; the fuzz targets (`crates/ebof-fuzz`)
//! drive the very same code from byte buffers.

use nvme_spec::{CommandId, Cqe, QueueId, Sqe, Status};
use nvmf_tcp::pdu::R2t;
use nvmf_tcp::{HostConn, HostEvent};

use super::slots::{SQHD_DISABLED, Slots};
use super::txbuf::TxBuf;
use crate::command::{Completion, DataDir};
use crate::error::{HostError, Result};

/// Write data at least this large goes to the socket from the slot's buffer (`writev`); smaller
/// data is copied into the transmit buffer (an iovec entry costs more than a small copy).
const SPLICE_MIN: usize = 2048;

/// The queue engine without its socket — slots, SQ flow control, R2T/H2CData and
/// C2HData/response handling — driven through byte buffers. The TCP queue runs on it; it is
/// public only for the fuzz targets (`crates/ebof-fuzz`), which feed it arbitrary controller
/// PDUs; it is not part of the API.
#[doc(hidden)]
pub struct QueueCore {
    pub(super) conn: HostConn,
    pub(super) st: Slots,
    pub(super) tx: TxBuf,
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

    /// The engine of a real queue: slot buffers of `prealloc` bytes, room for a batch of
    /// output reserved up front.
    pub(super) fn with_buffers(
        conn: HostConn,
        qid: QueueId,
        entries: u16,
        icd_max: usize,
        prealloc: usize,
    ) -> Self {
        let mut tx = TxBuf::default();
        tx.bytes.reserve(64 * 1024);
        QueueCore {
            conn,
            st: Slots::new(qid, entries, icd_max, prealloc),
            tx,
        }
    }

    /// The sans-IO connection.
    pub fn conn(&mut self) -> &mut HostConn {
        &mut self.conn
    }

    /// Claim a slot for `sqe` and append its capsule (with in-capsule data when it fits) to the
    /// output. The CID and SGL of `sqe` are filled in here. For [`DataDir::ToController`],
    /// `fill` writes the `len` bytes to send into the slot's buffer (it is not called
    /// otherwise). Returns `Ok(None)` when the queue is full.
    pub fn submit(
        &mut self,
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
        if !self.st.can_submit() {
            return Ok(None);
        }
        let dir = if len == 0 { DataDir::None } else { dir };
        let Some(idx) = self.st.free.pop() else {
            return Ok(None);
        };
        let (conn, tx) = (&self.conn, &mut self.tx);
        let slots = &mut self.st.slots;
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
                if len <= self.st.icd_max {
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
        self.st.in_flight += 1;
        self.st.sq_tail = (self.st.sq_tail + 1) % self.st.entries;
        Ok(Some(cid))
    }

    /// Handle every whole PDU in `rx[*head..]` (what the queue read), advancing `*head` past
    /// each one; `f` is called per completed command. Returns the number completed. An error
    /// leaves the queue unusable (the real queue is then broken).
    pub fn receive<F: FnMut(Completion<'_>)>(
        &mut self,
        rx: &[u8],
        head: &mut usize,
        f: &mut F,
    ) -> Result<usize> {
        let mut completed = 0;
        while *head < rx.len() {
            let Some((ev, used)) = self.conn.decode_one(&rx[*head..])? else {
                break;
            };
            completed += self.handle_event(ev, f)?;
            *head += used;
        }
        Ok(completed)
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

    /// The queue's QID.
    pub fn qid(&self) -> QueueId {
        self.st.qid
    }

    /// Most commands that can be outstanding at once.
    pub fn capacity(&self) -> usize {
        self.st.slots.len()
    }

    /// False once the controller agreed to disable SQ flow control.
    pub fn flow_control(&self) -> bool {
        self.st.flow_control
    }

    /// In-capsule data limit.
    pub fn icd_max(&self) -> usize {
        self.st.icd_max
    }

    /// Apply the Fabrics Connect response's SQHD: 0xFFFF after asking for DISSQFC turns SQ
    /// flow control off.
    pub fn connected(&mut self, sqhd: u16, dissqfc: bool) {
        self.st.connected(sqhd, dissqfc);
    }

    /// Forget every outstanding command, calling `f` with each one's user tag, and the output
    /// not sent yet (its slots are free again).
    pub fn fail_in_flight(&mut self, mut f: impl FnMut(u64)) {
        for idx in 0..self.st.slots.len() {
            if self.st.slots[idx].busy {
                f(self.st.slots[idx].user);
                self.st.release(idx);
            }
        }
        self.tx.clear(&mut self.st);
    }

    /// Apply one decoded event. Returns the number of commands completed (0 or 1).
    fn handle_event<F: FnMut(Completion<'_>)>(
        &mut self,
        ev: HostEvent<'_>,
        f: &mut F,
    ) -> Result<usize> {
        match ev {
            HostEvent::Response(cqe) => self.on_response(cqe, f),
            HostEvent::C2hData {
                cccid,
                datao,
                data,
                last,
                success,
            } => self.on_c2h_data(cccid, datao, data, last, success, f),
            HostEvent::C2hDataDigestError {
                cccid,
                datao,
                datal,
                last,
                success,
            } => self.on_c2h_digest_error(cccid, datao, datal, last, success, f),
            HostEvent::R2t(r2t) => self.on_r2t(&r2t),
            HostEvent::TermReq { fes, fei } => Err(HostError::TermReq { fes, fei }),
            HostEvent::Established { .. } => Err(HostError::UnexpectedPdu {
                reason: "second ICResp",
                cid: 0,
            }),
        }
    }

    /// A CapsuleResp: the command is done.
    fn on_response<F: FnMut(Completion<'_>)>(&mut self, mut cqe: Cqe, f: &mut F) -> Result<usize> {
        let st = &mut self.st;
        if st.flow_control && cqe.sqhd != SQHD_DISABLED && cqe.sqhd < st.entries {
            st.sq_head = cqe.sqhd;
        }
        let slot = st.busy_slot(cqe.cid, "response for a command that is not outstanding")?;
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
        st.release(usize::from(cqe.cid));
        Ok(1)
    }

    /// A C2HData PDU whose data passed its digest (`last`: LAST_PDU, `success`: SUCCESS).
    fn on_c2h_data<F: FnMut(Completion<'_>)>(
        &mut self,
        cccid: u16,
        datao: u32,
        data: &[u8],
        last: bool,
        success: bool,
        f: &mut F,
    ) -> Result<usize> {
        // Used only if this PDU completes the command (SUCCESS flag).
        let cqe = self.st.synthesized_cqe(cccid, Status::SUCCESS);
        let slot = self
            .st
            .busy_slot(cccid, "C2HData for a command that is not outstanding")?;
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
        // The whole read in one PDU that also completes it: the caller gets the data straight
        // from the receive buffer, no copy.
        let zero_copy = success && last && slot.done == 0 && end == slot.len;
        if !zero_copy {
            slot.buf[slot.done..end].copy_from_slice(data);
            slot.done = end;
            if !success {
                return Ok(0);
            }
            // C2HData SUCCESS: completed successfully, no CapsuleResp follows (NVMe/TCP 1.0,
            // 3.3.8.1; legal only with SQ flow control disabled, tolerated otherwise since the
            // outstanding count bounds the SQ anyway).
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
        self.st.release(usize::from(cccid));
        Ok(1)
    }

    /// A C2HData PDU whose data failed its data digest: the command will fail with Transient
    /// Transport Error; now, if LAST_PDU and SUCCESS are set (no response follows).
    fn on_c2h_digest_error<F: FnMut(Completion<'_>)>(
        &mut self,
        cccid: u16,
        datao: u32,
        datal: u32,
        last: bool,
        success: bool,
        f: &mut F,
    ) -> Result<usize> {
        let cqe = self.st.synthesized_cqe(cccid, Status::TRANSIENT_TRANSPORT);
        let slot = self
            .st
            .busy_slot(cccid, "C2HData for a command that is not outstanding")?;
        let end = (datao as usize).saturating_add(datal as usize);
        if slot.dir != DataDir::FromController || datao as usize != slot.done || end > slot.len {
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
        self.st.release(usize::from(cccid));
        Ok(1)
    }

    /// An R2T: queue H2CData PDUs with the requested range of the command's data (large ranges
    /// spliced from the slot, which stays pinned until they are sent). Completes nothing.
    fn on_r2t(&mut self, r2t: &R2t) -> Result<usize> {
        let slot = self
            .st
            .busy_slot(r2t.cccid, "R2T for a command that is not outstanding")?;
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
        let (conn, tx) = (&self.conn, &mut self.tx);
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
}
