//! Who a queue is: its target, the connection it came in on, and, once Fabrics Connect
//! succeeded, its controller and role.
//!
//! [`Session`] keeps the role and the controller together (a connected queue has both; only
//! [`Session::connected`] sets them), and answers the per-command questions that depend on
//! them alone: may I/O run ([`Session::check_io_ready`]), is the path accessible
//! ([`Session::ana_check`]), does a reservation allow the command ([`Session::resv_check`]),
//! must the connection close ([`Session::should_close`]).

use super::{QueueRole, Transport};
use crate::controller::Controller;
use crate::error::CmdError;
use crate::model::{ADMIN_INLINE_DATA, ADMIN_QUEUE_MAX, Namespace};
use crate::target::Target;
use nvme_spec::Status;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often a queue refreshes its controller's keep-alive timestamp under traffic.
const TOUCH_EVERY: Duration = Duration::from_millis(100);

/// A queue's identity and connection facts.
#[derive(Debug)]
pub(crate) struct Session {
    target: Arc<Target>,
    role: QueueRole,
    ctrl: Option<Arc<Controller>>,
    /// Local address of the connection (for the discovery log's current-subsystem entry).
    local: SocketAddr,
    /// Accepted on a dedicated discovery listener: only the discovery subsystem may be reached.
    discovery_only: bool,
    /// Row of this connection's listener in the target's ANA table (see [`crate::ana`]).
    ana_row: usize,
    /// The fabric this queue runs on.
    transport: Transport,
    /// The host NQN and subsystem NQN of the TLS PSK this connection was secured with; Connect
    /// must name the same ones.
    tls_peer: Option<(String, String)>,
    /// When this queue last wrote the controller's keep-alive timestamp.
    touched: Option<Instant>,
    /// The host's address on this connection, when the transport reported it.
    peer: Option<SocketAddr>,
    /// The controller is a mirror's replication link ([`Controller::is_replica_link`]).
    replica_link: bool,
}

impl Session {
    /// An unconnected queue of `target` on a connection accepted on `local`.
    pub(super) fn new(target: Arc<Target>, local: SocketAddr) -> Session {
        let ana_row = target.ana.row_of(local);
        Session {
            target,
            role: QueueRole::Unconnected,
            ctrl: None,
            local,
            discovery_only: false,
            ana_row,
            transport: Transport::Tcp,
            tls_peer: None,
            touched: None,
            peer: None,
            replica_link: false,
        }
    }

    #[inline]
    pub(crate) fn target(&self) -> &Arc<Target> {
        &self.target
    }

    #[inline]
    pub(crate) fn role(&self) -> QueueRole {
        self.role
    }

    #[inline]
    pub(crate) fn ctrl(&self) -> Option<&Arc<Controller>> {
        self.ctrl.as_ref()
    }

    /// Fabrics Connect succeeded: this queue is `role` of `ctrl`.
    pub(crate) fn connected(&mut self, ctrl: Arc<Controller>, role: QueueRole) {
        self.replica_link = ctrl.is_replica_link();
        self.ctrl = Some(ctrl);
        self.role = role;
    }

    /// The queue ID (0 for the admin queue and before Connect).
    #[inline]
    pub(crate) fn qid(&self) -> u16 {
        match self.role {
            QueueRole::Io { qid, .. } => qid,
            _ => 0,
        }
    }

    #[inline]
    pub(crate) fn local(&self) -> SocketAddr {
        self.local
    }

    #[inline]
    pub(crate) fn transport(&self) -> Transport {
        self.transport
    }

    /// The largest data transfer of one command on this queue's fabric (MDTS).
    pub(crate) fn max_transfer(&self) -> u32 {
        self.target.limits.max_transfer_on(self.transport)
    }

    pub(super) fn set_transport(&mut self, t: Transport) {
        self.transport = t;
    }

    #[inline]
    pub(crate) fn discovery_only(&self) -> bool {
        self.discovery_only
    }

    pub(super) fn set_discovery_only(&mut self, v: bool) {
        self.discovery_only = v;
    }

    /// The (host NQN, subsystem NQN) of the connection's TLS PSK, if it has one.
    #[inline]
    pub(crate) fn tls_peer(&self) -> Option<(&str, &str)> {
        self.tls_peer
            .as_ref()
            .map(|(h, s)| (h.as_str(), s.as_str()))
    }

    pub(super) fn set_tls_peer(&mut self, hostnqn: String, subnqn: String) {
        self.tls_peer = Some((hostnqn, subnqn));
    }

    /// The host's address on this connection, if known.
    #[inline]
    pub(crate) fn peer(&self) -> Option<SocketAddr> {
        self.peer
    }

    pub(super) fn set_peer(&mut self, addr: SocketAddr) {
        self.peer = Some(addr);
    }

    /// This connection's row in the target's ANA table.
    #[inline]
    pub(crate) fn ana_row(&self) -> usize {
        self.ana_row
    }

    /// Number of transfer tags the transport must track (= slots).
    pub(super) fn max_ttags(&self) -> u16 {
        // Slots never exceed the larger of the admin and I/O queue sizes, plus the spares.
        let entries = usize::from(self.target.limits.max_queue_size).max(ADMIN_QUEUE_MAX as usize);
        u16::try_from(entries + super::slots::SPARE_SLOTS).unwrap_or(u16::MAX)
    }

    /// In-capsule data limit of this queue.
    #[inline]
    pub(super) fn inline_limit(&self) -> u32 {
        match self.role {
            QueueRole::Io { .. } => self.target.limits.io_inline_data,
            _ => ADMIN_INLINE_DATA,
        }
    }

    /// True when the connection should close: the controller was torn down, or (I/O queue)
    /// the controller was reset/shut down since this queue connected.
    #[inline]
    pub(crate) fn should_close(&self) -> bool {
        match (&self.ctrl, self.role) {
            (Some(c), QueueRole::Io { epoch, .. }) => c.is_dead() || c.io_epoch() != epoch,
            (Some(c), _) => c.is_dead(),
            (None, _) => false,
        }
    }

    /// Admin queue: keep-alive expiry tears the controller down.
    pub(super) fn check_keep_alive(&self, now: Instant) {
        if let (Some(c), QueueRole::Admin) = (&self.ctrl, self.role)
            && c.keep_alive_expired(now)
        {
            tracing::warn!(cntlid = c.cntlid.0, hostnqn = %c.hostnqn, "keep-alive timeout expired; tearing down controller");
            c.kill();
            self.target
                .events
                .keep_alive_expiries
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Record host traffic for the traffic-based keep-alive. The controller's shared
    /// timestamp is written at most every [`TOUCH_EVERY`], far below the keep-alive
    /// granularity (1 s), so that busy queues on several cores do not write the same cache
    /// line per batch.
    pub(super) fn touch(&mut self, now: Instant) {
        if self
            .touched
            .is_some_and(|t| now.saturating_duration_since(t) < TOUCH_EVERY)
        {
            return;
        }
        self.touched = Some(now);
        if let Some(c) = &self.ctrl {
            c.touch(now);
        }
    }

    /// An I/O queue only exists while its controller is enabled: Connect checks CSTS.RDY and
    /// any reset or shutdown bumps the I/O epoch, which `should_close` sees. So readiness is two
    /// atomic loads, no lock on the data path.
    ///
    /// A command caught between its controller's teardown (listener removed with its
    /// controllers, reset, keep-alive expiry) and the connection's close fails with a
    /// path-related status, DNR clear, so a multipath host retries it on another path instead
    /// of failing it: the Linux host completes a DNR status (Command Sequence Error was used
    /// before) as an I/O error even with another live path.
    #[inline]
    pub(crate) fn check_io_ready(&self) -> Result<(), CmdError> {
        if self.ctrl.is_none() {
            return Err(Status::CMD_SEQ_ERROR.into());
        }
        if self.should_close() {
            return Err(Status::CONTROLLER_PATHING_ERROR.into());
        }
        Ok(())
    }

    /// The reservation access check of a command from this queue's host on `ns`: one relaxed
    /// atomic load while the namespace has no reservation.
    #[inline]
    pub(crate) fn resv_check(&self, ns: &Namespace, op: u8) -> Result<(), CmdError> {
        if self.replica_link {
            // Fenced by the mirror instead ([`Session::ana_check`]).
            return Ok(());
        }
        match &self.ctrl {
            Some(c) => ns.resv.check(&c.hostid, op).map_err(|s| CmdError::at(s, 0)),
            None => Ok(()),
        }
    }

    /// ANA: fail the command with the path's status when the namespace's group is
    /// inaccessible, lost or in transition on this queue's listener (one relaxed load).
    #[inline]
    pub(crate) fn ana_check(&self, ns: &Namespace) -> Result<(), CmdError> {
        if self.replica_link {
            return self.replica_check(ns);
        }
        match self.target.ana.path_status(self.ana_row + ns.ana_index()) {
            None => Ok(()),
            Some(s) => Err(s.into()),
        }
    }

    /// A replication link's I/O: only to a mirrored namespace whose fence is secondary at the
    /// epoch the link was admitted at; else Operation Denied + DNR.
    #[cold]
    pub(crate) fn replica_check(&self, ns: &Namespace) -> Result<(), CmdError> {
        match (&ns.mirror, &self.ctrl) {
            (Some(f), Some(c)) if f.admits_link(c.replica_epoch(), c.link_token()) => Ok(()),
            _ => Err(nvme_spec::ebof_vendor::OPERATION_DENIED.into()),
        }
    }

    /// This queue belongs to a mirror's replication link.
    #[inline]
    pub(crate) fn is_replica_link(&self) -> bool {
        self.replica_link
    }

    /// True on a replication link's queue whose command on `ns` its fence no longer admits
    /// (checked again after entering the namespace gate: a promotion drains the gate first).
    #[inline]
    pub(crate) fn replica_fenced(&self, ns: &Namespace) -> bool {
        self.replica_link && self.replica_check(ns).is_err()
    }

    /// The connection closed: an admin queue takes its controller down, an I/O queue gives its
    /// QID back.
    pub(super) fn close(&self) {
        let Some(c) = &self.ctrl else { return };
        match self.role {
            QueueRole::Admin => {
                if c.is_discovery() {
                    tracing::debug!(cntlid = c.cntlid.0, hostnqn = %c.hostnqn, "admin queue closed; discovery controller removed");
                } else {
                    tracing::info!(cntlid = c.cntlid.0, hostnqn = %c.hostnqn, "admin queue closed; controller removed");
                }
                c.kill();
            }
            QueueRole::Io { qid, .. } => {
                tracing::debug!(cntlid = c.cntlid.0, qid, "I/O queue closed");
                c.release_qid(qid);
            }
            QueueRole::Unconnected => {}
        }
    }
}
