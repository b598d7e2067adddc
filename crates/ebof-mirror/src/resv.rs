//! Replicated reservations (ADR 0028): on the primary, every change of the namespace's
//! reservation table reaches the peer before it takes effect, as the whole table in one Mirror
//! Reservations (C9h) on the link's admin queue; the link also pushes the table before it
//! declares the peer in sync (after every (re)connect and resync), so a change made while
//! degraded reaches a secondary that comes back.
//!
//! The reservation commands run on the target's reactor, which waits here for the push (a
//! round trip on the link, bounded by [`WAIT`]). A push that fails or takes longer follows the
//! write path's rule: the primary goes on alone (degraded) when nothing needs the witness's
//! word, or once the witness holds its "peer not in sync" report; else the command fails ANA
//! Inaccessible and the table stays as it was. A push its waiter gave up on drops the link
//! when it ends, so the reconnect pushes the table again.

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use nvme_spec::Status;
use nvmf_target::Namespace;
use nvmf_target::reservation::{ResvReplica, ResvTable};
use tokio::sync::mpsc::UnboundedSender;

use crate::Role;
use crate::chan::LinkTx;
use crate::lease::Ask;
use crate::pipe::LinkReq;
use crate::shared::Shared;

/// Longest a reservation command waits for its push before it is treated as failed.
pub(crate) const WAIT: Duration = Duration::from_secs(2);

/// What the link thread pushes: the attached namespace's reservation table.
#[derive(Default)]
pub(crate) struct ResvSource {
    ns: OnceLock<Weak<Namespace>>,
}

impl ResvSource {
    /// The namespace whose table is pushed (first call wins).
    pub(crate) fn attach(&self, ns: &Arc<Namespace>) {
        let _ = self.ns.set(Arc::downgrade(ns));
    }

    /// The table a push carries now, as C9h's data (None: no namespace attached, or gone).
    pub(crate) fn image(&self) -> Option<Vec<u8>> {
        let ns = self.ns.get()?.upgrade()?;
        Some(ns.resv.replication_state().to_image().encode())
    }
}

/// The primary's [`ResvReplica`]: a push through the link, waited for.
pub(crate) struct Replicator {
    pub(crate) shared: Arc<Shared>,
    pub(crate) link: LinkTx,
    pub(crate) lease: Option<UnboundedSender<Ask>>,
}

impl std::fmt::Debug for Replicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replicator")
            .field("nsid", &self.shared.spec.nsid)
            .finish()
    }
}

impl ResvReplica for Replicator {
    fn replicate(&self, _next: &ResvTable) -> Result<(), Status> {
        // A secondary takes its table from the primary only; a fenced primary changes nothing.
        if self.shared.role() != Role::Primary || !self.shared.lease_ok() {
            return Err(Status::ANA_INACCESSIBLE);
        }
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        // The link learns whether we still wait: a late answer drops the link.
        let done = Box::new(move |ok| tx.send(ok).is_ok());
        let sent = self.link.send(LinkReq::Resv { done }).is_ok();
        if sent && rx.recv_timeout(WAIT).unwrap_or(false) {
            return if self.shared.lease_ok() {
                Ok(())
            } else {
                Err(Status::ANA_INACCESSIBLE)
            };
        }
        drop(rx);
        self.remote_failed()
    }
}

impl Replicator {
    /// The push failed: degraded; alone at once when no witness's word is needed (none, forced,
    /// or our "not in sync" report held under a valid lease), else once the lease loop has it
    /// granted (the write path's rule, `backend.rs`).
    fn remote_failed(&self) -> Result<(), Status> {
        let failed_at = Instant::now();
        self.shared.degrade();
        let covered = self.shared.forced.load(Ordering::Acquire)
            || (self.shared.covered.load(Ordering::SeqCst) && self.shared.lease_ok());
        let Some(lease) = self.lease.as_ref().filter(|_| !covered) else {
            tracing::warn!(
                nsid = self.shared.spec.nsid,
                "mirror: reservation change not on the peer; going on alone (degraded)"
            );
            return Ok(());
        };
        let (reply, rx) = std::sync::mpsc::sync_channel(1);
        if lease.send(Ask::Degrade { failed_at, reply }).is_err() {
            return Err(Status::ANA_INACCESSIBLE);
        }
        match rx.recv_timeout(self.shared.spec.lease) {
            Ok(true) => Ok(()),
            _ => Err(Status::ANA_INACCESSIBLE),
        }
    }
}
