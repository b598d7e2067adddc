//! A minimal in-process NVMe/TCP controller for the host's tests: one RAM namespace, enough of
//! Fabrics/admin/I/O to bring a controller up and move data, with deliberately small transport
//! limits (C2HData split at 8 KiB, MAXH2CDATA 16 KiB, 4 KiB in-capsule data) so that the host's
//! multi-PDU paths run. It is a test double, not a target: `nvmf-target` is the real one.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use nvme_spec::discovery::{DiscoveryLogEntry, adrfam, encode_discovery_log, subtype, trtype};
use nvme_spec::fabrics::{Cap, ConnectCmd, ConnectData, PropertyCmd, cc, csts, prop};
use nvme_spec::identify::{
    IDENTIFY_DATA_LEN, IdentifyController, IdentifyNamespace, LbaFormat, NsIdDescriptor, cns,
    cntrltype, encode_active_ns_list, encode_ns_id_descs,
};
use nvme_spec::log::{copy_log_window, lid};
use nvme_spec::opcode::{admin, fctype, io};
use nvme_spec::{CommandId, Cqe, QueueId, Sqe, Status};
use nvmf_tcp::{TargetConn, TargetConnConfig, TargetEvent};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub const SUBNQN: &str = "nqn.2026-01.io.ebof:fake";
pub const LBA_SIZE: usize = 512;
pub const NS_BLOCKS: u64 = 8192; // 4 MiB
pub const IOCCSZ: u32 = (4096 + 64) / 16;

#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    /// Complete reads with C2HData SUCCESS when the host disabled SQ flow control.
    pub success_flag: bool,
    /// Answer every Read with this status instead of data.
    pub fail_reads: Option<Status>,
    /// Drop the connection when an I/O Write arrives.
    pub drop_on_write: bool,
    /// Complete the first Asynchronous Event Request at once with a Namespace Attribute
    /// Changed notice (later ones are held, as usual).
    pub aen_once: bool,
}

struct Shared {
    ram: Vec<u8>,
    cc: u32,
    next_cntlid: u16,
    genctr: u64,
    keep_alives: u32,
    aers: u32,
}

/// A running fake target.
pub struct Fake {
    pub addr: SocketAddr,
    shared: Arc<Mutex<Shared>>,
}

impl Fake {
    pub fn keep_alives(&self) -> u32 {
        self.shared.lock().unwrap().keep_alives
    }
    pub fn aers(&self) -> u32 {
        self.shared.lock().unwrap().aers
    }
}

/// Start the fake target; it lives as long as the runtime.
pub async fn start(opts: Options) -> Fake {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let shared = Arc::new(Mutex::new(Shared {
        ram: vec![0; NS_BLOCKS as usize * LBA_SIZE],
        cc: 0,
        next_cntlid: 1,
        genctr: 7,
        keep_alives: 0,
        aers: 0,
    }));
    let fake = Fake {
        addr,
        shared: shared.clone(),
    };
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = l.accept().await else { return };
            let sh = shared.clone();
            tokio::spawn(async move {
                let _ = serve(s, sh, opts, addr).await;
            });
        }
    });
    fake
}

struct PendingWrite {
    cid: u16,
    slba: u64,
    buf: Vec<u8>,
}

struct Conn {
    sh: Arc<Mutex<Shared>>,
    opts: Options,
    addr: SocketAddr,
    qid: Option<u16>,
    entries: u16,
    sqhd: u16,
    dissqfc: bool,
    cntlid: u16,
    discovery: bool,
    pending: Vec<Option<PendingWrite>>,
}

async fn serve(
    mut s: TcpStream,
    sh: Arc<Mutex<Shared>>,
    opts: Options,
    addr: SocketAddr,
) -> std::io::Result<()> {
    s.set_nodelay(true)?;
    let mut tc = TargetConn::new(TargetConnConfig {
        maxh2cdata: 16 * 1024,
        max_icd: 8192,
        c2h_max: 8 * 1024,
        max_ttags: 256,
        cpda: 0,
    });
    let mut c = Conn {
        sh,
        opts,
        addr,
        qid: None,
        entries: 0,
        sqhd: 0,
        dissqfc: false,
        cntlid: 0,
        discovery: false,
        pending: (0..256).map(|_| None).collect(),
    };
    let mut buf = vec![0u8; 1 << 20];
    let mut have = 0;
    let mut out = Vec::new();
    loop {
        let n = s.read(&mut buf[have..]).await?;
        if n == 0 {
            return Ok(());
        }
        have += n;
        let mut pos = 0;
        loop {
            let (ev, used) = match tc.decode_one(&buf[pos..have], &mut out) {
                Ok(Some(x)) => x,
                Ok(None) => break,
                Err(e) => {
                    tc.encode_term_req(&mut out, &e);
                    s.write_all(&out).await?;
                    return Ok(());
                }
            };
            match ev {
                TargetEvent::Established { .. } => {}
                TargetEvent::Command { sqe, icd } => {
                    if c.opts.drop_on_write && c.qid.unwrap_or(0) > 0 && sqe.opcode() == io::WRITE {
                        return Ok(());
                    }
                    c.command(&mut tc, &mut out, sqe, icd);
                }
                TargetEvent::H2cData {
                    cccid,
                    ttag,
                    datao,
                    data,
                    last,
                } => {
                    let p = c.pending[usize::from(ttag)].as_mut().unwrap();
                    assert_eq!(p.cid, cccid);
                    p.buf[datao as usize..datao as usize + data.len()].copy_from_slice(data);
                    if last {
                        let p = c.pending[usize::from(ttag)].take().unwrap();
                        c.finish_write(&tc, &mut out, p.cid, p.slba, &p.buf);
                    }
                }
                TargetEvent::TermReq { .. } => return Ok(()),
                TargetEvent::CommandDataDigestError { sqe } => {
                    c.respond(&tc, &mut out, sqe.cid().0, Status::TRANSIENT_TRANSPORT, 0)
                }
                TargetEvent::H2cDataDigestError { .. } => panic!("data digest error in test"),
            }
            pos += used;
        }
        buf.copy_within(pos..have, 0);
        have -= pos;
        if !out.is_empty() {
            s.write_all(&out).await?;
            out.clear();
        }
    }
}

impl Conn {
    fn respond(&mut self, tc: &TargetConn, out: &mut Vec<u8>, cid: u16, status: Status, dw0: u32) {
        self.respond64(tc, out, cid, status, u64::from(dw0))
    }

    fn respond64(&mut self, tc: &TargetConn, out: &mut Vec<u8>, cid: u16, status: Status, v: u64) {
        let sqhd = if self.dissqfc {
            0xFFFF
        } else {
            self.sqhd = (self.sqhd + 1) % self.entries.max(1);
            self.sqhd
        };
        let mut cqe = Cqe::new(CommandId(cid), QueueId(self.qid.unwrap_or(0)), status);
        cqe.dw0 = v as u32;
        cqe.dw1 = (v >> 32) as u32;
        cqe.sqhd = sqhd;
        tc.encode_resp(out, &cqe);
    }

    fn send_data(&mut self, tc: &TargetConn, out: &mut Vec<u8>, cid: u16, data: &[u8]) {
        if self.dissqfc && self.opts.success_flag {
            tc.encode_c2h_data(out, cid, 0, data, true, true);
        } else {
            tc.encode_c2h_data(out, cid, 0, data, true, false);
            self.respond(tc, out, cid, Status::SUCCESS, 0);
        }
    }

    fn command(&mut self, tc: &mut TargetConn, out: &mut Vec<u8>, sqe: Sqe, icd: &[u8]) {
        let cid = sqe.cid().0;
        let Some(qid) = self.qid else {
            assert_eq!(
                (sqe.opcode(), sqe.fctype()),
                (admin::FABRICS, fctype::CONNECT)
            );
            let cmd = ConnectCmd::from_sqe(&sqe);
            let data = ConnectData::decode(icd).unwrap();
            assert_eq!(cmd.recfmt, 0);
            self.qid = Some(cmd.qid.0);
            self.entries = cmd.sqsize + 1;
            self.dissqfc = cmd.dissqfc();
            self.discovery = data.subnqn == nvme_spec::DISCOVERY_NQN;
            self.cntlid = if cmd.qid.0 == 0 {
                let mut sh = self.sh.lock().unwrap();
                sh.next_cntlid += 1;
                sh.next_cntlid - 1
            } else {
                data.cntlid.0
            };
            let cntlid = self.cntlid;
            self.respond(tc, out, cid, Status::SUCCESS, u32::from(cntlid));
            return;
        };
        if qid == 0 {
            self.admin(tc, out, sqe);
        } else {
            self.io(tc, out, sqe, icd);
        }
    }

    fn admin(&mut self, tc: &TargetConn, out: &mut Vec<u8>, sqe: Sqe) {
        let cid = sqe.cid().0;
        let len = sqe.sgl_len() as usize;
        match sqe.opcode() {
            admin::FABRICS => {
                let p = PropertyCmd::from_sqe(&sqe).unwrap();
                let mut sh = self.sh.lock().unwrap();
                match sqe.fctype() {
                    fctype::PROPERTY_GET => {
                        let v = match p.ofst {
                            prop::CAP => Cap {
                                mqes: 127,
                                to: 2,
                                css_nvm: true,
                                css_iocs: false,
                            }
                            .to_u64(),
                            prop::VS => u64::from(nvme_spec::NVME_VERSION),
                            prop::CC => u64::from(sh.cc),
                            prop::CSTS => {
                                let mut v = 0;
                                if sh.cc & cc::EN != 0 {
                                    v |= csts::RDY;
                                }
                                if cc::shn(sh.cc) != 0 {
                                    v |= csts::SHST_COMPLETE;
                                }
                                u64::from(v)
                            }
                            _ => 0,
                        };
                        drop(sh);
                        self.respond64(tc, out, cid, Status::SUCCESS, v);
                    }
                    fctype::PROPERTY_SET => {
                        sh.cc = p.value as u32;
                        drop(sh);
                        self.respond(tc, out, cid, Status::SUCCESS, 0);
                    }
                    _ => {
                        drop(sh);
                        self.respond(tc, out, cid, Status::INVALID_OPCODE, 0)
                    }
                }
            }
            admin::IDENTIFY => {
                let mut page = [0u8; IDENTIFY_DATA_LEN];
                let discovery = self.discovery;
                match (sqe.cdw10() & 0xFF) as u8 {
                    cns::CTRL => {
                        let id = IdentifyController {
                            vid: 0x1b36,
                            sn: "FAKE0001".into(),
                            mn: "ebof fake target".into(),
                            fr: "0.1".into(),
                            mdts: 5,
                            cntlid: self.cntlid,
                            ver: nvme_spec::NVME_VERSION,
                            cntrltype: if discovery {
                                cntrltype::DISCOVERY
                            } else {
                                cntrltype::IO
                            },
                            aerl: 3,
                            elpe: 3,
                            sqes: 0x66,
                            cqes: 0x44,
                            maxcmd: 128,
                            nn: 1,
                            kas: 10,
                            sgls: 0x0010_0001 | (1 << 21),
                            subnqn: SUBNQN.into(),
                            ioccsz: IOCCSZ,
                            iorcsz: 1,
                            ..Default::default()
                        };
                        id.encode(&mut page);
                    }
                    cns::NS => {
                        let mut ns = IdentifyNamespace {
                            nsze: NS_BLOCKS,
                            ncap: NS_BLOCKS,
                            nuse: NS_BLOCKS,
                            ..Default::default()
                        };
                        ns.nlbaf = 0;
                        ns.lbaf[0] = LbaFormat::new(9);
                        ns.nguid = [0xAB; 16];
                        ns.encode(&mut page);
                    }
                    cns::ACTIVE_NS_LIST => {
                        encode_active_ns_list([1u32].into_iter(), sqe.nsid().0, &mut page);
                    }
                    cns::NS_ID_DESC_LIST => {
                        encode_ns_id_descs(
                            &[
                                NsIdDescriptor::Nguid([0xAB; 16]),
                                NsIdDescriptor::Uuid([0xCD; 16]),
                            ],
                            &mut page,
                        );
                    }
                    _ => return self.respond(tc, out, cid, Status::INVALID_FIELD, 0),
                }
                self.send_data(tc, out, cid, &page[..len]);
            }
            admin::GET_LOG_PAGE => {
                let lid_ = (sqe.cdw10() & 0xFF) as u8;
                let off = u64::from(sqe.cdw12()) | (u64::from(sqe.cdw13()) << 32);
                let full = match lid_ {
                    lid::DISCOVERY => {
                        let genctr = self.sh.lock().unwrap().genctr;
                        let e = |st: u8, nqn: &str| DiscoveryLogEntry {
                            trtype: trtype::TCP,
                            adrfam: adrfam::IPV4,
                            subtype: st,
                            treq: 0,
                            portid: 1,
                            cntlid: 0xFFFF,
                            asqsz: 32,
                            eflags: 0,
                            trsvcid: self.addr.port().to_string(),
                            subnqn: nqn.into(),
                            traddr: self.addr.ip().to_string(),
                            tcp_sectype: 0,
                            ..Default::default()
                        };
                        encode_discovery_log(
                            genctr,
                            &[
                                e(subtype::CURRENT_DISCOVERY, nvme_spec::DISCOVERY_NQN),
                                e(subtype::NVME, SUBNQN),
                            ],
                        )
                    }
                    _ => vec![0u8; 4096],
                };
                let mut page = vec![0u8; len];
                copy_log_window(&full, off, &mut page);
                self.send_data(tc, out, cid, &page);
            }
            admin::ASYNC_EVENT_REQUEST => {
                let first = {
                    let mut sh = self.sh.lock().unwrap();
                    sh.aers += 1;
                    sh.aers == 1
                };
                if self.opts.aen_once && first {
                    // Notice (2), Namespace Attribute Changed (0), Changed Namespace List (04h).
                    self.respond(tc, out, cid, Status::SUCCESS, 0x0004_0002);
                }
                // otherwise held forever
            }
            admin::KEEP_ALIVE => {
                self.sh.lock().unwrap().keep_alives += 1;
                self.respond(tc, out, cid, Status::SUCCESS, 0)
            }
            admin::SET_FEATURES | admin::GET_FEATURES => {
                let dw0 = if sqe.cdw10() & 0xFF == 0x07 {
                    sqe.cdw11()
                } else {
                    0
                };
                self.respond(tc, out, cid, Status::SUCCESS, dw0)
            }
            _ => self.respond(tc, out, cid, Status::INVALID_OPCODE, 0),
        }
    }

    fn io(&mut self, tc: &mut TargetConn, out: &mut Vec<u8>, sqe: Sqe, icd: &[u8]) {
        let cid = sqe.cid().0;
        let len = sqe.sgl_len() as usize;
        let slba = sqe.slba();
        let nlb = sqe.nlb() as u64;
        let in_range = slba + nlb <= NS_BLOCKS;
        match sqe.opcode() {
            io::READ => {
                if let Some(st) = self.opts.fail_reads {
                    return self.respond(tc, out, cid, st, 0);
                }
                if !in_range || len != nlb as usize * LBA_SIZE {
                    return self.respond(tc, out, cid, Status::LBA_RANGE, 0);
                }
                let data = {
                    let sh = self.sh.lock().unwrap();
                    sh.ram[slba as usize * LBA_SIZE..][..len].to_vec()
                };
                self.send_data(tc, out, cid, &data);
            }
            io::WRITE => {
                if !in_range || len != nlb as usize * LBA_SIZE {
                    return self.respond(tc, out, cid, Status::LBA_RANGE, 0);
                }
                if !icd.is_empty() {
                    self.finish_write(tc, out, cid, slba, icd);
                } else {
                    let ttag = cid; // slot index = CID in this fake
                    assert!(tc.send_r2t(out, cid, ttag, 0, len as u32));
                    self.pending[usize::from(ttag)] = Some(PendingWrite {
                        cid,
                        slba,
                        buf: vec![0; len],
                    });
                }
            }
            io::FLUSH | io::WRITE_ZEROES | io::DATASET_MGMT => {
                self.respond(tc, out, cid, Status::SUCCESS, 0)
            }
            _ => self.respond(tc, out, cid, Status::INVALID_OPCODE, 0),
        }
    }

    fn finish_write(
        &mut self,
        tc: &TargetConn,
        out: &mut Vec<u8>,
        cid: u16,
        slba: u64,
        data: &[u8],
    ) {
        {
            let mut sh = self.sh.lock().unwrap();
            sh.ram[slba as usize * LBA_SIZE..][..data.len()].copy_from_slice(data);
        }
        self.respond(tc, out, cid, Status::SUCCESS, 0);
    }
}
