//! Snapshots of replicated volumes on both copies (ADR 0028, decision 15).
//!
//! The primary's side; the secondary's is [`crate::snapshot_take::CopySnapshots`].
//!
//! * On the **primary**, `ebof ctl ns snapshot` (and the API) hold the namespace's writes as
//!   for any snapshot, and while they are held ask the secondary through the replication link
//!   (Mirror Snapshot, CDh) to take the same-named snapshot of its copy under its own hold;
//!   only then is the primary's taken. Every write acknowledged before the hold is on both
//!   copies, none after is on either: both snapshots are the same point in time.
//! * The primary refuses (`snapshot-busy`, retryable) while its peer is not in sync (degraded,
//!   resyncing, connecting) or it is fenced: the secondary's copy is then not the primary's
//!   point in time, and a snapshot on one box only would not survive the loss of that box.
//! * On the **secondary** a snapshot request is refused (`snapshot-unsupported`, naming the
//!   peer): it is taken on the primary, which takes this copy's too. Its snapshots are listed
//!   and can be deleted there (a leftover of a delete made while it was unreachable).
//! * Deleting a snapshot on the primary deletes the secondary's first; an unreachable
//!   secondary keeps its copy (logged; delete it there).

use std::sync::Arc;

use ebof_mirror::{Mirror, PeerState, Role};
use nvme_spec::ebof_vendor::SnapshotOp;
use nvmf_target::{Namespace, Target};

use crate::api::{ApiError, codes};
use crate::snapshot_store::Manifest;
use crate::snapshot_take::PeerCopy;

/// A primary's secondary, through its mirror's replication link.
pub(crate) struct Peer(Arc<Mirror>);

impl PeerCopy for Peer {
    fn take(&self, name: &str) -> Result<(), ApiError> {
        take_on_peer(&self.0, name)
    }

    fn delete(&self, name: &str) {
        delete_on_peer(&self.0, name);
    }
}

/// The mirror whose secondary must take a snapshot of `live` (of `nqn`) too: None when not
/// replicated; refused on a secondary, and on a primary whose peer is not in sync or that is
/// fenced.
pub(crate) fn primary_of(live: &Namespace, nqn: &str) -> Result<Option<Peer>, ApiError> {
    let Some(mirror) = crate::mirror::mirror_of(live) else {
        return Ok(None);
    };
    let st = mirror.status();
    if st.role == Role::Secondary {
        return Err(ApiError::new(
            codes::SNAPSHOT_UNSUPPORTED,
            "nsid",
            format!(
                "namespace {} of {nqn} is the secondary copy of a replicated volume: take the \
                 snapshot on its primary ({}), which takes this copy's at the same point in time",
                live.nsid, st.peer_addr
            ),
        ));
    }
    if st.fenced || st.peer != PeerState::InSync {
        return Err(ApiError::new(
            codes::SNAPSHOT_BUSY,
            "nsid",
            format!(
                "namespace {} of {nqn} is replicated and its secondary ({}) is not in sync ({}): \
                 a snapshot is taken on both copies; nothing was made, try again once \
                 `ebof ctl ns mirror status` says in-sync",
                live.nsid,
                st.peer_addr,
                if st.fenced {
                    "fenced".into()
                } else {
                    format!("{:?}", st.peer)
                }
            ),
        ));
    }
    Ok(Some(Peer(mirror)))
}

/// Ask `mirror`'s secondary to take snapshot `name` now (the primary's writes are held).
fn take_on_peer(mirror: &Mirror, name: &str) -> Result<(), ApiError> {
    mirror.peer_snapshot(SnapshotOp::Take, name).map_err(|e| {
        ApiError::new(
            codes::SNAPSHOT_FAILED,
            "name",
            format!("the secondary copy's snapshot was not taken: {e}; nothing was made"),
        )
    })
}

/// Delete the secondary's snapshot `name` (best effort: logged when it fails).
fn delete_on_peer(mirror: &Mirror, name: &str) {
    if let Err(e) = mirror.peer_snapshot(SnapshotOp::Delete, name) {
        tracing::warn!(
            snapshot = name,
            "the secondary keeps its copy of the snapshot ({e}); delete it on that box"
        );
    }
}

/// Before snapshot `m` is deleted here: if its origin is a replicated volume this box is the
/// primary of, delete the secondary's too.
pub(crate) fn delete_with_peer(target: &Target, m: &Manifest) {
    let Ok(live) = crate::lookup::live_namespace(target, &m.origin.subsystem, m.origin.nsid) else {
        return;
    };
    if let Some(mirror) = crate::mirror::mirror_of(&live)
        && mirror.status().role == Role::Primary
    {
        delete_on_peer(&mirror, &m.name);
    }
}
