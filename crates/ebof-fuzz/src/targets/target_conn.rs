//! A whole target connection: arbitrary host bytes into `ebof-runtime`'s [`ConnCore`] — the
//! same code the reactor runs per socket — over a target with two namespaces.
//!
//! Input: `[mode, chunk, bytes...]`. `mode` bits 0-1 pick where the bytes go:
//! - 0: a fresh connection (the bytes start with their own ICReq and Connect);
//! - 1: an admin queue after ICReq, Connect (SQSIZE 31) and CC.EN = 1;
//! - 2: an I/O queue (QID 1, SQSIZE 127) of that controller after ICReq and Connect;
//! - 3: the same with CATTR.DISSQFC (no SQ flow control; reads may end with C2HData SUCCESS).
//!
//! bits 2-3 set the digests of the prefix's ICReq (header, data); bit 4 makes the connection
//! a discovery-only one (as on a dedicated discovery listener). `chunk` picks how the bytes are
//! cut into reads (whole, 1, 7, 64, 1000, 4096 bytes...), exercising partial PDUs.
//!
//! Namespaces: NSID 1 is RAM with 512-byte blocks (inline I/O, zero-copy reads); NSID 2 is RAM
//! with 4096-byte blocks that reports `may_block`, so its I/O takes the worker-pool path
//! (`take_io_buffer` → `execute_io` → `complete_io`), run here synchronously after each read.
//!
//! Checked, beyond "never panics":
//! - everything the target sends decodes with the host-side decoder as whole PDUs (the output
//!   of one batch never ends inside a PDU); only the last batch may end with a C2HTermReq;
//! - every CapsuleResp, C2HData and R2T names a CID that the host sent in a command capsule,
//!   and no CID is completed more often than it was sent;
//! - the C2HData of one command start at offset 0 and are contiguous.

use crate::Features;
use ebof_backend::{Backend, BackendError, BackendKind, BackendSpec};
use ebof_runtime::conn::{ConnCore, Step};
use nvme_spec::fabrics::{ConnectCmd, ConnectData, PropertyCmd, cc, prop};
use nvme_spec::opcode::{admin, fctype};
use nvme_spec::{CommandId, ControllerId, QueueId, Sqe};
use nvmf_target::{ListenerInfo, Namespace, Subsystem, Target, TargetLimits, execute_io};
use nvmf_tcp::pdu::{self, Digests, IcResp, Pdu, Role};
use nvmf_tcp::{DecodeLimits, HostConn, HostConnConfig, HostEvent, TargetConnConfig, decode_frame};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The subsystem the fuzzed target serves.
pub const NQN: &str = "nqn.2026-11.io.ebof:fuzz";
/// The host NQN the connection prefixes use in Connect.
pub const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000f2";
/// The well-known discovery subsystem NQN.
pub const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";
const NS_SIZE: u64 = 1 << 20;
/// Commands (PDUs) looked at per input at most; bounds the work of one execution.
const MAX_PDUS: usize = 512;

/// Feature families.
const F_OUT: u8 = 10;
const F_STATUS: u8 = 11;
const F_CLOSE: u8 = 12;

/// RAM that claims to block, so that its I/O goes through the offload path.
#[derive(Debug)]
struct BlockingRam(Arc<dyn Backend>);

impl Backend for BlockingRam {
    fn kind(&self) -> BackendKind {
        BackendKind::File
    }
    fn size(&self) -> u64 {
        self.0.size()
    }
    fn resize(&self, new_size: u64) -> Result<(), BackendError> {
        self.0.resize(new_size)
    }
    fn may_block(&self) -> bool {
        true
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), BackendError> {
        self.0.read(offset, buf)
    }
    fn write(&self, offset: u64, buf: &[u8]) -> Result<(), BackendError> {
        self.0.write(offset, buf)
    }
    fn flush(&self) -> Result<(), BackendError> {
        self.0.flush()
    }
    fn write_zeroes(&self, offset: u64, len: u64) -> Result<(), BackendError> {
        self.0.write_zeroes(offset, len)
    }
    fn deallocate(&self, offset: u64, len: u64) -> Result<(), BackendError> {
        self.0.deallocate(offset, len)
    }
    fn allocated_bytes(&self) -> u64 {
        self.0.allocated_bytes()
    }
}

fn local() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 4420))
}

/// A fresh target: one subsystem, NSID 1 (RAM, 512) and NSID 2 (offloaded RAM, 4096).
pub fn new_target(now: Instant) -> Arc<Target> {
    let ram = |size| ebof_backend::open(&BackendSpec::Ram { size }).expect("RAM backend");
    let ns1 = Namespace::new(1, ram(NS_SIZE), 512, [0x11; 16]);
    let ns2 = Namespace::new(2, Arc::new(BlockingRam(ram(NS_SIZE))), 4096, [0x22; 16]);
    let sub = Subsystem {
        nqn: NQN.into(),
        serial: "EBOFFUZZ".into(),
        model: "ebof-fuzz".into(),
        allow_any_host: true,
        hosts: Vec::new(),
        namespaces: vec![Arc::new(ns1), Arc::new(ns2)],
        ns_hosts: Default::default(),
    };
    Arc::new(Target::new(
        vec![sub],
        vec![ListenerInfo {
            addr: local(),
            portid: 1,
            tls: Default::default(),
            transport: Default::default(),
        }],
        TargetLimits::default(),
        now,
    ))
}

/// The transport limits the fuzzed connections use (the server's defaults).
pub fn conn_config() -> TargetConnConfig {
    TargetConnConfig::default()
}

/// Which queue the fuzz bytes go to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// No prefix: the bytes are the whole connection, from the ICReq on.
    Raw,
    /// After ICReq and an admin Connect: the bytes are commands to the admin queue.
    Admin,
    /// After an admin queue is enabled and an I/O Connect: the bytes go to the I/O queue.
    Io {
        /// Connect asked for SQ flow control disabled (C2HData SUCCESS may replace responses).
        dissqfc: bool,
    },
}

impl Mode {
    /// The mode a selector byte picks (its two low bits).
    pub fn from_byte(b: u8) -> Mode {
        match b & 3 {
            0 => Mode::Raw,
            1 => Mode::Admin,
            2 => Mode::Io { dissqfc: false },
            _ => Mode::Io { dissqfc: true },
        }
    }
}

/// Chunk sizes selected by the input's second byte (`usize::MAX`: everything at once).
const CHUNKS: [usize; 8] = [usize::MAX, 1, 7, 64, 1000, 4096, 100, 8192];

/// One simulated connection with its checker.
pub struct Conn {
    /// The target's connection core under test.
    pub core: ConnCore,
    /// The host side's decoder of the target's output.
    host: HostConn,
    /// Everything fed to the target on this connection, for counting the commands sent.
    input: Vec<u8>,
    /// Commands sent, by CID: how many, and the opcode (and Fabrics type) of the last one;
    /// counted from `input[..sent_pos]` (see [`Conn::update_sent`]).
    sent: HashMap<u16, (u32, u16)>,
    sent_pos: usize,
    sent_lim: Option<DecodeLimits>,
    limits: TargetConnConfig,
    completed: HashMap<u16, u32>,
    /// Next expected C2HData offset per CID.
    c2h_next: HashMap<u16, u32>,
    now: Instant,
    /// No prefix: the host checker is set up from the input's own ICReq.
    raw: bool,
    closed: bool,
    /// A C2HTermReq was received: nothing may follow.
    terminated: bool,
    pdus: usize,
}

impl Conn {
    /// A connection to `target` accepted at `now`, whose host side expects `digests`.
    pub fn new(target: Arc<Target>, now: Instant, digests: Digests) -> Conn {
        let cfg = conn_config();
        let core = ConnCore::new(target, cfg, local(), now);
        let limits = TargetConnConfig {
            max_ttags: core.queue.max_ttags(),
            ..cfg
        };
        let mut host = HostConn::new(HostConnConfig {
            digests,
            max_c2h_data: cfg.c2h_max,
            ..HostConnConfig::default()
        });
        host.encode_icreq(&mut Vec::new());
        Conn {
            core,
            host,
            input: Vec::new(),
            sent: HashMap::new(),
            sent_pos: 0,
            sent_lim: Some(DecodeLimits {
                role: Role::Target,
                digests: None,
                pda: limits.cpda,
                max_icd: limits.max_icd,
                max_data: limits.maxh2cdata,
            }),
            limits,
            completed: HashMap::new(),
            c2h_next: HashMap::new(),
            now,
            raw: false,
            closed: false,
            terminated: false,
            pdus: 0,
        }
    }

    /// The target closed the connection (protocol error, termination).
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// Feed `bytes` in `chunk`-byte reads, as the reactor would; returns the target's output
    /// (checked).
    pub fn feed(&mut self, bytes: &[u8], chunk: usize, feat: &mut Features) -> Vec<u8> {
        let mut all_out = Vec::new();
        for piece in bytes.chunks(chunk.max(1)) {
            if self.closed || self.pdus > MAX_PDUS {
                break;
            }
            self.input.extend_from_slice(piece);
            let mut rest = piece;
            while !rest.is_empty() && !self.closed {
                // As the reactor reads: into the free space, growing the buffer when full.
                if self.core.recv_space().is_empty() {
                    assert!(
                        self.core.grow_recv(),
                        "receive buffer full with no complete PDU in it"
                    );
                }
                let space = self.core.recv_space();
                let n = space.len().min(rest.len());
                space[..n].copy_from_slice(&rest[..n]);
                self.core.received(n);
                rest = &rest[n..];
                self.now += Duration::from_millis(1);
                self.step(feat, &mut all_out);
                // Now and then a timer tick with nothing new received: the connection gives
                // its idle buffers back (the idle duty, Driver::release_idle), mid-stream
                // included.
                if self.input.len().is_multiple_of(7) {
                    ebof_runtime::duties::Driver::release_idle(&mut self.core, &mut ());
                }
            }
        }
        all_out
    }

    /// One reactor round: process, run offloaded I/O, flush, check the output.
    fn step(&mut self, feat: &mut Features, all_out: &mut Vec<u8>) {
        let mut offloaded = Vec::new();
        let step = self
            .core
            .process(self.now, &mut |q: &mut nvmf_target::Queue, slot: u16| {
                if let Some(req) = q.io_request(slot).cloned() {
                    let buf = q.take_io_buffer(slot);
                    offloaded.push((slot, req, buf));
                }
            });
        self.core.flush_completions();
        // The worker pool, synchronously: completions arrive after the batch, as they would.
        for (slot, req, mut buf) in offloaded {
            let status = execute_io(&req, &mut buf);
            self.core.queue.complete_io(slot, status, buf);
        }
        self.core.flush_completions();
        let out = self.core.take_output();
        if let Step::Close(why) = step {
            feat.add_str(
                F_CLOSE,
                &format!("{why:?}").chars().take(24).collect::<String>(),
            );
            self.closed = true;
        }
        if self.core.queue.should_close() {
            self.closed = true;
        }
        self.check_output(&out, feat);
        all_out.extend_from_slice(&out);
    }

    /// Count the commands sent on this connection, by CID, as the target's decoder would have
    /// seen them. The stateless decoder makes a subset of the target's checks, so this counts
    /// at least every command the target accepted; after its first error it stops for good.
    fn update_sent(&mut self) {
        while let Some(lim) = &mut self.sent_lim {
            match decode_frame(&self.input[self.sent_pos..], lim) {
                Ok(Some(f)) => {
                    match f.pdu {
                        Pdu::IcReq(ic) => {
                            lim.digests = Some(ic.digests);
                            if self.raw && !self.host.is_established() {
                                // Decode the output as the host that sent this ICReq (its
                                // HPDA decides the C2HData padding).
                                self.host = HostConn::new(HostConnConfig {
                                    digests: ic.digests,
                                    hpda: ic.hpda,
                                    maxr2t: ic.maxr2t,
                                    max_c2h_data: self.limits.c2h_max,
                                });
                                self.host.encode_icreq(&mut Vec::new());
                            }
                        }
                        Pdu::CapsuleCmd { sqe, .. } => {
                            let e = self.sent.entry(sqe.cid().0).or_insert((0, 0));
                            e.0 += 1;
                            let fct = if sqe.opcode() == admin::FABRICS {
                                sqe.fctype()
                            } else {
                                0
                            };
                            e.1 = u16::from(sqe.opcode()) << 8 | u16::from(fct);
                        }
                        _ => {}
                    }
                    self.sent_pos += f.len;
                }
                Ok(None) => return,
                Err(_) => self.sent_lim = None,
            }
        }
    }

    fn check_output(&mut self, out: &[u8], feat: &mut Features) {
        let mut pos = 0;
        if !out.is_empty() {
            self.update_sent();
        }
        while pos < out.len() {
            assert!(!self.terminated, "output after a C2HTermReq");
            let (ev, n) = match self.host.decode_one(&out[pos..]) {
                Ok(Some(x)) => x,
                Ok(None) => panic!("target output ends inside a PDU at byte {pos}"),
                Err(e) => panic!("target output is not a well-formed PDU at byte {pos}: {e}"),
            };
            assert!(n > 0);
            pos += n;
            self.pdus += 1;
            let sent = &self.sent;
            let mut check_cid = |cid: u16, done: bool, what: &str| {
                let s = sent.get(&cid).map_or(0, |e| e.0);
                assert!(s > 0, "{what} for CID {cid}, which the host never sent");
                if done {
                    let c = self.completed.entry(cid).or_insert(0);
                    *c += 1;
                    assert!(*c <= s, "CID {cid} completed {c} times, sent {s} times");
                }
            };
            match ev {
                HostEvent::Established { .. } => feat.add(F_OUT, 0),
                HostEvent::Response(cqe) => {
                    feat.add(F_OUT, 1);
                    // Which command (opcode, Fabrics type) ended with which status.
                    let opc = sent.get(&cqe.cid).map_or(0, |e| e.1);
                    feat.add(
                        F_STATUS,
                        u64::from(cqe.status.to_field()) << 16 | u64::from(opc),
                    );
                    check_cid(cqe.cid, true, "CapsuleResp");
                    self.c2h_next.remove(&cqe.cid);
                }
                HostEvent::C2hData {
                    cccid,
                    datao,
                    data,
                    last,
                    success,
                } => {
                    feat.add(F_OUT, 2 | (u64::from(success) << 4));
                    check_cid(cccid, success, "C2HData");
                    let next = self.c2h_next.get(&cccid).copied().unwrap_or(0);
                    assert_eq!(datao, next, "C2HData offset for CID {cccid}");
                    let end = datao + data.len() as u32;
                    if last || success {
                        self.c2h_next.remove(&cccid);
                    } else {
                        self.c2h_next.insert(cccid, end);
                    }
                }
                HostEvent::C2hDataDigestError { .. } => {
                    panic!("the target sent C2HData with a wrong data digest")
                }
                HostEvent::R2t(r) => {
                    feat.add(F_OUT, 3);
                    check_cid(r.cccid, false, "R2T");
                }
                HostEvent::TermReq { fes, .. } => {
                    feat.add(F_OUT, 4 | (u64::from(fes) << 8));
                    self.terminated = true;
                }
            }
        }
    }
}

/// A host-side encoder whose negotiated state matches a connection that sent ICReq with
/// `digests` (for building prefixes and seeds).
pub fn host_encoder(digests: Digests) -> HostConn {
    let mut h = HostConn::new(HostConnConfig {
        digests,
        ..HostConnConfig::default()
    });
    let mut icreq = Vec::new();
    h.encode_icreq(&mut icreq);
    let mut resp = Vec::new();
    pdu::encode_ic_resp(
        &mut resp,
        &IcResp {
            pfv: 0,
            cpda: conn_config().cpda,
            digests,
            maxh2cdata: conn_config().maxh2cdata,
        },
    );
    let ok = matches!(
        h.decode_one(&resp),
        Ok(Some((HostEvent::Established { .. }, _)))
    );
    assert!(ok, "ICResp for the host encoder");
    h
}

/// ICReq asking for `digests`.
pub fn icreq(digests: Digests) -> Vec<u8> {
    let mut h = HostConn::new(HostConnConfig {
        digests,
        ..HostConnConfig::default()
    });
    let mut out = Vec::new();
    h.encode_icreq(&mut out);
    out
}

/// Fabrics Connect capsule (CID `cid`) with its 1024 bytes of data in the capsule.
pub fn connect(
    h: &HostConn,
    cid: u16,
    qid: u16,
    sqsize: u16,
    cattr: u8,
    cntlid: u16,
    subnqn: &str,
) -> Vec<u8> {
    let mut sqe = ConnectCmd {
        recfmt: 0,
        qid: QueueId(qid),
        sqsize,
        cattr,
        kato: 30_000,
    }
    .to_sqe(CommandId(cid));
    let data = ConnectData {
        hostid: [0xf2; 16],
        cntlid: ControllerId(cntlid),
        subnqn: subnqn.into(),
        hostnqn: HOSTNQN.into(),
    }
    .encode();
    sqe.set_sgl_icd(data.len() as u32);
    let mut out = Vec::new();
    h.encode_capsule(&mut out, &sqe, &data);
    out
}

/// Property Set CC = EN (CID `cid`).
pub fn enable(h: &HostConn, cid: u16) -> Vec<u8> {
    let mut sqe = Sqe::new(admin::FABRICS, CommandId(cid));
    sqe.set_fctype(fctype::PROPERTY_SET);
    PropertyCmd {
        size8: false,
        ofst: prop::CC,
        value: u64::from(cc::enable_value(0)),
    }
    .encode_into(&mut sqe);
    let mut out = Vec::new();
    h.encode_capsule(&mut out, &sqe, &[]);
    out
}

/// A target, the admin connection (kept so the controller lives) and the connection the fuzz
/// bytes go to, after the prefix of `mode`.
pub struct Session {
    /// The admin queue's connection in I/O mode (kept so the controller lives).
    pub admin: Option<Conn>,
    /// The connection the fuzz bytes go to.
    pub conn: Conn,
    /// Digests of the prefix's ICReq (what an encoder for seeds must use).
    pub digests: Digests,
}

/// The CIDs the prefixes use (the fuzz bytes may reuse them: that is a legal host choice once
/// they completed).
const PREFIX_CID: u16 = 0xFFF0;

impl Session {
    /// A fresh target and the connections of the mode `mode_byte` picks, prefix already run.
    pub fn new(mode_byte: u8, feat: &mut Features) -> Session {
        let now = Instant::now();
        let target = new_target(now);
        let mode = Mode::from_byte(mode_byte);
        let digests = Digests {
            hdgst: mode_byte & 4 != 0,
            ddgst: mode_byte & 8 != 0,
        };
        let discovery = mode_byte & 0x10 != 0;
        let whole = usize::MAX;
        let new_conn = |target: &Arc<Target>| {
            let mut c = Conn::new(target.clone(), now, digests);
            c.core.queue.set_discovery_only(discovery);
            c
        };
        match mode {
            Mode::Raw => {
                let mut c = new_conn(&target);
                // The fuzz bytes bring their own ICReq; until it is seen, decode the output
                // (a C2HTermReq at most) as a host that asked for nothing.
                c.raw = true;
                Session {
                    admin: None,
                    conn: c,
                    digests,
                }
            }
            Mode::Admin | Mode::Io { .. } => {
                let subnqn = if discovery { DISCOVERY_NQN } else { NQN };
                let mut a = new_conn(&target);
                let h = host_encoder(digests);
                let mut pre = icreq(digests);
                pre.extend(connect(&h, PREFIX_CID, 0, 31, 0, 0xFFFF, subnqn));
                let out = a.feed(&pre, whole, feat);
                let cntlid = connect_cntlid(&out, digests);
                if !discovery {
                    a.feed(&enable(&h, PREFIX_CID + 1), whole, feat);
                }
                assert!(!a.is_closed(), "admin prefix closed the connection");
                match mode {
                    Mode::Admin => Session {
                        admin: None,
                        conn: a,
                        digests,
                    },
                    Mode::Io { dissqfc } => {
                        let mut c = new_conn(&target);
                        let mut pre = icreq(digests);
                        let cattr = if dissqfc { 1 << 2 } else { 0 };
                        pre.extend(connect(&h, PREFIX_CID, 1, 127, cattr, cntlid, subnqn));
                        c.feed(&pre, whole, feat);
                        Session {
                            admin: Some(a),
                            conn: c,
                            digests,
                        }
                    }
                    Mode::Raw => unreachable!(),
                }
            }
        }
    }
}

/// The CNTLID in the Connect response at the end of `out` (after the ICResp).
fn connect_cntlid(out: &[u8], digests: Digests) -> u16 {
    let mut h = HostConn::new(HostConnConfig {
        digests,
        ..HostConnConfig::default()
    });
    h.encode_icreq(&mut Vec::new());
    let mut pos = 0;
    while let Ok(Some((ev, n))) = h.decode_one(&out[pos..]) {
        pos += n;
        if let HostEvent::Response(cqe) = ev {
            assert!(cqe.status.is_success(), "prefix Connect failed: {cqe:?}");
            return (cqe.dw0 & 0xFFFF) as u16;
        }
    }
    panic!("no Connect response in the prefix output");
}

/// One input: a whole target connection in the mode its first byte picks, fed the rest in
/// chunks, with the host-side checks of everything the target sends back.
pub fn run(data: &[u8], feat: &mut Features) {
    let [mode, chunk, bytes @ ..] = data else {
        return;
    };
    let mut s = Session::new(*mode, feat);
    let chunk = CHUNKS[usize::from(*chunk) % CHUNKS.len()];
    s.conn.feed(bytes, chunk, feat);
    // The reactor's timer tick, a little later: keep-alive expiry on the admin queue.
    let later = s.conn.now + Duration::from_secs(1);
    let _ = s.conn.core.queue.poll_timers(later);
    if let Some(a) = &mut s.admin {
        let _ = a.core.queue.poll_timers(later);
    }
}
