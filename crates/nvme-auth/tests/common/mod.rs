//! Shared test helpers: a deterministic random source and a host ↔ target pair driven message
//! by message, the way nvmf-host and nvmf-target will drive them over AUTH_Send/AUTH_Receive.

#![allow(dead_code)]

use std::sync::Arc;

use nvme_auth::host::RECEIVE_ALLOC_LEN;
use nvme_auth::{
    AuthConfig, AuthFailure, DhchapSecret, HostAuth, HostError, KeyTransform, RandomError,
    RandomSource, TargetAuth,
};

pub const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-1111-2222-3333-444455556666";
pub const SUBNQN: &str = "nqn.2024-01.io.ebof:test";

/// splitmix64: deterministic, seeded, good enough to make tests reproducible.
#[derive(Debug, Clone)]
pub struct TestRng(pub u64);

impl TestRng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

impl RandomSource for TestRng {
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), RandomError> {
        for chunk in buf.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
        Ok(())
    }
}

pub fn secret(seed: u64, nn: u8, len: usize) -> DhchapSecret {
    DhchapSecret::generate(
        KeyTransform::from_nn(nn).expect("nn"),
        len,
        &mut TestRng(seed),
    )
    .expect("secret")
}

pub fn target(cfg: AuthConfig, seed: u64) -> TargetAuth<TestRng> {
    TargetAuth::new(Arc::new(cfg), TestRng(seed))
}

pub fn host(cfg: AuthConfig, seed: u64) -> HostAuth<TestRng> {
    HostAuth::new(Arc::new(cfg), TestRng(seed))
}

/// What happened in one exchange, step by step.
#[derive(Debug, Default)]
pub struct Trace {
    pub target_errors: Vec<AuthFailure>,
    pub host_error: Option<HostError>,
    /// The Failure1 the target returned, if any (raw bytes).
    pub failure1: Option<Vec<u8>>,
}

/// Runs Negotiate → Challenge → Reply → Success1 → [Success2 | Failure2] as the Linux host
/// would, feeding every byte through both state machines.
pub fn exchange(h: &mut HostAuth<TestRng>, t: &mut TargetAuth<TestRng>, t_id: u16) -> Trace {
    let mut trace = Trace::default();
    let neg = h.start(t_id);
    if let Err(e) = t.on_send(&neg) {
        trace.target_errors.push(e);
    }
    let challenge = t.on_receive(RECEIVE_ALLOC_LEN).expect("al is large enough");
    let reply = match h.handle_challenge(&challenge) {
        Ok(r) => r,
        Err(e) => {
            if is_failure1(&challenge) {
                trace.failure1 = Some(challenge);
            }
            if let Some(f2) = &e.failure2
                && let Err(te) = t.on_send(f2)
            {
                trace.target_errors.push(te);
            }
            trace.host_error = Some(e);
            return trace;
        }
    };
    if let Err(e) = t.on_send(&reply) {
        trace.target_errors.push(e);
    }
    let s1 = t.on_receive(RECEIVE_ALLOC_LEN).expect("al is large enough");
    match h.handle_success1(&s1) {
        Ok(Some(s2)) => {
            if let Err(e) = t.on_send(&s2) {
                trace.target_errors.push(e);
            }
        }
        Ok(None) => {}
        Err(e) => {
            if is_failure1(&s1) {
                trace.failure1 = Some(s1);
            }
            if let Some(f2) = &e.failure2
                && let Err(te) = t.on_send(f2)
            {
                trace.target_errors.push(te);
            }
            trace.host_error = Some(e);
        }
    }
    trace
}

pub fn is_failure1(b: &[u8]) -> bool {
    b.len() >= 2 && b[0] == 0 && b[1] == 0xF1
}
