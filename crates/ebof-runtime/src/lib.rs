//! # ebof-runtime — threads, cores and sockets
//!
//! **What it is**: the I/O half of ebof serve. Per-core reactor threads (one current-thread
//! tokio runtime per pinned core, epoll underneath — event-driven, no busy polling), the accept
//! loop that places each new connection (= one NVMe queue) on a core for life, and the
//! connection driver ([`conn`]) that pumps socket bytes → `nvmf-tcp` → `nvmf-target` → backend
//! → one batched send per drain.
//!
//! **What it is not**: it holds no protocol logic; every NVMe decision is made by the sans-IO
//! crates it drives.

pub mod affinity;
pub mod conn;
pub mod server;

pub use server::{Server, ServerConfig, ServerHandle};
