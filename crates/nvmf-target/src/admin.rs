//! Admin commands (NVMe Base 2.0 section 5): Identify, Get Log Page, Get/Set Features,
//! Asynchronous Event Request, Abort, Keep Alive — for I/O and discovery controllers.

use crate::controller::Controller;
use crate::discovery::{CURRENT_DISCOVERY_EFLAGS, entry};
use crate::error::{CmdError, CmdResult};
use crate::model::{ADMIN_QUEUE_MAX, ListenerInfo, ListenerTls, Namespace, Subsystem};
use crate::queue::{Exec, Queue, Transport};
use nvme_spec::discovery::{encode_discovery_log, subtype};
use nvme_spec::identify::{
    self, IDENTIFY_DATA_LEN, IdentifyController, IdentifyControllerNvm, IdentifyNamespace,
    IdentifyNamespaceCsIndep, IdentifyNamespaceNvm, LbaFormat, NsIdDescriptor, cns, csi, nsfeat,
};
use nvme_spec::log::{
    ChangedNsList, CmdEffectsLog, ErrorLogEntry, FwSlotLog, SmartLog, copy_log_window, effects, lid,
};
use nvme_spec::opcode::{admin, feature, io};
use nvme_spec::{DISCOVERY_NQN, NVME_VERSION, Sqe, Status};
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// Firmware revision reported in Identify and the Firmware Slot log.
pub const FIRMWARE_REV: &str = env!("CARGO_PKG_VERSION");
/// Asynchronous Event Request Limit, 0's based (4 outstanding AERs).
pub const AERL: u8 = 3;
/// Abort Command Limit, 0's based.
pub const ACL: u8 = 3;
/// Keep Alive granularity in 100 ms units (KAS).
pub const KAS: u16 = 10;

impl Queue {
    /// Host data an admin command carries (Set Features with a data buffer).
    pub(crate) fn admin_host_data_len(&self, sqe: &Sqe) -> Result<u32, CmdError> {
        Ok(match sqe.opcode() {
            admin::SET_FEATURES if (sqe.cdw10() & 0xFF) as u8 == feature::HOST_ID => 16,
            admin::DISCOVERY_INFO_MGMT => {
                // Discovery controllers only; elsewhere the opcode does not exist.
                if !self.session.ctrl().is_some_and(|c| c.is_discovery()) {
                    return Err(CmdError::at(Status::INVALID_OPCODE, 0));
                }
                let len = sqe.sgl_data_len();
                if len > crate::discovery::MAX_DIM_DATA {
                    return Err(CmdError::at(Status::INSUFFICIENT_DISCOVERY_RESOURCES, 32));
                }
                len
            }
            admin::IDENTIFY
            | admin::GET_LOG_PAGE
            | admin::GET_FEATURES
            | admin::SET_FEATURES
            | admin::KEEP_ALIVE
            | admin::ASYNC_EVENT_REQUEST
            | admin::ABORT => 0,
            // Mirror Admit (ADR 0028), no data: known only on a replication link (elsewhere
            // Invalid Command Opcode, as any opcode we do not implement).
            nvme_spec::ebof_vendor::opcode::MIRROR_ADMIT
                if self.session.ctrl().is_some_and(|c| c.is_replica_link()) =>
            {
                0
            }
            nvme_spec::ebof_vendor::opcode::WITNESS_LEASE => {
                let ctrl = self.session.ctrl().map(|c| &**c);
                crate::witness_cmd::lease_data_len(self.session.target(), ctrl)?
            }
            nvme_spec::ebof_vendor::opcode::MIRROR_RESV => {
                crate::mirror_cmd::resv_data_len(self.session.ctrl().map(|c| &**c), sqe)?
            }
            nvme_spec::ebof_vendor::opcode::MIRROR_SNAPSHOT => {
                crate::mirror_cmd::snapshot_data_len(self.session.ctrl().map(|c| &**c), sqe)?
            }
            // An opcode we do not implement is Invalid Command Opcode whatever data it
            // carries (not Data SGL Length Invalid for data we would not have taken).
            _ => return Err(CmdError::at(Status::INVALID_OPCODE, 0)),
        })
    }

    /// Check the SGL describes a controller→host transfer of exactly `len` bytes.
    pub(crate) fn check_c2h(&self, sqe: &Sqe, len: u32) -> Result<(), CmdError> {
        if !self.session.transport().data_sgl(sqe.sgl_type()) {
            return Err(CmdError::at(Status::SGL_INVALID_TYPE, 39));
        }
        if sqe.sgl_data_len() != len {
            return Err(CmdError::at(Status::SGL_INVALID_DATA, 32));
        }
        Ok(())
    }

    pub(crate) fn execute_admin(&mut self, idx: u16, sqe: &Sqe, buf: &mut Vec<u8>) -> Exec {
        let Some(ctrl) = self.session.ctrl().cloned() else {
            return Exec::Done(Err(Status::CMD_SEQ_ERROR.into()));
        };
        // Before CC.EN=1 / CSTS.RDY=1 only fabrics commands are allowed (Linux nvmet:
        // nvmet_check_ctrl_status).
        if !ctrl.is_ready() {
            return Exec::Done(Err(Status::CMD_SEQ_ERROR.into()));
        }
        let disc = ctrl.is_discovery();
        let r = match sqe.opcode() {
            admin::IDENTIFY => self.execute_identify(idx, &ctrl, sqe, buf),
            admin::GET_LOG_PAGE => self.execute_get_log_page(idx, &ctrl, sqe, buf),
            admin::GET_FEATURES => self.execute_get_features(idx, &ctrl, sqe, buf),
            admin::SET_FEATURES => self.execute_set_features(&ctrl, sqe, buf),
            admin::KEEP_ALIVE => Ok((0, 0)),
            admin::ASYNC_EVENT_REQUEST => {
                if self.parked_aers() > u32::from(AERL) {
                    Err(Status::ASYNC_LIMIT.into())
                } else if let Some(dw0) = ctrl.take_event() {
                    // An event was retained until the host had an AER outstanding.
                    Ok((dw0, 0))
                } else {
                    // Counted when its slot parks (`Slots::park`).
                    return Exec::Park;
                }
            }
            // Abort: we complete commands promptly and never abort them; DW0 bit 0 = 1
            // reports "command not aborted", which the spec allows.
            admin::ABORT if !disc => Ok((1, 0)),
            admin::DISCOVERY_INFO_MGMT if disc => self.execute_dim(&ctrl, sqe, buf),
            nvme_spec::ebof_vendor::opcode::MIRROR_ADMIT if !disc => {
                crate::mirror_cmd::execute_admit(&ctrl, sqe)
            }
            nvme_spec::ebof_vendor::opcode::MIRROR_RESV if !disc => {
                crate::mirror_cmd::execute_resv(&ctrl, sqe, buf)
            }
            nvme_spec::ebof_vendor::opcode::MIRROR_SNAPSHOT if !disc => {
                crate::mirror_cmd::execute_snapshot(&ctrl, sqe, buf)
            }
            nvme_spec::ebof_vendor::opcode::WITNESS_LEASE => crate::witness_cmd::execute_lease(
                self.session.target(),
                &ctrl,
                sqe,
                buf,
                self.now(),
            ),
            _ => Err(CmdError::at(Status::INVALID_OPCODE, 0)),
        };
        Exec::Done(r)
    }

    // ---------------------------------------------------------------- DIM

    /// Discovery Information Management (TP 8010): register, update or deregister the
    /// sender's discovery information in the target's registry.
    fn execute_dim(&mut self, ctrl: &Arc<Controller>, sqe: &Sqe, data: &[u8]) -> CmdResult {
        use nvme_spec::dim::{DimData, DimTask, EntityType, off};
        let task =
            DimTask::from_cdw10(sqe.cdw10()).ok_or(CmdError::at(Status::INVALID_FIELD, 40))?;
        let d = DimData::decode(data).map_err(|e| CmdError::in_data(e.status(), e.offset))?;
        if d.etype == EntityType::Host && d.eid != ctrl.hostnqn {
            // A host registers itself, under the NQN it connected with.
            return Err(CmdError::in_data(Status::INVALID_DISCOVERY_INFO, off::EID));
        }
        if task != DimTask::Deregister && d.entries.len() > crate::discovery::MAX_DIM_ENTRIES {
            return Err(CmdError::in_data(
                Status::INSUFFICIENT_DISCOVERY_RESOURCES,
                off::NUMENT,
            ));
        }
        let peer = self.session.peer();
        let entries = d
            .entries
            .iter()
            .map(|e| {
                let mut l = e.log.clone();
                if l.traddr.is_empty()
                    && let Some(p) = peer
                {
                    l.traddr = p.ip().to_string();
                    l.adrfam = if p.is_ipv4() {
                        nvme_spec::discovery::adrfam::IPV4
                    } else {
                        nvme_spec::discovery::adrfam::IPV6
                    };
                }
                l
            })
            .collect();
        let now = self.now();
        let reg = crate::discovery::DimRegistration {
            hostnqn: ctrl.hostnqn.clone(),
            hostid: ctrl.hostid,
            entity_type: d.etype,
            entity_nqn: d.eid,
            name: d.ename,
            version: d.ever,
            symname: d.entries.iter().find_map(|e| e.symname()),
            entries,
            local: self.session.local(),
            peer,
            registered: now,
            updated: now,
            authenticated: self.auth.active() && !self.auth.gated(),
            admitted: false,
        };
        self.session
            .target()
            .dim_apply(task, reg)
            .map_err(|r| match r {
                crate::target::DimRefusal::Unknown => {
                    CmdError::in_data(Status::INVALID_FIELD, off::EID)
                }
                crate::target::DimRefusal::Full => {
                    CmdError::in_data(Status::INSUFFICIENT_DISCOVERY_RESOURCES, off::EID)
                }
                crate::target::DimRefusal::Untrusted | crate::target::DimRefusal::NotOrigin => {
                    CmdError::in_data(Status::ACCESS_DENIED, off::EID)
                }
            })?;
        Ok((0, 0))
    }

    // ---------------------------------------------------------------- Identify

    fn execute_identify(
        &mut self,
        idx: u16,
        ctrl: &Arc<Controller>,
        sqe: &Sqe,
        buf: &mut Vec<u8>,
    ) -> CmdResult {
        self.check_c2h(sqe, IDENTIFY_DATA_LEN as u32)?;
        let cns_v = (sqe.cdw10() & 0xFF) as u8;
        let csi_v = (sqe.cdw11() >> 24) as u8;
        let nsid = sqe.nsid().0;
        let mut out = [0u8; IDENTIFY_DATA_LEN];
        let sub = ctrl.subsystem();
        match (cns_v, &sub) {
            (cns::CTRL, _) => self
                .identify_controller(ctrl, sub.as_deref())
                .encode(&mut out),
            (cns::NS, Some(s)) => match s.namespace(nsid) {
                Some(ns) => identify_namespace(ns).encode(&mut out),
                // An inactive but valid NSID returns zeroes (NVMe Base 2.0 5.17.2.1).
                None if nsid != 0 && nsid != u32::MAX => {}
                None => return Err(CmdError::at(Status::INVALID_NS, 4)),
            },
            (cns::ACTIVE_NS_LIST, Some(s)) | (cns::CS_ACTIVE_NS_LIST, Some(s)) => {
                if nsid >= 0xFFFF_FFFE {
                    return Err(CmdError::at(Status::INVALID_NS, 4));
                }
                if cns_v == cns::ACTIVE_NS_LIST || csi_v == csi::NVM {
                    identify::encode_active_ns_list(
                        s.namespaces.iter().map(|n| n.nsid),
                        nsid,
                        &mut out,
                    );
                }
            }
            (cns::NS_ID_DESC_LIST, Some(s)) => {
                let ns = s
                    .namespace(nsid)
                    .ok_or(CmdError::at(Status::INVALID_NS, 4))?;
                identify::encode_ns_id_descs(
                    &[
                        NsIdDescriptor::Eui64(ns.eui64()),
                        NsIdDescriptor::Nguid(ns.nguid()),
                        NsIdDescriptor::Uuid(ns.uuid),
                        NsIdDescriptor::Csi(csi::NVM),
                    ],
                    &mut out,
                );
            }
            (cns::CS_NS, Some(s)) => {
                if csi_v != csi::NVM {
                    return Err(CmdError::at(Status::INVALID_FIELD, 47));
                }
                s.namespace(nsid)
                    .ok_or(CmdError::at(Status::INVALID_NS, 4))?;
                IdentifyNamespaceNvm::default().encode(&mut out);
            }
            (cns::CS_CTRL, Some(_)) => {
                if csi_v != csi::NVM {
                    return Err(CmdError::at(Status::INVALID_FIELD, 47));
                }
                // Write Zeroes and DSM limits: none beyond the command formats. Verify: see
                // `cmds::VERIFY_MAX_BYTES`.
                IdentifyControllerNvm {
                    vsl: crate::cmds::VSL,
                    ..Default::default()
                }
                .encode(&mut out);
            }
            (cns::CS_INDEP_NS, Some(s)) => {
                let ns = s
                    .namespace(nsid)
                    .ok_or(CmdError::at(Status::INVALID_NS, 4))?;
                IdentifyNamespaceCsIndep {
                    nsfeat: ns_features(ns),
                    nmic: 1,
                    rescap: crate::resv_cmd::rescap(ns),
                    nstat: 1,
                    anagrpid: ns.ana_group(),
                    ..Default::default()
                }
                .encode(&mut out);
            }
            (cns::IO_CMD_SET, Some(_)) => identify::encode_io_cmd_set_vectors(&[1], &mut out),
            _ => return Err(CmdError::at(Status::INVALID_FIELD, 40)),
        }
        buf.clear();
        buf.extend_from_slice(&out);
        self.set_c2h(idx, IDENTIFY_DATA_LEN as u32);
        Ok((0, 0))
    }

    fn identify_controller(
        &self,
        ctrl: &Controller,
        sub: Option<&Subsystem>,
    ) -> IdentifyController {
        let limits = self.session.target().limits;
        let max_transfer = self.session.max_transfer();
        let mdts = (max_transfer / 4096).max(1).trailing_zeros() as u8;
        let mut id = IdentifyController {
            vid: 0,
            ssvid: 0,
            fr: FIRMWARE_REV.to_string(),
            rab: 6,
            cmic: identify::cmic::MULTI_CTRL,
            mdts,
            cntlid: ctrl.cntlid.0,
            ver: NVME_VERSION,
            // Host Identifier 128-bit (EXHID) supported.
            ctratt: 1,
            aerl: AERL,
            lpa: identify::lpa::EXT_DATA,
            elpe: (crate::controller::ERROR_LOG_ENTRIES - 1) as u8,
            kas: KAS,
            sqes: 0x66,
            cqes: 0x44,
            maxcmd: limits.max_queue_size,
            // SGLs; address as offset (in-capsule data); keyed data blocks on RDMA (the Linux
            // host refuses a controller without them).
            sgls: match self.session.transport() {
                Transport::Tcp => identify::sgls::SUPPORTED | identify::sgls::OFFSET,
                Transport::Rdma => {
                    identify::sgls::SUPPORTED | identify::sgls::OFFSET | identify::sgls::KEYED
                }
            },
            // I/O command capsule: 64-byte SQE + in-capsule data, in 16-byte units.
            iorcsz: 1,
            msdbd: 1,
            ..Default::default()
        };
        id.psd0.mp = 2500; // 25 W
        match sub {
            Some(s) => {
                id.sn = s.serial.clone();
                id.mn = s.model.clone();
                id.cntrltype = identify::cntrltype::IO;
                id.subnqn = s.nqn.clone();
                id.acl = ACL;
                id.frmw = (1 << 1) | 1; // one slot, slot 1 read-only
                id.lpa |= identify::lpa::SMART_PER_NS | identify::lpa::CMD_EFFECTS;
                id.wctemp = 0x0157;
                id.cctemp = 0x0175;
                // The largest NSID a namespace may be hot-added at (Linux nvmet: 1024).
                id.nn = s.max_nsid().max(limits.max_namespaces);
                id.oncs = identify::oncs::COMPARE
                    | identify::oncs::DSM
                    | identify::oncs::WRITE_ZEROES
                    | identify::oncs::RESERVATIONS
                    | identify::oncs::VERIFY
                    | identify::oncs::COPY;
                id.fuses = identify::fuses::COMPARE_AND_WRITE;
                id.ocfs = identify::ocfs::FORMAT_0;
                // A Compare-and-Write is atomic at any size it may have (the namespace gate):
                // up to MDTS, stated in 4 KiB blocks (a lower bound for 512-byte namespaces).
                id.acwu = (max_transfer / 4096).max(1).saturating_sub(1) as u16;
                id.vwc = identify::vwc::PRESENT | identify::vwc::FLUSH_BROADCAST_SUPPORTED;
                id.ioccsz = (64 + limits.io_inline_data) / 16;
                id.oaes = identify::oaes::NS_ATTR;
                crate::ana::identify_controller(&mut id, limits.max_namespaces);
            }
            None => {
                id.sn = "ebof-discovery".into();
                id.mn = "ebof discovery controller".into();
                id.cntrltype = identify::cntrltype::DISCOVERY;
                id.subnqn = DISCOVERY_NQN.into();
                id.maxcmd = ADMIN_QUEUE_MAX as u16;
                id.ioccsz = 0;
                id.iorcsz = 0;
                id.oaes = identify::oaes::DISC_CHANGE;
                // DCTYPE (TP 8010): 1 = Direct Discovery Controller, 2 = Central.
                id.dctype = if self.session.target().central().is_some() {
                    2
                } else {
                    1
                };
            }
        }
        id
    }

    // ---------------------------------------------------------------- Get Log Page

    fn execute_get_log_page(
        &mut self,
        idx: u16,
        ctrl: &Arc<Controller>,
        sqe: &Sqe,
        buf: &mut Vec<u8>,
    ) -> CmdResult {
        let cdw10 = sqe.cdw10();
        let log_id = (cdw10 & 0xFF) as u8;
        let numdl = cdw10 >> 16;
        let numdu = sqe.cdw11() & 0xFFFF;
        let numd = u64::from(numdl | (numdu << 16)) + 1;
        let len = numd * 4;
        let offset = u64::from(sqe.cdw12()) | (u64::from(sqe.cdw13()) << 32);
        if offset % 4 != 0 {
            return Err(CmdError::at(Status::INVALID_FIELD, 48));
        }
        if len > u64::from(self.session.target().limits.max_transfer.max(1 << 20)) {
            return Err(CmdError::at(Status::INVALID_FIELD, 40));
        }
        self.check_c2h(sqe, len as u32)?;
        let rae = cdw10 & nvme_spec::log::aen::RAE != 0;
        let sub = ctrl.subsystem();
        let full: Vec<u8> = match (log_id, sub.as_ref()) {
            (lid::ERROR, _) => {
                let st = ctrl.state();
                let entries: Vec<ErrorLogEntry> = st.errors.iter().copied().collect();
                ErrorLogEntry::encode_page(
                    &entries,
                    (crate::controller::ERROR_LOG_ENTRIES - 1) as u8,
                )
            }
            (lid::SMART, Some(s)) => {
                let nsid = sqe.nsid().0;
                let list: Vec<&Arc<Namespace>> = if nsid == 0 || nsid == u32::MAX {
                    s.namespaces.iter().collect()
                } else {
                    vec![
                        s.namespace(nsid)
                            .ok_or(CmdError::at(Status::INVALID_NS, 4))?,
                    ]
                };
                let st = ctrl.state();
                let log = smart_log(&list, self.session.target(), st.error_count);
                drop(st);
                let mut b = [0u8; SmartLog::LEN];
                log.encode(&mut b);
                b.to_vec()
            }
            (lid::FW_SLOT, Some(_)) => {
                let mut frs: [String; 7] = Default::default();
                frs[0] = FIRMWARE_REV.to_string();
                let mut b = [0u8; FwSlotLog::LEN];
                FwSlotLog { afi: 1, frs }.encode(&mut b);
                b.to_vec()
            }
            (lid::CHANGED_NS, Some(_)) => {
                let mut b = [0u8; ChangedNsList::LEN];
                ctrl.log_page_read(lid::CHANGED_NS, rae).encode(&mut b);
                b.to_vec()
            }
            (lid::ANA, Some(s)) => {
                ctrl.log_page_read(lid::ANA, rae);
                let rgo = cdw10 & nvme_spec::ana::LSP_RGO != 0;
                self.session
                    .target()
                    .ana
                    .log(self.session.ana_row(), s, rgo)
                    .encode()
            }
            (lid::CMD_EFFECTS, Some(_)) => {
                let mut log = CmdEffectsLog {
                    acs: [0; 256],
                    iocs: [0; 256],
                };
                for op in [
                    admin::GET_LOG_PAGE,
                    admin::IDENTIFY,
                    admin::ABORT,
                    admin::SET_FEATURES,
                    admin::GET_FEATURES,
                    admin::ASYNC_EVENT_REQUEST,
                    admin::KEEP_ALIVE,
                ] {
                    log.acs[usize::from(op)] = effects::CSUPP;
                }
                if ctrl.is_replica_link() {
                    for op in [
                        nvme_spec::ebof_vendor::opcode::MIRROR_ADMIT,
                        nvme_spec::ebof_vendor::opcode::MIRROR_RESV,
                        nvme_spec::ebof_vendor::opcode::MIRROR_SNAPSHOT,
                    ] {
                        log.acs[usize::from(op)] = effects::CSUPP;
                    }
                }
                if crate::witness_cmd::serves_lease(self.session.target(), ctrl) {
                    let op = nvme_spec::ebof_vendor::opcode::WITNESS_LEASE;
                    log.acs[usize::from(op)] = effects::CSUPP;
                }
                log.iocs[usize::from(io::FLUSH)] = effects::CSUPP | effects::LBCC;
                for op in [io::READ, io::COMPARE, io::VERIFY] {
                    log.iocs[usize::from(op)] = effects::CSUPP;
                }
                for op in [io::WRITE, io::WRITE_ZEROES, io::DATASET_MGMT, io::COPY] {
                    log.iocs[usize::from(op)] = effects::CSUPP | effects::LBCC;
                }
                for op in [
                    io::RESV_REGISTER,
                    io::RESV_REPORT,
                    io::RESV_ACQUIRE,
                    io::RESV_RELEASE,
                ] {
                    log.iocs[usize::from(op)] = effects::CSUPP;
                }
                let mut b = [0u8; CmdEffectsLog::LEN];
                log.encode(&mut b);
                b.to_vec()
            }
            (lid::RESERVATION, Some(_)) => {
                let mut b = [0u8; nvme_spec::resv::ResvNotificationLog::LEN];
                ctrl.take_resv_log(rae).encode(&mut b);
                b.to_vec()
            }
            (lid::DISCOVERY, None) => {
                ctrl.log_page_read(lid::DISCOVERY, rae);
                self.discovery_log(ctrl)
            }
            _ => return Err(CmdError::at(Status::INVALID_LOG_PAGE, 40)),
        };
        buf.clear();
        buf.resize(len as usize, 0);
        copy_log_window(&full, offset, buf);
        self.set_c2h(idx, len as u32);
        Ok((0, 0))
    }

    // ---------------------------------------------------------------- Features

    fn execute_get_features(
        &mut self,
        idx: u16,
        ctrl: &Arc<Controller>,
        sqe: &Sqe,
        buf: &mut Vec<u8>,
    ) -> CmdResult {
        let fid = (sqe.cdw10() & 0xFF) as u8;
        let sel = (sqe.cdw10() >> 8) & 0x7;
        if sel == 3 {
            // Supported capabilities: nothing saveable; KATO, AEC, queues, VWC changeable.
            let changeable = matches!(
                fid,
                feature::KATO | feature::ASYNC_EVENT | feature::NUM_QUEUES | feature::VOLATILE_WC
            );
            // Reservation features: namespace-specific (bit 1) and changeable.
            if matches!(fid, feature::RESV_MASK | feature::RESV_PERSIST) {
                return Ok(((1 << 1) | (1 << 2), 0));
            }
            return Ok((if changeable { 1 << 2 } else { 0 }, 0));
        }
        if sel == 2 {
            // Saved values: we support no saveable features (ONCS.SAVE_SELECT = 0).
            return Err(CmdError::at(Status::INVALID_FIELD, 41));
        }
        let default = sel == 1;
        let disc = ctrl.is_discovery();
        let st = ctrl.state();
        let v: u32 = match fid {
            feature::KATO => {
                if default {
                    0
                } else {
                    st.kato
                        .map_or(0, |d| d.as_millis().min(u128::from(u32::MAX)) as u32)
                }
            }
            feature::ASYNC_EVENT => {
                if default {
                    0
                } else {
                    st.aec
                }
            }
            feature::NUM_QUEUES if !disc => {
                let max = u32::from(self.session.target().limits.max_io_queues.saturating_sub(1));
                let v = if default { None } else { st.num_queues };
                v.unwrap_or(max | (max << 16))
            }
            feature::VOLATILE_WC if !disc => u32::from(default || ctrl.wce()),
            feature::ARBITRATION if !disc => 0,
            feature::POWER_MGMT if !disc => {
                if default {
                    0
                } else {
                    st.power_state
                }
            }
            feature::TEMP_THRESHOLD if !disc => {
                if default {
                    0x0157
                } else {
                    st.temp_threshold
                }
            }
            feature::ERROR_RECOVERY if !disc => {
                if default {
                    0
                } else {
                    st.error_recovery
                }
            }
            feature::IRQ_COALESCE | feature::WRITE_ATOMIC if !disc => 0,
            feature::RESV_MASK | feature::RESV_PERSIST if !disc => {
                drop(st);
                if default {
                    return Ok((0, 0));
                }
                return Ok((self.get_resv_feature(ctrl, fid, sqe.nsid().0)?, 0));
            }
            feature::HOST_ID if !disc => {
                // EXHID (CDW11 bit 0) must ask for the 128-bit identifier we support.
                if sqe.cdw11() & 1 == 0 {
                    return Err(CmdError::at(Status::INVALID_FIELD, 44));
                }
                drop(st);
                self.check_c2h(sqe, 16)?;
                buf.clear();
                buf.extend_from_slice(&ctrl.hostid);
                self.set_c2h(idx, 16);
                return Ok((0, 0));
            }
            _ => return Err(CmdError::at(Status::INVALID_FIELD, 40)),
        };
        Ok((v, 0))
    }

    fn execute_set_features(
        &mut self,
        ctrl: &Arc<Controller>,
        sqe: &Sqe,
        _data: &[u8],
    ) -> CmdResult {
        let fid = (sqe.cdw10() & 0xFF) as u8;
        if sqe.cdw10() & (1 << 31) != 0 {
            return Err(CmdError::at(Status::FEATURE_NOT_SAVEABLE, 43));
        }
        let v = sqe.cdw11();
        let disc = ctrl.is_discovery();
        let mut st = ctrl.state();
        match fid {
            feature::KATO => {
                st.kato = (v != 0).then(|| std::time::Duration::from_millis(u64::from(v)));
                Ok((0, 0))
            }
            feature::ASYNC_EVENT => {
                st.aec = v;
                Ok((0, 0))
            }
            feature::NUM_QUEUES if !disc => {
                let nsqr = v & 0xFFFF;
                let ncqr = v >> 16;
                if nsqr == 0xFFFF || ncqr == 0xFFFF {
                    return Err(CmdError::at(Status::INVALID_FIELD, 44));
                }
                let max = u32::from(self.session.target().limits.max_io_queues.saturating_sub(1));
                let granted = nsqr.min(max) | (ncqr.min(max) << 16);
                st.num_queues = Some(granted);
                Ok((granted, 0))
            }
            feature::VOLATILE_WC if !disc => {
                ctrl.set_wce(v & 1 != 0);
                Ok((0, 0))
            }
            feature::POWER_MGMT if !disc => {
                if v & 0x1F != 0 {
                    return Err(CmdError::at(Status::INVALID_FIELD, 44));
                }
                st.power_state = v;
                Ok((0, 0))
            }
            feature::TEMP_THRESHOLD if !disc => {
                st.temp_threshold = v;
                Ok((0, 0))
            }
            feature::ERROR_RECOVERY if !disc => {
                st.error_recovery = v;
                Ok((0, 0))
            }
            // The host identifier comes from Connect on fabrics (NVMe-oF 1.1 3.3: Set Features
            // Host Identifier is a Command Sequence Error).
            feature::HOST_ID if !disc => Err(CmdError::at(Status::CMD_SEQ_ERROR, 40)),
            feature::RESV_MASK | feature::RESV_PERSIST if !disc => {
                drop(st);
                self.set_resv_feature(ctrl, fid, sqe.nsid().0, v)
            }
            _ => Err(CmdError::at(Status::INVALID_FIELD, 40)),
        }
    }
}

/// Namespace features byte: thin provisioning (bit 0) when the backend is sparse
/// ([`ebof_backend::Backend::thin`]), NGUID/EUI64 never reused (bit 3); deallocated blocks
/// read zero is reported through DLFEAT.
fn ns_features(ns: &Namespace) -> u8 {
    let thin = if ns.backend.thin() { nsfeat::THINP } else { 0 };
    thin | nsfeat::UIDREUSE
}

/// Namespace Utilization: the blocks the backend really holds when it is thin provisioned
/// (its allocated bytes, rounded up to whole blocks, never more than `blocks`), else every
/// block. Read when a host asks (Identify), never on the data path.
fn ns_utilization(ns: &Namespace, blocks: u64) -> u64 {
    if !ns.backend.thin() {
        return blocks;
    }
    used_blocks(ns.backend.allocated_bytes(), ns.block_size, blocks)
}

/// `allocated` bytes as whole blocks of `block_size`, capped at `blocks` (a file may hold
/// blocks past the namespace's end after a shrink, or preallocated by its file system).
fn used_blocks(allocated: u64, block_size: u32, blocks: u64) -> u64 {
    allocated.div_ceil(u64::from(block_size.max(1))).min(blocks)
}

/// Identify Namespace data for `ns`.
pub fn identify_namespace(ns: &Namespace) -> IdentifyNamespace {
    let blocks = ns.blocks();
    let (mssrl, mcl, msrc) = crate::cmds::copy_limits(ns);
    let mut lbaf = [LbaFormat::default(); 64];
    lbaf[0] = LbaFormat {
        ms: 0,
        lbads: ns.lbads(),
        rp: 0,
    };
    IdentifyNamespace {
        nsze: blocks,
        // Thin or not, every block can be written: the capacity is the size.
        ncap: blocks,
        nuse: ns_utilization(ns, blocks),
        nsfeat: ns_features(ns),
        nlbaf: 0,
        flbas: 0,
        // Shared namespace: may be attached to several controllers (multipath).
        nmic: 1,
        rescap: crate::resv_cmd::rescap(ns),
        anagrpid: ns.ana_group(),
        // Deallocated blocks read as zeroes (bits 2:0 = 001b); Write Zeroes may deallocate (bit 3).
        dlfeat: 0b1001,
        nvmcap: u128::from(ns.backend.size()),
        mssrl,
        mcl,
        msrc,
        nguid: ns.nguid(),
        eui64: ns.eui64(),
        lbaf,
        ebof_backend: Some(match ns.backend.kind() {
            ebof_backend::BackendKind::Ram => identify::ebof_vs::Backend::Ram,
            ebof_backend::BackendKind::File => identify::ebof_vs::Backend::File,
            ebof_backend::BackendKind::Block => identify::ebof_vs::Backend::Block,
        }),
        ebof_encrypted: ns.backend.encrypted(),
        ..Default::default()
    }
}

fn smart_log(list: &[&Arc<Namespace>], target: &crate::target::Target, errors: u64) -> SmartLog {
    let mut log = SmartLog {
        temperature: 273 + 35,
        avail_spare: 100,
        spare_thresh: 10,
        ..Default::default()
    };
    let (mut rb, mut wb, mut rc, mut wc, mut me) = (0u128, 0u128, 0u128, 0u128, 0u128);
    for ns in list {
        rb += u128::from(ns.stats.bytes_read.load(Ordering::Relaxed));
        wb += u128::from(ns.stats.bytes_written.load(Ordering::Relaxed));
        rc += u128::from(ns.stats.read_cmds.load(Ordering::Relaxed));
        wc += u128::from(ns.stats.write_cmds.load(Ordering::Relaxed));
        me += u128::from(ns.stats.media_errors.load(Ordering::Relaxed));
    }
    log.data_units_read = nvme_spec::log::data_units_from_bytes(rb);
    log.data_units_written = nvme_spec::log::data_units_from_bytes(wb);
    log.host_reads = rc;
    log.host_writes = wc;
    log.media_errors = me;
    log.power_cycles = 1;
    log.power_on_hours = u128::from(target.started.elapsed().as_secs() / 3600);
    log.num_err_log_entries = u128::from(errors);
    log
}

impl Queue {
    /// The full discovery log page for the host of `ctrl`.
    pub(crate) fn discovery_log(&self, ctrl: &Controller) -> Vec<u8> {
        let t = self.session.target();
        let local = self.session.local();
        let listeners = t.listeners();
        let mut entries = Vec::new();
        for s in t
            .subsystems()
            .iter()
            .filter(|s| s.host_allowed(&ctrl.hostnqn))
        {
            for l in listeners.iter() {
                entries.push(entry(l, subtype::NVME, &s.nqn, 0));
            }
        }
        if let Some(c) = t.central()
            && let Some(more) = c.entries(&ctrl.hostnqn)
        {
            entries.extend(more.iter().cloned());
        }
        for (i, r) in t.referrals().iter().enumerate() {
            entries.push(r.log_entry(i));
        }
        // The current discovery subsystem, reachable where this host is connected.
        let here = listeners
            .iter()
            .find(|l| l.addr == local)
            .copied()
            .unwrap_or(ListenerInfo {
                addr: local,
                portid: 0,
                tls: ListenerTls::Off,
                transport: self.session.transport(),
            });
        entries.push(entry(
            &here,
            subtype::CURRENT_DISCOVERY,
            DISCOVERY_NQN,
            CURRENT_DISCOVERY_EFLAGS,
        ));
        encode_discovery_log(t.discovery_genctr(), &entries)
    }
}

#[cfg(test)]
mod tests {
    use super::used_blocks;

    #[test]
    fn utilization_is_allocated_bytes_in_whole_blocks_capped_at_the_size() {
        // Nothing written: nothing used.
        assert_eq!(used_blocks(0, 512, 1000), 0);
        // 32 MiB of a 64 MiB namespace, 4K blocks.
        assert_eq!(used_blocks(32 << 20, 4096, 16384), 8192);
        // A partly used block counts as used.
        assert_eq!(used_blocks(4096 + 1, 4096, 100), 2);
        // 4 KiB file-system blocks under 512-byte LBAs.
        assert_eq!(used_blocks(4096, 512, 100), 8);
        // Blocks past the end (after a shrink) or preallocated: never more than the size.
        assert_eq!(used_blocks(1 << 30, 512, 2048), 2048);
        assert_eq!(used_blocks(u64::MAX, 512, u64::MAX), u64::MAX / 512 + 1);
    }
}
