//! What happens on a queue above the transport, written once for both: opening it (transport
//! set-up, then the Fabrics Connect and, when the controller asks, DH-HMAC-CHAP), the polling
//! loop, and one command run alone. Everything here goes through [`AnyQueue`], the transport
//! seam; nothing here knows TCP from RDMA.

use std::time::Duration;

use nvme_spec::fabrics::{ConnectCmd, ConnectData};
use nvme_spec::{CommandId, ControllerId, Cqe, Sqe};

use crate::command::{Completion, DataDir};
use crate::config::{ConnectParams, DhchapKeys, LinkParams, Transport};
use crate::error::{HostError, Result};
use crate::transport::AnyQueue;

/// Open a queue on transport `t` and run the Fabrics Connect (and authentication) on it.
/// `prealloc`: bytes each TCP slot buffer starts with; `max_transfer` bounds one command's data
/// (RDMA: the size of each slot's registered buffer). Returns the queue and the controller ID
/// from the Connect response.
pub(crate) async fn connect(
    t: Transport,
    lp: &LinkParams,
    cp: &ConnectParams,
    prealloc: usize,
    max_transfer: usize,
) -> Result<(AnyQueue, ControllerId)> {
    let mut q = AnyQueue::open(t, lp, cp, prealloc, max_transfer).await?;
    let cqe = fabrics_connect(&mut q, lp.connect_timeout, cp).await?;
    q.connected(cqe.sqhd, cp.dissqfc);
    tracing::debug!(peer = %lp.addr, transport = %t, qid = cp.qid.0, cntlid = cqe.dw0 & 0xFFFF,
        flow_control = q.flow_control(), "queue connected");
    Ok((q, ControllerId((cqe.dw0 & 0xFFFF) as u16)))
}

/// Drive I/O until at least one command completes. Returns 0 at once when nothing is in
/// flight and nothing is left to send. With commands in flight, `idle_timeout` bounds how
/// long the controller may stay silent before the queue is declared dead. `busy`: never
/// sleep; retry the socket (TCP: with raw non-blocking reads), yielding to the thread's other
/// tasks every few attempts.
#[inline]
pub(crate) async fn poll<F: FnMut(Completion<'_>)>(
    q: &mut AnyQueue,
    f: &mut F,
    idle_timeout: Duration,
    busy: bool,
) -> Result<usize> {
    q.set_busy_poll(busy);
    drive(q, f, idle_timeout, busy).await
}

/// The loop of [`poll`], leaving the transport's read mode as it is.
async fn drive<F: FnMut(Completion<'_>)>(
    q: &mut AnyQueue,
    f: &mut F,
    idle_timeout: Duration,
    busy: bool,
) -> Result<usize> {
    // Busy mode: attempts between yields to the runtime (and clock reads); a yield costs a
    // trip through tokio's driver, a miss only one raw `recv`.
    const SPINS_PER_YIELD: u32 = 16;
    let mut since: Option<std::time::Instant> = None;
    let mut spins = 0u32;
    loop {
        let n = q.try_io(f)?;
        if n > 0 {
            // Under sustained load there is always something to read and this future never
            // waits; spend tokio's cooperative budget so other queues on the same thread run.
            tokio::task::coop::consume_budget().await;
            return Ok(n);
        }
        if q.idle() {
            return Ok(0);
        }
        let waited = if busy {
            spins += 1;
            if spins < SPINS_PER_YIELD {
                std::hint::spin_loop();
                continue;
            }
            spins = 0;
            let start = *since.get_or_insert_with(std::time::Instant::now);
            if start.elapsed() > idle_timeout {
                Err(HostError::Timeout("no response from the controller"))
            } else {
                tokio::task::yield_now().await;
                Ok(())
            }
        } else {
            match tokio::time::timeout(idle_timeout, q.wait_ready()).await {
                Ok(r) => r,
                Err(_) => Err(HostError::Timeout("no response from the controller")),
            }
        };
        if let Err(e) = waited {
            q.break_link(&e);
            return Err(e);
        }
    }
}

/// Run one command alone on the queue and wait for it: the status is not checked.
pub(crate) async fn execute(
    q: &mut AnyQueue,
    sqe: Sqe,
    dir: DataDir,
    out: &[u8],
    in_len: usize,
) -> Result<(Cqe, Vec<u8>)> {
    if q.in_flight() != 0 {
        return Err(HostError::QueueBusy);
    }
    let len = match dir {
        DataDir::ToController => out.len(),
        DataDir::FromController => in_len,
        DataDir::None => 0,
    };
    q.submit(sqe, dir, len, 0, |b| b.copy_from_slice(out))?
        .ok_or(HostError::QueueBusy)?;
    let mut result = None;
    while result.is_none() {
        drive(
            q,
            &mut |c: Completion<'_>| result = Some((c.cqe, c.data.to_vec())),
            Duration::from_secs(3600), // bounded by the caller's timeout
            false,
        )
        .await?;
    }
    result.ok_or(HostError::Disconnected)
}

/// Fabrics Connect on a fresh queue (and DH-HMAC-CHAP when the controller asks for it), each
/// step bounded by `timeout`. Returns the Connect response (CNTLID in DW0 15:0, SQHD).
async fn fabrics_connect(q: &mut AnyQueue, timeout: Duration, cp: &ConnectParams) -> Result<Cqe> {
    let sqe = ConnectCmd {
        recfmt: 0,
        qid: cp.qid,
        sqsize: cp.entries - 1,
        cattr: if cp.dissqfc { 1 << 2 } else { 0 },
        kato: cp.kato_ms,
    }
    .to_sqe(CommandId(0));
    let data = ConnectData {
        hostid: cp.hostid,
        cntlid: cp.cntlid,
        subnqn: cp.subnqn.clone(),
        hostnqn: cp.hostnqn.clone(),
    }
    .encode();
    let (cqe, _) = tokio::time::timeout(timeout, execute(q, sqe, DataDir::ToController, &data, 0))
        .await
        .map_err(|_| HostError::Timeout("Fabrics Connect"))??;
    if !cqe.status.is_success() {
        return Err(HostError::ConnectRejected {
            status: cqe.status,
            dw0: cqe.dw0,
        });
    }
    // Connect response DW0: bits 15:0 CNTLID, bit 17 ATR (authentication required).
    if cqe.dw0 & (1 << 17) != 0 {
        let Some(keys) = &cp.dhchap else {
            return Err(HostError::Auth(
                "the controller requires DH-HMAC-CHAP authentication; give the host's secret \
                 (--dhchap-secret)"
                    .into(),
            ));
        };
        tokio::time::timeout(timeout, authenticate(q, cp, keys))
            .await
            .map_err(|_| HostError::Timeout("DH-HMAC-CHAP authentication"))??;
    }
    Ok(cqe)
}

/// DH-HMAC-CHAP on this queue (NVMe Base 2.x 8.3.4.5): Negotiate, Challenge, Reply,
/// Success1 and, bidirectionally, Success2 — or the Failure2 the exchange calls for.
async fn authenticate(q: &mut AnyQueue, cp: &ConnectParams, keys: &DhchapKeys) -> Result<()> {
    use nvme_auth::host::RECEIVE_ALLOC_LEN;
    let cfg = std::sync::Arc::new(nvme_auth::AuthConfig::new(
        &keys.host,
        keys.ctrl.as_ref(),
        &cp.hostnqn,
        &cp.subnqn,
    ));
    let mut a = nvme_auth::HostAuth::with_os_random(cfg);
    let negotiate = a.start(cp.qid.0);
    auth_send(q, &negotiate).await?;
    let challenge = auth_receive(q, RECEIVE_ALLOC_LEN).await?;
    let reply = match a.handle_challenge(&challenge) {
        Ok(r) => r,
        Err(e) => return Err(auth_failed(q, e).await),
    };
    auth_send(q, &reply).await?;
    let success1 = auth_receive(q, RECEIVE_ALLOC_LEN).await?;
    match a.handle_success1(&success1) {
        Ok(Some(success2)) => auth_send(q, &success2).await?,
        Ok(None) => {}
        Err(e) => return Err(auth_failed(q, e).await),
    }
    if let Some((hash, group)) = a.negotiated() {
        tracing::debug!(qid = cp.qid.0, %hash, dhgroup = %group.name(), bidirectional = keys.ctrl.is_some(), "authenticated (DH-HMAC-CHAP)");
    }
    Ok(())
}

/// Send the Failure2 the host's side calls for (best effort), and say why.
async fn auth_failed(q: &mut AnyQueue, e: nvme_auth::HostError) -> HostError {
    if let Some(f2) = &e.failure2 {
        let _ = auth_send(q, f2).await;
    }
    HostError::Auth(auth_failure_text(&e.kind))
}

async fn auth_send(q: &mut AnyQueue, payload: &[u8]) -> Result<()> {
    let mut sqe = Sqe::new(nvme_spec::opcode::admin::FABRICS, CommandId(0));
    sqe.set_fctype(nvme_spec::opcode::fctype::AUTH_SEND);
    sqe.set_cdw(10, nvme_auth::msg::command_cdw10());
    sqe.set_cdw(11, payload.len() as u32);
    let (cqe, _) = execute(q, sqe, DataDir::ToController, payload, 0).await?;
    if !cqe.status.is_success() {
        return Err(HostError::Status(cqe.status));
    }
    Ok(())
}

async fn auth_receive(q: &mut AnyQueue, al: u32) -> Result<Vec<u8>> {
    let mut sqe = Sqe::new(nvme_spec::opcode::admin::FABRICS, CommandId(0));
    sqe.set_fctype(nvme_spec::opcode::fctype::AUTH_RECV);
    sqe.set_cdw(10, nvme_auth::msg::command_cdw10());
    sqe.set_cdw(11, al);
    let (cqe, data) = execute(q, sqe, DataDir::FromController, &[], al as usize).await?;
    if !cqe.status.is_success() {
        return Err(HostError::Status(cqe.status));
    }
    Ok(data)
}

/// What a failed DH-HMAC-CHAP exchange means, in words a person can act on.
fn auth_failure_text(k: &nvme_auth::HostErrorKind) -> String {
    use nvme_auth::{FailureReason, HostErrorKind};
    let hint = match k {
        HostErrorKind::ControllerFailure { explanation, .. } => {
            match FailureReason::from_u8(*explanation) {
                Some(FailureReason::Failed) => {
                    "the controller rejected our response: wrong --dhchap-secret for this host NQN?"
                }
                Some(FailureReason::HashUnusable) => "no hash function both sides accept",
                Some(FailureReason::DhGroupUnusable) => "no DH group both sides accept",
                Some(FailureReason::ConcatMismatch) => "secure channel concatenation mismatch",
                _ => "",
            }
        }
        HostErrorKind::ControllerResponseMismatch => {
            "the controller's response is wrong: wrong --dhchap-ctrl-secret, or not the \
             controller we meant"
        }
        _ => "",
    };
    if hint.is_empty() {
        k.to_string()
    } else {
        format!("{hint} ({k})")
    }
}
