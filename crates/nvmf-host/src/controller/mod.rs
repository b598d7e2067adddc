//! A controller association: the admin queue, its bring-up, keep-alive, asynchronous events and
//! the admin commands.
//!
//! Bring-up follows the Linux host (NVMe-oF 1.1, 3.5; NVMe Base 2.0, 3.5.1): TCP + ICReq/ICResp,
//! Fabrics Connect on QID 0 (SQSIZE 31, CNTLID FFFFh, KATO), Property Get CAP and VS, Property Set
//! CC (EN=1, IOSQES 6, IOCQES 4, CSS per CAP), poll CSTS.RDY for up to CAP.TO × 500 ms, Identify
//! Controller, then (I/O controllers) Set Features Number of Queues and Asynchronous Event
//! Configuration; a persistent discovery controller (KATO set, events asked for) gets
//! Asynchronous Event Configuration for Discovery Log Page Change notices (TP 8010's
//! persistent discovery connection). After that the admin queue belongs to a background task on the tokio runtime
//! that called [`Controller::connect`]; admin commands reach it through a channel, keep-alives
//! are sent every KATO/2, and one Asynchronous Event Request is kept outstanding.
//!
//! The admin task is in `task.rs`; this file holds the bring-up and the admin commands.
//!
//! The runtime that called `connect` must keep running for the controller's lifetime (the
//! keep-alive task lives there); the handle itself may be used from any task or runtime.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use nvme_spec::fabrics::{Cap, PropertyCmd, cc, csts, prop};
use nvme_spec::identify::{
    IDENTIFY_DATA_LEN, IdentifyController, IdentifyNamespace, NsIdDescriptor, cns, cntrltype,
    decode_ns_id_descs, decode_ns_list, oaes,
};
use nvme_spec::log::{ErrorLogEntry, SmartLog, lid};
use nvme_spec::opcode::{admin, fctype, feature};
use nvme_spec::{CommandId, ControllerId, Cqe, NamespaceId, QueueId, Sqe};
use nvmf_tcp::Digests;
use tokio::sync::{mpsc, oneshot};

use crate::command::DataDir;
use crate::config::{ConnectParams, HostConfig, LinkParams};
use crate::discovery::log::{self as discovery_log, DiscoveryLog};
use crate::error::{HostError, Result};
use crate::io::{IoConnector, IoQueue, IoQueueOptions};
use crate::session;
use crate::transport::{AnyQueue, admin_icd_max};

mod task;

pub use task::AsyncEvent;
use task::{ADMIN_TICK, AdminReq};

/// Admin queue entries (SQSIZE 31, as the Linux host uses).
const ADMIN_QUEUE_ENTRIES: u16 = 32;
/// Largest admin data transfer per command (and so per C2HData PDU); longer log pages are read
/// in pieces of this size.
const ADMIN_MAX_TRANSFER: usize = 64 * 1024;
/// CSTS poll interval during enable and shutdown.
const CSTS_POLL: Duration = Duration::from_millis(10);

/// A connected controller (an association with one NVM subsystem or discovery subsystem).
///
/// To recover from a lost connection, call [`Controller::reconnect`] (a new association with the
/// same parameters: a new CNTLID, so I/O queues must be created again) or simply
/// [`Controller::connect`] again.
pub struct Controller {
    addr: SocketAddr,
    subnqn: String,
    cfg: HostConfig,
    cntlid: ControllerId,
    cap: u64,
    vs: u32,
    id: IdentifyController,
    io_queues_granted: Option<u16>,
    tx: mpsc::Sender<AdminReq>,
    events: Option<mpsc::Receiver<AsyncEvent>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller")
            .field("addr", &self.addr)
            .field("subnqn", &self.subnqn)
            .field("cntlid", &self.cntlid.0)
            .finish()
    }
}

impl Controller {
    /// Connect to `subnqn` at `addr` and bring the controller up (see the module docs).
    pub async fn connect(addr: SocketAddr, subnqn: &str, cfg: &HostConfig) -> Result<Controller> {
        if !nvme_spec::is_valid_nqn(subnqn) {
            return Err(HostError::InvalidArgument(format!(
                "subsystem NQN {subnqn:?}"
            )));
        }
        if !nvme_spec::is_valid_nqn(&cfg.hostnqn) {
            return Err(HostError::InvalidArgument(format!(
                "host NQN {:?}",
                cfg.hostnqn
            )));
        }
        let lp = LinkParams {
            addr,
            digests: Digests {
                hdgst: cfg.hdr_digest,
                ddgst: cfg.data_digest,
            },
            max_c2h_data: ADMIN_MAX_TRANSFER as u32,
            connect_timeout: cfg.connect_timeout,
            tls: cfg.tls.clone(),
        };
        let cp = ConnectParams {
            qid: QueueId::ADMIN,
            entries: ADMIN_QUEUE_ENTRIES,
            dissqfc: false,
            kato_ms: cfg.kato_ms,
            cntlid: ControllerId::DYNAMIC,
            hostid: cfg.hostid,
            hostnqn: cfg.hostnqn.clone(),
            subnqn: subnqn.to_string(),
            icd_max: admin_icd_max(cfg.transport),
            dhchap: cfg.dhchap.clone(),
        };
        let (mut q, cntlid) =
            session::connect(cfg.transport, &lp, &cp, 0, ADMIN_MAX_TRANSFER).await?;
        let (cap, vs, id) = enable(&mut q, cfg.admin_timeout).await?;
        let discovery = id.cntrltype == cntrltype::DISCOVERY || subnqn == nvme_spec::DISCOVERY_NQN;

        let keep_alive =
            (cfg.kato_ms > 0).then(|| Duration::from_millis(u64::from(cfg.kato_ms) / 2));
        // A discovery controller gets an AER only when it can report Discovery Log Page Change
        // (a persistent discovery connection: keep-alive and events asked for).
        let aer = cfg.async_events
            && id.aerl != u8::MAX
            && (!discovery || (cfg.kato_ms > 0 && id.oaes & oaes::DISC_CHANGE != 0));
        let (tx, ev_rx, task) = task::spawn(q, keep_alive, aer, cfg.admin_timeout);
        let mut ctrl = Controller {
            addr,
            subnqn: subnqn.to_string(),
            cfg: cfg.clone(),
            cntlid,
            cap,
            vs,
            id,
            io_queues_granted: None,
            tx,
            events: Some(ev_rx),
            task: Some(task),
        };
        if discovery
            && cfg.async_events
            && cfg.kato_ms > 0
            && ctrl.id.oaes & oaes::DISC_CHANGE != 0
            && let Err(e) = ctrl
                .set_features(feature::ASYNC_EVENT, oaes::DISC_CHANGE)
                .await
        {
            tracing::debug!(error = %e, "Set Features Asynchronous Event Configuration (discovery) failed");
        }
        if !discovery {
            if cfg.io_queues > 0 {
                match ctrl.set_num_queues(cfg.io_queues).await {
                    Ok(n) => ctrl.io_queues_granted = Some(n),
                    Err(e) => tracing::warn!(error = %e, "Set Features Number of Queues failed"),
                }
            }
            let wanted = ctrl.id.oaes & (oaes::NS_ATTR | oaes::FW_ACT | oaes::ANA_CHANGE);
            if cfg.async_events
                && wanted != 0
                && let Err(e) = ctrl.set_features(feature::ASYNC_EVENT, wanted).await
            {
                tracing::debug!(error = %e, "Set Features Asynchronous Event Configuration failed");
            }
        }
        tracing::info!(peer = %addr, subnqn, cntlid = cntlid.0, "controller connected");
        Ok(ctrl)
    }

    /// Connect again with the same address, subsystem and configuration (a new association).
    pub async fn reconnect(&self) -> Result<Controller> {
        Controller::connect(self.addr, &self.subnqn, &self.cfg).await
    }

    /// The target address this controller was connected at.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
    /// NQN of the subsystem the controller belongs to.
    pub fn subnqn(&self) -> &str {
        &self.subnqn
    }
    /// The configuration the controller was connected with.
    pub fn config(&self) -> &HostConfig {
        &self.cfg
    }
    /// Controller ID assigned by the target at Connect.
    pub fn cntlid(&self) -> ControllerId {
        self.cntlid
    }
    /// The CAP property (raw 64-bit value).
    pub fn cap_raw(&self) -> u64 {
        self.cap
    }
    /// The CAP property, decoded (MQES, TO, command sets).
    pub fn cap(&self) -> Cap {
        Cap::from_u64(self.cap)
    }
    /// The VS property (version: major 31:16, minor 15:8, tertiary 7:0).
    pub fn version(&self) -> u32 {
        self.vs
    }
    /// Identify Controller data read at connect time.
    pub fn identify(&self) -> &IdentifyController {
        &self.id
    }
    /// I/O queues granted by Set Features Number of Queues at connect (NSQA as a count).
    pub fn io_queues_granted(&self) -> Option<u16> {
        self.io_queues_granted
    }
    /// Largest data transfer of one command (MDTS, in units of the 4 KiB minimum page size;
    /// `None` = no limit).
    pub fn max_transfer(&self) -> Option<usize> {
        match self.id.mdts {
            0 => None,
            m => Some(4096usize.checked_shl(u32::from(m)).unwrap_or(usize::MAX)),
        }
    }
    /// In-capsule data limit of I/O queues: IOCCSZ × 16 − 64 bytes (NVMe-oF 1.1, 4.1).
    pub fn io_icd_max(&self) -> usize {
        (self.id.ioccsz as usize * 16).saturating_sub(64)
    }

    /// Take the receiver of asynchronous events (once).
    pub fn take_events(&mut self) -> Option<mpsc::Receiver<AsyncEvent>> {
        self.events.take()
    }

    /// Run an admin command; the status is returned, not checked.
    pub async fn admin_raw(
        &self,
        sqe: Sqe,
        dir: DataDir,
        out: Vec<u8>,
        in_len: usize,
    ) -> Result<(Cqe, Vec<u8>)> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(AdminReq::Cmd {
                sqe,
                dir,
                out,
                in_len,
                reply,
            })
            .await
            .map_err(|_| HostError::Disconnected)?;
        match tokio::time::timeout(self.cfg.admin_timeout + ADMIN_TICK * 2, rx).await {
            Err(_) => Err(HostError::Timeout("admin command")),
            Ok(Err(_)) => Err(HostError::Disconnected),
            Ok(Ok(r)) => r,
        }
    }

    /// Run an admin command and fail on a non-success status.
    pub async fn admin(
        &self,
        sqe: Sqe,
        dir: DataDir,
        out: Vec<u8>,
        in_len: usize,
    ) -> Result<(Cqe, Vec<u8>)> {
        let (cqe, data) = self.admin_raw(sqe, dir, out, in_len).await?;
        if cqe.status.is_success() {
            Ok((cqe, data))
        } else {
            Err(HostError::Status(cqe.status))
        }
    }

    /// Property Get (4- or 8-byte property at `ofst`).
    pub async fn property_get(&self, ofst: u32, size8: bool) -> Result<u64> {
        let (cqe, _) = self
            .admin(property_get_sqe(ofst, size8), DataDir::None, Vec::new(), 0)
            .await?;
        Ok(if size8 {
            cqe.result64()
        } else {
            u64::from(cqe.dw0)
        })
    }

    /// Property Set.
    pub async fn property_set(&self, ofst: u32, value: u64, size8: bool) -> Result<()> {
        self.admin(
            property_set_sqe(ofst, value, size8),
            DataDir::None,
            Vec::new(),
            0,
        )
        .await?;
        Ok(())
    }

    /// Identify with any CNS; returns the 4096-byte data structure.
    pub async fn identify_raw(&self, cns: u8, nsid: u32, cntid: u16, csi: u8) -> Result<Vec<u8>> {
        let (_, data) = self
            .admin(
                identify_sqe(cns, nsid, cntid, csi),
                DataDir::FromController,
                Vec::new(),
                IDENTIFY_DATA_LEN,
            )
            .await?;
        Ok(data)
    }

    /// Identify Controller (CNS 01h), read fresh.
    pub async fn identify_controller(&self) -> Result<IdentifyController> {
        Ok(IdentifyController::decode(
            &self.identify_raw(cns::CTRL, 0, 0, 0).await?,
        )?)
    }

    /// Identify Namespace (CNS 00h).
    pub async fn identify_namespace(&self, nsid: NamespaceId) -> Result<IdentifyNamespace> {
        Ok(IdentifyNamespace::decode(
            &self.identify_raw(cns::NS, nsid.0, 0, 0).await?,
        )?)
    }

    /// All active namespace IDs (CNS 02h, following the list past 1024 entries).
    pub async fn active_namespaces(&self) -> Result<Vec<NamespaceId>> {
        let mut all = Vec::new();
        let mut after = 0u32;
        loop {
            let page = decode_ns_list(&self.identify_raw(cns::ACTIVE_NS_LIST, after, 0, 0).await?);
            let full = page.len() == nvme_spec::identify::NS_LIST_MAX;
            let last = page.last().copied();
            all.extend(page.into_iter().map(NamespaceId));
            match last {
                Some(l) if full && l < 0xFFFF_FFFE => after = l,
                _ => return Ok(all),
            }
        }
    }

    /// Namespace Identification Descriptor list (CNS 03h).
    pub async fn ns_id_descriptors(&self, nsid: NamespaceId) -> Result<Vec<NsIdDescriptor>> {
        Ok(decode_ns_id_descs(
            &self
                .identify_raw(cns::NS_ID_DESC_LIST, nsid.0, 0, 0)
                .await?,
        )?)
    }

    /// Get Log Page: `len` bytes (a multiple of 4) of log `lid` from byte `offset`. Split into
    /// several commands when larger than the controller's MDTS.
    pub async fn get_log_page(
        &self,
        lid: u8,
        nsid: u32,
        len: usize,
        offset: u64,
    ) -> Result<Vec<u8>> {
        if len == 0 || !len.is_multiple_of(4) || !offset.is_multiple_of(4) {
            return Err(HostError::InvalidArgument(format!(
                "log page length {len} / offset {offset} (need dword multiples)"
            )));
        }
        let chunk = self
            .max_transfer()
            .unwrap_or(usize::MAX)
            .min(ADMIN_MAX_TRANSFER);
        let mut out = Vec::with_capacity(len);
        while out.len() < len {
            let n = (len - out.len()).min(chunk);
            let sqe = get_log_page_sqe(lid, nsid, n, offset + out.len() as u64);
            let (_, data) = self
                .admin(sqe, DataDir::FromController, Vec::new(), n)
                .await?;
            out.extend_from_slice(&data);
        }
        Ok(out)
    }

    /// SMART / Health Information (log 02h) for the whole controller.
    pub async fn smart_log(&self) -> Result<SmartLog> {
        Ok(SmartLog::decode(
            &self
                .get_log_page(lid::SMART, 0xFFFF_FFFF, SmartLog::LEN, 0)
                .await?,
        )?)
    }

    /// The first `n` Error Information log entries (log 01h).
    pub async fn error_log(&self, n: usize) -> Result<Vec<ErrorLogEntry>> {
        let n = n.clamp(1, usize::from(self.id.elpe) + 1);
        Ok(ErrorLogEntry::decode_page(
            &self
                .get_log_page(lid::ERROR, 0xFFFF_FFFF, n * ErrorLogEntry::LEN, 0)
                .await?,
        ))
    }

    /// Get Features (current value): returns CQE DW0.
    pub async fn get_features(&self, fid: u8, cdw11: u32) -> Result<u32> {
        let mut sqe = Sqe::new(admin::GET_FEATURES, CommandId(0));
        sqe.set_cdw(10, u32::from(fid));
        sqe.set_cdw(11, cdw11);
        Ok(self.admin(sqe, DataDir::None, Vec::new(), 0).await?.0.dw0)
    }

    /// Set Features (not saved): returns CQE DW0.
    pub async fn set_features(&self, fid: u8, value: u32) -> Result<u32> {
        let mut sqe = Sqe::new(admin::SET_FEATURES, CommandId(0));
        sqe.set_cdw(10, u32::from(fid));
        sqe.set_cdw(11, value);
        Ok(self.admin(sqe, DataDir::None, Vec::new(), 0).await?.0.dw0)
    }

    /// Set Features Number of Queues: ask for `n` I/O submission and completion queues. Returns
    /// the number of I/O submission queues allocated (NSQA + 1).
    pub async fn set_num_queues(&self, n: u16) -> Result<u16> {
        if n == 0 {
            return Err(HostError::InvalidArgument("0 I/O queues".into()));
        }
        let v = u32::from(n - 1) | (u32::from(n - 1) << 16);
        let dw0 = self.set_features(feature::NUM_QUEUES, v).await?;
        Ok(((dw0 & 0xFFFF) as u16).saturating_add(1))
    }

    /// What an I/O queue connection needs, detached from this handle so that queues can be
    /// opened on other threads and runtimes.
    pub fn io_connector(&self) -> IoConnector {
        IoConnector {
            addr: self.addr,
            subnqn: self.subnqn.clone(),
            cfg: self.cfg.clone(),
            cntlid: self.cntlid,
            icd_max: match self.cfg.transport {
                // NVMe/RDMA puts in-capsule data right after the SQE (what the Linux host
                // does): only usable when the controller's ICDOFF is 0.
                crate::Transport::Rdma if self.id.icdoff != 0 => 0,
                _ => self.io_icd_max(),
            },
            max_transfer: self.max_transfer(),
            max_entries: u32::from(self.cap().mqes) + 1,
        }
    }

    /// Open I/O queue `qid` with `entries` SQ entries (at most `entries - 1` commands in flight;
    /// 0 = [`HostConfig::queue_size`] capped at CAP.MQES + 1) on a new TCP connection, on the
    /// current runtime. `dissqfc` asks for SQ flow control to be disabled.
    pub async fn io_queue(&self, qid: u16, entries: u16, dissqfc: bool) -> Result<IoQueue> {
        let c = self.io_connector();
        let entries = match entries {
            0 => u32::from(self.cfg.queue_size).min(c.max_entries()) as u16,
            n => n,
        };
        c.connect(&IoQueueOptions::new(qid, entries).dissqfc(dissqfc))
            .await
    }

    /// Normal shutdown (CC.SHN = 01b), waiting for CSTS.SHST = complete for at most the
    /// configured shutdown timeout. Close I/O queues first.
    pub async fn shutdown(&self) -> Result<()> {
        let c = self.property_get(prop::CC, false).await? as u32;
        self.property_set(
            prop::CC,
            u64::from((c & !cc::SHN_MASK) | cc::SHN_NORMAL),
            false,
        )
        .await?;
        let deadline = Instant::now() + self.cfg.shutdown_timeout;
        loop {
            let s = self.property_get(prop::CSTS, false).await? as u32;
            if s & csts::SHST_MASK == csts::SHST_COMPLETE {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(HostError::Timeout("shutdown (CSTS.SHST)"));
            }
            tokio::time::sleep(CSTS_POLL).await;
        }
    }

    /// Close the admin connection (after in-flight admin commands are failed). I/O queues are
    /// independent connections: drop them first.
    pub async fn disconnect(mut self) {
        let _ = self.tx.send(AdminReq::Close).await;
        if let Some(t) = self.task.take() {
            let _ = tokio::time::timeout(self.cfg.admin_timeout, t).await;
        }
    }

    /// Read the full discovery log (see [`crate::discovery`]).
    pub async fn discovery_log(&self) -> Result<DiscoveryLog> {
        discovery_log::read(|len, offset| self.get_log_page(lid::DISCOVERY, 0, len, offset)).await
    }
}

/// CAP, VS, CC.EN = 1, CSTS.RDY, Identify Controller: run one by one on the admin queue before
/// the admin task exists, each bounded by `t`; the RDY wait is bounded by CAP.TO.
async fn enable(q: &mut AnyQueue, t: Duration) -> Result<(u64, u32, IdentifyController)> {
    let cap = exec_ok(q, t, property_get_sqe(prop::CAP, true), DataDir::None, 0)
        .await?
        .0
        .result64();
    let vs = exec_ok(q, t, property_get_sqe(prop::VS, false), DataDir::None, 0)
        .await?
        .0
        .dw0;
    let c = Cap::from_u64(cap);
    // CC.CSS: 110b "all supported I/O command sets" when CAP.CSS says so, else 000b NVM.
    let css = if c.css_iocs { 6 } else { 0 };
    exec_ok(
        q,
        t,
        property_set_sqe(prop::CC, u64::from(cc::enable_value(css)), false),
        DataDir::None,
        0,
    )
    .await?;
    let wait = Duration::from_millis(500 * u64::from(c.to.max(1)));
    let deadline = Instant::now() + wait;
    loop {
        let s = exec_ok(q, t, property_get_sqe(prop::CSTS, false), DataDir::None, 0)
            .await?
            .0
            .dw0;
        if s & csts::CFS != 0 {
            return Err(HostError::Controller("CSTS.CFS set while enabling".into()));
        }
        if s & csts::RDY != 0 {
            break;
        }
        if Instant::now() >= deadline {
            return Err(HostError::Controller(format!(
                "CSTS.RDY not set within CAP.TO ({} ms)",
                wait.as_millis()
            )));
        }
        tokio::time::sleep(CSTS_POLL).await;
    }
    let (_, data) = exec_ok(
        q,
        t,
        identify_sqe(cns::CTRL, 0, 0, 0),
        DataDir::FromController,
        IDENTIFY_DATA_LEN,
    )
    .await?;
    let id = IdentifyController::decode(&data)?;
    Ok((cap, vs, id))
}

async fn exec_ok(
    q: &mut AnyQueue,
    t: Duration,
    sqe: Sqe,
    dir: DataDir,
    in_len: usize,
) -> Result<(Cqe, Vec<u8>)> {
    let (cqe, data) = tokio::time::timeout(t, session::execute(q, sqe, dir, &[], in_len))
        .await
        .map_err(|_| HostError::Timeout("admin command during bring-up"))??;
    if cqe.status.is_success() {
        Ok((cqe, data))
    } else {
        Err(HostError::Status(cqe.status))
    }
}

fn property_get_sqe(ofst: u32, size8: bool) -> Sqe {
    let mut sqe = Sqe::new(admin::FABRICS, CommandId(0));
    sqe.set_fctype(fctype::PROPERTY_GET);
    PropertyCmd {
        size8,
        ofst,
        value: 0,
    }
    .encode_into(&mut sqe);
    sqe
}

fn property_set_sqe(ofst: u32, value: u64, size8: bool) -> Sqe {
    let mut sqe = Sqe::new(admin::FABRICS, CommandId(0));
    sqe.set_fctype(fctype::PROPERTY_SET);
    PropertyCmd { size8, ofst, value }.encode_into(&mut sqe);
    sqe
}

/// Identify: CDW10 CNS 7:0 and CNTID 31:16, CDW11 CSI 31:24.
fn identify_sqe(cns: u8, nsid: u32, cntid: u16, csi: u8) -> Sqe {
    let mut sqe = Sqe::new(admin::IDENTIFY, CommandId(0));
    sqe.set_nsid(NamespaceId(nsid));
    sqe.set_cdw(10, u32::from(cns) | (u32::from(cntid) << 16));
    sqe.set_cdw(11, u32::from(csi) << 24);
    sqe
}

/// Get Log Page: CDW10 LID 7:0, NUMDL 31:16; CDW11 NUMDU 15:0; CDW12/13 LPOL/LPOU
/// (NUMD is the 0's based dword count).
fn get_log_page_sqe(lid: u8, nsid: u32, len: usize, offset: u64) -> Sqe {
    let numd = (len / 4 - 1) as u32;
    let mut sqe = Sqe::new(admin::GET_LOG_PAGE, CommandId(0));
    sqe.set_nsid(NamespaceId(nsid));
    sqe.set_cdw(10, u32::from(lid) | ((numd & 0xFFFF) << 16));
    sqe.set_cdw(11, numd >> 16);
    sqe.set_cdw(12, offset as u32);
    sqe.set_cdw(13, (offset >> 32) as u32);
    sqe
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_page_sqe_fields() {
        let s = get_log_page_sqe(0x70, 0, 2048, 1024);
        assert_eq!(s.opcode(), admin::GET_LOG_PAGE);
        assert_eq!(s.cdw10() & 0xFF, 0x70);
        assert_eq!(s.cdw10() >> 16, 511);
        assert_eq!(s.cdw11(), 0);
        assert_eq!(s.cdw12(), 1024);
        let big = get_log_page_sqe(2, 0xFFFF_FFFF, 1 << 20, 1 << 33);
        assert_eq!((big.cdw10() >> 16) | (big.cdw11() << 16), (1 << 18) - 1);
        assert_eq!(big.cdw13(), 2);
    }

    #[test]
    fn identify_sqe_fields() {
        let s = identify_sqe(cns::NS_ID_DESC_LIST, 7, 0, 0);
        assert_eq!(s.cdw10(), 3);
        assert_eq!(s.nsid().0, 7);
    }
}
