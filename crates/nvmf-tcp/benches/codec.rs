//! Decode/encode throughput of the data-path PDUs, std only (`cargo bench -p nvmf-tcp`).
//! Prints PDUs/s and GB/s for a pre-encoded stream decoded through `TargetConn::decode_one` /
//! `HostConn::decode_one`, with digests off and on.

use nvme_spec::{CommandId, Cqe, QueueId, Sqe, Status};
use nvmf_tcp::pdu::{self, DataHdr, IcReq, IcResp};
use nvmf_tcp::{Digests, HostConn, HostConnConfig, TargetConn, TargetConnConfig, TargetEvent};
use std::hint::black_box;
use std::time::Instant;

const ROUNDS: usize = 20;

fn report(name: &str, pdus: usize, bytes: usize, secs: f64) {
    println!(
        "{name:<44} {:>8.2} M PDUs/s {:>7.2} GB/s",
        pdus as f64 / secs / 1e6,
        bytes as f64 / secs / 1e9
    );
}

/// Capsules (no data) + 4 KiB H2CData through the target decoder.
fn bench_target(dig: Digests, data_len: usize) {
    let cfg = TargetConnConfig {
        maxh2cdata: 1 << 20,
        max_ttags: 1024,
        ..Default::default()
    };
    let n = 1024usize;
    let mut stream = Vec::new();
    pdu::encode_ic_req(
        &mut stream,
        &IcReq {
            pfv: 0,
            hpda: 0,
            digests: dig,
            maxr2t: 0,
        },
    );
    let ic_len = stream.len();
    let data = vec![0xA5u8; data_len];
    for i in 0..n {
        let mut sqe = Sqe::new(0x01, CommandId(i as u16));
        sqe.set_sgl_transport(data_len as u32);
        pdu::encode_capsule_cmd(&mut stream, dig, 0, &sqe, &[]);
        let d = DataHdr {
            cccid: i as u16,
            ttag: i as u16,
            datao: 0,
            datal: 0,
            last: true,
            success: false,
        };
        pdu::encode_h2c_data(&mut stream, dig, 0, &d, &data);
    }
    let mut total = std::time::Duration::ZERO;
    let mut out = Vec::with_capacity(4096);
    for _ in 0..ROUNDS {
        let mut t = TargetConn::new(cfg);
        let (_, k) = t.decode_one(&stream, &mut out).unwrap().unwrap();
        assert_eq!(k, ic_len);
        for i in 0..n {
            t.send_r2t(&mut out, i as u16, i as u16, 0, data_len as u32);
        }
        out.clear();
        let start = Instant::now();
        let mut pos = ic_len;
        while let Some((ev, k)) = t.decode_one(&stream[pos..], &mut out).unwrap() {
            if let TargetEvent::H2cData { data, .. } = &ev {
                black_box(data.len());
            }
            black_box(&ev);
            pos += k;
        }
        total += start.elapsed();
        assert_eq!(pos, stream.len());
    }
    let name = format!(
        "target: capsule + H2CData {data_len} B, hd={} dd={}",
        dig.hdgst, dig.ddgst
    );
    report(
        &name,
        2 * n * ROUNDS,
        (stream.len() - ic_len) * ROUNDS,
        total.as_secs_f64(),
    );
}

/// C2HData + CapsuleResp through the host decoder.
fn bench_host(dig: Digests, data_len: usize) {
    let n = 1024usize;
    let mut stream = Vec::new();
    let data = vec![0x5Au8; data_len];
    for i in 0..n {
        let d = DataHdr {
            cccid: i as u16,
            ttag: 0,
            datao: 0,
            datal: 0,
            last: true,
            success: false,
        };
        pdu::encode_c2h_data(&mut stream, dig, 0, &d, &data);
        pdu::encode_capsule_resp(
            &mut stream,
            dig,
            &Cqe::new(CommandId(i as u16), QueueId(1), Status::SUCCESS),
        );
    }
    let mut icresp = Vec::new();
    pdu::encode_ic_resp(
        &mut icresp,
        &IcResp {
            pfv: 0,
            cpda: 0,
            digests: dig,
            maxh2cdata: 1 << 20,
        },
    );
    let mut total = std::time::Duration::ZERO;
    for _ in 0..ROUNDS {
        let mut h = HostConn::new(HostConnConfig {
            digests: dig,
            ..Default::default()
        });
        h.encode_icreq(&mut Vec::new());
        h.decode_one(&icresp).unwrap().unwrap();
        let start = Instant::now();
        let mut pos = 0;
        while let Some((ev, k)) = h.decode_one(&stream[pos..]).unwrap() {
            black_box(&ev);
            pos += k;
        }
        total += start.elapsed();
        assert_eq!(pos, stream.len());
    }
    let name = format!(
        "host: C2HData {data_len} B + resp, hd={} dd={}",
        dig.hdgst, dig.ddgst
    );
    report(
        &name,
        2 * n * ROUNDS,
        stream.len() * ROUNDS,
        total.as_secs_f64(),
    );
}

/// Encoding C2HData (split at 128 KiB) + CapsuleResp into one batch buffer.
fn bench_encode(dig: Digests, data_len: usize) {
    let mut t = TargetConn::new(TargetConnConfig::default());
    let mut ic = Vec::new();
    pdu::encode_ic_req(
        &mut ic,
        &IcReq {
            pfv: 0,
            hpda: 0,
            digests: dig,
            maxr2t: 0,
        },
    );
    t.decode_one(&ic, &mut Vec::new()).unwrap().unwrap();
    let data = vec![1u8; data_len];
    let n = 1024usize;
    let mut out = Vec::with_capacity(n * (data_len + 64));
    let start = Instant::now();
    for _ in 0..ROUNDS {
        out.clear();
        for i in 0..n {
            t.encode_c2h_data(&mut out, i as u16, 0, &data, true, false);
            t.encode_resp(
                &mut out,
                &Cqe::new(CommandId(i as u16), QueueId(1), Status::SUCCESS),
            );
        }
        black_box(&out);
    }
    let name = format!(
        "encode: C2HData {data_len} B + resp, hd={} dd={}",
        dig.hdgst, dig.ddgst
    );
    report(
        &name,
        2 * n * ROUNDS,
        out.len() * ROUNDS,
        start.elapsed().as_secs_f64(),
    );
}

fn main() {
    for dig in [Digests::NONE, Digests::BOTH] {
        bench_target(dig, 4096);
        bench_host(dig, 4096);
        bench_host(dig, 512);
        bench_encode(dig, 4096);
    }
}
