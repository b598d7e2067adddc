//! The admin task: after bring-up the admin queue belongs to it. Admin commands reach it through
//! a channel, it sends Keep Alive every KATO/2, keeps one Asynchronous Event Request
//! outstanding, enforces each command's deadline, and fails everyone waiting when the
//! association ends.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use nvme_spec::opcode::admin;
use nvme_spec::{CommandId, Cqe, Sqe};
use tokio::sync::{mpsc, oneshot};

use crate::command::{Completion, DataDir};
use crate::error::{HostError, Result};
use crate::transport::AnyQueue;

/// Housekeeping period of the admin task: keep-alive due check and command deadlines.
pub(super) const ADMIN_TICK: Duration = Duration::from_millis(250);
/// Depth of the queue of admin requests waiting for the task.
const ADMIN_CHANNEL_DEPTH: usize = 64;
/// Events kept for a slow reader before new ones are dropped.
const EVENT_CHANNEL_DEPTH: usize = 64;

/// An Asynchronous Event (completion of an Asynchronous Event Request, NVMe Base 2.0, 5.2).
/// To re-arm events of this type, read `log_page` (without RAE) with
/// [`Controller::get_log_page`](crate::Controller::get_log_page).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AsyncEvent {
    /// Asynchronous Event Type, DW0 bits 2:0 (0 error, 1 SMART/health, 2 notice, 6 I/O command
    /// set specific, 7 vendor specific).
    pub event_type: u8,
    /// Asynchronous Event Information, DW0 bits 15:8 (for notices: 0 namespace attribute
    /// changed, 1 firmware activation, 3 ANA change, F0h discovery log change...).
    pub info: u8,
    /// Log Page Identifier to read, DW0 bits 23:16.
    pub log_page: u8,
}

impl AsyncEvent {
    fn from_dw0(dw0: u32) -> AsyncEvent {
        AsyncEvent {
            event_type: (dw0 & 0x7) as u8,
            info: ((dw0 >> 8) & 0xFF) as u8,
            log_page: ((dw0 >> 16) & 0xFF) as u8,
        }
    }
}

/// A request to the admin task.
pub(super) enum AdminReq {
    Cmd {
        sqe: Sqe,
        dir: DataDir,
        out: Vec<u8>,
        in_len: usize,
        reply: oneshot::Sender<Result<(Cqe, Vec<u8>)>>,
    },
    Close,
}

/// Who waits for an outstanding admin command.
enum Waiter {
    Idle,
    User {
        reply: oneshot::Sender<Result<(Cqe, Vec<u8>)>>,
        deadline: Instant,
    },
    KeepAlive {
        deadline: Instant,
    },
    AsyncEvent,
}

/// Hand the admin queue `q` to a new task on the current tokio runtime: Keep Alive every
/// `keep_alive`, an AER kept outstanding if `aer`, `timeout` per command. Returns the request
/// channel, the event channel and the task.
pub(super) fn spawn(
    q: AnyQueue,
    keep_alive: Option<Duration>,
    aer: bool,
    timeout: Duration,
) -> (
    mpsc::Sender<AdminReq>,
    mpsc::Receiver<AsyncEvent>,
    tokio::task::JoinHandle<()>,
) {
    let (tx, rx) = mpsc::channel(ADMIN_CHANNEL_DEPTH);
    let (ev_tx, ev_rx) = mpsc::channel(EVENT_CHANNEL_DEPTH);
    let waiters = (0..q.capacity()).map(|_| Waiter::Idle).collect();
    let task = AdminTask {
        q,
        rx,
        events: ev_tx,
        waiters,
        backlog: VecDeque::new(),
        keep_alive,
        aer,
        timeout,
    };
    (tx, ev_rx, tokio::spawn(task.run()))
}

/// What the admin task needs besides the queue.
struct AdminTask {
    q: AnyQueue,
    rx: mpsc::Receiver<AdminReq>,
    events: mpsc::Sender<AsyncEvent>,
    waiters: Vec<Waiter>,
    backlog: VecDeque<AdminReq>,
    keep_alive: Option<Duration>,
    aer: bool,
    timeout: Duration,
}

impl AdminTask {
    async fn run(mut self) {
        if let Err(e) = self.run_loop().await {
            tracing::warn!(peer = %self.q.peer(), error = %e, "admin queue failed");
        }
        // Everyone still waiting learns that the association is gone.
        for w in self.waiters.drain(..) {
            if let Waiter::User { reply, .. } = w {
                let _ = reply.send(Err(HostError::Disconnected));
            }
        }
        self.rx.close();
        while let Ok(req) = self.rx.try_recv() {
            self.backlog.push_back(req);
        }
        for req in self.backlog.drain(..) {
            if let AdminReq::Cmd { reply, .. } = req {
                let _ = reply.send(Err(HostError::Disconnected));
            }
        }
    }

    async fn run_loop(&mut self) -> Result<()> {
        let mut tick = tokio::time::interval(ADMIN_TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_keep_alive = Instant::now();
        let mut aer_wanted = self.aer;
        loop {
            if aer_wanted && self.q.can_submit() {
                let sqe = Sqe::new(admin::ASYNC_EVENT_REQUEST, CommandId(0));
                if let Some(cid) = self.q.submit(sqe, DataDir::None, 0, 0, |_| {})? {
                    self.waiters[usize::from(cid.0)] = Waiter::AsyncEvent;
                    aer_wanted = false;
                }
            }
            while self.q.can_submit() {
                let Some(req) = self.backlog.pop_front() else {
                    break;
                };
                match req {
                    AdminReq::Cmd {
                        sqe,
                        dir,
                        out,
                        in_len,
                        reply,
                    } => {
                        let len = if dir == DataDir::ToController {
                            out.len()
                        } else {
                            in_len
                        };
                        match self.q.submit(sqe, dir, len, 0, |b| b.copy_from_slice(&out)) {
                            Ok(Some(cid)) => {
                                let deadline = Instant::now() + self.timeout;
                                self.waiters[usize::from(cid.0)] = Waiter::User { reply, deadline };
                            }
                            Ok(None) => {
                                self.backlog.push_front(AdminReq::Cmd {
                                    sqe,
                                    dir,
                                    out,
                                    in_len,
                                    reply,
                                });
                                break;
                            }
                            Err(e) if e.is_fatal_for_connection() => {
                                let _ = reply.send(Err(HostError::Disconnected));
                                return Err(e);
                            }
                            Err(e) => {
                                let _ = reply.send(Err(e));
                            }
                        }
                    }
                    AdminReq::Close => return Ok(()),
                }
            }
            tokio::select! {
                r = self.q.wait_ready() => {
                    r?;
                    let waiters = &mut self.waiters;
                    let events = &self.events;
                    let mut rearm = false;
                    self.q.try_io(&mut |c: Completion<'_>| {
                        route_completion(waiters, events, &mut rearm, c);
                    })?;
                    aer_wanted |= rearm;
                }
                req = self.rx.recv() => match req {
                    Some(AdminReq::Close) => return Ok(()),
                    Some(r) => self.backlog.push_back(r),
                    // Every handle is gone: close the association.
                    None => return Ok(()),
                },
                _ = tick.tick() => {
                    let now = Instant::now();
                    for w in &self.waiters {
                        match w {
                            Waiter::User { deadline, .. } | Waiter::KeepAlive { deadline } if *deadline <= now => {
                                return Err(HostError::Timeout("admin command"));
                            }
                            Waiter::Idle | Waiter::User { .. } | Waiter::KeepAlive { .. } | Waiter::AsyncEvent => {}
                        }
                    }
                    if let Some(period) = self.keep_alive
                        && now.duration_since(last_keep_alive) >= period
                        && self.q.can_submit()
                    {
                        let sqe = Sqe::new(admin::KEEP_ALIVE, CommandId(0));
                        if let Some(cid) = self.q.submit(sqe, DataDir::None, 0, 0, |_| {})? {
                            self.waiters[usize::from(cid.0)] = Waiter::KeepAlive { deadline: now + self.timeout };
                            last_keep_alive = now;
                        }
                    }
                    // Flush what the tick queued without waiting for readiness.
                    let waiters = &mut self.waiters;
                    let events = &self.events;
                    let mut rearm = false;
                    self.q.try_io(&mut |c: Completion<'_>| route_completion(waiters, events, &mut rearm, c))?;
                    aer_wanted |= rearm;
                }
            }
        }
    }
}

/// Hand one admin completion to whoever waits for it.
fn route_completion(
    waiters: &mut [Waiter],
    events: &mpsc::Sender<AsyncEvent>,
    rearm: &mut bool,
    c: Completion<'_>,
) {
    let Some(w) = waiters.get_mut(usize::from(c.cid.0)) else {
        return;
    };
    match std::mem::replace(w, Waiter::Idle) {
        Waiter::User { reply, .. } => {
            let _ = reply.send(Ok((c.cqe, c.data.to_vec())));
        }
        Waiter::KeepAlive { .. } => {
            if !c.is_success() {
                tracing::warn!(status = %c.status(), "keep alive failed");
            }
        }
        Waiter::AsyncEvent => {
            if c.is_success() {
                let ev = AsyncEvent::from_dw0(c.cqe.dw0);
                tracing::debug!(?ev, "asynchronous event");
                if events.try_send(ev).is_err() {
                    tracing::warn!(?ev, "asynchronous event dropped (no reader)");
                }
                *rearm = true;
            } else {
                // Aborted (queue teardown) or not supported: stop asking.
                tracing::debug!(status = %c.status(), "asynchronous event request completed with error");
            }
        }
        Waiter::Idle => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn async_event_fields() {
        let e = AsyncEvent::from_dw0(0x0004_0002 | (0xF0 << 8));
        assert_eq!(
            e,
            AsyncEvent {
                event_type: 2,
                info: 0xF0,
                log_page: 4
            }
        );
    }
}
