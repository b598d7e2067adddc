//! Protocol errors: a peer broke the NVMe/TCP rules; the connection must be terminated.

/// Fatal Error Status (TermReq FES, NVMe/TCP 1.0 Figure 33).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum Fes {
    /// 01h Invalid PDU Header Field: FEI = byte offset of the bad field in the PDU header.
    InvalidHeaderField = 0x01,
    /// 02h PDU Sequence Error (PDU not legal in this state, second ICReq, data before ICReq…).
    PduSequenceError = 0x02,
    /// 03h Header Digest Error.
    HeaderDigestError = 0x03,
    /// 04h Data Transfer Out of Range (H2CData offset/length outside the R2T window).
    DataTransferOutOfRange = 0x04,
    /// 05h Data Transfer Limit Exceeded / R2T Limit Exceeded (e.g. DATAL > MAXH2CDATA).
    DataTransferLimitExceeded = 0x05,
    /// 06h Unsupported Parameter: FEI = byte offset of the unsupported field.
    UnsupportedParameter = 0x06,
}

impl Fes {
    /// The known FES for a raw value (from a received TermReq), `None` for others.
    pub fn from_u16(v: u16) -> Option<Fes> {
        match v {
            0x01 => Some(Fes::InvalidHeaderField),
            0x02 => Some(Fes::PduSequenceError),
            0x03 => Some(Fes::HeaderDigestError),
            0x04 => Some(Fes::DataTransferOutOfRange),
            0x05 => Some(Fes::DataTransferLimitExceeded),
            0x06 => Some(Fes::UnsupportedParameter),
            _ => None,
        }
    }
}

/// A fatal transport error detected while decoding peer input.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("NVMe/TCP protocol error {fes:?} (fei {fei}): {reason}")]
pub struct ProtocolError {
    /// Fatal Error Status to send in the TermReq.
    pub fes: Fes,
    /// Fatal Error Information: for FES 01h/06h the byte offset of the offending field; else 0.
    pub fei: u32,
    /// Up to 128 bytes of the offending PDU header (copied into the TermReq), `hdr_len` valid.
    pub hdr: [u8; 128],
    /// How many bytes of `hdr` are the echoed header (0..=128).
    pub hdr_len: u8,
    /// Human-readable reason for logs.
    pub reason: &'static str,
}

/// A data digest mismatch is not a protocol error: it is reported as a `*DataDigestError` event,
/// separately from header digest errors (FES 03h); see the `pdu` module docs.
impl ProtocolError {
    /// Build an error copying at most 128 bytes of `hdr`.
    pub fn new(fes: Fes, fei: u32, hdr: &[u8], reason: &'static str) -> ProtocolError {
        let n = hdr.len().min(128);
        let mut h = [0u8; 128];
        h[..n].copy_from_slice(&hdr[..n]);
        ProtocolError {
            fes,
            fei,
            hdr: h,
            hdr_len: n as u8,
            reason,
        }
    }
    /// The echoed header: the first `hdr_len` bytes of `hdr`.
    pub fn header(&self) -> &[u8] {
        &self.hdr[..usize::from(self.hdr_len)]
    }
}
