//! Bytes from a gRPC client into the CSI socket's `:authority` rewriter
//! (`ebof_csi::authority::Rewriter`): the HTTP/2 frame layer and HPACK decoding of every header
//! block, on input nobody checked.
//!
//! Input: the first byte picks how the rest is fed: its low six bits + 1 are the size of the
//! pieces; bit 7 set puts the HTTP/2 connection preface in front (so most inputs reach the
//! frame layer).
//!
//! Checked, beyond "never panics":
//! - the output and the verdict do not depend on how the input was cut into pieces;
//! - the output is a fixed point: fed to a fresh rewriter, it passes unchanged and without an
//!   error, and no `:authority` in it needs rewriting (every header block it holds decodes
//!   with no HPACK state, and every HEADERS/CONTINUATION frame fits in 16 KiB).

use crate::Features;
use ebof_csi::authority::{Error, Rewriter};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

const F_VERDICT: u8 = 1;
const F_REWRITTEN: u8 = 2;
const F_FRAMES: u8 = 3;

/// One input: feed it whole and in pieces, then its output again.
pub fn run(data: &[u8], feat: &mut Features) {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let mut input = Vec::with_capacity(rest.len() + PREFACE.len());
    if sel & 0x80 != 0 {
        input.extend_from_slice(PREFACE);
    }
    input.extend_from_slice(rest);
    let piece = usize::from(sel & 0x3f) + 1;

    let (whole_out, whole_err, rewritten) = feed(&input, input.len().max(1));
    let (cut_out, cut_err, _) = feed(&input, piece);
    assert_eq!(whole_err, cut_err, "the verdict depends on the pieces");
    assert_eq!(whole_out, cut_out, "the output depends on the pieces");
    match &whole_err {
        None => feat.add(F_VERDICT, 0),
        Some(e) => feat.add_variant(F_VERDICT, e),
    }
    feat.add(F_REWRITTEN, rewritten.min(4));

    let (again, again_err, again_rewritten) = feed(&whole_out, whole_out.len().max(1));
    assert_eq!(again_err, None, "the rewriter's own output refused");
    assert_eq!(again, whole_out, "the output is not a fixed point");
    assert_eq!(again_rewritten, 0, "an :authority left to rewrite");
    feat.add(F_FRAMES, count_frames(&whole_out).min(16) as u64);
}

/// Feed `input` in pieces of `piece` bytes: everything handed on, the error if any, and how
/// many authorities were rewritten.
fn feed(input: &[u8], piece: usize) -> (Vec<u8>, Option<Error>, u64) {
    let mut rw = Rewriter::new();
    let mut out = Vec::new();
    let mut err = None;
    for chunk in input.chunks(piece) {
        let r = rw.feed(chunk);
        out.extend_from_slice(rw.pending());
        let n = rw.pending().len();
        rw.consume(n);
        if let Err(e) = r {
            err = Some(e);
            break;
        }
    }
    (out, err, rw.rewritten())
}

/// Complete frames after the preface (a feature: how far an input got).
fn count_frames(out: &[u8]) -> usize {
    let Some(mut rest) = out.strip_prefix(PREFACE) else {
        return 0;
    };
    let mut n = 0;
    while let Some(head) = rest.get(..9) {
        let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
        let Some(tail) = rest.get(9 + len..) else {
            break;
        };
        rest = tail;
        n += 1;
    }
    n
}

/// Seeds: a gRPC call as Python's grpcio (percent-encoded path), grpc-java (the path),
/// grpc-go (`localhost`) and one without `:authority` send it, in one piece and cut in two,
/// plus a header block split over CONTINUATION with padding and priority.
pub fn seeds() -> Vec<(String, Vec<u8>)> {
    let call = |authority: Option<&str>, stream: u32| {
        let mut block = Vec::new();
        let mut field = |n: &str, v: &str| {
            // Literal without indexing, new name; lengths below 127.
            block.push(0);
            block.push(n.len() as u8);
            block.extend_from_slice(n.as_bytes());
            block.push(v.len() as u8);
            block.extend_from_slice(v.as_bytes());
        };
        field(":method", "POST");
        field(":scheme", "http");
        field(":path", "/csi.v1.Identity/Probe");
        if let Some(a) = authority {
            field(":authority", a);
        }
        field("content-type", "application/grpc");
        field("te", "trailers");
        let mut f = frame(0x1, 0x4, stream, &block);
        f.extend(frame(0x0, 0x1, stream, &[0, 0, 0, 0, 0]));
        f
    };
    let settings = frame(0x4, 0, 0, &[]);
    let mut v = Vec::new();
    for (name, authority) in [
        ("grpcio-percent-path", Some("%2Frun%2Fcsi%2Fcsi.sock")),
        ("java-path", Some("/run/csi/csi.sock")),
        ("go-localhost", Some("localhost")),
        ("no-authority", None),
    ] {
        for (cut, sel) in [("whole", 0xbf_u8), ("bytes", 0x80)] {
            let mut b = vec![sel];
            b.extend_from_slice(&settings);
            b.extend(call(authority, 1));
            b.extend(call(authority, 3));
            v.push((format!("{name}-{cut}"), b));
        }
    }
    let mut b = vec![0x87];
    // HEADERS, padded (2) with priority, then a CONTINUATION ending the block.
    let mut payload = vec![2, 0, 0, 0, 0, 16];
    payload.extend_from_slice(&[0, 5, b':', b'p', b'a', b't', b'h', 1, b'/']);
    payload.extend_from_slice(&[0, 0]);
    b.extend(frame(0x1, 0x8 | 0x20 | 0x1, 5, &payload));
    b.extend(frame(
        0x9,
        0x4,
        5,
        &[
            0, 10, b':', b'a', b'u', b't', b'h', b'o', b'r', b'i', b't', b'y', 2, b'/', b'x',
        ],
    ));
    v.push(("continuation-padded".into(), b));
    v
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let l = (payload.len() as u32).to_be_bytes();
    let mut f = vec![l[1], l[2], l[3], kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}
