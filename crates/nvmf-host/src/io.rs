//! I/O queues: one TCP connection each, owned by one task.
//!
//! Two ways to use an [`IoQueue`]:
//! - **Many commands in flight** (the fast path): `submit_*` queue commands (each returns its
//!   CID, or `None` when the queue is full) and [`IoQueue::poll_completions`] sends everything
//!   submitted since the last call in one write, waits for at least one completion, and hands
//!   every completion that has arrived to a callback. Data buffers are the queue's own per-slot
//!   buffers: a write's data is produced by a `fill` closure writing straight into the slot, a
//!   read's data is lent to the callback. Nothing is allocated per command.
//! - **One command at a time**: [`IoQueue::read`], [`IoQueue::write`], [`IoQueue::flush`],
//!   [`IoQueue::write_zeroes`], [`IoQueue::deallocate`] submit, wait and return. They refuse to
//!   run while `submit_*` commands are outstanding ([`HostError::QueueBusy`]).
//!
//! A queue whose connection fails is dead: `poll_completions` returns the error once, then
//! every call fails with [`HostError::Disconnected`]; [`IoQueue::fail_in_flight`] reports the
//! commands that were lost. Open a new queue (after [`crate::Controller::reconnect`] if the
//! admin connection is gone too).

use std::net::SocketAddr;
use std::time::Duration;

use nvme_spec::opcode::io;
use nvme_spec::{CommandId, ControllerId, NamespaceId, QueueId, Sqe};
use nvmf_tcp::Digests;

use crate::command::{Completion, DataDir};
use crate::config::{ConnectParams, HostConfig, LinkParams, Transport};
use crate::error::{HostError, Result};
use crate::session;
use crate::transport::AnyQueue;

/// Default and minimum largest transfer an I/O queue is prepared to receive in one PDU.
const DEFAULT_MAX_IO: usize = 1 << 20;
const MIN_MAX_IO: usize = 128 * 1024;
/// NVMe/RDMA: the default largest transfer, which is also each command slot's registered
/// buffer (queue depth × this much memory is registered per queue).
const RDMA_DEFAULT_MAX_IO: usize = 128 * 1024;
/// Dataset Management ranges per command (NR is 8 bits, 0's based).
pub const DSM_MAX_RANGES: usize = 256;
/// Read/Write CDW12 bit 30: Force Unit Access (NVM Command Set 1.0, 3.2.6): the write
/// completes only once its data is on non-volatile media.
const RW_FUA: u32 = 1 << 30;

/// Options for opening an I/O queue.
#[derive(Clone, Debug)]
pub struct IoQueueOptions {
    /// Queue ID (1..=number of I/O queues the controller allows).
    pub qid: u16,
    /// SQ entries (SQSIZE + 1); at most `entries - 1` commands are outstanding.
    pub entries: u16,
    /// Ask for SQ flow control to be disabled (Connect CATTR.DISSQFC).
    pub dissqfc: bool,
    /// Largest transfer of one command on this queue (bounded by MDTS); 0 = the default
    /// (min(MDTS, 1 MiB)). Also bounds the C2HData PDU size accepted.
    pub max_io: usize,
    /// Bytes to preallocate in every slot's data buffer (e.g. the block size of a benchmark),
    /// so that the first commands do not allocate either.
    pub prealloc: usize,
    /// Poll the socket without sleeping while commands are in flight (as SPDK's initiator
    /// does): lower latency and more I/O per core, at the price of a busy core. Other queues
    /// on the same thread still run (the poller yields between attempts).
    pub busy_poll: bool,
}

impl IoQueueOptions {
    /// Options for I/O queue `qid` with `entries` SQ entries; everything else off or default.
    pub fn new(qid: u16, entries: u16) -> IoQueueOptions {
        IoQueueOptions {
            qid,
            entries,
            dissqfc: false,
            max_io: 0,
            prealloc: 0,
            busy_poll: false,
        }
    }
    /// Set [`IoQueueOptions::busy_poll`].
    pub fn busy_poll(mut self, on: bool) -> Self {
        self.busy_poll = on;
        self
    }
    /// Set [`IoQueueOptions::dissqfc`].
    pub fn dissqfc(mut self, on: bool) -> Self {
        self.dissqfc = on;
        self
    }
    /// Set [`IoQueueOptions::max_io`] (bytes; 0: the default).
    pub fn max_io(mut self, bytes: usize) -> Self {
        self.max_io = bytes;
        self
    }
    /// Set [`IoQueueOptions::prealloc`] (bytes per slot).
    pub fn prealloc(mut self, bytes: usize) -> Self {
        self.prealloc = bytes;
        self
    }
}

/// Everything needed to open I/O queues of one controller, from any thread or runtime (an
/// `IoQueue`'s socket belongs to the runtime that opened it). Get one from
/// [`crate::Controller::io_connector`].
#[derive(Clone, Debug)]
pub struct IoConnector {
    pub(crate) addr: SocketAddr,
    pub(crate) subnqn: String,
    pub(crate) cfg: HostConfig,
    pub(crate) cntlid: ControllerId,
    pub(crate) icd_max: usize,
    pub(crate) max_transfer: Option<usize>,
    /// CAP.MQES + 1.
    pub(crate) max_entries: u32,
}

impl IoConnector {
    /// Largest SQ size (entries) the controller supports (CAP.MQES + 1).
    pub fn max_entries(&self) -> u32 {
        self.max_entries
    }
    /// Largest transfer per command (MDTS), `None` if unlimited.
    pub fn max_transfer(&self) -> Option<usize> {
        self.max_transfer
    }
    /// In-capsule data limit of I/O queues.
    pub fn icd_max(&self) -> usize {
        self.icd_max
    }

    /// Open an I/O queue: a TCP connection, ICReq/ICResp, Fabrics Connect with the controller's
    /// CNTLID.
    pub async fn connect(&self, o: &IoQueueOptions) -> Result<IoQueue> {
        if o.qid == 0 {
            return Err(HostError::InvalidArgument(
                "I/O queue id 0 (the admin queue)".into(),
            ));
        }
        if o.entries < 2 || u32::from(o.entries) > self.max_entries {
            return Err(HostError::InvalidArgument(format!(
                "I/O queue size {} (controller allows 2..={})",
                o.entries, self.max_entries
            )));
        }
        let mdts = self.max_transfer.unwrap_or(usize::MAX);
        let max_io = if o.max_io == 0 {
            match self.cfg.transport {
                Transport::Tcp => DEFAULT_MAX_IO,
                // Every slot's buffer is registered memory of this size.
                Transport::Rdma => RDMA_DEFAULT_MAX_IO,
            }
            .min(mdts)
        } else {
            o.max_io
        };
        if max_io > mdts {
            return Err(HostError::InvalidArgument(format!(
                "max I/O {max_io} bytes exceeds MDTS ({mdts} bytes)"
            )));
        }
        let max_c2h = u32::try_from(max_io.max(MIN_MAX_IO))
            .map_err(|_| HostError::InvalidArgument(format!("max I/O {max_io} bytes")))?;
        let lp = LinkParams {
            addr: self.addr,
            digests: Digests {
                hdgst: self.cfg.hdr_digest,
                ddgst: self.cfg.data_digest,
            },
            max_c2h_data: max_c2h,
            connect_timeout: self.cfg.connect_timeout,
            tls: self.cfg.tls.clone(),
        };
        let cp = ConnectParams {
            qid: QueueId(o.qid),
            entries: o.entries,
            dissqfc: o.dissqfc,
            kato_ms: 0,
            cntlid: self.cntlid,
            hostid: self.cfg.hostid,
            hostnqn: self.cfg.hostnqn.clone(),
            subnqn: self.subnqn.clone(),
            icd_max: self.icd_max,
            dhchap: self.cfg.dhchap.clone(),
        };
        let (q, _) =
            session::connect(self.cfg.transport, &lp, &cp, o.prealloc.min(max_io), max_io).await?;
        Ok(IoQueue {
            q,
            max_io,
            timeout: self.cfg.io_timeout,
            busy_poll: o.busy_poll,
        })
    }
}

/// One I/O queue. See the module docs.
pub struct IoQueue {
    q: AnyQueue,
    max_io: usize,
    timeout: Duration,
    busy_poll: bool,
}

impl std::fmt::Debug for IoQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IoQueue")
            .field("peer", &self.q.peer())
            .field("qid", &self.q.qid().0)
            .field("in_flight", &self.q.in_flight())
            .finish()
    }
}

fn rw_sqe(opcode: u8, nsid: NamespaceId, slba: u64, nlb: u32) -> Result<Sqe> {
    if nlb == 0 || nlb > 65536 {
        return Err(HostError::InvalidArgument(format!(
            "{nlb} blocks (1..=65536)"
        )));
    }
    let mut sqe = Sqe::new(opcode, CommandId(0));
    sqe.set_nsid(nsid);
    sqe.set_slba(slba);
    sqe.set_nlb(nlb);
    Ok(sqe)
}

/// A Write SQE, with FUA if asked.
fn write_sqe(nsid: NamespaceId, slba: u64, nlb: u32, fua: bool) -> Result<Sqe> {
    let mut sqe = rw_sqe(io::WRITE, nsid, slba, nlb)?;
    if fua {
        sqe.set_cdw(12, sqe.cdw12() | RW_FUA);
    }
    Ok(sqe)
}

impl IoQueue {
    /// The queue's QID.
    pub fn qid(&self) -> QueueId {
        self.q.qid()
    }
    /// Commands currently outstanding.
    pub fn in_flight(&self) -> usize {
        self.q.in_flight()
    }
    /// Most commands that can be outstanding (SQ entries − 1).
    pub fn capacity(&self) -> usize {
        self.q.capacity()
    }
    /// True if another command can be submitted now.
    pub fn can_submit(&self) -> bool {
        self.q.can_submit()
    }
    /// Largest transfer of one command on this queue.
    pub fn max_io(&self) -> usize {
        self.max_io
    }
    /// Writes up to this many bytes go in the command capsule; larger ones wait for R2T.
    pub fn icd_max(&self) -> usize {
        self.q.icd_max()
    }
    /// MAXH2CDATA granted in ICResp.
    pub fn maxh2cdata(&self) -> u32 {
        self.q.maxh2cdata()
    }
    /// Digests in force on this connection.
    pub fn digests(&self) -> Digests {
        self.q.digests()
    }
    /// False when the controller agreed to disable SQ flow control (DISSQFC).
    pub fn flow_control(&self) -> bool {
        self.q.flow_control()
    }
    /// True once the connection has failed.
    pub fn is_broken(&self) -> bool {
        self.q.is_broken()
    }

    fn check_len(&self, len: usize) -> Result<()> {
        if len > self.max_io {
            return Err(HostError::InvalidArgument(format!(
                "transfer of {len} bytes exceeds the queue's max I/O ({})",
                self.max_io
            )));
        }
        Ok(())
    }

    /// Submit any command. The CID and SGL of `sqe` are set here; `len` bytes move in
    /// direction `dir`; for [`DataDir::ToController`] `fill` writes them into the slot buffer.
    /// `Ok(None)`: the queue is full, poll first.
    pub fn submit_raw(
        &mut self,
        sqe: Sqe,
        dir: DataDir,
        len: usize,
        user: u64,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<Option<CommandId>> {
        self.check_len(len)?;
        self.q.submit(sqe, dir, len, user, fill)
    }

    /// Submit a Read of `nlb` blocks at `slba` transferring `len` bytes (= nlb × block size).
    pub fn submit_read(
        &mut self,
        nsid: NamespaceId,
        slba: u64,
        nlb: u32,
        len: usize,
        user: u64,
    ) -> Result<Option<CommandId>> {
        let sqe = rw_sqe(io::READ, nsid, slba, nlb)?;
        self.submit_raw(sqe, DataDir::FromController, len, user, |_| {})
    }

    /// Submit a Write of `nlb` blocks at `slba`; `fill` writes the `len` bytes of data into the
    /// slot's buffer.
    pub fn submit_write(
        &mut self,
        nsid: NamespaceId,
        slba: u64,
        nlb: u32,
        len: usize,
        user: u64,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<Option<CommandId>> {
        self.submit_write_fua(nsid, slba, nlb, len, user, false, fill)
    }

    /// [`IoQueue::submit_write`], with Force Unit Access if `fua`: the write then completes
    /// only once its data is durable, as if followed by a Flush of its blocks.
    #[allow(clippy::too_many_arguments)]
    pub fn submit_write_fua(
        &mut self,
        nsid: NamespaceId,
        slba: u64,
        nlb: u32,
        len: usize,
        user: u64,
        fua: bool,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<Option<CommandId>> {
        let sqe = write_sqe(nsid, slba, nlb, fua)?;
        self.submit_raw(sqe, DataDir::ToController, len, user, fill)
    }

    /// Submit a Flush.
    pub fn submit_flush(&mut self, nsid: NamespaceId, user: u64) -> Result<Option<CommandId>> {
        let mut sqe = Sqe::new(io::FLUSH, CommandId(0));
        sqe.set_nsid(nsid);
        self.submit_raw(sqe, DataDir::None, 0, user, |_| {})
    }

    /// Submit a Write Zeroes of `nlb` blocks at `slba`.
    pub fn submit_write_zeroes(
        &mut self,
        nsid: NamespaceId,
        slba: u64,
        nlb: u32,
        user: u64,
    ) -> Result<Option<CommandId>> {
        let sqe = rw_sqe(io::WRITE_ZEROES, nsid, slba, nlb)?;
        self.submit_raw(sqe, DataDir::None, 0, user, |_| {})
    }

    /// Submit a Dataset Management Deallocate of `ranges` (starting LBA, block count).
    pub fn submit_deallocate(
        &mut self,
        nsid: NamespaceId,
        ranges: &[(u64, u32)],
        user: u64,
    ) -> Result<Option<CommandId>> {
        if ranges.is_empty() || ranges.len() > DSM_MAX_RANGES {
            return Err(HostError::InvalidArgument(format!(
                "{} ranges (1..={DSM_MAX_RANGES})",
                ranges.len()
            )));
        }
        let mut sqe = Sqe::new(io::DATASET_MGMT, CommandId(0));
        sqe.set_nsid(nsid);
        sqe.set_cdw(10, (ranges.len() - 1) as u32); // NR, 0's based
        sqe.set_cdw(11, nvme_spec::opcode::DSM_ATTR_DEALLOCATE);
        // Range: context attributes u32 @0, length in LBAs u32 @4, starting LBA u64 @8.
        self.submit_raw(sqe, DataDir::ToController, ranges.len() * 16, user, |b| {
            for (chunk, (slba, nlb)) in b.chunks_exact_mut(16).zip(ranges) {
                chunk[0..4].fill(0);
                chunk[4..8].copy_from_slice(&nlb.to_le_bytes());
                chunk[8..16].copy_from_slice(&slba.to_le_bytes());
            }
        })
    }

    /// Send what was submitted, wait until at least one command completes, and call `f` for
    /// every completion that has arrived. Returns how many completed; `Ok(0)` at once when
    /// nothing is outstanding. A controller silent for the configured I/O timeout while
    /// commands are outstanding fails the queue with [`HostError::Timeout`].
    pub async fn poll_completions<F: FnMut(Completion<'_>)>(&mut self, mut f: F) -> Result<usize> {
        session::poll(&mut self.q, &mut f, self.timeout, self.busy_poll).await
    }

    /// Like [`IoQueue::poll_completions`] but never waits: sends pending output and handles
    /// whatever has already arrived.
    pub fn try_poll_completions<F: FnMut(Completion<'_>)>(&mut self, mut f: F) -> Result<usize> {
        self.q.try_io(&mut f)
    }

    /// Abandon every outstanding command, calling `f` with each one's user tag. The queue is
    /// dead afterwards (CIDs of abandoned commands cannot be reused safely).
    pub fn fail_in_flight(&mut self, f: impl FnMut(u64)) {
        self.q.fail_in_flight(f)
    }

    async fn run_one(
        &mut self,
        sqe: Sqe,
        dir: DataDir,
        len: usize,
        fill: impl FnOnce(&mut [u8]),
        sink: impl FnMut(&[u8]),
    ) -> Result<()> {
        if self.q.in_flight() != 0 {
            return Err(HostError::QueueBusy);
        }
        self.check_len(len)?;
        let cid = self
            .q
            .submit(sqe, dir, len, 0, fill)?
            .ok_or(HostError::QueueBusy)?;
        self.wait_for(cid, sink).await
    }

    /// Poll until command `cid` (the only one outstanding) completes; `sink` sees its data.
    async fn wait_for(&mut self, cid: CommandId, mut sink: impl FnMut(&[u8])) -> Result<()> {
        let mut status = None;
        while status.is_none() {
            session::poll(
                &mut self.q,
                &mut |c: Completion<'_>| {
                    if c.cid == cid {
                        if c.is_success() {
                            sink(c.data);
                        }
                        status = Some(c.status());
                    }
                },
                self.timeout,
                self.busy_poll,
            )
            .await?;
        }
        match status {
            Some(s) if s.is_success() => Ok(()),
            Some(s) => Err(HostError::Status(s)),
            None => Err(HostError::Disconnected),
        }
    }

    /// Read `nlb` blocks at `slba` into `buf` (whose length must be nlb × block size).
    pub async fn read(
        &mut self,
        nsid: NamespaceId,
        slba: u64,
        nlb: u32,
        buf: &mut [u8],
    ) -> Result<()> {
        let sqe = rw_sqe(io::READ, nsid, slba, nlb)?;
        let len = buf.len();
        let mut got = 0;
        self.run_one(
            sqe,
            DataDir::FromController,
            len,
            |_| {},
            |d| {
                buf[..d.len()].copy_from_slice(d);
                got = d.len();
            },
        )
        .await?;
        if got != len {
            return Err(HostError::UnexpectedPdu {
                reason: "short read data",
                cid: 0,
            });
        }
        Ok(())
    }

    /// Write `buf` (nlb × block size bytes) at `slba`.
    pub async fn write(
        &mut self,
        nsid: NamespaceId,
        slba: u64,
        nlb: u32,
        buf: &[u8],
    ) -> Result<()> {
        let sqe = rw_sqe(io::WRITE, nsid, slba, nlb)?;
        self.run_one(
            sqe,
            DataDir::ToController,
            buf.len(),
            |b| b.copy_from_slice(buf),
            |_| {},
        )
        .await
    }

    /// Flush the namespace's volatile write cache.
    pub async fn flush(&mut self, nsid: NamespaceId) -> Result<()> {
        let mut sqe = Sqe::new(io::FLUSH, CommandId(0));
        sqe.set_nsid(nsid);
        self.run_one(sqe, DataDir::None, 0, |_| {}, |_| {}).await
    }

    /// Write Zeroes to `nlb` blocks at `slba`.
    pub async fn write_zeroes(&mut self, nsid: NamespaceId, slba: u64, nlb: u32) -> Result<()> {
        let sqe = rw_sqe(io::WRITE_ZEROES, nsid, slba, nlb)?;
        self.run_one(sqe, DataDir::None, 0, |_| {}, |_| {}).await
    }

    /// Deallocate (trim) the given (starting LBA, block count) ranges.
    pub async fn deallocate(&mut self, nsid: NamespaceId, ranges: &[(u64, u32)]) -> Result<()> {
        if self.q.in_flight() != 0 {
            return Err(HostError::QueueBusy);
        }
        let cid = self
            .submit_deallocate(nsid, ranges, 0)?
            .ok_or(HostError::QueueBusy)?;
        self.wait_for(cid, |_| {}).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fua_is_cdw12_bit_30_beside_the_block_count() {
        let plain = write_sqe(NamespaceId(1), 7, 8, false).unwrap();
        let fua = write_sqe(NamespaceId(1), 7, 8, true).unwrap();
        assert_eq!(plain.cdw12(), 7); // NLB, 0's based
        assert_eq!(fua.cdw12(), (1 << 30) | 7);
        assert_eq!(fua.opcode(), io::WRITE);
    }
}
