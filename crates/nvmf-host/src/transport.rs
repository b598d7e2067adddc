//! The transport seam: one queue type over NVMe/TCP or NVMe/RDMA, statically dispatched.
//!
//! [`AnyQueue`] is an enum, not a trait object: a TCP queue costs one predictable branch per
//! call, and without the `rdma` feature the enum has a single variant and the branch folds away.

use std::net::SocketAddr;
use std::time::Duration;

use nvme_spec::{CommandId, ControllerId, Cqe, QueueId, Sqe};
use nvmf_tcp::Digests;

use crate::config::Transport;
use crate::error::{HostError, Result};
use crate::queue::{Completion, ConnectParams, DataDir, LinkParams, Queue};

/// One NVMe queue on either transport. The TCP queue stays inline (no pointer to chase per
/// command); the RDMA queue, which is larger, is boxed.
#[allow(clippy::large_enum_variant)]
pub(crate) enum AnyQueue {
    Tcp(Queue),
    #[cfg(feature = "rdma")]
    Rdma(Box<crate::rdma::link::RdmaQueue>),
}

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
    /// Open a queue on `t` and run the Fabrics Connect. `max_transfer` bounds one command's
    /// data (RDMA: the size of each slot's registered buffer).
    pub(crate) async fn connect(
        t: Transport,
        lp: &LinkParams,
        cp: &ConnectParams,
        prealloc: usize,
        max_transfer: usize,
    ) -> Result<(AnyQueue, ControllerId)> {
        match t {
            Transport::Tcp => {
                let _ = max_transfer;
                let (q, id) = Queue::connect(lp, cp, prealloc).await?;
                Ok((AnyQueue::Tcp(q), id))
            }
            #[cfg(feature = "rdma")]
            Transport::Rdma => {
                check_rdma_params(lp)?;
                let (q, id) = crate::rdma::link::RdmaQueue::connect(lp, cp, max_transfer).await?;
                Ok((AnyQueue::Rdma(Box::new(q)), id))
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

    pub(crate) fn qid(&self) -> QueueId {
        each!(self, q => q.qid())
    }
    pub(crate) fn peer(&self) -> SocketAddr {
        each!(self, q => q.peer())
    }
    pub(crate) fn in_flight(&self) -> usize {
        each!(self, q => q.in_flight())
    }
    pub(crate) fn capacity(&self) -> usize {
        each!(self, q => q.capacity())
    }
    pub(crate) fn flow_control(&self) -> bool {
        each!(self, q => q.flow_control())
    }
    pub(crate) fn icd_max(&self) -> usize {
        each!(self, q => q.icd_max())
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
        each!(self, q => q.can_submit())
    }

    #[inline]
    pub(crate) fn submit(
        &mut self,
        sqe: Sqe,
        dir: DataDir,
        len: usize,
        user: u64,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<Option<CommandId>> {
        each!(self, q => q.submit(sqe, dir, len, user, fill))
    }

    #[inline]
    pub(crate) fn try_io<F: FnMut(Completion<'_>)>(&mut self, f: &mut F) -> Result<usize> {
        each!(self, q => q.try_io(f))
    }

    pub(crate) async fn wait_ready(&mut self) -> Result<()> {
        each!(self, q => q.wait_ready().await)
    }

    #[inline]
    pub(crate) async fn poll<F: FnMut(Completion<'_>)>(
        &mut self,
        f: &mut F,
        idle_timeout: Duration,
        busy: bool,
    ) -> Result<usize> {
        each!(self, q => q.poll(f, idle_timeout, busy).await)
    }

    pub(crate) async fn execute(
        &mut self,
        sqe: Sqe,
        dir: DataDir,
        out: &[u8],
        in_len: usize,
    ) -> Result<(Cqe, Vec<u8>)> {
        each!(self, q => q.execute(sqe, dir, out, in_len).await)
    }

    pub(crate) fn fail_in_flight(&mut self, f: impl FnMut(u64)) {
        each!(self, q => q.fail_in_flight(f))
    }
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
