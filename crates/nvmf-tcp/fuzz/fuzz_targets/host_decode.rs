//! Bytes from a hostile controller into `HostConn` (after a valid ICResp half of the time).
#![no_main]

use libfuzzer_sys::fuzz_target;
use nvmf_tcp::pdu::{self, IcResp};
use nvmf_tcp::{Digests, HostConn, HostConnConfig};

fuzz_target!(|input: &[u8]| {
    let Some((&ctl, bytes)) = input.split_first() else {
        return;
    };
    let digests = Digests::from_bits(ctl);
    let hpda = (ctl >> 2) & 0x3;
    let chunk = usize::from(ctl >> 4) * 16 + 1;
    let mut stream = Vec::new();
    if ctl & 0x40 != 0 {
        pdu::encode_ic_resp(
            &mut stream,
            &IcResp {
                pfv: 0,
                cpda: 0,
                digests,
                maxh2cdata: 4096,
            },
        );
    }
    stream.extend_from_slice(bytes);
    let mut h = HostConn::new(HostConnConfig {
        digests,
        hpda,
        max_c2h_data: 8192,
        ..Default::default()
    });
    h.encode_icreq(&mut Vec::new());
    let mut rx = Vec::new();
    for piece in stream.chunks(chunk) {
        rx.extend_from_slice(piece);
        let mut pos = 0;
        loop {
            match h.decode_one(&rx[pos..]) {
                Ok(Some((_, n))) => pos += n,
                Ok(None) => break,
                Err(_) => return,
            }
        }
        rx.drain(..pos);
    }
});
