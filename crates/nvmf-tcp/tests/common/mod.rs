//! Helpers shared by the integration tests.
#![allow(dead_code)]

use nvmf_tcp::pdu::{self, IcReq, IcResp};
use nvmf_tcp::{
    Digests, Fes, HostConn, HostConnConfig, HostEvent, ProtocolError, TargetConn, TargetConnConfig,
    TargetEvent,
};

pub fn le32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().unwrap())
}

/// The ICReq bytes a host sends.
pub fn icreq_bytes(digests: Digests, hpda: u8) -> Vec<u8> {
    let mut b = Vec::new();
    pdu::encode_ic_req(
        &mut b,
        &IcReq {
            pfv: 0,
            hpda,
            digests,
            maxr2t: 0,
        },
    );
    b
}

/// A target that has answered an ICReq with `digests` and `hpda`.
pub fn established_target(cfg: TargetConnConfig, digests: Digests, hpda: u8) -> TargetConn {
    let mut t = TargetConn::new(cfg);
    let mut out = Vec::new();
    let ic = icreq_bytes(digests, hpda);
    let (ev, n) = t.decode_one(&ic, &mut out).unwrap().unwrap();
    assert_eq!(n, 128);
    assert_eq!(
        ev,
        TargetEvent::Established {
            hpda,
            digests,
            maxr2t: 0
        }
    );
    assert_eq!(out.len(), 128);
    t
}

/// A host that has sent ICReq and accepted an ICResp with its own digests and `cpda`.
pub fn established_host(cfg: HostConnConfig, cpda: u8, maxh2cdata: u32) -> HostConn {
    let mut h = HostConn::new(cfg);
    let mut out = Vec::new();
    h.encode_icreq(&mut out);
    let mut resp = Vec::new();
    pdu::encode_ic_resp(
        &mut resp,
        &IcResp {
            pfv: 0,
            cpda,
            digests: cfg.digests,
            maxh2cdata,
        },
    );
    let (ev, n) = h.decode_one(&resp).unwrap().unwrap();
    assert_eq!(n, 128);
    assert_eq!(
        ev,
        HostEvent::Established {
            cpda,
            digests: cfg.digests,
            maxh2cdata
        }
    );
    h
}

/// Recompute the header digest that follows `hlen` header bytes (after mutating a header).
pub fn fix_hdgst(b: &mut [u8], hlen: usize) {
    let d = nvmf_tcp::digest::crc32c(&b[..hlen]);
    b[hlen..hlen + 4].copy_from_slice(&d.to_le_bytes());
}

/// Feed `bytes` to the target; expect a protocol error.
pub fn target_err(t: &mut TargetConn, bytes: &[u8]) -> ProtocolError {
    let mut out = Vec::new();
    match t.decode_one(bytes, &mut out) {
        Err(e) => e,
        Ok(x) => panic!("expected a protocol error, got {x:?}"),
    }
}

/// Feed `bytes` to the host; expect a protocol error.
pub fn host_err(h: &mut HostConn, bytes: &[u8]) -> ProtocolError {
    match h.decode_one(bytes) {
        Err(e) => e,
        Ok(x) => panic!("expected a protocol error, got {x:?}"),
    }
}

#[track_caller]
pub fn assert_err(e: &ProtocolError, fes: Fes, fei: u32, echo: &[u8]) {
    assert_eq!((e.fes, e.fei), (fes, fei), "{e}");
    assert_eq!(e.header(), echo, "echoed header of {e}");
}

/// An owned, comparable rendering of a target event.
pub fn target_event_string(ev: &TargetEvent<'_>) -> String {
    format!("{ev:?}")
}

/// Decode everything in `stream`, feeding it in the given chunk sizes (cycled), appending each
/// chunk to a receive buffer and consuming decoded PDUs from its front, like a driver does.
/// `on_event` may react to events (e.g. send R2Ts). Returns the events and the final error.
pub fn drive_target(
    t: &mut TargetConn,
    stream: &[u8],
    chunks: &[usize],
    mut on_event: impl FnMut(&mut TargetConn, &TargetEvent<'_>),
) -> (Vec<String>, Option<ProtocolError>) {
    let mut events = Vec::new();
    let mut rx: Vec<u8> = Vec::new();
    let mut out = Vec::new();
    let mut fed = 0;
    let mut ci = 0;
    while fed < stream.len() {
        let step = chunks
            .get(ci % chunks.len().max(1))
            .copied()
            .unwrap_or(stream.len())
            .max(1);
        ci += 1;
        let end = (fed + step).min(stream.len());
        rx.extend_from_slice(&stream[fed..end]);
        fed = end;
        let mut pos = 0;
        loop {
            match t.decode_one(&rx[pos..], &mut out) {
                Ok(Some((ev, n))) => {
                    assert!(n > 0);
                    events.push(target_event_string(&ev));
                    on_event(t, &ev);
                    pos += n;
                }
                Ok(None) => break,
                Err(e) => return (events, Some(e)),
            }
        }
        rx.drain(..pos);
    }
    (events, None)
}

/// Host counterpart of [`drive_target`].
pub fn drive_host(
    h: &mut HostConn,
    stream: &[u8],
    chunks: &[usize],
) -> (Vec<String>, Option<ProtocolError>) {
    let mut events = Vec::new();
    let mut rx: Vec<u8> = Vec::new();
    let mut fed = 0;
    let mut ci = 0;
    while fed < stream.len() {
        let step = chunks
            .get(ci % chunks.len().max(1))
            .copied()
            .unwrap_or(stream.len())
            .max(1);
        ci += 1;
        let end = (fed + step).min(stream.len());
        rx.extend_from_slice(&stream[fed..end]);
        fed = end;
        let mut pos = 0;
        loop {
            match h.decode_one(&rx[pos..]) {
                Ok(Some((ev, n))) => {
                    assert!(n > 0);
                    events.push(format!("{ev:?}"));
                    pos += n;
                }
                Ok(None) => break,
                Err(e) => return (events, Some(e)),
            }
        }
        rx.drain(..pos);
    }
    (events, None)
}
