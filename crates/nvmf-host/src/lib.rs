//! # nvmf-host — a userspace NVMe/TCP initiator
//!
//! **What it is**: the host side of NVMe over TCP on tokio. [`Controller::connect`] opens an
//! association (TCP, ICReq/ICResp, Fabrics Connect, CC.EN, CSTS.RDY, Identify) and keeps it
//! alive; it runs admin commands (Identify, Get Log Page, Get/Set Features, properties,
//! shutdown). [`discover`] reads a discovery log. [`IoQueue`]s — one TCP connection each — run
//! reads, writes, flushes, Write Zeroes and deallocations, many in flight.
//!
//! **What it is not**: no block device, no multipath, no automatic reconnect, no TLS, no
//! in-band authentication. Byte-level NVMe/TCP lives in `nvmf-tcp` (sans-IO); this crate is
//! the I/O shell and the command logic around it.
//!
//! **Where it sits**: `ebof discover / identify / perf` are thin CLIs over it. The flow per
//! queue: `submit` encodes a capsule into the queue's transmit buffer → one `write` per batch →
//! bulk `read` into the receive buffer → `HostConn::decode_one` → completions by CID (= slot
//! index) → the caller's callback.
//!
//! Layout: [`config`] (host identity, tunables), `queue` (the per-connection engine: slots,
//! flow control, R2T/H2CData, C2HData), [`controller`] (admin queue task, keep-alive, AER,
//! admin commands), [`io`] (I/O queues), [`discovery`], [`error`].
//!
//! Performance design: a queue is owned by one task (no locks, `&mut self` API); command slots
//! and their data buffers are preallocated and reused (CID = slot index, free list); all
//! capsules submitted between two polls leave in one `write`; reads are bulk and every whole
//! PDU in the buffer is handled before the next wait.

pub mod config;
pub mod controller;
pub mod discovery;
pub mod error;
pub mod io;
mod queue;

pub use config::{HostConfig, HostIdentity};
pub use controller::{AsyncEvent, Controller};
pub use discovery::{DiscoveryLog, discover};
pub use error::HostError;
pub use io::{IoConnector, IoQueue, IoQueueOptions};
pub use queue::{Completion, DataDir};
