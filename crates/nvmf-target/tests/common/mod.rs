//! Helpers shared by the sans-IO integration tests of `nvmf-target` (a test drives a `Queue`
//! the way a transport would).

use nvme_spec::Cqe;
use nvmf_target::{C2hData, Queue};

/// Drain every completion of `q` as a transport would: each CQE with its C2H data (a streamed
/// read is read from its backend here), then report the output as sent (`Queue::output_sent`).
pub fn drain(q: &mut Queue) -> Vec<(Cqe, Vec<u8>)> {
    let mut out = Vec::new();
    q.drain_completions(|cqe, data, _| {
        let bytes = match data {
            C2hData::Bytes(b) => b.to_vec(),
            C2hData::Read {
                backend,
                offset,
                len,
            } => {
                let mut v = vec![0; len];
                backend.read(offset, &mut v)?;
                v
            }
        };
        out.push((*cqe, bytes));
        Ok(())
    });
    q.output_sent();
    out
}
