//! # nvmf-rdma — NVMe over RDMA (RoCEv2, InfiniBand, iWARP)
//!
//! The RDMA transport binding of NVMe over Fabrics (NVMe-oF 1.1, section 7.3; the NVMe/RDMA
//! transport specification): one reliable-connected queue pair per NVMe queue, set up through
//! the RDMA connection manager with NVMe private data; command capsules arrive as SENDs into
//! receive buffers posted ahead; command data moves by RDMA READ (host to controller) and RDMA
//! WRITE (controller to host) against the host's keyed SGL, or rides in the capsule (I/O
//! queues, up to IOCCSZ); the response capsule is a SEND, with invalidate when the host asks.
//!
//! - [`wire`]: the bytes — CM request/accept/reject private data, keyed SGL data blocks. One
//!   bounds-checked decoder per structure; everything after it is typed.
//! - [`target`]: the sans-IO target side of one queue, [`target::RdmaQueueCore`]: received
//!   capsules in, work requests out (RDMA READ, RDMA WRITE, SEND), completions of those in. It
//!   drives the transport-agnostic controller (`nvmf_target::Queue`) exactly as the TCP glue
//!   does.
//! - `verbs` (feature `verbs`, default): a small safe layer over libibverbs and librdmacm
//!   through `rdma-mummy-sys`, which loads them with `dlopen` on first use — a machine without
//!   rdma-core builds and runs everything else.

pub mod target;
#[cfg(feature = "verbs")]
pub mod verbs;
pub mod wire;
