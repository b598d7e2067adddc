//! Replicated writes and flushes pipelined on one link I/O queue: many commands in flight,
//! each request's `done` called when all its chunks have completed.

use std::collections::HashMap;
use std::sync::Arc;

use nvme_spec::NamespaceId;
use nvmf_host::IoQueue;

/// Completion of a replicated operation: true when the peer has it.
pub(crate) type LinkDone = Box<dyn FnOnce(bool) + Send>;

/// One request to the link thread.
pub(crate) enum LinkReq {
    /// Write `data` at byte `offset` (FUA if asked).
    Write {
        offset: u64,
        data: Arc<Vec<u8>>,
        fua: bool,
        done: LinkDone,
    },
    /// Flush the peer's namespace.
    Flush { done: LinkDone },
    /// Push the namespace's reservation table (Mirror Reservations, `resv.rs`), alone on the
    /// link's admin queue.
    Resv { done: ResvDone },
    /// Read the peer's namespace size in bytes (Identify Namespace on the link's admin
    /// queue); `None`: the link is down or the peer did not say.
    PeerSize { done: SizeDone },
    /// Take or delete the peer's snapshot of the namespace (Mirror Snapshot, `snap.rs`), alone
    /// on the link's admin queue.
    Snapshot {
        op: nvme_spec::ebof_vendor::SnapshotOp,
        name: String,
        done: SnapDone,
    },
}

/// Completion of a [`LinkReq::Snapshot`]: Ok when the peer made it, else why not.
pub(crate) type SnapDone = Box<dyn FnOnce(Result<(), String>) + Send>;

/// Completion of a [`LinkReq::PeerSize`].
pub(crate) type SizeDone = Box<dyn FnOnce(Option<u64>) + Send>;

/// Completion of a reservation push: true when the peer has it; answers whether its waiter
/// still waited (false: it gave up, the link must be dropped so the reconnect pushes again).
pub(crate) type ResvDone = Box<dyn FnOnce(bool) -> bool + Send>;

impl LinkReq {
    pub(crate) fn fail(self) {
        match self {
            LinkReq::Write { done, .. } | LinkReq::Flush { done } => done(false),
            LinkReq::Resv { done } => {
                done(false);
            }
            LinkReq::PeerSize { done } => done(None),
            LinkReq::Snapshot { done, .. } => done(Err("the replication link is down".into())),
        }
    }
}

/// Largest single replicated write command (bytes); bigger requests are split.
pub(crate) const CHUNK: usize = 128 * 1024;

/// The outcome of [`Pipe::submit`].
pub(crate) enum Sub {
    /// Submitted (all its chunks).
    Queued,
    /// No room now: poll, then submit it again.
    Full(LinkReq),
    /// More chunks than the queue has slots: run it alone, unpipelined.
    Big(LinkReq),
}

struct Pending {
    parts: usize,
    ok: bool,
    done: LinkDone,
}

/// The requests in flight on the queue.
pub(crate) struct Pipe {
    nsid: NamespaceId,
    block: usize,
    pending: HashMap<u64, Pending>,
    next: u64,
    /// The status of a command the peer answered with an error, not yet reported.
    failed: Option<nvme_spec::Status>,
}

impl Pipe {
    pub(crate) fn new(nsid: u32, block_size: u32) -> Pipe {
        Pipe {
            nsid: NamespaceId(nsid),
            block: block_size.max(1) as usize,
            pending: HashMap::new(),
            next: 0,
            failed: None,
        }
    }

    /// Requests in flight.
    pub(crate) fn in_flight(&self) -> usize {
        self.pending.len()
    }

    /// Bytes per write command on `q` (a multiple of the block size).
    pub(crate) fn chunk(&self, q: &IoQueue) -> usize {
        let c = CHUNK.min(q.max_io().max(self.block));
        (c / self.block).max(1) * self.block
    }

    /// Submit `r` (all chunks or none).
    pub(crate) fn submit(&mut self, q: &mut IoQueue, r: LinkReq) -> Result<Sub, String> {
        let chunk = self.chunk(q);
        let parts = match &r {
            LinkReq::Write { data, .. } => data.len().div_ceil(chunk).max(1),
            LinkReq::Flush { .. } => 1,
            // Not an I/O command: the link runs it alone.
            LinkReq::Resv { .. } | LinkReq::PeerSize { .. } | LinkReq::Snapshot { .. } => {
                return Ok(Sub::Big(r));
            }
        };
        let free = q.capacity().saturating_sub(q.in_flight());
        if parts > q.capacity().saturating_sub(1).max(1) {
            return Ok(Sub::Big(r));
        }
        if parts > free {
            return Ok(Sub::Full(r));
        }
        let id = self.next;
        self.next += 1;
        let err = |e: nvmf_host::HostError| e.to_string();
        const FULL: &str = "link queue full after room was checked";
        let done = match r {
            LinkReq::Write {
                offset,
                data,
                fua,
                done,
            } => {
                for (i, part) in data.chunks(chunk).enumerate() {
                    let slba = (offset + (i * chunk) as u64) / self.block as u64;
                    let nlb = (part.len() / self.block) as u32;
                    let s = q
                        .submit_write_fua(self.nsid, slba, nlb, part.len(), id, fua, |b| {
                            b.copy_from_slice(part)
                        })
                        .map_err(err)?;
                    if s.is_none() {
                        return Err(FULL.into());
                    }
                }
                done
            }
            LinkReq::Flush { done } => {
                if q.submit_flush(self.nsid, id).map_err(err)?.is_none() {
                    return Err(FULL.into());
                }
                done
            }
            LinkReq::Resv { .. } | LinkReq::PeerSize { .. } | LinkReq::Snapshot { .. } => {
                return Ok(Sub::Big(r));
            }
        };
        self.pending.insert(
            id,
            Pending {
                parts,
                ok: true,
                done,
            },
        );
        Ok(Sub::Queued)
    }

    /// Wait for completions and finish the requests they complete. A command answered with an
    /// error fails its request and the link (Err: reconnect, the primary degrades).
    /// Cancel-safe: a completion handled before the future is dropped keeps its error in the
    /// pipe, and the next call returns it.
    pub(crate) async fn poll(&mut self, q: &mut IoQueue) -> Result<(), String> {
        self.take_failure()?;
        let pending = &mut self.pending;
        let failed = &mut self.failed;
        q.poll_completions(|c| {
            let Some(p) = pending.get_mut(&c.user) else {
                return;
            };
            if !c.is_success() {
                p.ok = false;
                *failed = Some(c.status());
            }
            p.parts -= 1;
            if p.parts == 0
                && let Some(p) = pending.remove(&c.user)
            {
                (p.done)(p.ok);
            }
        })
        .await
        .map_err(|e| e.to_string())?;
        self.take_failure()
    }

    /// A command the peer answered with an error since the last call: Err (the link fails).
    pub(crate) fn take_failure(&mut self) -> Result<(), String> {
        match self.failed.take() {
            Some(s) => Err(format!("peer answered {s:?}")),
            None => Ok(()),
        }
    }

    /// Fail every request in flight (the link is gone).
    pub(crate) fn fail_all(&mut self) {
        for (_, p) in self.pending.drain() {
            (p.done)(false);
        }
    }
}
