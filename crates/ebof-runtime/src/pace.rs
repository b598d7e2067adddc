//! Adaptive polling, shared by the run loops (the TCP reactor and the RDMA poller): poll
//! without sleeping while work flows or is waiting, sleep when it stops, and do the loop's
//! own chores (the stop flag while spinning, freed memory back to the OS, ended queues) every
//! [`CHORES`]. The queues' timers are not here: each queue has one deadline
//! (`crate::duties::poll_timeout`), kept in the loop's `crate::timers::Timers`.

use std::time::{Duration, Instant};

/// How often a run loop does its own chores.
pub(crate) const CHORES: Duration = Duration::from_millis(500);

/// When a run loop polls, sleeps and does its chores.
#[derive(Debug)]
pub(crate) struct Pace {
    /// Keep polling without sleeping for this long after work (0: event-driven).
    spin: Duration,
    last_work: Instant,
    next_chores: Instant,
}

impl Pace {
    pub(crate) fn new(spin: Duration, now: Instant) -> Pace {
        Pace {
            spin,
            last_work: now,
            next_chores: now + CHORES,
        }
    }

    /// Poll without sleeping: work is waiting (`hot`: ready connections, deferred commands)
    /// or the spin window since the last work is still open.
    #[inline]
    pub(crate) fn spinning(&self, now: Instant, hot: bool) -> bool {
        hot || now.duration_since(self.last_work) < self.spin
    }

    /// The longest sleep from `now`: until the next chores, at most `max`.
    #[inline]
    pub(crate) fn sleep(&self, now: Instant, max: Duration) -> Duration {
        self.next_chores.saturating_duration_since(now).min(max)
    }

    /// This round did work (at `now`): the spin window restarts.
    #[inline]
    pub(crate) fn worked(&mut self, now: Instant) {
        self.last_work = now;
    }

    /// True once per [`CHORES`]: the loop's chores are due.
    #[inline]
    pub(crate) fn chores_due(&mut self, now: Instant) -> bool {
        if now < self.next_chores {
            return false;
        }
        self.next_chores = now + CHORES;
        true
    }
}
