//! Hostile and broken clients against the real server on loopback: connections that never
//! finish the handshake are closed at the deadline, connection caps refuse the excess and give
//! places back, and a bad common header is answered at once.

mod common;

use common::client::*;
use nvme_spec::opcode::io;
use nvmf_tcp::pdu::pdu_type;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// Wait (bounded by `within`) until the peer closes `s`; returns how long it took, or None if
/// it stayed open. Bytes the server sends first (a TermReq) are returned too.
fn closed_within(s: &mut TcpStream, within: Duration) -> Option<(Duration, Vec<u8>)> {
    let start = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 256];
    while start.elapsed() < within {
        s.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        match s.read(&mut buf) {
            Ok(0) => return Some((start.elapsed(), got)),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return Some((start.elapsed(), got)), // reset
        }
    }
    None
}

fn ram() -> std::sync::Arc<dyn ebof_backend::Backend> {
    common::ram(16 << 20)
}

#[test]
fn handshake_deadline_closes_silent_and_half_icreq_connections_only() {
    let deadline = Duration::from_millis(600);
    let srv = start_with(Duration::ZERO, ram(), |c| c.handshake_timeout = deadline);
    // A connected session must outlive the deadline.
    let (_admin, mut q) = session(srv.addr, false);
    let opened = Instant::now();
    let mut silent: Vec<TcpStream> = (0..20).map(|_| Client::raw(srv.addr)).collect();
    let mut half: Vec<TcpStream> = (0..20)
        .map(|_| {
            let mut s = Client::raw(srv.addr);
            s.write_all(&icreq()[..64]).unwrap();
            s
        })
        .collect();
    // After ICReq but no Connect: also closed.
    let mut no_connect = Client::raw(srv.addr);
    no_connect.write_all(&icreq()).unwrap();
    let mut resp = [0u8; 128];
    no_connect.read_exact(&mut resp).unwrap();
    assert_eq!(resp[0], pdu_type::IC_RESP);

    // The tick is 500 ms: closed between the deadline and deadline + tick (+ slack).
    let bound = deadline + Duration::from_secs(3);
    for s in silent
        .iter_mut()
        .chain(half.iter_mut())
        .chain(std::iter::once(&mut no_connect))
    {
        let (_, got) = closed_within(s, bound).expect("connection not closed at the deadline");
        assert!(
            got.is_empty(),
            "nothing is sent on a handshake timeout: {got:?}"
        );
        assert!(opened.elapsed() >= deadline, "closed before the deadline");
    }
    // The connected queue still works.
    let data = vec![0xA5u8; 4096];
    assert!(
        q.cmd(rw(io::WRITE, 0, 8), &data, true)
            .0
            .status
            .is_success()
    );
    let (c, back) = q.cmd(rw(io::READ, 0, 8), &[], false);
    assert!(c.status.is_success());
    assert_eq!(back, data);
}

#[test]
fn connection_caps_refuse_the_excess_and_give_places_back() {
    let srv = start_with(Duration::ZERO, ram(), |c| {
        c.caps.per_address = 4;
        c.caps.total = 1000;
    });
    // Four sessions' worth of connections from 127.0.0.1 fill the per-address cap.
    let (a, q) = session(srv.addr, false);
    let (b, r) = session(srv.addr, false);
    // The fifth is closed at once, without a byte.
    let mut fifth = Client::raw(srv.addr);
    let (_, got) = closed_within(&mut fifth, Duration::from_secs(5)).expect("fifth accepted");
    assert!(got.is_empty());
    // Another source address (127.0.0.2 is loopback too) is not affected by 127.0.0.1's cap.
    let other: SocketAddr = format!("127.0.0.2:{}", srv.addr.port()).parse().unwrap();
    let local = socket_from("127.0.0.2", other);
    if let Some(mut s) = local {
        s.write_all(&icreq()).unwrap();
        let mut resp = [0u8; 128];
        s.read_exact(&mut resp).unwrap();
        assert_eq!(resp[0], pdu_type::IC_RESP);
    }
    // Closing one session gives its places back (retired within a tick or so).
    drop((b, r));
    let start = Instant::now();
    loop {
        let mut s = Client::raw(srv.addr);
        s.write_all(&icreq()).unwrap();
        let mut resp = [0u8; 128];
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        if s.read_exact(&mut resp).is_ok() {
            assert_eq!(resp[0], pdu_type::IC_RESP);
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "places were not given back"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    drop((a, q));
}

/// A TCP connection to `to` from the local address `from` (None if it cannot be bound).
fn socket_from(from: &str, to: SocketAddr) -> Option<TcpStream> {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).ok()?;
    let src: SocketAddr = format!("{from}:0").parse().ok()?;
    s.bind(&src.into()).ok()?;
    s.connect(&to.into()).ok()?;
    let s: TcpStream = s.into();
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    Some(s)
}

#[test]
fn a_bad_common_header_is_answered_before_the_rest_arrives() {
    // A long handshake deadline, so that only the header check can close the connection.
    let srv = start_with(Duration::ZERO, ram(), |c| {
        c.handshake_timeout = Duration::from_secs(120)
    });
    // An ICReq whose PLEN (64) is smaller than its HLEN (128): 8 bytes, then silence.
    let mut s = Client::raw(srv.addr);
    let mut ch = icreq()[..8].to_vec();
    ch[4..8].copy_from_slice(&64u32.to_le_bytes());
    s.write_all(&ch).unwrap();
    let (_, got) = closed_within(&mut s, Duration::from_secs(10)).expect("no answer to a bad CH");
    assert_eq!(got[0], pdu_type::C2H_TERM_REQ, "{got:?}");
    let fes = u16::from_le_bytes([got[8], got[9]]);
    let fei = u32::from_le_bytes([got[10], got[11], got[12], got[13]]);
    assert_eq!((fes, fei), (1, 4), "Invalid PDU Header Field at PLEN");
    assert_eq!(&got[24..], &ch[..], "the echoed header is what arrived");
}
