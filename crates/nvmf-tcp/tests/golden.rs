//! Golden byte vectors built by hand from the NVMe/TCP 1.0 and NVMe-oF layouts, matching what the
//! Linux 6.1 initiator (drivers/nvme/host/tcp.c `nvme_tcp_init_connection`,
//! `nvme_tcp_setup_cmd_pdu`) puts on the wire.

mod common;

use common::*;
use nvme_spec::Sqe;
use nvmf_tcp::{Digests, HostConnConfig, TargetConn, TargetConnConfig, TargetEvent};

/// The ICReq Linux sends: type 0, flags 0, HLEN 128, PDO 0, PLEN 128, PFV 0, HPDA 0 ("no alignment
/// constraint"), DGST from the hdr_digest/data_digest options, MAXR2T 0 ("single inflight r2t").
fn linux_icreq(hdgst: bool, ddgst: bool) -> [u8; 128] {
    let mut b = [0u8; 128];
    b[0] = 0x00; // PDU-Type ICReq
    b[1] = 0x00; // FLAGS
    b[2] = 0x80; // HLEN 128
    b[3] = 0x00; // PDO
    b[4..8].copy_from_slice(&[0x80, 0x00, 0x00, 0x00]); // PLEN 128
    b[8..10].copy_from_slice(&[0x00, 0x00]); // PFV 0
    b[10] = 0x00; // HPDA
    b[11] = u8::from(hdgst) | (u8::from(ddgst) << 1); // DGST
    b[12..16].copy_from_slice(&[0, 0, 0, 0]); // MAXR2T 0
    b
}

#[test]
fn linux_icreq_decodes_and_gets_the_expected_icresp() {
    for (hd, dd) in [(false, false), (true, false), (false, true), (true, true)] {
        let cfg = TargetConnConfig {
            maxh2cdata: 0x0002_0000,
            cpda: 0,
            ..Default::default()
        };
        let mut t = TargetConn::new(cfg);
        let mut out = Vec::new();
        let ic = linux_icreq(hd, dd);
        // Byte by byte: nothing happens until the 128th byte.
        for n in 0..128 {
            assert_eq!(t.decode_one(&ic[..n], &mut out).unwrap(), None);
        }
        let (ev, n) = t.decode_one(&ic, &mut out).unwrap().unwrap();
        assert_eq!(n, 128);
        let digests = Digests {
            hdgst: hd,
            ddgst: dd,
        };
        assert_eq!(
            ev,
            TargetEvent::Established {
                hpda: 0,
                digests,
                maxr2t: 0
            }
        );
        assert_eq!(t.digests(), digests);

        let mut want = [0u8; 128];
        want[..8].copy_from_slice(&[0x01, 0x00, 0x80, 0x00, 0x80, 0x00, 0x00, 0x00]);
        want[8..10].copy_from_slice(&[0x00, 0x00]); // PFV
        want[10] = 0x00; // CPDA
        want[11] = ic[11]; // DGST echoed
        want[12..16].copy_from_slice(&[0x00, 0x00, 0x02, 0x00]); // MAXH2CDATA 128 KiB
        assert_eq!(out, want);
    }
}

#[test]
fn our_host_sends_the_same_icreq_as_linux() {
    for digests in [
        Digests::NONE,
        Digests::BOTH,
        Digests {
            hdgst: true,
            ddgst: false,
        },
    ] {
        let mut h = nvmf_tcp::HostConn::new(HostConnConfig {
            digests,
            hpda: 0,
            maxr2t: 0,
            max_c2h_data: 1 << 20,
        });
        let mut out = Vec::new();
        h.encode_icreq(&mut out);
        assert_eq!(out, linux_icreq(digests.hdgst, digests.ddgst));
    }
}

/// A Linux admin-queue Fabrics Connect capsule: opcode 7Fh, PSDT SGL (flags 40h), FCTYPE 01h,
/// SGL1 = in-capsule data block (01h), offset 0, length 1024; RECFMT 0, QID 0, SQSIZE 31
/// (NVME_AQ_DEPTH 32, 0's based), CATTR 0, KATO 5000 ms; 1024 bytes of Connect data
/// (HOSTID, CNTLID FFFFh, SUBNQN, HOSTNQN). PDO = HLEN + HDGST (Linux never pads: CPDA 0).
fn linux_connect(hdgst: bool, ddgst: bool) -> (Vec<u8>, [u8; 64], Vec<u8>) {
    let mut sqe = [0u8; 64];
    sqe[0] = 0x7F; // OPC Fabrics
    sqe[1] = 0x40; // PSDT = 01b
    sqe[2..4].copy_from_slice(&0x0000u16.to_le_bytes()); // CID
    sqe[4] = 0x01; // FCTYPE Connect
    sqe[24..32].copy_from_slice(&0u64.to_le_bytes()); // SGL1 address (offset) 0
    sqe[32..36].copy_from_slice(&1024u32.to_le_bytes()); // SGL1 length
    sqe[39] = 0x01; // Data Block, Offset
    sqe[40..42].copy_from_slice(&0u16.to_le_bytes()); // RECFMT
    sqe[42..44].copy_from_slice(&0u16.to_le_bytes()); // QID
    sqe[44..46].copy_from_slice(&31u16.to_le_bytes()); // SQSIZE
    sqe[46] = 0; // CATTR
    sqe[48..52].copy_from_slice(&5000u32.to_le_bytes()); // KATO

    let mut data = vec![0u8; 1024];
    data[..16].copy_from_slice(&[0x11; 16]); // HOSTID
    data[16..18].copy_from_slice(&0xFFFFu16.to_le_bytes()); // CNTLID: dynamic
    let subnqn = b"nqn.2024-01.io.ebof:test";
    data[256..256 + subnqn.len()].copy_from_slice(subnqn);
    let hostnqn = b"nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001";
    data[512..512 + hostnqn.len()].copy_from_slice(hostnqn);

    let hd = if hdgst { 4 } else { 0 };
    let dd = if ddgst { 4 } else { 0 };
    let pdo = 72 + hd;
    let plen = pdo + 1024 + dd;
    let mut b = vec![
        0x04,                                     // PDU-Type CapsuleCmd
        u8::from(hdgst) | (u8::from(ddgst) << 1), // FLAGS: HDGSTF, DDGSTF
        72,                                       // HLEN
        pdo as u8,                                // PDO
    ];
    b.extend_from_slice(&(plen as u32).to_le_bytes());
    b.extend_from_slice(&sqe);
    if hdgst {
        let d = nvmf_tcp::digest::crc32c(&b[..72]);
        b.extend_from_slice(&d.to_le_bytes());
    }
    b.extend_from_slice(&data);
    if ddgst {
        b.extend_from_slice(&nvmf_tcp::digest::crc32c(&data).to_le_bytes());
    }
    assert_eq!(b.len(), plen);
    (b, sqe, data)
}

#[test]
fn linux_admin_connect_capsule_decodes() {
    for (hd, dd) in [(false, false), (true, true), (true, false), (false, true)] {
        let digests = Digests {
            hdgst: hd,
            ddgst: dd,
        };
        let mut t = established_target(TargetConnConfig::default(), digests, 0);
        let (b, sqe, data) = linux_connect(hd, dd);
        let mut out = Vec::new();
        let (ev, n) = t.decode_one(&b, &mut out).unwrap().unwrap();
        assert_eq!(n, b.len());
        let TargetEvent::Command { sqe: got, icd } = ev else {
            panic!("{ev:?}")
        };
        assert_eq!(got, Sqe(sqe));
        assert_eq!(got.opcode(), 0x7F);
        assert_eq!(got.fctype(), 0x01);
        assert_eq!(got.sgl_type(), 0x01);
        assert_eq!(got.sgl_len(), 1024);
        assert_eq!(u16::from_le_bytes([got.0[44], got.0[45]]), 31);
        assert_eq!(icd, &data[..]);
        assert!(out.is_empty());

        // Our host encodes exactly the same bytes.
        let h = established_host(
            HostConnConfig {
                digests,
                ..Default::default()
            },
            0,
            4096,
        );
        let mut enc = Vec::new();
        h.encode_capsule(&mut enc, &Sqe(sqe), &data);
        assert_eq!(enc, b);
    }
}

#[test]
fn c2h_term_req_golden() {
    // A header digest error on a CapsuleCmd with digests on: FES 03h, FEI 0, 76 bytes echoed.
    let mut t = established_target(TargetConnConfig::default(), Digests::BOTH, 0);
    let (mut b, _, _) = linux_connect(true, true);
    b[72] ^= 0xFF;
    let e = target_err(&mut t, &b);
    let mut out = Vec::new();
    t.encode_term_req(&mut out, &e);
    let mut want = vec![
        0x03, 0x00, 0x18, 0x00, 100, 0x00, 0x00, 0x00, 0x03, 0x00, 0, 0, 0, 0,
    ];
    want.extend_from_slice(&[0; 10]);
    want.extend_from_slice(&b[..76]);
    assert_eq!(out, want);
}
