//! Compare, Copy, Verify and fused Compare-and-Write through the real server (reactors,
//! sockets, both I/O engines): the commands the io_uring engine does not run go to the worker
//! pool, and a Compare-and-Write waiting for its namespace's gate is retried by the reactor.

mod common;

use common::client::*;
use common::{Scratch, engines, file_backend};
use nvme_spec::opcode::io;
use nvme_spec::sqe::{FUSE_FIRST, FUSE_SECOND};
use nvme_spec::{CommandId, Cqe, Sqe, Status};
use nvmf_tcp::HostEvent;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// A fused Compare (first) and Write (second) sent back to back in one segment, each answered
/// with its own R2T; returns (Compare's CQE, Write's CQE).
fn fused_pair(c: &mut Client, slba: u64, cmp: &[u8], new: &[u8]) -> (Cqe, Cqe) {
    let nlb = (cmp.len() / 512) as u32;
    let mut first = rw(io::COMPARE, slba, nlb);
    first.set_fuse(FUSE_FIRST);
    first.set_cid(CommandId(0xF001));
    let mut second = rw(io::WRITE, slba, nlb);
    second.set_fuse(FUSE_SECOND);
    second.set_cid(CommandId(0xF002));
    let mut out = Vec::new();
    c.host.encode_capsule(&mut out, &first, &[]);
    c.host.encode_capsule(&mut out, &second, &[]);
    c.s.write_all(&out).unwrap();
    let (mut a, mut b) = (None, None);
    while a.is_none() || b.is_none() {
        match c.next() {
            (HostEvent::R2t(r), _) => c.answer_r2t(&r, if r.cccid == 0xF001 { cmp } else { new }),
            (HostEvent::Response(cqe), _) if cqe.cid == 0xF001 => a = Some(cqe),
            (HostEvent::Response(cqe), _) if cqe.cid == 0xF002 => b = Some(cqe),
            other => panic!("{other:?}"),
        }
    }
    (a.unwrap(), b.unwrap())
}

fn write(c: &mut Client, slba: u64, data: &[u8]) -> Status {
    c.cmd(rw(io::WRITE, slba, (data.len() / 512) as u32), data, false)
        .0
        .status
}

fn read(c: &mut Client, slba: u64, nlb: u32) -> Vec<u8> {
    let (cqe, d) = c.cmd(rw(io::READ, slba, nlb), &[], false);
    assert!(cqe.status.is_success(), "{cqe:?}");
    d
}

fn commands_roundtrip(srv: &Running) {
    let (_admin, mut q) = session(srv.addr, false);
    let old: Vec<u8> = (0..4096).map(|i| (i % 251) as u8).collect();
    let new: Vec<u8> = (0..4096).map(|i| (i % 13) as u8).collect();
    assert!(write(&mut q, 64, &old).is_success());
    // Compare: equal, then different.
    let mut cmp = rw(io::COMPARE, 64, 8);
    assert!(q.cmd(cmp, &old, false).0.status.is_success());
    cmp = rw(io::COMPARE, 64, 8);
    assert_eq!(q.cmd(cmp, &new, false).0.status, Status::COMPARE_FAILURE);
    // Copy LBA 64..72 to 1024, read back; Verify it.
    let mut copy = Sqe::new(io::COPY, CommandId(0));
    copy.set_nsid(nvme_spec::NamespaceId(1));
    copy.set_slba(1024);
    let mut desc = [0u8; 32];
    desc[8..16].copy_from_slice(&64u64.to_le_bytes());
    desc[16..18].copy_from_slice(&7u16.to_le_bytes());
    assert!(q.cmd(copy, &desc, true).0.status.is_success());
    assert_eq!(read(&mut q, 1024, 8), old);
    let mut verify = rw(io::VERIFY, 1024, 8);
    verify.set_sgl_transport(0);
    assert!(q.cmd(verify, &[], false).0.status.is_success());
    // Compare-and-Write: a match writes, a miscompare does not.
    let (a, b) = fused_pair(&mut q, 64, &old, &new);
    assert!(
        a.status.is_success() && b.status.is_success(),
        "{a:?} {b:?}"
    );
    assert_eq!(read(&mut q, 64, 8), new);
    let (a, b) = fused_pair(&mut q, 64, &old, &old);
    assert_eq!(
        (a.status, b.status),
        (Status::COMPARE_FAILURE, Status::ABORTED_FUSED_FAIL)
    );
    assert_eq!(read(&mut q, 64, 8), new);
}

#[test]
fn commands_on_ram() {
    let srv = start(Duration::from_micros(50));
    commands_roundtrip(&srv);
}

/// File namespace: Compare, Copy, Verify and the pair run on the worker pool (under both
/// engines, with and without polling).
#[test]
fn commands_on_a_file_backend() {
    let path = Scratch::new("cmds");
    let backend = file_backend(&path.0, false).unwrap();
    for (engine, poll) in engines() {
        let srv = start_with(poll, backend.clone(), |c| c.engine = engine);
        commands_roundtrip(&srv);
    }
}

/// Two connections increment a counter block with Compare-and-Write while a third hammers
/// writes next to it and a fourth reads it: the counter ends at the number of successful
/// pairs and no read sees a torn block (two reactors, so the queues are on different threads).
#[test]
fn compare_and_write_is_atomic_over_loopback() {
    const NLB: u32 = 64; // 32 KiB
    const LBA: u64 = 4096;
    let backend = common::ram(32 << 20);
    let srv = start_with(Duration::from_micros(50), backend, |c| c.cores = vec![0, 1]);
    let block = |v: u64| -> Vec<u8> {
        v.to_le_bytes()
            .iter()
            .copied()
            .cycle()
            .take(NLB as usize * 512)
            .collect()
    };
    let value = |b: &[u8]| -> Option<u64> {
        let v = u64::from_le_bytes(b[..8].try_into().unwrap());
        b.chunks_exact(8).all(|c| c == v.to_le_bytes()).then_some(v)
    };
    let (_a0, mut q0) = session(srv.addr, false);
    assert!(write(&mut q0, LBA, &block(0)).is_success());
    let ok = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let addr = srv.addr;
    let mut bg = vec![];
    for kind in 0..2 {
        let stop = stop.clone();
        bg.push(std::thread::spawn(move || {
            let (_a, mut q) = session(addr, false);
            let mut n = 0u8;
            while !stop.load(Ordering::Relaxed) {
                if kind == 0 {
                    n = n.wrapping_add(1);
                    assert!(write(&mut q, LBA + u64::from(NLB), &vec![n; 32 * 1024]).is_success());
                } else {
                    let d = read(&mut q, LBA, NLB);
                    assert!(value(&d).is_some(), "a read saw a torn counter block");
                }
            }
        }));
    }
    let incs: Vec<_> = (0..2)
        .map(|_| {
            let ok = ok.clone();
            std::thread::spawn(move || {
                let (_a, mut q) = session(addr, false);
                for _ in 0..150 {
                    let v = value(&read(&mut q, LBA, NLB)).expect("torn counter block");
                    let (a, b) = fused_pair(&mut q, LBA, &block(v), &block(v + 1));
                    match (a.status, b.status) {
                        (Status::SUCCESS, Status::SUCCESS) => {
                            ok.fetch_add(1, Ordering::SeqCst);
                        }
                        (Status::COMPARE_FAILURE, Status::ABORTED_FUSED_FAIL) => {}
                        other => panic!("{other:?}"),
                    }
                }
            })
        })
        .collect();
    for h in incs {
        h.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    for h in bg {
        h.join().unwrap();
    }
    let n = ok.load(Ordering::SeqCst);
    assert!(n > 0);
    assert_eq!(value(&read(&mut q0, LBA, NLB)), Some(n));
}
