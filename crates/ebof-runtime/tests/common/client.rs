//! A minimal blocking NVMe/TCP host on `nvmf-tcp`'s host role, and the real server started on
//! loopback for it, for the end-to-end tests.

use ebof_backend::{Backend, BackendSpec};
use ebof_runtime::{Server, ServerConfig, ServerHandle};
use nvme_spec::fabrics::{ConnectCmd, ConnectData, PropertyCmd, cc, prop};
use nvme_spec::opcode::{admin, fctype};
use nvme_spec::{CommandId, ControllerId, Cqe, NamespaceId, QueueId, Sqe};
use nvmf_target::{ListenerInfo, Target, TargetLimits};
use nvmf_tcp::pdu::pdu_type;
use nvmf_tcp::{HostConn, HostConnConfig, HostEvent};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const NQN: &str = "nqn.2026-11.io.ebof:loop";
pub const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000aa";

pub struct Running {
    pub handle: Option<ServerHandle>,
    pub addr: SocketAddr,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            h.stop();
        }
    }
}

pub fn start(poll: Duration) -> Running {
    let backend = ebof_backend::open(&BackendSpec::Ram { size: 32 << 20 }).unwrap();
    start_on(poll, backend)
}

pub fn start_on(poll: Duration, backend: Arc<dyn Backend>) -> Running {
    start_with(poll, backend, |_| {})
}

/// [`start_on`] with the server configuration adjusted by `adjust` first.
pub fn start_with(
    poll: Duration,
    backend: Arc<dyn Backend>,
    adjust: impl FnOnce(&mut ServerConfig),
) -> Running {
    let sub = super::subsystem(NQN, backend, None);
    // Port 0: the listener info for discovery is not needed in these tests.
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let target = Arc::new(Target::new(
        vec![sub],
        vec![ListenerInfo {
            addr: any,
            portid: 1,
            tls: Default::default(),
            transport: Default::default(),
        }],
        TargetLimits::default(),
        Instant::now(),
    ));
    let mut cfg = ServerConfig {
        poll,
        ..ServerConfig::new(vec![any], vec![0])
    };
    adjust(&mut cfg);
    let handle = Server::start(target, cfg).unwrap();
    let addr = handle.bound[0];
    Running {
        handle: Some(handle),
        addr,
    }
}

/// A minimal blocking NVMe/TCP host for tests.
pub struct Client {
    pub s: TcpStream,
    /// A toy stream cipher (every byte XORed with this key) for the TLS plumbing tests, whose
    /// fake TLS session uses the same.
    pub xor: Option<u8>,
    pub host: HostConn,
    buf: Vec<u8>,
    len: usize,
    cid: u16,
}

impl Client {
    pub fn raw(addr: SocketAddr) -> TcpStream {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.set_nodelay(true).unwrap();
        s
    }

    pub fn connect(addr: SocketAddr, digests: bool) -> Client {
        Self::connect_on(Self::raw(addr), None, digests)
    }

    /// ICReq on `s` (already past any handshake), every byte XORed with `xor` if set.
    pub fn connect_on(s: TcpStream, xor: Option<u8>, digests: bool) -> Client {
        let mut cfg = HostConnConfig::default();
        cfg.digests.hdgst = digests;
        cfg.digests.ddgst = digests;
        let mut c = Client {
            s,
            xor,
            host: HostConn::new(cfg),
            buf: vec![0; 1 << 20],
            len: 0,
            cid: 0,
        };
        let mut out = Vec::new();
        c.host.encode_icreq(&mut out);
        c.send(out);
        match c.next() {
            (HostEvent::Established { .. }, _) => {}
            other => panic!("{other:?}"),
        }
        c
    }

    /// Next event; returns (event debug copy, data).
    pub fn next(&mut self) -> (HostEvent<'static>, Vec<u8>) {
        loop {
            if let Some((ev, n)) = self.host.decode_one(&self.buf[..self.len]).unwrap() {
                let owned = match ev {
                    HostEvent::C2hData {
                        cccid,
                        datao,
                        data,
                        last,
                        success,
                    } => {
                        let d = data.to_vec();
                        (
                            HostEvent::C2hData {
                                cccid,
                                datao,
                                data: &[],
                                last,
                                success,
                            },
                            d,
                        )
                    }
                    HostEvent::Established {
                        cpda,
                        digests,
                        maxh2cdata,
                    } => (
                        HostEvent::Established {
                            cpda,
                            digests,
                            maxh2cdata,
                        },
                        vec![],
                    ),
                    HostEvent::Response(c) => (HostEvent::Response(c), vec![]),
                    HostEvent::R2t(r) => (HostEvent::R2t(r), vec![]),
                    other => panic!("unexpected {other:?}"),
                };
                self.buf.copy_within(n..self.len, 0);
                self.len -= n;
                return owned;
            }
            let n = self.s.read(&mut self.buf[self.len..]).unwrap();
            assert!(n > 0, "target closed the connection");
            if let Some(k) = self.xor {
                self.buf[self.len..self.len + n]
                    .iter_mut()
                    .for_each(|b| *b ^= k);
            }
            self.len += n;
        }
    }

    pub fn cmd(&mut self, mut sqe: Sqe, h2c: &[u8], inline: bool) -> (Cqe, Vec<u8>) {
        self.cid = self.cid.wrapping_add(1);
        sqe.set_cid(CommandId(self.cid));
        let mut out = Vec::new();
        if inline && !h2c.is_empty() {
            sqe.set_sgl_icd(h2c.len() as u32);
            self.host.encode_capsule(&mut out, &sqe, h2c);
        } else {
            self.host.encode_capsule(&mut out, &sqe, &[]);
        }
        self.send(out);
        let mut data = Vec::new();
        loop {
            match self.next() {
                (HostEvent::R2t(r), _) => self.answer_r2t(&r, h2c),
                (HostEvent::C2hData { .. }, d) => data.extend_from_slice(&d),
                (HostEvent::Response(c), _) => return (c, data),
                other => panic!("{other:?}"),
            }
        }
    }

    /// Send the part of `data` that R2T `r` asks for.
    pub fn answer_r2t(&mut self, r: &nvmf_tcp::pdu::R2t, data: &[u8]) {
        let mut out = Vec::new();
        self.host.encode_h2c_data(
            &mut out,
            r.cccid,
            r.ttag,
            r.r2to,
            &data[r.r2to as usize..(r.r2to + r.r2tl) as usize],
        );
        self.send(out);
    }

    /// Write `out` (XORed when the toy cipher is on).
    pub fn send(&mut self, mut out: Vec<u8>) {
        if let Some(k) = self.xor {
            out.iter_mut().for_each(|b| *b ^= k);
        }
        self.s.write_all(&out).unwrap();
    }

    pub fn fabrics_connect(&mut self, qid: u16, cntlid: u16) -> Cqe {
        let sqe = ConnectCmd {
            recfmt: 0,
            qid: QueueId(qid),
            sqsize: 31,
            cattr: 0,
            kato: 10_000,
        }
        .to_sqe(CommandId(0));
        let d = ConnectData {
            hostid: [1; 16],
            cntlid: ControllerId(cntlid),
            subnqn: NQN.into(),
            hostnqn: HOSTNQN.into(),
        };
        self.cmd(sqe, &d.encode(), true).0
    }

    pub fn enable(&mut self) {
        let mut sqe = Sqe::new(admin::FABRICS, CommandId(0));
        sqe.set_fctype(fctype::PROPERTY_SET);
        PropertyCmd {
            size8: false,
            ofst: prop::CC,
            value: u64::from(cc::enable_value(0)),
        }
        .encode_into(&mut sqe);
        assert!(self.cmd(sqe, &[], false).0.status.is_success());
    }
}

pub fn rw(opc: u8, slba: u64, nlb: u32) -> Sqe {
    let mut sqe = Sqe::new(opc, CommandId(0));
    sqe.set_nsid(NamespaceId(1));
    sqe.set_slba(slba);
    sqe.set_nlb(nlb);
    sqe.set_sgl_transport(nlb * 512);
    sqe
}

/// Bring up admin + one I/O queue; returns the I/O client (admin kept alive by the caller).
pub fn session(addr: SocketAddr, digests: bool) -> (Client, Client) {
    let mut a = Client::connect(addr, digests);
    let c = a.fabrics_connect(0, 0xFFFF);
    assert!(c.status.is_success(), "{c:?}");
    a.enable();
    let mut q = Client::connect(addr, digests);
    let c2 = q.fabrics_connect(1, c.dw0 as u16);
    assert!(c2.status.is_success(), "{c2:?}");
    (a, q)
}

/// Send `bytes` on a fresh connection (after an ICReq if `after_icreq`) and return the
/// C2HTermReq's (FES, FEI, echoed header length), or None if the target just closed.
pub fn provoke(addr: SocketAddr, after_icreq: bool, bytes: &[u8]) -> Option<(u16, u32, usize)> {
    let mut s = Client::raw(addr);
    if after_icreq {
        let mut host = HostConn::new(HostConnConfig::default());
        let mut out = Vec::new();
        host.encode_icreq(&mut out);
        s.write_all(&out).unwrap();
        let mut resp = [0u8; 128];
        s.read_exact(&mut resp).unwrap();
        assert_eq!(resp[0], pdu_type::IC_RESP);
    }
    s.write_all(bytes).unwrap();
    let mut got = Vec::new();
    let mut tmp = [0u8; 512];
    loop {
        match s.read(&mut tmp) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&tmp[..n]),
            Err(e) => panic!("read: {e}"),
        }
    }
    if got.is_empty() {
        return None;
    }
    assert_eq!(got[0], pdu_type::C2H_TERM_REQ, "{got:?}");
    let plen = u32::from_le_bytes(got[4..8].try_into().unwrap()) as usize;
    assert_eq!(plen, got.len());
    let fes = u16::from_le_bytes([got[8], got[9]]);
    let fei = u32::from_le_bytes(got[10..14].try_into().unwrap());
    Some((fes, fei, plen - 24))
}

pub fn icreq() -> Vec<u8> {
    let mut b = vec![0u8; 128];
    b[0] = pdu_type::IC_REQ;
    b[2] = 128;
    b[4] = 128;
    b
}

pub fn capsule(sqe: &Sqe) -> Vec<u8> {
    let mut b = vec![0u8; 72];
    b[0] = pdu_type::CAPSULE_CMD;
    b[2] = 72;
    b[4] = 72;
    b[8..72].copy_from_slice(&sqe.0);
    b
}

pub fn h2c(cccid: u16, ttag: u16, datao: u32, datal: u32) -> Vec<u8> {
    let mut b = vec![0u8; 24 + datal as usize];
    b[0] = pdu_type::H2C_DATA;
    b[1] = 1 << 2;
    b[2] = 24;
    b[3] = 24;
    b[4..8].copy_from_slice(&(24 + datal).to_le_bytes());
    b[8..10].copy_from_slice(&cccid.to_le_bytes());
    b[10..12].copy_from_slice(&ttag.to_le_bytes());
    b[12..16].copy_from_slice(&datao.to_le_bytes());
    b[16..20].copy_from_slice(&datal.to_le_bytes());
    b
}
