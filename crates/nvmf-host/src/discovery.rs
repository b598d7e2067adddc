//! Discovery: read a discovery controller's log page (NVMe-oF 1.1, 5.3).
//!
//! The log can change while it is read in pieces, so, like libnvme, the header is read first,
//! then the whole page, then the header again; if the Generation Counter moved the read starts
//! over (bounded).

use std::net::SocketAddr;

use nvme_spec::discovery::{
    DISCOVERY_ENTRY_LEN, DISCOVERY_HEADER_LEN, DiscoveryLogEntry, decode_discovery_header,
    decode_discovery_log,
};
use nvme_spec::log::lid;

use crate::config::HostConfig;
use crate::controller::Controller;
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

/// Connect to the well-known discovery subsystem at `addr`, read its log, shut the controller
/// down and disconnect (what `nvme discover` does). `cfg` is used through
/// [`HostConfig::for_discovery`] (no keep-alive, no asynchronous events).
pub async fn discover(addr: SocketAddr, cfg: &HostConfig) -> Result<DiscoveryLog> {
    let ctrl = Controller::connect(addr, nvme_spec::DISCOVERY_NQN, &cfg.for_discovery()).await?;
    let log = ctrl.discovery_log().await;
    if let Err(e) = ctrl.shutdown().await {
        tracing::debug!(error = %e, "discovery controller shutdown failed");
    }
    ctrl.disconnect().await;
    log
}

pub(crate) async fn read_log(ctrl: &Controller) -> Result<DiscoveryLog> {
    for _ in 0..GENCTR_RETRIES {
        let first = ctrl
            .get_log_page(lid::DISCOVERY, 0, DISCOVERY_HEADER_LEN, 0)
            .await?;
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
            let more = ctrl
                .get_log_page(lid::DISCOVERY, 0, rest, DISCOVERY_HEADER_LEN as u64)
                .await?;
            page.extend_from_slice(&more);
            let again = ctrl
                .get_log_page(lid::DISCOVERY, 0, DISCOVERY_HEADER_LEN, 0)
                .await?;
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
