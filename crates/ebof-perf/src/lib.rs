//! # ebof-perf — the load generator and the bench plans of `ebof perf` and `ebof bench`
//!
//! **What it is**: [`perf`] drives I/O at a fixed queue depth (or an open-loop rate) over
//! `nvmf-host` I/O queues, one pinned thread per core, and reports IOPS, bandwidth, latency
//! percentiles, CPU per I/O and errors; with `verify` it writes self-describing blocks, checks
//! every read and can record a durability log ([`perf::vlog`]) that a later read-only pass
//! ([`perf::verify_only`]) checks. [`bench`] runs the seed papers' test plans (as data, in
//! [`bench::plan`]) on perf's engine or on fio, and writes `report.json`, `report.md` and SVG
//! charts.
//!
//! **What it is not**: no command line. The `ebof` binary owns the clap definitions, turns
//! them into the typed options here ([`perf::PerfOptions`], [`perf::verify_only::Options`],
//! [`bench::BenchOptions`]) and prints; nothing here exits the process or writes to stdout.
//! Progress reaches the caller as events ([`perf::Event`], [`bench::Observer`]), reports as
//! values with text and JSON renderings. Error messages name `ebof perf`'s and `ebof bench`'s
//! flags, because that is where the values came from.
//!
//! **Where it sits**: on `nvmf-host` (the initiator) and `ebof-runtime` (core lists and
//! pinning only). ADR 0009 explains the bench; ADR 0005 the verify log.

#![warn(missing_docs)]

pub mod bench;
pub mod perf;

use std::net::SocketAddr;

use anyhow::{Context, Result};
use nvmf_host::{Controller, HostConfig};

/// A subsystem to connect to and how: its address, its NQN and the host's configuration
/// (identity, digests, security, transport). The runs here set the number of I/O queues and
/// turn asynchronous events off in a copy of `host`.
#[derive(Clone, Debug)]
pub struct Endpoint {
    /// Transport address of the target.
    pub addr: SocketAddr,
    /// Subsystem NQN.
    pub subnqn: String,
    /// The host's side of the connection.
    pub host: HostConfig,
}

impl Endpoint {
    /// `host` with `io_queues` I/O queues asked for and no asynchronous events.
    fn host_config(&self, io_queues: u16) -> HostConfig {
        let mut cfg = self.host.clone();
        cfg.io_queues = io_queues;
        cfg.async_events = false;
        cfg
    }

    /// Connect a controller with `io_queues` I/O queues, run `f` on it, then shut the
    /// controller down (a failed shutdown is only logged) and disconnect.
    async fn with_controller<T>(
        &self,
        io_queues: u16,
        f: impl AsyncFnOnce(&Controller) -> Result<T>,
    ) -> Result<T> {
        let ctrl = self.connect(&self.host_config(io_queues)).await?;
        let r = f(&ctrl).await;
        if let Err(e) = ctrl.shutdown().await {
            tracing::debug!(error = %e, "shutdown failed");
        }
        ctrl.disconnect().await;
        r
    }

    async fn connect(&self, cfg: &HostConfig) -> Result<Controller> {
        Controller::connect(self.addr, &self.subnqn, cfg)
            .await
            .with_context(|| format!("cannot connect to {} at {}", self.subnqn, self.addr))
    }
}

/// A current-thread tokio runtime with I/O and timers (one per perf worker thread).
fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the tokio runtime")
}
