//! A target and a host talking through byte vectors, no sockets: ICReq/ICResp, a write with
//! in-capsule data, a write with R2T and split H2CData, a read with split C2HData then
//! CapsuleResp, and a read with the SUCCESS shortcut — with digests off and on, HPDA 0 and 3.

mod common;

use nvme_spec::{CommandId, Cqe, QueueId, Sqe, Status};
use nvmf_tcp::pdu::data_pdo;
use nvmf_tcp::{
    Digests, HostConn, HostConnConfig, HostEvent, TargetConn, TargetConnConfig, TargetEvent,
};

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Decode all target-bound PDUs in `buf` (consuming them), in chunks of `chunk` bytes.
fn pump_target<'a>(
    t: &mut TargetConn,
    buf: &'a [u8],
    out: &mut Vec<u8>,
) -> Vec<(TargetEvent<'a>, usize)> {
    let mut evs = Vec::new();
    let mut pos = 0;
    while let Some((ev, n)) = t.decode_one(&buf[pos..], out).unwrap() {
        evs.push((ev, pos));
        pos += n;
    }
    assert_eq!(pos, buf.len(), "all bytes consumed");
    evs
}

fn pump_host<'a>(h: &mut HostConn, buf: &'a [u8]) -> Vec<(HostEvent<'a>, usize)> {
    let mut evs = Vec::new();
    let mut pos = 0;
    while let Some((ev, n)) = h.decode_one(&buf[pos..]).unwrap() {
        evs.push((ev, pos));
        pos += n;
    }
    assert_eq!(pos, buf.len(), "all bytes consumed");
    evs
}

fn run_pair(digests: Digests, hpda: u8, cpda: u8) {
    let tcfg = TargetConnConfig {
        maxh2cdata: 4096,
        max_icd: 8192,
        c2h_max: 3000,
        max_ttags: 32,
        cpda,
    };
    let hcfg = HostConnConfig {
        digests,
        hpda,
        maxr2t: 0,
        max_c2h_data: 1 << 20,
    };
    let mut target = TargetConn::new(tcfg);
    let mut host = HostConn::new(hcfg);
    let hd = digests.hdgst;

    // --- IC exchange
    let mut h2t = Vec::new();
    host.encode_icreq(&mut h2t);
    let mut t2h = Vec::new();
    let evs = pump_target(&mut target, &h2t, &mut t2h);
    assert_eq!(
        evs[0].0,
        TargetEvent::Established {
            hpda,
            digests,
            maxr2t: 0
        }
    );
    let evs = pump_host(&mut host, &t2h);
    assert_eq!(
        evs[0].0,
        HostEvent::Established {
            cpda,
            digests,
            maxh2cdata: 4096
        }
    );
    assert_eq!(host.maxh2cdata(), 4096);
    assert_eq!(host.digests(), digests);
    assert_eq!(target.digests(), digests);

    // --- Write with in-capsule data
    let icd = pattern(1500, 1);
    let mut sqe = Sqe::new(0x01, CommandId(1));
    sqe.set_sgl_icd(icd.len() as u32);
    let mut h2t = Vec::new();
    host.encode_capsule(&mut h2t, &sqe, &icd);
    assert_eq!(
        usize::from(h2t[3]),
        data_pdo(72, hd, cpda),
        "capsule PDO honours CPDA"
    );
    let mut t2h = Vec::new();
    let evs = pump_target(&mut target, &h2t, &mut t2h);
    assert_eq!(evs.len(), 1);
    assert_eq!(evs[0].0, TargetEvent::Command { sqe, icd: &icd });
    target.encode_resp(
        &mut t2h,
        &Cqe::new(CommandId(1), QueueId(1), Status::SUCCESS),
    );
    let evs = pump_host(&mut host, &t2h);
    assert!(
        matches!(evs[0].0, HostEvent::Response(c) if c.cid == 1 && c.status == Status::SUCCESS)
    );

    // --- Write with R2T: 10000 bytes -> H2CData 4096 + 4096 + 1808
    let wdata = pattern(10000, 7);
    let mut sqe = Sqe::new(0x01, CommandId(2));
    sqe.set_sgl_transport(wdata.len() as u32);
    let mut h2t = Vec::new();
    host.encode_capsule(&mut h2t, &sqe, &[]);
    let mut t2h = Vec::new();
    let evs = pump_target(&mut target, &h2t, &mut t2h);
    assert_eq!(evs[0].0, TargetEvent::Command { sqe, icd: &[] });
    // The controller uses its slot index (5) as TTAG.
    assert!(target.send_r2t(&mut t2h, 2, 5, 0, wdata.len() as u32));
    let evs = pump_host(&mut host, &t2h);
    let HostEvent::R2t(r2t) = evs[0].0 else {
        panic!("{:?}", evs[0].0)
    };
    assert_eq!((r2t.cccid, r2t.ttag, r2t.r2to, r2t.r2tl), (2, 5, 0, 10000));
    let mut h2t = Vec::new();
    host.encode_h2c_data(
        &mut h2t,
        r2t.cccid,
        r2t.ttag,
        r2t.r2to,
        &wdata[r2t.r2to as usize..],
    );
    let mut t2h = Vec::new();
    let evs = pump_target(&mut target, &h2t, &mut t2h);
    assert_eq!(evs.len(), 3);
    let mut got = Vec::new();
    for (i, (ev, at)) in evs.iter().enumerate() {
        assert_eq!(
            usize::from(h2t[at + 3]),
            data_pdo(24, hd, cpda),
            "H2CData PDO honours CPDA"
        );
        let TargetEvent::H2cData {
            cccid,
            ttag,
            datao,
            data,
            last,
        } = ev
        else {
            panic!("{ev:?}")
        };
        assert_eq!((*cccid, *ttag, *datao as usize), (2, 5, got.len()));
        assert_eq!(*last, i == 2);
        assert!(data.len() <= 4096);
        got.extend_from_slice(data);
    }
    assert_eq!(got, wdata);
    // The window is complete: the tag can be reused.
    assert!(target.send_r2t(&mut Vec::new(), 3, 5, 0, 1));
    target.cancel_r2t(5);

    // --- Read: 7000 bytes in two calls (4000 -> 3000 + 1000, 3000) at c2h_max 3000, then CapsuleResp
    let rdata = pattern(7000, 9);
    let mut sqe = Sqe::new(0x02, CommandId(3));
    sqe.set_sgl_transport(rdata.len() as u32);
    let mut h2t = Vec::new();
    host.encode_capsule(&mut h2t, &sqe, &[]);
    let mut t2h = Vec::new();
    let evs = pump_target(&mut target, &h2t, &mut t2h);
    assert_eq!(evs[0].0, TargetEvent::Command { sqe, icd: &[] });
    target.encode_c2h_data(&mut t2h, 3, 0, &rdata[..4000], false, false);
    target.encode_c2h_data(&mut t2h, 3, 4000, &rdata[4000..], true, false);
    target.encode_resp(
        &mut t2h,
        &Cqe::new(CommandId(3), QueueId(1), Status::SUCCESS),
    );
    // Feed the host in small pieces, as a socket would.
    let mut evs = Vec::new();
    let mut rx = Vec::new();
    for chunk in t2h.chunks(7) {
        rx.extend_from_slice(chunk);
        let mut pos = 0;
        while let Some((ev, n)) = host.decode_one(&rx[pos..]).unwrap() {
            evs.push(format!("{ev:?}"));
            if let HostEvent::C2hData { data, .. } = ev {
                assert_eq!(
                    usize::from(rx[pos + 3]),
                    data_pdo(24, hd, hpda),
                    "C2HData PDO honours HPDA"
                );
                assert!(data.len() <= 3000);
            }
            pos += n;
        }
        rx.drain(..pos);
    }
    assert!(rx.is_empty());
    // Whole: the same events, and the data reassembles.
    let whole = pump_host(&mut HostConn::new(hcfg).tap_established(&hcfg, cpda), &t2h);
    assert_eq!(
        whole
            .iter()
            .map(|(e, _)| format!("{e:?}"))
            .collect::<Vec<_>>(),
        evs
    );
    let mut got = Vec::new();
    let mut lasts = Vec::new();
    for (ev, _) in &whole {
        match ev {
            HostEvent::C2hData {
                cccid: 3,
                datao,
                data,
                last,
                success: false,
            } => {
                assert_eq!(*datao as usize, got.len());
                got.extend_from_slice(data);
                lasts.push(*last);
            }
            HostEvent::Response(c) => assert_eq!(c.cid, 3),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(got, rdata);
    assert_eq!(lasts, [false, false, true]);
    assert_eq!(whole.len(), 4);

    // --- Read with SUCCESS (SQ flow control disabled): no CapsuleResp
    let mut t2h = Vec::new();
    target.encode_c2h_data(&mut t2h, 4, 0, &rdata[..5000], true, true);
    let evs = pump_host(&mut host, &t2h);
    let flags: Vec<(bool, bool)> = evs
        .iter()
        .map(|(e, _)| match e {
            HostEvent::C2hData { last, success, .. } => (*last, *success),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(flags, [(false, false), (true, true)]);
}

/// Helper so a fresh host can replay a stream recorded after the IC exchange.
trait TapEstablished {
    fn tap_established(self, cfg: &HostConnConfig, cpda: u8) -> HostConn;
}

impl TapEstablished for HostConn {
    fn tap_established(mut self, cfg: &HostConnConfig, cpda: u8) -> HostConn {
        let mut out = Vec::new();
        self.encode_icreq(&mut out);
        let mut resp = Vec::new();
        nvmf_tcp::pdu::encode_ic_resp(
            &mut resp,
            &nvmf_tcp::IcResp {
                pfv: 0,
                cpda,
                digests: cfg.digests,
                maxh2cdata: 4096,
            },
        );
        self.decode_one(&resp).unwrap().unwrap();
        self
    }
}

#[test]
fn pair_no_digests() {
    run_pair(Digests::NONE, 0, 0);
}

#[test]
fn pair_both_digests() {
    run_pair(Digests::BOTH, 0, 0);
}

#[test]
fn pair_hpda_3() {
    run_pair(Digests::NONE, 3, 0);
    run_pair(Digests::BOTH, 3, 0);
}

#[test]
fn pair_header_digest_only_with_cpda() {
    run_pair(
        Digests {
            hdgst: true,
            ddgst: false,
        },
        3,
        1,
    );
    run_pair(
        Digests {
            hdgst: false,
            ddgst: true,
        },
        31,
        31,
    );
}

/// What the host still waits for: the validated PLEN of a PDU whose header is whole and body
/// is not; nothing before the header is whole, nor once the PDU has been decoded.
#[test]
fn the_host_says_how_long_a_partial_pdu_is() {
    let cfg = HostConnConfig {
        digests: Digests::BOTH,
        hpda: 0,
        maxr2t: 0,
        max_c2h_data: 1 << 20,
    };
    let mut host = HostConn::new(cfg).tap_established(&cfg, 0);
    let data = pattern(131_072, 5);
    let mut wire = Vec::new();
    nvmf_tcp::pdu::encode_c2h_data(
        &mut wire,
        Digests::BOTH,
        0,
        &nvmf_tcp::pdu::DataHdr {
            cccid: 1,
            ttag: 0,
            datao: 0,
            datal: 0,
            last: true,
            success: true,
        },
        &data,
    );
    assert!(host.decode_one(&wire[..7]).unwrap().is_none());
    assert_eq!(host.awaiting_pdu_len(), None, "common header not whole");
    assert!(host.decode_one(&wire[..4096]).unwrap().is_none());
    assert_eq!(host.awaiting_pdu_len(), Some(wire.len()));
    let (ev, used) = host.decode_one(&wire).unwrap().unwrap();
    assert!(matches!(ev, HostEvent::C2hData { success: true, .. }));
    assert_eq!(used, wire.len());
    assert_eq!(host.awaiting_pdu_len(), None);
}
