//! In-band authentication through the queue state machine, with a scripted [`AuthSession`]
//! standing in for DH-HMAC-CHAP: AUTHREQ.ATR in the Connect completion, the gate (every
//! command but AUTH_Send / AUTH_Receive refused with Authentication Required, before any data
//! moves), the field checks of AUTH_Send / AUTH_Receive, success, failure, re-authentication,
//! and hosts without a key.

mod common;

use common::Host;
use ebof_backend::BackendSpec;
use nvme_spec::opcode::{admin, fctype, io};
use nvme_spec::{CommandId, NamespaceId, Sqe, Status};
use nvmf_target::auth::{
    AuthCmdError, AuthPolicy, AuthProgress, AuthSession, CONNECT_AUTHREQ_ATR, SECP_DHCHAP,
};
use nvmf_target::{Disposition, Namespace, Subsystem, Target};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

const NQN: &str = "nqn.2026-11.io.ebof:auth";
const KEYED: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000a1";
const OPEN: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000a2";

/// The scripted exchange: the host sends "hello", receives "challenge", answers "right"
/// (success) or anything else (failure). "hello" again restarts it.
struct Script {
    step: u8,
    progress: AuthProgress,
}

impl AuthSession for Script {
    fn send(&mut self, payload: &[u8]) -> Result<(), AuthCmdError> {
        match (self.step, payload) {
            (_, b"hello") => {
                self.step = 1;
                Ok(())
            }
            (2, b"right") => {
                self.progress = AuthProgress::Succeeded;
                self.step = 3;
                Ok(())
            }
            (2, _) => {
                self.progress = AuthProgress::Failed;
                Ok(())
            }
            _ => Err(AuthCmdError(Status::CMD_SEQ_ERROR)),
        }
    }

    fn receive(&mut self, _al: u32) -> Result<Vec<u8>, AuthCmdError> {
        if self.step == 1 {
            self.step = 2;
            Ok(b"challenge".to_vec())
        } else {
            Err(AuthCmdError(Status::CMD_SEQ_ERROR))
        }
    }

    fn progress(&self) -> AuthProgress {
        self.progress
    }

    fn failure(&self) -> Option<String> {
        Some("scripted failure".into())
    }
}

/// Only `KEYED` must authenticate.
struct Policy;

impl AuthPolicy for Policy {
    fn session(&self, hostnqn: &str, _subnqn: &str, _qid: u16) -> Option<Box<dyn AuthSession>> {
        (hostnqn == KEYED).then(|| {
            Box::new(Script {
                step: 0,
                progress: AuthProgress::InProgress,
            }) as Box<dyn AuthSession>
        })
    }
}

fn local() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 4420))
}

fn target() -> Arc<Target> {
    let b = ebof_backend::open(&BackendSpec::Ram { size: 1 << 20 }).unwrap();
    let sub = Subsystem {
        nqn: NQN.into(),
        serial: "AUTH1".into(),
        model: "ebof".into(),
        allow_any_host: true,
        hosts: vec![],
        namespaces: vec![Arc::new(Namespace::new(1, b, 512, [1; 16]))],
        ns_hosts: Default::default(),
    };
    let t = Arc::new(Target::new(
        vec![sub],
        vec![],
        Default::default(),
        Instant::now(),
    ));
    t.set_auth_policy(Some(Arc::new(Policy)));
    t
}

fn auth_cmd(f: u8, len: u32, secp: u8, spsp: [u8; 2]) -> Sqe {
    let mut sqe = Sqe::new(admin::FABRICS, CommandId(7));
    sqe.set_fctype(f);
    sqe.set_cdw(10, u32::from_le_bytes([0, spsp[0], spsp[1], secp]));
    sqe.set_cdw(11, len);
    sqe
}

fn send(h: &mut Host, payload: &[u8]) -> Status {
    let mut sqe = auth_cmd(fctype::AUTH_SEND, payload.len() as u32, SECP_DHCHAP, [1, 1]);
    sqe.set_sgl_icd(payload.len() as u32);
    h.cmd(sqe, payload).0.status
}

fn recv(h: &mut Host, al: u32) -> (Status, Vec<u8>) {
    let mut sqe = auth_cmd(fctype::AUTH_RECV, al, SECP_DHCHAP, [1, 1]);
    sqe.set_sgl_transport(al);
    let (c, d) = h.cmd(sqe, &[]);
    (c.status, d)
}

fn identify(h: &mut Host) -> Status {
    let mut sqe = Sqe::new(admin::IDENTIFY, CommandId(4));
    sqe.set_cdw(10, 1);
    sqe.set_sgl_transport(4096);
    h.cmd(sqe, &[]).0.status
}

fn authenticate(h: &mut Host, answer: &[u8]) -> Status {
    assert_eq!(send(h, b"hello"), Status::SUCCESS);
    let (st, d) = recv(h, 64);
    assert_eq!(st, Status::SUCCESS);
    assert_eq!(d, b"challenge");
    send(h, answer)
}

#[test]
fn a_keyed_host_must_authenticate_every_queue_before_anything_else() {
    let t = target();
    let mut a = Host::new(&t, local(), NQN, KEYED);
    let c = a.connect(0, 0xFFFF);
    assert!(c.status.is_success(), "{c:?}");
    assert_ne!(c.dw0 & CONNECT_AUTHREQ_ATR, 0, "ATR in {:#x}", c.dw0);
    let cntlid = (c.dw0 & 0xFFFF) as u16;
    // Gated: Property Set (enable) and Identify refused with Authentication Required.
    let mut sqe = Sqe::new(admin::FABRICS, CommandId(2));
    sqe.set_fctype(fctype::PROPERTY_GET);
    assert_eq!(a.cmd(sqe, &[]).0.status, Status::AUTH_REQUIRED);
    assert_eq!(identify(&mut a), Status::AUTH_REQUIRED);
    assert_eq!(authenticate(&mut a, b"right"), Status::SUCCESS);
    a.enable();
    assert_eq!(identify(&mut a), Status::SUCCESS);

    // The I/O queue is gated too, and a write is refused before its data is asked for.
    let mut q = Host::new(&t, local(), NQN, KEYED);
    let c = q.connect(1, cntlid);
    assert!(c.status.is_success(), "{c:?}");
    assert_ne!(c.dw0 & CONNECT_AUTHREQ_ATR, 0);
    assert!(q.q.auth_pending());
    let mut w = Sqe::new(io::WRITE, CommandId(9));
    w.set_nsid(NamespaceId(1));
    w.set_cdw(12, 7); // 8 blocks: above the in-capsule data, would need an R2T
    w.set_sgl_transport(4096);
    match q.q.handle_command(&w, &[], q.now) {
        Disposition::Done => {}
        d => panic!("a gated write must complete at once, got {d:?}"),
    }
    let v = q.drain();
    assert_eq!(v[0].0.status, Status::AUTH_REQUIRED);
    assert_eq!(authenticate(&mut q, b"right"), Status::SUCCESS);
    assert!(!q.q.auth_pending());
    let mut r = Sqe::new(io::READ, CommandId(10));
    r.set_nsid(NamespaceId(1));
    r.set_sgl_transport(512);
    assert_eq!(q.cmd(r, &[]).0.status, Status::SUCCESS);
}

#[test]
fn failure_keeps_the_gate_shut_and_is_counted() {
    let t = target();
    let mut a = Host::new(&t, local(), NQN, KEYED);
    assert!(a.connect(0, 0xFFFF).status.is_success());
    assert_eq!(authenticate(&mut a, b"wrong"), Status::SUCCESS);
    assert!(a.q.auth_pending());
    assert_eq!(identify(&mut a), Status::AUTH_REQUIRED);
    assert_eq!(t.events.auth_failures.load(Ordering::Relaxed), 1);
    // Out of order: the session refuses the command itself.
    assert_eq!(recv(&mut a, 64).0, Status::CMD_SEQ_ERROR);
    // A new exchange can still succeed.
    assert_eq!(authenticate(&mut a, b"right"), Status::SUCCESS);
    assert!(!a.q.auth_pending());
}

#[test]
fn reauthentication_keeps_the_queue_usable_until_it_fails() {
    let t = target();
    let mut a = Host::new(&t, local(), NQN, KEYED);
    assert!(a.connect(0, 0xFFFF).status.is_success());
    assert_eq!(authenticate(&mut a, b"right"), Status::SUCCESS);
    a.enable();
    assert_eq!(send(&mut a, b"hello"), Status::SUCCESS);
    assert_eq!(
        identify(&mut a),
        Status::SUCCESS,
        "usable while re-authenticating"
    );
    let (st, _) = recv(&mut a, 64);
    assert_eq!(st, Status::SUCCESS);
    assert_eq!(send(&mut a, b"wrong"), Status::SUCCESS);
    assert_eq!(identify(&mut a), Status::AUTH_REQUIRED);
}

#[test]
fn bad_auth_fields_are_invalid_field_and_an_unkeyed_host_is_not_asked() {
    let t = target();
    let mut a = Host::new(&t, local(), NQN, KEYED);
    assert!(a.connect(0, 0xFFFF).status.is_success());
    for (secp, spsp, len) in [
        (0xEA, [1, 1], 8),
        (SECP_DHCHAP, [0, 1], 8),
        (SECP_DHCHAP, [1, 2], 8),
        (SECP_DHCHAP, [1, 1], 0),
        (SECP_DHCHAP, [1, 1], 1 << 20),
    ] {
        let mut sqe = auth_cmd(fctype::AUTH_SEND, len, secp, spsp);
        sqe.set_sgl_icd(len.min(8));
        let st = a.cmd(sqe, &[0; 8][..len.min(8) as usize]).0.status;
        assert_eq!(
            st,
            Status::INVALID_FIELD,
            "secp {secp:#x} spsp {spsp:?} tl {len}"
        );
    }
    let mut sqe = auth_cmd(fctype::AUTH_RECV, 16, 0x00, [1, 1]);
    sqe.set_sgl_transport(16);
    assert_eq!(a.cmd(sqe, &[]).0.status, Status::INVALID_FIELD);
    assert!(a.q.auth_pending(), "refused commands change nothing");

    let mut o = Host::new(&t, local(), NQN, OPEN);
    let c = o.connect(0, 0xFFFF);
    assert!(c.status.is_success());
    assert_eq!(c.dw0 & CONNECT_AUTHREQ_ATR, 0);
    o.enable();
    assert_eq!(identify(&mut o), Status::SUCCESS);
    // Nothing to authenticate: AUTH_Send is refused.
    assert_eq!(send(&mut o, b"hello"), Status::INVALID_FIELD);
}

#[test]
fn a_tls_connection_reaches_only_what_its_psk_was_made_for() {
    let t = target();
    // The PSK of (OPEN, NQN): Connect as OPEN to NQN works.
    let mut ok = Host::new(&t, local(), NQN, OPEN);
    ok.q.set_tls_peer(OPEN.into(), NQN.into());
    assert!(ok.connect(0, 0xFFFF).status.is_success());
    // Another host NQN, or another subsystem, over that PSK: Invalid Host.
    for (host, sub) in [(KEYED, NQN), (OPEN, "nqn.2026-11.io.ebof:other")] {
        let mut h = Host::new(&t, local(), sub, host);
        h.q.set_tls_peer(OPEN.into(), NQN.into());
        let c = h.connect(0, 0xFFFF);
        assert_eq!(c.status, Status::CONNECT_INVALID_HOST, "{host} {sub}");
        assert_eq!(
            c.dw0 >> 16 & 0xFF00,
            0,
            "no internal marker on the wire: {:#x}",
            c.dw0
        );
    }
    // Discovery over the same PSK is fine.
    let mut d = Host::new(&t, local(), nvme_spec::DISCOVERY_NQN, OPEN);
    d.q.set_tls_peer(OPEN.into(), NQN.into());
    assert!(d.connect(0, 0xFFFF).status.is_success());
}
