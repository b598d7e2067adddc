//! Hostile input: every fatal check, with its FES, FEI and echoed header; data digest errors are
//! non-fatal events.

mod common;

use common::*;
use nvme_spec::{CommandId, Cqe, Sqe};
use nvmf_tcp::pdu::{self, DataHdr, IcResp, R2t, flags, pdu_type};
use nvmf_tcp::{
    Digests, Fes, HostConnConfig, HostEvent, TargetConn, TargetConnConfig, TargetEvent,
};

const NONE: Digests = Digests::NONE;
const BOTH: Digests = Digests::BOTH;

fn cfg() -> TargetConnConfig {
    TargetConnConfig {
        maxh2cdata: 4096,
        max_icd: 4096,
        c2h_max: 4096,
        max_ttags: 8,
        cpda: 0,
    }
}

fn capsule(dig: Digests, cpda: u8, icd: &[u8]) -> Vec<u8> {
    let mut sqe = Sqe::new(0x01, CommandId(1));
    if icd.is_empty() {
        sqe.set_sgl_transport(4096);
    } else {
        sqe.set_sgl_icd(icd.len() as u32);
    }
    let mut b = Vec::new();
    pdu::encode_capsule_cmd(&mut b, dig, cpda, &sqe, icd);
    b
}

fn h2c(dig: Digests, cccid: u16, ttag: u16, datao: u32, data: &[u8], last: bool) -> Vec<u8> {
    let mut b = Vec::new();
    let d = DataHdr {
        cccid,
        ttag,
        datao,
        datal: 0,
        last,
        success: false,
    };
    pdu::encode_h2c_data(&mut b, dig, 0, &d, data);
    b
}

/// Established target (digests `dig`) with an R2T for cccid 7, ttag 2, 8192 bytes at offset 0.
fn with_r2t(dig: Digests) -> TargetConn {
    let mut t = established_target(cfg(), dig, 0);
    let mut out = Vec::new();
    assert!(t.send_r2t(&mut out, 7, 2, 0, 8192));
    t
}

// ---------------------------------------------------------------------------------------------
// PDU type and sequence

#[test]
fn unknown_pdu_type_is_invalid_header_field_0() {
    for ty in [0x08u8, 0x0A, 0x7F, 0xFF] {
        let mut b = vec![0u8; 24];
        b[0] = ty;
        b[2] = 24;
        b[4] = 24;
        let mut t = established_target(cfg(), NONE, 0);
        let e = target_err(&mut t, &b);
        assert_err(&e, Fes::InvalidHeaderField, 0, &b[..8]);
        let mut h = established_host(HostConnConfig::default(), 0, 4096);
        assert_err(&host_err(&mut h, &b), Fes::InvalidHeaderField, 0, &b[..8]);
    }
}

#[test]
fn controller_to_host_types_rejected_by_target() {
    let r2t = {
        let mut b = Vec::new();
        pdu::encode_r2t(
            &mut b,
            NONE,
            &R2t {
                cccid: 1,
                ttag: 1,
                r2to: 0,
                r2tl: 1,
            },
        );
        b
    };
    let resp = {
        let mut b = Vec::new();
        pdu::encode_capsule_resp(&mut b, NONE, &Cqe::default());
        b
    };
    let c2h = {
        let mut b = Vec::new();
        let d = DataHdr {
            cccid: 1,
            ttag: 0,
            datao: 0,
            datal: 0,
            last: true,
            success: false,
        };
        pdu::encode_c2h_data(&mut b, NONE, 0, &d, &[1, 2, 3]);
        b
    };
    let icresp = {
        let mut b = Vec::new();
        pdu::encode_ic_resp(
            &mut b,
            &IcResp {
                pfv: 0,
                cpda: 0,
                digests: NONE,
                maxh2cdata: 4096,
            },
        );
        b
    };
    let c2hterm = {
        let mut b = Vec::new();
        pdu::encode_term_req(&mut b, pdu_type::C2H_TERM_REQ, 1, 0, &[]);
        b
    };
    for b in [r2t, resp, c2h, icresp, c2hterm] {
        // Before and after the IC exchange alike.
        let mut t = TargetConn::new(cfg());
        assert_err(&target_err(&mut t, &b), Fes::InvalidHeaderField, 0, &b[..8]);
        let mut t = established_target(cfg(), NONE, 0);
        assert_err(&target_err(&mut t, &b), Fes::InvalidHeaderField, 0, &b[..8]);
    }
}

#[test]
fn host_to_controller_types_rejected_by_host() {
    let cap = capsule(NONE, 0, &[]);
    let data = h2c(NONE, 1, 1, 0, &[1], true);
    let icreq = icreq_bytes(NONE, 0);
    let mut term = Vec::new();
    pdu::encode_term_req(&mut term, pdu_type::H2C_TERM_REQ, 1, 0, &[]);
    for b in [cap, data, icreq, term] {
        let mut h = established_host(HostConnConfig::default(), 0, 4096);
        assert_err(&host_err(&mut h, &b), Fes::InvalidHeaderField, 0, &b[..8]);
    }
}

#[test]
fn capsule_before_icreq_is_sequence_error() {
    let b = capsule(NONE, 0, &[1, 2, 3, 4]);
    let mut t = TargetConn::new(cfg());
    assert_err(&target_err(&mut t, &b), Fes::PduSequenceError, 0, &b[..72]);
    let b = h2c(NONE, 1, 0, 0, &[1], true);
    let mut t = TargetConn::new(cfg());
    assert_err(&target_err(&mut t, &b), Fes::PduSequenceError, 0, &b[..24]);
}

#[test]
fn second_icreq_is_sequence_error() {
    let mut t = established_target(cfg(), BOTH, 0);
    let b = icreq_bytes(BOTH, 0);
    assert_err(&target_err(&mut t, &b), Fes::PduSequenceError, 0, &b);
}

#[test]
fn icreq_field_checks() {
    let mut b = icreq_bytes(NONE, 0);
    b[8] = 1; // PFV
    assert_err(
        &target_err(&mut TargetConn::new(cfg()), &b),
        Fes::UnsupportedParameter,
        8,
        &b,
    );

    let mut b = icreq_bytes(NONE, 0);
    b[10] = 32; // HPDA
    assert_err(
        &target_err(&mut TargetConn::new(cfg()), &b),
        Fes::UnsupportedParameter,
        10,
        &b,
    );

    let mut b = icreq_bytes(NONE, 0);
    b[4] = 127; // PLEN
    assert_err(
        &target_err(&mut TargetConn::new(cfg()), &b),
        Fes::InvalidHeaderField,
        4,
        &b,
    );

    let mut b = icreq_bytes(NONE, 0);
    b[2] = 124; // HLEN
    assert_err(
        &target_err(&mut TargetConn::new(cfg()), &b),
        Fes::InvalidHeaderField,
        2,
        &b,
    );

    let mut b = icreq_bytes(NONE, 0);
    b[3] = 8; // PDO
    assert_err(
        &target_err(&mut TargetConn::new(cfg()), &b),
        Fes::InvalidHeaderField,
        3,
        &b,
    );
}

#[test]
fn icreq_hpda_31_accepted() {
    established_target(cfg(), BOTH, 31);
}

// ---------------------------------------------------------------------------------------------
// HLEN, flags, digests, PLEN, PDO

#[test]
fn hlen_mismatch_fei_2() {
    let mut b = capsule(BOTH, 0, &[]);
    b[2] = 24;
    fix_hdgst(&mut b, 72);
    let mut t = established_target(cfg(), BOTH, 0);
    assert_err(
        &target_err(&mut t, &b),
        Fes::InvalidHeaderField,
        2,
        &b[..76],
    );

    let mut b = h2c(NONE, 7, 2, 0, &[0; 16], false);
    b[2] = 72;
    let mut t = with_r2t(NONE);
    assert_err(
        &target_err(&mut t, &b),
        Fes::InvalidHeaderField,
        2,
        &b[..24],
    );
}

#[test]
fn header_digest_mismatch_fes_3() {
    let mut b = capsule(BOTH, 0, &[9; 64]);
    b[20] ^= 0x10; // inside the SQE
    let mut t = established_target(cfg(), BOTH, 0);
    let e = target_err(&mut t, &b[..76]); // detected from the header alone
    assert_err(&e, Fes::HeaderDigestError, 0, &b[..76]);

    let mut b = h2c(BOTH, 7, 2, 0, &[0; 16], false);
    b[25] ^= 1; // the digest itself
    let mut t = with_r2t(BOTH);
    assert_err(&target_err(&mut t, &b), Fes::HeaderDigestError, 0, &b[..28]);
}

#[test]
fn hdgstf_must_match_negotiation() {
    let mut b = capsule(BOTH, 0, &[]);
    b[1] &= !flags::HDGSTF;
    let mut t = established_target(cfg(), BOTH, 0);
    assert_err(
        &target_err(&mut t, &b),
        Fes::InvalidHeaderField,
        1,
        &b[..76],
    );

    let mut b = capsule(NONE, 0, &[]);
    b[1] |= flags::HDGSTF;
    let mut t = established_target(cfg(), NONE, 0);
    assert_err(
        &target_err(&mut t, &b),
        Fes::InvalidHeaderField,
        1,
        &b[..72],
    );
}

#[test]
fn ddgstf_must_match_negotiation_and_data() {
    // Data digest negotiated, data present, DDGSTF clear.
    let mut b = capsule(BOTH, 0, &[1; 32]);
    b[1] &= !flags::DDGSTF;
    fix_hdgst(&mut b, 72);
    let mut t = established_target(cfg(), BOTH, 0);
    assert_err(
        &target_err(&mut t, &b),
        Fes::InvalidHeaderField,
        1,
        &b[..76],
    );

    // Not negotiated, DDGSTF set.
    let mut b = capsule(NONE, 0, &[1; 32]);
    b[1] |= flags::DDGSTF;
    let mut t = established_target(cfg(), NONE, 0);
    assert_err(
        &target_err(&mut t, &b),
        Fes::InvalidHeaderField,
        1,
        &b[..72],
    );

    // Negotiated but the PDU has no data.
    let mut b = capsule(BOTH, 0, &[]);
    b[1] |= flags::DDGSTF;
    fix_hdgst(&mut b, 72);
    let mut t = established_target(cfg(), BOTH, 0);
    assert_err(
        &target_err(&mut t, &b),
        Fes::InvalidHeaderField,
        1,
        &b[..76],
    );
}

#[test]
fn plen_checks_fei_4() {
    // Smaller than HLEN + HDGST.
    let mut b = capsule(BOTH, 0, &[]);
    b[4..8].copy_from_slice(&74u32.to_le_bytes());
    fix_hdgst(&mut b, 72);
    let mut t = established_target(cfg(), BOTH, 0);
    assert_err(
        &target_err(&mut t, &b),
        Fes::InvalidHeaderField,
        4,
        &b[..76],
    );

    // Room for PDO and the data digest but no data byte.
    let mut b = capsule(BOTH, 0, &[1; 8]);
    b[4..8].copy_from_slice(&80u32.to_le_bytes()); // PDO 76 + DDGST 4, 0 data
    fix_hdgst(&mut b, 72);
    let mut t = established_target(cfg(), BOTH, 0);
    assert_err(
        &target_err(&mut t, &b),
        Fes::InvalidHeaderField,
        4,
        &b[..76],
    );
}

#[test]
fn pdo_checks_fei_3() {
    // No data, PDO not 0.
    let mut b = capsule(NONE, 0, &[]);
    b[3] = 72;
    let mut t = established_target(cfg(), NONE, 0);
    assert_err(
        &target_err(&mut t, &b),
        Fes::InvalidHeaderField,
        3,
        &b[..72],
    );

    // Data, PDO not HLEN + HDGST.
    let mut b = capsule(NONE, 0, &[5; 16]);
    b[3] = 76;
    let mut t = established_target(cfg(), NONE, 0);
    assert_err(
        &target_err(&mut t, &b),
        Fes::InvalidHeaderField,
        3,
        &b[..72],
    );

    // Violates the CPDA the target advertised (cpda 3 -> 16-byte alignment -> PDO 80).
    let b = capsule(NONE, 0, &[5; 16]);
    let mut t = established_target(TargetConnConfig { cpda: 3, ..cfg() }, NONE, 0);
    assert_err(
        &target_err(&mut t, &b),
        Fes::InvalidHeaderField,
        3,
        &b[..72],
    );
    // ... and the correctly padded capsule is accepted.
    let b = capsule(NONE, 3, &[5; 16]);
    assert_eq!(b[3], 80);
    let mut t = established_target(TargetConnConfig { cpda: 3, ..cfg() }, NONE, 0);
    let (ev, n) = t.decode_one(&b, &mut Vec::new()).unwrap().unwrap();
    assert_eq!(n, b.len());
    assert!(matches!(ev, TargetEvent::Command { icd, .. } if icd == [5; 16]));

    // PDO beyond PLEN (cpda 31 -> PDO 128, PLEN 73).
    let mut b = capsule(NONE, 0, &[5]);
    b[3] = 128;
    let mut t = established_target(TargetConnConfig { cpda: 31, ..cfg() }, NONE, 0);
    assert_err(
        &target_err(&mut t, &b),
        Fes::InvalidHeaderField,
        3,
        &b[..72],
    );
}

// ---------------------------------------------------------------------------------------------
// In-capsule data

#[test]
fn in_capsule_data_over_limit_is_fes_5_from_header() {
    let b = capsule(NONE, 0, &vec![0; 4097]);
    let mut t = established_target(cfg(), NONE, 0);
    assert_err(
        &target_err(&mut t, &b[..72]),
        Fes::DataTransferLimitExceeded,
        0,
        &b[..72],
    );
}

#[test]
fn in_capsule_sgl_checks() {
    let icd = [3u8; 64];
    let mut sqe = Sqe::new(0x01, CommandId(1));

    sqe.set_sgl_transport(64); // byte 39 = 0x5A
    let mut b = Vec::new();
    pdu::encode_capsule_cmd(&mut b, NONE, 0, &sqe, &icd);
    let mut t = established_target(cfg(), NONE, 0);
    assert_err(
        &target_err(&mut t, &b),
        Fes::InvalidHeaderField,
        47,
        &b[..72],
    );

    sqe.set_sgl_icd(64);
    sqe.0[24] = 0x10; // offset 16
    let mut b = Vec::new();
    pdu::encode_capsule_cmd(&mut b, NONE, 0, &sqe, &icd);
    let mut t = established_target(cfg(), NONE, 0);
    assert_err(
        &target_err(&mut t, &b),
        Fes::UnsupportedParameter,
        32,
        &b[..72],
    );

    sqe.set_sgl_icd(65);
    let mut b = Vec::new();
    pdu::encode_capsule_cmd(&mut b, NONE, 0, &sqe, &icd);
    let mut t = established_target(cfg(), NONE, 0);
    assert_err(
        &target_err(&mut t, &b),
        Fes::InvalidHeaderField,
        40,
        &b[..72],
    );
}

#[test]
fn capsule_without_data_may_carry_any_sgl() {
    let mut sqe = Sqe::new(0x01, CommandId(1));
    sqe.set_sgl_icd(4096); // claims in-capsule data that is not there: the controller decides
    let mut b = Vec::new();
    pdu::encode_capsule_cmd(&mut b, BOTH, 0, &sqe, &[]);
    let mut t = established_target(cfg(), BOTH, 0);
    let (ev, _) = t.decode_one(&b, &mut Vec::new()).unwrap().unwrap();
    assert_eq!(ev, TargetEvent::Command { sqe, icd: &[] });
}

// ---------------------------------------------------------------------------------------------
// H2CData against R2T state

#[test]
fn h2c_ttag_out_of_range_or_not_outstanding_fei_10() {
    let b = h2c(NONE, 7, 8, 0, &[0; 16], false); // max_ttags 8
    assert_err(
        &target_err(&mut with_r2t(NONE), &b),
        Fes::InvalidHeaderField,
        10,
        &b[..24],
    );
    let b = h2c(NONE, 7, 0xFFFF, 0, &[0; 16], false);
    assert_err(
        &target_err(&mut with_r2t(NONE), &b),
        Fes::InvalidHeaderField,
        10,
        &b[..24],
    );
    let b = h2c(BOTH, 7, 3, 0, &[0; 16], false);
    assert_err(
        &target_err(&mut with_r2t(BOTH), &b),
        Fes::InvalidHeaderField,
        10,
        &b[..28],
    );
}

#[test]
fn h2c_cccid_mismatch_fei_8() {
    let b = h2c(NONE, 8, 2, 0, &[0; 16], false);
    assert_err(
        &target_err(&mut with_r2t(NONE), &b),
        Fes::InvalidHeaderField,
        8,
        &b[..24],
    );
}

#[test]
fn h2c_offset_and_window_fes_4() {
    let b = h2c(NONE, 7, 2, 4, &[0; 16], false);
    assert_err(
        &target_err(&mut with_r2t(NONE), &b),
        Fes::DataTransferOutOfRange,
        0,
        &b[..24],
    );

    let mut t = established_target(cfg(), NONE, 0);
    assert!(t.send_r2t(&mut Vec::new(), 7, 2, 0, 100));
    let b = h2c(NONE, 7, 2, 0, &[0; 200], true);
    assert_err(
        &target_err(&mut t, &b),
        Fes::DataTransferOutOfRange,
        0,
        &b[..24],
    );
}

#[test]
fn h2c_datal_over_maxh2cdata_fes_5() {
    let b = h2c(NONE, 7, 2, 0, &[0; 4100], false);
    assert_err(
        &target_err(&mut with_r2t(NONE), &b[..24]),
        Fes::DataTransferLimitExceeded,
        0,
        &b[..24],
    );
}

#[test]
fn h2c_datal_zero_or_inconsistent_fei_16() {
    // No data at all: PLEN = HLEN, PDO 0, DATAL 0.
    let mut b = vec![0u8; 24];
    b[0] = pdu_type::H2C_DATA;
    b[1] = flags::LAST_PDU;
    b[2] = 24;
    b[4] = 24;
    b[8] = 7;
    b[10] = 2;
    assert_err(
        &target_err(&mut with_r2t(NONE), &b),
        Fes::InvalidHeaderField,
        16,
        &b,
    );

    let mut b = h2c(BOTH, 7, 2, 0, &[0; 100], false);
    b[16] = 99;
    fix_hdgst(&mut b, 24);
    assert_err(
        &target_err(&mut with_r2t(BOTH), &b),
        Fes::InvalidHeaderField,
        16,
        &b[..28],
    );
}

#[test]
fn h2c_last_pdu_must_mark_the_end_of_the_window() {
    // LAST on a PDU that does not complete the R2T.
    let b = h2c(NONE, 7, 2, 0, &[0; 4096], true);
    assert_err(
        &target_err(&mut with_r2t(NONE), &b),
        Fes::InvalidHeaderField,
        1,
        &b[..24],
    );

    // No LAST on the PDU that does.
    let mut t = with_r2t(NONE);
    let first = h2c(NONE, 7, 2, 0, &[0; 4096], false);
    let (ev, _) = t.decode_one(&first, &mut Vec::new()).unwrap().unwrap();
    assert!(matches!(ev, TargetEvent::H2cData { last: false, .. }));
    let b = h2c(NONE, 7, 2, 4096, &[0; 4096], false);
    assert_err(
        &target_err(&mut t, &b),
        Fes::InvalidHeaderField,
        1,
        &b[..24],
    );
}

#[test]
fn h2c_success_flag_fei_1() {
    let mut b = h2c(NONE, 7, 2, 0, &[0; 16], false);
    b[1] |= flags::SUCCESS;
    assert_err(
        &target_err(&mut with_r2t(NONE), &b),
        Fes::InvalidHeaderField,
        1,
        &b[..24],
    );
}

#[test]
fn h2c_after_window_complete_or_cancel_is_fatal() {
    let mut t = with_r2t(NONE);
    let data = vec![1u8; 8192];
    let mut s = Vec::new();
    s.extend(h2c(NONE, 7, 2, 0, &data[..4096], false));
    s.extend(h2c(NONE, 7, 2, 4096, &data[4096..], true));
    let (ev, n) = t.decode_one(&s, &mut Vec::new()).unwrap().unwrap();
    assert!(matches!(
        ev,
        TargetEvent::H2cData {
            last: false,
            datao: 0,
            ..
        }
    ));
    let (ev, m) = t.decode_one(&s[n..], &mut Vec::new()).unwrap().unwrap();
    assert!(matches!(
        ev,
        TargetEvent::H2cData {
            last: true,
            datao: 4096,
            ..
        }
    ));
    assert_eq!(n + m, s.len());
    let b = h2c(NONE, 7, 2, 8192, &[0; 16], true);
    assert_err(
        &target_err(&mut t, &b),
        Fes::InvalidHeaderField,
        10,
        &b[..24],
    );

    let mut t = with_r2t(NONE);
    t.cancel_r2t(2);
    let b = h2c(NONE, 7, 2, 0, &[0; 16], false);
    assert_err(
        &target_err(&mut t, &b),
        Fes::InvalidHeaderField,
        10,
        &b[..24],
    );
}

#[test]
fn send_r2t_refuses_bad_tags() {
    let mut t = TargetConn::new(cfg());
    let mut out = Vec::new();
    assert!(!t.send_r2t(&mut out, 1, 0, 0, 10), "before ICReq");
    let mut t = established_target(cfg(), NONE, 0);
    assert!(!t.send_r2t(&mut out, 1, 8, 0, 10), "out of range");
    assert!(!t.send_r2t(&mut out, 1, 0, 0, 0), "empty window");
    assert!(!t.send_r2t(&mut out, 1, 0, u32::MAX, 2), "overflow");
    assert!(out.is_empty());
    assert!(t.send_r2t(&mut out, 1, 0, 0, 10));
    assert!(!t.send_r2t(&mut out, 1, 0, 10, 10), "in use");
    t.cancel_r2t(0);
    assert!(t.send_r2t(&mut out, 1, 0, 10, 10));
    assert_eq!(out.len(), 48);
}

#[test]
fn h2c_header_error_detected_before_data() {
    // Bad TTAG on a PDU announcing 4 KiB: reported from the 24 header bytes.
    let b = h2c(NONE, 7, 5, 0, &[0; 4096], false);
    assert_err(
        &target_err(&mut with_r2t(NONE), &b[..24]),
        Fes::InvalidHeaderField,
        10,
        &b[..24],
    );
}

// ---------------------------------------------------------------------------------------------
// Data digest errors are not fatal

#[test]
fn capsule_data_digest_error_is_an_event() {
    let icd = [4u8; 128];
    let mut b = capsule(BOTH, 0, &icd);
    let good = b.clone();
    b[100] ^= 0xFF;
    b.extend_from_slice(&good);
    let mut t = established_target(cfg(), BOTH, 0);
    let mut out = Vec::new();
    let (ev, n) = t.decode_one(&b, &mut out).unwrap().unwrap();
    let TargetEvent::CommandDataDigestError { sqe } = ev else {
        panic!("{ev:?}")
    };
    assert_eq!(&sqe.0[..], &good[8..72]);
    let (ev, m) = t.decode_one(&b[n..], &mut out).unwrap().unwrap();
    assert!(matches!(ev, TargetEvent::Command { icd: d, .. } if d == icd));
    assert_eq!(n + m, b.len());
}

#[test]
fn h2c_data_digest_error_advances_the_window() {
    let mut t = with_r2t(BOTH);
    let mut first = h2c(BOTH, 7, 2, 0, &[1; 4096], false);
    let n = first.len();
    first[n - 1] ^= 1; // the data digest
    let (ev, _) = t.decode_one(&first, &mut Vec::new()).unwrap().unwrap();
    assert_eq!(
        ev,
        TargetEvent::H2cDataDigestError {
            cccid: 7,
            ttag: 2,
            datao: 0,
            datal: 4096,
            last: false
        }
    );
    let second = h2c(BOTH, 7, 2, 4096, &[2; 4096], true);
    let (ev, _) = t.decode_one(&second, &mut Vec::new()).unwrap().unwrap();
    assert!(matches!(
        ev,
        TargetEvent::H2cData {
            datao: 4096,
            last: true,
            ..
        }
    ));
    // The tag is free again.
    assert!(t.send_r2t(&mut Vec::new(), 9, 2, 0, 1));
}

// ---------------------------------------------------------------------------------------------
// After an error; TermReq both ways

#[test]
fn errors_are_sticky_and_term_req_echoes_the_header() {
    let mut b = capsule(BOTH, 0, &[]);
    b[2] = 73;
    fix_hdgst(&mut b, 72);
    let mut t = established_target(cfg(), BOTH, 0);
    let e = target_err(&mut t, &b);
    assert_err(&e, Fes::InvalidHeaderField, 2, &b[..76]);
    // Any later input keeps failing with the same error.
    let e2 = target_err(&mut t, &capsule(BOTH, 0, &[]));
    assert_eq!(e2, e);

    let mut out = Vec::new();
    t.encode_term_req(&mut out, &e);
    assert_eq!(out.len(), 24 + 76);
    assert_eq!(&out[..8], &[0x03, 0, 24, 0, 100, 0, 0, 0]);
    assert_eq!(&out[8..10], &1u16.to_le_bytes());
    assert_eq!(&out[10..14], &2u32.to_le_bytes());
    assert!(out[14..24].iter().all(|&x| x == 0));
    assert_eq!(&out[24..], &b[..76]);
    // ... and it parses as a C2HTermReq on the host side.
    let mut h = established_host(
        HostConnConfig {
            digests: BOTH,
            ..Default::default()
        },
        0,
        4096,
    );
    let (ev, n) = h.decode_one(&out).unwrap().unwrap();
    assert_eq!(ev, HostEvent::TermReq { fes: 1, fei: 2 });
    assert_eq!(n, out.len());
    assert_eq!(
        h.decode_one(&out).unwrap(),
        None,
        "host ignores everything after a TermReq"
    );
}

#[test]
fn h2c_term_req_received() {
    let mut t = established_target(cfg(), BOTH, 0);
    let mut b = Vec::new();
    let mut h = established_host(HostConnConfig::default(), 0, 4096);
    h.encode_term_req(&mut b, 0x03, 0, &[0xEE; 40]);
    assert_eq!(&b[..8], &[0x02, 0, 24, 0, 64, 0, 0, 0]);
    let (ev, n) = t.decode_one(&b, &mut Vec::new()).unwrap().unwrap();
    assert_eq!(ev, TargetEvent::TermReq { fes: 3, fei: 0 });
    assert_eq!(n, 64);
    // Ignored, and in particular not answered with a C2HTermReq.
    assert_eq!(
        t.decode_one(&capsule(BOTH, 0, &[]), &mut Vec::new())
            .unwrap(),
        None
    );
}

#[test]
fn term_req_plen_out_of_range() {
    let mut b = Vec::new();
    pdu::encode_term_req(&mut b, pdu_type::H2C_TERM_REQ, 1, 0, &[0; 128]);
    b[4..8].copy_from_slice(&153u32.to_le_bytes());
    b.push(0);
    let mut t = established_target(cfg(), NONE, 0);
    assert_err(
        &target_err(&mut t, &b),
        Fes::InvalidHeaderField,
        4,
        &b[..24],
    );
    // A TermReq is accepted even before ICReq.
    let mut b = Vec::new();
    pdu::encode_term_req(&mut b, pdu_type::H2C_TERM_REQ, 2, 0, &[]);
    let (ev, _) = TargetConn::new(cfg())
        .decode_one(&b, &mut Vec::new())
        .unwrap()
        .unwrap();
    assert_eq!(ev, TargetEvent::TermReq { fes: 2, fei: 0 });
}

// ---------------------------------------------------------------------------------------------
// Host side

fn icresp(pfv: u16, cpda: u8, digests: Digests, maxh2cdata: u32) -> Vec<u8> {
    let mut b = Vec::new();
    pdu::encode_ic_resp(
        &mut b,
        &IcResp {
            pfv,
            cpda,
            digests,
            maxh2cdata,
        },
    );
    b
}

fn host_awaiting(digests: Digests) -> nvmf_tcp::HostConn {
    let mut h = nvmf_tcp::HostConn::new(HostConnConfig {
        digests,
        ..Default::default()
    });
    h.encode_icreq(&mut Vec::new());
    h
}

#[test]
fn icresp_checks() {
    let b = icresp(1, 0, NONE, 4096);
    assert_err(
        &host_err(&mut host_awaiting(NONE), &b),
        Fes::UnsupportedParameter,
        8,
        &b,
    );
    let b = icresp(0, 32, NONE, 4096);
    assert_err(
        &host_err(&mut host_awaiting(NONE), &b),
        Fes::UnsupportedParameter,
        10,
        &b,
    );
    for m in [0, 4095, 4098] {
        let b = icresp(0, 0, NONE, m);
        assert_err(
            &host_err(&mut host_awaiting(NONE), &b),
            Fes::InvalidHeaderField,
            12,
            &b,
        );
    }
    let b = icresp(
        0,
        0,
        Digests {
            hdgst: true,
            ddgst: false,
        },
        4096,
    );
    assert_err(
        &host_err(&mut host_awaiting(NONE), &b),
        Fes::InvalidHeaderField,
        11,
        &b,
    );
    // A controller may decline a digest the host asked for.
    let b = icresp(
        0,
        0,
        Digests {
            hdgst: true,
            ddgst: false,
        },
        4096,
    );
    let (ev, _) = host_awaiting(BOTH).decode_one(&b).unwrap().unwrap();
    assert!(matches!(
        ev,
        HostEvent::Established {
            digests: Digests {
                hdgst: true,
                ddgst: false
            },
            ..
        }
    ));
}

#[test]
fn host_sequence_errors() {
    let b = icresp(0, 0, NONE, 4096);
    let mut h = nvmf_tcp::HostConn::new(HostConnConfig::default());
    assert_err(&host_err(&mut h, &b), Fes::PduSequenceError, 0, &b);

    let mut r = Vec::new();
    pdu::encode_capsule_resp(&mut r, NONE, &Cqe::default());
    assert_err(
        &host_err(&mut host_awaiting(NONE), &r),
        Fes::PduSequenceError,
        0,
        &r,
    );

    let mut h = established_host(HostConnConfig::default(), 0, 4096);
    assert_err(&host_err(&mut h, &b), Fes::PduSequenceError, 0, &b);
}

#[test]
fn host_c2h_checks() {
    let mut b = Vec::new();
    let d = DataHdr {
        cccid: 1,
        ttag: 0,
        datao: 0,
        datal: 0,
        last: false,
        success: false,
    };
    pdu::encode_c2h_data(&mut b, NONE, 0, &d, &[1; 8]);
    b[1] |= flags::SUCCESS;
    let mut h = established_host(HostConnConfig::default(), 0, 4096);
    assert_err(&host_err(&mut h, &b), Fes::InvalidHeaderField, 1, &b[..24]);

    let mut b = Vec::new();
    pdu::encode_c2h_data(&mut b, NONE, 0, &d, &[1; 2048]);
    let mut h = established_host(
        HostConnConfig {
            max_c2h_data: 1024,
            ..Default::default()
        },
        0,
        4096,
    );
    assert_err(
        &host_err(&mut h, &b[..24]),
        Fes::DataTransferLimitExceeded,
        0,
        &b[..24],
    );

    // DATAO + DATAL overflows.
    let mut b = Vec::new();
    let d = DataHdr {
        datao: u32::MAX - 2,
        ..d
    };
    pdu::encode_c2h_data(&mut b, NONE, 0, &d, &[1; 8]);
    let mut h = established_host(HostConnConfig::default(), 0, 4096);
    assert_err(
        &host_err(&mut h, &b),
        Fes::DataTransferOutOfRange,
        0,
        &b[..24],
    );

    // hpda 3: the controller must pad C2HData to 16 bytes.
    let mut b = Vec::new();
    let d = DataHdr {
        cccid: 1,
        ttag: 0,
        datao: 0,
        datal: 0,
        last: true,
        success: false,
    };
    pdu::encode_c2h_data(&mut b, NONE, 0, &d, &[1; 8]);
    let mut h = established_host(
        HostConnConfig {
            hpda: 3,
            ..Default::default()
        },
        0,
        4096,
    );
    assert_err(&host_err(&mut h, &b), Fes::InvalidHeaderField, 3, &b[..24]);
}

#[test]
fn host_c2h_data_digest_error_is_an_event() {
    let mut b = Vec::new();
    let d = DataHdr {
        cccid: 5,
        ttag: 0,
        datao: 64,
        datal: 0,
        last: true,
        success: true,
    };
    pdu::encode_c2h_data(&mut b, BOTH, 0, &d, &[1; 32]);
    b[30] ^= 0x80;
    let mut h = established_host(
        HostConnConfig {
            digests: BOTH,
            ..Default::default()
        },
        0,
        4096,
    );
    let (ev, n) = h.decode_one(&b).unwrap().unwrap();
    assert_eq!(n, b.len());
    assert_eq!(
        ev,
        HostEvent::C2hDataDigestError {
            cccid: 5,
            datao: 64,
            datal: 32,
            last: true,
            success: true
        }
    );
}

#[test]
fn host_r2t_and_resp_framing() {
    let mut b = Vec::new();
    pdu::encode_r2t(
        &mut b,
        NONE,
        &R2t {
            cccid: 1,
            ttag: 1,
            r2to: 0,
            r2tl: 1,
        },
    );
    b[16] = 0; // R2TL 0
    let mut h = established_host(HostConnConfig::default(), 0, 4096);
    assert_err(&host_err(&mut h, &b), Fes::InvalidHeaderField, 16, &b);

    let mut b = Vec::new();
    pdu::encode_r2t(
        &mut b,
        NONE,
        &R2t {
            cccid: 1,
            ttag: 1,
            r2to: 0,
            r2tl: 1,
        },
    );
    b[4] = 28;
    b.extend_from_slice(&[0; 4]);
    let mut h = established_host(HostConnConfig::default(), 0, 4096);
    assert_err(&host_err(&mut h, &b), Fes::InvalidHeaderField, 4, &b[..24]);

    let mut b = Vec::new();
    pdu::encode_capsule_resp(&mut b, BOTH, &Cqe::default());
    b[3] = 28;
    fix_hdgst(&mut b, 24);
    let mut h = established_host(
        HostConnConfig {
            digests: BOTH,
            ..Default::default()
        },
        0,
        4096,
    );
    assert_err(&host_err(&mut h, &b), Fes::InvalidHeaderField, 3, &b[..28]);

    let mut b = Vec::new();
    pdu::encode_capsule_resp(&mut b, NONE, &Cqe::default());
    b[1] |= flags::DDGSTF;
    let mut h = established_host(HostConnConfig::default(), 0, 4096);
    assert_err(&host_err(&mut h, &b), Fes::InvalidHeaderField, 1, &b[..24]);
}

#[test]
fn every_prefix_of_a_valid_pdu_needs_more() {
    let b = capsule(BOTH, 0, &[6; 300]);
    let mut t = established_target(cfg(), BOTH, 0);
    let mut out = Vec::new();
    for n in 0..b.len() {
        assert_eq!(t.decode_one(&b[..n], &mut out).unwrap(), None, "prefix {n}");
    }
    assert!(t.decode_one(&b, &mut out).unwrap().is_some());
    assert!(out.is_empty());
}
