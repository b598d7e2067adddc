//! Discovery: read a discovery controller's log page (NVMe-oF 1.1, 5.3).
//!
//! The log can change while it is read in pieces, so, like libnvme, the header is read first,
//! then the whole page, then the header again; if the Generation Counter moved the read starts
//! over (bounded). That reading is `log`'s, a leaf that [`Controller::discovery_log`] runs
//! over the admin queue; this module adds the one-shot [`discover`] on top of a controller.

use std::net::SocketAddr;

use crate::config::HostConfig;
use crate::controller::Controller;
use crate::error::Result;

pub(crate) mod log;

pub use log::{DiscoveryLog, MAX_RECORDS};

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
