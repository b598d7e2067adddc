//! Fabrics commands: Connect (admin and I/O), Property Get/Set (NVMe-oF 1.1 section 3.3).

use crate::controller::{Controller, ControllerKind};
use crate::error::{CmdError, CmdResult};
use crate::model::ADMIN_QUEUE_MAX;
use crate::queue::{Queue, QueueRole};
use nvme_spec::fabrics::{
    Cap, ConnectCmd, ConnectData, PropertyCmd, connect_data_off, connect_sqe_off, prop,
};
use nvme_spec::opcode::fctype;
use nvme_spec::{ControllerId, DISCOVERY_NQN, NVME_VERSION, Sqe, Status};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Marks (in an error's DW0 bits 31:24, which Invalid Host does not use) a Connect refused
/// because it named another host or subsystem than its TLS PSK; cleared before it is sent.
const TLS_MISMATCH: u32 = 1 << 31;

/// Why a Connect was rejected, in words, for the target's log.
fn connect_reject_reason(e: &CmdError) -> &'static str {
    let in_data = e.dw0 & nvme_spec::fabrics::IATTR_CONNECT_DATA != 0;
    let ipo = (e.dw0 & 0xFFFF) as u16;
    match e.status {
        Status::CONNECT_INCOMPATIBLE_FORMAT => "unsupported Connect record format (RECFMT)",
        Status::CONNECT_CTRL_BUSY => "no controller ID free",
        Status::CONNECT_INVALID_HOST if e.dw0 & TLS_MISMATCH != 0 => {
            "host NQN or subsystem NQN differ from those of the TLS PSK"
        }
        Status::CONNECT_INVALID_HOST => "host NQN not allowed by this subsystem",
        Status::CMD_SEQ_ERROR => {
            "I/O queue before the controller is ready, or QID already connected"
        }
        s if s == Status::CONNECT_INVALID_PARAM.with_dnr(false) => {
            if ipo == connect_data_off::CNTLID {
                "controller gone with its subsystem (removed for now): the host may retry"
            } else {
                "no such subsystem for now (removed while running, or expected): the host may retry"
            }
        }
        Status::CONNECT_INVALID_PARAM => match (in_data, ipo) {
            (true, connect_data_off::HOSTID) => "Connect data too short",
            (true, connect_data_off::CNTLID) => "unknown or non-dynamic controller ID (CNTLID)",
            (true, connect_data_off::SUBNQN) => "no such subsystem, or SUBNQN malformed",
            (true, connect_data_off::HOSTNQN) => "HOSTNQN malformed or not the controller's host",
            (false, connect_sqe_off::QID) => "QID out of range or not allowed on this controller",
            (false, connect_sqe_off::SQSIZE) => "SQSIZE zero or above the maximum queue size",
            _ => "invalid Connect parameter",
        },
        _ => "invalid Connect",
    }
}

/// Keep-alive used for a discovery controller whose host asked for none (Linux nvmet:
/// NVMET_DISC_KATO_MS), so abandoned discovery connections are eventually reaped.
pub const DISCOVERY_DEFAULT_KATO: Duration = Duration::from_secs(120);
/// CAP.TO in 500 ms units (7.5 s, as Linux nvmet).
pub const CAP_TO: u8 = 15;

impl Queue {
    /// CAP for this queue's controller.
    pub(crate) fn cap(&self) -> u64 {
        let mqes = if self.session.ctrl().is_some_and(|c| c.is_discovery()) {
            (ADMIN_QUEUE_MAX - 1) as u16
        } else {
            self.session
                .target()
                .limits
                .max_queue_size
                .saturating_sub(1)
        };
        Cap {
            mqes,
            to: CAP_TO,
            css_nvm: true,
            css_iocs: false,
        }
        .to_u64()
    }

    pub(crate) fn execute_connect(&mut self, sqe: &Sqe, data: &[u8]) -> CmdResult {
        let cmd = ConnectCmd::from_sqe(sqe);
        if cmd.recfmt != 0 {
            return Err(CmdError::at(
                Status::CONNECT_INCOMPATIBLE_FORMAT,
                connect_sqe_off::RECFMT,
            ));
        }
        let d = ConnectData::decode(data).map_err(|e| {
            let e = CmdError::connect_param(e.offset, true);
            crate::warn_every!(ipo = e.loc, local = %self.session.local(), "connect rejected: {}", connect_reject_reason(&e));
            e
        })?;
        if cmd.sqsize == 0 {
            return Err(CmdError::connect_param(connect_sqe_off::SQSIZE, false));
        }
        let qid = cmd.qid.0;
        let (subnqn, hostnqn) = (d.subnqn.clone(), d.hostnqn.clone());
        let r = if let Some((h, s)) = self.session.tls_peer()
            && (h != d.hostnqn || (s != d.subnqn && d.subnqn != DISCOVERY_NQN))
        {
            let mut e = CmdError::connect_param(connect_data_off::HOSTNQN, true);
            e.status = Status::CONNECT_INVALID_HOST;
            e.dw0 |= TLS_MISMATCH;
            Err(e)
        } else if cmd.qid.is_admin() {
            self.connect_admin(&cmd, d, self.now())
        } else {
            self.connect_io(&cmd, d)
        };
        if let Err(e) = &r {
            crate::warn_every!(
                qid,
                %subnqn,
                %hostnqn,
                status = %e.status,
                ipo = e.dw0 & 0xFFFF,
                local = %self.session.local(),
                "connect rejected: {}",
                connect_reject_reason(e)
            );
        }
        r.map_err(|mut e| {
            e.dw0 &= !TLS_MISMATCH;
            e
        })
    }

    fn connect_admin(&mut self, cmd: &ConnectCmd, d: ConnectData, now: Instant) -> CmdResult {
        if cmd.queue_entries() > ADMIN_QUEUE_MAX {
            return Err(CmdError::connect_param(connect_sqe_off::SQSIZE, false));
        }
        if d.cntlid != ControllerId::DYNAMIC {
            return Err(CmdError::connect_param(connect_data_off::CNTLID, true));
        }
        let kato_ms = cmd.kato;
        // The subsystem snapshot the controller's view was computed from.
        let mut base = None;
        let (kind, kato, max_qid) = if d.subnqn == DISCOVERY_NQN {
            let kato = if kato_ms == 0 {
                Some(DISCOVERY_DEFAULT_KATO)
            } else {
                Some(ms(kato_ms))
            };
            (ControllerKind::Discovery, kato, 0)
        } else {
            let sub = if self.session.discovery_only() {
                None
            } else {
                self.session.target().subsystem(&d.subnqn)
            };
            let Some(sub) = sub else {
                return Err(self.no_such_subsystem(&d.subnqn));
            };
            if !sub.host_allowed(&d.hostnqn) {
                let mut e = CmdError::connect_param(connect_data_off::HOSTNQN, true);
                e.status = Status::CONNECT_INVALID_HOST;
                return Err(e);
            }
            let kato = (kato_ms != 0).then(|| ms(kato_ms));
            let view = sub.view(&d.hostnqn);
            base = Some(sub);
            (
                ControllerKind::Io(arc_swap::ArcSwap::new(view)),
                kato,
                self.session.target().limits.max_io_queues,
            )
        };
        let hostnqn = d.hostnqn.clone();
        let target = self.session.target();
        let ctrl = target
            .register_controller(|id| {
                Arc::new(Controller::new(
                    id, kind, hostnqn, d.hostid, kato, max_qid, now,
                ))
            })
            .ok_or(CmdError::at(Status::CONNECT_CTRL_BUSY, 0xFFFF))?;
        ctrl.set_local_addr(self.session.local());
        if !ctrl.is_discovery() && target.is_mirror_link(&d.hostnqn) {
            ctrl.set_replica_link();
        }
        // The subsystem may have been removed or changed (Target::update_table,
        // update_subsystem) between our lookup and the registration; a change reaches the
        // controllers registered before its swap, so one more lookup after registering closes
        // the gap. (The controller holds its host's view of `base`; the check is serialised
        // with the writers, so it cannot install a view older than theirs.)
        if let Some(s) = &base
            && !target.settle_connect(&ctrl, s)
        {
            ctrl.kill();
            return Err(self.no_such_subsystem(&d.subnqn));
        }
        ctrl.touch(now);
        // I/O controllers are logged at info when created and removed; discovery controllers
        // (one short-lived connection per `nvme discover`) and I/O queues at debug only.
        macro_rules! connected {
            ($level:ident) => {
                tracing::$level!(
                    cntlid = ctrl.cntlid.0,
                    subnqn = %d.subnqn,
                    hostnqn = %d.hostnqn,
                    kato_ms,
                    sqsize = cmd.sqsize,
                    local = %self.session.local(),
                    "admin queue connected: new {} controller",
                    if ctrl.is_discovery() { "discovery" } else { "I/O" }
                )
            };
        }
        if ctrl.is_discovery() {
            if let Some(c) = target.central() {
                c.host_seen(&d.hostnqn);
            }
            connected!(debug);
        } else {
            connected!(info);
        }
        let cntlid = ctrl.cntlid.0;
        self.connected(ctrl, QueueRole::Admin, cmd.queue_entries(), !cmd.dissqfc());
        // A discovery controller authenticates the hosts that have a key, as an I/O
        // controller does (Linux nvmet: `nvme discover --dhchap-secret`); the others stay
        // unauthenticated. The policy is asked for the well-known discovery NQN.
        let authreq = self.start_auth(&d.hostnqn, &d.subnqn, 0);
        Ok((u32::from(cntlid) | authreq, 0))
    }

    /// An admin Connect to `subnqn`, which is not in the table: Invalid Parameters at SUBNQN,
    /// with DNR clear when the target will serve that subsystem again
    /// ([`crate::Target::will_serve`]: removed while running, or expected) so the host
    /// retries until its `ctrl_loss_tmo` (Linux 6.10+ deletes the controller on DNR);
    /// an NQN never served, or a discovery-only listener, keeps DNR.
    fn no_such_subsystem(&self, subnqn: &str) -> CmdError {
        let mut e = CmdError::connect_param(connect_data_off::SUBNQN, true);
        if !self.session.discovery_only() && self.session.target().will_serve(subnqn) {
            e.status = e.status.with_dnr(false);
        }
        e
    }

    fn connect_io(&mut self, cmd: &ConnectCmd, d: ConnectData) -> CmdResult {
        let Some(ctrl) = self.session.target().controller(d.cntlid.0) else {
            // The controller ended with its subsystem between the host's admin and I/O
            // Connects (removed under a reconnect): DNR clear when the subsystem will be
            // served again, so the host starts its association over rather than deleting it.
            let mut e = CmdError::connect_param(connect_data_off::CNTLID, true);
            let t = self.session.target();
            if t.subsystem(&d.subnqn).is_none() && t.will_serve(&d.subnqn) {
                e.status = e.status.with_dnr(false);
            }
            return Err(e);
        };
        if ctrl.hostnqn != d.hostnqn {
            return Err(CmdError::connect_param(connect_data_off::HOSTNQN, true));
        }
        let Some(sub) = ctrl.subsystem() else {
            // Discovery controllers have no I/O queues.
            return Err(CmdError::connect_param(connect_sqe_off::QID, false));
        };
        if sub.nqn != d.subnqn {
            return Err(CmdError::connect_param(connect_data_off::SUBNQN, true));
        }
        if cmd.qid.0 > ctrl.max_qid {
            return Err(CmdError::connect_param(connect_sqe_off::QID, false));
        }
        if cmd.queue_entries() > u32::from(self.session.target().limits.max_queue_size) {
            return Err(CmdError::connect_param(connect_sqe_off::SQSIZE, false));
        }
        if !ctrl.is_ready() {
            return Err(CmdError::at(Status::CMD_SEQ_ERROR, connect_sqe_off::QID));
        }
        if !ctrl.claim_qid(cmd.qid.0) {
            return Err(CmdError::at(Status::CMD_SEQ_ERROR, connect_sqe_off::QID));
        }
        tracing::debug!(
            cntlid = ctrl.cntlid.0,
            qid = cmd.qid.0,
            sqsize = cmd.sqsize,
            dissqfc = cmd.dissqfc(),
            hostnqn = %ctrl.hostnqn,
            "I/O queue connected"
        );
        let epoch = ctrl.io_epoch();
        let cntlid = ctrl.cntlid.0;
        drop(sub);
        let role = QueueRole::Io {
            qid: cmd.qid.0,
            epoch,
        };
        self.connected(ctrl, role, cmd.queue_entries(), !cmd.dissqfc());
        let authreq = self.start_auth(&d.hostnqn, &d.subnqn, cmd.qid.0);
        Ok((u32::from(cntlid) | authreq, 0))
    }

    /// Host→controller data of a Fabrics command on a connected queue (only AUTH_Send has any).
    pub(crate) fn fabrics_host_data_len(&self, sqe: &Sqe) -> Result<u32, CmdError> {
        if sqe.fctype() == fctype::AUTH_SEND {
            self.auth_send_len(sqe)
        } else {
            Ok(0)
        }
    }

    /// Fabrics commands on a connected queue.
    pub(crate) fn execute_fabrics(&mut self, idx: u16, sqe: &Sqe, buf: &mut Vec<u8>) -> CmdResult {
        match (sqe.fctype(), self.session.role()) {
            (fctype::CONNECT, _) => Err(CmdError::at(Status::CMD_SEQ_ERROR, 4)),
            (fctype::AUTH_SEND, _) => self.execute_auth(idx, sqe, buf, false),
            (fctype::AUTH_RECV, _) => self.execute_auth(idx, sqe, buf, true),
            (fctype::PROPERTY_GET, QueueRole::Admin) => self.property_get(sqe),
            (fctype::PROPERTY_SET, QueueRole::Admin) => self.property_set(sqe),
            _ => Err(CmdError::at(Status::INVALID_OPCODE, 4)),
        }
    }

    /// CSTS as the host reads it: a Central Discovery Controller holds RDY at 0 while the
    /// first view of the host's entries is being fetched ([`crate::CentralDiscovery`]).
    fn csts(&self, ctrl: &Controller) -> u32 {
        let csts = ctrl.state().csts;
        if ctrl.is_discovery()
            && let Some(c) = self.session.target().central()
            && c.entries(&ctrl.hostnqn).is_none()
        {
            return csts & !nvme_spec::fabrics::csts::RDY;
        }
        csts
    }

    fn property_get(&self, sqe: &Sqe) -> CmdResult {
        let p = PropertyCmd::from_sqe(sqe).map_err(|_| CmdError::at(Status::INVALID_FIELD, 40))?;
        let Some(ctrl) = self.session.ctrl() else {
            return Err(Status::CMD_SEQ_ERROR.into());
        };
        let v: u64 = match (p.ofst, p.size8) {
            (prop::CAP, true) => self.cap(),
            (prop::VS, false) => u64::from(NVME_VERSION),
            (prop::CC, false) => u64::from(ctrl.state().cc),
            (prop::CSTS, false) => u64::from(self.csts(ctrl)),
            // CRTO: CRWMT/CRIMT in 500 ms units, same as CAP.TO.
            (prop::CRTO, false) => u64::from(CAP_TO) | (u64::from(CAP_TO) << 16),
            _ => return Err(CmdError::at(Status::INVALID_FIELD, 44)),
        };
        Ok((v as u32, (v >> 32) as u32))
    }

    fn property_set(&self, sqe: &Sqe) -> CmdResult {
        let p = PropertyCmd::from_sqe(sqe).map_err(|_| CmdError::at(Status::INVALID_FIELD, 40))?;
        let Some(ctrl) = self.session.ctrl() else {
            return Err(Status::CMD_SEQ_ERROR.into());
        };
        match (p.ofst, p.size8) {
            (prop::CC, false) => {
                let old = ctrl.state().cc;
                let st = ctrl.set_cc(p.value as u32);
                let new = ctrl.state();
                tracing::debug!(
                    cntlid = ctrl.cntlid.0,
                    cc = format_args!("{:#x}->{:#x}", old, new.cc),
                    csts = format_args!("{:#x}", new.csts),
                    "property set CC"
                );
                if st.is_success() {
                    Ok((0, 0))
                } else {
                    Err(st.into())
                }
            }
            _ => Err(CmdError::at(Status::INVALID_FIELD, 44)),
        }
    }
}

fn ms(v: u32) -> Duration {
    Duration::from_millis(u64::from(v))
}
