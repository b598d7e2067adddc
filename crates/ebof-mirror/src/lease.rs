//! The lease loop (with a witness): a dedicated thread with a tokio current-thread runtime.
//!
//! - **Primary**: renews every lease/4 (Acquire, our epoch, `peer_in_sync` = the peer is in
//!   sync now and no write waits to complete alone). Validity = send time of the last granted
//!   request + lease × 0.9 ([`LeaseClock`]), published in `Shared` for the backend; once it
//!   lapses the primary is fenced (writes and flushes refused, the sink told) until a grant.
//!   A refusal while another holder's lease runs (reply `left` > 0) demotes us to secondary.
//! - **A write that could not reach the peer** ([`Ask::Degrade`]): it completes alone only once
//!   the witness holds our "peer not in sync" report: a grant of a not-in-sync request sent
//!   after the failure, or the current run of granted not-in-sync reports (`Shared::covered`;
//!   the witness's record of our report changes only by our own requests). Refused or
//!   unreachable → fenced, and the write fails.
//! - **Secondary**: asks every lease/4 for the lease at epoch + 1, but only while its copy is
//!   synced at the current epoch ([`crate::Fence::synced_epoch`]); granted → promotion.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, mpsc};

use crate::role::Roles;
use crate::witness::{LeaseClock, LeaseOpCode, WitnessClient, WitnessReply};
use crate::worker::{Inbox, Worker};
use crate::{PeerState, Role};

/// A question from the write path to the lease loop.
pub(crate) enum Ask {
    /// A replicated operation's remote half failed at `failed_at`: may it complete alone?
    Degrade {
        failed_at: Instant,
        reply: std::sync::mpsc::SyncSender<bool>,
    },
}

/// The lease thread and the channel to it.
pub(crate) type LeaseHandle = Worker<Ask>;

/// Each witness request (reconnect included) is bounded by lease / 3.
fn request_timeout(lease: Duration) -> Duration {
    (lease / 3).max(Duration::from_millis(50))
}

/// Start the lease loop of `roles` (None: no witness configured).
pub(crate) fn start(roles: Arc<Roles>) -> std::io::Result<Option<LeaseHandle>> {
    let spec = &roles.shared.spec;
    let Some(addr) = spec.witness else {
        return Ok(None);
    };
    let host = nvmf_host::HostConfig {
        hostnqn: spec.link_hostnqn.clone(),
        ..spec.host.clone()
    };
    let client = WitnessClient::new(addr, host, request_timeout(spec.lease));
    let name = format!("mirror-lease-{}", spec.nsid);
    // A stop sends no Release: a stopped box's lease simply runs out.
    Worker::spawn(name, move |inbox: Inbox<Ask>| async move {
        let clock = LeaseClock::new(roles.shared.spec.lease);
        let mut l = LeaseLoop {
            roles,
            client,
            clock,
            rx: inbox.rx,
            waiters: Vec::new(),
            stop: inbox.stop,
            wake: inbox.wake,
        };
        l.run().await;
    })
    .map(Some)
}

struct LeaseLoop {
    roles: Arc<Roles>,
    client: WitnessClient,
    clock: LeaseClock,
    rx: mpsc::UnboundedReceiver<Ask>,
    /// Writes waiting to complete alone: (failure time, answer).
    waiters: Vec<(Instant, std::sync::mpsc::SyncSender<bool>)>,
    stop: Arc<AtomicBool>,
    wake: Arc<Notify>,
}

impl LeaseLoop {
    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    async fn run(&mut self) {
        while !self.stopping() {
            let now = Instant::now();
            let primary = self.roles.shared.role() == Role::Primary;
            let report = primary && self.roles.shared.report_due.swap(false, Ordering::AcqRel);
            if self.clock.renew_due(now) || (primary && !self.waiters.is_empty()) || report {
                let stop = self.wake.clone();
                tokio::select! {
                    _ = self.step(primary) => {}
                    _ = stop.notified() => {}
                }
                continue;
            }
            self.check_expiry(Instant::now());
            let mut next = self.clock.next_renewal().unwrap_or(now);
            let left = self.clock.left(now);
            if primary && !left.is_zero() {
                next = next.min(now + left);
            }
            let shared = self.roles.shared.clone();
            tokio::select! {
                a = self.rx.recv() => match a {
                    Some(a) => self.ask(a),
                    None => break,
                },
                _ = tokio::time::sleep_until(next.into()) => {}
                _ = self.wake.notified() => {}
                _ = shared.nudge.notified() => {}
            }
        }
        self.rx.close();
        for (_, w) in self.waiters.drain(..) {
            let _ = w.send(false);
        }
        while let Ok(Ask::Degrade { reply, .. }) = self.rx.try_recv() {
            let _ = reply.send(false);
        }
        let _ = tokio::time::timeout(Duration::from_millis(200), self.client.close()).await;
    }

    /// One request to the witness for our role.
    async fn step(&mut self, primary: bool) {
        if primary {
            self.renew().await;
        } else {
            self.seek_promotion().await;
        }
        self.publish();
    }

    fn publish(&self) {
        let now = Instant::now();
        let until = self.clock.is_valid(now).then(|| now + self.clock.left(now));
        self.roles.shared.set_lease_until(until);
    }

    /// Our lease lapsed on our clock: fence (a forced primary serves on).
    fn check_expiry(&mut self, now: Instant) {
        let shared = &self.roles.shared;
        if shared.role() == Role::Primary
            && !self.clock.is_valid(now)
            && !shared.forced.load(Ordering::Acquire)
        {
            shared.covered.store(false, Ordering::Release);
            self.publish();
            self.roles.set_fenced(true);
        }
    }

    /// A question from the write path.
    fn ask(&mut self, a: Ask) {
        let Ask::Degrade { failed_at, reply } = a;
        let shared = &self.roles.shared;
        if shared.role() != Role::Primary {
            let _ = reply.send(false);
        } else if shared.forced.load(Ordering::Acquire)
            || (shared.covered.load(Ordering::Acquire) && shared.lease_ok())
        {
            let _ = reply.send(true);
        } else {
            self.waiters.push((failed_at, reply));
        }
    }

    async fn request(&mut self, epoch: u64, in_sync: bool) -> (Instant, Option<WitnessReply>) {
        let spec = &self.roles.shared.spec;
        let (volume, holder, lease) = (spec.volume_id, spec.holder_id, spec.lease);
        let sent = Instant::now();
        self.clock.sent(sent);
        let r = self
            .client
            .request(volume, holder, epoch, lease, LeaseOpCode::Acquire, in_sync)
            .await;
        match r {
            Ok(r) => (sent, Some(r)),
            Err(e) => {
                tracing::debug!(nsid = spec.nsid, "mirror lease request: {e}");
                (sent, None)
            }
        }
    }

    /// The primary's renewal (see the module docs).
    async fn renew(&mut self) {
        let shared = self.roles.shared.clone();
        let mut in_sync = false;
        if self.waiters.is_empty() && shared.peer() == PeerState::InSync {
            // The witness may record "in sync" from now on: no write may complete alone on
            // the strength of an older not-in-sync report. Cleared first, then the peer read
            // again: a write whose remote half failed marks the peer degraded (under the
            // peer's mutex) before it reads `covered`, so either it sees `covered` cleared
            // and waits for a fresh grant, or we see the peer degraded and report so.
            shared.covered.store(false, Ordering::SeqCst);
            in_sync = shared.peer() == PeerState::InSync;
        }
        let (sent, reply) = self.request(shared.epoch(), in_sync).await;
        match reply {
            Some(r) if r.granted => {
                self.clock.granted_for(sent, r.left);
                self.publish();
                if !in_sync {
                    shared.covered.store(true, Ordering::Release);
                    for (_, w) in self.waiters.drain(..) {
                        let _ = w.send(true);
                    }
                }
                shared.forced.store(false, Ordering::Release);
                self.roles.set_fenced(false);
            }
            Some(r) => {
                self.clock.refused();
                shared.covered.store(false, Ordering::Release);
                self.publish();
                let forced = shared.forced.load(Ordering::Acquire);
                if !forced {
                    self.roles.set_fenced(true);
                }
                self.fail_waiters(sent);
                if !forced && !r.left.is_zero() {
                    // Another box holds a live lease (we would have been granted ours).
                    self.roles.demote();
                }
            }
            None => {
                // Unanswered: the last grant still counts until it lapses, but a write that
                // waits for a fresh grant fails (and fences us until the next grant).
                self.fail_waiters(sent);
            }
        }
    }

    /// Fail the waiters whose failure came before `sent` (a request sent after it was not
    /// granted), fencing us first (unless forced) so a failed write is never seen unfenced.
    fn fail_waiters(&mut self, sent: Instant) {
        if !self.waiters.iter().any(|(at, _)| *at <= sent) {
            return;
        }
        if !self.roles.shared.forced.load(Ordering::Acquire) {
            self.roles.set_fenced(true);
        }
        self.waiters.retain(|(at, w)| {
            if *at <= sent {
                let _ = w.send(false);
                false
            } else {
                true
            }
        });
    }

    /// The secondary's request for promotion, only from a copy synced at the current epoch.
    async fn seek_promotion(&mut self) {
        for (_, w) in self.waiters.drain(..) {
            let _ = w.send(false);
        }
        let fence_epoch = self.roles.fence.epoch();
        self.roles.shared.follow_epoch(fence_epoch);
        let synced = self.roles.fence.synced_epoch();
        let epoch = self.roles.next_epoch();
        if synced == 0 || synced + 1 < epoch {
            // Never synced, or stale: only a manual (forced) promotion may make us primary.
            self.clock.sent(Instant::now());
            return;
        }
        if self.roles.fence.peer_linked() {
            // The primary's link is connected: it is alive (and may be waiting for its lease).
            self.clock.sent(Instant::now());
            return;
        }
        let (sent, reply) = self.request(epoch, false).await;
        let Some(r) = reply.filter(|r| r.granted) else {
            return;
        };
        self.clock.granted_for(sent, r.left);
        self.publish();
        match self.roles.promote(Some(epoch), false) {
            Ok(e) => {
                tracing::info!(
                    nsid = self.roles.shared.spec.nsid,
                    epoch = e,
                    "mirror: the witness granted the lease; now primary"
                );
            }
            Err(e) => tracing::error!(nsid = self.roles.shared.spec.nsid, "mirror promotion: {e}"),
        }
    }
}
