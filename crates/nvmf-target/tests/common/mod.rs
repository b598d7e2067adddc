//! Helpers shared by the sans-IO integration tests of `nvmf-target` (a test drives a `Queue`
//! the way a transport would).

// Each test binary uses a different subset of these helpers.
#![allow(dead_code)]

use nvme_spec::fabrics::{ConnectCmd, ConnectData, PropertyCmd, cc, prop};
use nvme_spec::opcode::{admin, fctype};
use nvme_spec::{CommandId, ControllerId, Cqe, QueueId, Sqe};
use nvmf_target::{C2hData, Disposition, Queue, Target};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

/// Drain every completion of `q` as a transport would: each CQE with its C2H data (a streamed
/// read is read from its backend here), then report the output as sent (`Queue::output_sent`).
pub fn drain(q: &mut Queue) -> Vec<(Cqe, Vec<u8>)> {
    let mut out = Vec::new();
    q.drain_completions(|cqe, data, _| {
        let bytes = match data {
            C2hData::Bytes(b) => b.to_vec(),
            C2hData::Read {
                backend,
                offset,
                len,
            } => {
                let mut v = vec![0; len];
                backend.read(offset, &mut v)?;
                v
            }
        };
        out.push((*cqe, bytes));
        Ok(())
    });
    q.output_sent();
    out
}

/// A queue driven as a host would, answers collected from `drain_completions`.
pub struct Host {
    pub q: Queue,
    pub now: Instant,
    pub subnqn: String,
    pub hostnqn: String,
    /// Host Identifier sent in Connect data.
    pub hostid: [u8; 16],
}

impl Host {
    pub fn new(t: &Arc<Target>, local: SocketAddr, subnqn: &str, hostnqn: &str) -> Host {
        let now = Instant::now();
        Host {
            q: Queue::new(t.clone(), local, now),
            now,
            subnqn: subnqn.into(),
            hostnqn: hostnqn.into(),
            hostid: [3; 16],
        }
    }

    pub fn drain(&mut self) -> Vec<(Cqe, Vec<u8>)> {
        drain(&mut self.q)
    }

    /// Park an Asynchronous Event Request; `Some(dw0)` if it completed at once (an event was
    /// waiting).
    pub fn aer(&mut self) -> Option<u32> {
        let sqe = Sqe::new(admin::ASYNC_EVENT_REQUEST, CommandId(6));
        match self.q.handle_command(&sqe, &[], self.now) {
            Disposition::Parked => None,
            Disposition::Done => Some(self.drain()[0].0.dw0),
            d => panic!("unexpected {d:?}"),
        }
    }

    /// Events delivered to parked AERs now (their completions' Dword 0).
    pub fn events(&mut self) -> Vec<u32> {
        self.q.deliver_events();
        self.drain().into_iter().map(|(c, _)| c.dw0).collect()
    }

    /// One-block I/O command `opc` at LBA 0 of `nsid` (a Write carries 512 bytes in-capsule, a
    /// Read asks for 512; others carry no data); its status.
    pub fn rw(&mut self, opc: u8, nsid: u32) -> nvme_spec::Status {
        let mut sqe = Sqe::new(opc, CommandId(7));
        sqe.set_nsid(nvme_spec::NamespaceId(nsid));
        sqe.set_slba(0);
        sqe.set_nlb(1);
        let data = vec![0xA5u8; 512];
        let data: &[u8] = if opc == nvme_spec::opcode::io::WRITE {
            sqe.set_sgl_icd(512);
            &data
        } else {
            if opc == nvme_spec::opcode::io::READ {
                sqe.set_sgl_transport(512);
            }
            &[]
        };
        self.cmd(sqe, data).0.status
    }

    /// Send one command; `data` goes in-capsule. Returns its completion and data.
    pub fn cmd(&mut self, sqe: Sqe, data: &[u8]) -> (Cqe, Vec<u8>) {
        match self.q.handle_command(&sqe, data, self.now) {
            Disposition::Done => {}
            Disposition::Execute { slot } => self.q.execute_inline(slot),
            d => panic!("unexpected {d:?}"),
        }
        let mut v = self.drain();
        assert_eq!(v.len(), 1);
        v.remove(0)
    }

    /// Identify with CNS `cns_v` for `nsid`: its status and the 4 KiB of data.
    pub fn identify(&mut self, cns_v: u8, nsid: u32) -> (nvme_spec::Status, Vec<u8>) {
        let mut sqe = Sqe::new(admin::IDENTIFY, CommandId(4));
        sqe.set_nsid(nvme_spec::NamespaceId(nsid));
        sqe.set_cdw(10, u32::from(cns_v));
        sqe.set_sgl_transport(4096);
        let (c, d) = self.cmd(sqe, &[]);
        (c.status, d)
    }

    /// Fabrics Connect of queue `qid` (0: admin, with `cntlid` 0xFFFF).
    pub fn connect(&mut self, qid: u16, cntlid: u16) -> Cqe {
        let mut sqe = ConnectCmd {
            recfmt: 0,
            qid: QueueId(qid),
            sqsize: 31,
            cattr: 0,
            kato: 0,
        }
        .to_sqe(CommandId(1));
        sqe.set_sgl_icd(1024);
        let data = ConnectData {
            hostid: self.hostid,
            cntlid: ControllerId(cntlid),
            subnqn: self.subnqn.clone(),
            hostnqn: self.hostnqn.clone(),
        };
        self.cmd(sqe, &data.encode()).0
    }

    /// Property Set CC.EN = 1.
    pub fn enable(&mut self) {
        let mut sqe = Sqe::new(admin::FABRICS, CommandId(2));
        sqe.set_fctype(fctype::PROPERTY_SET);
        PropertyCmd {
            size8: false,
            ofst: prop::CC,
            value: u64::from(cc::enable_value(0)),
        }
        .encode_into(&mut sqe);
        let c = self.cmd(sqe, &[]).0;
        assert!(c.status.is_success(), "{c:?}");
    }
}
