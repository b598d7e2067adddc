//! The mirror's side of the witness (ADR 0028): who may be primary of a mirrored volume.
//!
//! How the mirror uses it:
//! - the **primary** calls [`WitnessClient::request`] with [`LeaseOpCode::Acquire`], its epoch
//!   and `peer_in_sync` = "the secondary has every write I acknowledged", every
//!   [`LeaseClock::renew_due`] (lease/4). Before it completes a write alone (link down) it renews
//!   with `peer_in_sync = false` and goes degraded only if that is granted. It feeds each answer
//!   to [`LeaseClock::granted`] with the time it *sent* the request, and completes no write once
//!   [`LeaseClock::is_valid`] is false (lease × 0.9 after the last granted send: the witness's
//!   clock started later, so its lease ends after ours even with 10 % drift).
//! - the **secondary** asks every lease/4 with `Acquire` and epoch + 1; granted → promote
//!   (fence first, then persist the epoch, then the role). The witness grants it only once the
//!   old primary's lease has expired on the witness's clock and its last report said in sync.
//! - an unreachable witness is a refusal: the client reconnects on the next request, and each
//!   request is bounded by the client's timeout.
//!
//! [`LeaseClock`] is sans-IO (time is passed in); [`WitnessClient`] talks NVMe/TCP through
//! `nvmf-host` to the witness subsystem ([`WITNESS_NQN`]) with the vendor admin command
//! Witness Lease (C5h).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use nvme_spec::ebof_vendor::{LeaseReplyDw, MAX_LEASE_MS, WitnessLease};
use nvme_spec::{CommandId, Sqe};
use nvmf_host::{Controller, DataDir, HostConfig, HostError};

pub use nvme_spec::ebof_vendor::LeaseOpCode;

/// The witness subsystem NQN (the same as `nvmf_target::witness::WITNESS_NQN`).
pub const WITNESS_NQN: &str = "nqn.2026-11.io.ebof:witness";

/// The lease as this box sees it by its own monotonic clock.
#[derive(Clone, Copy, Debug)]
pub struct LeaseClock {
    lease: Duration,
    /// The length the witness last granted (it caps leases at its `lease_max_ms`).
    term: Duration,
    valid_until: Option<Instant>,
    last_sent: Option<Instant>,
}

impl LeaseClock {
    /// A clock for leases of `lease`; not valid until a grant.
    pub fn new(lease: Duration) -> LeaseClock {
        LeaseClock {
            lease,
            term: lease,
            valid_until: None,
            last_sent: None,
        }
    }

    /// The lease duration asked for.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// A request was sent at `sent` (renewal scheduling counts from sends).
    pub fn sent(&mut self, sent: Instant) {
        self.last_sent = Some(sent);
    }

    /// The request sent at `sent` was granted: valid until `sent + lease × 0.9` (never moves
    /// backwards: an older grant arriving late changes nothing).
    pub fn granted(&mut self, sent: Instant) {
        self.granted_for(sent, self.lease);
    }

    /// The request sent at `sent` was granted for `term` (what the witness's reply says it
    /// granted: it caps a lease at its maximum): valid until `sent + min(lease, term) × 0.9`,
    /// and renewals come every quarter of that.
    pub fn granted_for(&mut self, sent: Instant, term: Duration) {
        self.term = if term.is_zero() {
            self.lease
        } else {
            term.min(self.lease)
        };
        let until = sent + self.term.mul_f64(0.9);
        self.valid_until = Some(self.valid_until.map_or(until, |u| u.max(until)));
    }

    /// The witness refused: the lease is gone now (a refusal means another holder or a stale
    /// report; never trust the old grant after it).
    pub fn refused(&mut self) {
        self.valid_until = None;
    }

    /// The lease is held at `now`.
    pub fn is_valid(&self, now: Instant) -> bool {
        self.valid_until.is_some_and(|u| now < u)
    }

    /// Time left at `now` (zero when not held).
    pub fn left(&self, now: Instant) -> Duration {
        self.valid_until
            .map_or(Duration::ZERO, |u| u.saturating_duration_since(now))
    }

    /// A request is due at `now`: none sent yet, or lease/4 since the last one.
    pub fn renew_due(&self, now: Instant) -> bool {
        self.last_sent
            .is_none_or(|s| now.saturating_duration_since(s) >= self.term / 4)
    }

    /// When the next request is due.
    pub fn next_renewal(&self) -> Option<Instant> {
        self.last_sent.map(|s| s + self.term / 4)
    }
}

/// The witness's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WitnessReply {
    /// The requester holds the lease now (Acquire) or gave it up (Release).
    pub granted: bool,
    /// Time left on the current holder's lease, by the witness's clock.
    pub left: Duration,
}

/// Why a request got no answer (treat as refused).
#[derive(Debug, thiserror::Error)]
pub enum WitnessError {
    /// Connecting or the command failed.
    #[error("witness {addr}: {source}")]
    Host {
        /// The witness.
        addr: SocketAddr,
        /// What failed.
        source: HostError,
    },
    /// No answer within the timeout.
    #[error("witness {0}: no answer in time")]
    Timeout(SocketAddr),
    /// The witness answered with an error status (not a witness, or a malformed request).
    #[error("witness {addr}: status {status:?}")]
    Status {
        /// The witness.
        addr: SocketAddr,
        /// Its status.
        status: nvme_spec::Status,
    },
    /// The lease is outside 1 ms..=60 s.
    #[error("lease {0:?} outside 1 ms..=60 s")]
    Lease(Duration),
}

/// A connection to one witness (reconnects on demand). Async: run it on the mirror's runtime.
pub struct WitnessClient {
    addr: SocketAddr,
    host: HostConfig,
    timeout: Duration,
    ctrl: Option<Controller>,
}

impl WitnessClient {
    /// A client of the witness at `addr`, connecting as `host` (its keys/TLS are used as
    /// configured); each request (with a reconnect if needed) is bounded by `timeout`.
    pub fn new(addr: SocketAddr, host: HostConfig, timeout: Duration) -> WitnessClient {
        let mut host = host;
        host.kato_ms = 0;
        host.io_queues = 0;
        host.async_events = false;
        WitnessClient {
            addr,
            host,
            timeout,
            ctrl: None,
        }
    }

    /// The witness's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Ask the witness about `volume` for `holder` (see the module docs). A failure drops the
    /// connection; the next request reconnects.
    pub async fn request(
        &mut self,
        volume: [u8; 16],
        holder: [u8; 16],
        epoch: u64,
        lease: Duration,
        op: LeaseOpCode,
        peer_in_sync: bool,
    ) -> Result<WitnessReply, WitnessError> {
        let ms = u32::try_from(lease.as_millis()).unwrap_or(u32::MAX);
        if ms == 0 || ms > MAX_LEASE_MS {
            return Err(WitnessError::Lease(lease));
        }
        let data = WitnessLease {
            volume,
            holder,
            epoch,
            lease_ms: ms,
            op,
            peer_in_sync,
        }
        .encode_data();
        let addr = self.addr;
        let r = tokio::time::timeout(self.timeout, self.exchange(data)).await;
        match r {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(e)) => {
                self.drop_ctrl().await;
                Err(e)
            }
            Err(_) => {
                self.drop_ctrl().await;
                Err(WitnessError::Timeout(addr))
            }
        }
    }

    /// Close the connection (if any).
    pub async fn close(&mut self) {
        self.drop_ctrl().await;
    }

    async fn drop_ctrl(&mut self) {
        if let Some(c) = self.ctrl.take() {
            let _ = tokio::time::timeout(self.timeout, c.disconnect()).await;
        }
    }

    async fn exchange(&mut self, data: [u8; 64]) -> Result<WitnessReply, WitnessError> {
        let addr = self.addr;
        let host_err = |source| WitnessError::Host { addr, source };
        if self.ctrl.is_none() {
            let c = Controller::connect(addr, WITNESS_NQN, &self.host)
                .await
                .map_err(host_err)?;
            self.ctrl = Some(c);
        }
        let Some(ctrl) = self.ctrl.as_ref() else {
            return Err(WitnessError::Timeout(addr));
        };
        let mut sqe = Sqe::new(0, CommandId(0));
        WitnessLease::encode_sqe(&mut sqe);
        let (cqe, _) = ctrl
            .admin_raw(sqe, DataDir::ToController, data.to_vec(), 0)
            .await
            .map_err(host_err)?;
        if !cqe.status.is_success() {
            return Err(WitnessError::Status {
                addr,
                status: cqe.status,
            });
        }
        let dw = LeaseReplyDw::from_cqe(&cqe);
        Ok(WitnessReply {
            granted: dw.granted,
            left: Duration::from_millis(u64::from(dw.ms_left)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: Duration = Duration::from_secs(4);

    #[test]
    fn valid_for_nine_tenths_of_the_lease_from_the_send() {
        let t0 = Instant::now();
        let mut c = LeaseClock::new(L);
        assert!(!c.is_valid(t0));
        assert!(c.renew_due(t0));
        c.sent(t0);
        // the answer arrives later; validity counts from the send
        c.granted(t0);
        let edge = t0 + L.mul_f64(0.9);
        assert!(c.is_valid(t0 + Duration::from_millis(3599)));
        assert!(!c.is_valid(edge));
        assert_eq!(
            c.left(t0 + Duration::from_secs(1)),
            Duration::from_millis(2600)
        );
        assert_eq!(c.left(edge + L), Duration::ZERO);
    }

    #[test]
    fn renewal_every_quarter_lease_and_a_late_grant_never_shortens() {
        let t0 = Instant::now();
        let mut c = LeaseClock::new(L);
        c.sent(t0);
        assert!(!c.renew_due(t0 + Duration::from_millis(999)));
        assert!(c.renew_due(t0 + Duration::from_secs(1)));
        assert_eq!(c.next_renewal(), Some(t0 + Duration::from_secs(1)));
        let t1 = t0 + Duration::from_secs(1);
        c.sent(t1);
        c.granted(t1);
        // the older request's grant arrives after the newer one's
        c.granted(t0);
        assert!(c.is_valid(t1 + Duration::from_millis(3599)));
    }

    #[test]
    fn a_refusal_ends_the_lease_at_once() {
        let t0 = Instant::now();
        let mut c = LeaseClock::new(L);
        c.granted(t0);
        assert!(c.is_valid(t0));
        c.refused();
        assert!(!c.is_valid(t0));
        assert_eq!(c.left(t0), Duration::ZERO);
    }
}

#[cfg(test)]
mod clock_tests {
    use super::*;

    /// A witness that grants less than asked (its `lease_max_ms`) is believed: the holder
    /// gives up within the shorter term and renews four times per term.
    #[test]
    fn a_capped_grant_shortens_the_lease() {
        let t0 = Instant::now();
        let mut c = LeaseClock::new(Duration::from_secs(8));
        c.sent(t0);
        c.granted_for(t0, Duration::from_secs(2));
        assert!(c.is_valid(t0 + Duration::from_millis(1700)));
        assert!(!c.is_valid(t0 + Duration::from_millis(1900)));
        assert_eq!(c.next_renewal(), Some(t0 + Duration::from_millis(500)));
        // a longer grant than asked counts as asked
        let mut c = LeaseClock::new(Duration::from_secs(1));
        c.granted_for(t0, Duration::from_secs(5));
        assert!(!c.is_valid(t0 + Duration::from_millis(950)));
    }
}
