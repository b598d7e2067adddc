//! Target logic driven by a simulated host, with no sockets: the host role of `nvmf-tcp`
//! talks to a [`ConnCore`] (the target's sans-IO connection) through byte buffers.

mod common;

use ebof_backend::{Backend, BackendSpec};
use ebof_runtime::conn::{ConnCore, Step};
use nvme_spec::fabrics::{ConnectCmd, ConnectData, PropertyCmd, cc, csts, prop};
use nvme_spec::identify::{IdentifyController, IdentifyNamespace, cns};
use nvme_spec::log::{SmartLog, lid};
use nvme_spec::opcode::{admin, fctype, feature, io};
use nvme_spec::{CommandId, ControllerId, Cqe, NamespaceId, QueueId, Sqe, Status};
use nvmf_target::{ListenerInfo, Target, TargetLimits};
use nvmf_tcp::{HostConn, HostConnConfig, HostEvent, TargetConnConfig};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

const NQN: &str = "nqn.2026-11.io.ebof:sim";
const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001";

fn local() -> SocketAddr {
    "127.0.0.1:4420".parse().unwrap()
}

fn target_with(limits: TargetLimits, hosts: Option<Vec<String>>) -> Arc<Target> {
    let backend = ebof_backend::open(&BackendSpec::Ram { size: 16 << 20 }).unwrap();
    target_on(backend, limits, hosts)
}

fn target_on(
    backend: Arc<dyn Backend>,
    limits: TargetLimits,
    hosts: Option<Vec<String>>,
) -> Arc<Target> {
    let sub = common::subsystem(NQN, backend, hosts);
    Arc::new(Target::new(
        vec![sub],
        vec![ListenerInfo {
            addr: local(),
            portid: 1,
            tls: Default::default(),
            transport: Default::default(),
        }],
        limits,
        Instant::now(),
    ))
}

fn target() -> Arc<Target> {
    target_with(TargetLimits::default(), None)
}

/// What the target answered to one command.
#[derive(Debug, Default)]
struct Answer {
    cqe: Option<Cqe>,
    data: Vec<u8>,
}

struct Sim {
    host: HostConn,
    core: ConnCore,
    now: Instant,
    next_cid: u16,
}

impl Sim {
    fn new(target: Arc<Target>, digests: bool) -> Sim {
        Sim::with_cfg(target, digests, TargetConnConfig::default())
    }

    fn with_cfg(target: Arc<Target>, digests: bool, tcp: TargetConnConfig) -> Sim {
        let mut cfg = HostConnConfig::default();
        cfg.digests.hdgst = digests;
        cfg.digests.ddgst = digests;
        let host = HostConn::new(cfg);
        let core = ConnCore::new(target, tcp, local(), Instant::now());
        let mut s = Sim {
            host,
            core,
            now: Instant::now(),
            next_cid: 1,
        };
        let mut out = Vec::new();
        s.host.encode_icreq(&mut out);
        s.feed_target(&out);
        let back = s.core.take_output();
        let (ev, n) = s.host.decode_one(&back).unwrap().unwrap();
        assert!(matches!(ev, HostEvent::Established { .. }), "{ev:?}");
        assert_eq!(n, back.len());
        s
    }

    /// Feed host bytes to the target in awkward chunks and run it.
    fn feed_target(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(1000) {
            // The receive buffer starts empty and grows as a reader that fills it would.
            assert_eq!(self.core.feed(chunk), chunk.len());
            // Backends that may block (file) run synchronously here, as a worker would.
            let mut offload = |q: &mut nvmf_target::Queue, slot: u16| {
                let req = q.io_request(slot).cloned().expect("offloaded slot has I/O");
                let mut buf = q.take_io_buffer(slot);
                let status = nvmf_target::execute_io(&req, &mut buf);
                q.complete_io(slot, status, buf);
            };
            match self.core.process(self.now, &mut offload) {
                Step::Continue => {}
                Step::Close(e) => panic!("target closed: {e:?}"),
            }
            self.core.flush_completions();
        }
    }

    /// Send one command (with in-capsule data or via R2T) and collect the answer.
    fn cmd(&mut self, mut sqe: Sqe, h2c: &[u8], inline: bool) -> Answer {
        let cid = self.next_cid;
        self.next_cid = self.next_cid.wrapping_add(1);
        sqe.set_cid(CommandId(cid));
        let mut out = Vec::new();
        if !h2c.is_empty() && inline {
            sqe.set_sgl_icd(h2c.len() as u32);
            self.host.encode_capsule(&mut out, &sqe, h2c);
        } else {
            self.host.encode_capsule(&mut out, &sqe, &[]);
        }
        self.feed_target(&out);
        let mut ans = Answer::default();
        for _ in 0..64 {
            let back = self.core.take_output();
            if back.is_empty() {
                break;
            }
            let mut pos = 0;
            let mut reply = Vec::new();
            while let Some((ev, n)) = self.host.decode_one(&back[pos..]).unwrap() {
                pos += n;
                match ev {
                    HostEvent::R2t(r) => {
                        assert_eq!(r.cccid, cid);
                        let d = &h2c[r.r2to as usize..(r.r2to + r.r2tl) as usize];
                        self.host
                            .encode_h2c_data(&mut reply, cid, r.ttag, r.r2to, d);
                    }
                    HostEvent::C2hData {
                        cccid,
                        datao,
                        data,
                        success,
                        ..
                    } => {
                        assert_eq!(cccid, cid);
                        assert_eq!(datao as usize, ans.data.len());
                        ans.data.extend_from_slice(data);
                        if success {
                            ans.cqe = Some(Cqe {
                                cid,
                                ..Default::default()
                            });
                        }
                    }
                    HostEvent::Response(c) => {
                        assert_eq!(c.cid, cid);
                        ans.cqe = Some(c);
                    }
                    other => panic!("unexpected {other:?}"),
                }
            }
            assert_eq!(pos, back.len());
            if !reply.is_empty() {
                self.feed_target(&reply);
            }
        }
        ans
    }

    fn connect(&mut self, qid: u16, sqsize: u16, cntlid: u16, subnqn: &str, hostnqn: &str) -> Cqe {
        self.connect_attr(qid, sqsize, cntlid, subnqn, hostnqn, 0)
    }

    fn connect_attr(
        &mut self,
        qid: u16,
        sqsize: u16,
        cntlid: u16,
        subnqn: &str,
        hostnqn: &str,
        cattr: u8,
    ) -> Cqe {
        let sqe = ConnectCmd {
            recfmt: 0,
            qid: QueueId(qid),
            sqsize,
            cattr,
            kato: 5000,
        }
        .to_sqe(CommandId(0));
        let data = ConnectData {
            hostid: [9; 16],
            cntlid: ControllerId(cntlid),
            subnqn: subnqn.into(),
            hostnqn: hostnqn.into(),
        };
        self.cmd(sqe, &data.encode(), true).cqe.unwrap()
    }

    /// Send commands without host data in one batch; answers in submission order. Checks that
    /// the target completed them in that order and sent each one's data before its response.
    fn batch(&mut self, sqes: &[Sqe]) -> Vec<Answer> {
        let mut out = Vec::new();
        let mut cids = Vec::new();
        for sqe in sqes {
            let mut sqe = *sqe;
            let cid = self.next_cid;
            self.next_cid = self.next_cid.wrapping_add(1);
            sqe.set_cid(CommandId(cid));
            self.host.encode_capsule(&mut out, &sqe, &[]);
            cids.push(cid);
        }
        self.feed_target(&out);
        let back = self.core.take_output();
        let mut ans: Vec<Answer> = sqes.iter().map(|_| Answer::default()).collect();
        let mut done = Vec::new();
        let mut pos = 0;
        while let Some((ev, n)) = self.host.decode_one(&back[pos..]).unwrap() {
            pos += n;
            let (cid, cqe) = match ev {
                HostEvent::C2hData {
                    cccid,
                    datao,
                    data,
                    success,
                    ..
                } => {
                    let i = cids.iter().position(|&c| c == cccid).unwrap();
                    assert!(ans[i].cqe.is_none(), "data after the completion");
                    assert_eq!(datao as usize, ans[i].data.len());
                    ans[i].data.extend_from_slice(data);
                    let cqe = Cqe {
                        cid: cccid,
                        ..Default::default()
                    };
                    (cccid, success.then_some(cqe))
                }
                HostEvent::Response(c) => (c.cid, Some(c)),
                other => panic!("unexpected {other:?}"),
            };
            if let Some(cqe) = cqe {
                let i = cids.iter().position(|&c| c == cid).unwrap();
                assert!(ans[i].cqe.is_none(), "two completions");
                ans[i].cqe = Some(cqe);
                done.push(cid);
            }
        }
        assert_eq!(pos, back.len());
        assert_eq!(done, cids, "completion order");
        ans
    }

    fn prop_get(&mut self, ofst: u32, size8: bool) -> Cqe {
        let mut sqe = Sqe::new(admin::FABRICS, CommandId(0));
        sqe.set_fctype(fctype::PROPERTY_GET);
        PropertyCmd {
            size8,
            ofst,
            value: 0,
        }
        .encode_into(&mut sqe);
        self.cmd(sqe, &[], false).cqe.unwrap()
    }

    fn prop_set(&mut self, ofst: u32, value: u64) -> Cqe {
        let mut sqe = Sqe::new(admin::FABRICS, CommandId(0));
        sqe.set_fctype(fctype::PROPERTY_SET);
        PropertyCmd {
            size8: false,
            ofst,
            value,
        }
        .encode_into(&mut sqe);
        self.cmd(sqe, &[], false).cqe.unwrap()
    }

    fn enable(&mut self) {
        assert!(
            self.prop_set(prop::CC, u64::from(cc::enable_value(0)))
                .status
                .is_success()
        );
        let c = self.prop_get(prop::CSTS, false);
        assert_eq!(c.dw0 & csts::RDY, csts::RDY);
    }

    fn identify(&mut self, cns_v: u8, nsid: u32) -> Answer {
        let mut sqe = Sqe::new(admin::IDENTIFY, CommandId(0));
        sqe.set_nsid(NamespaceId(nsid));
        sqe.set_cdw(10, u32::from(cns_v));
        sqe.set_sgl_transport(4096);
        self.cmd(sqe, &[], false)
    }

    /// SMART / Health log for all namespaces (NSID FFFFFFFFh).
    fn smart_log(&mut self) -> SmartLog {
        let mut sqe = Sqe::new(admin::GET_LOG_PAGE, CommandId(0));
        sqe.set_nsid(NamespaceId(u32::MAX));
        sqe.set_cdw(10, u32::from(lid::SMART) | ((512 / 4 - 1) << 16));
        sqe.set_sgl_transport(512);
        let a = self.cmd(sqe, &[], false);
        assert!(a.cqe.unwrap().status.is_success());
        SmartLog::decode(&a.data).unwrap()
    }

    fn rw(&mut self, opc: u8, slba: u64, nlb: u32, data: &[u8], inline: bool) -> Answer {
        let mut sqe = Sqe::new(opc, CommandId(0));
        sqe.set_nsid(NamespaceId(1));
        sqe.set_slba(slba);
        sqe.set_nlb(nlb);
        sqe.set_sgl_transport(nlb * 512);
        self.cmd(sqe, data, inline)
    }
}

/// Admin queue up and enabled; returns the controller id.
fn bring_up(s: &mut Sim) -> u16 {
    let c = s.connect(0, 31, 0xFFFF, NQN, HOSTNQN);
    assert!(c.status.is_success(), "{c:?}");
    assert_eq!(c.sqhd, 1);
    let cntlid = c.dw0 as u16;
    s.enable();
    cntlid
}

#[test]
fn connect_enable_identify_io_shutdown() {
    for digests in [false, true] {
        let t = target();
        let mut admin_q = Sim::new(t.clone(), digests);
        let cntlid = bring_up(&mut admin_q);
        let cap = admin_q.prop_get(prop::CAP, true);
        assert_eq!(cap.result64() & 0xFFFF, 1023, "MQES");
        let vs = admin_q.prop_get(prop::VS, false);
        assert_eq!(vs.dw0, 0x0002_0000);

        let a = admin_q.identify(cns::CTRL, 0);
        assert!(a.cqe.unwrap().status.is_success());
        let id = IdentifyController::decode(&a.data).unwrap();
        assert_eq!(id.cntlid, cntlid);
        assert_eq!(id.subnqn, NQN);
        assert_eq!(id.sn, "EBOFTEST");
        assert_eq!(id.ioccsz, (64 + 8192) / 16);
        let a = admin_q.identify(cns::NS, 1);
        let ns = IdentifyNamespace::decode(&a.data).unwrap();
        assert_eq!(ns.nsze, (16 << 20) / 512);
        assert_eq!(ns.lba_size(), 512);

        // I/O queue on its own connection.
        let mut ioq = Sim::new(t.clone(), digests);
        let c = ioq.connect(1, 127, cntlid, NQN, HOSTNQN);
        assert!(c.status.is_success(), "{c:?}");
        let pattern: Vec<u8> = (0..64 * 1024).map(|i| (i * 7 + 3) as u8).collect();
        // Inline write (4 KiB), R2T write (64 KiB), read back.
        let w = ioq.rw(io::WRITE, 8, 8, &pattern[..4096], true);
        assert!(w.cqe.unwrap().status.is_success());
        let w = ioq.rw(io::WRITE, 100, 128, &pattern, false);
        assert!(w.cqe.unwrap().status.is_success());
        let r = ioq.rw(io::READ, 100, 128, &[], false);
        assert!(r.cqe.unwrap().status.is_success());
        assert_eq!(r.data, pattern);
        let r = ioq.rw(io::READ, 8, 8, &[], false);
        assert_eq!(r.data, &pattern[..4096]);
        // Deallocate one range with a 4 KiB buffer, as Linux sends it (NR = 0).
        let mut ranges = vec![0u8; 4096];
        ranges[4..8].copy_from_slice(&8u32.to_le_bytes());
        ranges[8..16].copy_from_slice(&100u64.to_le_bytes());
        let mut dsm = Sqe::new(io::DATASET_MGMT, CommandId(0));
        dsm.set_nsid(NamespaceId(1));
        dsm.set_cdw(11, nvme_spec::opcode::DSM_ATTR_DEALLOCATE);
        assert!(ioq.cmd(dsm, &ranges, true).cqe.unwrap().status.is_success());
        let r = ioq.rw(io::READ, 100, 8, &[], false);
        assert!(r.data.iter().all(|&b| b == 0));
        let r = ioq.rw(io::READ, 108, 8, &[], false);
        assert_eq!(r.data, &pattern[8 * 512..16 * 512]);
        // An R2T write (data straight into the RAM namespace) then an in-capsule write on the
        // slot it used: each lands where it should.
        let w = ioq.rw(io::WRITE, 200, 16, &pattern[4096..12288], false);
        assert!(w.cqe.unwrap().status.is_success());
        ioq.rw(io::WRITE, 100, 8, &pattern[..4096], true);
        assert_eq!(ioq.rw(io::READ, 100, 8, &[], false).data, &pattern[..4096]);
        assert_eq!(
            ioq.rw(io::READ, 200, 16, &[], false).data,
            &pattern[4096..12288]
        );
        // Out of range.
        let r = ioq.rw(io::READ, (16 << 20) / 512 - 1, 2, &[], false);
        assert_eq!(r.cqe.unwrap().status, Status::LBA_RANGE);
        assert!(r.data.is_empty());

        // SMART counters moved.
        let smart = admin_q.smart_log();
        assert_eq!(smart.host_writes, 4);
        assert_eq!(smart.host_reads, 6);
        assert_eq!(smart.data_units_written, 1); // 80 KiB rounds up to one unit of 512,000 B

        // Shutdown: CSTS.SHST complete and the I/O queue is told to close.
        assert!(!ioq.core.queue.should_close());
        let c = admin_q.prop_set(prop::CC, u64::from(cc::enable_value(0) | cc::SHN_NORMAL));
        assert!(c.status.is_success());
        let c = admin_q.prop_get(prop::CSTS, false);
        assert_eq!(c.dw0 & csts::SHST_MASK, csts::SHST_COMPLETE);
        assert!(ioq.core.queue.should_close());
    }
}

#[test]
fn connect_rejections() {
    let t = target_with(
        TargetLimits::default(),
        Some(vec!["nqn.2014-08.org.example:allowed".into()]),
    );
    let mut s = Sim::new(t.clone(), false);
    // Unknown subsystem: Invalid Parameters, IPO = 256 in the data.
    let c = s.connect(0, 31, 0xFFFF, "nqn.2026-11.io.ebof:nope", HOSTNQN);
    assert_eq!(c.status, Status::CONNECT_INVALID_PARAM);
    assert_eq!(c.dw0, 256 | (1 << 16));
    // Host not allowed.
    let c = s.connect(0, 31, 0xFFFF, NQN, HOSTNQN);
    assert_eq!(c.status, Status::CONNECT_INVALID_HOST);
    // Static controller id.
    let c = s.connect(0, 31, 5, NQN, "nqn.2014-08.org.example:allowed");
    assert_eq!(c.status, Status::CONNECT_INVALID_PARAM);
    assert_eq!(c.dw0, 16 | (1 << 16));
    // SQSIZE 0.
    let c = s.connect(0, 0, 0xFFFF, NQN, "nqn.2014-08.org.example:allowed");
    assert_eq!(c.dw0, 44);
    // Anything but Connect on an unconnected queue.
    let a = s.identify(cns::CTRL, 0);
    assert_eq!(a.cqe.unwrap().status, Status::INVALID_OPCODE);
    // Good one; then I/O connects with bad QID / unknown controller / duplicate QID.
    let c = s.connect(0, 31, 0xFFFF, NQN, "nqn.2014-08.org.example:allowed");
    assert!(c.status.is_success());
    let cntlid = c.dw0 as u16;
    s.enable();
    let mut q = Sim::new(t.clone(), false);
    let c = q.connect(33, 31, cntlid, NQN, "nqn.2014-08.org.example:allowed");
    assert_eq!((c.status, c.dw0), (Status::CONNECT_INVALID_PARAM, 42));
    let c = q.connect(
        1,
        31,
        cntlid.wrapping_add(7),
        NQN,
        "nqn.2014-08.org.example:allowed",
    );
    assert_eq!(
        (c.status, c.dw0),
        (Status::CONNECT_INVALID_PARAM, 16 | (1 << 16))
    );
    let c = q.connect(1, 4096, cntlid, NQN, "nqn.2014-08.org.example:allowed");
    assert_eq!((c.status, c.dw0), (Status::CONNECT_INVALID_PARAM, 44));
    let c = q.connect(1, 31, cntlid, NQN, "nqn.2014-08.org.example:allowed");
    assert!(c.status.is_success());
    let mut q2 = Sim::new(t.clone(), false);
    let c = q2.connect(1, 31, cntlid, NQN, "nqn.2014-08.org.example:allowed");
    assert_eq!(c.status, Status::CMD_SEQ_ERROR);
}

#[test]
fn empty_host_nqn_reaches_open_subsystems_only() {
    // SPDK's initiator without `hostnqn:` sends an empty HOSTNQN; like the Linux target and
    // SPDK, an allow-any-host subsystem accepts it, admin and I/O queues alike.
    let t = target();
    let mut admin_q = Sim::new(t.clone(), false);
    let c = admin_q.connect(0, 31, 0xFFFF, NQN, "");
    assert!(c.status.is_success(), "{c:?}");
    let cntlid = c.dw0 as u16;
    admin_q.enable();
    let mut ioq = Sim::new(t.clone(), false);
    let c = ioq.connect(1, 31, cntlid, NQN, "");
    assert!(c.status.is_success(), "{c:?}");
    // The I/O queue must name the same (empty) host as the admin queue.
    let mut other = Sim::new(t, false);
    let c = other.connect(2, 31, cntlid, NQN, HOSTNQN);
    assert_eq!(
        (c.status, c.dw0),
        (Status::CONNECT_INVALID_PARAM, 512 | (1 << 16))
    );
    // A subsystem with a host list does not let an anonymous host in.
    let t = target_with(
        TargetLimits::default(),
        Some(vec!["nqn.2014-08.org.example:allowed".into()]),
    );
    let mut s = Sim::new(t, false);
    let c = s.connect(0, 31, 0xFFFF, NQN, "");
    assert_eq!(c.status, Status::CONNECT_INVALID_HOST);
}

#[test]
fn admin_surface() {
    let t = target();
    let mut s = Sim::new(t.clone(), false);
    bring_up(&mut s);
    // Unsupported admin opcode and CNS.
    let mut sqe = Sqe::new(admin::FORMAT_NVM, CommandId(0));
    sqe.set_nsid(NamespaceId(1));
    assert_eq!(
        s.cmd(sqe, &[], false).cqe.unwrap().status,
        Status::INVALID_OPCODE
    );
    assert_eq!(
        s.identify(0x44, 0).cqe.unwrap().status,
        Status::INVALID_FIELD
    );
    // Number of queues: grant at most max_io_queues.
    let mut sqe = Sqe::new(admin::SET_FEATURES, CommandId(0));
    sqe.set_cdw(10, u32::from(feature::NUM_QUEUES));
    sqe.set_cdw(11, 100 | (100 << 16));
    let c = s.cmd(sqe, &[], false).cqe.unwrap();
    assert_eq!(c.dw0, 31 | (31 << 16));
    // Get Features VWC.
    let mut sqe = Sqe::new(admin::GET_FEATURES, CommandId(0));
    sqe.set_cdw(10, u32::from(feature::VOLATILE_WC));
    assert_eq!(s.cmd(sqe, &[], false).cqe.unwrap().dw0, 1);
    // Error log now holds the two failures above, newest first.
    let mut sqe = Sqe::new(admin::GET_LOG_PAGE, CommandId(0));
    sqe.set_cdw(10, u32::from(lid::ERROR) | ((64 * 2 / 4 - 1) << 16));
    sqe.set_sgl_transport(128);
    let a = s.cmd(sqe, &[], false);
    let e = nvme_spec::log::ErrorLogEntry::decode(&a.data).unwrap();
    assert_eq!(e.error_count, 2);
    // Keep-alive expiry tears the controller down.
    s.now += Duration::from_secs(6);
    assert!(s.core.queue.poll_timers(s.now));
    assert_eq!(t.controller_count(), 0);
}

fn read_sqe(slba: u64, nlb: u32) -> Sqe {
    let mut sqe = Sqe::new(io::READ, CommandId(0));
    sqe.set_nsid(NamespaceId(1));
    sqe.set_slba(slba);
    sqe.set_nlb(nlb);
    sqe.set_sgl_transport(nlb * 512);
    sqe
}

/// Reads from a non-blocking backend are streamed from the backend into the send buffer at
/// completion time; a backend failure there must still become the command's NVMe status (no
/// C2HData for it, Error log entry, SMART media error) and leave its neighbours intact.
#[test]
fn backend_read_errors() {
    for (digests, dissqfc) in [(false, false), (true, false), (false, true), (true, true)] {
        let bad_lba = 1000u64;
        let backend = common::FailingBackend::new(16 << 20, bad_lba * 512..(bad_lba + 8) * 512);
        let t = target_on(backend.clone(), TargetLimits::default(), None);
        let mut admin_q = Sim::new(t.clone(), digests);
        let cntlid = bring_up(&mut admin_q);
        // Small C2HData PDUs so that a read spans several, and can fail in a later one.
        let tcp = TargetConnConfig {
            c2h_max: 2048,
            ..TargetConnConfig::default()
        };
        let mut ioq = Sim::with_cfg(t.clone(), digests, tcp);
        let cattr = if dissqfc { 0x4 } else { 0 };
        let c = ioq.connect_attr(1, 127, cntlid, NQN, HOSTNQN, cattr);
        assert!(c.status.is_success(), "{c:?}");
        let pattern: Vec<u8> = (0..8192).map(|i| (i * 13 + 5) as u8).collect();
        let w = ioq.rw(io::WRITE, 990, 16, &pattern, false);
        assert!(w.cqe.unwrap().status.is_success());

        // A good read in two PDUs.
        let r = ioq.rw(io::READ, 990, 8, &[], false);
        assert!(r.cqe.unwrap().status.is_success());
        assert_eq!(r.data, &pattern[..4096]);
        // Its second PDU touches the bad range: no data at all, only the status.
        let r = ioq.rw(io::READ, 996, 8, &[], false);
        let cqe = r.cqe.unwrap();
        assert_eq!(cqe.status, Status::UNRECOVERED_READ);
        assert!(r.data.is_empty());
        if !dissqfc {
            assert_ne!(cqe.sqhd, 0xFFFF);
        }

        // In one batch: good, bad, good.
        let a = ioq.batch(&[read_sqe(990, 4), read_sqe(1000, 1), read_sqe(992, 4)]);
        assert!(a[0].cqe.unwrap().status.is_success());
        assert_eq!(a[0].data, &pattern[..2048]);
        assert_eq!(a[1].cqe.unwrap().status, Status::UNRECOVERED_READ);
        assert!(a[1].data.is_empty());
        assert!(a[2].cqe.unwrap().status.is_success());
        assert_eq!(a[2].data, &pattern[1024..3072]);
        let failed_cid = a[1].cqe.unwrap().cid;
        assert_eq!(
            backend.failures.load(std::sync::atomic::Ordering::Relaxed),
            2
        );

        // Error log: newest entry is the batch's failed read.
        let mut sqe = Sqe::new(admin::GET_LOG_PAGE, CommandId(0));
        sqe.set_cdw(10, u32::from(lid::ERROR) | ((64 / 4 - 1) << 16));
        sqe.set_sgl_transport(64);
        let a = admin_q.cmd(sqe, &[], false);
        let e = nvme_spec::log::ErrorLogEntry::decode(&a.data).unwrap();
        assert_eq!(e.error_count, 2);
        assert_eq!((e.sqid, e.cmdid), (1, failed_cid));
        assert_eq!(
            e.status_field >> 1,
            Status::UNRECOVERED_READ.to_field() >> 1
        );
        assert_eq!((e.lba, e.nsid), (bad_lba, 1));
        assert_eq!(e.parm_error_location, 0xFFFF);

        // SMART: successful reads counted as reads, failed ones as media errors.
        let smart = admin_q.smart_log();
        assert_eq!(smart.host_reads, 3);
        assert_eq!(smart.media_errors, 2);
        assert_eq!(smart.host_writes, 1);
    }
}

#[test]
fn discovery_log_lists_what_the_host_may_see() {
    use nvme_spec::discovery::{decode_discovery_log, subtype};
    let mk = |nqn: &str, hosts| common::subsystem(nqn, common::ram(1 << 20), hosts);
    let listeners = vec![
        ListenerInfo {
            addr: local(),
            portid: 1,
            tls: Default::default(),
            transport: Default::default(),
        },
        ListenerInfo {
            addr: "127.0.0.1:4421".parse().unwrap(),
            portid: 2,
            tls: nvmf_target::ListenerTls::Required,
            transport: Default::default(),
        },
    ];
    let t = Arc::new(Target::new(
        vec![
            mk("nqn.2026-11.io.ebof:open", None),
            mk(
                "nqn.2026-11.io.ebof:private",
                Some(vec!["nqn.2014-08.org.example:vip".into()]),
            ),
        ],
        listeners,
        TargetLimits::default(),
        Instant::now(),
    ));
    for (host, want) in [(HOSTNQN, 2usize), ("nqn.2014-08.org.example:vip", 4)] {
        let mut s = Sim::new(t.clone(), false);
        let c = s.connect(0, 31, 0xFFFF, nvme_spec::DISCOVERY_NQN, host);
        assert!(c.status.is_success(), "{c:?}");
        s.enable();
        let id = IdentifyController::decode(&s.identify(cns::CTRL, 0).data).unwrap();
        assert_eq!(id.cntrltype, 2, "discovery controller");
        let mut sqe = Sqe::new(admin::GET_LOG_PAGE, CommandId(0));
        sqe.set_cdw(10, u32::from(lid::DISCOVERY) | ((8192 / 4 - 1) << 16));
        sqe.set_sgl_transport(8192);
        let a = s.cmd(sqe, &[], false);
        assert!(a.cqe.unwrap().status.is_success());
        let (hdr, entries) = decode_discovery_log(&a.data).unwrap();
        assert_eq!(hdr.numrec as usize, want + 1, "{host}");
        assert_eq!(hdr.genctr, 1);
        let subs: Vec<_> = entries
            .iter()
            .filter(|e| e.subtype == subtype::NVME)
            .collect();
        assert_eq!(
            subs.len(),
            want,
            "{host}: one entry per visible subsystem × listener"
        );
        assert!(
            subs.iter()
                .all(|e| e.trsvcid == "4420" || e.trsvcid == "4421")
        );
        // TREQ / TSAS: 4421 requires TLS 1.3, 4420 is plain.
        use nvme_spec::discovery::{tcp_sectype, treq};
        for e in &subs {
            let (secure, sectype) = if e.trsvcid == "4421" {
                (treq::REQUIRED, tcp_sectype::TLS13)
            } else {
                (treq::NOT_REQUIRED, tcp_sectype::NONE)
            };
            assert_eq!(e.treq & treq::SECURE_CHANNEL_MASK, secure, "{e:?}");
            assert_eq!(e.tcp_sectype, sectype, "{e:?}");
        }
        let cur: Vec<_> = entries
            .iter()
            .filter(|e| e.subtype == subtype::CURRENT_DISCOVERY)
            .collect();
        assert_eq!(cur.len(), 1);
        assert_eq!(cur[0].subnqn, nvme_spec::DISCOVERY_NQN);
        // I/O commands are not part of a discovery controller.
        let mut sqe = Sqe::new(admin::ABORT, CommandId(0));
        sqe.set_cdw(10, 1);
        assert_eq!(
            s.cmd(sqe, &[], false).cqe.unwrap().status,
            Status::INVALID_OPCODE
        );
    }
}

/// An idle queue gives back what a burst made it grow: receive and send buffers and the
/// slots' data buffers. Prints the idle footprint of a 1024-entry queue (docs/guide/serving.md states it).
#[test]
fn idle_queue_gives_its_buffers_back() {
    let backing = std::env::temp_dir().join(format!("ebof-sim-idle-{}.img", std::process::id()));
    let file = ebof_backend::open(&ebof_backend::BackendSpec::File {
        path: backing.clone(),
        size: Some(16 << 20),
    })
    .unwrap();
    let t = target_on(file, TargetLimits::default(), None);
    let mut admin_q = Sim::new(t.clone(), false);
    let cntlid = bring_up(&mut admin_q);
    let mut ioq = Sim::new(t, false);
    let c = ioq.connect(1, 1023, cntlid, NQN, HOSTNQN);
    assert!(c.status.is_success(), "{c:?}");
    // Slots are made as commands arrive: the Connect took one, a 1024-entry queue has not
    // allocated 1024.
    let idle_before = ioq.core.queue.idle_footprint();
    assert!(idle_before < 4096, "{idle_before} bytes before any I/O");
    // A burst: 128 KiB writes and reads through the slot buffers (file backend).
    let data: Vec<u8> = (0..128 * 1024).map(|i| (i % 241) as u8).collect();
    for lba in (0..64u64).map(|i| i * 256) {
        assert!(
            ioq.rw(io::WRITE, lba, 256, &data, false)
                .cqe
                .unwrap()
                .status
                .is_success()
        );
        assert_eq!(ioq.rw(io::READ, lba, 256, &[], false).data, data);
    }
    assert!(ioq.core.recv_capacity() >= 128 * 1024, "grew for the burst");
    let busy = ioq.core.queue.idle_footprint();
    assert!(
        busy >= 128 * 1024,
        "{busy} bytes: the slot buffers grew for the burst"
    );
    // First tick: data arrived since the last one, nothing is released.
    assert_eq!(ioq.core.tick(ioq.now), None);
    assert!(ioq.core.recv_capacity() > 0);
    // A tick with nothing received: everything grown is given back.
    assert_eq!(ioq.core.tick(ioq.now), None);
    assert_eq!(ioq.core.recv_capacity(), 0);
    let idle = ioq.core.queue.idle_footprint();
    println!(
        "1024-entry I/O queue: {idle_before} bytes after Connect, {busy} during the burst, \
         {idle} idle"
    );
    assert_eq!(
        idle, 0,
        "slot table, buffers and completion list given back"
    );
    // And the queue still works after giving its buffers back.
    assert!(
        ioq.rw(io::WRITE, 0, 8, &data[..4096], true)
            .cqe
            .unwrap()
            .status
            .is_success()
    );
    assert_eq!(ioq.rw(io::READ, 0, 8, &[], false).data, &data[..4096]);
    let _ = std::fs::remove_file(&backing);
}

/// A protocol error in a batch that also completed commands: the completions go out first and
/// the C2HTermReq is the last PDU (found by the `target_conn` fuzz target: the reactor's flush
/// after a closing `process` used to put CapsuleResps after the C2HTermReq).
#[test]
fn term_req_is_the_last_pdu_of_a_batch() {
    let mut s = Sim::new(target(), false);
    bring_up(&mut s);
    let mut batch = Vec::new();
    s.host
        .encode_capsule(&mut batch, &Sqe::new(admin::KEEP_ALIVE, CommandId(40)), &[]);
    // H2CData for a transfer tag that has no R2T: fatal.
    s.host.encode_h2c_data(&mut batch, 41, 3, 0, &[0u8; 512]);
    assert_eq!(s.core.feed(&batch), batch.len());
    let step = s
        .core
        .process(s.now, &mut |_: &mut nvmf_target::Queue, _: u16| {
            panic!("RAM never offloads")
        });
    assert!(matches!(step, Step::Close(_)));
    // As the reactor does after every process, closing or not.
    s.core.flush_completions();
    let out = s.core.take_output();
    let mut pos = 0;
    let mut seen = Vec::new();
    while pos < out.len() {
        let (ev, n) = s.host.decode_one(&out[pos..]).unwrap().unwrap();
        pos += n;
        seen.push(match ev {
            HostEvent::Response(c) => format!("resp {}", c.cid),
            HostEvent::TermReq { .. } => "term".to_string(),
            other => format!("{other:?}"),
        });
    }
    assert_eq!(seen, ["resp 40", "term"]);
}

impl Sim {
    fn set_aec(&mut self, v: u32) {
        let mut sqe = Sqe::new(admin::SET_FEATURES, CommandId(0));
        sqe.set_cdw(10, u32::from(feature::ASYNC_EVENT));
        sqe.set_cdw(11, v);
        assert!(self.cmd(sqe, &[], false).cqe.unwrap().status.is_success());
    }

    /// Send an Asynchronous Event Request; returns its completion if it completed at once.
    fn aer(&mut self) -> Option<Cqe> {
        self.cmd(
            Sqe::new(admin::ASYNC_EVENT_REQUEST, CommandId(0)),
            &[],
            false,
        )
        .cqe
    }

    /// What the admin queue sends when its timer runs: AER completions for pending events.
    fn tick(&mut self) -> Vec<Cqe> {
        assert!(!self.core.queue.poll_timers(self.now));
        self.core.flush_completions();
        let back = self.core.take_output();
        let mut v = Vec::new();
        let mut pos = 0;
        while let Some((ev, n)) = self.host.decode_one(&back[pos..]).unwrap() {
            pos += n;
            match ev {
                HostEvent::Response(c) => v.push(c),
                other => panic!("unexpected {other:?}"),
            }
        }
        v
    }

    fn get_log(&mut self, log_id: u8, len: u32, rae: bool) -> Vec<u8> {
        let mut sqe = Sqe::new(admin::GET_LOG_PAGE, CommandId(0));
        sqe.set_nsid(NamespaceId(u32::MAX));
        let rae = if rae { nvme_spec::log::aen::RAE } else { 0 };
        sqe.set_cdw(10, u32::from(log_id) | rae | ((len / 4 - 1) << 16));
        sqe.set_sgl_transport(len);
        let a = self.cmd(sqe, &[], false);
        assert!(a.cqe.unwrap().status.is_success());
        a.data
    }

    fn rw_ns(&mut self, opc: u8, nsid: u32, data: &[u8]) -> Cqe {
        let mut sqe = Sqe::new(opc, CommandId(0));
        sqe.set_nsid(NamespaceId(nsid));
        sqe.set_nlb(8);
        sqe.set_sgl_transport(4096);
        self.cmd(sqe, data, false).cqe.unwrap()
    }
}

fn with_namespace(s: &nvmf_target::Subsystem, nsid: u32) -> nvmf_target::Subsystem {
    let mut n = s.clone();
    n.namespaces.push(Arc::new(nvmf_target::Namespace::new(
        nsid,
        common::ram(1 << 20),
        512,
        [nsid as u8; 16],
    )));
    n
}

#[test]
fn namespaces_come_and_go_on_live_controllers_with_events() {
    use nvme_spec::log::{ChangedNsList, aen};
    let t = target();
    let mut admin_q = Sim::new(t.clone(), false);
    let cntlid = bring_up(&mut admin_q);
    let id = IdentifyController::decode(&admin_q.identify(cns::CTRL, 0).data).unwrap();
    assert_eq!(id.oaes & aen::CFG_NS_ATTR, aen::CFG_NS_ATTR);
    assert!(id.nn >= 1024, "room to hot-add: NN {}", id.nn);
    admin_q.set_aec(aen::CFG_NS_ATTR);
    assert!(admin_q.aer().is_none(), "AER parks");
    let mut io_q = Sim::new(t.clone(), false);
    assert!(
        io_q.connect(1, 31, cntlid, NQN, HOSTNQN)
            .status
            .is_success()
    );
    let data = vec![0x5A; 4096];
    assert!(io_q.rw_ns(io::WRITE, 1, &data).status.is_success());
    assert_eq!(io_q.rw_ns(io::READ, 2, &[]).status, Status::INVALID_NS);

    // Hot-add namespace 2: the I/O queue reaches it at once, the host gets the event.
    t.update_subsystem(NQN, |s| Ok::<_, ()>(with_namespace(s, 2)))
        .unwrap();
    let ev = admin_q.tick();
    assert_eq!(ev.len(), 1);
    assert_eq!(
        ev[0].dw0,
        aen::result(aen::TYPE_NOTICE, aen::NOTICE_NS_CHANGED, lid::CHANGED_NS)
    );
    assert!(io_q.rw_ns(io::WRITE, 2, &data).status.is_success());
    let list = identify_ns_list(&mut admin_q);
    assert_eq!(list, vec![1, 2]);

    // A second change before the log is read is recorded but not reported again.
    t.update_subsystem(NQN, |s| Ok::<_, ()>(with_namespace(s, 3)))
        .unwrap();
    assert!(admin_q.aer().is_none());
    assert!(admin_q.tick().is_empty(), "masked until the log is read");
    let log = admin_q.get_log(lid::CHANGED_NS, 4096, true);
    assert_eq!(ChangedNsList::decode(&log).unwrap().nsids, vec![2, 3]);
    // RAE kept it; reading without RAE clears the list and unmasks.
    let log = admin_q.get_log(lid::CHANGED_NS, 4096, false);
    assert_eq!(ChangedNsList::decode(&log).unwrap().nsids, vec![2, 3]);
    let log = admin_q.get_log(lid::CHANGED_NS, 4096, false);
    assert!(ChangedNsList::decode(&log).unwrap().nsids.is_empty());

    // Remove namespace 1 while a write to it waits for its data: the write fails with
    // Invalid Namespace, later commands find no namespace 1, namespace 2 is untouched.
    let mut sqe = Sqe::new(io::WRITE, CommandId(700));
    sqe.set_nsid(NamespaceId(1));
    sqe.set_nlb(8);
    sqe.set_sgl_transport(4096);
    let mut out = Vec::new();
    io_q.host.encode_capsule(&mut out, &sqe, &[]);
    io_q.feed_target(&out);
    let back = io_q.core.take_output();
    let Some((HostEvent::R2t(r), _)) = io_q.host.decode_one(&back).unwrap() else {
        panic!("expected R2T");
    };
    let (ttag, r2to) = (r.ttag, r.r2to);
    t.update_subsystem(NQN, |s| {
        let mut n = s.clone();
        n.namespaces.retain(|ns| ns.nsid != 1);
        Ok::<_, ()>(n)
    })
    .unwrap();
    let mut reply = Vec::new();
    io_q.host
        .encode_h2c_data(&mut reply, 700, ttag, r2to, &data);
    io_q.feed_target(&reply);
    let back = io_q.core.take_output();
    let Some((HostEvent::Response(c), _)) = io_q.host.decode_one(&back).unwrap() else {
        panic!("expected a response");
    };
    assert_eq!(c.status, Status::INVALID_NS.with_dnr(true));
    assert_eq!(io_q.rw_ns(io::READ, 1, &[]).status, Status::INVALID_NS);
    assert!(io_q.rw_ns(io::READ, 2, &[]).status.is_success());
    let ev = admin_q.tick();
    assert_eq!(
        ev.len(),
        1,
        "the AER sent after the log read reports the removal"
    );
    assert_eq!(identify_ns_list(&mut admin_q), vec![2, 3]);
    let log = admin_q.get_log(lid::CHANGED_NS, 4096, false);
    assert_eq!(ChangedNsList::decode(&log).unwrap().nsids, vec![1]);
}

fn identify_ns_list(s: &mut Sim) -> Vec<u32> {
    s.identify(cns::ACTIVE_NS_LIST, 0)
        .data
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .take_while(|&n| n != 0)
        .collect()
}

#[test]
fn events_wait_for_an_aer_and_respect_the_configuration() {
    use nvme_spec::log::aen;
    let t = target();
    // Notices disabled: the change is logged but not reported.
    let mut a = Sim::new(t.clone(), false);
    bring_up(&mut a);
    assert!(a.aer().is_none());
    t.update_subsystem(NQN, |s| Ok::<_, ()>(with_namespace(s, 2)))
        .unwrap();
    assert!(a.tick().is_empty());
    // Enabled, and no AER outstanding: the event is retained until one arrives.
    let mut b = Sim::new(t.clone(), false);
    bring_up(&mut b);
    b.set_aec(aen::CFG_NS_ATTR);
    t.update_subsystem(NQN, |s| Ok::<_, ()>(with_namespace(s, 3)))
        .unwrap();
    assert!(b.tick().is_empty());
    let c = b
        .aer()
        .expect("the retained event completes the AER at once");
    assert_eq!(c.dw0 & 0xFF_FF07, aen::result(2, 0, lid::CHANGED_NS));
}

#[test]
fn discovery_controllers_hear_of_discovery_log_changes() {
    use nvme_spec::discovery::decode_discovery_log;
    use nvme_spec::log::aen;
    let t = target();
    let mut d = Sim::new(t.clone(), false);
    let c = d.connect(0, 31, 0xFFFF, nvme_spec::DISCOVERY_NQN, HOSTNQN);
    assert!(c.status.is_success());
    d.enable();
    let id = IdentifyController::decode(&d.identify(cns::CTRL, 0).data).unwrap();
    assert_eq!(id.oaes & aen::CFG_DISC_CHANGE, aen::CFG_DISC_CHANGE);
    d.set_aec(aen::CFG_DISC_CHANGE);
    assert!(d.aer().is_none());
    let genctr = |d: &mut Sim| {
        decode_discovery_log(&d.get_log(lid::DISCOVERY, 1024, true))
            .unwrap()
            .0
            .genctr
    };
    let g0 = genctr(&mut d);
    let add = |t: &Target, nqn: &str| {
        let s = common::subsystem(nqn, common::ram(1 << 20), None);
        t.update_table(|table| {
            let mut v = table.to_vec();
            v.push(Arc::new(s));
            Ok::<_, ()>(v)
        })
        .unwrap();
    };
    add(&t, "nqn.2026-11.io.ebof:added");
    let ev = d.tick();
    assert_eq!(ev.len(), 1);
    assert_eq!(
        ev[0].dw0,
        aen::result(aen::TYPE_NOTICE, aen::NOTICE_DISC_CHANGE, lid::DISCOVERY)
    );
    let g1 = genctr(&mut d);
    assert!(g1 > g0, "generation moves: {g0} -> {g1}");
    // Masked until the log is read without RAE.
    assert!(d.aer().is_none());
    add(&t, "nqn.2026-11.io.ebof:added2");
    assert!(d.tick().is_empty());
    assert!(genctr(&mut d) > g1);
    d.get_log(lid::DISCOVERY, 1024, false);
    add(&t, "nqn.2026-11.io.ebof:added3");
    assert_eq!(d.tick().len(), 1);
    // Namespace changes do not touch the discovery log.
    let g = genctr(&mut d);
    t.update_subsystem(NQN, |s| Ok::<_, ()>(with_namespace(s, 2)))
        .unwrap();
    assert_eq!(genctr(&mut d), g);
}

/// The tick duties on NVMe/TCP: the configured handshake timeout closes a connection that
/// never connects; a connected one is left alone.
#[test]
fn the_configured_handshake_timeout_closes_a_connection_without_connect() {
    let t0 = Instant::now();
    let mut core = ConnCore::new(target(), TargetConnConfig::default(), local(), t0);
    let short = Duration::from_millis(300);
    core.set_handshake_timeout(t0, short);
    assert_eq!(core.tick(t0 + Duration::from_millis(200)), None);
    assert_eq!(
        core.tick(t0 + Duration::from_secs(1)),
        Some(ebof_runtime::duties::Close::HandshakeTimeout(short))
    );
}
