//! # ebof-runtime — threads, cores and sockets
//!
//! **What it is**: the I/O half of ebof serve. Per-core reactor threads ([`reactor`]: one pinned
//! epoll loop per core that polls while traffic flows and sleeps when it stops), the accept
//! path that places each new connection (= one NVMe queue) on a core for life, and the
//! sans-IO connection core ([`conn`]) that turns socket bytes → `nvmf-tcp` → `nvmf-target` →
//! backend → one batched, zero-copy-where-possible send per drain.
//! File and block I/O goes to each reactor's own [`engine`]: an io_uring ring the reactor
//! submits and reaps itself, or a fixed-size worker pool (`io_engine = "threads"`, or where the
//! kernel refuses io_uring); the thread count is set by the configuration, not by the load.
//!
//! **What it is not**: it holds no protocol logic; every NVMe decision is made by the sans-IO
//! crates it drives.

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub use ebof_affinity as affinity;
pub mod conn;
pub mod duties;
pub mod engine;
pub mod limits;
mod mailbox;
mod pace;
#[cfg(feature = "rdma")]
pub mod rdma;
pub mod rdma_core;
pub mod reactor;
pub mod server;
mod timers;
pub mod tls;

pub use conn::ConnEnd;
pub use engine::{EngineConfig, IoEngineKind};
pub use server::{ListenerControl, Server, ServerConfig, ServerHandle};
