//! Arbitrary bytes into the PDU decoders of `nvmf-tcp`.
//!
//! Input: `[mode, chunk, bytes...]`. `mode` picks the receiving role (bit 0: host), the
//! decoder's digest state (bits 1-3: before the IC exchange, or one of the four negotiated
//! combinations), the PDA (bits 4-5) and small or default size limits (bit 6).
//!
//! Checked, beyond "never panics":
//! - stateless [`decode_frame`]: every frame lies within the input; re-encoding it and decoding
//!   again gives the same PDU (the encoder and decoder agree on every field);
//! - the role state machine ([`TargetConn`] / [`HostConn`]) on the same bytes: after an error
//!   every later call fails with the same error; fed in `chunk`-byte pieces it produces exactly
//!   the events and the error of the whole-buffer run (split invariance). The target role
//!   issues an R2T for each command without in-capsule data, so H2CData gets checked against
//!   real R2T windows; the C2HTermReq it sends for an error is 24..=152 bytes and decodes on
//!   the host side with the error's FES and FEI.

use crate::Features;
use nvmf_tcp::pdu::{self, encode_pdu};
use nvmf_tcp::{
    DecodeLimits, Digests, Fes, HostConn, HostConnConfig, HostEvent, Pdu, ProtocolError, Role,
    TargetConn, TargetConnConfig, TargetEvent, decode_frame,
};

/// At most this many PDUs per input (bounded work per execution).
const MAX_PDUS: usize = 256;

/// Feature families.
const F_PDU: u8 = 1;
const F_ERR: u8 = 2;
const F_EVENT: u8 = 3;

/// One input: decode the bytes as NVMe/TCP PDUs in chunks of every size, for both roles,
/// checking that chunking does not change the result and that errors stick.
pub fn run(data: &[u8], feat: &mut Features) {
    let [mode, chunk, bytes @ ..] = data else {
        return;
    };
    let role = if mode & 1 == 0 {
        Role::Target
    } else {
        Role::Host
    };
    let digests = match (mode >> 1) & 7 {
        0 | 4 => None,
        1 | 6 | 7 => Some(Digests::NONE),
        2 => Some(Digests {
            hdgst: true,
            ddgst: false,
        }),
        3 => Some(Digests {
            hdgst: false,
            ddgst: true,
        }),
        _ => Some(Digests::BOTH),
    };
    let pda = [0u8, 1, 7, 31][usize::from((mode >> 4) & 3)];
    let (max_icd, max_data) = if mode & 0x40 == 0 {
        (8192, 131072)
    } else {
        (4096, 4096)
    };
    let lim = DecodeLimits {
        role,
        digests,
        pda,
        max_icd,
        max_data,
    };
    stateless(bytes, &lim, feat);
    let chunk = usize::from(*chunk).max(1);
    match role {
        Role::Target => {
            let cfg = TargetConnConfig {
                maxh2cdata: max_data,
                max_icd,
                cpda: pda,
                max_ttags: 8,
                ..TargetConnConfig::default()
            };
            let whole = target_events(bytes, cfg, bytes.len().max(1), feat);
            let split = target_events(bytes, cfg, chunk, &mut Features::default());
            assert_eq!(
                whole, split,
                "target decoder: split into {chunk}-byte pieces"
            );
        }
        Role::Host => {
            let cfg = HostConnConfig {
                digests: digests.unwrap_or(Digests::BOTH),
                hpda: pda,
                max_c2h_data: max_data,
                ..HostConnConfig::default()
            };
            let whole = host_events(bytes, cfg, bytes.len().max(1), feat);
            let split = host_events(bytes, cfg, chunk, &mut Features::default());
            assert_eq!(whole, split, "host decoder: split into {chunk}-byte pieces");
        }
    }
}

/// [`decode_frame`] PDU after PDU (an ICReq/ICResp sets the digests for what follows, as
/// the role state machines do); each frame is re-encoded and decoded again.
fn stateless(mut buf: &[u8], lim: &DecodeLimits, feat: &mut Features) {
    let mut lim = *lim;
    let lim = &mut lim;
    for _ in 0..MAX_PDUS {
        let f = match decode_frame(buf, lim) {
            Ok(Some(f)) => f,
            Ok(None) => return,
            Err(e) => {
                feat.add_str(F_ERR, e.reason);
                return;
            }
        };
        assert!(f.len >= pdu::CH_LEN && f.len <= buf.len(), "frame length");
        feat.add(
            F_PDU,
            u64::from(buf[0]) | (u64::from(f.data_digest_ok) << 8),
        );
        let mut again = Vec::new();
        encode_pdu(
            &mut again,
            &f.pdu,
            lim.digests.unwrap_or(Digests::NONE),
            lim.pda,
        );
        let g = match decode_frame(&again, lim) {
            Ok(Some(g)) => g,
            other => panic!("re-encoded {:?} does not decode: {other:?}", f.pdu),
        };
        assert_eq!(g.len, again.len(), "re-encoded PLEN");
        assert!(g.data_digest_ok, "re-encoded data digest");
        assert_eq!(f.pdu, g.pdu, "decode → encode → decode");
        if let Pdu::IcReq(pdu::IcReq { digests, .. }) | Pdu::IcResp(pdu::IcResp { digests, .. }) =
            f.pdu
        {
            lim.digests = Some(digests);
        }
        buf = &buf[f.len..];
    }
}

/// What a role decoder made of the input: each event with the bytes it used, or the error.
#[derive(Debug, PartialEq, Eq)]
enum Step<E> {
    Event(E, usize),
    /// FES, FEI and reason: the echoed header is checked where the error is made (it holds
    /// as much of the header as had arrived, so it may differ with the chunking).
    Error(Fes, u32, &'static str),
}

/// A protocol error's echo is a prefix of the offending PDU's header, at least its common
/// header.
fn check_echo(e: &ProtocolError, pdu: &[u8]) {
    let echo = e.header();
    assert!(
        echo.len() >= 8.min(pdu.len()),
        "echo of {} bytes",
        echo.len()
    );
    assert_eq!(
        echo,
        &pdu[..echo.len().min(pdu.len())],
        "echo is not the PDU's header"
    );
}

/// The C2HTermReq the target sends for `e` is 24..=152 bytes and decodes on the host side as
/// a C2HTermReq with `e`'s FES and FEI (whatever the digests: TermReqs never carry them).
fn check_term_req(term: &[u8], e: &ProtocolError) {
    assert!(
        (pdu::HLEN_TERM..=pdu::TERM_REQ_MAX_PLEN).contains(&term.len()),
        "C2HTermReq of {} bytes",
        term.len()
    );
    let lim = DecodeLimits {
        role: Role::Host,
        digests: Some(Digests::BOTH),
        pda: 0,
        max_icd: 0,
        max_data: 0,
    };
    match decode_frame(term, &lim) {
        Ok(Some(f)) => {
            assert_eq!(f.len, term.len(), "C2HTermReq PLEN");
            match f.pdu {
                Pdu::C2hTermReq(t) => {
                    assert_eq!((t.fes, t.fei), (e.fes as u16, e.fei), "FES/FEI");
                    assert_eq!(t.hdr, e.header(), "echoed header");
                }
                other => panic!("C2HTermReq decodes as {other:?}"),
            }
        }
        other => panic!("C2HTermReq does not decode: {other:?}"),
    }
}

/// Run a [`TargetConn`] over `bytes` offered in `chunk`-byte pieces.
fn target_events<'a>(
    bytes: &'a [u8],
    cfg: TargetConnConfig,
    chunk: usize,
    feat: &mut Features,
) -> Vec<Step<TargetEvent<'a>>> {
    let mut conn = TargetConn::new(cfg);
    let mut out = Vec::new();
    let mut steps = Vec::new();
    let mut pos = 0;
    let mut avail = chunk.min(bytes.len());
    let mut next_ttag = 0u16;
    while steps.len() < MAX_PDUS {
        match conn.decode_one(&bytes[pos..avail], &mut out) {
            Ok(Some((ev, n))) => {
                assert!(n > 0 && pos + n <= avail, "consumed {n} of {}", avail - pos);
                feat.add(F_EVENT, event_kind(&ev));
                // A command without in-capsule data that names a transfer: ask for it, so that
                // H2CData in the input meets a real R2T window.
                if let TargetEvent::Command { sqe, icd } = &ev {
                    let len = sqe.sgl_len();
                    if icd.is_empty() && len > 0 {
                        let ttag = next_ttag % cfg.max_ttags.max(1);
                        if conn.send_r2t(&mut out, sqe.cid().0, ttag, 0, len.min(1 << 20)) {
                            next_ttag = next_ttag.wrapping_add(1);
                        }
                    }
                }
                steps.push(Step::Event(ev, n));
                pos += n;
            }
            Ok(None) if avail == bytes.len() => break,
            Ok(None) => avail = (avail + chunk).min(bytes.len()),
            Err(e) => {
                feat.add_str(F_ERR, e.reason);
                let again = conn.decode_one(&bytes[pos..avail], &mut out);
                assert_eq!(again, Err(e.clone()), "errors are sticky");
                let mut term = Vec::new();
                conn.encode_term_req(&mut term, &e);
                check_term_req(&term, &e);
                check_echo(&e, &bytes[pos..]);
                steps.push(Step::Error(e.fes, e.fei, e.reason));
                break;
            }
        }
    }
    steps
}

fn event_kind(ev: &TargetEvent<'_>) -> u64 {
    match ev {
        TargetEvent::Established { .. } => 0,
        TargetEvent::Command { icd, .. } => 1 | (u64::from(!icd.is_empty()) << 4),
        TargetEvent::H2cData { last, .. } => 2 | (u64::from(*last) << 4),
        TargetEvent::TermReq { .. } => 3,
        TargetEvent::CommandDataDigestError { .. } => 4,
        TargetEvent::H2cDataDigestError { .. } => 5,
    }
}

fn host_event_kind(ev: &HostEvent<'_>) -> u64 {
    match ev {
        HostEvent::Established { .. } => 0x100,
        HostEvent::Response(_) => 0x101,
        HostEvent::C2hData { last, success, .. } => {
            0x102 | (u64::from(*last) << 4) | (u64::from(*success) << 5)
        }
        HostEvent::R2t(_) => 0x103,
        HostEvent::TermReq { .. } => 0x104,
        HostEvent::C2hDataDigestError { .. } => 0x105,
    }
}

/// Run a [`HostConn`] (ICReq already sent) over `bytes` offered in `chunk`-byte pieces.
fn host_events<'a>(
    bytes: &'a [u8],
    cfg: HostConnConfig,
    chunk: usize,
    feat: &mut Features,
) -> Vec<Step<HostEvent<'a>>> {
    let mut conn = HostConn::new(cfg);
    conn.encode_icreq(&mut Vec::new());
    let mut steps = Vec::new();
    let mut pos = 0;
    let mut avail = chunk.min(bytes.len());
    while steps.len() < MAX_PDUS {
        match conn.decode_one(&bytes[pos..avail]) {
            Ok(Some((ev, n))) => {
                assert!(n > 0 && pos + n <= avail, "consumed {n} of {}", avail - pos);
                feat.add(F_EVENT, host_event_kind(&ev));
                steps.push(Step::Event(ev, n));
                pos += n;
            }
            Ok(None) if avail == bytes.len() => break,
            Ok(None) => avail = (avail + chunk).min(bytes.len()),
            Err(e) => {
                feat.add_str(F_ERR, e.reason);
                let again = conn.decode_one(&bytes[pos..avail]);
                assert_eq!(again, Err(e.clone()), "errors are sticky");
                check_echo(&e, &bytes[pos..]);
                steps.push(Step::Error(e.fes, e.fei, e.reason));
                break;
            }
        }
    }
    steps
}
