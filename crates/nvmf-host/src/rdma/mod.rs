//! NVMe over RDMA, host side (NVMe-oF 1.1 section 7.3, "RDMA transport binding").
//!
//! Facts this module relies on (checked against Linux `drivers/nvme/host/rdma.c` and
//! `include/linux/nvme-rdma.h`):
//! - **One RC queue pair per NVMe queue**, each with its own RDMA CM id in the TCP port space
//!   (`RDMA_PS_TCP`), its own address and route resolution (`nvme_rdma_alloc_queue`).
//! - **CM connect private data** (`struct nvme_rdma_cm_req`, 32 bytes): RECFMT 0, QID, HRQSIZE
//!   (responses the host can receive: posted receive buffers), HSQSIZE (0's based SQ size),
//!   CNTLID, reserved. The admin queue asks for HRQSIZE 32 / HSQSIZE 31
//!   (`nvme_rdma_route_resolved`); I/O queues HRQSIZE = entries, HSQSIZE = entries − 1. The
//!   accept carries RECFMT and CRQSIZE; a reject carries RECFMT and an `NVME_RDMA_CM_*` status.
//!   The connect parameters set responder_resources / initiator_depth (the controller
//!   RDMA-READs host memory for writes), retry_count 7 and rnr_retry_count 7.
//! - **Capsules**: a command is one SEND of the 64-byte SQE, followed in the same SEND by
//!   in-capsule data for writes that fit the I/O queue's IOCCSZ × 16 − 64 bytes (SGL Data Block,
//!   subtype Offset, address 0). The admin queue never carries in-capsule data: even the
//!   1024-byte Connect data goes by keyed SGL (`cmnd_capsule_len` is the bare SQE for QID 0).
//! - **Keyed SGL Data Block** (type 4h, subtype 0h address / Fh invalidate): address, 24-bit
//!   length, 32-bit key. A command without data gets a keyed descriptor of length 0
//!   (`nvme_rdma_set_sg_null`). This host registers each queue's data buffers once and never asks
//!   for remote invalidation, so a response with invalidate is a protocol error.
//! - **Responses** are 16-byte CQEs received into the posted receive buffers; a command is done
//!   when both its SEND completion and its response have been seen (`nvme_rdma_end_request`).
//!
//! [`engine`] is the sans-IO part (slots, capsules, SGLs, responses by CID); `link` (feature
//! `rdma`) drives it with libibverbs / librdmacm through `nvmf_rdma::verbs`.

pub mod engine;
#[cfg(feature = "rdma")]
pub(crate) mod link;

pub(crate) use nvmf_rdma::wire;
