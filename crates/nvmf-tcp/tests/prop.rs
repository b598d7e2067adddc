//! Property tests: encode→decode round trip for every PDU type, split invariance of both role
//! decoders, and "arbitrary or mutated bytes never panic".

mod common;

use common::*;
use nvme_spec::{CommandId, Cqe, Sqe};
use nvmf_tcp::pdu::{self, DataHdr, pdu_type};
use nvmf_tcp::{
    DecodeLimits, Digests, Frame, HostConn, HostConnConfig, IcReq, IcResp, Pdu, R2t, Role,
    TargetConn, TargetConnConfig, TargetEvent, TermReq, decode_frame, decode_header,
};
use proptest::collection::vec;
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum OwnedPdu {
    IcReq(IcReq),
    IcResp(IcResp),
    H2cTerm(u16, u32, Vec<u8>),
    C2hTerm(u16, u32, Vec<u8>),
    Cmd(Sqe, Vec<u8>),
    Resp(Cqe),
    H2c(DataHdr, Vec<u8>),
    C2h(DataHdr, Vec<u8>),
    R2t(R2t),
}

impl OwnedPdu {
    fn as_pdu(&self) -> Pdu<'_> {
        match self {
            OwnedPdu::IcReq(x) => Pdu::IcReq(*x),
            OwnedPdu::IcResp(x) => Pdu::IcResp(*x),
            OwnedPdu::H2cTerm(fes, fei, h) => Pdu::H2cTermReq(TermReq {
                fes: *fes,
                fei: *fei,
                hdr: h,
            }),
            OwnedPdu::C2hTerm(fes, fei, h) => Pdu::C2hTermReq(TermReq {
                fes: *fes,
                fei: *fei,
                hdr: h,
            }),
            OwnedPdu::Cmd(sqe, d) => Pdu::CapsuleCmd { sqe: *sqe, data: d },
            OwnedPdu::Resp(c) => Pdu::CapsuleResp(*c),
            OwnedPdu::H2c(h, d) => Pdu::H2cData { hdr: *h, data: d },
            OwnedPdu::C2h(h, d) => Pdu::C2hData { hdr: *h, data: d },
            OwnedPdu::R2t(r) => Pdu::R2t(*r),
        }
    }
    fn role(&self) -> Role {
        match self {
            OwnedPdu::IcReq(_) | OwnedPdu::H2cTerm(..) | OwnedPdu::Cmd(..) | OwnedPdu::H2c(..) => {
                Role::Target
            }
            OwnedPdu::IcResp(_)
            | OwnedPdu::C2hTerm(..)
            | OwnedPdu::Resp(_)
            | OwnedPdu::C2h(..)
            | OwnedPdu::R2t(_) => Role::Host,
        }
    }
    fn is_ic(&self) -> bool {
        matches!(self, OwnedPdu::IcReq(_) | OwnedPdu::IcResp(_))
    }
    fn data_len(&self) -> usize {
        match self {
            OwnedPdu::Cmd(_, d) | OwnedPdu::H2c(_, d) | OwnedPdu::C2h(_, d) => d.len(),
            _ => 0,
        }
    }
}

fn digests() -> impl Strategy<Value = Digests> {
    (any::<bool>(), any::<bool>()).prop_map(|(hdgst, ddgst)| Digests { hdgst, ddgst })
}

fn sqe_bytes() -> impl Strategy<Value = Sqe> {
    vec(any::<u8>(), 64).prop_map(|v| Sqe(v.try_into().unwrap()))
}

fn owned_pdu() -> impl Strategy<Value = OwnedPdu> {
    prop_oneof![
        (0u8..=31, 0u8..4, any::<u32>()).prop_map(|(hpda, d, maxr2t)| OwnedPdu::IcReq(IcReq {
            pfv: 0,
            hpda,
            digests: Digests::from_bits(d),
            maxr2t
        })),
        (0u8..=31, 0u8..4, 1024u32..=u32::MAX / 4).prop_map(|(cpda, d, m)| OwnedPdu::IcResp(
            IcResp {
                pfv: 0,
                cpda,
                digests: Digests::from_bits(d),
                maxh2cdata: m * 4
            }
        )),
        (
            any::<u16>(),
            any::<u32>(),
            vec(any::<u8>(), 0..=128),
            any::<bool>()
        )
            .prop_map(|(fes, fei, h, h2c)| {
                if h2c {
                    OwnedPdu::H2cTerm(fes, fei, h)
                } else {
                    OwnedPdu::C2hTerm(fes, fei, h)
                }
            }),
        (sqe_bytes(), vec(any::<u8>(), 0..300)).prop_map(|(mut sqe, d)| {
            if !d.is_empty() {
                sqe.set_sgl_icd(d.len() as u32);
            }
            OwnedPdu::Cmd(sqe, d)
        }),
        vec(any::<u8>(), 16).prop_map(|b| OwnedPdu::Resp(Cqe::decode(&b.try_into().unwrap()))),
        (
            any::<u16>(),
            any::<u16>(),
            any::<u32>(),
            vec(any::<u8>(), 1..300),
            any::<bool>()
        )
            .prop_map(|(cccid, ttag, datao, d, last)| {
                let datao = datao % (u32::MAX - 300);
                let h = DataHdr {
                    cccid,
                    ttag,
                    datao,
                    datal: d.len() as u32,
                    last,
                    success: false,
                };
                OwnedPdu::H2c(h, d)
            }),
        (
            any::<u16>(),
            any::<u32>(),
            vec(any::<u8>(), 1..300),
            any::<bool>(),
            any::<bool>()
        )
            .prop_map(|(cccid, datao, d, last, success)| {
                let datao = datao % (u32::MAX - 300);
                let h = DataHdr {
                    cccid,
                    ttag: 0,
                    datao,
                    datal: d.len() as u32,
                    last,
                    success: success && last,
                };
                OwnedPdu::C2h(h, d)
            }),
        (any::<u16>(), any::<u16>(), any::<u32>(), 1u32..).prop_map(|(cccid, ttag, r2to, r2tl)| {
            OwnedPdu::R2t(R2t {
                cccid,
                ttag,
                r2to: r2to.min(u32::MAX - r2tl),
                r2tl,
            })
        }),
    ]
}

fn limits(p: &OwnedPdu, dig: Digests, pda: u8) -> DecodeLimits {
    DecodeLimits {
        role: p.role(),
        digests: if p.is_ic() { None } else { Some(dig) },
        pda,
        max_icd: 1 << 20,
        max_data: 1 << 20,
    }
}

proptest! {
    #[test]
    fn roundtrip(p in owned_pdu(), dig in digests(), pda in 0u8..=31, trailing in vec(any::<u8>(), 0..40)) {
        let pdu = p.as_pdu();
        let mut out = Vec::new();
        pdu::encode_pdu(&mut out, &pdu, dig, pda);
        let len = out.len();
        let lim = limits(&p, dig, pda);
        for n in 0..len {
            prop_assert_eq!(decode_frame(&out[..n], &lim).unwrap(), None, "prefix {}", n);
        }
        // Bytes of the next PDU after it do not matter.
        out.extend_from_slice(&trailing);
        let f = decode_frame(&out, &lim).unwrap().unwrap();
        prop_assert_eq!(f, Frame { pdu, len, data_digest_ok: true });
    }

    #[test]
    fn corrupted_digests_are_caught(p in owned_pdu(), pda in 0u8..=31, at in any::<prop::sample::Index>(), bit in 0u8..8) {
        let pdu = p.as_pdu();
        let mut out = Vec::new();
        pdu::encode_pdu(&mut out, &pdu, Digests::BOTH, pda);
        let lim = limits(&p, Digests::BOTH, pda);
        let h = decode_header(&out, &lim).unwrap().unwrap();
        if pdu::carries_digests(out[0]) {
            // A flipped header bit never yields a frame: a digest error or an earlier field check,
            // or (a type byte turned into ICResp/ICReq) waiting for a longer header.
            let mut bad = out.clone();
            bad[at.index(h.header_len)] ^= 1 << bit;
            prop_assert!(!matches!(decode_frame(&bad, &lim), Ok(Some(_))));
        }
        if p.data_len() > 0 {
            let mut bad = out.clone();
            bad[h.data_off + at.index(h.data_len)] ^= 1 << bit;
            let f = decode_frame(&bad, &lim).unwrap().unwrap();
            prop_assert!(!f.data_digest_ok);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Split invariance

#[derive(Clone, Debug)]
enum TOp {
    /// A capsule with this much in-capsule data; `corrupt` flips a data byte (→ digest error event
    /// when data digests are on).
    Capsule { icd: usize, corrupt: bool },
    /// A write of this many bytes through an R2T, answered by H2CData.
    Write { len: usize, corrupt: bool },
}

fn t_op() -> impl Strategy<Value = TOp> {
    prop_oneof![
        (0usize..600, any::<bool>()).prop_map(|(icd, corrupt)| TOp::Capsule { icd, corrupt }),
        (1usize..5000, any::<bool>()).prop_map(|(len, corrupt)| TOp::Write { len, corrupt }),
    ]
}

const MAXH2C: u32 = 1024;

fn t_cfg(cpda: u8) -> TargetConnConfig {
    TargetConnConfig {
        maxh2cdata: MAXH2C,
        max_icd: 1024,
        c2h_max: 4096,
        max_ttags: 32,
        cpda,
    }
}

/// The host→controller byte stream for `ops`, and the R2Ts (cccid, ttag, len) the controller
/// must issue once established.
fn target_stream(
    ops: &[TOp],
    dig: Digests,
    hpda: u8,
    cpda: u8,
    term: bool,
) -> (Vec<u8>, Vec<(u16, u16, u32)>) {
    let mut s = icreq_bytes(dig, hpda);
    let mut r2ts = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let cid = i as u16;
        match *op {
            TOp::Capsule { icd, corrupt } => {
                let data: Vec<u8> = (0..icd).map(|j| (j + i) as u8).collect();
                let mut sqe = Sqe::new(0x01, CommandId(cid));
                if icd > 0 {
                    sqe.set_sgl_icd(icd as u32);
                }
                let start = s.len();
                pdu::encode_capsule_cmd(&mut s, dig, cpda, &sqe, &data);
                if corrupt && icd > 0 {
                    let end = s.len() - if dig.ddgst { 4 } else { 0 };
                    s[end - 1] ^= 0x55;
                }
                let _ = start;
            }
            TOp::Write { len, corrupt } => {
                let ttag = r2ts.len() as u16;
                r2ts.push((cid, ttag, len as u32));
                let mut sqe = Sqe::new(0x01, CommandId(cid));
                sqe.set_sgl_transport(len as u32);
                pdu::encode_capsule_cmd(&mut s, dig, cpda, &sqe, &[]);
                let data: Vec<u8> = (0..len).map(|j| (j * 7 + i) as u8).collect();
                let n = data.len().div_ceil(MAXH2C as usize);
                for (k, chunk) in data.chunks(MAXH2C as usize).enumerate() {
                    let d = DataHdr {
                        cccid: cid,
                        ttag,
                        datao: (k * MAXH2C as usize) as u32,
                        datal: 0,
                        last: k + 1 == n,
                        success: false,
                    };
                    pdu::encode_h2c_data(&mut s, dig, cpda, &d, chunk);
                    if corrupt && k == 0 {
                        let end = s.len() - if dig.ddgst { 4 } else { 0 };
                        s[end - 1] ^= 0x55;
                    }
                }
            }
        }
    }
    if term {
        pdu::encode_term_req(&mut s, pdu_type::H2C_TERM_REQ, 1, 4, &[0xAB; 24]);
    }
    (s, r2ts)
}

fn run_target(
    stream: &[u8],
    r2ts: &[(u16, u16, u32)],
    cpda: u8,
    chunks: &[usize],
) -> (Vec<String>, Option<String>) {
    let mut t = TargetConn::new(t_cfg(cpda));
    let (evs, err) = drive_target(&mut t, stream, chunks, |t, ev| {
        if let TargetEvent::Established { .. } = ev {
            for &(cccid, ttag, len) in r2ts {
                assert!(t.send_r2t(&mut Vec::new(), cccid, ttag, 0, len));
            }
        }
    });
    (evs, err.map(|e| format!("{e:?}")))
}

#[derive(Clone, Debug)]
enum HOp {
    Resp(u16),
    Read {
        len: usize,
        success: bool,
        corrupt: bool,
    },
    R2t(u16, u32),
}

fn h_op() -> impl Strategy<Value = HOp> {
    prop_oneof![
        any::<u16>().prop_map(HOp::Resp),
        (1usize..6000, any::<bool>(), any::<bool>()).prop_map(|(len, success, corrupt)| {
            HOp::Read {
                len,
                success,
                corrupt,
            }
        }),
        (any::<u16>(), 1u32..100_000).prop_map(|(t, l)| HOp::R2t(t, l)),
    ]
}

fn host_stream(ops: &[HOp], dig: Digests, hpda: u8, cpda: u8) -> Vec<u8> {
    let mut s = Vec::new();
    pdu::encode_ic_resp(
        &mut s,
        &IcResp {
            pfv: 0,
            cpda,
            digests: dig,
            maxh2cdata: 8192,
        },
    );
    for (i, op) in ops.iter().enumerate() {
        match *op {
            HOp::Resp(cid) => {
                let c = Cqe {
                    cid,
                    sqhd: i as u16,
                    ..Default::default()
                };
                pdu::encode_capsule_resp(&mut s, dig, &c);
            }
            HOp::Read {
                len,
                success,
                corrupt,
            } => {
                let data: Vec<u8> = (0..len).map(|j| (j * 3 + i) as u8).collect();
                let n = len.div_ceil(2048);
                for (k, chunk) in data.chunks(2048).enumerate() {
                    let last = k + 1 == n;
                    let d = DataHdr {
                        cccid: i as u16,
                        ttag: 0,
                        datao: (k * 2048) as u32,
                        datal: 0,
                        last,
                        success: success && last,
                    };
                    pdu::encode_c2h_data(&mut s, dig, hpda, &d, chunk);
                    if corrupt && last {
                        let end = s.len() - if dig.ddgst { 4 } else { 0 };
                        s[end - 1] ^= 1;
                    }
                }
            }
            HOp::R2t(ttag, r2tl) => {
                pdu::encode_r2t(
                    &mut s,
                    dig,
                    &R2t {
                        cccid: i as u16,
                        ttag,
                        r2to: 0,
                        r2tl,
                    },
                );
            }
        }
    }
    s
}

fn h_cfg(dig: Digests, hpda: u8) -> HostConnConfig {
    HostConnConfig {
        digests: dig,
        hpda,
        maxr2t: 0,
        max_c2h_data: 4096,
    }
}

fn run_host(
    stream: &[u8],
    dig: Digests,
    hpda: u8,
    chunks: &[usize],
) -> (Vec<String>, Option<String>) {
    let mut h = HostConn::new(h_cfg(dig, hpda));
    h.encode_icreq(&mut Vec::new());
    let (evs, err) = drive_host(&mut h, stream, chunks);
    (evs, err.map(|e| format!("{e:?}")))
}

proptest! {
    #[test]
    fn target_split_invariance(
        ops in vec(t_op(), 0..12),
        dig in digests(),
        hpda in 0u8..=31,
        cpda in 0u8..=7,
        term in any::<bool>(),
        chunks in vec(1usize..700, 1..20),
    ) {
        let (stream, r2ts) = target_stream(&ops, dig, hpda, cpda, term);
        let whole = run_target(&stream, &r2ts, cpda, &[stream.len()]);
        prop_assert_eq!(&whole.1, &None);
        prop_assert_eq!(whole.0.len(), 1 + ops.len() + ops.iter().map(|o| match o {
            TOp::Write { len, .. } => len.div_ceil(MAXH2C as usize),
            TOp::Capsule { .. } => 0,
        }).sum::<usize>() + usize::from(term));
        let split = run_target(&stream, &r2ts, cpda, &chunks);
        prop_assert_eq!(&split, &whole);
        let bytewise = run_target(&stream, &r2ts, cpda, &[1]);
        prop_assert_eq!(&bytewise, &whole);
    }

    #[test]
    fn host_split_invariance(
        ops in vec(h_op(), 0..12),
        dig in digests(),
        hpda in 0u8..=31,
        cpda in 0u8..=31,
        chunks in vec(1usize..700, 1..20),
    ) {
        let stream = host_stream(&ops, dig, hpda, cpda);
        let whole = run_host(&stream, dig, hpda, &[stream.len()]);
        prop_assert_eq!(&whole.1, &None);
        let split = run_host(&stream, dig, hpda, &chunks);
        prop_assert_eq!(&split, &whole);
        let bytewise = run_host(&stream, dig, hpda, &[1]);
        prop_assert_eq!(&bytewise, &whole);
    }
}

// ---------------------------------------------------------------------------------------------
// Never panic

/// After any error the TermReq we would send is well formed.
fn check_term_req_for(e: &nvmf_tcp::ProtocolError, t: &mut TargetConn) {
    let mut out = Vec::new();
    t.encode_term_req(&mut out, e);
    assert!(out.len() >= 24 && out.len() <= 152);
    assert_eq!(le32(&out, 4) as usize, out.len());
    assert_eq!(&out[24..], e.header());
    let mut h = HostConn::new(HostConnConfig::default());
    let (ev, n) = h.decode_one(&out).unwrap().unwrap();
    assert_eq!(n, out.len());
    assert_eq!(
        ev,
        nvmf_tcp::HostEvent::TermReq {
            fes: e.fes as u16,
            fei: e.fei
        }
    );
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic_target(
        bytes in vec(any::<u8>(), 0..1500),
        chunks in vec(1usize..300, 1..8),
        dig in digests(),
        hpda in 0u8..=31,
        cpda in 0u8..=31,
        after_icreq in any::<bool>(),
    ) {
        let mut stream = if after_icreq { icreq_bytes(dig, hpda) } else { Vec::new() };
        stream.extend_from_slice(&bytes);
        let mut t = TargetConn::new(TargetConnConfig { cpda, max_ttags: 4, ..Default::default() });
        let (_, err) = drive_target(&mut t, &stream, &chunks, |t, ev| {
            if let TargetEvent::Established { .. } = ev {
                for tag in 0..4 {
                    t.send_r2t(&mut Vec::new(), tag, tag, 0, 1000);
                }
            }
        });
        if let Some(e) = err {
            check_term_req_for(&e, &mut t);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic_host(
        bytes in vec(any::<u8>(), 0..1500),
        chunks in vec(1usize..300, 1..8),
        dig in digests(),
        hpda in 0u8..=31,
        after_icresp in any::<bool>(),
    ) {
        let mut stream = Vec::new();
        if after_icresp {
            pdu::encode_ic_resp(&mut stream, &IcResp { pfv: 0, cpda: 0, digests: dig, maxh2cdata: 4096 });
        }
        stream.extend_from_slice(&bytes);
        let mut h = HostConn::new(HostConnConfig { digests: dig, hpda, ..Default::default() });
        h.encode_icreq(&mut Vec::new());
        let _ = drive_host(&mut h, &stream, &chunks);
    }

    #[test]
    fn mutated_valid_streams_never_panic(
        ops in vec(t_op(), 1..6),
        hops in vec(h_op(), 1..6),
        dig in digests(),
        hpda in 0u8..=7,
        cpda in 0u8..=7,
        muts in vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        chunks in vec(1usize..300, 1..8),
    ) {
        let (mut s, r2ts) = target_stream(&ops, dig, hpda, cpda, false);
        for (at, v) in &muts {
            let i = at.index(s.len());
            s[i] = *v;
        }
        let mut t = TargetConn::new(t_cfg(cpda));
        let (_, err) = drive_target(&mut t, &s, &chunks, |t, ev| {
            if let TargetEvent::Established { .. } = ev {
                for &(cccid, ttag, len) in &r2ts {
                    t.send_r2t(&mut Vec::new(), cccid, ttag, 0, len);
                }
            }
        });
        if let Some(e) = err {
            check_term_req_for(&e, &mut t);
        }

        let mut s = host_stream(&hops, dig, hpda, cpda);
        for (at, v) in &muts {
            let i = at.index(s.len());
            s[i] = *v;
        }
        let _ = run_host(&s, dig, hpda, &chunks);
    }

    #[test]
    fn decode_frame_never_panics(
        bytes in vec(any::<u8>(), 0..400),
        target in any::<bool>(),
        dig in proptest::option::of(digests()),
        pda in any::<u8>(),
        max_icd in any::<u32>(),
        max_data in any::<u32>(),
    ) {
        let lim = DecodeLimits { role: if target { Role::Target } else { Role::Host }, digests: dig, pda, max_icd, max_data };
        for n in 0..=bytes.len().min(200) {
            let _ = decode_frame(&bytes[..n], &lim);
        }
        let _ = decode_frame(&bytes, &lim);
    }
}
