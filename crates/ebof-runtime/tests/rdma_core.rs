//! The NVMe/RDMA target core without verbs: a simulated host whose memory is plain vectors
//! (one per rkey) executes the work requests the core asks for, byte for byte — RDMA READ from
//! host memory, RDMA WRITE into it, SEND of the response — and checks their order and content.

use ebof_backend::{Backend, BackendSpec};
use ebof_runtime::duties::{self, Close};
use ebof_runtime::rdma_core::{Buf, Local, Memory, Op, RdmaError, RdmaQueueConfig, RdmaQueueCore};
use nvme_spec::fabrics::{ConnectCmd, ConnectData, PropertyCmd, cc, prop};
use nvme_spec::opcode::{admin, fctype};
use nvme_spec::{CommandId, ControllerId, Cqe, NamespaceId, QueueId, Sqe, Status};
use nvmf_rdma::wire;
use nvmf_target::{ListenerInfo, Namespace, Subsystem, Target, TargetLimits};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Instant;

const NQN: &str = "nqn.2026-11.io.ebof:rdma-test";
const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000aa";
const STAGING_LKEY: u32 = 0x51;
const NS_LKEY: u32 = 0x77;

fn local() -> SocketAddr {
    "10.0.0.1:4420".parse().unwrap()
}

fn target(backend: Arc<dyn Backend>) -> Arc<Target> {
    let sub = Subsystem {
        nqn: NQN.into(),
        serial: "EBOFRDMA".into(),
        model: "ebof-test".into(),
        allow_any_host: true,
        hosts: Vec::new(),
        namespaces: vec![Arc::new(Namespace::new(1, backend, 512, [0x22; 16]))],
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
        Instant::now(),
    ))
}

/// Staging memory from the heap, counted; optionally the namespace's memory "registered".
struct FakeMem {
    free: Vec<Box<[u8]>>,
    lent: HashMap<usize, Box<[u8]>>,
    /// Buffers that may still be made (None: unlimited).
    budget: Option<usize>,
    ns: Option<(usize, usize)>,
}

impl FakeMem {
    fn new(ns: Option<&Arc<dyn Backend>>) -> FakeMem {
        let ns = ns.map(|b| {
            let p = b.memory(0, b.size() as usize).expect("RAM backend memory");
            (p.as_ptr() as usize, b.size() as usize)
        });
        FakeMem {
            free: Vec::new(),
            lent: HashMap::new(),
            budget: None,
            ns,
        }
    }
}

impl Memory for FakeMem {
    fn staging(&mut self, len: usize) -> Option<Buf> {
        let mut b = match self.free.iter().position(|b| b.len() >= len) {
            Some(i) => self.free.swap_remove(i),
            None => {
                if let Some(n) = &mut self.budget {
                    if *n == 0 {
                        return None;
                    }
                    *n -= 1;
                }
                vec![0u8; len.max(4096)].into_boxed_slice()
            }
        };
        let buf = Buf {
            ptr: NonNull::new(b.as_mut_ptr()).unwrap(),
            len: b.len(),
            lkey: STAGING_LKEY,
        };
        self.lent.insert(b.as_ptr() as usize, b);
        Some(buf)
    }
    fn release(&mut self, b: Buf) {
        let owned = self
            .lent
            .remove(&(b.ptr.as_ptr() as usize))
            .expect("a lent buffer");
        self.free.push(owned);
    }
    fn lkey(&self, p: *const u8, len: usize) -> Option<u32> {
        let (a, n) = self.ns?;
        let p = p as usize;
        (p >= a && p + len <= a + n).then_some(NS_LKEY)
    }
}

/// The simulated host: memory regions by rkey, and what the core did.
struct Host {
    core: RdmaQueueCore,
    mem: FakeMem,
    regions: HashMap<u32, Vec<u8>>,
    next_key: u32,
    /// Every op executed, in order.
    log: Vec<Op>,
    /// Responses received, with the key they invalidated.
    cqes: Vec<(Cqe, Option<u32>)>,
    /// Hold READs instead of completing them (to check the depth limit).
    hold_reads: bool,
    held: Vec<u32>,
    fail_reads: bool,
}

fn copy_local(l: &Local) -> Vec<u8> {
    // SAFETY: the core hands out segments of memory it keeps alive until the SEND completes.
    unsafe { std::slice::from_raw_parts(l.ptr, l.len as usize).to_vec() }
}

impl Host {
    fn new(backend: &Arc<dyn Backend>, register_ns: bool, cfg: RdmaQueueConfig) -> Host {
        Host::on(target(backend.clone()), backend, register_ns, cfg)
    }

    fn on(
        t: Arc<Target>,
        backend: &Arc<dyn Backend>,
        register_ns: bool,
        cfg: RdmaQueueConfig,
    ) -> Host {
        let core = RdmaQueueCore::new(t, local(), Instant::now(), cfg);
        Host {
            core,
            mem: FakeMem::new(register_ns.then_some(backend)),
            regions: HashMap::new(),
            next_key: 0x1000,
            log: Vec::new(),
            cqes: Vec::new(),
            hold_reads: false,
            held: Vec::new(),
            fail_reads: false,
        }
    }

    /// Host memory of `data`, registered: returns its key.
    fn region(&mut self, data: Vec<u8>) -> u32 {
        self.next_key += 1;
        self.regions.insert(self.next_key, data);
        self.next_key
    }

    fn recv(&mut self, capsule: &[u8]) -> Result<(), RdmaError> {
        let mut off = |_: &mut nvmf_target::Queue, _: u16| panic!("RAM never offloads");
        self.core
            .on_recv(capsule, Instant::now(), &mut self.mem, &mut off)?;
        self.run_ops();
        Ok(())
    }

    fn run_ops(&mut self) {
        loop {
            let ops: Vec<Op> = self.core.take_ops().collect();
            if ops.is_empty() {
                return;
            }
            for op in ops {
                self.log.push(op);
                match op {
                    Op::Read {
                        tag,
                        addr,
                        rkey,
                        local,
                    } => {
                        let src = &self.regions[&rkey];
                        let a = addr as usize;
                        // SAFETY: `local` is memory the core lent for this READ.
                        unsafe {
                            std::ptr::copy_nonoverlapping(
                                src[a..a + local.len as usize].as_ptr(),
                                local.ptr as *mut u8,
                                local.len as usize,
                            )
                        };
                        if self.hold_reads {
                            self.held.push(tag);
                        } else {
                            let ok = !self.fail_reads;
                            let mut off = |_: &mut nvmf_target::Queue, _: u16| unreachable!();
                            self.core.on_read_done(
                                tag,
                                ok,
                                Instant::now(),
                                &mut self.mem,
                                &mut off,
                            );
                        }
                    }
                    Op::Write { addr, rkey, local } => {
                        let data = copy_local(&local);
                        let dst = self.regions.get_mut(&rkey).expect("WRITE to a known key");
                        let a = addr as usize;
                        dst[a..a + data.len()].copy_from_slice(&data);
                    }
                    Op::Send {
                        tag,
                        cqe,
                        invalidate,
                    } => {
                        self.cqes.push((Cqe::decode(&cqe), invalidate));
                        self.core.on_send_done(tag, &mut self.mem);
                    }
                }
            }
        }
    }

    /// The batch duties a poller runs every round while the queue has deferred commands.
    fn duties(&mut self, now: Instant) -> bool {
        let mut off = |_: &mut nvmf_target::Queue, _: u16| panic!("RAM never offloads");
        let ran = self.core.run_duties(now, &mut self.mem, &mut off);
        self.run_ops();
        ran
    }

    fn hot(&mut self) -> bool {
        self.core.queue.has_deferred()
    }

    /// Answers (CID, status) received since `from`.
    fn answers(&self, from: usize) -> Vec<(u16, Status)> {
        self.cqes[from..]
            .iter()
            .map(|(c, _)| (c.cid, c.status))
            .collect()
    }

    fn release_held(&mut self) {
        for tag in std::mem::take(&mut self.held) {
            let mut off = |_: &mut nvmf_target::Queue, _: u16| unreachable!();
            self.core
                .on_read_done(tag, true, Instant::now(), &mut self.mem, &mut off);
        }
        self.run_ops();
    }

    fn last_cqe(&self) -> Cqe {
        self.cqes.last().expect("a response").0
    }

    /// Connect (admin or I/O) with the Connect data by remote reference, as the Linux host
    /// sends it.
    fn connect(&mut self, qid: u16, sqsize: u16, cntlid: u16) -> Cqe {
        self.connect_kato(qid, sqsize, cntlid, 5000)
    }

    /// [`Host::connect`] with a keep-alive timeout of `kato` ms (0: none).
    fn connect_kato(&mut self, qid: u16, sqsize: u16, cntlid: u16, kato: u32) -> Cqe {
        let mut sqe = ConnectCmd {
            recfmt: 0,
            qid: QueueId(qid),
            sqsize,
            cattr: 0,
            kato,
        }
        .to_sqe(CommandId(0xC0));
        let data = ConnectData {
            hostid: [7; 16],
            cntlid: ControllerId(cntlid),
            subnqn: NQN.into(),
            hostnqn: HOSTNQN.into(),
        }
        .encode();
        let key = self.region(data.to_vec());
        wire::set_keyed_sgl(&mut sqe, 0, data.len() as u32, key, false);
        self.recv(sqe.as_bytes()).unwrap();
        self.last_cqe()
    }

    fn property_set_enable(&mut self) {
        let mut sqe = Sqe::new(admin::FABRICS, CommandId(1));
        sqe.set_fctype(fctype::PROPERTY_SET);
        PropertyCmd {
            size8: false,
            ofst: prop::CC,
            value: u64::from(cc::enable_value(0)),
        }
        .encode_into(&mut sqe);
        wire::set_keyed_sgl(&mut sqe, 0, 0, 0, false);
        self.recv(sqe.as_bytes()).unwrap();
        assert!(self.last_cqe().status.is_success(), "{:?}", self.last_cqe());
    }
}

fn ram() -> Arc<dyn Backend> {
    ebof_backend::open(&BackendSpec::Ram { size: 8 << 20 }).unwrap()
}

fn rw(op: u8, cid: u16, slba: u64, nlb: u32) -> Sqe {
    let mut s = Sqe::new(op, CommandId(cid));
    s.set_nsid(NamespaceId(1));
    s.set_slba(slba);
    s.set_nlb(nlb);
    s
}

/// An I/O queue (qid 1) of a fresh controller.
fn io_host(register_ns: bool, cfg: RdmaQueueConfig) -> (Host, Arc<dyn Backend>) {
    let (mut qs, backend) = io_queues(register_ns, cfg, 1);
    (qs.remove(0), backend)
}

/// `n` I/O queues (qid 1..=n) of one fresh controller, on one namespace.
fn io_queues(register_ns: bool, cfg: RdmaQueueConfig, n: u16) -> (Vec<Host>, Arc<dyn Backend>) {
    let backend = ram();
    let t = target(backend.clone());
    let mut admin = Host::on(t.clone(), &backend, register_ns, cfg);
    let c = admin.connect(0, 31, 0xFFFF);
    assert!(c.status.is_success(), "admin connect: {c:?}");
    let cntlid = c.dw0 as u16;
    admin.property_set_enable();
    // The I/O queues share the admin queue's target.
    let qs = (1..=n)
        .map(|qid| {
            let mut io = Host::on(t.clone(), &backend, register_ns, cfg);
            let c = io.connect(qid, 127, cntlid);
            assert!(c.status.is_success(), "I/O connect: {c:?}");
            io
        })
        .collect();
    std::mem::forget(admin); // keep the controller alive for the test's life
    (qs, backend)
}

#[test]
fn admin_connect_data_is_fetched_by_rdma_read() {
    let backend = ram();
    let mut h = Host::new(&backend, true, RdmaQueueConfig::default());
    let c = h.connect(0, 31, 0xFFFF);
    assert!(c.status.is_success(), "{c:?}");
    // One READ of the 1024-byte Connect data into staging memory, then the response.
    assert!(
        matches!(h.log[0], Op::Read { local, .. } if local.len == 1024 && local.lkey == STAGING_LKEY)
    );
    assert!(matches!(h.log[1], Op::Send { .. }));
    assert!(h.mem.lent.is_empty(), "staging buffer given back");
}

#[test]
fn identify_reports_keyed_sgls_and_writes_before_sending() {
    let backend = ram();
    let mut h = Host::new(&backend, true, RdmaQueueConfig::default());
    assert!(h.connect(0, 31, 0xFFFF).status.is_success());
    h.property_set_enable();
    let key = h.region(vec![0; 4096]);
    let mut sqe = Sqe::new(0x06, CommandId(9));
    sqe.set_cdw(10, 1); // CNS 1: controller
    wire::set_keyed_sgl(&mut sqe, 0, 4096, key, true);
    let before = h.log.len();
    h.recv(sqe.as_bytes()).unwrap();
    let ops = &h.log[before..];
    assert!(matches!(ops[0], Op::Write { rkey, .. } if rkey == key));
    assert!(matches!(ops[1], Op::Send { invalidate: Some(k), .. } if k == key));
    let (cqe, _) = h.cqes.last().unwrap();
    assert!(cqe.status.is_success());
    let id = &h.regions[&key];
    let sgls = u32::from_le_bytes(id[536..540].try_into().unwrap());
    assert_eq!(sgls & 0b11, 1, "SGLs supported");
    assert_ne!(sgls & (1 << 2), 0, "keyed SGL data blocks supported");
    assert_ne!(sgls & (1 << 20), 0, "offset (in-capsule) supported");
}

#[test]
fn ram_writes_and_reads_are_zero_copy() {
    let (mut h, backend) = io_host(true, RdmaQueueConfig::default());
    let data: Vec<u8> = (0..8192u32).map(|i| (i * 7 + 3) as u8).collect();
    let wkey = h.region(data.clone());
    let mut w = rw(0x01, 1, 16, 16);
    wire::set_keyed_sgl(&mut w, 0, 8192, wkey, true);
    let before = h.log.len();
    h.recv(w.as_bytes()).unwrap();
    let ops = h.log[before..].to_vec();
    assert!(
        matches!(ops[0], Op::Read { local, .. } if local.lkey == NS_LKEY && local.len == 8192),
        "READ straight into the namespace: {ops:?}"
    );
    assert!(matches!(ops[1], Op::Send { invalidate: Some(k), .. } if k == wkey));
    assert!(h.last_cqe().status.is_success());
    let mut back = vec![0u8; 8192];
    backend.read(16 * 512, &mut back).unwrap();
    assert_eq!(back, data);

    let rkey = h.region(vec![0; 8192]);
    let mut r = rw(0x02, 2, 16, 16);
    wire::set_keyed_sgl(&mut r, 0, 8192, rkey, false);
    let before = h.log.len();
    h.recv(r.as_bytes()).unwrap();
    let ops = h.log[before..].to_vec();
    assert!(
        matches!(ops[0], Op::Write { local, rkey: k, .. } if local.lkey == NS_LKEY && k == rkey)
    );
    assert!(matches!(
        ops[1],
        Op::Send {
            invalidate: None,
            ..
        }
    ));
    assert_eq!(h.regions[&rkey], data);
    assert_eq!(h.core.in_flight(), 0);
}

#[test]
fn unregistered_memory_goes_through_staging_and_every_buffer_comes_back() {
    let (mut h, backend) = io_host(false, RdmaQueueConfig::default());
    for i in 0..8u16 {
        let data = vec![i as u8 + 1; 4096];
        let key = h.region(data.clone());
        let mut w = rw(0x01, 10 + i, u64::from(i) * 8, 8);
        wire::set_keyed_sgl(&mut w, 0, 4096, key, false);
        h.recv(w.as_bytes()).unwrap();
        assert!(h.last_cqe().status.is_success());
        let rkey = h.region(vec![0; 4096]);
        let mut r = rw(0x02, 100 + i, u64::from(i) * 8, 8);
        wire::set_keyed_sgl(&mut r, 0, 4096, rkey, false);
        h.recv(r.as_bytes()).unwrap();
        assert_eq!(h.regions[&rkey], data);
    }
    assert!(h.log.iter().all(|op| match op {
        Op::Read { local, .. } | Op::Write { local, .. } => local.lkey == STAGING_LKEY,
        Op::Send { .. } => true,
    }));
    assert!(h.mem.lent.is_empty(), "every staging buffer returned");
    let mut b = vec![0u8; 512];
    backend.read(7 * 8 * 512, &mut b).unwrap();
    assert!(b.iter().all(|&x| x == 8));
}

#[test]
fn in_capsule_write_needs_no_read() {
    let (mut h, backend) = io_host(true, RdmaQueueConfig::default());
    let mut w = rw(0x01, 5, 0, 8);
    w.set_sgl_icd(4096);
    let mut capsule = w.as_bytes().to_vec();
    capsule.extend(std::iter::repeat_n(0xAB, 4096));
    let before = h.log.len();
    h.recv(&capsule).unwrap();
    assert!(
        matches!(h.log[before], Op::Send { .. }),
        "no READ: {:?}",
        &h.log[before..]
    );
    assert!(h.last_cqe().status.is_success());
    let mut b = vec![0u8; 4096];
    backend.read(0, &mut b).unwrap();
    assert!(b.iter().all(|&x| x == 0xAB));
}

#[test]
fn bad_descriptors_fail_the_command_not_the_queue() {
    let (mut h, _) = io_host(true, RdmaQueueConfig::default());
    // In-capsule data beyond what arrived.
    let mut w = rw(0x01, 1, 0, 8);
    w.set_sgl_icd(4096);
    h.recv(w.as_bytes()).unwrap();
    assert_eq!(h.last_cqe().status, Status::SGL_INVALID_DATA);
    // NVMe/TCP's transport data block means nothing on RDMA.
    let mut r = rw(0x02, 2, 0, 8);
    r.set_sgl_transport(4096);
    h.recv(r.as_bytes()).unwrap();
    assert_eq!(h.last_cqe().status, Status::SGL_INVALID_TYPE);
    // A keyed block shorter than the transfer.
    let key = h.region(vec![0; 4096]);
    let mut r = rw(0x02, 3, 0, 8);
    wire::set_keyed_sgl(&mut r, 0, 2048, key, false);
    h.recv(r.as_bytes()).unwrap();
    assert_eq!(h.last_cqe().status, Status::SGL_INVALID_DATA);
    // A capsule shorter than an SQE ends the queue.
    assert_eq!(h.recv(&[0u8; 40]), Err(RdmaError::ShortCapsule(40)));
}

#[test]
fn failed_rdma_read_fails_the_write_with_transient_transport_error() {
    let (mut h, backend) = io_host(false, RdmaQueueConfig::default());
    h.fail_reads = true;
    let key = h.region(vec![0x5A; 4096]);
    let mut w = rw(0x01, 1, 0, 8);
    wire::set_keyed_sgl(&mut w, 0, 4096, key, false);
    h.recv(w.as_bytes()).unwrap();
    assert_eq!(h.last_cqe().status, Status::TRANSIENT_TRANSPORT);
    let mut b = vec![0u8; 4096];
    backend.read(0, &mut b).unwrap();
    assert!(b.iter().all(|&x| x == 0), "nothing written");
    assert!(h.mem.lent.is_empty());
}

#[test]
fn reads_in_flight_stay_within_the_agreed_depth() {
    let (mut h, backend) = io_host(
        true,
        RdmaQueueConfig {
            max_reads: 2,
            ..RdmaQueueConfig::default()
        },
    );
    h.hold_reads = true;
    for i in 0..5u16 {
        let key = h.region(vec![i as u8 + 1; 512]);
        let mut w = rw(0x01, 20 + i, u64::from(i), 1);
        wire::set_keyed_sgl(&mut w, 0, 512, key, false);
        h.recv(w.as_bytes()).unwrap();
    }
    let reads = |h: &Host| {
        h.log
            .iter()
            .filter(|o| matches!(o, Op::Read { .. }))
            .count()
    };
    // Two from the I/O connect's own READ aside: count only the writes' READs.
    let base = 1;
    assert_eq!(reads(&h) - base, 2);
    while !h.held.is_empty() {
        h.release_held();
    }
    assert_eq!(reads(&h) - base, 5);
    let mut b = vec![0u8; 512];
    backend.read(4 * 512, &mut b).unwrap();
    assert!(b.iter().all(|&x| x == 5));
}

/// A fused Compare-and-Write (in-capsule data) after reads: it runs at once only if those reads
/// have left the namespace gate (no duties are run between the commands here).
fn compare_and_write_after_reads(register_ns: bool) {
    let (mut h, backend) = io_host(register_ns, RdmaQueueConfig::default());
    backend.write(0, &[0x11; 512]).unwrap();
    for i in 0..4u16 {
        let key = h.region(vec![0; 4096]);
        let mut r = rw(0x02, 40 + i, 0, 8);
        wire::set_keyed_sgl(&mut r, 0, 4096, key, false);
        h.recv(r.as_bytes()).unwrap();
        assert!(h.last_cqe().status.is_success());
    }
    let answered = h.cqes.len();
    send_compare_and_write(&mut h);
    assert_eq!(
        h.cqes.len(),
        answered + 2,
        "the pair ran without waiting for the gate"
    );
    assert!(
        h.cqes[answered..]
            .iter()
            .all(|(c, _)| c.status.is_success())
    );
    let mut b = [0u8; 512];
    backend.read(0, &mut b).unwrap();
    assert_eq!(b, [0x22; 512]);
}

#[test]
fn reads_leave_the_namespace_gate_zero_copy() {
    compare_and_write_after_reads(true);
}

#[test]
fn reads_leave_the_namespace_gate_through_staging() {
    compare_and_write_after_reads(false);
}

/// A fused Compare-and-Write (compare 0x11, write 0x22 at LBA 0), in-capsule, CIDs 50 and 51.
fn send_compare_and_write(h: &mut Host) {
    let mut cmp = rw(0x05, 50, 0, 1);
    cmp.set_fuse(1);
    cmp.set_sgl_icd(512);
    let mut c = cmp.as_bytes().to_vec();
    c.extend([0x11; 512]);
    h.recv(&c).unwrap();
    let mut w = rw(0x01, 51, 0, 1);
    w.set_fuse(2);
    w.set_sgl_icd(512);
    let mut c = w.as_bytes().to_vec();
    c.extend([0x22; 512]);
    h.recv(&c).unwrap();
}

/// Queue 1 has a Write inside the namespace gate (its data is an RDMA READ held by the host);
/// queue 2 then sends a Compare-and-Write, which takes the gate and waits for it to drain.
fn write_in_flight_then_compare_and_write() -> (Host, Host, Arc<dyn Backend>) {
    let (mut qs, backend) = io_queues(true, RdmaQueueConfig::default(), 2);
    let (mut q1, mut q2) = (qs.remove(0), qs.remove(0));
    backend.write(0, &[0x11; 512]).unwrap();
    q1.hold_reads = true;
    let key = q1.region(vec![0x33; 512]);
    let mut w = rw(0x01, 30, 8, 1);
    wire::set_keyed_sgl(&mut w, 0, 512, key, false);
    q1.recv(w.as_bytes()).unwrap();
    assert_eq!(q1.held.len(), 1, "the write's data is on its way");
    let before = q2.cqes.len();
    send_compare_and_write(&mut q2);
    assert_eq!(q2.answers(before), [], "the pair waits for the write");
    assert!(q2.hot(), "a deferred pair keeps its queue hot");
    (q1, q2, backend)
}

/// The regression of issue 24: on RDMA nothing retried deferred commands, so a
/// Compare-and-Write that had to wait for the gate never ran (and kept the gate locked).
#[test]
fn compare_and_write_waiting_for_a_write_on_another_queue_runs_when_it_drains() {
    let (mut q1, mut q2, backend) = write_in_flight_then_compare_and_write();
    let before = q2.cqes.len();
    assert!(!q2.duties(Instant::now()), "still draining");
    assert_eq!(q2.answers(before), []);
    q1.release_held();
    assert_eq!(q1.last_cqe().cid, 30);
    assert!(q1.last_cqe().status.is_success());
    assert!(q2.duties(Instant::now()), "the pair ran");
    let ok = Status::SUCCESS;
    assert_eq!(q2.answers(before), [(50, ok), (51, ok)]);
    assert!(!q2.hot());
    let mut b = [0u8; 512];
    backend.read(0, &mut b).unwrap();
    assert_eq!(b, [0x22; 512]);
}

#[test]
fn a_read_deferred_behind_compare_and_write_completes() {
    let (mut q1, mut q2, backend) = write_in_flight_then_compare_and_write();
    // A Read on queue 1 finds the gate held by the pair: deferred.
    let q1_before = q1.cqes.len();
    let key = q1.region(vec![0; 512]);
    let mut r = rw(0x02, 31, 0, 1);
    wire::set_keyed_sgl(&mut r, 0, 512, key, false);
    q1.recv(r.as_bytes()).unwrap();
    assert_eq!(q1.answers(q1_before), []);
    assert!(q1.hot(), "a deferred read keeps its queue hot");
    // The write's data arrives: it completes; the read still waits (the pair holds the gate).
    q1.hold_reads = false;
    q1.release_held();
    assert_eq!(q1.answers(q1_before), [(30, Status::SUCCESS)]);
    assert!(q1.hot());
    // The pair's queue retries: it runs and opens the gate; then the read's queue retries.
    assert!(q2.duties(Instant::now()));
    assert!(q1.duties(Instant::now()), "the deferred read ran");
    assert_eq!(
        q1.answers(q1_before),
        [(30, Status::SUCCESS), (31, Status::SUCCESS)]
    );
    assert!(!q1.hot());
    assert_eq!(
        q1.regions[&key],
        vec![0x22; 512],
        "the read saw the pair's write"
    );
    let mut b = [0u8; 512];
    backend.read(8 * 512, &mut b).unwrap();
    assert_eq!(b, [0x33; 512]);
}

#[test]
fn compare_and_write_that_cannot_drain_fails_at_the_drain_timeout_and_opens_the_gate() {
    let (mut q1, mut q2, backend) = write_in_flight_then_compare_and_write();
    let before = q2.cqes.len();
    let t = Instant::now();
    assert!(!q2.duties(t + nvmf_target::CAW_DRAIN_TIMEOUT / 2));
    assert_eq!(q2.answers(before), []);
    q2.duties(t + nvmf_target::CAW_DRAIN_TIMEOUT + std::time::Duration::from_millis(100));
    let st = Status::CMD_INTERRUPTED;
    assert_eq!(
        q2.answers(before)
            .iter()
            .map(|(c, s)| (*c, s.sct, s.sc))
            .collect::<Vec<_>>(),
        [(50, st.sct, st.sc), (51, st.sct, st.sc)]
    );
    assert!(!q2.hot());
    // The gate is open again: a Read on queue 2 runs at once (queue 1's write is still in).
    let key = q2.region(vec![0; 512]);
    let mut r = rw(0x02, 52, 0, 1);
    wire::set_keyed_sgl(&mut r, 0, 512, key, false);
    q2.recv(r.as_bytes()).unwrap();
    assert_eq!(q2.last_cqe().cid, 52);
    assert!(q2.last_cqe().status.is_success());
    assert_eq!(q2.regions[&key], vec![0x11; 512], "nothing was written");
    q1.release_held();
    assert!(q1.last_cqe().status.is_success());
    let mut b = [0u8; 512];
    backend.read(0, &mut b).unwrap();
    assert_eq!(b, [0x11; 512]);
}

#[test]
fn the_configured_handshake_timeout_closes_a_queue_without_connect() {
    let backend = ram();
    let t0 = Instant::now();
    let short = std::time::Duration::from_millis(300);
    let cfg = RdmaQueueConfig {
        handshake_timeout: short,
        ..RdmaQueueConfig::default()
    };
    let mut h = Host::new(&backend, true, cfg);
    let ms = std::time::Duration::from_millis;
    assert_eq!(h.core.tick(t0 + ms(200), &mut h.mem), None);
    assert_eq!(
        h.core.tick(t0 + ms(1000), &mut h.mem),
        Some(Close::HandshakeTimeout(short))
    );
    // A longer one is honoured too (the old fixed 5 s would have closed it at 6 s).
    let long = RdmaQueueConfig {
        handshake_timeout: std::time::Duration::from_secs(10),
        ..RdmaQueueConfig::default()
    };
    let t0 = Instant::now();
    let mut h = Host::new(&backend, true, long);
    assert_eq!(h.core.tick(t0 + ms(6000), &mut h.mem), None);
    assert!(h.core.tick(t0 + ms(11_000), &mut h.mem).is_some());
    // A connected queue is never closed by it (no keep-alive timeout here).
    let t0 = Instant::now();
    let mut h = Host::new(&backend, true, cfg);
    assert!(h.connect_kato(0, 31, 0xFFFF, 0).status.is_success());
    assert_eq!(h.core.tick(t0 + ms(1000), &mut h.mem), None);
    assert_eq!(h.core.tick(t0 + ms(60_000), &mut h.mem), None);
}

/// A DH-HMAC-CHAP session that never finishes.
struct Silent;

impl nvmf_target::auth::AuthSession for Silent {
    fn send(&mut self, _: &[u8]) -> Result<(), nvmf_target::auth::AuthCmdError> {
        Ok(())
    }
    fn receive(&mut self, _: u32) -> Result<Vec<u8>, nvmf_target::auth::AuthCmdError> {
        Ok(Vec::new())
    }
    fn progress(&self) -> nvmf_target::auth::AuthProgress {
        nvmf_target::auth::AuthProgress::InProgress
    }
    fn failure(&self) -> Option<String> {
        None
    }
}

/// Every host must authenticate.
struct EveryHost;

impl nvmf_target::auth::AuthPolicy for EveryHost {
    fn session(&self, _: &str, _: &str, _: u16) -> Option<Box<dyn nvmf_target::auth::AuthSession>> {
        Some(Box::new(Silent))
    }
}

#[test]
fn a_queue_that_connects_but_never_authenticates_is_closed_at_the_auth_deadline() {
    let backend = ram();
    let t = target(backend.clone());
    t.set_auth_policy(Some(Arc::new(EveryHost)));
    let mut h = Host::on(t, &backend, true, RdmaQueueConfig::default());
    // No keep-alive timeout: only the authentication deadline may close it.
    let c = h.connect_kato(0, 31, 0xFFFF, 0);
    assert!(c.status.is_success(), "{c:?}");
    assert_ne!(c.dw0 & nvmf_target::auth::CONNECT_AUTHREQ_ATR, 0, "ATR set");
    let now = Instant::now();
    let s = std::time::Duration::from_secs;
    // Connected: the handshake deadline gives way to the authentication deadline.
    assert_eq!(h.core.tick(now, &mut h.mem), None);
    assert_eq!(h.core.tick(now + s(10), &mut h.mem), None);
    assert_eq!(
        h.core.tick(now + duties::AUTH_TIMEOUT + s(1), &mut h.mem),
        Some(Close::AuthTimeout)
    );
}

#[test]
fn an_idle_queue_gives_its_buffers_back_on_the_tick() {
    let (mut h, _backend) = io_host(false, RdmaQueueConfig::default());
    for i in 0..8u16 {
        let key = h.region(vec![i as u8; 64 * 1024]);
        let mut w = rw(0x01, 60 + i, u64::from(i) * 128, 128);
        wire::set_keyed_sgl(&mut w, 0, 64 * 1024, key, false);
        h.recv(w.as_bytes()).unwrap();
        assert!(h.last_cqe().status.is_success());
    }
    let busy = h.core.queue.idle_footprint();
    assert!(busy > 0, "the slot table grew");
    let now = Instant::now();
    // First tick: commands arrived since the last one; nothing is released.
    assert_eq!(h.core.tick(now, &mut h.mem), None);
    assert_eq!(h.core.queue.idle_footprint(), busy);
    // A tick with nothing received: the queue's buffers are given back.
    assert_eq!(h.core.tick(now, &mut h.mem), None);
    assert_eq!(h.core.queue.idle_footprint(), 0);
    // And it still works.
    let key = h.region(vec![0; 512]);
    let mut r = rw(0x02, 70, 128, 1);
    wire::set_keyed_sgl(&mut r, 0, 512, key, false);
    h.recv(r.as_bytes()).unwrap();
    assert!(h.last_cqe().status.is_success());
    assert_eq!(h.regions[&key], vec![1u8; 512]);
}

/// Drive a queue only through its one deadline, as a run loop does: [`duties::handle_timeout`]
/// at each [`duties::poll_timeout`], until it closes or the deadline passes `until`. Returns
/// the instant and reason of the close.
fn drive(h: &mut Host, until: Instant) -> Option<(Instant, Close)> {
    let mut off = |_: &mut nvmf_target::Queue, _: u16| panic!("RAM never offloads");
    let mut last: Option<Instant> = None;
    for _ in 0..10_000 {
        let at = h
            .core
            .poll_timeout()
            .expect("a queue always has a deadline");
        if let Some(l) = last {
            assert!(at > l, "handle_timeout moved the deadline on");
        }
        if at > until {
            return None;
        }
        let r = h.core.handle_timeout(at, &mut h.mem, &mut off);
        h.run_ops();
        if let Err(why) = r {
            return Some((at, why));
        }
        last = Some(at);
    }
    panic!("the deadline did not move on");
}

#[test]
fn the_one_deadline_covers_the_handshake_timeout() {
    let backend = ram();
    let short = std::time::Duration::from_millis(300);
    let cfg = RdmaQueueConfig {
        handshake_timeout: short,
        ..RdmaQueueConfig::default()
    };
    let before = Instant::now();
    let mut h = Host::new(&backend, true, cfg);
    let after = Instant::now();
    let (at, why) = drive(&mut h, before + std::time::Duration::from_secs(10)).expect("closed");
    assert_eq!(why, Close::HandshakeTimeout(short));
    assert!(
        at >= before + short && at <= after + short,
        "closed at its deadline"
    );
}

#[test]
fn the_one_deadline_covers_the_auth_timeout() {
    let backend = ram();
    let t = target(backend.clone());
    t.set_auth_policy(Some(Arc::new(EveryHost)));
    let mut h = Host::on(t, &backend, true, RdmaQueueConfig::default());
    let c = h.connect_kato(0, 31, 0xFFFF, 0);
    assert!(c.status.is_success(), "{c:?}");
    let connected = Instant::now();
    let s = std::time::Duration::from_secs;
    let (at, why) = drive(&mut h, connected + duties::AUTH_TIMEOUT + s(10)).expect("closed");
    assert_eq!(why, Close::AuthTimeout);
    assert!(at >= connected + duties::AUTH_TIMEOUT);
    assert!(at <= connected + duties::AUTH_TIMEOUT + nvmf_target::TIMER_PERIOD * 2 + s(1));
}

#[test]
fn the_one_deadline_covers_the_keep_alive_timer() {
    let backend = ram();
    let mut h = Host::new(&backend, true, RdmaQueueConfig::default());
    let c = h.connect_kato(0, 31, 0xFFFF, 2000);
    assert!(c.status.is_success(), "{c:?}");
    let connected = Instant::now();
    let kato = std::time::Duration::from_millis(2000);
    let (at, why) = drive(&mut h, connected + kato * 10).expect("closed");
    assert_eq!(
        why,
        Close::ControllerGone,
        "keep-alive expiry tears the controller down"
    );
    assert!(at > connected + kato - std::time::Duration::from_millis(100));
    assert!(
        at <= connected + kato + nvmf_target::TIMER_PERIOD * 2,
        "{:?}",
        at - connected
    );
}

#[test]
fn the_one_deadline_covers_idle_buffers_and_deferred_commands() {
    // Idle buffers: given back at the second period without input.
    let (mut h, _backend) = io_host(false, RdmaQueueConfig::default());
    let key = h.region(vec![7; 64 * 1024]);
    let mut w = rw(0x01, 60, 0, 128);
    wire::set_keyed_sgl(&mut w, 0, 64 * 1024, key, false);
    h.recv(w.as_bytes()).unwrap();
    assert!(h.last_cqe().status.is_success());
    let busy = h.core.queue.idle_footprint();
    assert!(busy > 0);
    let mut off = |_: &mut nvmf_target::Queue, _: u16| panic!("RAM never offloads");
    let mut periods = 0;
    while h.core.queue.idle_footprint() == busy {
        let at = h.core.poll_timeout().expect("a deadline");
        assert_eq!(h.core.handle_timeout(at, &mut h.mem, &mut off), Ok(false));
        periods += 1;
        assert!(periods <= 3, "given back within two periods");
    }
    // Deferred commands: the deadline is already due (the loop does not sleep) until they run.
    let (mut q1, mut q2, _backend) = write_in_flight_then_compare_and_write();
    let now = Instant::now();
    assert!(
        q2.core.poll_timeout().expect("a deadline") <= now,
        "due at once"
    );
    q1.release_held();
    let before = q2.cqes.len();
    let now = Instant::now();
    assert_eq!(q2.core.handle_timeout(now, &mut q2.mem, &mut off), Ok(true));
    q2.run_ops();
    assert_eq!(q2.answers(before).len(), 2, "the pair ran");
    assert!(
        q2.core.poll_timeout().expect("a deadline") > now,
        "nothing due any more"
    );
}
