//! Snapshots on both copies (ADR 0028): the primary, holding its writes, asks the secondary
//! through the replication link to take (or delete) the snapshot of the same name, with a
//! Mirror Snapshot (CDh) on the link's admin queue. The control plane (ebof-mgmt) does the
//! rest: the hold, the local snapshot, and refusing when the peer is not in sync.

use std::time::Duration;

use nvme_spec::ebof_vendor::{MirrorSnapshot, SnapshotOp};
use nvme_spec::{CommandId, Sqe};
use nvmf_host::{Controller, DataDir};

use crate::pipe::LinkReq;
use crate::shared::Shared;
use crate::{Mirror, MirrorError, PeerState, Role};

impl Mirror {
    /// Ask the peer to `op` its snapshot `name` of the namespace, and wait for its answer.
    /// Only a primary whose peer is in sync asks (a degraded or resyncing peer's copy is not
    /// the primary's point in time); Err says why not, or why the peer refused.
    pub fn peer_snapshot(&self, op: SnapshotOp, name: &str) -> Result<(), MirrorError> {
        if self.shared.role() != Role::Primary {
            return Err(MirrorError::Snapshot(
                "this copy is the secondary: snapshots are taken on the primary".into(),
            ));
        }
        let peer = self.shared.peer();
        if op == SnapshotOp::Take && peer != PeerState::InSync {
            return Err(MirrorError::Snapshot(format!(
                "the secondary ({}) is not in sync ({peer:?}): its copy is not this point in \
                 time; take the snapshot once `ebof ctl ns mirror status` says in-sync",
                self.shared.spec.peer
            )));
        }
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let done = Box::new(move |r| {
            let _ = tx.send(r);
        });
        let req = LinkReq::Snapshot {
            op,
            name: name.to_string(),
            done,
        };
        if self.link.sender().send(req).is_err() {
            return Err(MirrorError::Snapshot(
                "the replication link is stopped".into(),
            ));
        }
        // The peer's snapshot copies its file: allow it longer than one replicated write.
        let wait = self.shared.link_timeout() * 4 + Duration::from_secs(5);
        match rx.recv_timeout(wait) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(MirrorError::Snapshot(format!(
                "the secondary ({}): {e}",
                self.shared.spec.peer
            ))),
            Err(_) => Err(MirrorError::Snapshot(format!(
                "the secondary ({}) did not answer within {} s",
                self.shared.spec.peer,
                wait.as_secs()
            ))),
        }
    }
}

/// Send the Mirror Snapshot on the link controller `ctrl` (the link thread) and read the answer.
pub(crate) async fn on_peer(
    shared: &Shared,
    ctrl: &Controller,
    op: SnapshotOp,
    name: &str,
    timeout: Duration,
) -> Result<(), String> {
    let cmd = MirrorSnapshot {
        nsid: shared.spec.nsid,
        epoch: shared.epoch(),
        op,
        name: name.to_string(),
    };
    let mut sqe = Sqe::new(0, CommandId(0));
    cmd.encode_sqe(&mut sqe);
    let data = name.as_bytes().to_vec();
    // The peer holds its replica writes and copies its file: more than one I/O's time.
    let (cqe, _) = tokio::time::timeout(
        timeout * 4,
        ctrl.admin_raw(sqe, DataDir::ToController, data, 0),
    )
    .await
    .map_err(|_| "the snapshot timed out".to_string())?
    .map_err(|e| e.to_string())?;
    if cqe.status == nvme_spec::Status::INVALID_OPCODE {
        return Err("it does not take snapshots from its primary (an older ebof?)".into());
    }
    if !cqe.status.is_success() {
        return Err(format!(
            "refused ({:?}; its log says why: a name taken there, no room, not a file \
             namespace)",
            cqe.status
        ));
    }
    Ok(())
}
