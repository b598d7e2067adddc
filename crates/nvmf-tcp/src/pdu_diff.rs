//! Differential test for the split of [`super::decode_header`] (issue 24): a frozen copy of the
//! decoder as it was before the split, fed the same random and structured headers as the real
//! one. Test-only; the copy is not part of the crate's non-test code.

use super::*;
use proptest::prelude::*;

/// `decode_header` as of commit c589fee (before issue 24), unchanged but for its name.
fn decode_header_reference(
    buf: &[u8],
    lim: &DecodeLimits,
) -> Result<Option<FrameHeader>, ProtocolError> {
    use pdu_type as t;
    let Some(ch) = buf.get(..CH_LEN) else {
        return Ok(None);
    };
    let ty = ch[0];
    let Some(hlen) = rx_hlen(lim.role, ty) else {
        return Err(ProtocolError::new(
            Fes::InvalidHeaderField,
            fei::PDU_TYPE,
            ch,
            "PDU type unknown or not valid in this direction",
        ));
    };
    let established = lim.digests.is_some();
    let dig = lim.digests.unwrap_or(Digests::NONE);
    let dgst_type = carries_digests(ty);
    let hdgst = dgst_type && dig.hdgst;
    let header_len = hlen + if hdgst { DIGEST_LEN } else { 0 };
    // Everything the 8-byte common header decides is judged as soon as it is here, before
    // waiting for the rest of the header (a peer that sends a bad CH and stalls gets its
    // TermReq at once). These errors echo as much of the header as has arrived.
    let early = &buf[..buf.len().min(header_len).min(TERM_REQ_MAX_ECHO)];
    let err =
        |fes: Fes, fei: u32, reason: &'static str| ProtocolError::new(fes, fei, early, reason);

    let is_ic = ty == t::IC_REQ || ty == t::IC_RESP;
    let is_term = ty == t::H2C_TERM_REQ || ty == t::C2H_TERM_REQ;
    if !established && !is_ic && !is_term {
        return Err(err(
            Fes::PduSequenceError,
            0,
            "PDU before the ICReq/ICResp exchange",
        ));
    }
    if established && is_ic {
        return Err(err(Fes::PduSequenceError, 0, "second ICReq/ICResp"));
    }

    let flags = ch[1];
    let pdo = usize::from(ch[3]);
    let plen = usize::try_from(le32(ch, 4)).unwrap_or(usize::MAX);
    if usize::from(ch[2]) != hlen {
        return Err(err(
            Fes::InvalidHeaderField,
            fei::HLEN,
            "HLEN does not match the PDU type",
        ));
    }
    if dgst_type && (flags & flags::HDGSTF != 0) != hdgst {
        return Err(err(
            Fes::InvalidHeaderField,
            fei::FLAGS,
            "HDGSTF does not match negotiation",
        ));
    }
    // Framing: PLEN, PDO, DDGSTF, and where the data is.
    let (data_off, data_len, ddgst) = match ty {
        t::IC_REQ | t::IC_RESP => {
            if plen != HLEN_IC {
                return Err(err(
                    Fes::InvalidHeaderField,
                    fei::PLEN,
                    "ICReq/ICResp PLEN is not 128",
                ));
            }
            if pdo != 0 {
                return Err(err(Fes::InvalidHeaderField, fei::PDO, "PDO must be 0"));
            }
            (0, 0, false)
        }
        t::H2C_TERM_REQ | t::C2H_TERM_REQ => {
            if !(HLEN_TERM..=TERM_REQ_MAX_PLEN).contains(&plen) {
                return Err(err(
                    Fes::InvalidHeaderField,
                    fei::PLEN,
                    "TermReq PLEN out of range",
                ));
            }
            // The echoed header is carried without a data PDO (SPDK sends 0); tolerate HLEN too.
            if pdo != 0 && pdo != HLEN_TERM {
                return Err(err(
                    Fes::InvalidHeaderField,
                    fei::PDO,
                    "TermReq PDO invalid",
                ));
            }
            (0, 0, false)
        }
        t::CAPSULE_RESP | t::R2T => {
            if plen != header_len {
                return Err(err(
                    Fes::InvalidHeaderField,
                    fei::PLEN,
                    "PLEN must be HLEN + HDGST",
                ));
            }
            if pdo != 0 {
                return Err(err(Fes::InvalidHeaderField, fei::PDO, "PDO must be 0"));
            }
            if flags & flags::DDGSTF != 0 {
                return Err(err(
                    Fes::InvalidHeaderField,
                    fei::FLAGS,
                    "DDGSTF set on a PDU without data",
                ));
            }
            (0, 0, false)
        }
        // CapsuleCmd, H2CData, C2HData.
        _ => {
            if plen < header_len {
                return Err(err(
                    Fes::InvalidHeaderField,
                    fei::PLEN,
                    "PLEN smaller than the header",
                ));
            }
            if plen == header_len {
                if pdo != 0 {
                    return Err(err(
                        Fes::InvalidHeaderField,
                        fei::PDO,
                        "PDO must be 0 without data",
                    ));
                }
                if flags & flags::DDGSTF != 0 {
                    return Err(err(
                        Fes::InvalidHeaderField,
                        fei::FLAGS,
                        "DDGSTF set on a PDU without data",
                    ));
                }
                (0, 0, false)
            } else {
                if pdo != data_pdo(hlen, hdgst, lim.pda) || pdo > plen {
                    return Err(err(
                        Fes::InvalidHeaderField,
                        fei::PDO,
                        "PDO does not match HLEN, HDGST and PDA",
                    ));
                }
                if (flags & flags::DDGSTF != 0) != dig.ddgst {
                    return Err(err(
                        Fes::InvalidHeaderField,
                        fei::FLAGS,
                        "DDGSTF does not match negotiation",
                    ));
                }
                let ddgst_len = if dig.ddgst { DIGEST_LEN } else { 0 };
                let data_len = match plen.checked_sub(pdo + ddgst_len) {
                    Some(n) if n > 0 => n,
                    _ => {
                        return Err(err(
                            Fes::InvalidHeaderField,
                            fei::PLEN,
                            "PLEN too small for PDO and digest",
                        ));
                    }
                };
                (pdo, data_len, dig.ddgst)
            }
        }
    };

    // Limits that follow from PLEN alone.
    if ty == t::CAPSULE_CMD && data_len > usize::try_from(lim.max_icd).unwrap_or(usize::MAX) {
        return Err(err(
            Fes::DataTransferLimitExceeded,
            0,
            "in-capsule data exceeds the limit",
        ));
    }
    if (ty == t::H2C_DATA || ty == t::C2H_DATA)
        && data_len > usize::try_from(lim.max_data).unwrap_or(usize::MAX)
    {
        return Err(err(
            Fes::DataTransferLimitExceeded,
            0,
            "DATAL exceeds the negotiated maximum",
        ));
    }

    let Some(h) = buf.get(..header_len) else {
        return Ok(None);
    };
    let echo = &h[..header_len.min(TERM_REQ_MAX_ECHO)];
    let err = |fes: Fes, fei: u32, reason: &'static str| ProtocolError::new(fes, fei, echo, reason);
    if hdgst && le32(h, hlen) != digest::crc32c(&h[..hlen]) {
        return Err(err(Fes::HeaderDigestError, 0, "header digest mismatch"));
    }

    let data_hdr = |h: &[u8], ttag: u16, success: bool| DataHdr {
        cccid: le16(h, 8),
        ttag,
        datao: le32(h, 12),
        datal: le32(h, 16),
        last: flags & flags::LAST_PDU != 0,
        success,
    };
    let check_data_hdr = |d: &DataHdr| -> Result<(), ProtocolError> {
        if d.datal == 0 || usize::try_from(d.datal).ok() != Some(data_len) {
            return Err(err(
                Fes::InvalidHeaderField,
                fei::DATAL,
                "DATAL is 0 or does not match PLEN",
            ));
        }
        if d.datao.checked_add(d.datal).is_none() {
            return Err(err(
                Fes::DataTransferOutOfRange,
                0,
                "DATAO + DATAL overflows",
            ));
        }
        Ok(())
    };

    let pdu: Pdu<'static> = match ty {
        t::IC_REQ | t::IC_RESP => {
            let pfv = le16(h, 8);
            if pfv != 0 {
                return Err(err(
                    Fes::UnsupportedParameter,
                    fei::PFV,
                    "PFV not supported",
                ));
            }
            let pda = h[10];
            if pda > MAX_PDA {
                return Err(err(Fes::UnsupportedParameter, fei::PDA, "PDA above 31"));
            }
            let digests = Digests::from_bits(h[11]);
            let v = le32(h, 12);
            if ty == t::IC_REQ {
                Pdu::IcReq(IcReq {
                    pfv,
                    hpda: pda,
                    digests,
                    maxr2t: v,
                })
            } else {
                if v < MIN_MAXH2CDATA || !v.is_multiple_of(4) {
                    return Err(err(
                        Fes::InvalidHeaderField,
                        fei::MAXR2T_MAXH2CDATA,
                        "MAXH2CDATA below 4096 or not a multiple of 4",
                    ));
                }
                Pdu::IcResp(IcResp {
                    pfv,
                    cpda: pda,
                    digests,
                    maxh2cdata: v,
                })
            }
        }
        t::H2C_TERM_REQ => Pdu::H2cTermReq(TermReq {
            fes: le16(h, 8),
            fei: le32(h, 10),
            hdr: &[],
        }),
        t::C2H_TERM_REQ => Pdu::C2hTermReq(TermReq {
            fes: le16(h, 8),
            fei: le32(h, 10),
            hdr: &[],
        }),
        t::CAPSULE_CMD => {
            let mut sqe = Sqe([0; 64]);
            sqe.0.copy_from_slice(&h[CH_LEN..HLEN_CAPSULE_CMD]);
            if data_len > 0 {
                if sqe.sgl_type() != nvme_spec::sqe::SGL_ICD {
                    return Err(err(
                        Fes::InvalidHeaderField,
                        fei::SGL_TYPE,
                        "in-capsule data without an in-capsule SGL",
                    ));
                }
                if le64(h, fei::SGL_ADDR as usize) != 0 {
                    return Err(err(
                        Fes::UnsupportedParameter,
                        fei::SGL_ADDR,
                        "in-capsule data offset not 0",
                    ));
                }
                if usize::try_from(sqe.sgl_len()).ok() != Some(data_len) {
                    return Err(err(
                        Fes::InvalidHeaderField,
                        fei::SGL_LEN,
                        "SGL length differs from in-capsule data",
                    ));
                }
            }
            Pdu::CapsuleCmd { sqe, data: &[] }
        }
        t::CAPSULE_RESP => {
            let mut c = [0u8; 16];
            c.copy_from_slice(&h[CH_LEN..HLEN_CAPSULE_RESP]);
            Pdu::CapsuleResp(Cqe::decode(&c))
        }
        t::H2C_DATA => {
            if flags & flags::SUCCESS != 0 {
                return Err(err(
                    Fes::InvalidHeaderField,
                    fei::FLAGS,
                    "SUCCESS flag on H2CData",
                ));
            }
            let d = data_hdr(h, le16(h, 10), false);
            check_data_hdr(&d)?;
            Pdu::H2cData { hdr: d, data: &[] }
        }
        t::C2H_DATA => {
            let success = flags & flags::SUCCESS != 0;
            if success && flags & flags::LAST_PDU == 0 {
                return Err(err(
                    Fes::InvalidHeaderField,
                    fei::FLAGS,
                    "SUCCESS without LAST_PDU",
                ));
            }
            let d = data_hdr(h, 0, success);
            check_data_hdr(&d)?;
            Pdu::C2hData { hdr: d, data: &[] }
        }
        t::R2T => {
            let r = R2t {
                cccid: le16(h, 8),
                ttag: le16(h, 10),
                r2to: le32(h, 12),
                r2tl: le32(h, 16),
            };
            if r.r2tl == 0 || r.r2to.checked_add(r.r2tl).is_none() {
                return Err(err(
                    Fes::InvalidHeaderField,
                    fei::DATAL,
                    "R2TL is 0 or R2TO + R2TL overflows",
                ));
            }
            Pdu::R2t(r)
        }
        _ => {
            // rx_hlen() accepted only the types above.
            return Err(err(
                Fes::InvalidHeaderField,
                fei::PDU_TYPE,
                "PDU type not valid",
            ));
        }
    };
    Ok(Some(FrameHeader {
        pdu,
        plen,
        header_len,
        data_off,
        data_len,
        ddgst,
    }))
}

/// SplitMix64: the structured generator below draws its choices from one proptest seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    /// True with probability `pct`/100.
    fn chance(&mut self, pct: usize) -> bool {
        self.below(100) < pct
    }
    fn u8(&mut self) -> u8 {
        self.next() as u8
    }
    fn u32(&mut self) -> u32 {
        self.next() as u32
    }
}

/// `xs[x % len]`: a free function so the list may itself draw from the generator.
fn pick<T: Copy>(x: u64, xs: &[T]) -> T {
    xs[(x % xs.len() as u64) as usize]
}

const DIGEST_STATES: [Option<Digests>; 5] = [
    None,
    Some(Digests::NONE),
    Some(Digests {
        hdgst: true,
        ddgst: false,
    }),
    Some(Digests {
        hdgst: false,
        ddgst: true,
    }),
    Some(Digests::BOTH),
];

/// Every defined type, the two holes around them and an out-of-range one.
const TYPES: [u8; 12] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0xFF];

/// The fixed HLEN the sender would use for `ty` (24 for types that have none).
fn fixed_hlen(ty: u8) -> usize {
    rx_hlen(Role::Target, ty)
        .or(rx_hlen(Role::Host, ty))
        .unwrap_or(HLEN_DATA)
}

fn both(buf: &[u8], lim: &DecodeLimits) {
    let new = decode_header(buf, lim);
    let old = decode_header_reference(buf, lim);
    assert_eq!(new, old, "buf {buf:02x?} lim {lim:?}");
}

/// One header built to reach every check: mostly consistent with the limits, with one or more
/// fields pushed to an edge or made random. Returns the limits and the whole buffer.
fn structured(r: &mut Rng) -> (DecodeLimits, Vec<u8>) {
    use pdu_type as t;
    let role = pick(r.next(), &[Role::Target, Role::Host]);
    let digests = pick(r.next(), &DIGEST_STATES);
    let pda = if r.chance(80) {
        pick(r.next(), &[0, 0, 1, 3, 7, 31, 32, 255])
    } else {
        r.u8()
    };
    let limit = |r: &mut Rng| {
        if r.chance(85) {
            pick(
                r.next(),
                &[
                    0,
                    1,
                    4095,
                    4096,
                    8192,
                    65536,
                    1 << 20,
                    u32::MAX - 1,
                    u32::MAX,
                ],
            )
        } else {
            r.u32()
        }
    };
    let lim = DecodeLimits {
        role,
        digests,
        pda,
        max_icd: limit(r),
        max_data: limit(r),
    };
    let legal: &[u8] = match role {
        Role::Target => &[t::IC_REQ, t::H2C_TERM_REQ, t::CAPSULE_CMD, t::H2C_DATA],
        Role::Host => &[
            t::IC_RESP,
            t::C2H_TERM_REQ,
            t::CAPSULE_RESP,
            t::C2H_DATA,
            t::R2T,
        ],
    };
    let ty = match r.below(10) {
        0 => pick(r.next(), &TYPES),
        1 => r.u8(),
        _ => pick(r.next(), legal),
    };
    let dig = digests.unwrap_or(Digests::NONE);
    let hlen = fixed_hlen(ty);
    let hdgst = carries_digests(ty) && dig.hdgst;
    let header_len = hlen + if hdgst { DIGEST_LEN } else { 0 };
    let with_data = matches!(ty, t::CAPSULE_CMD | t::H2C_DATA | t::C2H_DATA) && r.chance(70);
    let limit_of_type = if ty == t::CAPSULE_CMD {
        lim.max_icd
    } else {
        lim.max_data
    };
    let data_len: u64 = if with_data {
        let l = u64::from(limit_of_type);
        pick(
            r.next(),
            &[
                1,
                3,
                4,
                512,
                4096,
                l,
                l + 1,
                l.saturating_sub(1),
                u64::from(r.u32()),
            ],
        )
    } else {
        0
    };
    let mut pdo = if data_len > 0 {
        data_pdo(hlen, hdgst, pda)
    } else {
        0
    };
    let ddgst_len = if data_len > 0 && dig.ddgst {
        DIGEST_LEN
    } else {
        0
    };
    let mut plen: u64 = match ty {
        t::IC_REQ | t::IC_RESP => HLEN_IC as u64,
        t::H2C_TERM_REQ | t::C2H_TERM_REQ => (HLEN_TERM + r.below(TERM_REQ_MAX_ECHO + 2)) as u64,
        _ if data_len > 0 => pdo as u64 + data_len + ddgst_len as u64,
        _ => header_len as u64,
    };
    let mut flags = 0u8;
    if hdgst {
        flags |= flags::HDGSTF;
    }
    if ddgst_len > 0 {
        flags |= flags::DDGSTF;
    }
    if r.chance(50) {
        flags |= flags::LAST_PDU;
    }
    if r.chance(10) {
        flags |= flags::SUCCESS;
    }
    let mut hlen_byte = hlen as u8;
    // Push some CH fields to an edge.
    if r.chance(15) {
        flags ^= 1 << r.below(8);
    }
    if r.chance(5) {
        flags = r.u8();
    }
    if r.chance(8) {
        hlen_byte = if r.chance(50) {
            pick(r.next(), &[0, 8, 24, 72, 128, 255])
        } else {
            r.u8()
        };
    }
    if r.chance(12) {
        let hd = hlen + DIGEST_LEN;
        pdo = pick(
            r.next(),
            &[
                0,
                hlen,
                hd,
                pdo.wrapping_sub(4),
                pdo + 4,
                data_pdo(hlen, !hdgst, pda),
                128,
                255,
                usize::from(r.u8()),
            ],
        ) & 0xFF;
    }
    if r.chance(15) {
        let hl = header_len as u64;
        plen = pick(
            r.next(),
            &[
                0,
                7,
                8,
                hl.wrapping_sub(1),
                hl,
                hl + 1,
                hl + 4,
                pdo as u64,
                pdo as u64 + 4,
                plen.wrapping_sub(1),
                plen + 1,
                plen.wrapping_sub(4),
                128,
                129,
                152,
                153,
                u64::from(u32::MAX),
                u64::from(r.u32()),
            ],
        );
    }
    let plen = plen as u32; // PLEN is 32 bits on the wire; a larger value wraps like a sender's would.
    let datal = data_len as u32;

    let mut buf = vec![0u8; HLEN_IC + DIGEST_LEN + 16];
    for b in buf.iter_mut().skip(CH_LEN) {
        *b = if r.chance(30) { r.u8() } else { 0 };
    }
    buf[0] = ty;
    buf[1] = flags;
    buf[2] = hlen_byte;
    buf[3] = pdo as u8;
    put32(&mut buf, 4, plen);
    match ty {
        t::IC_REQ | t::IC_RESP => {
            let pfv = if r.chance(85) { 0 } else { r.next() as u16 };
            put16(&mut buf, 8, pfv);
            buf[10] = if r.chance(80) {
                r.below(32) as u8
            } else {
                pick(r.next(), &[32, 33, 255, r.u8()])
            };
            buf[11] = r.u8();
            let v = pick(
                r.next(),
                &[0, 4092, 4095, 4096, 4098, 4100, 1 << 20, u32::MAX, r.u32()],
            );
            put32(&mut buf, 12, v);
        }
        t::CAPSULE_CMD => {
            let sgl_type = if r.chance(80) {
                nvme_spec::sqe::SGL_ICD
            } else {
                pick(r.next(), &[nvme_spec::sqe::SGL_TRANSPORT, 0x00, r.u8()])
            };
            buf[CH_LEN + 39] = sgl_type;
            let addr: u64 = if r.chance(80) {
                0
            } else {
                pick(r.next(), &[1, 1 << 63, r.next()])
            };
            buf[CH_LEN + 24..CH_LEN + 32].copy_from_slice(&addr.to_le_bytes());
            let len = if r.chance(80) {
                datal
            } else {
                pick(
                    r.next(),
                    &[0, datal.wrapping_add(1), datal.wrapping_sub(1), r.u32()],
                )
            };
            put32(&mut buf, CH_LEN + 32, len);
        }
        t::H2C_DATA | t::C2H_DATA | t::R2T => {
            let l = if ty == t::R2T {
                pick(r.next(), &[1, 4096, u32::MAX, r.u32()])
            } else {
                datal
            };
            let l = if r.chance(85) {
                l
            } else {
                pick(
                    r.next(),
                    &[0, l.wrapping_add(1), l.wrapping_sub(1), r.u32()],
                )
            };
            let o = pick(
                r.next(),
                &[
                    0,
                    4096,
                    u32::MAX - l,
                    (u32::MAX - l).wrapping_add(1),
                    u32::MAX,
                    r.u32(),
                ],
            );
            put16(&mut buf, 8, r.next() as u16);
            put16(&mut buf, 10, r.next() as u16);
            put32(&mut buf, 12, o);
            put32(&mut buf, 16, l);
        }
        _ => {}
    }
    if hdgst && r.chance(90) {
        let crc = digest::crc32c(&buf[..hlen]);
        put32(&mut buf, hlen, crc);
    }
    let full = buf.len();
    let n = match r.below(8) {
        0 => r.below(full + 1),
        1 => pick(r.next(), &[0, 1, CH_LEN - 1, CH_LEN, CH_LEN + 1]),
        2 => header_len.saturating_sub(1),
        3 => header_len + 1,
        4 => full,
        _ => header_len,
    };
    buf.truncate(n);
    (lim, buf)
}

proptest! {
    /// Random structured headers: both decoders give the same result on the header and on every
    /// prefix length the generator picks (`PROPTEST_CASES` sets the count).
    #[test]
    fn decode_header_matches_reference(seed in any::<u64>()) {
        let mut r = Rng(seed);
        let (lim, buf) = structured(&mut r);
        both(&buf, &lim);
        // The same header, cut at each length around the common header and the whole header.
        for n in [0, CH_LEN - 1, CH_LEN, buf.len().saturating_sub(1)] {
            both(&buf[..n.min(buf.len())], &lim);
        }
    }

    /// Unstructured bytes with arbitrary limits.
    #[test]
    fn decode_header_matches_reference_on_noise(
        bytes in proptest::collection::vec(any::<u8>(), 0..160),
        role in prop_oneof![Just(Role::Target), Just(Role::Host)],
        d in 0usize..5,
        pda in any::<u8>(),
        max_icd in any::<u32>(),
        max_data in any::<u32>(),
    ) {
        let lim = DecodeLimits { role, digests: DIGEST_STATES[d], pda, max_icd, max_data };
        both(&bytes, &lim);
    }
}

/// A sweep of the common header: every type, role, digest state and the low flag bits against
/// HLEN, PDO and PLEN values at the edges, the PSH filled in consistently so the whole-header
/// checks are reached too; judged on the common header alone and on the whole header.
#[test]
fn decode_header_matches_reference_sweep() {
    use pdu_type as t;
    let plens: Vec<u32> = vec![
        0,
        8,
        23,
        24,
        25,
        27,
        28,
        29,
        32,
        36,
        72,
        76,
        77,
        80,
        84,
        127,
        128,
        129,
        132,
        152,
        153,
        24 + 8192,
        28 + 8192 + 4,
        72 + 8192,
        72 + 8193,
        76 + 8192 + 4,
        80 + 8192 + 4,
        24 + 65536,
        24 + 65537,
        28 + 65536 + 4,
        u32::MAX,
    ];
    let mut cases = 0u64;
    for role in [Role::Target, Role::Host] {
        for digests in DIGEST_STATES {
            for pda in [0u8] {
                let lim = DecodeLimits {
                    role,
                    digests,
                    pda,
                    max_icd: 8192,
                    max_data: 65536,
                };
                for ty in TYPES {
                    let hlen = fixed_hlen(ty);
                    for flags in 0..16u8 {
                        for hlen_byte in [hlen as u8, 0, 24, 72, 128] {
                            for pdo in [0u8, 8, 24, 28, 32, 72, 76, 80, 128, 255] {
                                for &plen in &plens {
                                    let mut buf = vec![0u8; HLEN_IC + DIGEST_LEN];
                                    buf[0] = ty;
                                    buf[1] = flags;
                                    buf[2] = hlen_byte;
                                    buf[3] = pdo;
                                    put32(&mut buf, 4, plen);
                                    let dl = (plen as usize).saturating_sub(usize::from(pdo));
                                    let dl = dl.saturating_sub(if flags & flags::DDGSTF != 0 {
                                        DIGEST_LEN
                                    } else {
                                        0
                                    }) as u32;
                                    match ty {
                                        t::IC_RESP => put32(&mut buf, 12, 4096),
                                        t::CAPSULE_CMD => {
                                            buf[CH_LEN + 39] = nvme_spec::sqe::SGL_ICD;
                                            put32(&mut buf, CH_LEN + 32, dl);
                                        }
                                        t::H2C_DATA | t::C2H_DATA => put32(&mut buf, 16, dl),
                                        t::R2T => put32(&mut buf, 16, 1),
                                        _ => {}
                                    }
                                    if flags & flags::HDGSTF != 0 {
                                        let crc = digest::crc32c(&buf[..hlen]);
                                        put32(&mut buf, hlen, crc);
                                    }
                                    both(&buf[..CH_LEN], &lim);
                                    both(&buf, &lim);
                                    cases += 2;
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(cases > 500_000, "{cases}");
}

/// How often the structured generator reaches each outcome of the decoder (run by hand to check
/// that every check is exercised).
#[test]
#[ignore = "generator coverage report"]
fn structured_generator_coverage() {
    let mut counts = std::collections::BTreeMap::<String, u64>::new();
    for seed in 0..200_000u64 {
        let mut r = Rng(seed);
        let (lim, buf) = structured(&mut r);
        let k = match decode_header_reference(&buf, &lim) {
            Ok(None) => "Ok(None)".to_string(),
            Ok(Some(h)) => format!("Ok(Some) {:?}", std::mem::discriminant(&h.pdu)),
            Err(e) => format!("{:?} {} {}", e.fes, e.fei, e.reason),
        };
        *counts.entry(k).or_default() += 1;
    }
    for (k, n) in counts {
        println!("{n:>8} {k}");
    }
}

/// A/B timing of the split decoder against the frozen copy, interleaved so that both see the
/// same machine load: 5 rounds of 2M headers each, median per side.
/// `cargo test --release -p nvmf-tcp --lib -- --ignored --nocapture vs_reference`.
#[test]
#[ignore = "timing, run in release by hand"]
fn decode_header_vs_reference_timing() {
    use super::tests::{ns_per_header, timing_headers};
    // NaN for a side that did not run.
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
    };
    // PDU_TIMING_CASE=<substring of the name> times only the matching headers.
    let case = std::env::var("PDU_TIMING_CASE").unwrap_or_default();
    for (name, role, dig, buf) in timing_headers() {
        if !name.contains(&case) {
            continue;
        }
        let lim = DecodeLimits {
            role,
            digests: Some(dig),
            pda: 0,
            max_icd: 8192,
            max_data: 65536,
        };
        assert_eq!(
            decode_header(&buf, &lim),
            decode_header_reference(&buf, &lim)
        );
        // PDU_TIMING_ONLY=split|reference runs one side, PDU_TIMING_N sets the calls per round
        // (for counting instructions under `valgrind --tool=callgrind`).
        let only = std::env::var("PDU_TIMING_ONLY").unwrap_or_default();
        let n = std::env::var("PDU_TIMING_N").map_or(2_000_000, |v| v.parse().unwrap());
        let (mut new, mut old) = (Vec::new(), Vec::new());
        for round in 0..5 {
            // Alternate which side goes first, so neither always runs on a warmer machine.
            for side in [round % 2, 1 - round % 2] {
                if side == 0 && only != "reference" {
                    new.push(ns_per_header(decode_header, &buf, &lim, n));
                }
                if side == 1 && only != "split" {
                    old.push(ns_per_header(decode_header_reference, &buf, &lim, n));
                }
            }
        }
        println!(
            "{name}: split {:6.2} ns, reference {:6.2} ns",
            median(new),
            median(old)
        );
    }
}
