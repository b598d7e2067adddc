//! End-to-end over loopback: the real server (reactor threads, sockets) against a minimal
//! blocking host built on `nvmf-tcp`'s host role, plus hostile input on raw sockets — each
//! malformed PDU gets the right C2HTermReq and the target keeps serving other connections.

mod common;

use common::client::*;
use common::{Scratch, engines, file_backend};
use nvme_spec::opcode::{admin, io};
use nvme_spec::{CommandId, NamespaceId, Sqe};
use nvmf_tcp::HostEvent;
use nvmf_tcp::pdu::pdu_type;
use std::io::{Read, Write};
use std::time::Duration;

#[test]
fn io_roundtrip_over_loopback() {
    for poll in [Duration::ZERO, Duration::from_micros(50)] {
        io_roundtrip(&start(poll));
    }
}

/// A file backend: its I/O runs on the reactor's engine (io_uring ring, or the worker pool)
/// and comes back to the reactor (RAM runs inline and zero-copy instead).
#[test]
fn io_roundtrip_on_a_file_backend() {
    let path = Scratch::new("file");
    let backend = file_backend(&path.0, false).unwrap();
    assert!(backend.may_block());
    for (engine, poll) in engines() {
        let srv = start_with(poll, backend.clone(), |c| c.engine = engine);
        io_roundtrip(&srv);
        fua_flush_zeroes_roundtrip(&srv);
    }
}

/// O_DIRECT: the engines go through aligned bounce buffers. Skipped (with the reason) where
/// the file system refuses O_DIRECT.
#[test]
fn io_roundtrip_on_a_direct_file_backend() {
    let path = Scratch::new("direct");
    let backend = match file_backend(&path.0, true) {
        Ok(b) => b,
        Err(e) => {
            println!("skipped: this file system refuses O_DIRECT ({e})");
            return;
        }
    };
    let granularity = backend.raw_io().and_then(|r| r.direct).unwrap();
    // The helpers use 512-byte LBAs at offsets and lengths that are multiples of 4096.
    assert!(granularity <= 4096, "direct-I/O granularity {granularity}");
    for (engine, poll) in engines() {
        let srv = start_with(poll, backend.clone(), |c| c.engine = engine);
        io_roundtrip(&srv);
        fua_flush_zeroes_roundtrip(&srv);
    }
}

/// FUA writes (write-through), Flush, Write Zeroes and Dataset Management deallocate (the
/// last two on the worker pool under io_uring) read back as written.
fn fua_flush_zeroes_roundtrip(srv: &Running) {
    const FUA: u32 = 1 << 30;
    let (_a, mut q) = session(srv.addr, false);
    let data: Vec<u8> = (0..64 * 1024).map(|i| (i % 241) as u8 + 1).collect();
    let mut w = rw(io::WRITE, 4096, 128);
    w.set_cdw(12, w.cdw12() | FUA);
    assert!(q.cmd(w, &data, false).0.status.is_success());
    let (c, back) = q.cmd(rw(io::READ, 4096, 128), &[], false);
    assert!(c.status.is_success());
    assert_eq!(back, data);
    let mut f = Sqe::new(io::FLUSH, CommandId(0));
    f.set_nsid(NamespaceId(1));
    assert!(q.cmd(f, &[], false).0.status.is_success());
    // Write Zeroes of blocks 4104..4112.
    let mut wz = Sqe::new(io::WRITE_ZEROES, CommandId(0));
    wz.set_nsid(NamespaceId(1));
    wz.set_slba(4104);
    wz.set_nlb(8);
    assert!(q.cmd(wz, &[], false).0.status.is_success());
    // Deallocate blocks 4120..4128: one range (context attributes, NLB, SLBA).
    let mut range = [0u8; 16];
    range[4..8].copy_from_slice(&8u32.to_le_bytes());
    range[8..16].copy_from_slice(&4120u64.to_le_bytes());
    let mut dsm = Sqe::new(io::DATASET_MGMT, CommandId(0));
    dsm.set_nsid(NamespaceId(1));
    dsm.set_cdw(11, nvme_spec::opcode::DSM_ATTR_DEALLOCATE);
    assert!(q.cmd(dsm, &range, true).0.status.is_success());
    let mut expect = data.clone();
    expect[8 * 512..16 * 512].fill(0);
    expect[24 * 512..32 * 512].fill(0);
    let (c, back) = q.cmd(rw(io::READ, 4096, 128), &[], false);
    assert!(c.status.is_success());
    assert!(back == expect, "zeroed ranges read back wrong");
}

/// Truncate or extend the file at `path` (under the target's feet).
fn set_file_len(path: &std::path::Path, len: u64) {
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.set_len(len).unwrap();
}

/// A file truncated under the running target: a read past the new end, or across it, is an
/// error status with no data (not zeroes, not success), on both engines; the part still
/// inside the file reads fine.
#[test]
fn read_past_the_end_of_a_truncated_file_is_an_error() {
    let path = Scratch::new("truncated");
    let backend = file_backend(&path.0, false).unwrap();
    for (engine, poll) in engines() {
        let srv = start_with(poll, backend.clone(), |c| c.engine = engine);
        let (_a, mut q) = session(srv.addr, false);
        let data: Vec<u8> = (0..64 * 1024).map(|i| (i % 239) as u8 + 1).collect();
        // Blocks 32640..32768 straddle 16 MiB (block 32768).
        assert!(
            q.cmd(rw(io::WRITE, 32640, 128), &data, false)
                .0
                .status
                .is_success()
        );
        set_file_len(&path.0, 16 << 20);
        for (slba, what) in [(40000, "past the end"), (32704, "across the end")] {
            let (c, back) = q.cmd(rw(io::READ, slba, 128), &[], false);
            assert_eq!(
                c.status,
                nvme_spec::Status::UNRECOVERED_READ.with_dnr(true),
                "{engine:?}: read {what}"
            );
            assert!(back.is_empty(), "{engine:?}: read {what} returned data");
        }
        let (c, back) = q.cmd(rw(io::READ, 32640, 64), &[], false);
        assert!(c.status.is_success(), "{engine:?}: {:?}", c.status);
        assert_eq!(back, &data[..32 * 1024]);
        // Grow it back for the next engine.
        set_file_len(&path.0, 32 << 20);
    }
}

fn io_roundtrip(srv: &Running) {
    for digests in [false, true] {
        let (_a, mut q) = session(srv.addr, digests);
        let data: Vec<u8> = (0..128 * 1024).map(|i| (i % 251) as u8).collect();
        let (c, _) = q.cmd(rw(io::WRITE, 0, 256), &data, false);
        assert!(c.status.is_success());
        let (c, _) = q.cmd(rw(io::WRITE, 1000, 8), &data[..4096], true);
        assert!(c.status.is_success());
        let (c, back) = q.cmd(rw(io::READ, 0, 256), &[], false);
        assert!(c.status.is_success());
        assert_eq!(back, data);
        let (_, back) = q.cmd(rw(io::READ, 1000, 8), &[], false);
        assert_eq!(back, &data[..4096]);
        let mut f = Sqe::new(io::FLUSH, CommandId(0));
        f.set_nsid(NamespaceId(1));
        assert!(q.cmd(f, &[], false).0.status.is_success());
    }
}

#[test]
fn hostile_input_gets_term_req_and_target_keeps_serving() {
    let srv = start(Duration::ZERO);
    let addr = srv.addr;
    // A healthy session that must survive everything below.
    let (_a, mut q) = session(addr, false);

    // Bad HLEN.
    let mut b = icreq();
    b[2] = 100;
    let (fes, fei, echo) = provoke(addr, false, &b).unwrap();
    assert_eq!((fes, fei), (1, 2));
    assert!((8..=128).contains(&echo), "echoed header of {echo} bytes");
    // Bad PLEN on ICReq.
    let mut b = icreq();
    b[4] = 129;
    assert_eq!(provoke(addr, false, &b).map(|x| (x.0, x.1)), Some((1, 4)));
    // PFV != 0 → Unsupported Parameter.
    let mut b = icreq();
    b[8] = 1;
    assert_eq!(provoke(addr, false, &b).map(|x| (x.0, x.1)), Some((6, 8)));
    // Data before ICReq → PDU Sequence Error.
    let c = capsule(&Sqe::new(admin::KEEP_ALIVE, CommandId(1)));
    assert_eq!(provoke(addr, false, &c).map(|x| x.0), Some(2));
    // Second ICReq.
    assert_eq!(provoke(addr, true, &icreq()).map(|x| x.0), Some(2));
    // Unknown PDU type.
    let mut u = capsule(&Sqe::default());
    u[0] = 0x0F;
    assert_eq!(provoke(addr, true, &u).map(|x| (x.0, x.1)), Some((1, 0)));
    // Bad PDO on a capsule.
    let mut p = capsule(&Sqe::default());
    p[3] = 12;
    assert_eq!(provoke(addr, true, &p).map(|x| (x.0, x.1)), Some((1, 3)));
    // Header digest mismatch (digests negotiated, then a wrong HDGST).
    {
        let mut s = Client::raw(addr);
        let mut b = icreq();
        b[11] = 1; // HDGST_ENABLE
        s.write_all(&b).unwrap();
        let mut resp = [0u8; 128];
        s.read_exact(&mut resp).unwrap();
        assert_eq!(resp[11] & 1, 1);
        let mut c = capsule(&Sqe::new(admin::KEEP_ALIVE, CommandId(1)));
        c[1] = 1; // HDGSTF
        c[4..8].copy_from_slice(&76u32.to_le_bytes());
        c.extend_from_slice(&[0xDE, 0xAD, 0xBE, 0xEF]);
        s.write_all(&c).unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).unwrap();
        assert_eq!(got[0], pdu_type::C2H_TERM_REQ);
        assert_eq!(u16::from_le_bytes([got[8], got[9]]), 3);
    }
    // H2CData with a TTAG never issued.
    assert_eq!(
        provoke(addr, true, &h2c(1, 77, 0, 512)).map(|x| (x.0, x.1)),
        Some((1, 10))
    );
    // H2CData with a bad offset / over MAXH2CDATA, on a connected I/O queue with an R2T out.
    for (datao, datal, want) in [(512u32, 512u32, 4u16), (0, 256 * 1024, 5)] {
        let (_a2, q2) = session(addr, false);
        let mut s = q2.s;
        let mut cmd = capsule(&rw(io::WRITE, 0, 256));
        cmd[10..12].copy_from_slice(&9u16.to_le_bytes()); // cid 9
        s.write_all(&cmd).unwrap();
        let mut r2t = [0u8; 24];
        s.read_exact(&mut r2t).unwrap();
        assert_eq!(r2t[0], pdu_type::R2T);
        let ttag = u16::from_le_bytes([r2t[10], r2t[11]]);
        s.write_all(&h2c(9, ttag, datao, datal)).unwrap();
        let mut got = Vec::new();
        let _ = s.read_to_end(&mut got);
        assert_eq!(
            got[0],
            pdu_type::C2H_TERM_REQ,
            "datao {datao} datal {datal}"
        );
        assert_eq!(u16::from_le_bytes([got[8], got[9]]), want);
    }
    // Truncated connection: half a capsule then close — simply closed, no TermReq needed.
    {
        let mut s = Client::raw(addr);
        s.write_all(&icreq()).unwrap();
        let mut resp = [0u8; 128];
        s.read_exact(&mut resp).unwrap();
        s.write_all(&capsule(&Sqe::default())[..40]).unwrap();
        drop(s);
    }
    // Data digest mismatch: not fatal (ADR 0003) — the command fails with Transient Transport
    // Error, nothing is written, and the connection keeps working.
    {
        let (_a3, mut d) = session(addr, true);
        let mut sqe = rw(io::WRITE, 20, 8);
        sqe.set_cid(CommandId(0x77));
        sqe.set_sgl_icd(4096);
        let mut out = Vec::new();
        d.host.encode_capsule(&mut out, &sqe, &[0xEE; 4096]);
        let last = out.len() - 1;
        out[last] ^= 0xFF; // corrupt DDGST
        d.s.write_all(&out).unwrap();
        match d.next() {
            (HostEvent::Response(c), _) => {
                assert_eq!(c.cid, 0x77);
                assert_eq!(c.status, nvme_spec::Status::TRANSIENT_TRANSPORT);
            }
            other => panic!("{other:?}"),
        }
        let (c, back) = d.cmd(rw(io::READ, 20, 8), &[], false);
        assert!(c.status.is_success());
        assert!(
            back.iter().all(|&b| b != 0xEE),
            "corrupted write must not land"
        );
    }
    // The healthy session still works.
    let data = vec![0x5Au8; 4096];
    assert!(
        q.cmd(rw(io::WRITE, 10, 8), &data, true)
            .0
            .status
            .is_success()
    );
    let (c, back) = q.cmd(rw(io::READ, 10, 8), &[], false);
    assert!(c.status.is_success());
    assert_eq!(back, data);
}

/// A backend read error reaches the host as the command's status, without data, over the real
/// server; the queue keeps working.
#[test]
fn backend_read_error_over_loopback() {
    let backend = common::FailingBackend::new(32 << 20, 2048 * 512..2049 * 512);
    let srv = start_on(Duration::ZERO, backend);
    for digests in [false, true] {
        let (_a, mut q) = session(srv.addr, digests);
        let data: Vec<u8> = (0..128 * 1024).map(|i| (i % 253) as u8).collect();
        let (c, _) = q.cmd(rw(io::WRITE, 2048 - 128, 256), &data, false);
        assert!(c.status.is_success());
        let (c, back) = q.cmd(rw(io::READ, 2048 - 128, 256), &[], false);
        assert_eq!(c.status, nvme_spec::Status::UNRECOVERED_READ);
        assert!(back.is_empty());
        let (c, back) = q.cmd(rw(io::READ, 2048 - 128, 128), &[], false);
        assert!(c.status.is_success());
        assert_eq!(back, &data[..64 * 1024]);
    }
}
