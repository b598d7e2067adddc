//! Reading a Discovery log page consistently: header, whole page, header again, and over
//! again (bounded) when the Generation Counter moved meanwhile. A leaf: it is given the page
//! fetch, so it needs no controller.

use nvme_spec::discovery::{
    DISCOVERY_ENTRY_LEN, DISCOVERY_HEADER_LEN, DiscoveryLogEntry, decode_discovery_header,
    decode_discovery_log,
};

use crate::error::{HostError, Result};

/// How many times the log is re-read when its generation counter changes under us.
const GENCTR_RETRIES: usize = 10;
/// Refuse logs claiming more records than this (1 MiB of entries).
pub const MAX_RECORDS: u64 = 1024;

/// A discovery log page as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiscoveryLog {
    /// Generation Counter (GENCTR).
    pub genctr: u64,
    /// Number of Records (NUMREC) in the header.
    pub numrec: u64,
    /// Record Format (RECFMT).
    pub recfmt: u16,
    /// The entries read (as many as the page held, at most NUMREC).
    pub entries: Vec<DiscoveryLogEntry>,
}

/// Read the whole log with `get(len, offset)`, which fetches `len` bytes of the Discovery log
/// page at `offset` (a Get Log Page on the discovery controller's admin queue).
pub(crate) async fn read<F, Fut>(mut get: F) -> Result<DiscoveryLog>
where
    F: FnMut(usize, u64) -> Fut,
    Fut: Future<Output = Result<Vec<u8>>>,
{
    for _ in 0..GENCTR_RETRIES {
        let first = get(DISCOVERY_HEADER_LEN, 0).await?;
        let hdr = decode_discovery_header(&first)?;
        if hdr.numrec > MAX_RECORDS {
            return Err(HostError::InvalidArgument(format!(
                "discovery log claims {} records (limit {MAX_RECORDS})",
                hdr.numrec
            )));
        }
        let mut page = first;
        if hdr.numrec > 0 {
            let rest = hdr.numrec as usize * DISCOVERY_ENTRY_LEN;
            let more = get(rest, DISCOVERY_HEADER_LEN as u64).await?;
            page.extend_from_slice(&more);
            let again = get(DISCOVERY_HEADER_LEN, 0).await?;
            if decode_discovery_header(&again)?.genctr != hdr.genctr {
                tracing::debug!("discovery log changed while reading; reading again");
                continue;
            }
        }
        let (hdr, entries) = decode_discovery_log(&page)?;
        return Ok(DiscoveryLog {
            genctr: hdr.genctr,
            numrec: hdr.numrec,
            recfmt: hdr.recfmt,
            entries,
        });
    }
    Err(HostError::Controller(format!(
        "discovery log kept changing over {GENCTR_RETRIES} reads"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvme_spec::discovery::encode_discovery_log;

    fn entry(subnqn: &str) -> DiscoveryLogEntry {
        DiscoveryLogEntry {
            subnqn: subnqn.into(),
            trsvcid: "4420".into(),
            traddr: "127.0.0.1".into(),
            ..Default::default()
        }
    }

    /// Serves `pages[i]` to the `i`-th pass (a pass ends with its header re-read), the last
    /// page to every later pass; counts the fetches.
    fn run(pages: &[Vec<u8>]) -> (Result<DiscoveryLog>, usize) {
        let mut calls = 0usize;
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let r = rt.block_on(read(|len, offset| {
            let page = &pages[(calls / 3).min(pages.len() - 1)];
            calls += 1;
            let off = offset as usize;
            std::future::ready(Ok(page[off..(off + len).min(page.len())].to_vec()))
        }));
        (r, calls)
    }

    #[test]
    fn a_log_that_changed_while_read_is_read_again() {
        let first = encode_discovery_log(7, &[entry("nqn.2026-11.io.ebof:a")]);
        let mut moved = first.clone();
        moved[0..8].copy_from_slice(&8u64.to_le_bytes()); // GENCTR moved under the reader
        let second = encode_discovery_log(8, &[entry("nqn.2026-11.io.ebof:b")]);
        // Pass 1: header (gen 7), page, header again (gen 8 → start over). Pass 2: stable.
        let pages = [first.clone(), first, moved, second];
        let mut calls = 0usize;
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let log = rt
            .block_on(read(|len, offset| {
                let page = &pages[calls.min(pages.len() - 1)];
                calls += 1;
                let off = offset as usize;
                std::future::ready(Ok(page[off..(off + len).min(page.len())].to_vec()))
            }))
            .unwrap();
        assert_eq!(log.genctr, 8);
        assert_eq!(log.entries.len(), 1);
        assert_eq!(log.entries[0].subnqn, "nqn.2026-11.io.ebof:b");
        assert_eq!(calls, 6);
    }

    #[test]
    fn a_log_that_keeps_changing_is_given_up_on() {
        let mut calls = 0u64;
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let err = rt
            .block_on(read(|len, offset| {
                calls += 1;
                let page = encode_discovery_log(calls, &[entry("nqn.2026-11.io.ebof:a")]);
                let off = offset as usize;
                std::future::ready(Ok(page[off..(off + len).min(page.len())].to_vec()))
            }))
            .unwrap_err();
        assert!(err.to_string().contains("kept changing"), "{err}");
        assert_eq!(calls, 3 * GENCTR_RETRIES as u64);
    }

    #[test]
    fn an_empty_log_is_read_once_and_a_huge_one_refused() {
        let (log, calls) = run(&[encode_discovery_log(3, &[])]);
        let log = log.unwrap();
        assert_eq!((log.genctr, log.numrec, calls), (3, 0, 1));
        let mut huge = encode_discovery_log(1, &[]);
        huge[8..16].copy_from_slice(&(MAX_RECORDS + 1).to_le_bytes());
        let (r, _) = run(&[huge]);
        assert!(matches!(r, Err(HostError::InvalidArgument(_))));
    }
}
