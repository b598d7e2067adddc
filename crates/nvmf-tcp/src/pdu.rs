//! PDU wire format (NVMe/TCP 1.0 section 3.6): common header, PDU-specific headers, framing,
//! encoding (infallible, appends to a `Vec<u8>`) and frame decoding (fallible, bounds-checked).
//!
//! Layout of a data-bearing PDU: `CH+PSH (HLEN) | HDGST (4, if on) | PAD (to PDA) | DATA | DDGST`,
//! so `PDO = HLEN + HDGST + PAD` and `PLEN = PDO + DATA + DDGST`.

use nvme_spec::{Cqe, Sqe};

/// PDU types (CH byte 0).
pub mod pdu_type {
    pub const IC_REQ: u8 = 0x00;
    pub const IC_RESP: u8 = 0x01;
    pub const H2C_TERM_REQ: u8 = 0x02;
    pub const C2H_TERM_REQ: u8 = 0x03;
    pub const CAPSULE_CMD: u8 = 0x04;
    pub const CAPSULE_RESP: u8 = 0x05;
    pub const H2C_DATA: u8 = 0x06;
    pub const C2H_DATA: u8 = 0x07;
    pub const R2T: u8 = 0x09;
}

/// CH FLAGS bits (byte 1).
pub mod flags {
    /// Header digest present.
    pub const HDGSTF: u8 = 1 << 0;
    /// Data digest present.
    pub const DDGSTF: u8 = 1 << 1;
    /// Last data PDU of a transfer (H2CData, C2HData).
    pub const LAST_PDU: u8 = 1 << 2;
    /// C2HData only: command completed successfully, no CapsuleResp follows.
    pub const SUCCESS: u8 = 1 << 3;
}

/// Common header length.
pub const CH_LEN: usize = 8;
/// Fixed HLEN per type.
pub const HLEN_IC: usize = 128;
pub const HLEN_TERM: usize = 24;
pub const HLEN_CAPSULE_CMD: usize = 72;
pub const HLEN_CAPSULE_RESP: usize = 24;
pub const HLEN_DATA: usize = 24;
pub const HLEN_R2T: usize = 24;
/// Digest length.
pub const DIGEST_LEN: usize = 4;
/// Largest header a TermReq may echo.
pub const TERM_REQ_MAX_ECHO: usize = 128;

/// Negotiated digests (ICReq/ICResp DGST byte: bit0 header, bit1 data).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Digests {
    pub hdgst: bool,
    pub ddgst: bool,
}

/// ICReq PDU-specific fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IcReq {
    /// PDU Format Version (PFV), must be 0.
    pub pfv: u16,
    /// Host PDU Data Alignment (HPDA), 0's based dwords (0..=31).
    pub hpda: u8,
    pub digests: Digests,
    /// Maximum outstanding R2Ts per command (MAXR2T), 0's based.
    pub maxr2t: u32,
}

/// ICResp PDU-specific fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IcResp {
    pub pfv: u16,
    /// Controller PDU Data Alignment (CPDA), 0's based dwords.
    pub cpda: u8,
    pub digests: Digests,
    /// Maximum H2C data bytes per H2CData PDU (MAXH2CDATA), ≥ 4096.
    pub maxh2cdata: u32,
}

/// H2CTermReq / C2HTermReq fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TermReq<'a> {
    /// Fatal Error Status (FES), raw (peers may send values we do not know).
    pub fes: u16,
    /// Fatal Error Information (FEI), at byte offset 10.
    pub fei: u32,
    /// The echoed offending header (≤ 128 bytes).
    pub hdr: &'a [u8],
}

/// H2CData / C2HData header fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataHdr {
    /// Command Capsule CID (CCCID).
    pub cccid: u16,
    /// Transfer Tag (TTAG), H2CData only (echo of the R2T); 0 in C2HData.
    pub ttag: u16,
    /// Data Offset (DATAO) within the command's data.
    pub datao: u32,
    /// Data Length (DATAL).
    pub datal: u32,
    pub last: bool,
    /// C2HData SUCCESS flag.
    pub success: bool,
}

/// R2T fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct R2t {
    pub cccid: u16,
    pub ttag: u16,
    /// R2T Offset (R2TO).
    pub r2to: u32,
    /// R2T Length (R2TL).
    pub r2tl: u32,
}

/// A decoded, validated PDU borrowing its data from the input buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pdu<'a> {
    IcReq(IcReq),
    IcResp(IcResp),
    H2cTermReq(TermReq<'a>),
    C2hTermReq(TermReq<'a>),
    CapsuleCmd { sqe: Sqe, data: &'a [u8] },
    CapsuleResp(Cqe),
    H2cData { hdr: DataHdr, data: &'a [u8] },
    C2hData { hdr: DataHdr, data: &'a [u8] },
    R2t(R2t),
}
