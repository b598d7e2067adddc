//! The witness's lease table on disk (ADR 0028): `<state_dir>/witness-leases`, written whole
//! and atomically (`snapshot_store::write_atomic`) before a grant that changes a volume's
//! holder, epoch or in-sync report is answered. A witness box that restarts reads it back, so
//! it keeps refusing a secondary that missed degraded writes. Without `state_dir` the table
//! lives in memory only (a warning says so at start).

use std::path::Path;
use std::time::{Duration, Instant};

use ebof_api::ApiError;
use ebof_config::Config;
use nvmf_target::witness::LeaseTable;

/// The file's name in `state_dir`.
pub(crate) const FILE: &str = "witness-leases";

/// The lease table for a witness granting leases of at most `max`: read back from
/// `state_dir` (or new when there is none yet) and saved there from now on. A file that
/// cannot be read or trusted is an error: a witness that forgot its epochs could promote a
/// stale copy.
pub(crate) fn open(cfg: &Config, max: Duration) -> Result<LeaseTable, ApiError> {
    let now = Instant::now();
    let Some(dir) = cfg.target.state_dir.clone() else {
        tracing::warn!(
            "[witness] without [target] state_dir: the lease table is not saved, and a \
             restarted witness forgets which copy of each volume is current"
        );
        return Ok(LeaseTable::new(now, max));
    };
    let table = load(&dir, now, max)?;
    Ok(table.with_store(Box::new(move |bytes: &[u8]| {
        crate::snapshot_store::write_atomic(&dir, FILE, bytes)
    })))
}

fn load(dir: &Path, now: Instant, max: Duration) -> Result<LeaseTable, ApiError> {
    let path = dir.join(FILE);
    let fail = |what: String| {
        ApiError::new(
            ebof_api::codes::INTERNAL,
            "witness",
            format!(
                "{what}: the witness does not start without the epochs it granted (move the \
                 file away only if no mirrored volume relies on this witness)"
            ),
        )
    };
    std::fs::create_dir_all(dir).map_err(|e| {
        fail(format!(
            "cannot create the state directory {}: {e}",
            dir.display()
        ))
    })?;
    match std::fs::read(&path) {
        Ok(bytes) => LeaseTable::restore(now, max, &bytes)
            .map_err(|e| fail(format!("{}: {e}", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(LeaseTable::new(now, max)),
        Err(e) => Err(fail(format!("cannot read {}: {e}", path.display()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvmf_target::witness::{LeaseOp, LeaseRequest};

    fn req(holder: u8, epoch: u64, in_sync: bool) -> LeaseRequest {
        LeaseRequest {
            volume: [5; 16],
            holder: [holder; 16],
            epoch,
            lease: Duration::from_secs(1),
            op: LeaseOp::Acquire,
            peer_in_sync: in_sync,
        }
    }

    #[test]
    fn a_witness_restarts_from_its_file_and_refuses_a_corrupt_one() {
        let dir = std::env::temp_dir()
            .join(format!("ebof-witness-store-{}", std::process::id()))
            .join("not-yet-made");
        let mut cfg =
            Config::from_toml_str("[[listeners]]\naddress = \"127.0.0.1\"\n").expect("config");
        cfg.target.state_dir = Some(dir.clone());
        let max = Duration::from_millis(10);
        let mut t = open(&cfg, max).expect("new");
        std::thread::sleep(max);
        assert!(t.request(&req(1, 7, false), Instant::now()).granted);
        assert!(
            dir.join(FILE).exists(),
            "a grant that changed the table was not saved"
        );
        drop(t);
        let mut back = open(&cfg, max).expect("restart");
        std::thread::sleep(max);
        let now = Instant::now();
        assert!(
            !back.request(&req(2, 8, true), now).granted,
            "a stale copy was promoted"
        );
        assert!(back.request(&req(1, 7, false), now).granted);
        std::fs::write(dir.join(FILE), b"EBOFWIT1\x01\x00\x00\x00short").unwrap();
        let e = open(&cfg, max).expect_err("a corrupt table was taken");
        assert!(e.to_string().contains("witness-leases"), "{e}");
        std::fs::remove_dir_all(dir.parent().unwrap()).unwrap();
    }
}
