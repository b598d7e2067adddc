//! PDU wire format (NVMe/TCP 1.0 PDU definitions): common header, PDU-specific headers, framing,
//! encoding (infallible, appends to a `Vec<u8>`) and frame decoding (fallible, bounds-checked).
//!
//! Layout of a data-bearing PDU: `CH+PSH (HLEN) | HDGST (4, if on) | PAD (to PDA) | DATA | DDGST`,
//! so `PDO = HLEN + HDGST + PAD` and `PLEN = PDO + DATA + DDGST`.
//!
//! # Decoding
//!
//! [`decode_header`] validates everything that can be known from the PDU header (CH, PSH and HDGST)
//! as soon as those bytes are in the buffer, long before a large PLEN has arrived; the role state
//! machines ([`crate::TargetConn`], [`crate::HostConn`]) then check the header against their own
//! state (R2T bookkeeping) and call [`FrameHeader::decode_body`] once the whole PDU is there.
//! [`decode_frame`] does both steps for callers without state. Nothing allocates; a PDU's data is
//! returned as a slice of the input.
//!
//! Checks, in order (all fatal, each a [`ProtocolError`] that becomes a TermReq):
//!
//! | check | FES | FEI |
//! |---|---|---|
//! | PDU-Type unknown, or not legal in this direction (e.g. R2T sent to a target) | 01h | 0 |
//! | any PDU but ICReq/ICResp/TermReq before the IC exchange; a second ICReq/ICResp | 02h | 0 |
//! | HLEN ≠ the fixed HLEN of the type | 01h | 2 |
//! | HDGSTF ≠ "header digest negotiated" (types that carry digests) | 01h | 1 |
//! | HDGST mismatch | 03h | 0 |
//! | PLEN: ICReq/ICResp ≠ 128; TermReq outside 24..=152; CapsuleResp/R2T ≠ HLEN+HDGST; data PDU < HLEN+HDGST or too short for its data | 01h | 4 |
//! | PDO: ≠ 0 without data; ≠ HLEN+HDGST+PAD (PAD from the negotiated PDA) with data; > PLEN | 01h | 3 |
//! | DDGSTF ≠ "data digest negotiated and the PDU carries data" | 01h | 1 |
//! | in-capsule data > `max_icd`; data PDU DATA > `max_data` | 05h | 0 |
//! | ICReq/ICResp PFV ≠ 0 | 06h | 8 |
//! | ICReq HPDA / ICResp CPDA > 31 | 06h | 10 |
//! | ICResp MAXH2CDATA < 4096 or not a multiple of 4 | 01h | 12 |
//! | CapsuleCmd with data: SGL1 type ≠ 01h (in-capsule, offset) | 01h | 47 |
//! | CapsuleCmd with data: SGL1 address (offset) ≠ 0 | 06h | 32 |
//! | CapsuleCmd with data: SGL1 length ≠ in-capsule byte count | 01h | 40 |
//! | H2CData/C2HData: DATAL = 0 or ≠ PLEN − PDO − DDGST | 01h | 16 |
//! | H2CData/C2HData: DATAO + DATAL overflows | 04h | 0 |
//! | H2CData with SUCCESS; C2HData with SUCCESS but not LAST_PDU | 01h | 1 |
//! | R2T: R2TL = 0 or R2TO + R2TL overflows | 01h | 16 |
//!
//! Why FES 01h FEI 0 for a PDU type that is wrong for the direction, not 02h: the PDU-Type field
//! itself holds a value the receiver can never accept, which is what "Invalid PDU Header Field"
//! describes (NVMe/TCP 1.0 H2CTermReq/C2HTermReq FES table); SPDK does the same (`nvmf_tcp_pdu_ch_handle`).
//! PDU Sequence Error is kept for PDUs that are legal in the direction but not in the current
//! state (data before ICReq, second ICReq), as the spec's own examples say.
//!
//! FEI is the byte offset of the offending field for FES 01h/06h and 0 otherwise (the spec
//! defines FEI only for those two). For header-level errors the echoed header is HLEN (+HDGST)
//! bytes of the offending PDU. Whatever the 8-byte common header alone decides (type, sequence,
//! HLEN, HDGSTF/DDGSTF, PLEN and PDO relations, the limits that follow from PLEN) is judged as
//! soon as those 8 bytes arrive — a peer that sends a bad common header and stalls is answered at
//! once — and echoes as much of the header as has arrived (at least the common header); the
//! checks that need more (header digest, PSH fields) wait for the whole header.
//!
//! # Data digest errors are not fatal
//!
//! The FES table has no data digest code (03h is *Header* Digest Error). NVMe/TCP 1.0's transport
//! error handling makes a data digest error non-fatal: the header is intact, so the
//! stream stays in sync, and the command the data belongs to is completed with *Transient
//! Transport Error* (SCT 0, SC 22h). SPDK does exactly that (`data_crc32_calc_done` sets
//! `SPDK_NVME_SC_COMMAND_TRANSIENT_TRANSPORT_ERROR`), and the Linux host since 5.15 ("nvme-tcp: Do
//! not reset transport on data digest errors") fails only the request. (The Linux target closes
//! the socket instead, which is allowed for any error but loses every other command.) So the
//! decoder reports a data digest mismatch in [`Frame::data_digest_ok`], and the role state
//! machines turn it into `*DataDigestError` events.

use crate::digest;
use crate::error::{Fes, ProtocolError};
use nvme_spec::{Cqe, Sqe};

/// PDU types (CH byte 0).
pub mod pdu_type {
    /// 00h ICReq: Initialize Connection Request, host to controller, the first PDU.
    pub const IC_REQ: u8 = 0x00;
    /// 01h ICResp: Initialize Connection Response, controller to host.
    pub const IC_RESP: u8 = 0x01;
    /// 02h H2CTermReq: the host terminates the connection after a fatal error.
    pub const H2C_TERM_REQ: u8 = 0x02;
    /// 03h C2HTermReq: the controller terminates the connection after a fatal error.
    pub const C2H_TERM_REQ: u8 = 0x03;
    /// 04h CapsuleCmd: a command capsule (SQE, optionally in-capsule data), host to controller.
    pub const CAPSULE_CMD: u8 = 0x04;
    /// 05h CapsuleResp: a response capsule (CQE), controller to host.
    pub const CAPSULE_RESP: u8 = 0x05;
    /// 06h H2CData: host-to-controller data answering an R2T.
    pub const H2C_DATA: u8 = 0x06;
    /// 07h C2HData: controller-to-host data of a command (reads).
    pub const C2H_DATA: u8 = 0x07;
    /// 09h R2T: Ready to Transfer, the controller asks for a range of a command's data.
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

/// Common header (CH) length in bytes: PDU-Type, FLAGS, HLEN, PDO, PLEN.
pub const CH_LEN: usize = 8;
/// HLEN of ICReq and ICResp, in bytes (their PLEN is the same: they carry no data or digests).
pub const HLEN_IC: usize = 128;
/// HLEN of H2CTermReq and C2HTermReq, in bytes; the echoed header follows it.
pub const HLEN_TERM: usize = 24;
/// HLEN of CapsuleCmd, in bytes: the 8-byte CH and the 64-byte SQE.
pub const HLEN_CAPSULE_CMD: usize = 72;
/// HLEN of CapsuleResp, in bytes: the 8-byte CH and the 16-byte CQE.
pub const HLEN_CAPSULE_RESP: usize = 24;
/// HLEN of H2CData and C2HData, in bytes.
pub const HLEN_DATA: usize = 24;
/// HLEN of R2T, in bytes.
pub const HLEN_R2T: usize = 24;
/// Length in bytes of a header digest (HDGST) or data digest (DDGST): one CRC32C.
pub const DIGEST_LEN: usize = 4;
/// Most bytes of the offending PDU header a TermReq may echo.
pub const TERM_REQ_MAX_ECHO: usize = 128;

/// Negotiated digests (ICReq/ICResp DGST byte: bit0 header, bit1 data).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Digests {
    /// Header digest (HDGST): a CRC32C after the HLEN header bytes of every CapsuleCmd,
    /// CapsuleResp, H2CData, C2HData and R2T (ICReq/ICResp and TermReqs never carry digests).
    pub hdgst: bool,
    /// Data digest (DDGST): a CRC32C after the data of every PDU that carries data (not over PAD).
    pub ddgst: bool,
}

/// ICReq PDU-specific fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IcReq {
    /// PDU Format Version (PFV), must be 0.
    pub pfv: u16,
    /// Host PDU Data Alignment (HPDA), 0's based dwords (0..=31).
    pub hpda: u8,
    /// Digests the host asks for (DGST byte: HDGST_ENABLE, DDGST_ENABLE).
    pub digests: Digests,
    /// Maximum outstanding R2Ts per command (MAXR2T), 0's based.
    pub maxr2t: u32,
}

/// ICResp PDU-specific fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IcResp {
    /// PDU Format Version (PFV), must be 0.
    pub pfv: u16,
    /// Controller PDU Data Alignment (CPDA), 0's based dwords (0..=31): the alignment the host
    /// must use for the data of the PDUs it sends.
    pub cpda: u8,
    /// Digests the controller enabled (DGST byte); a subset of those the host asked for.
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
    /// Data Length (DATAL): bytes of data in this PDU. Ignored when encoding (the length of the
    /// data slice is used).
    pub datal: u32,
    /// LAST_PDU flag: the last data PDU of the transfer (C2HData: of the command's data;
    /// H2CData: of the R2T).
    pub last: bool,
    /// C2HData SUCCESS flag: the command completed successfully and no CapsuleResp follows
    /// (only with `last`; never set on H2CData).
    pub success: bool,
}

/// R2T fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct R2t {
    /// Command Capsule CID (CCCID): the command whose data is requested.
    pub cccid: u16,
    /// Transfer Tag (TTAG), chosen by the controller; the host echoes it in its H2CData PDUs.
    pub ttag: u16,
    /// R2T Offset (R2TO): where the requested range starts in the command's data, in bytes.
    pub r2to: u32,
    /// R2T Length (R2TL): bytes requested, never 0.
    pub r2tl: u32,
}

/// A decoded, validated PDU borrowing its data from the input buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pdu<'a> {
    /// ICReq (00h), host to controller.
    IcReq(IcReq),
    /// ICResp (01h), controller to host.
    IcResp(IcResp),
    /// H2CTermReq (02h), host to controller.
    H2cTermReq(TermReq<'a>),
    /// C2HTermReq (03h), controller to host.
    C2hTermReq(TermReq<'a>),
    /// CapsuleCmd (04h), host to controller.
    CapsuleCmd {
        /// The 64-byte submission queue entry.
        sqe: Sqe,
        /// In-capsule data, empty if none.
        data: &'a [u8],
    },
    /// CapsuleResp (05h), controller to host: the completion queue entry.
    CapsuleResp(Cqe),
    /// H2CData (06h), host to controller.
    H2cData {
        /// The PDU-specific header.
        hdr: DataHdr,
        /// The data, DATAL bytes (without PAD and DDGST).
        data: &'a [u8],
    },
    /// C2HData (07h), controller to host.
    C2hData {
        /// The PDU-specific header.
        hdr: DataHdr,
        /// The data, DATAL bytes (without PAD and DDGST).
        data: &'a [u8],
    },
    /// R2T (09h), controller to host.
    R2t(R2t),
}

/// Largest PDU Data Alignment value (HPDA/CPDA are 0's based dwords, 0..=31 → 4..=128 bytes).
pub const MAX_PDA: u8 = 31;
/// Smallest MAXH2CDATA a controller may advertise (NVMe/TCP 1.0 ICResp; Linux
/// `NVME_TCP_MIN_MAXH2CDATA`).
pub const MIN_MAXH2CDATA: u32 = 4096;
/// Largest TermReq PDU: HLEN 24 + 128 echoed bytes.
pub const TERM_REQ_MAX_PLEN: usize = HLEN_TERM + TERM_REQ_MAX_ECHO;

/// FEI values: byte offsets of header fields, used with FES 01h / 06h.
pub mod fei {
    /// CH PDU-Type.
    pub const PDU_TYPE: u32 = 0;
    /// CH FLAGS.
    pub const FLAGS: u32 = 1;
    /// CH HLEN.
    pub const HLEN: u32 = 2;
    /// CH PDO.
    pub const PDO: u32 = 3;
    /// CH PLEN.
    pub const PLEN: u32 = 4;
    /// ICReq/ICResp PFV.
    pub const PFV: u32 = 8;
    /// ICReq HPDA / ICResp CPDA.
    pub const PDA: u32 = 10;
    /// ICReq/ICResp DGST.
    pub const DGST: u32 = 11;
    /// ICReq MAXR2T / ICResp MAXH2CDATA.
    pub const MAXR2T_MAXH2CDATA: u32 = 12;
    /// H2CData/C2HData/R2T CCCID.
    pub const CCCID: u32 = 8;
    /// H2CData/R2T TTAG.
    pub const TTAG: u32 = 10;
    /// H2CData/C2HData DATAO, R2T R2TO.
    pub const DATAO: u32 = 12;
    /// H2CData/C2HData DATAL, R2T R2TL.
    pub const DATAL: u32 = 16;
    /// CapsuleCmd: SGL1 address (SQE byte 24).
    pub const SGL_ADDR: u32 = 8 + 24;
    /// CapsuleCmd: SGL1 length (SQE byte 32).
    pub const SGL_LEN: u32 = 8 + 32;
    /// CapsuleCmd: SGL1 descriptor type/subtype (SQE byte 39).
    pub const SGL_TYPE: u32 = 8 + 39;
}

impl Digests {
    /// No digests (the state before the IC exchange).
    pub const NONE: Digests = Digests {
        hdgst: false,
        ddgst: false,
    };
    /// Both digests.
    pub const BOTH: Digests = Digests {
        hdgst: true,
        ddgst: true,
    };

    /// From the ICReq/ICResp DGST byte (reserved bits ignored).
    pub fn from_bits(dgst: u8) -> Digests {
        Digests {
            hdgst: dgst & 0x01 != 0,
            ddgst: dgst & 0x02 != 0,
        }
    }
    /// The ICReq/ICResp DGST byte.
    pub fn bits(self) -> u8 {
        u8::from(self.hdgst) | (u8::from(self.ddgst) << 1)
    }
    /// True if every digest enabled in `self` is enabled in `other`.
    pub fn is_subset_of(self, other: Digests) -> bool {
        (!self.hdgst || other.hdgst) && (!self.ddgst || other.ddgst)
    }
}

/// Which side of the connection is receiving: decides which PDU types are legal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The controller: receives ICReq, H2CTermReq, CapsuleCmd, H2CData.
    Target,
    /// The host: receives ICResp, C2HTermReq, CapsuleResp, C2HData, R2T.
    Host,
}

/// What the decoder needs to know about the connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodeLimits {
    /// Receiving role.
    pub role: Role,
    /// Negotiated digests; `None` until the ICReq/ICResp exchange (only ICReq/ICResp and
    /// TermReq are legal then, and an ICReq/ICResp afterwards is a sequence error).
    pub digests: Option<Digests>,
    /// PDU Data Alignment the peer must use for data it sends us, 0's based dwords (target: the
    /// CPDA it advertised; host: the HPDA it requested). Values above 31 are treated as 31.
    pub pda: u8,
    /// Largest in-capsule data accepted in a CapsuleCmd (target role).
    pub max_icd: u32,
    /// Largest DATA in one H2CData (target: MAXH2CDATA) or C2HData (host) PDU.
    pub max_data: u32,
}

/// One whole, validated PDU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame<'a> {
    /// The decoded PDU; its data borrows from the input.
    pub pdu: Pdu<'a>,
    /// PLEN: bytes of the input this PDU occupies.
    pub len: usize,
    /// False if the PDU carries data with a data digest that does not match (non-fatal, see the
    /// module docs). Always true when no data digest is present.
    pub data_digest_ok: bool,
}

/// A PDU whose header (CH, PSH, HDGST) has been fully validated; its data may not have arrived yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    /// The decoded PDU with empty data slices (filled in by [`FrameHeader::decode_body`]).
    pub pdu: Pdu<'static>,
    /// PLEN.
    pub plen: usize,
    /// HLEN + HDGST: the header bytes echoed in a TermReq for errors found in this PDU.
    pub header_len: usize,
    /// Offset of DATA in the PDU (PDO), 0 if none.
    pub data_off: usize,
    /// Length of DATA, 0 if none.
    pub data_len: usize,
    /// A data digest follows DATA.
    pub ddgst: bool,
}

impl FrameHeader {
    /// The header bytes to echo in a TermReq (at most 128).
    pub fn echo<'b>(&self, buf: &'b [u8]) -> &'b [u8] {
        let n = self.header_len.min(TERM_REQ_MAX_ECHO).min(buf.len());
        &buf[..n]
    }

    /// Finish decoding once `buf` holds the whole PDU: `None` if it does not yet. Checks the data
    /// digest (reported, not fatal) and borrows the data from `buf`.
    pub fn decode_body<'a>(&self, buf: &'a [u8]) -> Option<Frame<'a>> {
        let pdu_bytes = buf.get(..self.plen)?;
        let data_end = self.data_off + self.data_len;
        let data = pdu_bytes.get(self.data_off..data_end)?;
        let data_digest_ok = if self.ddgst {
            let got = pdu_bytes.get(data_end..data_end + DIGEST_LEN)?;
            got == digest::crc32c(data).to_le_bytes()
        } else {
            true
        };
        let pdu = match self.pdu {
            Pdu::H2cTermReq(t) => Pdu::H2cTermReq(TermReq {
                hdr: pdu_bytes.get(HLEN_TERM..)?,
                ..t
            }),
            Pdu::C2hTermReq(t) => Pdu::C2hTermReq(TermReq {
                hdr: pdu_bytes.get(HLEN_TERM..)?,
                ..t
            }),
            Pdu::CapsuleCmd { sqe, .. } => Pdu::CapsuleCmd { sqe, data },
            Pdu::H2cData { hdr, .. } => Pdu::H2cData { hdr, data },
            Pdu::C2hData { hdr, .. } => Pdu::C2hData { hdr, data },
            Pdu::IcReq(x) => Pdu::IcReq(x),
            Pdu::IcResp(x) => Pdu::IcResp(x),
            Pdu::CapsuleResp(x) => Pdu::CapsuleResp(x),
            Pdu::R2t(x) => Pdu::R2t(x),
        };
        Some(Frame {
            pdu,
            len: self.plen,
            data_digest_ok,
        })
    }
}

/// Alignment in bytes for a 0's based PDA value (clamped to [`MAX_PDA`]).
#[inline]
pub fn pda_alignment(pda: u8) -> usize {
    (usize::from(pda.min(MAX_PDA)) + 1) * 4
}

/// PDO of a data-bearing PDU: HLEN + HDGST rounded up to the PDA alignment.
#[inline]
pub fn data_pdo(hlen: usize, hdgst: bool, pda: u8) -> usize {
    let base = hlen + if hdgst { DIGEST_LEN } else { 0 };
    base.next_multiple_of(pda_alignment(pda))
}

/// Fixed HLEN of a PDU type legal for `role` to receive; `None` if the type is unknown or not
/// legal in that direction.
#[inline]
pub fn rx_hlen(role: Role, ty: u8) -> Option<usize> {
    use pdu_type as t;
    match (role, ty) {
        (Role::Target, t::IC_REQ) | (Role::Host, t::IC_RESP) => Some(HLEN_IC),
        (Role::Target, t::H2C_TERM_REQ) | (Role::Host, t::C2H_TERM_REQ) => Some(HLEN_TERM),
        (Role::Target, t::CAPSULE_CMD) => Some(HLEN_CAPSULE_CMD),
        (Role::Target, t::H2C_DATA) | (Role::Host, t::C2H_DATA) => Some(HLEN_DATA),
        (Role::Host, t::CAPSULE_RESP) => Some(HLEN_CAPSULE_RESP),
        (Role::Host, t::R2T) => Some(HLEN_R2T),
        _ => None,
    }
}

/// True for the PDU types that carry header/data digests once negotiated (all but ICReq/ICResp
/// and the TermReqs, which never do: SPDK `g_nvme_tcp_hdgst`; Linux host "C2HTermReq never includes
/// Header or Data digests").
#[inline]
pub fn carries_digests(ty: u8) -> bool {
    use pdu_type as t;
    matches!(
        ty,
        t::CAPSULE_CMD | t::CAPSULE_RESP | t::H2C_DATA | t::C2H_DATA | t::R2T
    )
}

// Always inlined: with the parts of `decode_header` inlined into it, plain `#[inline]` left
// `le32` out of line there (a call per field read on the data path).
#[inline(always)]
fn le16(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}

#[inline(always)]
fn le32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

#[inline(always)]
fn le64(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(a)
}

#[inline]
fn put16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_le_bytes());
}

#[inline]
fn put32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

/// Validate the header of the PDU at the start of `buf`.
///
/// `Ok(None)`: the header (HLEN + HDGST bytes of the type) is not complete yet. `Ok(Some(h))`: the
/// header is valid; the PDU is complete once `buf.len() >= h.plen`. See the module docs for the
/// checks and their FES/FEI.
///
/// The steps, in the order of the module docs' table: the PDU type, `check_common_header`
/// (sequence, HLEN, HDGSTF), `framing` (PLEN, PDO, DDGSTF: where the data is) and
/// `check_data_limits`, all from the common header alone; then, once the whole header is here,
/// `check_header_digest`, `check_psh` and `read_psh`. Each part is called once and
/// `#[inline(always)]`, so this is still one function in the compiled code, as it is on every
/// PDU of the data path (with plain `#[inline]` a release build kept the PSH part out of line).
pub fn decode_header(buf: &[u8], lim: &DecodeLimits) -> Result<Option<FrameHeader>, ProtocolError> {
    let Some(ch) = buf.get(..CH_LEN) else {
        return Ok(None);
    };
    let Some(hlen) = rx_hlen(lim.role, ch[0]) else {
        return Err(ProtocolError::new(
            Fes::InvalidHeaderField,
            fei::PDU_TYPE,
            ch,
            "PDU type unknown or not valid in this direction",
        ));
    };
    let c = CommonHeader::parse(ch, hlen, lim.digests);
    // Everything the 8-byte common header decides is judged as soon as it is here, before
    // waiting for the rest of the header (a peer that sends a bad CH and stalls gets its
    // TermReq at once). These errors echo as much of the header as has arrived; once the whole
    // header is here that is HLEN + HDGST bytes (at most 128), which the later errors echo too.
    let echo = &buf[..buf.len().min(c.header_len).min(TERM_REQ_MAX_ECHO)];
    let reject = |r: Reject| r.echoing(echo);

    check_common_header(&c, lim.digests.is_some()).map_err(reject)?;
    let data = framing(&c, lim.pda).map_err(reject)?;
    check_data_limits(c.ty, data.len, lim).map_err(reject)?;

    let Some(h) = buf.get(..c.header_len) else {
        return Ok(None);
    };
    check_header_digest(h, &c).map_err(reject)?;
    check_psh(h, &c, data.len).map_err(reject)?;
    Ok(Some(FrameHeader {
        pdu: read_psh(h, &c),
        plen: c.plen,
        header_len: c.header_len,
        data_off: data.off,
        data_len: data.len,
        ddgst: data.ddgst,
    }))
}

/// A fatal header error before the echoed header is attached: [`decode_header`] turns it into a
/// [`ProtocolError`] carrying as much of the header as has arrived.
#[derive(Clone, Copy, Debug)]
struct Reject {
    fes: Fes,
    fei: u32,
    reason: &'static str,
}

impl Reject {
    #[inline(always)]
    fn new(fes: Fes, fei: u32, reason: &'static str) -> Reject {
        Reject { fes, fei, reason }
    }
    /// FES 01h Invalid PDU Header Field, the most common one.
    #[inline(always)]
    fn field(fei: u32, reason: &'static str) -> Reject {
        Reject::new(Fes::InvalidHeaderField, fei, reason)
    }
    #[inline(always)]
    fn echoing(self, hdr: &[u8]) -> ProtocolError {
        ProtocolError::new(self.fes, self.fei, hdr, self.reason)
    }
}

/// The common header of a PDU whose type is legal for the receiving role, with what follows from
/// the type and the negotiated digests. Nothing but the type is checked yet.
#[derive(Clone, Copy, Debug)]
struct CommonHeader {
    ty: u8,
    flags: u8,
    /// The HLEN byte as received.
    hlen_field: u8,
    /// The fixed HLEN of the type.
    hlen: usize,
    pdo: usize,
    plen: usize,
    /// Negotiated digests ([`Digests::NONE`] before the IC exchange).
    dig: Digests,
    /// The type carries digests once negotiated ([`carries_digests`]).
    dgst_type: bool,
    /// A header digest follows the PSH.
    hdgst: bool,
    /// HLEN + HDGST.
    header_len: usize,
}

impl CommonHeader {
    #[inline(always)]
    fn parse(ch: &[u8], hlen: usize, digests: Option<Digests>) -> CommonHeader {
        let ty = ch[0];
        let dig = digests.unwrap_or(Digests::NONE);
        let dgst_type = carries_digests(ty);
        let hdgst = dgst_type && dig.hdgst;
        CommonHeader {
            ty,
            flags: ch[1],
            hlen_field: ch[2],
            hlen,
            pdo: usize::from(ch[3]),
            plen: usize::try_from(le32(ch, 4)).unwrap_or(usize::MAX),
            dig,
            dgst_type,
            hdgst,
            header_len: hlen + if hdgst { DIGEST_LEN } else { 0 },
        }
    }

    #[inline(always)]
    fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }
}

/// Sequence (only ICReq/ICResp and TermReq before the IC exchange, no ICReq/ICResp after it),
/// HLEN and HDGSTF. (The type itself was checked by [`rx_hlen`].)
#[inline(always)]
fn check_common_header(c: &CommonHeader, established: bool) -> Result<(), Reject> {
    use pdu_type as t;
    let is_ic = c.ty == t::IC_REQ || c.ty == t::IC_RESP;
    let is_term = c.ty == t::H2C_TERM_REQ || c.ty == t::C2H_TERM_REQ;
    if !established && !is_ic && !is_term {
        return Err(Reject::new(
            Fes::PduSequenceError,
            0,
            "PDU before the ICReq/ICResp exchange",
        ));
    }
    if established && is_ic {
        return Err(Reject::new(Fes::PduSequenceError, 0, "second ICReq/ICResp"));
    }
    if usize::from(c.hlen_field) != c.hlen {
        return Err(Reject::field(fei::HLEN, "HLEN does not match the PDU type"));
    }
    if c.dgst_type && c.has(flags::HDGSTF) != c.hdgst {
        return Err(Reject::field(
            fei::FLAGS,
            "HDGSTF does not match negotiation",
        ));
    }
    Ok(())
}

/// Where a PDU's data is: offset (PDO), length, and whether a data digest follows it.
#[derive(Clone, Copy, Debug)]
struct DataSpan {
    off: usize,
    len: usize,
    ddgst: bool,
}

impl DataSpan {
    /// A PDU without data.
    const NONE: DataSpan = DataSpan {
        off: 0,
        len: 0,
        ddgst: false,
    };
}

/// PLEN, PDO and DDGSTF of the type, and from them where the data is.
#[inline(always)]
fn framing(c: &CommonHeader, pda: u8) -> Result<DataSpan, Reject> {
    use pdu_type as t;
    match c.ty {
        t::IC_REQ | t::IC_RESP => frame_ic(c),
        t::H2C_TERM_REQ | t::C2H_TERM_REQ => frame_term_req(c),
        t::CAPSULE_RESP | t::R2T => frame_without_data(c),
        // CapsuleCmd, H2CData, C2HData.
        _ => frame_with_data(c, pda),
    }
}

/// ICReq/ICResp: PLEN 128, no data.
#[inline(always)]
fn frame_ic(c: &CommonHeader) -> Result<DataSpan, Reject> {
    if c.plen != HLEN_IC {
        return Err(Reject::field(fei::PLEN, "ICReq/ICResp PLEN is not 128"));
    }
    if c.pdo != 0 {
        return Err(Reject::field(fei::PDO, "PDO must be 0"));
    }
    Ok(DataSpan::NONE)
}

/// TermReq: HLEN plus up to 128 echoed bytes, which are not data.
#[inline(always)]
fn frame_term_req(c: &CommonHeader) -> Result<DataSpan, Reject> {
    if !(HLEN_TERM..=TERM_REQ_MAX_PLEN).contains(&c.plen) {
        return Err(Reject::field(fei::PLEN, "TermReq PLEN out of range"));
    }
    // The echoed header is carried without a data PDO (SPDK sends 0); tolerate HLEN too.
    if c.pdo != 0 && c.pdo != HLEN_TERM {
        return Err(Reject::field(fei::PDO, "TermReq PDO invalid"));
    }
    Ok(DataSpan::NONE)
}

/// CapsuleResp, R2T: never data, so PLEN is HLEN + HDGST, PDO 0 and no DDGSTF.
#[inline(always)]
fn frame_without_data(c: &CommonHeader) -> Result<DataSpan, Reject> {
    if c.plen != c.header_len {
        return Err(Reject::field(fei::PLEN, "PLEN must be HLEN + HDGST"));
    }
    if c.pdo != 0 {
        return Err(Reject::field(fei::PDO, "PDO must be 0"));
    }
    if c.has(flags::DDGSTF) {
        return Err(Reject::field(
            fei::FLAGS,
            "DDGSTF set on a PDU without data",
        ));
    }
    Ok(DataSpan::NONE)
}

/// CapsuleCmd, H2CData, C2HData: data if PLEN goes past the header, at the PDO the negotiated
/// HDGST and PDA give, followed by a data digest if negotiated.
#[inline(always)]
fn frame_with_data(c: &CommonHeader, pda: u8) -> Result<DataSpan, Reject> {
    if c.plen < c.header_len {
        return Err(Reject::field(fei::PLEN, "PLEN smaller than the header"));
    }
    if c.plen == c.header_len {
        if c.pdo != 0 {
            return Err(Reject::field(fei::PDO, "PDO must be 0 without data"));
        }
        if c.has(flags::DDGSTF) {
            return Err(Reject::field(
                fei::FLAGS,
                "DDGSTF set on a PDU without data",
            ));
        }
        return Ok(DataSpan::NONE);
    }
    if c.pdo != data_pdo(c.hlen, c.hdgst, pda) || c.pdo > c.plen {
        return Err(Reject::field(
            fei::PDO,
            "PDO does not match HLEN, HDGST and PDA",
        ));
    }
    if c.has(flags::DDGSTF) != c.dig.ddgst {
        return Err(Reject::field(
            fei::FLAGS,
            "DDGSTF does not match negotiation",
        ));
    }
    let ddgst_len = if c.dig.ddgst { DIGEST_LEN } else { 0 };
    match c.plen.checked_sub(c.pdo + ddgst_len) {
        Some(len) if len > 0 => Ok(DataSpan {
            off: c.pdo,
            len,
            ddgst: c.dig.ddgst,
        }),
        _ => Err(Reject::field(
            fei::PLEN,
            "PLEN too small for PDO and digest",
        )),
    }
}

/// The limits that follow from PLEN alone: in-capsule data and data PDU DATA sizes.
#[inline(always)]
fn check_data_limits(ty: u8, data_len: usize, lim: &DecodeLimits) -> Result<(), Reject> {
    use pdu_type as t;
    if ty == t::CAPSULE_CMD && data_len > usize::try_from(lim.max_icd).unwrap_or(usize::MAX) {
        return Err(Reject::new(
            Fes::DataTransferLimitExceeded,
            0,
            "in-capsule data exceeds the limit",
        ));
    }
    if (ty == t::H2C_DATA || ty == t::C2H_DATA)
        && data_len > usize::try_from(lim.max_data).unwrap_or(usize::MAX)
    {
        return Err(Reject::new(
            Fes::DataTransferLimitExceeded,
            0,
            "DATAL exceeds the negotiated maximum",
        ));
    }
    Ok(())
}

/// HDGST, if negotiated for the type, over the HLEN bytes of `h` (the whole header).
#[inline(always)]
fn check_header_digest(h: &[u8], c: &CommonHeader) -> Result<(), Reject> {
    if c.hdgst && le32(h, c.hlen) != digest::crc32c(&h[..c.hlen]) {
        return Err(Reject::new(
            Fes::HeaderDigestError,
            0,
            "header digest mismatch",
        ));
    }
    Ok(())
}

/// The checks on the PDU-specific header of each type, in the whole header `h`; `data_len` is
/// from `framing`. [`read_psh`] then reads the fields: checking first and building the [`Pdu`]
/// last lets the compiler build it in place (a `Result<Pdu, _>` in between cost a copy of the
/// SQE per CapsuleCmd).
#[inline(always)]
fn check_psh(h: &[u8], c: &CommonHeader, data_len: usize) -> Result<(), Reject> {
    use pdu_type as t;
    match c.ty {
        t::IC_REQ | t::IC_RESP => check_ic(h, c.ty),
        t::H2C_TERM_REQ | t::C2H_TERM_REQ | t::CAPSULE_RESP => Ok(()),
        t::CAPSULE_CMD => check_capsule_cmd(h, data_len),
        t::H2C_DATA => check_h2c_data(h, c.flags, data_len),
        t::C2H_DATA => check_c2h_data(h, c.flags, data_len),
        t::R2T => check_r2t(h),
        // rx_hlen() accepted only the types above.
        _ => Err(Reject::field(fei::PDU_TYPE, "PDU type not valid")),
    }
}

/// The PDU-specific header of each type, once [`check_psh`] has passed (data slices empty, filled
/// in by [`FrameHeader::decode_body`]).
#[inline(always)]
fn read_psh(h: &[u8], c: &CommonHeader) -> Pdu<'static> {
    use pdu_type as t;
    match c.ty {
        t::IC_REQ => Pdu::IcReq(IcReq {
            pfv: le16(h, 8),
            hpda: h[10],
            digests: Digests::from_bits(h[11]),
            maxr2t: le32(h, 12),
        }),
        t::IC_RESP => Pdu::IcResp(IcResp {
            pfv: le16(h, 8),
            cpda: h[10],
            digests: Digests::from_bits(h[11]),
            maxh2cdata: le32(h, 12),
        }),
        t::H2C_TERM_REQ => Pdu::H2cTermReq(read_term_req(h)),
        t::C2H_TERM_REQ => Pdu::C2hTermReq(read_term_req(h)),
        t::CAPSULE_CMD => {
            let mut sqe = Sqe([0; 64]);
            sqe.0.copy_from_slice(&h[CH_LEN..HLEN_CAPSULE_CMD]);
            Pdu::CapsuleCmd { sqe, data: &[] }
        }
        t::CAPSULE_RESP => {
            let mut cqe = [0u8; 16];
            cqe.copy_from_slice(&h[CH_LEN..HLEN_CAPSULE_RESP]);
            Pdu::CapsuleResp(Cqe::decode(&cqe))
        }
        t::H2C_DATA => Pdu::H2cData {
            hdr: read_data_hdr(h, c.flags, le16(h, 10), false),
            data: &[],
        },
        t::C2H_DATA => Pdu::C2hData {
            hdr: read_data_hdr(h, c.flags, 0, c.has(flags::SUCCESS)),
            data: &[],
        },
        // R2T: check_psh() let no other type through.
        _ => Pdu::R2t(R2t {
            cccid: le16(h, 8),
            ttag: le16(h, 10),
            r2to: le32(h, 12),
            r2tl: le32(h, 16),
        }),
    }
}

/// ICReq/ICResp: PFV 0, PDA ≤ 31; ICResp MAXH2CDATA ≥ 4096 and a multiple of 4.
#[inline(always)]
fn check_ic(h: &[u8], ty: u8) -> Result<(), Reject> {
    if le16(h, 8) != 0 {
        return Err(Reject::new(
            Fes::UnsupportedParameter,
            fei::PFV,
            "PFV not supported",
        ));
    }
    if h[10] > MAX_PDA {
        return Err(Reject::new(
            Fes::UnsupportedParameter,
            fei::PDA,
            "PDA above 31",
        ));
    }
    let maxh2cdata = le32(h, 12);
    if ty == pdu_type::IC_RESP && (maxh2cdata < MIN_MAXH2CDATA || !maxh2cdata.is_multiple_of(4)) {
        return Err(Reject::field(
            fei::MAXR2T_MAXH2CDATA,
            "MAXH2CDATA below 4096 or not a multiple of 4",
        ));
    }
    Ok(())
}

/// H2CTermReq/C2HTermReq: FES and FEI (the echoed header is borrowed by `decode_body`).
#[inline(always)]
fn read_term_req(h: &[u8]) -> TermReq<'static> {
    TermReq {
        fes: le16(h, 8),
        fei: le32(h, 10),
        hdr: &[],
    }
}

/// CapsuleCmd with in-capsule data: SGL1 (SQE bytes 24..40) must describe exactly that data.
#[inline(always)]
fn check_capsule_cmd(h: &[u8], data_len: usize) -> Result<(), Reject> {
    if data_len == 0 {
        return Ok(());
    }
    if h[fei::SGL_TYPE as usize] != nvme_spec::sqe::SGL_ICD {
        return Err(Reject::field(
            fei::SGL_TYPE,
            "in-capsule data without an in-capsule SGL",
        ));
    }
    if le64(h, fei::SGL_ADDR as usize) != 0 {
        return Err(Reject::new(
            Fes::UnsupportedParameter,
            fei::SGL_ADDR,
            "in-capsule data offset not 0",
        ));
    }
    if usize::try_from(le32(h, fei::SGL_LEN as usize)).ok() != Some(data_len) {
        return Err(Reject::field(
            fei::SGL_LEN,
            "SGL length differs from in-capsule data",
        ));
    }
    Ok(())
}

/// H2CData: no SUCCESS flag, then the data header checks.
#[inline(always)]
fn check_h2c_data(h: &[u8], flags: u8, data_len: usize) -> Result<(), Reject> {
    if flags & flags::SUCCESS != 0 {
        return Err(Reject::field(fei::FLAGS, "SUCCESS flag on H2CData"));
    }
    check_datao_datal(h, data_len)
}

/// C2HData: SUCCESS only with LAST_PDU, then the data header checks.
#[inline(always)]
fn check_c2h_data(h: &[u8], flags: u8, data_len: usize) -> Result<(), Reject> {
    if flags & flags::SUCCESS != 0 && flags & flags::LAST_PDU == 0 {
        return Err(Reject::field(fei::FLAGS, "SUCCESS without LAST_PDU"));
    }
    check_datao_datal(h, data_len)
}

/// H2CData/C2HData DATAL non-zero and equal to the data PLEN frames; DATAO + DATAL within 32
/// bits.
#[inline(always)]
fn check_datao_datal(h: &[u8], data_len: usize) -> Result<(), Reject> {
    let (datao, datal) = (le32(h, 12), le32(h, 16));
    if datal == 0 || usize::try_from(datal).ok() != Some(data_len) {
        return Err(Reject::field(
            fei::DATAL,
            "DATAL is 0 or does not match PLEN",
        ));
    }
    if datao.checked_add(datal).is_none() {
        return Err(Reject::new(
            Fes::DataTransferOutOfRange,
            0,
            "DATAO + DATAL overflows",
        ));
    }
    Ok(())
}

/// The H2CData/C2HData header fields (TTAG and SUCCESS as the type defines them).
#[inline(always)]
fn read_data_hdr(h: &[u8], flags: u8, ttag: u16, success: bool) -> DataHdr {
    DataHdr {
        cccid: le16(h, 8),
        ttag,
        datao: le32(h, 12),
        datal: le32(h, 16),
        last: flags & flags::LAST_PDU != 0,
        success,
    }
}

/// R2T: R2TL non-zero, R2TO + R2TL within 32 bits.
#[inline(always)]
fn check_r2t(h: &[u8]) -> Result<(), Reject> {
    let (r2to, r2tl) = (le32(h, 12), le32(h, 16));
    if r2tl == 0 || r2to.checked_add(r2tl).is_none() {
        return Err(Reject::field(
            fei::DATAL,
            "R2TL is 0 or R2TO + R2TL overflows",
        ));
    }
    Ok(())
}

/// Decode one PDU at the start of `buf` without role state: `Ok(None)` until it is complete.
/// Fatal header errors are reported as soon as the header is in `buf`.
pub fn decode_frame<'a>(
    buf: &'a [u8],
    lim: &DecodeLimits,
) -> Result<Option<Frame<'a>>, ProtocolError> {
    match decode_header(buf, lim)? {
        Some(h) => Ok(h.decode_body(buf)),
        None => Ok(None),
    }
}

// ---------------------------------------------------------------------------------------------
// Encoding: infallible, appends to `out`, one `reserve` per PDU.

/// Common header into `h[..8]`.
#[inline]
fn put_ch(h: &mut [u8], ty: u8, flags: u8, hlen: usize, pdo: usize, plen: usize) {
    h[0] = ty;
    h[1] = flags;
    h[2] = u8::try_from(hlen).unwrap_or(u8::MAX);
    h[3] = u8::try_from(pdo).unwrap_or(u8::MAX);
    put32(h, 4, u32::try_from(plen).unwrap_or(u32::MAX));
}

/// Append a digest-carrying PDU: `hdr` holds CH+PSH with byte 0 (type) and the PSH filled and
/// byte 1 holding the type-specific flags (LAST_PDU/SUCCESS); HLEN/PDO/PLEN/digest flags are set
/// here. Data longer than 4 GiB cannot be expressed in PLEN; callers split data far below that.
fn emit(out: &mut Vec<u8>, hdr: &mut [u8], dig: Digests, pda: u8, data: &[u8]) {
    let start = emit_head(out, hdr, dig, pda, data.len());
    out.extend_from_slice(data);
    emit_tail(out, dig, start);
}

/// First half of [`emit`] for a PDU that will carry `data_len` bytes: appends the header (CH,
/// PSH, header digest) and the PDO padding, reserves room for the whole PDU, and returns the
/// offset in `out` where the data must start. The caller appends exactly `data_len` bytes and
/// then calls [`emit_tail`].
fn emit_head(out: &mut Vec<u8>, hdr: &mut [u8], dig: Digests, pda: u8, data_len: usize) -> usize {
    write_head(out, hdr, dig, pda, data_len, true)
}

/// [`emit_head`] without reserving room for the data (it is sent from elsewhere).
fn put_head(out: &mut Vec<u8>, hdr: &mut [u8], dig: Digests, pda: u8, data_len: usize) -> usize {
    write_head(out, hdr, dig, pda, data_len, false)
}

fn write_head(
    out: &mut Vec<u8>,
    hdr: &mut [u8],
    dig: Digests,
    pda: u8,
    data_len: usize,
    reserve: bool,
) -> usize {
    let hlen = hdr.len();
    let has_data = data_len > 0;
    let hd = dig.hdgst;
    let dd = dig.ddgst && has_data;
    let base = hlen + if hd { DIGEST_LEN } else { 0 };
    let pdo = if has_data { data_pdo(hlen, hd, pda) } else { 0 };
    let plen = if has_data {
        pdo + data_len + if dd { DIGEST_LEN } else { 0 }
    } else {
        base
    };
    let mut fl = hdr[1];
    if hd {
        fl |= flags::HDGSTF;
    }
    if dd {
        fl |= flags::DDGSTF;
    }
    let ty = hdr[0];
    put_ch(hdr, ty, fl, hlen, pdo, plen);
    if reserve {
        out.reserve(plen);
    }
    out.extend_from_slice(hdr);
    if hd {
        out.extend_from_slice(&digest::crc32c(hdr).to_le_bytes());
    }
    if has_data {
        out.resize(out.len() + (pdo - base), 0);
    }
    out.len()
}

/// [`emit`] with a gap for `data`, whose offset in `out` it returns: the head, then (when
/// negotiated) the data digest, computed over `data` where it is.
fn emit_spliced(out: &mut Vec<u8>, hdr: &mut [u8], dig: Digests, pda: u8, data: &[u8]) -> usize {
    let at = put_head(out, hdr, dig, pda, data.len());
    if dig.ddgst && !data.is_empty() {
        out.extend_from_slice(&digest::crc32c(data).to_le_bytes());
    }
    at
}

/// Second half of [`emit`]: the data digest over `out[start..]` (the data appended since
/// [`emit_head`] returned `start`), when negotiated and the PDU carries data.
fn emit_tail(out: &mut Vec<u8>, dig: Digests, start: usize) {
    if dig.ddgst && out.len() > start {
        let crc = digest::crc32c(&out[start..]);
        out.extend_from_slice(&crc.to_le_bytes());
    }
}

/// Append an ICReq (never carries digests; PLEN = HLEN = 128).
pub fn encode_ic_req(out: &mut Vec<u8>, ic: &IcReq) {
    let mut h = [0u8; HLEN_IC];
    put_ch(&mut h, pdu_type::IC_REQ, 0, HLEN_IC, 0, HLEN_IC);
    put16(&mut h, 8, ic.pfv);
    h[10] = ic.hpda;
    h[11] = ic.digests.bits();
    put32(&mut h, 12, ic.maxr2t);
    out.extend_from_slice(&h);
}

/// Append an ICResp.
pub fn encode_ic_resp(out: &mut Vec<u8>, ic: &IcResp) {
    let mut h = [0u8; HLEN_IC];
    put_ch(&mut h, pdu_type::IC_RESP, 0, HLEN_IC, 0, HLEN_IC);
    put16(&mut h, 8, ic.pfv);
    h[10] = ic.cpda;
    h[11] = ic.digests.bits();
    put32(&mut h, 12, ic.maxh2cdata);
    out.extend_from_slice(&h);
}

/// Append a TermReq (`ty` [`pdu_type::H2C_TERM_REQ`] or [`pdu_type::C2H_TERM_REQ`]): FES
/// u16 at offset 8, FEI u32 at offset 10 (spec layout), the first ≤ 128 bytes of `hdr` echoed
/// after the 24-byte header, PLEN = 24 + echo, PDO 0, no digests.
pub fn encode_term_req(out: &mut Vec<u8>, ty: u8, fes: u16, fei: u32, hdr: &[u8]) {
    let echo = &hdr[..hdr.len().min(TERM_REQ_MAX_ECHO)];
    let mut h = [0u8; HLEN_TERM];
    put_ch(&mut h, ty, 0, HLEN_TERM, 0, HLEN_TERM + echo.len());
    put16(&mut h, 8, fes);
    put32(&mut h, 10, fei);
    out.reserve(HLEN_TERM + echo.len());
    out.extend_from_slice(&h);
    out.extend_from_slice(echo);
}

/// Append a CapsuleCmd carrying `sqe` and in-capsule data `icd` (PDO padded to `cpda`). The
/// caller sets the SGL (in-capsule descriptor of `icd.len()` bytes when `icd` is not empty).
pub fn encode_capsule_cmd(out: &mut Vec<u8>, dig: Digests, cpda: u8, sqe: &Sqe, icd: &[u8]) {
    let mut h = [0u8; HLEN_CAPSULE_CMD];
    h[0] = pdu_type::CAPSULE_CMD;
    h[CH_LEN..].copy_from_slice(&sqe.0);
    emit(out, &mut h, dig, cpda, icd);
}

/// As [`encode_capsule_cmd`], without copying `icd`: appends the PDU with a gap where `icd`
/// goes (the header, its padding and, when a data digest was negotiated, the digest of `icd`
/// after the gap) and returns the offset in `out` of the gap. The caller sends `icd` from where
/// it is (`writev`) between `out[..offset]` and `out[offset..]`.
pub fn encode_capsule_cmd_spliced(
    out: &mut Vec<u8>,
    dig: Digests,
    cpda: u8,
    sqe: &Sqe,
    icd: &[u8],
) -> usize {
    let mut h = [0u8; HLEN_CAPSULE_CMD];
    h[0] = pdu_type::CAPSULE_CMD;
    h[CH_LEN..].copy_from_slice(&sqe.0);
    emit_spliced(out, &mut h, dig, cpda, icd)
}

/// Append a CapsuleResp carrying `cqe`.
pub fn encode_capsule_resp(out: &mut Vec<u8>, dig: Digests, cqe: &Cqe) {
    let mut h = [0u8; HLEN_CAPSULE_RESP];
    h[0] = pdu_type::CAPSULE_RESP;
    let mut c = [0u8; 16];
    cqe.encode(&mut c);
    h[CH_LEN..].copy_from_slice(&c);
    emit(out, &mut h, dig, 0, &[]);
}

/// CH+PSH of a data PDU carrying `datal` bytes (HLEN/PDO/PLEN/digest flags are set by
/// [`emit_head`]).
fn data_hdr(ty: u8, d: &DataHdr, datal: usize) -> [u8; HLEN_DATA] {
    let mut h = [0u8; HLEN_DATA];
    h[0] = ty;
    let mut fl = 0;
    if d.last {
        fl |= flags::LAST_PDU;
    }
    if d.success && ty == pdu_type::C2H_DATA {
        fl |= flags::SUCCESS;
    }
    h[1] = fl;
    put16(&mut h, 8, d.cccid);
    if ty == pdu_type::H2C_DATA {
        put16(&mut h, 10, d.ttag);
    }
    put32(&mut h, 12, d.datao);
    put32(&mut h, 16, u32::try_from(datal).unwrap_or(u32::MAX));
    h
}

fn data_pdu(out: &mut Vec<u8>, ty: u8, dig: Digests, pda: u8, d: &DataHdr, data: &[u8]) {
    let mut h = data_hdr(ty, d, data.len());
    emit(out, &mut h, dig, pda, data);
}

/// Append one H2CData PDU (PDO padded to `cpda`). DATAL is `data.len()` (`d.datal` is ignored),
/// LAST_PDU from `d.last`; SUCCESS is never set on H2CData.
pub fn encode_h2c_data(out: &mut Vec<u8>, dig: Digests, cpda: u8, d: &DataHdr, data: &[u8]) {
    data_pdu(out, pdu_type::H2C_DATA, dig, cpda, d, data);
}

/// As [`encode_h2c_data`], without copying `data`: see [`encode_capsule_cmd_spliced`] (the
/// returned offset is where `data` goes).
pub fn encode_h2c_data_spliced(
    out: &mut Vec<u8>,
    dig: Digests,
    cpda: u8,
    d: &DataHdr,
    data: &[u8],
) -> usize {
    let mut h = data_hdr(pdu_type::H2C_DATA, d, data.len());
    emit_spliced(out, &mut h, dig, cpda, data)
}

/// Append one C2HData PDU (PDO padded to `hpda`). DATAL is `data.len()` (`d.datal` is ignored),
/// TTAG is reserved (0), LAST_PDU from `d.last`, SUCCESS from `d.success`.
pub fn encode_c2h_data(out: &mut Vec<u8>, dig: Digests, hpda: u8, d: &DataHdr, data: &[u8]) {
    data_pdu(out, pdu_type::C2H_DATA, dig, hpda, d, data);
}

/// Append one C2HData PDU of `len` bytes whose data `fill` writes in place, straight into `out`
/// (no intermediate buffer): `fill` receives the PDU's data area, zero-initialised, and the
/// data digest (if negotiated) is computed over what it wrote. Otherwise identical to
/// [`encode_c2h_data`] with the same bytes. If `fill` fails, `out` is truncated back to its
/// length before the call and the error is returned.
pub fn encode_c2h_data_with<E>(
    out: &mut Vec<u8>,
    dig: Digests,
    hpda: u8,
    d: &DataHdr,
    len: usize,
    fill: impl FnOnce(&mut [u8]) -> Result<(), E>,
) -> Result<(), E> {
    let before = out.len();
    let mut h = data_hdr(pdu_type::C2H_DATA, d, len);
    let start = emit_head(out, &mut h, dig, hpda, len);
    out.resize(start + len, 0);
    if let Err(e) = fill(&mut out[start..]) {
        out.truncate(before);
        return Err(e);
    }
    emit_tail(out, dig, start);
    Ok(())
}

/// Append only the head of a C2HData PDU (common header, PSH, header digest, padding to the
/// PDO) for `len` data bytes that the caller sends right after it from elsewhere (zero-copy
/// `writev`). Possible only without a data digest: when one was negotiated (and `len > 0`) it
/// appends nothing and returns false.
pub fn encode_c2h_data_head(
    out: &mut Vec<u8>,
    dig: Digests,
    hpda: u8,
    d: &DataHdr,
    len: usize,
) -> bool {
    if dig.ddgst && len > 0 {
        return false;
    }
    let mut h = data_hdr(pdu_type::C2H_DATA, d, len);
    put_head(out, &mut h, dig, hpda, len);
    true
}

/// Append an R2T.
pub fn encode_r2t(out: &mut Vec<u8>, dig: Digests, r: &R2t) {
    let mut h = [0u8; HLEN_R2T];
    h[0] = pdu_type::R2T;
    put16(&mut h, 8, r.cccid);
    put16(&mut h, 10, r.ttag);
    put32(&mut h, 12, r.r2to);
    put32(&mut h, 16, r.r2tl);
    emit(out, &mut h, dig, 0, &[]);
}

/// Append any PDU. `pda` is the alignment the receiver asked for (used by data PDUs only).
pub fn encode_pdu(out: &mut Vec<u8>, pdu: &Pdu<'_>, dig: Digests, pda: u8) {
    match pdu {
        Pdu::IcReq(ic) => encode_ic_req(out, ic),
        Pdu::IcResp(ic) => encode_ic_resp(out, ic),
        Pdu::H2cTermReq(t) => encode_term_req(out, pdu_type::H2C_TERM_REQ, t.fes, t.fei, t.hdr),
        Pdu::C2hTermReq(t) => encode_term_req(out, pdu_type::C2H_TERM_REQ, t.fes, t.fei, t.hdr),
        Pdu::CapsuleCmd { sqe, data } => encode_capsule_cmd(out, dig, pda, sqe, data),
        Pdu::CapsuleResp(cqe) => encode_capsule_resp(out, dig, cqe),
        Pdu::H2cData { hdr, data } => encode_h2c_data(out, dig, pda, hdr, data),
        Pdu::C2hData { hdr, data } => encode_c2h_data(out, dig, pda, hdr, data),
        Pdu::R2t(r) => encode_r2t(out, dig, r),
    }
}

#[cfg(test)]
#[path = "pdu_diff.rs"]
mod diff;

#[cfg(test)]
mod tests {
    use super::*;
    use nvme_spec::{CommandId, Status};

    fn lim(role: Role, dig: Option<Digests>, pda: u8) -> DecodeLimits {
        DecodeLimits {
            role,
            digests: dig,
            pda,
            max_icd: 8192,
            max_data: 65536,
        }
    }

    /// Encode, check the CH, decode whole, and check that every shorter prefix is "need more".
    fn roundtrip(pdu: Pdu<'_>, role: Role, dig: Option<Digests>, pda: u8) -> Vec<u8> {
        let mut out = Vec::new();
        encode_pdu(&mut out, &pdu, dig.unwrap_or(Digests::NONE), pda);
        assert_eq!(le32(&out, 4) as usize, out.len(), "PLEN");
        let l = lim(role, dig, pda);
        let f = decode_frame(&out, &l).unwrap().unwrap();
        assert_eq!(
            f,
            Frame {
                pdu,
                len: out.len(),
                data_digest_ok: true
            }
        );
        for n in 0..out.len() {
            assert_eq!(decode_frame(&out[..n], &l).unwrap(), None, "prefix {n}");
        }
        out
    }

    #[test]
    fn digest_known_vector() {
        // CRC-32C check value (RFC 3720 B.4 / iSCSI): "123456789" -> 0xE3069283.
        assert_eq!(digest::crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(
            digest::crc32c_append(digest::crc32c(b"1234"), b"56789"),
            0xE306_9283
        );
    }

    #[test]
    fn ic_req_layout() {
        let ic = IcReq {
            pfv: 0,
            hpda: 3,
            digests: Digests::BOTH,
            maxr2t: 0x0102_0304,
        };
        let b = roundtrip(Pdu::IcReq(ic), Role::Target, None, 0);
        assert_eq!(b.len(), 128);
        assert_eq!(&b[..8], &[0x00, 0x00, 128, 0, 128, 0, 0, 0]);
        assert_eq!(&b[8..16], &[0, 0, 3, 0x03, 0x04, 0x03, 0x02, 0x01]);
        assert!(b[16..].iter().all(|&x| x == 0));
    }

    #[test]
    fn ic_resp_layout() {
        let ic = IcResp {
            pfv: 0,
            cpda: 1,
            digests: Digests {
                hdgst: true,
                ddgst: false,
            },
            maxh2cdata: 131072,
        };
        let b = roundtrip(Pdu::IcResp(ic), Role::Host, None, 0);
        assert_eq!(&b[..8], &[0x01, 0x00, 128, 0, 128, 0, 0, 0]);
        assert_eq!(&b[8..16], &[0, 0, 1, 0x01, 0x00, 0x00, 0x02, 0x00]);
    }

    #[test]
    fn term_req_layout_uses_spec_offsets() {
        let echo: Vec<u8> = (0..30).collect();
        let t = TermReq {
            fes: 0x0001,
            fei: 0x0A0B_0C0D,
            hdr: &echo,
        };
        let b = roundtrip(Pdu::C2hTermReq(t), Role::Host, Some(Digests::BOTH), 0);
        // No digests on TermReq even when negotiated; PDO 0; PLEN 24 + echo.
        assert_eq!(&b[..8], &[0x03, 0x00, 24, 0, 54, 0, 0, 0]);
        assert_eq!(&b[8..10], &[0x01, 0x00]);
        assert_eq!(&b[10..14], &[0x0D, 0x0C, 0x0B, 0x0A]);
        assert!(b[14..24].iter().all(|&x| x == 0));
        assert_eq!(&b[24..], &echo[..]);
        let t = TermReq {
            fes: 2,
            fei: 0,
            hdr: &[],
        };
        roundtrip(Pdu::H2cTermReq(t), Role::Target, None, 0);
    }

    #[test]
    fn term_req_echo_is_capped_at_128() {
        let echo = [0xAAu8; 200];
        let mut b = Vec::new();
        encode_term_req(&mut b, pdu_type::C2H_TERM_REQ, 1, 2, &echo);
        assert_eq!(b.len(), 152);
        assert_eq!(le32(&b, 4), 152);
    }

    #[test]
    fn capsule_cmd_without_and_with_data() {
        let mut sqe = Sqe::new(0x02, CommandId(9));
        sqe.set_sgl_transport(4096);
        let b = roundtrip(
            Pdu::CapsuleCmd { sqe, data: &[] },
            Role::Target,
            Some(Digests::BOTH),
            3,
        );
        // No data: PDO 0, no DDGSTF even though data digest is on.
        assert_eq!(&b[..8], &[0x04, flags::HDGSTF, 72, 0, 76, 0, 0, 0]);
        assert_eq!(&b[8..72], &sqe.0[..]);
        assert_eq!(le32(&b, 72), digest::crc32c(&b[..72]));

        let icd = [7u8; 100];
        sqe.set_sgl_icd(100);
        let b = roundtrip(
            Pdu::CapsuleCmd { sqe, data: &icd },
            Role::Target,
            Some(Digests::BOTH),
            3,
        );
        // HLEN 72 + HDGST 4 = 76, aligned to (3+1)*4 = 16 -> PDO 80; PLEN 80 + 100 + 4.
        assert_eq!(
            &b[..8],
            &[0x04, flags::HDGSTF | flags::DDGSTF, 72, 80, 184, 0, 0, 0]
        );
        assert!(b[76..80].iter().all(|&x| x == 0), "PAD");
        assert_eq!(&b[80..180], &icd[..]);
        assert_eq!(le32(&b, 180), digest::crc32c(&icd));

        let b = roundtrip(
            Pdu::CapsuleCmd { sqe, data: &icd },
            Role::Target,
            Some(Digests::NONE),
            0,
        );
        assert_eq!(&b[..8], &[0x04, 0, 72, 72, 172, 0, 0, 0]);
    }

    #[test]
    fn capsule_resp_layout() {
        let cqe = Cqe {
            dw0: 1,
            dw1: 2,
            sqhd: 3,
            sqid: 4,
            cid: 5,
            status: Status::TRANSIENT_TRANSPORT,
        };
        let b = roundtrip(Pdu::CapsuleResp(cqe), Role::Host, Some(Digests::NONE), 0);
        assert_eq!(&b[..8], &[0x05, 0, 24, 0, 24, 0, 0, 0]);
        assert_eq!(&b[8..24], &cqe.to_bytes());
        let b = roundtrip(Pdu::CapsuleResp(cqe), Role::Host, Some(Digests::BOTH), 0);
        assert_eq!(&b[..8], &[0x05, flags::HDGSTF, 24, 0, 28, 0, 0, 0]);
    }

    #[test]
    fn h2c_data_layout() {
        let data = [0x5Au8; 33];
        let d = DataHdr {
            cccid: 0x1234,
            ttag: 0x0506,
            datao: 4096,
            datal: 33,
            last: true,
            success: false,
        };
        let b = roundtrip(
            Pdu::H2cData {
                hdr: d,
                data: &data,
            },
            Role::Target,
            Some(Digests::NONE),
            0,
        );
        assert_eq!(&b[..8], &[0x06, flags::LAST_PDU, 24, 24, 57, 0, 0, 0]);
        assert_eq!(
            &b[8..24],
            &[
                0x34, 0x12, 0x06, 0x05, 0, 0x10, 0, 0, 33, 0, 0, 0, 0, 0, 0, 0
            ]
        );
        let b = roundtrip(
            Pdu::H2cData {
                hdr: d,
                data: &data,
            },
            Role::Target,
            Some(Digests::BOTH),
            7,
        );
        // 24 + 4 = 28 aligned to 32 -> PDO 32.
        assert_eq!(b[3], 32);
        assert_eq!(b.len(), 32 + 33 + 4);
    }

    /// A spliced PDU with its data put in the gap is byte for byte the copied one, for every
    /// digest combination and alignment, with and without data.
    #[test]
    fn spliced_pdus_equal_copied_ones() {
        let data: Vec<u8> = (0..777u32).map(|i| (i * 7 + 3) as u8).collect();
        let sqe = Sqe([0xA5; 64]);
        let d = DataHdr {
            cccid: 9,
            ttag: 4,
            datao: 512,
            datal: 0,
            last: true,
            success: false,
        };
        for dig in [
            Digests::NONE,
            Digests::BOTH,
            Digests::from_bits(1),
            Digests::from_bits(2),
        ] {
            for pda in [0u8, 3, 7] {
                for len in [0usize, 1, 777] {
                    let data = &data[..len];
                    let splice = |out: Vec<u8>, at: usize| {
                        let mut v = out[..at].to_vec();
                        v.extend_from_slice(data);
                        v.extend_from_slice(&out[at..]);
                        v
                    };
                    let (mut a, mut b) = (vec![1u8, 2], vec![1u8, 2]);
                    encode_capsule_cmd(&mut a, dig, pda, &sqe, data);
                    let at = encode_capsule_cmd_spliced(&mut b, dig, pda, &sqe, data);
                    assert_eq!(a, splice(b, at), "capsule {dig:?} pda {pda} len {len}");
                    let (mut a, mut b) = (vec![3u8], vec![3u8]);
                    encode_h2c_data(&mut a, dig, pda, &d, data);
                    let at = encode_h2c_data_spliced(&mut b, dig, pda, &d, data);
                    assert_eq!(a, splice(b, at), "h2c {dig:?} pda {pda} len {len}");
                }
            }
        }
    }

    #[test]
    fn c2h_data_layout() {
        let data = [1u8; 10];
        let d = DataHdr {
            cccid: 1,
            ttag: 0,
            datao: 0,
            datal: 10,
            last: true,
            success: true,
        };
        let b = roundtrip(
            Pdu::C2hData {
                hdr: d,
                data: &data,
            },
            Role::Host,
            Some(Digests::NONE),
            3,
        );
        // 24 aligned to 16 -> PDO 32 (hpda 3).
        assert_eq!(
            &b[..8],
            &[0x07, flags::LAST_PDU | flags::SUCCESS, 24, 32, 42, 0, 0, 0]
        );
        let d = DataHdr {
            last: false,
            success: false,
            ..d
        };
        roundtrip(
            Pdu::C2hData {
                hdr: d,
                data: &data,
            },
            Role::Host,
            Some(Digests::BOTH),
            0,
        );
    }

    #[test]
    fn r2t_layout() {
        let r = R2t {
            cccid: 2,
            ttag: 3,
            r2to: 4,
            r2tl: 5,
        };
        let b = roundtrip(Pdu::R2t(r), Role::Host, Some(Digests::NONE), 0);
        assert_eq!(
            &b[..],
            &[
                0x09, 0, 24, 0, 24, 0, 0, 0, 2, 0, 3, 0, 4, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0
            ]
        );
        roundtrip(Pdu::R2t(r), Role::Host, Some(Digests::BOTH), 0);
    }

    #[test]
    fn data_digest_mismatch_is_reported_not_fatal() {
        let data = [3u8; 64];
        let d = DataHdr {
            cccid: 1,
            ttag: 0,
            datao: 0,
            datal: 64,
            last: true,
            success: false,
        };
        let mut b = Vec::new();
        encode_c2h_data(&mut b, Digests::BOTH, 0, &d, &data);
        b[40] ^= 1;
        let f = decode_frame(&b, &lim(Role::Host, Some(Digests::BOTH), 0))
            .unwrap()
            .unwrap();
        assert!(!f.data_digest_ok);
        assert_eq!(f.len, b.len());
    }

    #[test]
    fn header_error_detected_before_data_arrives() {
        // A CapsuleCmd header announcing 4 GiB of in-capsule data is rejected from its header.
        let mut h = [0u8; 72];
        h[0] = pdu_type::CAPSULE_CMD;
        h[2] = 72;
        h[3] = 72;
        h[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        // Judged from the 8-byte common header alone, whatever follows.
        for n in [CH_LEN, 72] {
            let e = decode_header(&h[..n], &lim(Role::Target, Some(Digests::NONE), 0)).unwrap_err();
            assert_eq!((e.fes, e.fei), (Fes::DataTransferLimitExceeded, 0));
            assert_eq!(e.header(), &h[..n]);
        }
    }

    #[test]
    fn common_header_errors_need_only_the_common_header() {
        // (role, established, CH bytes, FES, FEI): every fixed HLEN/PLEN/PDO/flag relation is
        // decided from the first 8 bytes, before the rest of the header arrives.
        let ch = |ty: u8, flags: u8, hlen: u8, pdo: u8, plen: u32| {
            let mut b = vec![ty, flags, hlen, pdo];
            b.extend_from_slice(&plen.to_le_bytes());
            b
        };
        let t = Role::Target;
        let h = Role::Host;
        type Case = (Role, Option<Digests>, Vec<u8>, Fes, u32);
        let cases: Vec<Case> = vec![
            // ICReq whose PLEN is smaller than its HLEN.
            (
                t,
                None,
                ch(pdu_type::IC_REQ, 0, 128, 0, 64),
                Fes::InvalidHeaderField,
                fei::PLEN,
            ),
            (
                t,
                None,
                ch(pdu_type::IC_REQ, 0, 128, 4, 128),
                Fes::InvalidHeaderField,
                fei::PDO,
            ),
            (
                t,
                None,
                ch(pdu_type::IC_REQ, 0, 72, 0, 128),
                Fes::InvalidHeaderField,
                fei::HLEN,
            ),
            (
                t,
                None,
                ch(pdu_type::CAPSULE_CMD, 0, 72, 0, 72),
                Fes::PduSequenceError,
                0,
            ),
            (
                t,
                None,
                ch(pdu_type::H2C_TERM_REQ, 0, 24, 0, 4096),
                Fes::InvalidHeaderField,
                fei::PLEN,
            ),
            (
                t,
                Some(Digests::NONE),
                ch(pdu_type::IC_REQ, 0, 128, 0, 128),
                Fes::PduSequenceError,
                0,
            ),
            (
                t,
                Some(Digests::NONE),
                ch(pdu_type::CAPSULE_CMD, 0, 72, 0, 40),
                Fes::InvalidHeaderField,
                fei::PLEN,
            ),
            (
                t,
                Some(Digests::NONE),
                ch(pdu_type::CAPSULE_CMD, 0, 72, 8, 72),
                Fes::InvalidHeaderField,
                fei::PDO,
            ),
            (
                t,
                Some(Digests::NONE),
                ch(pdu_type::CAPSULE_CMD, 0, 72, 80, 4096),
                Fes::InvalidHeaderField,
                fei::PDO,
            ),
            (
                t,
                Some(Digests::NONE),
                ch(pdu_type::CAPSULE_CMD, flags::HDGSTF, 72, 0, 72),
                Fes::InvalidHeaderField,
                fei::FLAGS,
            ),
            (
                t,
                Some(Digests::BOTH),
                ch(pdu_type::CAPSULE_CMD, 0, 72, 0, 76),
                Fes::InvalidHeaderField,
                fei::FLAGS,
            ),
            (
                t,
                Some(Digests::NONE),
                ch(pdu_type::CAPSULE_CMD, flags::DDGSTF, 72, 0, 72),
                Fes::InvalidHeaderField,
                fei::FLAGS,
            ),
            (
                t,
                Some(Digests::NONE),
                ch(pdu_type::H2C_DATA, 0, 24, 24, 24 + (1 << 20)),
                Fes::DataTransferLimitExceeded,
                0,
            ),
            (
                t,
                Some(Digests::NONE),
                ch(pdu_type::H2C_DATA, 0, 24, 0, 16),
                Fes::InvalidHeaderField,
                fei::PLEN,
            ),
            (
                h,
                Some(Digests::NONE),
                ch(pdu_type::CAPSULE_RESP, 0, 24, 0, 32),
                Fes::InvalidHeaderField,
                fei::PLEN,
            ),
            (
                h,
                Some(Digests::NONE),
                ch(pdu_type::R2T, 0, 24, 24, 24),
                Fes::InvalidHeaderField,
                fei::PDO,
            ),
            (
                h,
                Some(Digests::NONE),
                ch(pdu_type::C2H_DATA, 0, 24, 24, 24 + (1 << 20)),
                Fes::DataTransferLimitExceeded,
                0,
            ),
        ];
        for (i, (role, dig, b, fes, fei)) in cases.into_iter().enumerate() {
            let e = decode_header(&b, &lim(role, dig, 0)).expect_err(&format!("case {i} accepted"));
            assert_eq!((e.fes, e.fei), (fes, fei), "case {i}: {}", e);
            assert_eq!(e.header(), &b[..], "case {i} echo");
        }
        // A valid common header with the rest missing is "not yet", not an error.
        let ok = ch(pdu_type::IC_REQ, 0, 128, 0, 128);
        assert_eq!(decode_header(&ok, &lim(t, None, 0)), Ok(None));
    }

    #[test]
    fn c2h_data_head_plus_data_is_the_whole_pdu() {
        let data: Vec<u8> = (0..4096u32).map(|i| (i * 13) as u8).collect();
        for hdgst in [false, true] {
            for hpda in [0u8, 3, 31] {
                let dig = Digests {
                    hdgst,
                    ddgst: false,
                };
                let d = DataHdr {
                    cccid: 9,
                    ttag: 0,
                    datao: 0,
                    datal: 0,
                    last: true,
                    success: true,
                };
                let mut whole = Vec::new();
                encode_c2h_data(&mut whole, dig, hpda, &d, &data);
                let mut head = vec![0xAA];
                assert!(encode_c2h_data_head(&mut head, dig, hpda, &d, data.len()));
                head.extend_from_slice(&data);
                assert_eq!(&head[1..], &whole[..], "hdgst {hdgst} hpda {hpda}");
            }
        }
        let dig = Digests {
            hdgst: false,
            ddgst: true,
        };
        let d = DataHdr {
            cccid: 1,
            ttag: 0,
            datao: 0,
            datal: 0,
            last: true,
            success: false,
        };
        let mut out = Vec::new();
        assert!(!encode_c2h_data_head(&mut out, dig, 0, &d, 512));
        assert!(out.is_empty());
    }

    /// Valid headers of each common data-path type, digests off and on, with the receiving role:
    /// the inputs of the timing loops.
    pub(super) fn timing_headers() -> Vec<(String, Role, Digests, Vec<u8>)> {
        let data = [0x5Au8; 4096];
        let d = DataHdr {
            cccid: 7,
            ttag: 3,
            datao: 0,
            datal: 0,
            last: true,
            success: false,
        };
        let r2t = R2t {
            cccid: 7,
            ttag: 3,
            r2to: 0,
            r2tl: 4096,
        };
        let cqe = Cqe::new(CommandId(7), nvme_spec::QueueId(1), Status::SUCCESS);
        let mut sqe = Sqe::new(0x01, CommandId(7));
        sqe.set_sgl_transport(4096);
        let mut icd_sqe = Sqe::new(0x01, CommandId(8));
        icd_sqe.set_sgl_icd(4096);
        let mut out = Vec::new();
        for dig in [Digests::NONE, Digests::BOTH] {
            let mut add = |name: &str, role: Role, enc: &dyn Fn(&mut Vec<u8>)| {
                let mut o = Vec::new();
                enc(&mut o);
                let name = format!("{name:<18} hd={} dd={}", dig.hdgst, dig.ddgst);
                out.push((name, role, dig, o));
            };
            add("CapsuleCmd", Role::Target, &|o| {
                encode_capsule_cmd(o, dig, 0, &sqe, &[])
            });
            add("CapsuleCmd+4K ICD", Role::Target, &|o| {
                encode_capsule_cmd(o, dig, 0, &icd_sqe, &data)
            });
            add("H2CData 4K", Role::Target, &|o| {
                encode_h2c_data(o, dig, 0, &d, &data)
            });
            add("CapsuleResp", Role::Host, &|o| {
                encode_capsule_resp(o, dig, &cqe)
            });
            add("C2HData 4K", Role::Host, &|o| {
                encode_c2h_data(o, dig, 0, &d, &data)
            });
            add("R2T", Role::Host, &|o| encode_r2t(o, dig, &r2t));
        }
        out
    }

    /// Nanoseconds per call of `decode` on `buf`, over `n` calls.
    pub(super) fn ns_per_header<R>(
        decode: impl Fn(&[u8], &DecodeLimits) -> R,
        buf: &[u8],
        l: &DecodeLimits,
        n: u32,
    ) -> f64 {
        use std::hint::black_box;
        let start = std::time::Instant::now();
        for _ in 0..n {
            black_box(decode(black_box(buf), black_box(l)));
        }
        start.elapsed().as_secs_f64() * 1e9 / f64::from(n)
    }

    /// Hot-path timing of [`decode_header`] alone (issue 24): 10M headers of each common type,
    /// digests off and on. `cargo test --release -p nvmf-tcp -- --ignored --nocapture`.
    #[test]
    #[ignore = "timing, run in release by hand"]
    fn decode_header_timing() {
        for (name, role, dig, buf) in timing_headers() {
            let l = lim(role, Some(dig), 0);
            assert!(decode_header(&buf, &l).unwrap().is_some(), "{name}");
            let ns = ns_per_header(decode_header, &buf, &l, 10_000_000);
            println!("decode_header {name}: {ns:6.2} ns/header");
        }
    }

    #[test]
    fn pdo_helpers() {
        assert_eq!(data_pdo(24, false, 0), 24);
        assert_eq!(data_pdo(24, true, 0), 28);
        assert_eq!(data_pdo(24, true, 3), 32);
        assert_eq!(data_pdo(72, true, 31), 128);
        assert_eq!(data_pdo(72, false, 255), 128, "PDA clamped to 31");
        assert_eq!(pda_alignment(0), 4);
    }
}
