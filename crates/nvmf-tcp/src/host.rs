//! Host (initiator) role of an NVMe/TCP connection.

use crate::error::ProtocolError;
use crate::pdu::{Digests, R2t};
use nvme_spec::{Cqe, Sqe};

/// What the host asks for in ICReq.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostConnConfig {
    pub digests: Digests,
    /// HPDA to request (0's based dwords; 0 = no alignment).
    pub hpda: u8,
    /// MAXR2T to advertise (0's based).
    pub maxr2t: u32,
    /// Largest C2HData DATA we accept in one PDU (larger → fatal).
    pub max_c2h_data: u32,
}

impl Default for HostConnConfig {
    fn default() -> Self {
        HostConnConfig { digests: Digests::default(), hpda: 0, maxr2t: 0, max_c2h_data: 1 << 20 }
    }
}

/// What the controller sent, validated for framing and digests.
#[derive(Debug, PartialEq, Eq)]
pub enum HostEvent<'a> {
    /// ICResp received: negotiated parameters.
    Established { cpda: u8, digests: Digests, maxh2cdata: u32 },
    Response(Cqe),
    C2hData { cccid: u16, datao: u32, data: &'a [u8], last: bool, success: bool },
    R2t(R2t),
    TermReq { fes: u16, fei: u32 },
}

/// Connection state machine, host role.
#[derive(Debug)]
pub struct HostConn {
    _private: (),
}

impl HostConn {
    pub fn new(cfg: HostConnConfig) -> HostConn {
        let _ = cfg;
        todo!()
    }
    /// Append the ICReq; call once, first.
    pub fn encode_icreq(&mut self, out: &mut Vec<u8>) {
        let _ = out;
        todo!()
    }
    /// Upper bound on one incoming PDU's length.
    pub fn max_pdu_len(&self) -> usize {
        todo!()
    }
    /// Same contract as [`crate::TargetConn::decode_one`].
    pub fn decode_one<'a>(&mut self, buf: &'a [u8]) -> Result<Option<(HostEvent<'a>, usize)>, ProtocolError> {
        let _ = buf;
        todo!()
    }
    /// Negotiated values (valid after Established).
    pub fn digests(&self) -> Digests {
        todo!()
    }
    pub fn maxh2cdata(&self) -> u32 {
        todo!()
    }
    /// Append a CapsuleCmd with `icd` as in-capsule data (the caller sets the SGL accordingly).
    pub fn encode_capsule(&self, out: &mut Vec<u8>, sqe: &Sqe, icd: &[u8]) {
        let _ = (out, sqe, icd);
        todo!()
    }
    /// Append H2CData PDUs answering an R2T with `data` (which starts at offset `datao`), split
    /// at the negotiated MAXH2CDATA, padded to CPDA, LAST_PDU on the final one.
    pub fn encode_h2c_data(&self, out: &mut Vec<u8>, cccid: u16, ttag: u16, datao: u32, data: &[u8]) {
        let _ = (out, cccid, ttag, datao, data);
        todo!()
    }
    /// Append an H2CTermReq.
    pub fn encode_term_req(&mut self, out: &mut Vec<u8>, fes: u16, fei: u32, hdr: &[u8]) {
        let _ = (out, fes, fei, hdr);
        todo!()
    }
}
