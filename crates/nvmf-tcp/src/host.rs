//! Host (initiator) role of an NVMe/TCP connection.

use crate::error::{Fes, ProtocolError};
use crate::pdu::{self, DataHdr, DecodeLimits, Digests, IcReq, Pdu, R2t, Role, fei};
use nvme_spec::{Cqe, Sqe};

/// What the host asks for in ICReq.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostConnConfig {
    /// Digests to request in ICReq; the controller may enable fewer, never more.
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
        HostConnConfig {
            digests: Digests::default(),
            hpda: 0,
            maxr2t: 0,
            max_c2h_data: 1 << 20,
        }
    }
}

/// What the controller sent, validated for framing and digests.
///
/// The host role does not track commands: matching CCCIDs, offsets and R2T windows against
/// outstanding commands is `nvmf-host`'s job.
#[derive(Debug, PartialEq, Eq)]
pub enum HostEvent<'a> {
    /// ICResp received: negotiated parameters.
    Established {
        /// CPDA (0..=31, 0's based dwords): alignment of the data in the PDUs the host sends.
        cpda: u8,
        /// Digests the controller enabled; used on every later PDU.
        digests: Digests,
        /// MAXH2CDATA: the most data bytes one H2CData PDU may carry (≥ 4096, a multiple of 4).
        maxh2cdata: u32,
    },
    /// A CapsuleResp: the command's completion queue entry.
    Response(Cqe),
    /// A C2HData PDU whose data passed its digest (if any).
    C2hData {
        /// CCCID: the command the data belongs to.
        cccid: u16,
        /// DATAO: offset of `data` in the command's data, in bytes.
        datao: u32,
        /// The data (DATAL bytes, never empty).
        data: &'a [u8],
        /// LAST_PDU: the command's last C2HData.
        last: bool,
        /// SUCCESS: the command completed successfully and no CapsuleResp follows.
        success: bool,
    },
    /// An R2T: the controller asks for `r2tl` bytes of command `cccid`'s data at `r2to`,
    /// to be sent in H2CData PDUs carrying `ttag`.
    R2t(R2t),
    /// The controller terminated the connection (C2HTermReq). Log and close.
    TermReq {
        /// Fatal Error Status, raw (see [`crate::Fes::from_u16`]).
        fes: u16,
        /// Fatal Error Information: for FES 01h/06h the byte offset of the offending field.
        fei: u32,
    },
    /// A C2HData PDU whose data failed its data digest (non-fatal: NVMe/TCP 1.0 transport error handling, see
    /// [`crate::pdu`] docs). The header was valid; the data is unusable. The command must be
    /// failed with Transient Transport Error: when `success` is set no CapsuleResp follows, so
    /// fail it now; otherwise fail it when its CapsuleResp arrives (whatever status that carries).
    C2hDataDigestError {
        /// CCCID: the command to fail.
        cccid: u16,
        /// DATAO of the lost data, in bytes.
        datao: u32,
        /// DATAL of the lost data, in bytes.
        datal: u32,
        /// LAST_PDU was set.
        last: bool,
        /// SUCCESS was set: no CapsuleResp follows.
        success: bool,
    },
}

#[derive(Debug)]
enum State {
    /// ICReq not sent yet.
    Idle,
    /// ICReq sent, waiting for ICResp.
    AwaitIcResp,
    Established,
    /// A protocol error was found; it is returned again on every call.
    Failed(ProtocolError),
    /// TermReq sent or received.
    Terminated,
}

/// Connection state machine, host role.
#[derive(Debug)]
pub struct HostConn {
    cfg: HostConnConfig,
    state: State,
    digests: Digests,
    cpda: u8,
    maxh2cdata: u32,
    /// PLEN of the PDU whose header the last [`HostConn::decode_one`] validated without its
    /// whole body being there (0: none).
    awaiting: usize,
}

impl HostConn {
    /// A connection in its initial state; nothing is sent until [`HostConn::encode_icreq`].
    pub fn new(cfg: HostConnConfig) -> HostConn {
        HostConn {
            cfg,
            state: State::Idle,
            digests: Digests::NONE,
            cpda: 0,
            maxh2cdata: pdu::MIN_MAXH2CDATA,
            awaiting: 0,
        }
    }

    /// The length (PLEN, validated against this connection's limits) of the PDU at the head
    /// of the buffer the last [`HostConn::decode_one`] returned `None` for, if its header was
    /// whole and only the rest was missing: how many bytes the receiver still waits for.
    pub fn awaiting_pdu_len(&self) -> Option<usize> {
        (self.awaiting > 0).then_some(self.awaiting)
    }

    /// Append the ICReq; call once, first.
    ///
    /// HPDA is sent as configured but treated as at most 31 when checking C2HData alignment.
    pub fn encode_icreq(&mut self, out: &mut Vec<u8>) {
        let ic = IcReq {
            pfv: 0,
            hpda: self.cfg.hpda,
            digests: self.cfg.digests,
            maxr2t: self.cfg.maxr2t,
        };
        pdu::encode_ic_req(out, &ic);
        if matches!(self.state, State::Idle) {
            self.state = State::AwaitIcResp;
        }
    }

    /// Upper bound on one incoming PDU's length.
    pub fn max_pdu_len(&self) -> usize {
        let dig = match self.state {
            State::Idle | State::AwaitIcResp => self.cfg.digests,
            _ => self.digests,
        };
        let ddgst = if dig.ddgst { pdu::DIGEST_LEN } else { 0 };
        let c2h = pdu::data_pdo(pdu::HLEN_DATA, dig.hdgst, self.cfg.hpda)
            .saturating_add(usize::try_from(self.cfg.max_c2h_data).unwrap_or(usize::MAX))
            .saturating_add(ddgst);
        c2h.max(pdu::HLEN_IC).max(pdu::TERM_REQ_MAX_PLEN)
    }

    fn limits(&self) -> DecodeLimits {
        DecodeLimits {
            role: Role::Host,
            digests: match self.state {
                State::Idle | State::AwaitIcResp => None,
                _ => Some(self.digests),
            },
            pda: self.cfg.hpda,
            max_icd: 0,
            max_data: self.cfg.max_c2h_data,
        }
    }

    fn fail(&mut self, e: ProtocolError) -> ProtocolError {
        self.state = State::Failed(e.clone());
        e
    }

    /// Same contract as [`crate::TargetConn::decode_one`]. On `Err` the caller sends
    /// [`HostConn::encode_term_req`] with the error's FES, FEI and header, then closes. After
    /// [`HostEvent::TermReq`] (or after sending an H2CTermReq) every call returns `Ok(None)`.
    ///
    /// ICResp checks beyond framing: the controller may only enable digests the host asked for
    /// (else FES 01h, FEI 11). An ICResp before the ICReq was encoded is a sequence error.
    pub fn decode_one<'a>(
        &mut self,
        buf: &'a [u8],
    ) -> Result<Option<(HostEvent<'a>, usize)>, ProtocolError> {
        self.awaiting = 0;
        match &self.state {
            State::Failed(e) => return Err(e.clone()),
            // After a TermReq (either way) nothing more is processed (NVMe/TCP 1.0 error handling: the
            // receiver of a TermReq sends none back; the sender ignores further PDUs).
            State::Terminated => return Ok(None),
            State::Idle | State::AwaitIcResp | State::Established => {}
        }
        let h = match pdu::decode_header(buf, &self.limits()) {
            Ok(Some(h)) => h,
            Ok(None) => return Ok(None),
            Err(e) => return Err(self.fail(e)),
        };
        if let Pdu::IcResp(ic) = &h.pdu {
            if matches!(self.state, State::Idle) {
                let e = ProtocolError::new(
                    Fes::PduSequenceError,
                    0,
                    h.echo(buf),
                    "ICResp before ICReq",
                );
                return Err(self.fail(e));
            }
            if !ic.digests.is_subset_of(self.cfg.digests) {
                let e = ProtocolError::new(
                    Fes::InvalidHeaderField,
                    fei::DGST,
                    h.echo(buf),
                    "controller enabled a digest the host did not request",
                );
                return Err(self.fail(e));
            }
        }
        let Some(frame) = h.decode_body(buf) else {
            self.awaiting = h.plen;
            return Ok(None);
        };
        let ev = match frame.pdu {
            Pdu::IcResp(ic) => {
                self.digests = ic.digests;
                self.cpda = ic.cpda;
                self.maxh2cdata = ic.maxh2cdata;
                self.state = State::Established;
                HostEvent::Established {
                    cpda: ic.cpda,
                    digests: ic.digests,
                    maxh2cdata: ic.maxh2cdata,
                }
            }
            Pdu::CapsuleResp(cqe) => HostEvent::Response(cqe),
            Pdu::C2hData { hdr, data } => {
                if frame.data_digest_ok {
                    HostEvent::C2hData {
                        cccid: hdr.cccid,
                        datao: hdr.datao,
                        data,
                        last: hdr.last,
                        success: hdr.success,
                    }
                } else {
                    HostEvent::C2hDataDigestError {
                        cccid: hdr.cccid,
                        datao: hdr.datao,
                        datal: hdr.datal,
                        last: hdr.last,
                        success: hdr.success,
                    }
                }
            }
            Pdu::R2t(r) => HostEvent::R2t(r),
            Pdu::C2hTermReq(t) => {
                self.state = State::Terminated;
                HostEvent::TermReq {
                    fes: t.fes,
                    fei: t.fei,
                }
            }
            // decode_header with Role::Host yields only the five types above.
            Pdu::IcReq(_) | Pdu::H2cTermReq(_) | Pdu::CapsuleCmd { .. } | Pdu::H2cData { .. } => {
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

    /// Negotiated values (valid after Established).
    pub fn digests(&self) -> Digests {
        self.digests
    }

    /// MAXH2CDATA from ICResp: the most data bytes per H2CData PDU (4096 before Established).
    pub fn maxh2cdata(&self) -> u32 {
        self.maxh2cdata
    }

    /// CPDA from ICResp (H2C data PDO alignment), 0's based dwords.
    pub fn cpda(&self) -> u8 {
        self.cpda
    }

    /// True once ICResp has been accepted and until the connection terminates.
    pub fn is_established(&self) -> bool {
        matches!(self.state, State::Established)
    }

    /// Append a CapsuleCmd with `icd` as in-capsule data (the caller sets the SGL accordingly).
    pub fn encode_capsule(&self, out: &mut Vec<u8>, sqe: &Sqe, icd: &[u8]) {
        pdu::encode_capsule_cmd(out, self.digests, self.cpda, sqe, icd);
    }

    /// Append H2CData PDUs answering an R2T with `data` (which starts at offset `datao`), split
    /// at the negotiated MAXH2CDATA, padded to CPDA, LAST_PDU on the final one.
    ///
    /// `data` must be the whole rest of the R2T window (LAST_PDU marks its end). Empty `data`
    /// appends nothing.
    pub fn encode_h2c_data(
        &self,
        out: &mut Vec<u8>,
        cccid: u16,
        ttag: u16,
        datao: u32,
        data: &[u8],
    ) {
        for (d, r) in self.h2c_pdus(cccid, ttag, datao, data.len()) {
            pdu::encode_h2c_data(out, self.digests, self.cpda, &d, &data[r]);
        }
    }

    /// As [`HostConn::encode_capsule`], without copying `icd`: returns the offset in `out`
    /// where `icd` must be sent (see [`pdu::encode_capsule_cmd_spliced`]).
    pub fn encode_capsule_spliced(&self, out: &mut Vec<u8>, sqe: &Sqe, icd: &[u8]) -> usize {
        pdu::encode_capsule_cmd_spliced(out, self.digests, self.cpda, sqe, icd)
    }

    /// As [`HostConn::encode_h2c_data`], without copying `data`: for each PDU, `splice(at,
    /// range)` says that `data[range]` must be sent at offset `at` of `out` (see
    /// [`pdu::encode_h2c_data_spliced`]); the offsets are in increasing order.
    pub fn encode_h2c_data_spliced(
        &self,
        out: &mut Vec<u8>,
        cccid: u16,
        ttag: u16,
        datao: u32,
        data: &[u8],
        mut splice: impl FnMut(usize, std::ops::Range<usize>),
    ) {
        for (d, r) in self.h2c_pdus(cccid, ttag, datao, data.len()) {
            let at =
                pdu::encode_h2c_data_spliced(out, self.digests, self.cpda, &d, &data[r.clone()]);
            splice(at, r);
        }
    }

    /// The H2CData PDUs carrying `len` bytes from `datao`: each one's header and its range of
    /// the data, split at MAXH2CDATA, LAST_PDU on the final one.
    fn h2c_pdus(
        &self,
        cccid: u16,
        ttag: u16,
        datao: u32,
        len: usize,
    ) -> impl Iterator<Item = (DataHdr, std::ops::Range<usize>)> {
        let max = usize::try_from(self.maxh2cdata.max(1)).unwrap_or(usize::MAX);
        let n = len.div_ceil(max);
        (0..n).map(move |i| {
            let start = i * max;
            let d = DataHdr {
                cccid,
                ttag,
                datao: datao.wrapping_add(u32::try_from(start).unwrap_or(u32::MAX)),
                datal: 0,
                last: i + 1 == n,
                success: false,
            };
            (d, start..len.min(start + max))
        })
    }

    /// Append an H2CTermReq.
    ///
    /// `hdr` is truncated to 128 bytes. The connection is terminated.
    pub fn encode_term_req(&mut self, out: &mut Vec<u8>, fes: u16, fei: u32, hdr: &[u8]) {
        pdu::encode_term_req(out, pdu::pdu_type::H2C_TERM_REQ, fes, fei, hdr);
        if !matches!(self.state, State::Failed(_)) {
            self.state = State::Terminated;
        }
    }
}
