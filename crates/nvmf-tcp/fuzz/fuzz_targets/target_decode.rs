//! Bytes from a hostile host into `TargetConn`: the first input byte picks digests/CPDA/HPDA and
//! the chunking, the rest is the stream, preceded by a valid ICReq half of the time. Must never
//! panic; any error must produce a well-formed C2HTermReq.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nvmf_tcp::pdu::{self, IcReq};
use nvmf_tcp::{Digests, TargetConn, TargetConnConfig, TargetEvent};

fuzz_target!(|input: &[u8]| {
    let Some((&ctl, bytes)) = input.split_first() else {
        return;
    };
    let digests = Digests::from_bits(ctl);
    let cpda = (ctl >> 2) & 0x3;
    let chunk = usize::from(ctl >> 4) * 16 + 1;
    let mut stream = Vec::new();
    if ctl & 0x40 != 0 {
        pdu::encode_ic_req(
            &mut stream,
            &IcReq {
                pfv: 0,
                hpda: cpda,
                digests,
                maxr2t: 0,
            },
        );
    }
    stream.extend_from_slice(bytes);
    let mut t = TargetConn::new(TargetConnConfig {
        cpda,
        max_ttags: 8,
        maxh2cdata: 4096,
        ..Default::default()
    });
    let mut rx = Vec::new();
    let mut out = Vec::new();
    for piece in stream.chunks(chunk) {
        rx.extend_from_slice(piece);
        let mut pos = 0;
        loop {
            match t.decode_one(&rx[pos..], &mut out) {
                Ok(Some((ev, n))) => {
                    if let TargetEvent::Established { .. } = ev {
                        for tag in 0..8u16 {
                            t.send_r2t(&mut out, tag, tag, 0, 8192);
                        }
                    }
                    pos += n;
                }
                Ok(None) => break,
                Err(e) => {
                    let mut term = Vec::new();
                    t.encode_term_req(&mut term, &e);
                    assert!(term.len() <= 152 && term.len() >= 24);
                    return;
                }
            }
        }
        rx.drain(..pos);
    }
});
