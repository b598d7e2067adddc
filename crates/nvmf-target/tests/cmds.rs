//! Compare, Verify, Copy and fused Compare-and-Write, driven through [`Queue`] with no socket:
//! statuses, limits, pairing rules, Identify / effects log, and the atomicity of
//! Compare-and-Write against writers and readers on other queues and threads.

mod common;

use ebof_backend::{Backend, BackendSpec};
use nvme_spec::fabrics::{ConnectCmd, ConnectData, PropertyCmd, cc, prop};
use nvme_spec::identify::{
    IdentifyController, IdentifyControllerNvm, IdentifyNamespace, cns, fuses, ocfs, oncs,
};
use nvme_spec::log::{CmdEffectsLog, effects, lid};
use nvme_spec::opcode::{admin, fctype, io};
use nvme_spec::sqe::{FUSE_FIRST, FUSE_SECOND};
use nvme_spec::{CommandId, ControllerId, Cqe, NamespaceId, QueueId, Sqe, Status};
use nvmf_target::{
    CAW_DRAIN_TIMEOUT, Disposition, Namespace, Queue, Subsystem, Target, TargetLimits,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

const NQN: &str = "nqn.2026-11.io.ebof:cmds";
const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000c5";
const BS: u32 = 512;

fn target(size: u64) -> (Arc<Target>, Arc<dyn Backend>) {
    let ram = ebof_backend::open(&BackendSpec::Ram { size }).unwrap();
    let sub = Subsystem {
        nqn: NQN.into(),
        serial: "CMDS".into(),
        model: "ebof".into(),
        allow_any_host: true,
        hosts: vec![],
        namespaces: vec![Arc::new(Namespace::new(1, ram.clone(), BS, [3; 16]))],
        ns_hosts: Default::default(),
    };
    let t = Target::new(vec![sub], vec![], TargetLimits::default(), Instant::now());
    (Arc::new(t), ram)
}

/// One queue and what it completed.
struct Q {
    q: Queue,
    done: Vec<(Cqe, Vec<u8>)>,
    cid: u16,
}

impl Q {
    fn connect(t: &Arc<Target>, qid: u16, cntlid: u16) -> Q {
        let now = Instant::now();
        let mut q = Q {
            q: Queue::new(t.clone(), "127.0.0.1:4420".parse().unwrap(), now),
            done: vec![],
            cid: 1,
        };
        let sqe = ConnectCmd {
            recfmt: 0,
            qid: QueueId(qid),
            sqsize: if qid == 0 { 31 } else { 127 },
            cattr: 0,
            kato: 0,
        }
        .to_sqe(CommandId(0));
        let data = ConnectData {
            hostid: [5; 16],
            cntlid: ControllerId(cntlid),
            subnqn: NQN.into(),
            hostnqn: HOSTNQN.into(),
        }
        .encode();
        let mut sqe = sqe;
        sqe.set_sgl_icd(data.len() as u32);
        assert_eq!(q.q.handle_command(&sqe, &data, now), Disposition::Done);
        let c = q.drain().pop().unwrap().0;
        assert!(c.status.is_success(), "{:?}", c.status);
        q
    }

    /// An admin queue with its controller enabled, and an I/O queue on it.
    fn pair(t: &Arc<Target>) -> (Q, Q) {
        let mut a = Q::connect(t, 0, 0xFFFF);
        let cntlid = a.q.controller().unwrap().cntlid.0;
        let mut sqe = Sqe::new(admin::FABRICS, CommandId(0));
        sqe.set_fctype(fctype::PROPERTY_SET);
        PropertyCmd {
            size8: false,
            ofst: prop::CC,
            value: u64::from(cc::enable_value(0)),
        }
        .encode_into(&mut sqe);
        assert!(a.cmd(sqe, &[]).0.status.is_success());
        let io = Q::connect(t, 1, cntlid);
        (a, io)
    }

    fn drain(&mut self) -> Vec<(Cqe, Vec<u8>)> {
        common::drain(&mut self.q)
    }

    /// Run what a disposition asks for (inline: RAM) and anything deferred that may go now.
    fn step(&mut self, d: Disposition) {
        if let Disposition::Execute { slot } = d {
            self.q.execute_inline(slot);
        }
        self.retry();
        let d = self.drain();
        self.done.extend(d);
    }

    fn retry(&mut self) {
        self.retry_at(Instant::now());
    }

    fn retry_at(&mut self, now: Instant) {
        let mut ready = vec![];
        self.q.retry_deferred(now, &mut ready);
        for s in ready {
            self.q.execute_inline(s);
        }
    }

    /// Submit a capsule (data in-capsule) and return its disposition.
    fn submit(&mut self, mut sqe: Sqe, data: &[u8]) -> (u16, Disposition) {
        let cid = self.cid;
        self.cid = self.cid.wrapping_add(1);
        sqe.set_cid(CommandId(cid));
        if !data.is_empty() {
            sqe.set_sgl_icd(data.len() as u32);
        }
        let d = self.q.handle_command(&sqe, data, Instant::now());
        (cid, d)
    }

    /// One command to completion: its CQE and data (more than 8 KiB of data goes through
    /// R2T and H2CData). Deferred commands are retried until they ran.
    fn cmd(&mut self, mut sqe: Sqe, data: &[u8]) -> (Cqe, Vec<u8>) {
        let (cid, mut d) = if data.len() > 8192 {
            sqe.set_sgl_transport(data.len() as u32);
            self.submit(sqe, &[])
        } else {
            self.submit(sqe, data)
        };
        if let Disposition::NeedData { ttag, .. } = d {
            d = self.q.handle_h2c_data(ttag, 0, data, true);
        }
        self.step(d);
        while !self.has(cid) {
            std::thread::yield_now();
            self.step(Disposition::Pending);
        }
        self.take(cid)
    }

    fn take(&mut self, cid: u16) -> (Cqe, Vec<u8>) {
        let i = self
            .done
            .iter()
            .position(|(c, _)| c.cid == cid)
            .unwrap_or_else(|| panic!("cid {cid} not completed"));
        self.done.remove(i)
    }

    fn has(&self, cid: u16) -> bool {
        self.done.iter().any(|(c, _)| c.cid == cid)
    }
}

fn rw(op: u8, slba: u64, nlb: u32) -> Sqe {
    let mut s = Sqe::new(op, CommandId(0));
    s.set_nsid(NamespaceId(1));
    s.set_slba(slba);
    s.set_nlb(nlb);
    s
}

fn write(q: &mut Q, slba: u64, data: &[u8]) -> Status {
    q.cmd(rw(io::WRITE, slba, data.len() as u32 / BS), data)
        .0
        .status
}

fn read(q: &mut Q, slba: u64, nlb: u32) -> Vec<u8> {
    let mut s = rw(io::READ, slba, nlb);
    s.set_sgl_transport(nlb * BS);
    let (c, d) = q.cmd(s, &[]);
    assert!(c.status.is_success(), "{:?}", c.status);
    d
}

fn compare(q: &mut Q, slba: u64, data: &[u8]) -> Status {
    q.cmd(rw(io::COMPARE, slba, data.len() as u32 / BS), data)
        .0
        .status
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(7) ^ seed).collect()
}

#[test]
fn compare_matches_and_mismatches() {
    let (t, _) = target(1 << 20);
    let (_a, mut q) = Q::pair(&t);
    let data = pattern(1, 4096);
    assert_eq!(write(&mut q, 8, &data), Status::SUCCESS);
    assert_eq!(compare(&mut q, 8, &data), Status::SUCCESS);
    let mut other = data.clone();
    other[4095] ^= 1;
    let st = compare(&mut q, 8, &other);
    assert_eq!(st, Status::COMPARE_FAILURE);
    assert_eq!((st.sct, st.sc, st.dnr), (2, 0x85, true));
    // Out of range: LBA Out of Range before any data moves.
    assert_eq!(compare(&mut q, 2047, &data), Status::LBA_RANGE);
    // Data length differing from NLB.
    let (c, _) = q.cmd(rw(io::COMPARE, 8, 4), &data);
    assert_eq!(c.status, Status::SGL_INVALID_DATA);
}

#[test]
fn verify_checks_range_and_limit() {
    let (t, _) = target(32 << 20);
    let (_a, mut q) = Q::pair(&t);
    assert!(q.cmd(rw(io::VERIFY, 0, 64), &[]).0.status.is_success());
    assert_eq!(
        q.cmd(rw(io::VERIFY, (32 << 20) / 512 - 1, 2), &[]).0.status,
        Status::LBA_RANGE
    );
    // Above VSL (8 MiB): 16384 + 1 blocks of 512 bytes.
    assert_eq!(
        q.cmd(rw(io::VERIFY, 0, 16385), &[]).0.status,
        Status::INVALID_FIELD
    );
    assert!(q.cmd(rw(io::VERIFY, 0, 16384), &[]).0.status.is_success());
}

#[test]
fn verify_reads_a_file_backend() {
    let dir = std::env::temp_dir().join(format!("ebof-verify-{}", std::process::id()));
    let path = dir.with_extension("img");
    let file = ebof_backend::open(&BackendSpec::File {
        path: path.clone(),
        size: Some(1 << 20),
    });
    let Ok(file) = file else {
        return; // no writable temp dir: nothing to check here
    };
    let sub = Subsystem {
        nqn: NQN.into(),
        serial: "CMDS".into(),
        model: "ebof".into(),
        allow_any_host: true,
        hosts: vec![],
        namespaces: vec![Arc::new(Namespace::new(1, file, BS, [4; 16]))],
        ns_hosts: Default::default(),
    };
    let t = Arc::new(Target::new(
        vec![sub],
        vec![],
        TargetLimits::default(),
        Instant::now(),
    ));
    let (_a, mut q) = Q::pair(&t);
    // A blocking backend: the driver runs the request (here: the synchronous path).
    let (cid, d) = q.submit(rw(io::VERIFY, 0, 2048), &[]);
    let Disposition::Execute { slot } = d else {
        panic!("{d:?}")
    };
    let req = q.q.io_request(slot).unwrap().clone();
    let mut buf = q.q.take_io_buffer(slot);
    let st = nvmf_target::execute_io(&req, &mut buf);
    q.q.complete_io(slot, st, buf);
    q.step(Disposition::Done);
    assert!(q.take(cid).0.status.is_success());
    let _ = std::fs::remove_file(&path);
}

fn copy_cmd(sdlba: u64, nr0: u32, format: u32) -> Sqe {
    let mut s = Sqe::new(io::COPY, CommandId(0));
    s.set_nsid(NamespaceId(1));
    s.set_slba(sdlba);
    s.set_cdw(12, nr0 | (format << 8));
    s
}

fn ranges(r: &[(u64, u32)]) -> Vec<u8> {
    let mut v = vec![0u8; 32 * r.len()];
    for (i, (slba, nlb)) in r.iter().enumerate() {
        v[32 * i + 8..32 * i + 16].copy_from_slice(&slba.to_le_bytes());
        v[32 * i + 16..32 * i + 18].copy_from_slice(&((nlb - 1) as u16).to_le_bytes());
    }
    v
}

#[test]
fn copy_gathers_ranges() {
    let (t, _) = target(16 << 20);
    let (_a, mut q) = Q::pair(&t);
    let a = pattern(0xA, 2048);
    let b = pattern(0xB, 1024);
    assert_eq!(write(&mut q, 100, &a), Status::SUCCESS);
    assert_eq!(write(&mut q, 200, &b), Status::SUCCESS);
    let (c, _) = q.cmd(copy_cmd(1000, 1, 0), &ranges(&[(100, 4), (200, 2)]));
    assert!(c.status.is_success(), "{:?}", c.status);
    let got = read(&mut q, 1000, 6);
    assert_eq!(&got[..2048], &a[..]);
    assert_eq!(&got[2048..], &b[..]);
    // Overlapping source and destination: the data as it was before the command.
    let (c, _) = q.cmd(copy_cmd(102, 0, 0), &ranges(&[(100, 4)]));
    assert!(c.status.is_success());
    assert_eq!(read(&mut q, 102, 4), a);
}

#[test]
fn copy_limits_and_errors() {
    let (t, _) = target(64 << 20);
    let (_a, mut q) = Q::pair(&t);
    let ns = t.subsystems()[0].namespaces[0].clone();
    let (mssrl, mcl, msrc) = nvmf_target::cmds::copy_limits(&ns);
    assert_eq!((mssrl, mcl, msrc), (2048, 16384, 127));
    // Other descriptor formats: Invalid Field.
    let (c, _) = q.cmd(copy_cmd(0, 0, 1), &ranges(&[(0, 1)]));
    assert_eq!(c.status, Status::INVALID_FIELD);
    // More ranges than MSRC + 1: Command Size Limit Exceeded.
    let many: Vec<(u64, u32)> = (0..129).map(|i| (i, 1)).collect();
    let (c, _) = q.cmd(copy_cmd(5000, 128, 0), &ranges(&many));
    assert_eq!(c.status, Status::CMD_SIZE_LIMIT);
    assert_eq!((c.status.sct, c.status.sc), (1, 0x83));
    // MSRC + 1 ranges are fine.
    let (c, _) = q.cmd(copy_cmd(5000, 127, 0), &ranges(&many[..128]));
    assert!(c.status.is_success(), "{:?}", c.status);
    // One range above MSSRL.
    let (c, _) = q.cmd(copy_cmd(60000, 0, 0), &ranges(&[(0, 2049)]));
    assert_eq!(c.status, Status::CMD_SIZE_LIMIT);
    let (c, _) = q.cmd(copy_cmd(60000, 0, 0), &ranges(&[(0, 2048)]));
    assert!(c.status.is_success());
    // The total above MCL (9 ranges of 2048 = 18432 > 16384).
    let big: Vec<(u64, u32)> = (0..9).map(|i| (i * 2048, 2048)).collect();
    let (c, _) = q.cmd(copy_cmd(80000, 8, 0), &ranges(&big));
    assert_eq!(c.status, Status::CMD_SIZE_LIMIT);
    let (c, _) = q.cmd(copy_cmd(80000, 7, 0), &ranges(&big[..8]));
    assert!(c.status.is_success());
    // Source or destination out of range.
    let blocks = (64u64 << 20) / 512;
    let (c, _) = q.cmd(copy_cmd(0, 0, 0), &ranges(&[(blocks - 1, 2)]));
    assert_eq!(c.status, Status::LBA_RANGE);
    let (c, _) = q.cmd(copy_cmd(blocks - 1, 0, 0), &ranges(&[(0, 2)]));
    assert_eq!(c.status, Status::LBA_RANGE);
    // Fewer descriptors than NR says.
    let (c, _) = q.cmd(copy_cmd(0, 1, 0), &ranges(&[(0, 1)]));
    assert_eq!(c.status, Status::SGL_INVALID_DATA);
}

#[test]
fn identify_and_effects_tell_the_truth() {
    let (t, _) = target(1 << 20);
    let (mut a, _q) = Q::pair(&t);
    let ident = |a: &mut Q, c: u8, nsid: u32, csi: u32| {
        let mut s = Sqe::new(admin::IDENTIFY, CommandId(0));
        s.set_nsid(NamespaceId(nsid));
        s.set_cdw(10, u32::from(c));
        s.set_cdw(11, csi << 24);
        s.set_sgl_transport(4096);
        let (c, d) = a.cmd(s, &[]);
        assert!(c.status.is_success());
        d
    };
    let ic = IdentifyController::decode(&ident(&mut a, cns::CTRL, 0, 0)).unwrap();
    for bit in [
        oncs::COMPARE,
        oncs::DSM,
        oncs::WRITE_ZEROES,
        oncs::VERIFY,
        oncs::COPY,
    ] {
        assert_ne!(ic.oncs & bit, 0, "ONCS bit {bit:#x}");
    }
    assert_eq!(ic.oncs & oncs::WRITE_UNCORRECTABLE, 0);
    assert_eq!(ic.fuses, fuses::COMPARE_AND_WRITE);
    assert_eq!(ic.ocfs, ocfs::FORMAT_0);
    assert_eq!(ic.acwu, 31);
    let ns = IdentifyNamespace::decode(&ident(&mut a, cns::NS, 1, 0)).unwrap();
    assert_eq!((ns.mssrl, ns.mcl, ns.msrc), (2048, 16384, 127));
    assert_eq!(ns.dlfeat, 0b1001);
    let nvm = IdentifyControllerNvm::decode(&ident(&mut a, cns::CS_CTRL, 0, 0)).unwrap();
    assert_eq!(nvm.vsl, 11);

    let mut s = Sqe::new(admin::GET_LOG_PAGE, CommandId(0));
    s.set_cdw(10, u32::from(lid::CMD_EFFECTS) | ((4096 / 4 - 1) << 16));
    s.set_sgl_transport(4096);
    let (c, d) = a.cmd(s, &[]);
    assert!(c.status.is_success());
    let log = CmdEffectsLog::decode(&d).unwrap();
    for op in [io::COMPARE, io::VERIFY] {
        assert_eq!(log.iocs[usize::from(op)], effects::CSUPP, "{op:#x}");
    }
    assert_eq!(
        log.iocs[usize::from(io::COPY)],
        effects::CSUPP | effects::LBCC
    );
}

/// A fused pair: first (Compare) and second (Write), each with its data through R2T.
fn fused(q: &mut Q, slba: u64, cmp: &[u8], new: &[u8]) -> (Status, Status) {
    let nlb = cmp.len() as u32 / BS;
    let mut c = rw(io::COMPARE, slba, nlb);
    c.set_fuse(FUSE_FIRST);
    c.set_sgl_transport(cmp.len() as u32);
    let mut w = rw(io::WRITE, slba, nlb);
    w.set_fuse(FUSE_SECOND);
    w.set_sgl_transport(new.len() as u32);
    let (c1, d1) = q.submit(c, &[]);
    let (c2, d2) = q.submit(w, &[]);
    let (Disposition::NeedData { ttag: t1, .. }, Disposition::NeedData { ttag: t2, .. }) = (d1, d2)
    else {
        panic!("{d1:?} {d2:?}");
    };
    // The Write's data first: the pair waits for both.
    let d = q.q.handle_h2c_data(t2, 0, new, true);
    assert_eq!(d, Disposition::Parked);
    let d = q.q.handle_h2c_data(t1, 0, cmp, true);
    q.step(d);
    for _ in 0..100_000 {
        if q.has(c1) && q.has(c2) {
            break;
        }
        q.step(Disposition::Pending);
        std::thread::yield_now();
    }
    (q.take(c1).0.status, q.take(c2).0.status)
}

#[test]
fn fused_compare_and_write() {
    let (t, _) = target(1 << 20);
    let (_a, mut q) = Q::pair(&t);
    let old = pattern(1, 1024);
    let new = pattern(2, 1024);
    assert_eq!(write(&mut q, 4, &old), Status::SUCCESS);
    assert_eq!(
        fused(&mut q, 4, &old, &new),
        (Status::SUCCESS, Status::SUCCESS)
    );
    assert_eq!(read(&mut q, 4, 2), new);
    // Miscompare: nothing written, Compare Failure and Failed Fused.
    assert_eq!(
        fused(&mut q, 4, &old, &pattern(3, 1024)),
        (Status::COMPARE_FAILURE, Status::ABORTED_FUSED_FAIL)
    );
    assert_eq!(read(&mut q, 4, 2), new);
    assert!(!t.subsystems()[0].namespaces[0].gate.is_locked());
}

#[test]
fn fused_pairing_rules() {
    let (t, _) = target(1 << 20);
    let (mut a, mut q) = Q::pair(&t);
    let data = pattern(9, 512);
    let first = || {
        let mut c = rw(io::COMPARE, 0, 1);
        c.set_fuse(FUSE_FIRST);
        c
    };
    let second = |op: u8, slba: u64| {
        let mut w = rw(op, slba, 1);
        w.set_fuse(FUSE_SECOND);
        w
    };
    // A second with no first: Missing Fused.
    let (c, _) = q.cmd(second(io::WRITE, 0), &data);
    assert_eq!(c.status, Status::ABORTED_FUSED_MISSING);
    // A first followed by a plain command: the first fails with Missing Fused, the plain one
    // runs.
    let (c1, d) = q.submit(first(), &data);
    q.step(d);
    assert!(!q.has(c1), "a first waits for its second");
    assert!(compare(&mut q, 0, &[0; 512]).is_success());
    assert_eq!(q.take(c1).0.status, Status::ABORTED_FUSED_MISSING);
    // A first followed by another first: the older one fails.
    let (c1, d) = q.submit(first(), &data);
    q.step(d);
    let (c2, d) = q.submit(first(), &data);
    q.step(d);
    assert_eq!(q.take(c1).0.status, Status::ABORTED_FUSED_MISSING);
    // ... and the newer is paired with a Write on another range: Invalid Field for both
    // (NVMe Base 2.0 section 3.4.2).
    let (c, _) = q.cmd(second(io::WRITE, 1), &data);
    assert_eq!(c.status, Status::INVALID_FIELD);
    assert_eq!(q.take(c2).0.status, Status::INVALID_FIELD);
    // A second that is not a Write.
    let (c1, d) = q.submit(first(), &data);
    q.step(d);
    let (c, _) = q.cmd(second(io::READ, 0), &[]);
    assert_eq!(c.status, Status::INVALID_FIELD);
    assert_eq!(q.take(c1).0.status, Status::INVALID_FIELD);
    // A first that is not a Compare, and FUSE 11b.
    let mut w = rw(io::WRITE, 0, 1);
    w.set_fuse(FUSE_FIRST);
    assert_eq!(q.cmd(w, &data).0.status, Status::INVALID_FIELD);
    let mut w = rw(io::WRITE, 0, 1);
    w.set_fuse(3);
    assert_eq!(q.cmd(w, &data).0.status, Status::INVALID_FIELD);
    // A first whose own fields fail: it fails alone, the second then finds no first.
    let mut c = rw(io::COMPARE, 1 << 30, 1);
    c.set_fuse(FUSE_FIRST);
    assert_eq!(q.cmd(c, &data).0.status, Status::LBA_RANGE);
    let mut w = rw(io::WRITE, 1 << 30, 1);
    w.set_fuse(FUSE_SECOND);
    assert_eq!(q.cmd(w, &data).0.status, Status::ABORTED_FUSED_MISSING);
    // Fused admin commands are not supported.
    let mut s = Sqe::new(admin::KEEP_ALIVE, CommandId(0));
    s.set_fuse(FUSE_FIRST);
    assert_eq!(a.cmd(s, &[]).0.status, Status::INVALID_FIELD);
    // After all this the pair still works and the gate is open.
    assert_eq!(
        fused(&mut q, 0, &[0; 512], &data),
        (Status::SUCCESS, Status::SUCCESS)
    );
    assert!(!t.subsystems()[0].namespaces[0].gate.is_locked());
}

/// A Compare-and-Write waits for a Write that is inside the gate (its data going straight into
/// the RAM namespace, still in flight), and a Read arriving meanwhile waits for the pair.
#[test]
fn compare_and_write_waits_for_commands_inside() {
    let (t, _) = target(1 << 20);
    let (_a, mut q) = Q::pair(&t);
    let (_a2, mut other) = Q::pair(&t);
    let old = pattern(1, 512);
    assert_eq!(write(&mut q, 0, &old), Status::SUCCESS);
    // A Write on the other queue receives its data slowly (R2T, no H2CData yet).
    let mut w = rw(io::WRITE, 8, 1);
    w.set_sgl_transport(512);
    let (wc, d) = other.submit(w, &[]);
    let Disposition::NeedData { ttag, .. } = d else {
        panic!("{d:?}")
    };
    // The pair: all its data in, but it must wait.
    let mut c = rw(io::COMPARE, 0, 1);
    c.set_fuse(FUSE_FIRST);
    let mut pw = rw(io::WRITE, 0, 1);
    pw.set_fuse(FUSE_SECOND);
    let (c1, d) = q.submit(c, &old);
    q.step(d);
    let (c2, d) = q.submit(pw, &pattern(2, 512));
    q.step(d);
    assert!(q.q.has_deferred());
    assert!(!q.has(c1) && !q.has(c2));
    // A read on the other queue now defers (the pair holds the gate).
    let mut r = rw(io::READ, 0, 1);
    r.set_sgl_transport(512);
    let (rc, d) = other.submit(r, &[]);
    assert_eq!(d, Disposition::Parked);
    other.step(Disposition::Pending);
    assert!(!other.has(rc));
    // The slow write's data arrives and it completes: the gate drains, the pair runs, then the
    // read sees the pair's data.
    let d = other.q.handle_h2c_data(ttag, 0, &pattern(5, 512), true);
    other.step(d);
    assert!(other.take(wc).0.status.is_success());
    q.step(Disposition::Pending);
    assert!(q.take(c1).0.status.is_success());
    assert!(q.take(c2).0.status.is_success());
    other.step(Disposition::Pending);
    let (rcqe, data) = other.take(rc);
    assert!(rcqe.status.is_success());
    assert_eq!(data, pattern(2, 512));
}

/// A Write that never gets its data keeps the gate from draining: the waiting
/// Compare-and-Write gives up after [`CAW_DRAIN_TIMEOUT`] with Command Interrupted, and the
/// commands deferred behind it run.
#[test]
fn compare_and_write_wait_is_bounded() {
    let (t, _) = target(1 << 20);
    let (_a, mut q) = Q::pair(&t);
    let (_a2, mut stuck) = Q::pair(&t);
    let mut w = rw(io::WRITE, 8, 1);
    w.set_sgl_transport(512);
    let (_, d) = stuck.submit(w, &[]);
    assert!(matches!(d, Disposition::NeedData { .. }), "{d:?}");
    let mut c = rw(io::COMPARE, 0, 1);
    c.set_fuse(FUSE_FIRST);
    let mut pw = rw(io::WRITE, 0, 1);
    pw.set_fuse(FUSE_SECOND);
    let (c1, d) = q.submit(c, &[0; 512]);
    q.step(d);
    let (c2, d) = q.submit(pw, &[1; 512]);
    q.step(d);
    let mut r = rw(io::READ, 0, 1);
    r.set_sgl_transport(512);
    let (rc, d) = q.submit(r, &[]);
    q.step(d);
    assert!(!q.has(c1) && !q.has(rc));
    q.retry_at(Instant::now() + CAW_DRAIN_TIMEOUT / 2);
    assert!(!q.has(c1), "still within the bound");
    q.retry_at(Instant::now() + CAW_DRAIN_TIMEOUT * 2);
    q.step(Disposition::Pending);
    assert_eq!(q.take(c1).0.status, Status::CMD_INTERRUPTED);
    assert_eq!(q.take(c2).0.status, Status::CMD_INTERRUPTED);
    let (rcqe, data) = q.take(rc);
    assert!(rcqe.status.is_success());
    assert_eq!(data, vec![0; 512], "nothing was written");
    assert!(!t.subsystems()[0].namespaces[0].gate.is_locked());
}

/// Threads with their own queues on one RAM namespace: writers hammer the blocks around a
/// counter, readers check the counter block is never torn, and Compare-and-Write threads
/// increment the counter (read, then compare-and-write old → old + 1). The final value is the
/// number of successful Compare-and-Writes, and no read or compare ever saw a torn block.
#[test]
fn compare_and_write_is_atomic_under_concurrent_writers() {
    const LEN: usize = 32 * 1024; // 64 blocks: a torn copy would show
    const CNT_LBA: u64 = 256;
    let (t, ram) = target(4 << 20);
    let block = |v: u64| -> Vec<u8> { v.to_le_bytes().iter().copied().cycle().take(LEN).collect() };
    let value = |b: &[u8]| -> Option<u64> {
        let v = u64::from_le_bytes(b[..8].try_into().unwrap());
        b.chunks_exact(8).all(|c| c == v.to_le_bytes()).then_some(v)
    };
    ram.write(CNT_LBA * 512, &block(0)).unwrap();
    let successes = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut handles = vec![];
    for kind in 0..5 {
        let (t, successes, stop) = (t.clone(), successes.clone(), stop.clone());
        handles.push(std::thread::spawn(move || {
            let (_a, mut q) = Q::pair(&t);
            let nlb = (LEN / 512) as u32;
            match kind {
                // Compare-and-Write incrementers.
                0..=1 => {
                    for _ in 0..300 {
                        let mut r = rw(io::READ, CNT_LBA, nlb);
                        r.set_sgl_transport(LEN as u32);
                        let (c, d) = q.cmd(r, &[]);
                        assert!(c.status.is_success());
                        let v = value(&d).expect("a read saw a torn counter block");
                        match fused(&mut q, CNT_LBA, &block(v), &block(v + 1)) {
                            (Status::SUCCESS, Status::SUCCESS) => {
                                successes.fetch_add(1, Ordering::SeqCst);
                            }
                            (Status::COMPARE_FAILURE, Status::ABORTED_FUSED_FAIL) => {}
                            other => panic!("unexpected pair outcome {other:?}"),
                        }
                    }
                }
                // Writers around the counter block (below and above it).
                2..=3 => {
                    let mut n = 0u8;
                    while !stop.load(Ordering::Relaxed) {
                        n = n.wrapping_add(1);
                        let lba = if kind == 2 {
                            CNT_LBA - 64
                        } else {
                            CNT_LBA + 64
                        };
                        assert!(write(&mut q, lba, &vec![n; LEN]).is_success());
                    }
                }
                // A reader of the counter block.
                _ => {
                    while !stop.load(Ordering::Relaxed) {
                        let mut r = rw(io::READ, CNT_LBA, nlb);
                        r.set_sgl_transport(LEN as u32);
                        let (c, d) = q.cmd(r, &[]);
                        assert!(c.status.is_success());
                        assert!(value(&d).is_some(), "a read saw a torn counter block");
                    }
                }
            }
        }));
    }
    let incrementers: Vec<_> = handles.drain(..2).collect();
    for h in incrementers {
        h.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().unwrap();
    }
    let mut b = vec![0u8; LEN];
    ram.read(CNT_LBA * 512, &mut b).unwrap();
    let n = successes.load(Ordering::SeqCst);
    assert!(n > 0);
    assert_eq!(value(&b), Some(n));
    assert!(!t.subsystems()[0].namespaces[0].gate.is_locked());
}

/// A RAM namespace that counts its flushes.
#[derive(Debug)]
struct CountingFlush {
    inner: Arc<dyn Backend>,
    flushes: AtomicU64,
}

impl Backend for CountingFlush {
    fn kind(&self) -> ebof_backend::BackendKind {
        self.inner.kind()
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn may_block(&self) -> bool {
        false
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), ebof_backend::BackendError> {
        self.inner.read(offset, buf)
    }
    fn write(&self, offset: u64, buf: &[u8]) -> Result<(), ebof_backend::BackendError> {
        self.inner.write(offset, buf)
    }
    fn flush(&self) -> Result<(), ebof_backend::BackendError> {
        self.flushes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
    fn write_zeroes(&self, offset: u64, len: u64) -> Result<(), ebof_backend::BackendError> {
        self.inner.write_zeroes(offset, len)
    }
    fn deallocate(&self, offset: u64, len: u64) -> Result<(), ebof_backend::BackendError> {
        self.inner.deallocate(offset, len)
    }
    fn allocated_bytes(&self) -> u64 {
        self.inner.allocated_bytes()
    }
}

/// Write Zeroes is written through like a Write: with FUA set, or once the host turned the
/// volatile write cache off, the namespace is flushed before the command completes.
#[test]
fn write_zeroes_honours_fua_and_the_write_cache() {
    let ram = ebof_backend::open(&BackendSpec::Ram { size: 1 << 20 }).unwrap();
    let counting = Arc::new(CountingFlush {
        inner: ram,
        flushes: AtomicU64::new(0),
    });
    let sub = Subsystem {
        nqn: NQN.into(),
        serial: "WZ".into(),
        model: "ebof".into(),
        allow_any_host: true,
        hosts: vec![],
        namespaces: vec![Arc::new(Namespace::new(1, counting.clone(), BS, [4; 16]))],
        ns_hosts: Default::default(),
    };
    let t = Arc::new(Target::new(
        vec![sub],
        vec![],
        TargetLimits::default(),
        Instant::now(),
    ));
    let (mut a, mut q) = Q::pair(&t);
    let flushes = || counting.flushes.load(Ordering::Relaxed);
    assert!(write(&mut q, 0, &pattern(1, 4096)).is_success());
    let wz = |q: &mut Q, cdw12_flags: u32| {
        let mut s = rw(io::WRITE_ZEROES, 0, 0);
        s.set_cdw(12, 7 | cdw12_flags); // 8 blocks (0's based)
        q.cmd(s, &[]).0.status
    };
    let before = flushes();
    assert!(wz(&mut q, 0).is_success());
    assert_eq!(flushes(), before, "write cache on, no FUA: no flush");
    assert_eq!(read(&mut q, 0, 8), vec![0; 4096]);
    assert!(wz(&mut q, 1 << 30).is_success());
    assert_eq!(flushes(), before + 1, "FUA flushes");
    // Deallocate hint too.
    assert!(wz(&mut q, (1 << 30) | (1 << 25)).is_success());
    assert_eq!(flushes(), before + 2);
    // Volatile write cache off (Set Features 06h): every Write Zeroes flushes.
    let mut s = Sqe::new(admin::SET_FEATURES, CommandId(0));
    s.set_cdw(10, 0x06);
    s.set_cdw(11, 0);
    assert!(a.cmd(s, &[]).0.status.is_success());
    assert!(wz(&mut q, 0).is_success());
    assert_eq!(flushes(), before + 3, "write cache off flushes");
}

/// A Write whose data goes straight into a RAM namespace, and that namespace replaced at its
/// NSID before the data is in: the data went into the old namespace (now gone), so the
/// command fails as one to a removed namespace does, and the new namespace is untouched (it
/// used to report success, or, with a new namespace that blocks, run with no data).
#[test]
fn a_direct_write_whose_namespace_was_replaced_fails() {
    let (t, old) = target(1 << 20);
    let (_a, mut q) = Q::pair(&t);
    let data = pattern(5, 4096);
    let mut s = rw(io::WRITE, 0, 8);
    s.set_sgl_transport(4096);
    let (cid, d) = q.submit(s, &[]);
    let Disposition::NeedData { ttag, .. } = d else {
        panic!("expected an R2T, got {d:?}")
    };
    assert!(q.q.direct_target(ttag).is_some(), "RAM: zero copy");
    let new = ebof_backend::open(&BackendSpec::Ram { size: 1 << 20 }).unwrap();
    let ns = Arc::new(Namespace::new(1, new.clone(), BS, [9; 16]));
    t.update_subsystem(NQN, |s| {
        let mut s = s.clone();
        s.namespaces = vec![ns];
        Ok::<_, ()>(s)
    })
    .unwrap();
    // A capsule to the same NSID meanwhile: the queue takes the new namespace.
    assert_eq!(read(&mut q, 8, 1), vec![0; 512]);
    let d = q.q.handle_h2c_data(ttag, 0, &data, true);
    q.step(d);
    let st = q.take(cid).0.status;
    assert_eq!((st.sct, st.sc), (0, 0x0B), "Invalid Namespace: {st:?}");
    let mut got = vec![0; 4096];
    new.read(0, &mut got).unwrap();
    assert_eq!(got, vec![0; 4096], "nothing reached the new namespace");
    old.read(0, &mut got).unwrap();
    assert_eq!(got, data, "the data had gone into the old one");
    // The queue goes on.
    assert!(write(&mut q, 0, &data).is_success());
    assert_eq!(read(&mut q, 0, 8), data);
}
