//! # nvmf-rdma — NVMe over RDMA (RoCEv2, InfiniBand, iWARP): wire and verbs
//!
//! The RDMA transport binding of NVMe over Fabrics (NVMe-oF 1.1, section 7.3; the NVMe/RDMA
//! transport specification): one reliable-connected queue pair per NVMe queue, set up through
//! the RDMA connection manager with NVMe private data; command capsules arrive as SENDs into
//! receive buffers posted ahead; command data moves by RDMA READ (host to controller) and RDMA
//! WRITE (controller to host) against the host's keyed SGL, or rides in the capsule (I/O
//! queues, up to IOCCSZ); the response capsule is a SEND, with invalidate when the host asks.
//!
//! This crate is the sibling of `nvmf-tcp`: shared by the target and the host, it knows the
//! transport's bytes and verbs, not the controller. The target's queue core (capsules in, work
//! requests out, over `nvmf_target::Queue`) lives with the other transport core in
//! `ebof-runtime` (`rdma_core`); the host's in `nvmf-host`.
//!
//! - [`wire`]: the bytes — CM request/accept/reject private data, keyed SGL data blocks. One
//!   bounds-checked decoder per structure; everything after it is typed.
//! - `verbs` (feature `verbs`, default): a small safe layer over libibverbs and librdmacm
//!   through `rdma-mummy-sys`, which loads them with `dlopen` on first use — a machine without
//!   rdma-core builds and runs everything else.

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

#[cfg(feature = "verbs")]
pub mod verbs;
pub mod wire;
