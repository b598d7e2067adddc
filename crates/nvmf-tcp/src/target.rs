//! Target (controller) role of an NVMe/TCP connection.

use crate::error::{Fes, ProtocolError};
use crate::pdu::{self, DataHdr, DecodeLimits, Digests, IcResp, Pdu, R2t, Role, fei};
use nvme_spec::{Cqe, Sqe};

/// Limits the target advertises and enforces on one connection.
///
/// Values are used as given: `maxh2cdata` should be a multiple of 4 and ≥ 4096 (hosts reject
/// anything else), `cpda` ≤ 31 (larger values are treated as 31), `c2h_max` ≥ 1.
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
        TargetConnConfig {
            maxh2cdata: 131072,
            max_icd: 8192,
            c2h_max: 131072,
            max_ttags: 256,
            cpda: 0,
        }
    }
}

/// What the host sent, validated.
#[derive(Debug, PartialEq, Eq)]
pub enum TargetEvent<'a> {
    /// ICReq accepted; the ICResp has already been appended to `out`.
    Established {
        /// HPDA (0..=31, 0's based dwords): alignment of the data in the C2HData PDUs the target
        /// sends, honoured by [`TargetConn`].
        hpda: u8,
        /// Digests the host asked for; all are enabled (echoed in ICResp).
        digests: Digests,
        /// MAXR2T (0's based): the host accepts at most MAXR2T + 1 outstanding R2Ts per command.
        maxr2t: u32,
    },
    /// A command capsule. `icd` is the in-capsule data (empty if none); when non-empty the SGL
    /// has been checked to be an in-capsule descriptor whose length equals `icd.len()`.
    Command {
        /// The 64-byte submission queue entry.
        sqe: Sqe,
        /// In-capsule data, empty if none.
        icd: &'a [u8],
    },
    /// H2CData for an R2T this connection issued: TTAG, CCCID, offset and length already checked
    /// against that R2T. `last` is true when the R2T's window is complete (the tag is then free).
    H2cData {
        /// CCCID: the command the data belongs to (matches the R2T's).
        cccid: u16,
        /// TTAG: the R2T's transfer tag.
        ttag: u16,
        /// DATAO: offset of `data` in the command's data, in bytes.
        datao: u32,
        /// The data (DATAL bytes, never empty).
        data: &'a [u8],
        /// The R2T's window is complete and its tag is free.
        last: bool,
    },
    /// The host terminated the connection (H2CTermReq). Log and close.
    TermReq {
        /// Fatal Error Status, raw (see [`crate::Fes::from_u16`]).
        fes: u16,
        /// Fatal Error Information: for FES 01h/06h the byte offset of the offending field.
        fei: u32,
    },
    /// A command capsule whose in-capsule data failed its data digest (non-fatal: NVMe/TCP 1.0
    /// transport error handling, see [`crate::pdu`] docs). The header (and so the SQE) is intact: the
    /// controller must complete the command with Transient Transport Error
    /// (`Status::TRANSIENT_TRANSPORT`) without executing it.
    CommandDataDigestError {
        /// The submission queue entry of the command to fail.
        sqe: Sqe,
    },
    /// An H2CData PDU whose data failed its data digest. Its header was valid and has been
    /// checked against the R2T exactly like [`TargetEvent::H2cData`], and the R2T window has
    /// advanced by `datal` bytes (`last`: the window is complete and the tag is free). The data
    /// is unusable: the controller must not execute the command and completes it with Transient
    /// Transport Error once the transfer is over (`last`) — further H2CData for the same tag may
    /// still arrive and must be accepted and dropped.
    H2cDataDigestError {
        /// CCCID: the command to fail.
        cccid: u16,
        /// TTAG: the R2T's transfer tag.
        ttag: u16,
        /// DATAO of the lost data, in bytes.
        datao: u32,
        /// DATAL of the lost data, in bytes.
        datal: u32,
        /// The R2T's window is complete and its tag is free.
        last: bool,
    },
}

/// One transfer tag's R2T window.
#[derive(Clone, Copy, Debug, Default)]
struct R2tSlot {
    active: bool,
    cccid: u16,
    /// Next expected DATAO.
    next: u32,
    /// R2TO + R2TL.
    end: u32,
}

#[derive(Debug)]
enum State {
    /// Waiting for ICReq.
    AwaitIcReq,
    /// ICReq answered.
    Established,
    /// A protocol error was found; it is returned again on every call.
    Failed(ProtocolError),
    /// TermReq sent or received.
    Terminated,
}

/// Connection state machine, target role. See the crate docs for the driving loop.
#[derive(Debug)]
pub struct TargetConn {
    cfg: TargetConnConfig,
    state: State,
    digests: Digests,
    hpda: u8,
    /// Indexed by TTAG; grows (up to `cfg.max_ttags`) as tags are first used, so a
    /// connection that never receives a write holds none.
    r2t: Vec<R2tSlot>,
}

impl TargetConn {
    /// A connection waiting for the host's ICReq.
    pub fn new(cfg: TargetConnConfig) -> TargetConn {
        TargetConn {
            cfg,
            state: State::AwaitIcReq,
            digests: Digests::NONE,
            hpda: 0,
            r2t: Vec::new(),
        }
    }

    /// Upper bound on one PDU's total length with the current configuration (the driver's receive
    /// buffer must hold at least this many bytes).
    pub fn max_pdu_len(&self) -> usize {
        // Before the IC exchange digests are unknown: assume both.
        let dig = match self.state {
            State::AwaitIcReq => Digests::BOTH,
            _ => self.digests,
        };
        let icd = usize::try_from(self.cfg.max_icd).unwrap_or(usize::MAX);
        let h2c = usize::try_from(self.cfg.maxh2cdata).unwrap_or(usize::MAX);
        let ddgst = if dig.ddgst { pdu::DIGEST_LEN } else { 0 };
        let capsule = pdu::data_pdo(pdu::HLEN_CAPSULE_CMD, dig.hdgst, self.cfg.cpda)
            .saturating_add(icd)
            .saturating_add(ddgst);
        let data = pdu::data_pdo(pdu::HLEN_DATA, dig.hdgst, self.cfg.cpda)
            .saturating_add(h2c)
            .saturating_add(ddgst);
        capsule
            .max(data)
            .max(pdu::HLEN_IC)
            .max(pdu::TERM_REQ_MAX_PLEN)
    }

    fn limits(&self) -> DecodeLimits {
        DecodeLimits {
            role: Role::Target,
            digests: match self.state {
                State::AwaitIcReq => None,
                _ => Some(self.digests),
            },
            pda: self.cfg.cpda,
            max_icd: self.cfg.max_icd,
            max_data: self.cfg.maxh2cdata,
        }
    }

    fn fail(&mut self, e: ProtocolError) -> ProtocolError {
        self.state = State::Failed(e.clone());
        e
    }

    /// Decode the next PDU at the start of `buf`. `Ok(None)`: not enough bytes yet (the caller
    /// keeps them and reads more). `Ok(Some((event, consumed)))`: one PDU handled, `consumed`
    /// bytes used. ICReq is answered here (ICResp appended to `out`). After an `Err`, the caller
    /// sends [`TargetConn::encode_term_req`] and closes; further calls keep failing.
    ///
    /// After [`TargetEvent::TermReq`] (or after sending a C2HTermReq for a reason of the driver's
    /// own) every call returns `Ok(None)`: further bytes are ignored and the driver closes. In
    /// particular a received H2CTermReq is never answered with a C2HTermReq.
    ///
    /// Header errors are reported as soon as the PDU header is in `buf`, before its data.
    pub fn decode_one<'a>(
        &mut self,
        buf: &'a [u8],
        out: &mut Vec<u8>,
    ) -> Result<Option<(TargetEvent<'a>, usize)>, ProtocolError> {
        match &self.state {
            State::Failed(e) => return Err(e.clone()),
            // After a TermReq (either way) nothing more is processed (NVMe/TCP 1.0 error handling: the
            // receiver of a TermReq sends none back; the sender ignores further PDUs).
            State::Terminated => return Ok(None),
            State::AwaitIcReq | State::Established => {}
        }
        let h = match pdu::decode_header(buf, &self.limits()) {
            Ok(Some(h)) => h,
            Ok(None) => return Ok(None),
            Err(e) => return Err(self.fail(e)),
        };
        // Check H2CData against its R2T before waiting for the data.
        let mut slot_idx = None;
        if let Pdu::H2cData { hdr, .. } = &h.pdu {
            match self.check_h2c(hdr) {
                Ok(i) => slot_idx = Some(i),
                Err((fes, fei, reason)) => {
                    let e = ProtocolError::new(fes, fei, h.echo(buf), reason);
                    return Err(self.fail(e));
                }
            }
        }
        let Some(frame) = h.decode_body(buf) else {
            return Ok(None);
        };
        let ev = match frame.pdu {
            Pdu::IcReq(ic) => {
                self.digests = ic.digests;
                self.hpda = ic.hpda;
                self.state = State::Established;
                let resp = IcResp {
                    pfv: 0,
                    cpda: self.cfg.cpda.min(pdu::MAX_PDA),
                    digests: ic.digests,
                    maxh2cdata: self.cfg.maxh2cdata,
                };
                pdu::encode_ic_resp(out, &resp);
                TargetEvent::Established {
                    hpda: ic.hpda,
                    digests: ic.digests,
                    maxr2t: ic.maxr2t,
                }
            }
            Pdu::CapsuleCmd { sqe, data } => {
                if frame.data_digest_ok {
                    TargetEvent::Command { sqe, icd: data }
                } else {
                    TargetEvent::CommandDataDigestError { sqe }
                }
            }
            Pdu::H2cData { hdr, data } => {
                let Some(slot) = slot_idx.and_then(|i| self.r2t.get_mut(i)) else {
                    // check_h2c returned the index of a slot that exists.
                    return Err(self.fail(ProtocolError::new(
                        Fes::InvalidHeaderField,
                        fei::TTAG,
                        h.echo(buf),
                        "TTAG not outstanding",
                    )));
                };
                slot.next = hdr.datao.saturating_add(hdr.datal); // checked in check_h2c
                let last = slot.next == slot.end;
                if last {
                    slot.active = false;
                }
                if frame.data_digest_ok {
                    TargetEvent::H2cData {
                        cccid: hdr.cccid,
                        ttag: hdr.ttag,
                        datao: hdr.datao,
                        data,
                        last,
                    }
                } else {
                    TargetEvent::H2cDataDigestError {
                        cccid: hdr.cccid,
                        ttag: hdr.ttag,
                        datao: hdr.datao,
                        datal: hdr.datal,
                        last,
                    }
                }
            }
            Pdu::H2cTermReq(t) => {
                self.state = State::Terminated;
                TargetEvent::TermReq {
                    fes: t.fes,
                    fei: t.fei,
                }
            }
            // decode_header with Role::Target yields only the four types above.
            Pdu::IcResp(_)
            | Pdu::C2hTermReq(_)
            | Pdu::CapsuleResp(_)
            | Pdu::C2hData { .. }
            | Pdu::R2t(_) => {
                return Err(self.fail(ProtocolError::new(
                    Fes::InvalidHeaderField,
                    fei::PDU_TYPE,
                    h.echo(buf),
                    "PDU type not valid in this direction",
                )));
            }
        };
        Ok(Some((ev, frame.len)))
    }

    /// Validate an H2CData header against the R2T it answers (NVMe/TCP 1.0 H2CData PDU; the checks
    /// SPDK `nvmf_tcp_h2c_data_hdr_handle` and Linux `nvmet_tcp_handle_h2c_data_pdu` make).
    /// Returns the slot index. DATAL has already been checked against PLEN and MAXH2CDATA.
    fn check_h2c(&self, d: &DataHdr) -> Result<usize, (Fes, u32, &'static str)> {
        let idx = usize::from(d.ttag);
        let slot = match self.r2t.get(idx) {
            Some(s) if s.active => s,
            Some(_) => {
                return Err((
                    Fes::InvalidHeaderField,
                    fei::TTAG,
                    "TTAG has no outstanding R2T",
                ));
            }
            // Never issued: either beyond the table so far or beyond `max_ttags`.
            None if d.ttag < self.cfg.max_ttags => {
                return Err((
                    Fes::InvalidHeaderField,
                    fei::TTAG,
                    "TTAG has no outstanding R2T",
                ));
            }
            None => return Err((Fes::InvalidHeaderField, fei::TTAG, "TTAG out of range")),
        };
        if slot.cccid != d.cccid {
            return Err((
                Fes::InvalidHeaderField,
                fei::CCCID,
                "CCCID does not match the R2T",
            ));
        }
        if d.datao != slot.next {
            return Err((
                Fes::DataTransferOutOfRange,
                0,
                "DATAO is not the next expected offset",
            ));
        }
        let end = match d.datao.checked_add(d.datal) {
            Some(e) if e <= slot.end => e,
            _ => {
                return Err((
                    Fes::DataTransferOutOfRange,
                    0,
                    "H2CData beyond the R2T window",
                ));
            }
        };
        // LAST_PDU marks exactly the PDU that completes the R2T (NVMe/TCP 1.0 H2CData flags).
        if d.last != (end == slot.end) {
            return Err((
                Fes::InvalidHeaderField,
                fei::FLAGS,
                "LAST_PDU does not match the end of the R2T",
            ));
        }
        Ok(idx)
    }

    /// Negotiated digests (after Established).
    pub fn digests(&self) -> Digests {
        self.digests
    }

    /// HPDA the host asked for in ICReq (C2HData PDO alignment), 0's based dwords.
    pub fn hpda(&self) -> u8 {
        self.hpda
    }

    /// True once ICReq has been answered and until the connection terminates.
    pub fn is_established(&self) -> bool {
        matches!(self.state, State::Established)
    }

    /// Append a CapsuleResp carrying `cqe`.
    pub fn encode_resp(&self, out: &mut Vec<u8>, cqe: &Cqe) {
        pdu::encode_capsule_resp(out, self.digests, cqe);
    }

    /// Append the C2HData PDUs that carry `data` (the bytes at offset `datao_base` of the command's
    /// data), split at `c2h_max`, each padded to the host's HPDA, with digests as negotiated.
    /// `last` sets LAST_PDU on the final PDU; `success` additionally sets SUCCESS on it (only when
    /// the queue has SQ flow control disabled, and then no CapsuleResp is sent).
    ///
    /// SUCCESS is only ever set together with LAST_PDU (`success` is ignored unless `last`).
    /// Empty `data` appends nothing (a C2HData PDU must carry at least one byte).
    pub fn encode_c2h_data(
        &self,
        out: &mut Vec<u8>,
        cccid: u16,
        datao_base: u32,
        data: &[u8],
        last: bool,
        success: bool,
    ) {
        let max = usize::try_from(self.cfg.c2h_max.max(1)).unwrap_or(usize::MAX);
        let n = data.len().div_ceil(max);
        let mut datao = datao_base;
        for (i, chunk) in data.chunks(max).enumerate() {
            let final_pdu = i + 1 == n;
            let d = DataHdr {
                cccid,
                ttag: 0,
                datao,
                datal: 0,
                last: last && final_pdu,
                success: success && last && final_pdu,
            };
            pdu::encode_c2h_data(out, self.digests, self.hpda, &d, chunk);
            datao = datao.wrapping_add(u32::try_from(chunk.len()).unwrap_or(u32::MAX));
        }
    }

    /// Like [`TargetConn::encode_c2h_data`] for `len` bytes that `fill` writes straight into
    /// `out` (no intermediate buffer; the bytes on the wire are identical). `fill(buf, offset)`
    /// is called once per C2HData PDU with that PDU's data area (zero-initialised) and the
    /// offset of its first byte relative to the start of the `len` bytes (0 for the first PDU);
    /// data digests are computed over what it wrote. If `fill` fails, `out` is truncated back to
    /// its length before the call (no PDU of this transfer is left) and the error is returned.
    #[allow(clippy::too_many_arguments)]
    pub fn encode_c2h_data_with<E>(
        &self,
        out: &mut Vec<u8>,
        cccid: u16,
        datao_base: u32,
        len: usize,
        last: bool,
        success: bool,
        mut fill: impl FnMut(&mut [u8], u64) -> Result<(), E>,
    ) -> Result<(), E> {
        let max = usize::try_from(self.cfg.c2h_max.max(1)).unwrap_or(usize::MAX);
        let before = out.len();
        let mut off = 0usize;
        while off < len {
            let chunk = (len - off).min(max);
            let final_pdu = off + chunk == len;
            let d = DataHdr {
                cccid,
                ttag: 0,
                datao: datao_base.wrapping_add(u32::try_from(off).unwrap_or(u32::MAX)),
                datal: 0,
                last: last && final_pdu,
                success: success && last && final_pdu,
            };
            let res = pdu::encode_c2h_data_with(out, self.digests, self.hpda, &d, chunk, |buf| {
                fill(buf, off as u64)
            });
            if let Err(e) = res {
                out.truncate(before);
                return Err(e);
            }
            off += chunk;
        }
        Ok(())
    }

    /// The most data bytes one C2HData PDU carries (the configured split size).
    pub fn c2h_max(&self) -> usize {
        usize::try_from(self.cfg.c2h_max.max(1)).unwrap_or(usize::MAX)
    }

    /// Append the head of one C2HData PDU carrying all `len` bytes of a command's data, which
    /// the caller transmits right after it from its own memory (zero-copy). Returns false,
    /// appending nothing, when that is not possible: a data digest was negotiated, `len` is 0
    /// or above the C2HData split size, or the connection is not established.
    pub fn encode_c2h_data_head(
        &self,
        out: &mut Vec<u8>,
        cccid: u16,
        datao: u32,
        len: usize,
        last: bool,
        success: bool,
    ) -> bool {
        if !self.is_established() || len == 0 || len as u64 > u64::from(self.cfg.c2h_max) {
            return false;
        }
        let d = DataHdr {
            cccid,
            ttag: 0,
            datao,
            datal: 0,
            last,
            success: success && last,
        };
        pdu::encode_c2h_data_head(out, self.digests, self.hpda, &d, len)
    }

    /// Append an R2T asking for `r2tl` bytes at offset `r2to` of command `cccid`, and remember it
    /// under `ttag` so that the following H2CData PDUs are validated. Returns false (and appends
    /// nothing) if `ttag` is out of range or already in use.
    ///
    /// Also returns false if `r2tl` is 0, `r2to + r2tl` overflows, or the connection is not
    /// established. The controller must respect the host's MAXR2T (0's based, reported in
    /// [`TargetEvent::Established`]): at most MAXR2T+1 outstanding R2Ts per command.
    pub fn send_r2t(
        &mut self,
        out: &mut Vec<u8>,
        cccid: u16,
        ttag: u16,
        r2to: u32,
        r2tl: u32,
    ) -> bool {
        if !self.is_established() || r2tl == 0 {
            return false;
        }
        let Some(end) = r2to.checked_add(r2tl) else {
            return false;
        };
        let idx = usize::from(ttag);
        if idx >= self.r2t.len() && ttag < self.cfg.max_ttags {
            let want = (idx + 1)
                .next_power_of_two()
                .min(usize::from(self.cfg.max_ttags));
            self.r2t.resize(want, R2tSlot::default());
        }
        match self.r2t.get_mut(idx) {
            Some(slot) if !slot.active => {
                *slot = R2tSlot {
                    active: true,
                    cccid,
                    next: r2to,
                    end,
                };
            }
            _ => return false,
        }
        pdu::encode_r2t(
            out,
            self.digests,
            &R2t {
                cccid,
                ttag,
                r2to,
                r2tl,
            },
        );
        true
    }

    /// Forget an outstanding R2T (command aborted / failed).
    ///
    /// Only call this when the host can no longer send data for the tag (connection teardown):
    /// H2CData that arrives for a cancelled tag is a fatal error (FES 01h, FEI 10). A command
    /// whose data is still being transferred must be allowed to finish the transfer (the
    /// `last` event frees the tag) before it is completed, even with an error status.
    pub fn cancel_r2t(&mut self, ttag: u16) {
        if let Some(slot) = self.r2t.get_mut(usize::from(ttag)) {
            slot.active = false;
        }
    }

    /// Append a C2HTermReq for `err` (FES, FEI, echoed header). The connection is terminated.
    pub fn encode_term_req(&mut self, out: &mut Vec<u8>, err: &ProtocolError) {
        pdu::encode_term_req(
            out,
            pdu::pdu_type::C2H_TERM_REQ,
            err.fes as u16,
            err.fei,
            err.header(),
        );
        if !matches!(self.state, State::Failed(_)) {
            self.state = State::Terminated;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pdu::IcReq;

    /// A target connection established with `digests` and `hpda`, splitting C2HData at `c2h_max`.
    fn established(digests: Digests, hpda: u8, c2h_max: u32) -> TargetConn {
        let mut t = TargetConn::new(TargetConnConfig {
            c2h_max,
            ..TargetConnConfig::default()
        });
        let mut ic = Vec::new();
        pdu::encode_ic_req(
            &mut ic,
            &IcReq {
                pfv: 0,
                hpda,
                digests,
                maxr2t: 0,
            },
        );
        let mut out = Vec::new();
        let (ev, n) = t.decode_one(&ic, &mut out).unwrap().unwrap();
        assert!(matches!(ev, TargetEvent::Established { .. }));
        assert_eq!(n, ic.len());
        t
    }

    fn pattern(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    const DIGESTS: [Digests; 4] = [
        Digests::NONE,
        Digests::BOTH,
        Digests {
            hdgst: true,
            ddgst: false,
        },
        Digests {
            hdgst: false,
            ddgst: true,
        },
    ];

    #[test]
    fn c2h_data_with_matches_encode_c2h_data() {
        for dig in DIGESTS {
            for hpda in [0u8, 3, 31] {
                for c2h_max in [1u32, 1000, 4096, 131072] {
                    let t = established(dig, hpda, c2h_max);
                    for len in [1usize, 3, 999, 1000, 1001, 4096, 9000] {
                        if c2h_max == 1 && len > 1001 {
                            continue;
                        }
                        let data = pattern(len);
                        for (last, success) in [(true, true), (true, false), (false, false)] {
                            let mut want = b"prefix".to_vec();
                            t.encode_c2h_data(&mut want, 9, 512, &data, last, success);
                            let mut got = b"prefix".to_vec();
                            let mut calls = 0usize;
                            let mut next = 0u64;
                            t.encode_c2h_data_with(
                                &mut got,
                                9,
                                512,
                                len,
                                last,
                                success,
                                |buf: &mut [u8], off| -> Result<(), ()> {
                                    assert_eq!(off, next, "offsets are contiguous");
                                    assert!(buf.len() <= c2h_max as usize);
                                    assert!(buf.iter().all(|&b| b == 0));
                                    let o = off as usize;
                                    buf.copy_from_slice(&data[o..o + buf.len()]);
                                    next += buf.len() as u64;
                                    calls += 1;
                                    Ok(())
                                },
                            )
                            .unwrap();
                            assert_eq!(next, len as u64);
                            assert_eq!(calls, len.div_ceil(c2h_max as usize));
                            assert!(got == want, "{dig:?} hpda {hpda} max {c2h_max} len {len}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn c2h_data_with_decodes_on_the_host_side() {
        // The filled bytes (not the zero-initialised area) are what the digest covers.
        let t = established(Digests::BOTH, 3, 1000);
        let data = pattern(2500);
        let mut out = Vec::new();
        t.encode_c2h_data_with(&mut out, 4, 0, data.len(), true, false, |buf, off| {
            let o = off as usize;
            buf.copy_from_slice(&data[o..o + buf.len()]);
            Ok::<(), ()>(())
        })
        .unwrap();
        let lim = DecodeLimits {
            role: Role::Host,
            digests: Some(Digests::BOTH),
            pda: 3,
            max_icd: 8192,
            max_data: 1 << 20,
        };
        let mut pos = 0;
        let mut got = Vec::new();
        let mut pdus = 0;
        while pos < out.len() {
            let f = pdu::decode_frame(&out[pos..], &lim).unwrap().unwrap();
            assert!(f.data_digest_ok);
            let Pdu::C2hData { hdr, data: d } = f.pdu else {
                panic!("not C2HData");
            };
            assert_eq!(hdr.datao as usize, got.len());
            assert_eq!(hdr.last, got.len() + d.len() == data.len());
            assert!(!hdr.success);
            got.extend_from_slice(d);
            pos += f.len;
            pdus += 1;
        }
        assert_eq!(pdus, 3);
        assert_eq!(got, data);
    }

    #[test]
    fn c2h_data_with_error_leaves_out_untouched() {
        for dig in DIGESTS {
            let t = established(dig, 3, 1000);
            for fail_at in [0u64, 1000, 2000] {
                let mut out = b"earlier PDUs".to_vec();
                let cap = out.len();
                let r = t.encode_c2h_data_with(&mut out, 1, 0, 2500, true, true, |buf, off| {
                    if off == fail_at {
                        return Err("read failed");
                    }
                    buf.fill(0xAB);
                    Ok(())
                });
                assert_eq!(r, Err("read failed"));
                assert_eq!(out, b"earlier PDUs", "{dig:?} fail at {fail_at}");
                assert_eq!(out.len(), cap);
            }
        }
    }

    #[test]
    fn c2h_data_with_empty_appends_nothing() {
        let t = established(Digests::BOTH, 0, 1000);
        let mut out = Vec::new();
        t.encode_c2h_data_with(&mut out, 1, 0, 0, true, true, |_, _| -> Result<(), ()> {
            panic!("fill called for empty data")
        })
        .unwrap();
        assert!(out.is_empty());
    }
}
