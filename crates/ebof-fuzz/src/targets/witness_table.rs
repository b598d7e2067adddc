//! Bytes from disk into the witness's saved lease table (`LeaseTable::restore`, ADR 0028): the
//! file a witness box restarts from.
//!
//! Input: the file's bytes.
//!
//! Checked, beyond "never panics": a table accepted encodes back to exactly the bytes it came
//! from (restore takes only the canonical form: volumes ascending, each once), and it grants
//! nothing before its grace period ends.

use std::time::{Duration, Instant};

use crate::Features;
use nvmf_target::witness::{LeaseOp, LeaseRequest, LeaseTable};

const F_OK: u8 = 1;
const F_ERR: u8 = 2;
const MAX: Duration = Duration::from_secs(10);

/// One input: restore it and check what the decoder says.
pub fn run(data: &[u8], feat: &mut Features) {
    let now = Instant::now();
    match LeaseTable::restore(now, MAX, data) {
        Ok(mut t) => {
            feat.add(F_OK, t.len() as u64);
            assert_eq!(
                t.encode(),
                data,
                "a restored table must encode back to its bytes"
            );
            let req = LeaseRequest {
                volume: [0; 16],
                holder: [1; 16],
                epoch: u64::MAX,
                lease: MAX,
                op: LeaseOp::Acquire,
                peer_in_sync: true,
            };
            assert!(
                !t.request(&req, now).granted,
                "granted during the grace period"
            );
        }
        Err(e) => feat.add(F_ERR, e.to_string().len() as u64),
    }
}

/// An empty table, one with two volumes, and near misses.
pub fn seeds() -> Vec<(String, Vec<u8>)> {
    let now = Instant::now();
    let empty = LeaseTable::new(now, MAX).encode();
    let mut t = LeaseTable::new(now - MAX, MAX);
    for (v, holder, in_sync) in [(3u8, 1u8, true), (9, 2, false)] {
        let req = LeaseRequest {
            volume: [v; 16],
            holder: [holder; 16],
            epoch: u64::from(v),
            lease: MAX,
            op: LeaseOp::Acquire,
            peer_in_sync: in_sync,
        };
        t.request(&req, now);
    }
    let two = t.encode();
    let mut dup = two.clone();
    dup[12..28].copy_from_slice(&two[12 + 41..12 + 41 + 16]);
    vec![
        ("empty".into(), empty),
        ("two".into(), two.clone()),
        ("short".into(), two[..two.len() - 3].to_vec()),
        ("duplicate".into(), dup),
    ]
}
