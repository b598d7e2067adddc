//! Target (controller) role of an NVMe/TCP connection.

use crate::error::ProtocolError;
use crate::pdu::Digests;
use nvme_spec::{Cqe, Sqe};

/// Limits the target advertises and enforces on one connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TargetConnConfig {
    /// MAXH2CDATA advertised in ICResp; H2CData with DATAL above it is fatal (FES 05h).
    pub maxh2cdata: u32,
    /// Largest in-capsule data accepted on this connection before the queue type is known.
    /// (Admin/fabrics capsules may carry 8 KiB; I/O capsules up to the configured ICD limit; the
    /// transport accepts the max of both, the controller layer enforces per-queue limits.)
    pub max_icd: u32,
    /// Largest DATA per C2HData PDU we send (reads are split at this size).
    pub c2h_max: u32,
    /// Number of transfer tags (TTAG values 0..max_ttags) the connection tracks for R2Ts; the
    /// controller uses its command-slot index as TTAG.
    pub max_ttags: u16,
    /// CPDA to advertise (0 = no alignment requirement for H2C data).
    pub cpda: u8,
}

impl Default for TargetConnConfig {
    fn default() -> Self {
        TargetConnConfig { maxh2cdata: 131072, max_icd: 8192, c2h_max: 131072, max_ttags: 256, cpda: 0 }
    }
}

/// What the host sent, validated.
#[derive(Debug, PartialEq, Eq)]
pub enum TargetEvent<'a> {
    /// ICReq accepted; the ICResp has already been appended to `out`.
    Established { hpda: u8, digests: Digests, maxr2t: u32 },
    /// A command capsule. `icd` is the in-capsule data (empty if none); when non-empty the SGL
    /// has been checked to be an in-capsule descriptor whose length equals `icd.len()`.
    Command { sqe: Sqe, icd: &'a [u8] },
    /// H2CData for an R2T this connection issued: TTAG, CCCID, offset and length already checked
    /// against that R2T. `last` is true when the R2T's window is complete (the tag is then free).
    H2cData { cccid: u16, ttag: u16, datao: u32, data: &'a [u8], last: bool },
    /// The host terminated the connection (H2CTermReq). Log and close.
    TermReq { fes: u16, fei: u32 },
}

/// Connection state machine, target role. See the crate docs for the driving loop.
#[derive(Debug)]
pub struct TargetConn {
    _private: (),
}

impl TargetConn {
    pub fn new(cfg: TargetConnConfig) -> TargetConn {
        let _ = cfg;
        todo!()
    }

    /// Upper bound on one PDU's total length with the current configuration (the driver's receive
    /// buffer must hold at least this many bytes).
    pub fn max_pdu_len(&self) -> usize {
        todo!()
    }

    /// Decode the next PDU at the start of `buf`. `Ok(None)`: not enough bytes yet (the caller
    /// keeps them and reads more). `Ok(Some((event, consumed)))`: one PDU handled, `consumed`
    /// bytes used. ICReq is answered here (ICResp appended to `out`). After an `Err`, the caller
    /// sends [`TargetConn::encode_term_req`] and closes; further calls keep failing.
    pub fn decode_one<'a>(
        &mut self,
        buf: &'a [u8],
        out: &mut Vec<u8>,
    ) -> Result<Option<(TargetEvent<'a>, usize)>, ProtocolError> {
        let _ = (buf, out);
        todo!()
    }

    /// Negotiated digests (after Established).
    pub fn digests(&self) -> Digests {
        todo!()
    }

    /// Append a CapsuleResp carrying `cqe`.
    pub fn encode_resp(&self, out: &mut Vec<u8>, cqe: &Cqe) {
        let _ = (out, cqe);
        todo!()
    }

    /// Append the C2HData PDUs that carry `data` (the bytes at offset `datao_base` of the command's
    /// data), split at `c2h_max`, each padded to the host's HPDA, with digests as negotiated.
    /// `last` sets LAST_PDU on the final PDU; `success` additionally sets SUCCESS on it (only when
    /// the queue has SQ flow control disabled, and then no CapsuleResp is sent).
    pub fn encode_c2h_data(
        &self,
        out: &mut Vec<u8>,
        cccid: u16,
        datao_base: u32,
        data: &[u8],
        last: bool,
        success: bool,
    ) {
        let _ = (out, cccid, datao_base, data, last, success);
        todo!()
    }

    /// Append an R2T asking for `r2tl` bytes at offset `r2to` of command `cccid`, and remember it
    /// under `ttag` so that the following H2CData PDUs are validated. Returns false (and appends
    /// nothing) if `ttag` is out of range or already in use.
    pub fn send_r2t(&mut self, out: &mut Vec<u8>, cccid: u16, ttag: u16, r2to: u32, r2tl: u32) -> bool {
        let _ = (out, cccid, ttag, r2to, r2tl);
        todo!()
    }

    /// Forget an outstanding R2T (command aborted / failed).
    pub fn cancel_r2t(&mut self, ttag: u16) {
        let _ = ttag;
        todo!()
    }

    /// Append a C2HTermReq for `err` (FES, FEI, echoed header). The connection is terminated.
    pub fn encode_term_req(&mut self, out: &mut Vec<u8>, err: &ProtocolError) {
        let _ = (out, err);
        todo!()
    }
}
