//! The transport seam: one queue type over NVMe/TCP or NVMe/RDMA, statically dispatched.
//!
//! [`AnyQueue`] is an enum, and it is the only seam: the NVMe-level code above it
//! (`crate::session`: Connect, authentication, the polling loop; the controller's admin task;
//! [`crate::IoQueue`]) is written once against it, and each transport type below it only
//! moves bytes. Why an enum and not a trait: the transport is chosen at run time
//! ([`HostConfig::transport`](crate::HostConfig::transport)) while [`crate::Controller`] and
//! [`crate::IoQueue`] are plain (non-generic) types, so a trait would need either a type
//! parameter on the public API or a trait object — and a trait object can carry neither the
//! generic completion callbacks nor the `async` methods without boxing, and costs an indirect
//! call per operation. The enum costs one predictable branch per call (every call on a queue
//! takes the same arm), with the callee inlined into it; without the `rdma` feature it has a
//! single variant and the branch folds away. The TCP queue stays inline (no pointer to chase
//! per command); the RDMA queue, which is larger, is boxed.
//!
//! What each transport type provides, as inherent methods of the same names (`each!` below
//! expands one expression per variant, so a missing method is a compile error, not a silent
//! default): a sans-IO engine in the field `eng` (`submit`, `can_submit`, `in_flight`,
//! `capacity`, `qid`, `flow_control`, `icd_max`, `connected`, `fail_in_flight`:
//! [`crate::QueueCore`] for TCP, [`crate::rdma::engine::RdmaEngine`] for RDMA), and on the queue
//! itself `io_round` (all the I/O possible without waiting), `wait_ready`, `break_link`,
//! `idle`, `is_broken`, `set_busy_poll`, `peer`, `maxh2cdata` and `digests`. The guards every
//! transport needs (no use after a failure, a failure breaks the link) are written here, once.

use std::net::SocketAddr;

use nvme_spec::{CommandId, QueueId, Sqe};
use nvmf_tcp::Digests;

use crate::command::{Completion, DataDir};
use crate::config::{ConnectParams, LinkParams, Transport};
use crate::error::{HostError, Result};
use crate::queue::Queue;

/// One NVMe queue on either transport.
#[allow(clippy::large_enum_variant)]
pub(crate) enum AnyQueue {
    Tcp(Queue),
    #[cfg(feature = "rdma")]
    Rdma(Box<crate::rdma::link::RdmaQueue>),
}

/// `$e` evaluated with `$q` bound to the queue of whichever transport `$self` holds.
macro_rules! each {
    ($self:expr, $q:ident => $e:expr) => {
        match $self {
            AnyQueue::Tcp($q) => $e,
            #[cfg(feature = "rdma")]
            AnyQueue::Rdma($q) => $e,
        }
    };
}

/// In-capsule data limit of the admin queue on `t`: NVMe/TCP takes 8 KiB; NVMe/RDMA none (the
/// admin queue's command capsule is the bare SQE, as with the Linux host).
pub(crate) fn admin_icd_max(t: Transport) -> usize {
    match t {
        Transport::Tcp => crate::queue::ADMIN_ICD_MAX,
        Transport::Rdma => 0,
    }
}

impl AnyQueue {
    /// Open a queue's transport on `t` (no NVMe command yet: the Fabrics Connect is
    /// `crate::session::connect`'s). `max_transfer` bounds one command's data (RDMA: the size
    /// of each slot's registered buffer); `prealloc` is each TCP slot buffer's starting size.
    pub(crate) async fn open(
        t: Transport,
        lp: &LinkParams,
        cp: &ConnectParams,
        prealloc: usize,
        max_transfer: usize,
    ) -> Result<AnyQueue> {
        match t {
            Transport::Tcp => {
                let _ = max_transfer;
                check_entries(cp)?;
                Ok(AnyQueue::Tcp(Queue::open(lp, cp, prealloc).await?))
            }
            #[cfg(feature = "rdma")]
            Transport::Rdma => {
                check_rdma_params(lp)?;
                check_entries(cp)?;
                let q = crate::rdma::link::RdmaQueue::open(lp, cp, max_transfer).await?;
                Ok(AnyQueue::Rdma(Box::new(q)))
            }
            #[cfg(not(feature = "rdma"))]
            Transport::Rdma => {
                let _ = (prealloc, max_transfer);
                check_rdma_params(lp)?;
                Err(HostError::Rdma(
                    "this build of ebof has no RDMA support (built without the `rdma` feature)"
                        .into(),
                ))
            }
        }
    }

    /// Apply the Fabrics Connect response's SQHD (see `connected` on the engines).
    pub(crate) fn connected(&mut self, sqhd: u16, dissqfc: bool) {
        each!(self, q => q.eng.connected(sqhd, dissqfc))
    }

    pub(crate) fn qid(&self) -> QueueId {
        each!(self, q => q.eng.qid())
    }
    pub(crate) fn peer(&self) -> SocketAddr {
        each!(self, q => q.peer())
    }
    pub(crate) fn in_flight(&self) -> usize {
        each!(self, q => q.eng.in_flight())
    }
    /// Most commands that can be outstanding at once.
    pub(crate) fn capacity(&self) -> usize {
        each!(self, q => q.eng.capacity())
    }
    pub(crate) fn flow_control(&self) -> bool {
        each!(self, q => q.eng.flow_control())
    }
    pub(crate) fn icd_max(&self) -> usize {
        each!(self, q => q.eng.icd_max())
    }
    /// MAXH2CDATA (NVMe/TCP; 0 on RDMA, which has no H2CData).
    pub(crate) fn maxh2cdata(&self) -> u32 {
        each!(self, q => q.maxh2cdata())
    }
    /// Digests (NVMe/TCP; none on RDMA).
    pub(crate) fn digests(&self) -> Digests {
        each!(self, q => q.digests())
    }
    pub(crate) fn is_broken(&self) -> bool {
        each!(self, q => q.is_broken())
    }
    pub(crate) fn can_submit(&self) -> bool {
        each!(self, q => !q.is_broken() && q.eng.can_submit())
    }
    /// Nothing outstanding and nothing left to send.
    pub(crate) fn idle(&self) -> bool {
        each!(self, q => q.idle())
    }
    /// Busy polling (TCP: raw non-blocking reads; nothing to change on RDMA).
    pub(crate) fn set_busy_poll(&mut self, busy: bool) {
        each!(self, q => q.set_busy_poll(busy))
    }

    /// Queue a command for sending. The CID and SGL of `sqe` are filled in here. For
    /// [`DataDir::ToController`], `fill` writes the `len` bytes to send into the slot's buffer
    /// (it is not called otherwise). Returns `Ok(None)` when the queue is full.
    #[inline]
    pub(crate) fn submit(
        &mut self,
        sqe: Sqe,
        dir: DataDir,
        len: usize,
        user: u64,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<Option<CommandId>> {
        each!(self, q => {
            if q.is_broken() {
                return Err(HostError::Disconnected);
            }
            q.eng.submit(sqe, dir, len, user, fill)
        })
    }

    /// Do all the I/O possible without waiting and call `f` for each completed command.
    /// Returns the number completed. On error the queue is broken: every later call fails with
    /// [`HostError::Disconnected`].
    #[inline]
    pub(crate) fn try_io<F: FnMut(Completion<'_>)>(&mut self, f: &mut F) -> Result<usize> {
        each!(self, q => {
            if q.is_broken() {
                return Err(HostError::Disconnected);
            }
            let r = q.io_round(f);
            if let Err(e) = &r {
                q.break_link(e);
            }
            r
        })
    }

    /// Wait until the transport can make progress. Cancel-safe.
    pub(crate) async fn wait_ready(&mut self) -> Result<()> {
        each!(self, q => q.wait_ready().await)
    }

    /// Mark the queue dead after `e` (telling the controller why, where the transport can).
    pub(crate) fn break_link(&mut self, e: &HostError) {
        each!(self, q => q.break_link(e))
    }

    /// Forget every outstanding command (calling `f` with each one's user tag) and mark the
    /// queue dead: once commands are abandoned their CIDs cannot be reused safely.
    pub(crate) fn fail_in_flight(&mut self, f: impl FnMut(u64)) {
        each!(self, q => {
            q.break_link(&HostError::Disconnected);
            q.eng.fail_in_flight(f)
        })
    }
}

/// A queue needs at least 2 SQ entries (one slot).
fn check_entries(cp: &ConnectParams) -> Result<()> {
    if cp.entries < 2 {
        return Err(HostError::InvalidArgument(format!(
            "queue size {} (need at least 2 entries)",
            cp.entries
        )));
    }
    Ok(())
}

/// NVMe/RDMA has no TLS and no digests (NVMe/TCP features): refuse them up front.
fn check_rdma_params(lp: &LinkParams) -> Result<()> {
    if lp.tls.is_some() {
        return Err(HostError::InvalidArgument(
            "TLS is an NVMe/TCP feature; NVMe/RDMA has none".into(),
        ));
    }
    if lp.digests.hdgst || lp.digests.ddgst {
        return Err(HostError::InvalidArgument(
            "header and data digests are NVMe/TCP features; NVMe/RDMA has none".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn lp() -> LinkParams {
        LinkParams {
            addr: "127.0.0.1:4420".parse().unwrap(),
            digests: Digests::default(),
            max_c2h_data: 65536,
            connect_timeout: Duration::from_secs(1),
            tls: None,
        }
    }

    #[test]
    fn rdma_refuses_tcp_only_features() {
        assert!(check_rdma_params(&lp()).is_ok());
        let mut p = lp();
        p.digests.hdgst = true;
        assert!(matches!(
            check_rdma_params(&p),
            Err(HostError::InvalidArgument(m)) if m.contains("digests")
        ));
        let mut p = lp();
        p.tls = Some(
            crate::TlsKey::parse(
                "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:",
                None,
            )
            .unwrap(),
        );
        assert!(matches!(
            check_rdma_params(&p),
            Err(HostError::InvalidArgument(m)) if m.contains("TLS")
        ));
    }

    #[test]
    fn admin_queue_in_capsule_limits() {
        assert_eq!(admin_icd_max(Transport::Tcp), 8192);
        assert_eq!(admin_icd_max(Transport::Rdma), 0);
    }

    #[test]
    fn transport_names() {
        assert_eq!("tcp".parse::<Transport>(), Ok(Transport::Tcp));
        assert_eq!("RDMA".parse::<Transport>(), Ok(Transport::Rdma));
        assert!("fc".parse::<Transport>().is_err());
        assert_eq!(Transport::Rdma.to_string(), "rdma");
        assert_eq!(Transport::default(), Transport::Tcp);
    }
}
