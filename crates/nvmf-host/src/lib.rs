//! # nvmf-host — a userspace NVMe/TCP and NVMe/RDMA initiator
//!
//! **What it is**: the host side of NVMe over TCP on tokio — and, with the `rdma` feature and
//! [`HostConfig::transport`] = [`Transport::Rdma`], of NVMe over RDMA (see [`rdma`]).
//! [`Controller::connect`] opens an association (TCP + ICReq/ICResp, or an RDMA CM connection;
//! Fabrics Connect, CC.EN, CSTS.RDY, Identify) and keeps it alive; it runs admin commands (Identify, Get Log Page, Get/Set Features, properties,
//! shutdown). [`discover`] reads a discovery log. [`IoQueue`]s — one connection (TCP) or queue
//! pair (RDMA) each — run
//! reads, writes, flushes, Write Zeroes and deallocations, many in flight.
//!
//! **What it is not**: no block device, no multipath, no automatic reconnect. Byte-level NVMe/TCP lives in `nvmf-tcp` (sans-IO); this crate is
//! the I/O shell and the command logic around it.
//!
//! **Where it sits**: `ebof discover / identify / perf` are thin CLIs over it. The flow per
//! queue: `submit` encodes a capsule into the queue's transmit buffer → one `write` per batch →
//! bulk `read` into the receive buffer → `HostConn::decode_one` → completions by CID (= slot
//! index) → the caller's callback.
//!
//! Layout, bottom up: [`config`] (host identity, tunables, per-queue parameters), `command`
//! (data direction, completion), `queue` (the NVMe/TCP queue: slots, transmit buffer, the
//! sans-IO engine — flow control, R2T/H2CData, C2HData — and its socket shell), [`rdma`] (the
//! NVMe/RDMA queue engine and, with the `rdma` feature, its verbs shell), `transport` (the one
//! seam: the enum both kinds of queue sit behind), `session` (what runs on any queue: Fabrics
//! Connect, DH-HMAC-CHAP, the polling loop), [`controller`] (admin queue task, keep-alive, AER,
//! admin commands), [`io`] (I/O queues), [`discovery`], [`error`].
//!
//! # Example
//!
//! Connect, identify, write and read one block, disconnect (needs a target, so not run here;
//! `ebof serve` gives one on 127.0.0.1:4420):
//!
//! ```no_run
//! use nvmf_host::{Controller, HostConfig};
//! use nvme_spec::NamespaceId;
//!
//! # async fn run() -> Result<(), nvmf_host::HostError> {
//! let addr = "127.0.0.1:4420".parse().unwrap();
//! let ctrl = Controller::connect(addr, "nqn.2026-11.io.ebof:default", &HostConfig::default())
//!     .await?;
//! println!("model {}", ctrl.identify().mn);
//! let mut q = ctrl.io_queue(1, 32, false).await?;
//! let block = vec![0xA5; 512];
//! q.write(NamespaceId(1), 0, 1, &block).await?;
//! let mut back = vec![0; 512];
//! q.read(NamespaceId(1), 0, 1, &mut back).await?;
//! assert_eq!(back, block);
//! ctrl.shutdown().await?;
//! ctrl.disconnect().await;
//! # Ok(())
//! # }
//! ```
//!
//! Failures are one [`HostError`] whose message says the cause once. With nothing listening on
//! the port:
//!
//! ```
//! use nvmf_host::{HostConfig, HostError, discover};
//!
//! let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
//! // A loopback port that was free a moment ago: the connection is refused.
//! let addr = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
//! let err = rt.block_on(discover(addr, &HostConfig::default())).unwrap_err();
//! assert!(matches!(&err, HostError::Transport(e) if e.kind() == std::io::ErrorKind::ConnectionRefused));
//! assert!(err.to_string().starts_with("transport: "));
//! assert!(std::error::Error::source(&err).is_none(), "the OS error is in the message, once");
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! Performance design: a queue is owned by one task (no locks, `&mut self` API); command slots
//! and their data buffers are preallocated and reused (CID = slot index, free list); all
//! capsules submitted between two polls leave in one `write`; reads are bulk and every whole
//! PDU in the buffer is handled before the next wait.

mod command;
pub mod config;
pub mod controller;
pub mod discovery;
pub mod error;
pub mod io;
mod queue;
pub mod rdma;
mod session;
mod transport;

pub use command::{Completion, DataDir};
pub use config::{DhchapKeys, HostConfig, HostIdentity, TlsKey, Transport};
pub use controller::{AsyncEvent, Controller};
pub use discovery::{DiscoveryLog, discover};
pub use error::HostError;
pub use io::{IoConnector, IoQueue, IoQueueOptions};
#[doc(hidden)]
pub use queue::QueueCore;
