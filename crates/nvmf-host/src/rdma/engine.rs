//! The RDMA host queue engine without verbs: command slots, capsules, responses by CID.
//!
//! The engine owns the queue's memory — one *data region* (one buffer of `stride` bytes per
//! slot, which the controller reads and writes with RDMA READ / RDMA WRITE through the keyed
//! SGL of each command) and one *control region* (per slot, the send buffer holding the 64-byte
//! SQE and any in-capsule data; after those, one 16-byte receive buffer per posted receive).
//! The I/O shell registers both regions once (data: remote read + write; control: local only),
//! tells the engine the data region's rkey, and then only moves descriptors between the engine
//! and the verbs: [`RdmaEngine::pending_sends`] / [`RdmaEngine::pending_recvs`] to post, and
//! [`RdmaEngine::on_send_done`] / [`RdmaEngine::on_recv`] for what the completion queue
//! reports. Everything here is deterministic and tested without an RDMA device.
//!
//! A command completes when both its SEND has completed (its send buffer is free again) and its
//! response has arrived, in either order (Linux `nvme_rdma_end_request` counts the same two
//! references).

use nvme_spec::{CommandId, Cqe, QueueId, Sqe};

use super::wire;
use crate::command::{Completion, DataDir};
use crate::error::{HostError, Result};

/// Size of a response capsule: one completion queue entry, no data (NVMe-oF 1.1, 7.3.2).
pub const RESPONSE_LEN: usize = 16;
/// Size of the command capsule's SQE.
pub const SQE_LEN: usize = 64;
/// `wr_id` bit set on receive work requests (the low 32 bits: receive buffer index); send work
/// requests carry the slot index alone.
pub const RECV_WR_BIT: u64 = 1 << 32;
/// SQHD value meaning "SQ flow control disabled" (NVMe-oF 1.1, 3.3.2).
const SQHD_DISABLED: u16 = 0xFFFF;

/// Shape of one queue.
#[derive(Clone, Copy, Debug)]
pub struct EngineConfig {
    /// The queue's QID (0: admin).
    pub qid: QueueId,
    /// SQ entries (HSQSIZE + 1); `entries - 1` slots, `entries` posted receives (HRQSIZE).
    pub entries: u16,
    /// Writes up to this many bytes travel in the command capsule (I/O queues:
    /// IOCCSZ × 16 − 64 when ICDOFF is 0; admin queue: 0, as the Linux host does).
    pub icd_max: usize,
    /// Bytes of each slot's data buffer: the largest transfer of one command.
    pub stride: usize,
}

/// A SEND to post: `len` bytes at `offset` of the control region, signaled, `wr_id` as given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendDesc {
    /// Work request id to post with (the slot index).
    pub wr_id: u64,
    /// Byte offset of the capsule in the control region.
    pub offset: usize,
    /// Bytes to send (the SQE, plus in-capsule data).
    pub len: usize,
}

/// A receive to post: `len` bytes at `offset` of the control region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecvDesc {
    /// Work request id to post with ([`RECV_WR_BIT`] | receive buffer index).
    pub wr_id: u64,
    /// Byte offset of the receive buffer in the control region.
    pub offset: usize,
    /// Size of the receive buffer in bytes.
    pub len: usize,
}

#[derive(Clone, Copy, Debug)]
struct Slot {
    busy: bool,
    /// The SEND of the capsule has not completed yet.
    send_pending: bool,
    /// The response, when it arrived before the SEND completed.
    resp: Option<Cqe>,
    dir: DataDir,
    len: usize,
    user: u64,
}

const IDLE: Slot = Slot {
    busy: false,
    send_pending: false,
    resp: None,
    dir: DataDir::None,
    len: 0,
    user: 0,
};

/// One NVMe/RDMA queue's state and memory (see the module docs).
pub struct RdmaEngine {
    cfg: EngineConfig,
    slots: Vec<Slot>,
    free: Vec<u16>,
    in_flight: usize,
    sq_tail: u16,
    sq_head: u16,
    flow_control: bool,
    /// Per slot: SQE + in-capsule data, rounded up to 64 bytes.
    send_stride: usize,
    /// Receive buffers: `recv_count` × 16 bytes after the send buffers.
    recv_base: usize,
    recv_count: usize,
    data: Box<[u8]>,
    ctrl: Box<[u8]>,
    rkey: u32,
    sends: Vec<SendDesc>,
    recvs: Vec<RecvDesc>,
}

impl std::fmt::Debug for RdmaEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmaEngine")
            .field("qid", &self.cfg.qid.0)
            .field("in_flight", &self.in_flight)
            .finish()
    }
}

impl RdmaEngine {
    /// A queue of `cfg.entries` SQ entries with all its buffers allocated; every receive buffer
    /// is pending in [`RdmaEngine::pending_recvs`] (post them before connecting).
    pub fn new(cfg: EngineConfig) -> Result<RdmaEngine> {
        if cfg.entries < 2 {
            return Err(HostError::InvalidArgument(format!(
                "RDMA queue of {} entries (at least 2)",
                cfg.entries
            )));
        }
        if cfg.stride > wire::KEYED_LEN_MAX as usize {
            return Err(HostError::InvalidArgument(format!(
                "transfer of {} bytes exceeds a keyed SGL's 24-bit length",
                cfg.stride
            )));
        }
        let n = usize::from(cfg.entries - 1);
        let send_stride = (SQE_LEN + cfg.icd_max).next_multiple_of(64);
        let recv_count = usize::from(cfg.entries);
        let recv_base = n * send_stride;
        let data_len = n
            .checked_mul(cfg.stride)
            .ok_or_else(|| HostError::InvalidArgument("RDMA queue memory size".into()))?;
        let mut e = RdmaEngine {
            cfg,
            slots: vec![IDLE; n],
            free: (0..n as u16).rev().collect(),
            in_flight: 0,
            sq_tail: 0,
            sq_head: 0,
            flow_control: true,
            send_stride,
            recv_base,
            recv_count,
            data: vec![0u8; data_len.max(1)].into_boxed_slice(),
            ctrl: vec![0u8; recv_base + recv_count * RESPONSE_LEN].into_boxed_slice(),
            rkey: 0,
            sends: Vec::with_capacity(n),
            recvs: Vec::with_capacity(recv_count),
        };
        for i in 0..recv_count {
            e.recvs.push(e.recv_desc(i));
        }
        Ok(e)
    }

    fn recv_desc(&self, i: usize) -> RecvDesc {
        RecvDesc {
            wr_id: RECV_WR_BIT | i as u64,
            offset: self.recv_base + i * RESPONSE_LEN,
            len: RESPONSE_LEN,
        }
    }

    /// The data region, to register for remote read and write. Its address never changes.
    pub fn data_region(&mut self) -> &mut [u8] {
        &mut self.data
    }
    /// The control region (send and receive buffers), to register for local access.
    pub fn ctrl_region(&mut self) -> &mut [u8] {
        &mut self.ctrl
    }
    /// The rkey of the registered data region, put in every keyed SGL from now on.
    pub fn set_rkey(&mut self, rkey: u32) {
        self.rkey = rkey;
    }
    /// The address the controller uses for slot `idx`'s data (memory registered with
    /// `ibv_reg_mr` is addressed by its virtual address).
    pub fn data_addr(&self, idx: usize) -> u64 {
        self.data.as_ptr() as u64 + (idx * self.cfg.stride) as u64
    }

    /// The queue's QID.
    pub fn qid(&self) -> QueueId {
        self.cfg.qid
    }
    /// Commands outstanding now.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }
    /// Most commands outstanding at once.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }
    /// Largest write sent as in-capsule data, in bytes (0: never).
    pub fn icd_max(&self) -> usize {
        self.cfg.icd_max
    }
    /// Largest transfer of one command.
    pub fn max_transfer(&self) -> usize {
        self.cfg.stride
    }
    /// SQ flow control in force: false once the Connect response carried SQHD FFFFh after
    /// the host asked for DISSQFC.
    pub fn flow_control(&self) -> bool {
        self.flow_control
    }
    /// Number of receive buffers (HRQSIZE).
    pub fn recv_count(&self) -> usize {
        self.recv_count
    }

    /// Apply the Fabrics Connect response's SQHD: 0xFFFF after asking for DISSQFC turns SQ
    /// flow control off.
    pub fn connected(&mut self, sqhd: u16, dissqfc: bool) {
        if dissqfc && sqhd == SQHD_DISABLED {
            self.flow_control = false;
        } else if sqhd < self.cfg.entries {
            self.sq_head = sqhd;
        }
    }

    fn sq_occupancy(&self) -> usize {
        let e = u32::from(self.cfg.entries);
        let occ = (u32::from(self.sq_tail) + e - u32::from(self.sq_head)) % e;
        (occ as usize).min(self.in_flight)
    }

    /// A free slot and, with SQ flow control, room in the controller's SQ.
    pub fn can_submit(&self) -> bool {
        !self.free.is_empty()
            && (!self.flow_control || self.sq_occupancy() + 1 < usize::from(self.cfg.entries))
    }

    /// Claim a slot for `sqe` and build its capsule: CID and SGL1 are set here. Host-to-
    /// controller data is written by `fill` straight into its place — after the SQE in the send
    /// buffer when it fits the in-capsule limit, else into the slot's data buffer, which the
    /// controller RDMA-READs. `Ok(None)`: no free slot or no SQ room.
    pub fn submit(
        &mut self,
        mut sqe: Sqe,
        dir: DataDir,
        len: usize,
        user: u64,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<Option<CommandId>> {
        if len > self.cfg.stride {
            return Err(HostError::InvalidArgument(format!(
                "transfer of {len} bytes exceeds the queue's buffers ({} bytes)",
                self.cfg.stride
            )));
        }
        if !self.can_submit() {
            return Ok(None);
        }
        let Some(idx) = self.free.pop() else {
            return Ok(None);
        };
        let i = usize::from(idx);
        let dir = if len == 0 { DataDir::None } else { dir };
        sqe.set_cid(CommandId(idx));
        let send_off = i * self.send_stride;
        let mut send_len = SQE_LEN;
        // `len` ≤ stride ≤ KEYED_LEN_MAX (checked in `new`): the casts below are exact.
        match dir {
            DataDir::ToController if len <= self.cfg.icd_max => {
                let at = send_off + SQE_LEN;
                fill(&mut self.ctrl[at..at + len]);
                sqe.set_sgl_icd(len as u32);
                send_len += len;
            }
            DataDir::ToController | DataDir::FromController => {
                if dir == DataDir::ToController {
                    let at = i * self.cfg.stride;
                    fill(&mut self.data[at..at + len]);
                }
                wire::set_keyed_sgl(&mut sqe, self.data_addr(i), len as u32, self.rkey, false);
            }
            DataDir::None => wire::set_keyed_sgl(&mut sqe, 0, 0, 0, false),
        }
        self.ctrl[send_off..send_off + SQE_LEN].copy_from_slice(sqe.as_bytes());
        self.sends.push(SendDesc {
            wr_id: u64::from(idx),
            offset: send_off,
            len: send_len,
        });
        self.slots[i] = Slot {
            busy: true,
            send_pending: true,
            resp: None,
            dir,
            len,
            user,
        };
        self.in_flight += 1;
        self.sq_tail = (self.sq_tail + 1) % self.cfg.entries;
        Ok(Some(CommandId(idx)))
    }

    /// SENDs queued by [`RdmaEngine::submit`] since the last [`RdmaEngine::clear_sends`].
    pub fn pending_sends(&self) -> &[SendDesc] {
        &self.sends
    }
    /// Forget the SENDs returned by [`RdmaEngine::pending_sends`] (they were posted).
    pub fn clear_sends(&mut self) {
        self.sends.clear();
    }
    /// Receives to (re)post since the last [`RdmaEngine::clear_recvs`].
    pub fn pending_recvs(&self) -> &[RecvDesc] {
        &self.recvs
    }
    /// Forget the receives returned by [`RdmaEngine::pending_recvs`] (they were posted).
    pub fn clear_recvs(&mut self) {
        self.recvs.clear();
    }

    fn busy_slot(&mut self, cid: u16, reason: &'static str) -> Result<&mut Slot> {
        match self.slots.get_mut(usize::from(cid)) {
            Some(s) if s.busy => Ok(s),
            _ => Err(HostError::UnexpectedPdu { reason, cid }),
        }
    }

    /// The SEND with `wr_id` completed successfully. Completes its command if the response
    /// is already in. Returns the number of commands completed (0 or 1).
    pub fn on_send_done<F: FnMut(Completion<'_>)>(
        &mut self,
        wr_id: u64,
        f: &mut F,
    ) -> Result<usize> {
        let cid = u16::try_from(wr_id).map_err(|_| HostError::UnexpectedPdu {
            reason: "send completion for an unknown work request",
            cid: 0,
        })?;
        let slot = self.busy_slot(cid, "send completion for a command that is not outstanding")?;
        if !slot.send_pending {
            return Err(HostError::UnexpectedPdu {
                reason: "second send completion for one command",
                cid,
            });
        }
        slot.send_pending = false;
        match slot.resp {
            Some(cqe) => Ok(self.complete(cqe, f)),
            None => Ok(0),
        }
    }

    /// A receive completed successfully with `byte_len` bytes (`invalidated`: the rkey the
    /// controller invalidated with a send with invalidate, if it did). Decodes the response,
    /// queues the buffer for reposting, and completes the command if its SEND is done too.
    pub fn on_recv<F: FnMut(Completion<'_>)>(
        &mut self,
        wr_id: u64,
        byte_len: u32,
        invalidated: Option<u32>,
        f: &mut F,
    ) -> Result<usize> {
        let i = (wr_id & 0xFFFF_FFFF) as usize;
        if wr_id & RECV_WR_BIT == 0 || i >= self.recv_count {
            return Err(HostError::UnexpectedPdu {
                reason: "receive completion for an unknown work request",
                cid: 0,
            });
        }
        let at = self.recv_base + i * RESPONSE_LEN;
        let mut raw = [0u8; RESPONSE_LEN];
        raw.copy_from_slice(&self.ctrl[at..at + RESPONSE_LEN]);
        let desc = self.recv_desc(i);
        self.recvs.push(desc);
        let cqe = Cqe::decode(&raw);
        if (byte_len as usize) < RESPONSE_LEN {
            return Err(HostError::UnexpectedPdu {
                reason: "response capsule shorter than a completion entry",
                cid: cqe.cid,
            });
        }
        if invalidated.is_some() {
            // Every keyed SGL this host sends asks for no invalidation (subtype 0h).
            return Err(HostError::UnexpectedPdu {
                reason: "remote invalidation of a key the host did not offer for it",
                cid: cqe.cid,
            });
        }
        if self.flow_control && cqe.sqhd != SQHD_DISABLED && cqe.sqhd < self.cfg.entries {
            self.sq_head = cqe.sqhd;
        }
        let slot = self.busy_slot(cqe.cid, "response for a command that is not outstanding")?;
        if slot.resp.is_some() {
            return Err(HostError::UnexpectedPdu {
                reason: "second response for one command",
                cid: cqe.cid,
            });
        }
        if slot.send_pending {
            slot.resp = Some(cqe);
            return Ok(0);
        }
        Ok(self.complete(cqe, f))
    }

    fn complete<F: FnMut(Completion<'_>)>(&mut self, cqe: Cqe, f: &mut F) -> usize {
        let i = usize::from(cqe.cid);
        let slot = self.slots[i];
        let data: &[u8] = match slot.dir {
            DataDir::FromController if cqe.status.is_success() => {
                let at = i * self.cfg.stride;
                &self.data[at..at + slot.len]
            }
            DataDir::FromController | DataDir::ToController | DataDir::None => &[],
        };
        f(Completion {
            cid: CommandId(cqe.cid),
            user: slot.user,
            cqe,
            data,
        });
        self.slots[i] = IDLE;
        self.free.push(cqe.cid);
        self.in_flight -= 1;
        1
    }

    /// Forget every outstanding command, calling `f` with each one's user tag.
    pub fn fail_in_flight(&mut self, mut f: impl FnMut(u64)) {
        for i in 0..self.slots.len() {
            if self.slots[i].busy {
                f(self.slots[i].user);
                self.slots[i] = IDLE;
                self.free.push(i as u16);
            }
        }
        self.in_flight = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvme_spec::Status;
    use nvme_spec::opcode::{admin, io};
    use std::collections::VecDeque;

    const RKEY: u32 = 0x1234_5678;

    /// SGL1 as a controller reads it, decoded here from the raw bytes by the layout of
    /// NVMe Base 2.0 4.3.2 (keyed: addr u64 @24, len u24 @32, key u32 @35, type @39).
    #[derive(Debug, PartialEq, Eq)]
    enum Sgl {
        Keyed {
            addr: u64,
            len: u32,
            key: u32,
            subtype: u8,
        },
        Offset {
            offset: u64,
            len: u32,
        },
    }

    fn sgl(capsule: &[u8]) -> Sgl {
        let addr = u64::from_le_bytes(capsule[24..32].try_into().unwrap());
        match capsule[39] >> 4 {
            4 => Sgl::Keyed {
                addr,
                len: u32::from(capsule[32])
                    | u32::from(capsule[33]) << 8
                    | u32::from(capsule[34]) << 16,
                key: u32::from_le_bytes(capsule[35..39].try_into().unwrap()),
                subtype: capsule[39] & 0xF,
            },
            0 => {
                assert_eq!(capsule[39] & 0xF, 1, "data block subtype offset");
                Sgl::Offset {
                    offset: addr,
                    len: u32::from_le_bytes(capsule[32..36].try_into().unwrap()),
                }
            }
            t => panic!("SGL type {t}"),
        }
    }

    /// A pretend controller + NIC: takes the posted SENDs and receives, performs the data
    /// transfers through the keyed SGLs, and DMAs responses into posted receive buffers.
    struct Peer {
        recvs: VecDeque<RecvDesc>,
    }

    impl Peer {
        fn new(e: &mut RdmaEngine) -> Peer {
            let recvs = e.pending_recvs().iter().copied().collect();
            e.clear_recvs();
            Peer { recvs }
        }
        /// The capsules sent since the last call (SQE + in-capsule data).
        fn take_capsules(&mut self, e: &mut RdmaEngine) -> Vec<(u64, Vec<u8>)> {
            let out = e
                .pending_sends()
                .iter()
                .map(|d| (d.wr_id, e.ctrl[d.offset..d.offset + d.len].to_vec()))
                .collect();
            e.clear_sends();
            out
        }
        /// RDMA READ of a keyed SGL's data from the host.
        fn rdma_read(e: &mut RdmaEngine, capsule: &[u8]) -> Vec<u8> {
            let Sgl::Keyed { addr, len, key, .. } = sgl(capsule) else {
                panic!("not keyed")
            };
            assert_eq!(key, RKEY);
            let base = e.data_region().as_ptr() as u64;
            let off = (addr - base) as usize;
            e.data_region()[off..off + len as usize].to_vec()
        }
        /// RDMA WRITE into the host's memory through a keyed SGL.
        fn rdma_write(e: &mut RdmaEngine, capsule: &[u8], data: &[u8]) {
            let Sgl::Keyed { addr, len, key, .. } = sgl(capsule) else {
                panic!("not keyed")
            };
            assert_eq!(key, RKEY);
            assert!(data.len() <= len as usize);
            let base = e.data_region().as_ptr() as u64;
            let off = (addr - base) as usize;
            assert!(off + data.len() <= e.data_region().len());
            e.data_region()[off..off + data.len()].copy_from_slice(data);
        }
        /// SEND of a response: lands in the oldest posted receive; returns its wr_id.
        fn respond(&mut self, e: &mut RdmaEngine, cqe: Cqe) -> u64 {
            for d in e.pending_recvs() {
                self.recvs.push_back(*d);
            }
            e.clear_recvs();
            let d = self.recvs.pop_front().expect("a posted receive");
            e.ctrl_region()[d.offset..d.offset + RESPONSE_LEN].copy_from_slice(&cqe.to_bytes());
            d.wr_id
        }
    }

    fn engine(qid: u16, entries: u16, icd_max: usize, stride: usize) -> RdmaEngine {
        let mut e = RdmaEngine::new(EngineConfig {
            qid: QueueId(qid),
            entries,
            icd_max,
            stride,
        })
        .unwrap();
        e.set_rkey(RKEY);
        e
    }

    fn ok(cid: u16, sqhd: u16) -> Cqe {
        Cqe {
            sqhd,
            ..Cqe::new(CommandId(cid), QueueId(1), Status::SUCCESS)
        }
    }

    type Done = Vec<(u16, u64, Status, Vec<u8>)>;

    fn sink(done: &mut Done) -> impl FnMut(Completion<'_>) + '_ {
        |c: Completion<'_>| done.push((c.cid.0, c.user, c.status(), c.data.to_vec()))
    }

    #[test]
    fn receives_are_posted_up_front_one_per_entry() {
        let mut e = engine(0, 32, 0, 4096);
        assert_eq!(e.capacity(), 31);
        let r = e.pending_recvs().to_vec();
        assert_eq!(r.len(), 32, "HRQSIZE 32 on the admin queue");
        let mut offs: Vec<usize> = r.iter().map(|d| d.offset).collect();
        offs.dedup();
        assert_eq!(offs.len(), 32);
        assert!(r.iter().all(|d| d.len == 16 && d.wr_id & RECV_WR_BIT != 0));
        // Receive buffers lie after every send buffer.
        assert!(r.iter().all(|d| d.offset >= 31 * 64));
        assert!(r.iter().all(|d| d.offset + 16 <= e.ctrl_region().len()));
    }

    #[test]
    fn admin_write_goes_by_keyed_sgl_never_in_capsule() {
        // The Connect data (1024 bytes) on the admin queue: the controller RDMA-READs it.
        let mut e = engine(0, 32, 0, 8192);
        let mut peer = Peer::new(&mut e);
        let data: Vec<u8> = (0..1024u32).map(|i| (i * 7) as u8).collect();
        let sqe = Sqe::new(admin::FABRICS, CommandId(0));
        let cid = e
            .submit(sqe, DataDir::ToController, 1024, 9, |b| {
                b.copy_from_slice(&data)
            })
            .unwrap()
            .unwrap();
        let caps = peer.take_capsules(&mut e);
        assert_eq!(caps.len(), 1);
        let (wr_id, cap) = &caps[0];
        assert_eq!(*wr_id, u64::from(cid.0));
        assert_eq!(cap.len(), 64, "no in-capsule data on the admin queue");
        assert_eq!(
            u16::from_le_bytes([cap[2], cap[3]]),
            cid.0,
            "CID in the SQE"
        );
        assert_eq!(cap[1] >> 6, 1, "PSDT: SGL");
        let Sgl::Keyed {
            len, subtype, addr, ..
        } = sgl(cap)
        else {
            panic!()
        };
        assert_eq!((len, subtype), (1024, 0));
        assert_eq!(addr, e.data_addr(usize::from(cid.0)));
        assert_eq!(Peer::rdma_read(&mut e, cap), data);
        // Response first, then the send completion: the command completes on the latter.
        let mut done = Done::new();
        let w = peer.respond(&mut e, ok(cid.0, 1));
        assert_eq!(e.on_recv(w, 16, None, &mut sink(&mut done)).unwrap(), 0);
        assert!(done.is_empty());
        assert_eq!(e.on_send_done(*wr_id, &mut sink(&mut done)).unwrap(), 1);
        assert_eq!(done, vec![(cid.0, 9, Status::SUCCESS, vec![])]);
        assert_eq!(e.in_flight(), 0);
        // The receive buffer was handed back for reposting.
        assert_eq!(e.pending_recvs().len(), 1);
    }

    #[test]
    fn io_write_fits_in_capsule_else_keyed() {
        // IOCCSZ 4160/16 = 260: 4096 bytes of in-capsule data.
        let mut e = engine(1, 8, 4096, 128 * 1024);
        let mut peer = Peer::new(&mut e);
        let small = vec![0x5A; 4096];
        let c1 = e
            .submit(
                Sqe::new(io::WRITE, CommandId(0)),
                DataDir::ToController,
                4096,
                1,
                |b| b.copy_from_slice(&small),
            )
            .unwrap()
            .unwrap();
        let big = vec![0xC3; 8192];
        let c2 = e
            .submit(
                Sqe::new(io::WRITE, CommandId(0)),
                DataDir::ToController,
                8192,
                2,
                |b| b.copy_from_slice(&big),
            )
            .unwrap()
            .unwrap();
        let caps = peer.take_capsules(&mut e);
        assert_eq!(caps.len(), 2);
        assert_eq!(caps[0].1.len(), 64 + 4096);
        assert_eq!(
            sgl(&caps[0].1),
            Sgl::Offset {
                offset: 0,
                len: 4096
            }
        );
        assert_eq!(&caps[0].1[64..], &small[..]);
        assert_eq!(caps[1].1.len(), 64);
        assert!(matches!(
            sgl(&caps[1].1),
            Sgl::Keyed {
                len: 8192,
                subtype: 0,
                ..
            }
        ));
        assert_eq!(Peer::rdma_read(&mut e, &caps[1].1), big);
        // Send completions first, then the responses (the usual order).
        let mut done = Done::new();
        for (w, _) in &caps {
            assert_eq!(e.on_send_done(*w, &mut sink(&mut done)).unwrap(), 0);
        }
        let w = peer.respond(&mut e, ok(c2.0, 2));
        assert_eq!(e.on_recv(w, 16, None, &mut sink(&mut done)).unwrap(), 1);
        let w = peer.respond(&mut e, ok(c1.0, 2));
        assert_eq!(e.on_recv(w, 16, None, &mut sink(&mut done)).unwrap(), 1);
        assert_eq!(done.iter().map(|d| d.1).collect::<Vec<_>>(), vec![2, 1]);
    }

    #[test]
    fn read_data_is_lent_from_the_slot_buffer_the_controller_wrote() {
        let mut e = engine(1, 4, 0, 4096);
        let mut peer = Peer::new(&mut e);
        let cid = e
            .submit(
                Sqe::new(io::READ, CommandId(0)),
                DataDir::FromController,
                4096,
                77,
                |_| panic!("fill is for writes only"),
            )
            .unwrap()
            .unwrap();
        let caps = peer.take_capsules(&mut e);
        let payload: Vec<u8> = (0..4096u32).map(|i| (i ^ 0xA5) as u8).collect();
        Peer::rdma_write(&mut e, &caps[0].1, &payload);
        let mut done = Done::new();
        e.on_send_done(caps[0].0, &mut sink(&mut done)).unwrap();
        let w = peer.respond(&mut e, ok(cid.0, 1));
        e.on_recv(w, 16, None, &mut sink(&mut done)).unwrap();
        assert_eq!(done, vec![(cid.0, 77, Status::SUCCESS, payload)]);
    }

    #[test]
    fn failed_read_lends_no_data() {
        let mut e = engine(1, 4, 0, 512);
        let mut peer = Peer::new(&mut e);
        let cid = e
            .submit(
                Sqe::new(io::READ, CommandId(0)),
                DataDir::FromController,
                512,
                0,
                |_| {},
            )
            .unwrap()
            .unwrap();
        let caps = peer.take_capsules(&mut e);
        let mut done = Done::new();
        e.on_send_done(caps[0].0, &mut sink(&mut done)).unwrap();
        let bad = Cqe::new(cid, QueueId(1), Status::INVALID_NS);
        let w = peer.respond(&mut e, bad);
        e.on_recv(w, 16, None, &mut sink(&mut done)).unwrap();
        assert_eq!(done.len(), 1);
        assert!(!done[0].2.is_success());
        assert!(done[0].3.is_empty());
    }

    #[test]
    fn no_data_commands_carry_a_null_keyed_sgl() {
        let mut e = engine(1, 4, 4096, 4096);
        let mut peer = Peer::new(&mut e);
        e.submit(
            Sqe::new(io::FLUSH, CommandId(0)),
            DataDir::None,
            0,
            0,
            |_| {},
        )
        .unwrap()
        .unwrap();
        // A zero-length write is a command without data as well.
        e.submit(
            Sqe::new(io::WRITE, CommandId(0)),
            DataDir::ToController,
            0,
            0,
            |_| {},
        )
        .unwrap()
        .unwrap();
        for (_, cap) in peer.take_capsules(&mut e) {
            assert_eq!(cap.len(), 64);
            assert_eq!(&cap[24..39], &[0u8; 15]);
            assert_eq!(cap[39], 0x40);
        }
    }

    #[test]
    fn sq_flow_control_and_slot_limits() {
        let mut e = engine(1, 4, 0, 512);
        let mut peer = Peer::new(&mut e);
        let mut cids = Vec::new();
        for _ in 0..3 {
            let sqe = Sqe::new(io::FLUSH, CommandId(0));
            cids.push(e.submit(sqe, DataDir::None, 0, 0, |_| {}).unwrap().unwrap());
        }
        assert!(!e.can_submit());
        assert_eq!(
            e.submit(
                Sqe::new(io::FLUSH, CommandId(0)),
                DataDir::None,
                0,
                0,
                |_| {}
            )
            .unwrap(),
            None
        );
        let caps = peer.take_capsules(&mut e);
        let mut done = Done::new();
        for (w, _) in &caps {
            e.on_send_done(*w, &mut sink(&mut done)).unwrap();
        }
        // The controller completes one command but reports SQHD 0 (nothing fetched): the slot
        // is free yet the SQ is still full as far as SQHD says... bounded by what is in flight.
        let w = peer.respond(&mut e, ok(cids[0].0, 0));
        e.on_recv(w, 16, None, &mut sink(&mut done)).unwrap();
        assert_eq!(e.in_flight(), 2);
        assert!(
            e.can_submit(),
            "occupancy is capped by the commands outstanding"
        );
        // Too large for the slot buffers.
        assert!(matches!(
            e.submit(
                Sqe::new(io::READ, CommandId(0)),
                DataDir::FromController,
                513,
                0,
                |_| {}
            ),
            Err(HostError::InvalidArgument(_))
        ));
    }

    #[test]
    fn dissqfc_accepted_ignores_sqhd() {
        let mut e = engine(1, 3, 0, 512);
        e.connected(0xFFFF, true);
        assert!(!e.flow_control());
        let mut e = engine(1, 3, 0, 512);
        e.connected(0xFFFF, false);
        assert!(e.flow_control());
    }

    #[test]
    fn peer_errors_are_reported_not_panics() {
        let mut e = engine(1, 4, 0, 512);
        let mut peer = Peer::new(&mut e);
        let cid = e
            .submit(
                Sqe::new(io::FLUSH, CommandId(0)),
                DataDir::None,
                0,
                0,
                |_| {},
            )
            .unwrap()
            .unwrap();
        let caps = peer.take_capsules(&mut e);
        let mut done = Done::new();
        // A response for a CID never issued, and one beyond the slot table.
        for bad_cid in [2u16, 0xFFFF] {
            let w = peer.respond(&mut e, ok(bad_cid, 0));
            assert!(matches!(
                e.on_recv(w, 16, None, &mut sink(&mut done)),
                Err(HostError::UnexpectedPdu { .. })
            ));
        }
        // A short receive.
        let w = peer.respond(&mut e, ok(cid.0, 0));
        assert!(e.on_recv(w, 8, None, &mut sink(&mut done)).is_err());
        // A remote invalidation nobody asked for.
        let w = peer.respond(&mut e, ok(cid.0, 0));
        assert!(e.on_recv(w, 16, Some(RKEY), &mut sink(&mut done)).is_err());
        // The real response, then a duplicate before the send completion.
        let w = peer.respond(&mut e, ok(cid.0, 0));
        assert_eq!(e.on_recv(w, 16, None, &mut sink(&mut done)).unwrap(), 0);
        let w = peer.respond(&mut e, ok(cid.0, 0));
        assert!(e.on_recv(w, 16, None, &mut sink(&mut done)).is_err());
        // Unknown work request ids.
        assert!(e.on_recv(7, 16, None, &mut sink(&mut done)).is_err());
        assert!(
            e.on_recv(RECV_WR_BIT | 99, 16, None, &mut sink(&mut done))
                .is_err()
        );
        assert!(e.on_send_done(1 << 40, &mut sink(&mut done)).is_err());
        // The send completion still completes it, once.
        assert_eq!(e.on_send_done(caps[0].0, &mut sink(&mut done)).unwrap(), 1);
        assert!(e.on_send_done(caps[0].0, &mut sink(&mut done)).is_err());
        assert_eq!(done.len(), 1);
    }

    #[test]
    fn fail_in_flight_reports_every_user_tag() {
        let mut e = engine(1, 8, 0, 512);
        for u in [10u64, 20, 30] {
            e.submit(
                Sqe::new(io::FLUSH, CommandId(0)),
                DataDir::None,
                0,
                u,
                |_| {},
            )
            .unwrap()
            .unwrap();
        }
        let mut lost = Vec::new();
        e.fail_in_flight(|u| lost.push(u));
        lost.sort();
        assert_eq!(lost, vec![10, 20, 30]);
        assert_eq!(e.in_flight(), 0);
        assert!(e.can_submit());
    }

    #[test]
    fn oversized_queue_shapes_are_refused() {
        let cfg = EngineConfig {
            qid: QueueId(1),
            entries: 1,
            icd_max: 0,
            stride: 512,
        };
        assert!(RdmaEngine::new(cfg).is_err());
        let cfg = EngineConfig {
            entries: 4,
            stride: 1 << 24,
            ..cfg
        };
        assert!(RdmaEngine::new(cfg).is_err());
    }
}
