//! The backend a mirrored namespace uses: reads local, writes on both copies (primary).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use ebof_backend::{AsyncWrites, Backend, BackendError, BackendKind, WriteDone};
use tokio::sync::mpsc::UnboundedSender;

use crate::chan::LinkTx;
use crate::lease::Ask;
use crate::link::LinkReq;
use crate::shared::Shared;
use crate::{PeerState, Role, inaccessible};

/// `Backend` over the local one that replicates writes to the peer on the primary.
pub struct MirrorBackend {
    shared: Arc<Shared>,
    local: Arc<dyn Backend>,
    link: LinkTx,
    gate: Gate,
}

/// What decides whether a replicated operation may complete: the mirror's state and (with a
/// witness) the lease loop. Cloned into completions that run on the link thread.
#[derive(Clone)]
struct Gate {
    shared: Arc<Shared>,
    lease: Option<UnboundedSender<Ask>>,
}

impl std::fmt::Debug for MirrorBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MirrorBackend")
            .field("nsid", &self.shared.spec.nsid)
            .finish()
    }
}

impl MirrorBackend {
    pub(crate) fn new(
        shared: Arc<Shared>,
        local: Arc<dyn Backend>,
        link: LinkTx,
        lease: Option<UnboundedSender<Ask>>,
    ) -> MirrorBackend {
        MirrorBackend {
            gate: Gate {
                shared: shared.clone(),
                lease,
            },
            shared,
            local,
            link,
        }
    }

    fn finish(&self, local: Result<(), BackendError>, remote_ok: bool) -> Result<(), BackendError> {
        self.gate.finish(local, remote_ok)
    }

    fn lease_gate(&self) -> Result<(), BackendError> {
        self.gate.lease_gate()
    }
}

impl Gate {
    /// Complete a replicated operation whose local half gave `local` and remote half `remote_ok`.
    fn finish(&self, local: Result<(), BackendError>, remote_ok: bool) -> Result<(), BackendError> {
        match (local, remote_ok) {
            (Err(e), ok) => {
                if !ok {
                    self.shared.degrade();
                }
                Err(e)
            }
            (Ok(()), true) => self.lease_gate(),
            (Ok(()), false) => self.remote_failed(),
        }
    }

    /// A primary may start (and complete) a write or flush: not fenced, lease held.
    fn lease_gate(&self) -> Result<(), BackendError> {
        if self.shared.lease_ok() {
            Ok(())
        } else {
            Err(inaccessible())
        }
    }

    /// A failed remote half needs no word from the witness: none configured, promoted by
    /// force, or our "not in sync" report is held under a valid lease.
    fn covered(&self) -> bool {
        self.lease.is_none()
            || self.shared.forced.load(Ordering::Acquire)
            || (self.shared.covered.load(Ordering::SeqCst) && self.shared.lease_ok())
    }

    /// The remote half of an operation failed: degraded, and with a witness the operation
    /// may complete alone only once the witness holds our "peer not in sync" report (see
    /// `lease.rs`); else Err(inaccessible) (the lease loop has fenced us).
    fn remote_failed(&self) -> Result<(), BackendError> {
        let failed_at = Instant::now();
        self.shared.degrade();
        if self.covered() {
            return Ok(());
        }
        let Some(lease) = &self.lease else {
            return Ok(());
        };
        let (reply, rx) = std::sync::mpsc::sync_channel(1);
        if lease.send(Ask::Degrade { failed_at, reply }).is_err() {
            return Err(inaccessible());
        }
        match rx.recv_timeout(self.shared.spec.lease) {
            Ok(true) => Ok(()),
            _ => Err(inaccessible()),
        }
    }
}

impl MirrorBackend {
    /// Replicate a change of `offset..offset+len`: mark its regions, run `local` under the
    /// region locks while the peer gets `remote` (None: the change cannot be replicated as data,
    /// the regions stay dirty and the peer is degraded), then wait for the peer.
    fn replicated(
        &self,
        offset: u64,
        len: u64,
        remote: Option<Arc<Vec<u8>>>,
        fua: bool,
        local: impl FnOnce() -> Result<(), BackendError>,
    ) -> Result<(), BackendError> {
        if self.shared.role() != Role::Primary {
            return local();
        }
        self.lease_gate()?;
        self.shared.in_flight.fetch_add(1, Ordering::AcqRel);
        let _flight = Flight(&self.shared);
        self.shared.mark(offset, len);
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let res = {
            let _locks = self.shared.region_locks(offset, len);
            let sent = match remote {
                Some(data) => {
                    let done = Box::new(move |ok| {
                        let _ = tx.send(ok);
                    });
                    self.link
                        .send(LinkReq::Write {
                            offset,
                            data,
                            fua,
                            done,
                        })
                        .is_ok()
                }
                None => false,
            };
            (local(), sent)
        };
        let (local_res, sent) = res;
        let remote_ok = sent && rx.recv().unwrap_or(false);
        self.finish(local_res, remote_ok)
    }
}

/// Counts one replicated operation in flight.
struct Flight<'a>(&'a Shared);

impl Drop for Flight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Backend for MirrorBackend {
    fn kind(&self) -> BackendKind {
        self.local.kind()
    }

    fn size(&self) -> u64 {
        self.local.size()
    }

    /// Copies never shrink, and the primary grows only once its peer holds the new size
    /// (grow the secondary first, as the CSI driver does): a primary larger than its peer
    /// would replicate writes past the peer's end.
    fn resize(&self, new_size: u64) -> Result<(), BackendError> {
        let size = self.local.size();
        if new_size < size {
            return Err(refused(format!(
                "a replicated namespace does not shrink ({size} bytes now, {new_size} asked)"
            )));
        }
        if new_size > size && self.shared.role() == Role::Primary {
            let peer = self.peer_size();
            if peer.is_none_or(|p| p < new_size) {
                let what = match peer {
                    Some(p) => format!("the secondary ({}) holds {p} bytes", self.shared.spec.peer),
                    None => format!(
                        "the secondary ({}) cannot be asked its size now",
                        self.shared.spec.peer
                    ),
                };
                return Err(refused(format!(
                    "{what}: grow the secondary to {new_size} bytes first, then this copy"
                )));
            }
        }
        self.local.resize(new_size)
    }

    fn may_block(&self) -> bool {
        // Reads are the local copy's.
        self.local.may_block()
    }

    fn writes_block(&self) -> bool {
        // Replicated writes wait for the peer.
        true
    }

    fn async_writes(&self) -> Option<&dyn AsyncWrites> {
        Some(self)
    }

    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), BackendError> {
        self.local.read(offset, buf)
    }

    fn memory(&self, offset: u64, len: usize) -> Option<std::ptr::NonNull<u8>> {
        self.local.memory(offset, len)
    }

    fn write(&self, offset: u64, buf: &[u8]) -> Result<(), BackendError> {
        let data = (self.shared.role() == Role::Primary).then(|| Arc::new(buf.to_vec()));
        let len = buf.len() as u64;
        self.replicated(offset, len, data, false, || self.local.write(offset, buf))
    }

    fn flush(&self) -> Result<(), BackendError> {
        if self.shared.role() != Role::Primary {
            return self.local.flush();
        }
        self.lease_gate()?;
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let done = Box::new(move |ok| {
            let _ = tx.send(ok);
        });
        let sent = self.link.send(LinkReq::Flush { done }).is_ok();
        let res = self.local.flush();
        let remote_ok = sent && rx.recv().unwrap_or(false);
        self.finish(res, remote_ok)
    }

    fn write_zeroes(&self, offset: u64, len: u64) -> Result<(), BackendError> {
        let data = (self.shared.role() == Role::Primary && len <= 64 << 20)
            .then(|| Arc::new(vec![0u8; len as usize]));
        self.replicated(offset, len, data, false, || {
            self.local.write_zeroes(offset, len)
        })
    }

    fn deallocate(&self, offset: u64, len: u64) -> Result<(), BackendError> {
        // Deallocated blocks read back as zeroes: the peer gets zeroes.
        self.write_zeroes_or_dealloc(offset, len)
    }

    fn allocated_bytes(&self) -> u64 {
        self.local.allocated_bytes()
    }

    /// Whether this box's copy is encrypted: each box encrypts its own copy under its own key
    /// (ADR 0029); the link carries what the host wrote.
    fn encrypted(&self) -> bool {
        self.local.encrypted()
    }

    fn thin(&self) -> bool {
        self.local.thin()
    }
}

impl MirrorBackend {
    fn write_zeroes_or_dealloc(&self, offset: u64, len: u64) -> Result<(), BackendError> {
        let data = (self.shared.role() == Role::Primary && len <= 64 << 20)
            .then(|| Arc::new(vec![0u8; len as usize]));
        self.replicated(offset, len, data, false, || {
            self.local.deallocate(offset, len)
        })
    }

    /// The peer's namespace size, asked over the link (None: down, or no answer in time).
    fn peer_size(&self) -> Option<u64> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let done = Box::new(move |size| {
            let _ = tx.send(size);
        });
        self.link.send(LinkReq::PeerSize { done }).ok()?;
        rx.recv_timeout(self.shared.link_timeout()).ok().flatten()
    }

    /// The peer state as the backend sees it (for tests).
    pub fn peer_state(&self) -> PeerState {
        self.shared.peer()
    }
}

/// Replicated writes without a waiting thread: the local copy is written at once (a copy that
/// does not block: RAM), the peer's half goes to the link, and the link thread completes the
/// write when the peer has it. [`Backend::write`]'s rules, in the same order; whatever would
/// wait here (a resync holding the region, a bitmap page to sync, a copy that blocks) is
/// declined and runs the blocking way.
impl AsyncWrites for MirrorBackend {
    fn write_now(&self, offset: u64, data: &[u8]) -> Option<Result<(), BackendError>> {
        (self.shared.role() != Role::Primary && !self.local.may_block())
            .then(|| self.local.write(offset, data))
    }

    fn start_write(
        &self,
        offset: u64,
        len: usize,
        buf: Vec<u8>,
        done: WriteDone,
    ) -> Result<(), (Vec<u8>, WriteDone)> {
        if self.local.may_block() || buf.len() < len {
            return Err((buf, done));
        }
        if let Some(res) = self.write_now(offset, &buf[..len]) {
            done(buf, res);
            return Ok(());
        }
        if let Err(e) = self.lease_gate() {
            done(buf, Err(e));
            return Ok(());
        }
        // Counted in flight before its regions are marked, as a blocking write is: the lazy
        // clear (`Shared::sweep`) never wipes a mark whose write has not completed.
        self.shared.in_flight.fetch_add(1, Ordering::AcqRel);
        let locks = self.shared.try_region_locks(offset, len as u64);
        let Some(locks) = locks.filter(|_| self.shared.mark_in_memory(offset, len as u64)) else {
            self.shared.in_flight.fetch_sub(1, Ordering::AcqRel);
            return Err((buf, done));
        };
        // Held until the reactor's round ends ([`AsyncWrites::push_started`]): the link
        // takes the round's writes with one wake-up.
        self.write_marked(offset, len, buf, done);
        drop(locks);
        Ok(())
    }

    /// [`AsyncWrites::start_write`]'s way on a worker thread: the marks synced (a group
    /// commit with the other writers, `Shared::mark`) and the region locks waited for, then
    /// the same as from the reactor; the worker is free once the local copy has the data.
    fn run_declined(&self, offset: u64, len: usize, buf: Vec<u8>, done: WriteDone) {
        if self.shared.role() != Role::Primary {
            let res = self.local.write(offset, &buf[..len]);
            return done(buf, res);
        }
        if let Err(e) = self.lease_gate() {
            return done(buf, Err(e));
        }
        self.shared.in_flight.fetch_add(1, Ordering::AcqRel);
        self.shared.mark(offset, len as u64);
        let locks = self.shared.region_locks(offset, len as u64);
        self.write_marked(offset, len, buf, done);
        drop(locks);
        self.link.push();
    }

    fn push_started(&self) {
        self.link.push();
    }
}

impl MirrorBackend {
    /// The local copy, then the peer's half queued on the link (not woken: the caller
    /// pushes). The regions are marked and locked, and the write counted in flight; the
    /// completion ends that count.
    fn write_marked(&self, offset: u64, len: usize, mut buf: Vec<u8>, done: WriteDone) {
        let local = self.local.write(offset, &buf[..len]);
        buf.truncate(len);
        let data = Arc::new(buf);
        let req = LinkReq::Write {
            offset,
            data: data.clone(),
            fua: false,
            done: self.gate.completion(local, data, done),
        };
        if let Err(r) = self.link.hold(req) {
            r.fail();
        }
    }
}

impl Gate {
    /// What the link calls when the peer's half of a write started by
    /// [`AsyncWrites::start_write`] ended: the write's outcome to `done`, with its buffer.
    /// A failed peer half that needs the witness's word waits on a thread of its own, not on
    /// the link's.
    fn completion(
        &self,
        local: Result<(), BackendError>,
        data: Arc<Vec<u8>>,
        done: WriteDone,
    ) -> crate::pipe::LinkDone {
        let gate = self.clone();
        Box::new(move |remote_ok| {
            let buf = Arc::try_unwrap(data).unwrap_or_else(|a| a.as_ref().clone());
            let now = match (local, remote_ok) {
                (Ok(()), true) => Some(gate.lease_gate()),
                (Ok(()), false) if gate.covered() => {
                    gate.shared.degrade();
                    Some(Ok(()))
                }
                (Ok(()), false) => None,
                (Err(e), ok) => {
                    if !ok {
                        gate.shared.degrade();
                    }
                    Some(Err(e))
                }
            };
            let finish = move |res: Option<Result<(), BackendError>>| {
                let res = res.unwrap_or_else(|| gate.remote_failed());
                gate.shared.in_flight.fetch_sub(1, Ordering::AcqRel);
                done(buf, res);
            };
            if now.is_some() {
                return finish(now);
            }
            // Waiting for the witness (up to a lease): on a thread of its own.
            let job = Arc::new(std::sync::Mutex::new(Some(finish)));
            let theirs = job.clone();
            let spawned = std::thread::Builder::new()
                .name("mirror-degrade".into())
                .spawn(move || take(&theirs).map(|f| f(None)));
            if let Err(e) = spawned {
                tracing::warn!("mirror: no thread to wait for the witness ({e}); waiting here");
                if let Some(f) = take(&job) {
                    f(None);
                }
            }
        })
    }
}

/// The value in `m`, taken (once).
fn take<T>(m: &std::sync::Mutex<Option<T>>) -> Option<T> {
    m.lock().unwrap_or_else(|e| e.into_inner()).take()
}

/// A change the mirror refuses (the message says why and what to do).
fn refused(reason: String) -> BackendError {
    BackendError::Refused { reason }
}
