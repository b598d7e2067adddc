//! One NVMe queue over one TCP connection: the engine under both the admin queue and the I/O
//! queues.
//!
//! Shape (a sans-IO core driven by a thin I/O shell):
//! - **Slots**: `entries - 1` preallocated command slots; the CID of a command *is* its slot
//!   index, and a free list hands them out. Each slot owns a reusable data buffer that grows to
//!   the largest transfer it has seen and is never shrunk, so steady-state I/O allocates nothing.
//! - **Submission** only appends the CapsuleCmd to the transmit buffer; the next I/O round
//!   ([`Queue::io_round`]) sends everything queued since the last one in one `writev`. Write
//!   data (in-capsule, or H2CData answering an R2T) of 2 KiB or more is not copied into the
//!   transmit buffer: it is sent from the slot's buffer, which stays pinned (not reused) until
//!   it is out, even if the command completes first ([`txbuf`]).
//! - **Reception** reads in bulk into a receive buffer sized for the largest PDU plus a read
//!   window, and feeds `nvmf_tcp::HostConn::decode_one` until it asks for more bytes.
//! - **Never blocks writing while the controller is blocked writing to us**: writing and reading
//!   are both non-blocking (`try_write`/`try_read`), and the wait is on readiness for either.
//!
//! SQ flow control (NVMe-oF 1.1, 3.3.2): at most `entries - 1` commands are outstanding, and the
//! number the controller has not yet fetched (tail − SQHD) is tracked from each response's SQHD.
//! When the queue was connected with CATTR.DISSQFC and the controller agreed (SQHD 0xFFFF in the
//! Connect response) SQHD is ignored and C2HData SUCCESS completes a read without a response.
//!
//! Parts, each using the ones before it: [`slots`] (CIDs, slot buffers, SQ accounting),
//! [`txbuf`] (output with spliced write data), [`engine`] ([`QueueCore`], sans-IO: capsules,
//! R2T/H2CData, C2HData and responses), [`link`] (socket, TLS, ICReq/ICResp), and [`Queue`]
//! here, which ties the engine to its link. The NVMe-level steps every transport shares
//! (Fabrics Connect, DH-HMAC-CHAP, the polling loop) are in `crate::session`, over the
//! transport seam `crate::transport::AnyQueue`.

mod engine;
mod link;
mod slots;
mod txbuf;

use std::net::SocketAddr;

use nvmf_tcp::{Digests, HostConn, HostConnConfig};
use tokio::io::Interest;

pub use engine::QueueCore;
use link::Link;

use crate::command::Completion;
use crate::config::{ConnectParams, LinkParams};
use crate::error::{HostError, Result};

/// How many write/read/decode rounds [`Queue::io_round`] runs before yielding to its caller.
const IO_BUDGET: usize = 64;
/// In-capsule data limit on the admin queue (NVMe/TCP: admin and Fabrics commands accept up to
/// 8 KiB of in-capsule data; Linux `NVME_TCP_ADMIN_CCSZ`).
pub(crate) const ADMIN_ICD_MAX: usize = 8192;

/// One queue over TCP: the engine (slots, SQ state, output) and its link (socket, input).
pub(crate) struct Queue {
    link: Link,
    /// Submission and the queue's accessors go straight to the engine.
    pub(crate) eng: QueueCore,
    broken: bool,
}

impl Queue {
    /// Open the connection (TCP, TLS if configured, ICReq/ICResp) for the queue `cp` describes,
    /// with slot buffers of `prealloc` bytes. The Fabrics Connect is the caller's next step.
    pub(crate) async fn open(
        lp: &LinkParams,
        cp: &ConnectParams,
        prealloc: usize,
    ) -> Result<Queue> {
        let tls = match &lp.tls {
            None => None,
            Some(k) => Some(
                k.for_queue(&cp.hostnqn, &cp.subnqn)
                    .map_err(HostError::InvalidArgument)?,
            ),
        };
        let mut conn = HostConn::new(HostConnConfig {
            digests: lp.digests,
            hpda: 0,
            maxr2t: 0,
            max_c2h_data: lp.max_c2h_data,
        });
        let link = Link::open(lp, &mut conn, tls).await?;
        Ok(Queue {
            link,
            eng: QueueCore::with_buffers(conn, cp.qid, cp.entries, cp.icd_max, prealloc),
            broken: false,
        })
    }

    pub(crate) fn peer(&self) -> SocketAddr {
        self.link.peer
    }
    pub(crate) fn maxh2cdata(&self) -> u32 {
        self.link.maxh2cdata
    }
    pub(crate) fn digests(&self) -> Digests {
        self.eng.conn.digests()
    }
    pub(crate) fn is_broken(&self) -> bool {
        self.broken
    }
    /// Nothing outstanding and nothing left to send.
    pub(crate) fn idle(&self) -> bool {
        self.eng.in_flight() == 0 && !self.link.tx_pending(&self.eng.tx)
    }

    /// Busy polling: read with a raw non-blocking `recv`, bypassing tokio's readiness cache.
    pub(crate) fn set_busy_poll(&mut self, busy: bool) {
        self.link.raw_reads = busy;
    }

    /// Do all the I/O possible without waiting: send pending output, read what has arrived,
    /// decode it and call `f` for each completed command. Returns the number completed.
    pub(crate) fn io_round<F: FnMut(Completion<'_>)>(&mut self, f: &mut F) -> Result<usize> {
        let mut completed = 0;
        for _ in 0..IO_BUDGET {
            let wrote = self.link.try_write(&mut self.eng.tx, &mut self.eng.st)?;
            let (read, drained) = self.link.try_read()?;
            if read > 0 {
                let link = &mut self.link;
                let rx = &link.rx[..link.rx_tail];
                completed += self.eng.receive(rx, &mut link.rx_head, f)?;
                link.expect_rest_of_pdu(self.eng.conn.awaiting_pdu_len());
            }
            // A short read means the socket was empty at that moment: do not spend another
            // syscall to learn it again, unless processing produced output (H2CData for R2Ts).
            if (wrote == 0 && read == 0) || (drained && !self.link.tx_pending(&self.eng.tx)) {
                break;
            }
        }
        Ok(completed)
    }

    /// Mark the queue dead; for a protocol error, tell the controller why (best effort).
    pub(crate) fn break_link(&mut self, e: &HostError) {
        if self.broken {
            return;
        }
        self.broken = true;
        tracing::debug!(peer = %self.link.peer, qid = self.eng.qid().0, error = %e, "queue failed");
        if let HostError::Protocol(p) = e
            && self.link.tls.is_none()
        {
            let mut out = Vec::new();
            self.eng
                .conn
                .encode_term_req(&mut out, p.fes as u16, p.fei, p.header());
            let _ = self.link.stream.try_write(&out);
        }
    }

    /// Wait until the socket can make progress (readable, or writable while output is pending).
    /// Cancel-safe.
    pub(crate) async fn wait_ready(&self) -> Result<()> {
        if self.link.tls_more {
            // Decrypted bytes wait in the TLS session: no need to wait for the socket.
            return Ok(());
        }
        let mut interest = Interest::READABLE;
        if self.link.tx_pending(&self.eng.tx) {
            interest |= Interest::WRITABLE;
        }
        self.link.stream.ready(interest).await?;
        Ok(())
    }
}
