//! Adaptive polling, shared by the run loops (the TCP reactor and the RDMA poller): poll
//! without sleeping while work flows or is waiting, sleep when it stops, tick every
//! [`TICK`].

use std::time::{Duration, Instant};

/// How often the tick duties (timers, deadlines, idle buffers: `crate::duties::on_tick`) run.
pub(crate) const TICK: Duration = Duration::from_millis(500);

/// When a run loop polls, sleeps and ticks.
#[derive(Debug)]
pub(crate) struct Pace {
    /// Keep polling without sleeping for this long after work (0: event-driven).
    spin: Duration,
    last_work: Instant,
    next_tick: Instant,
}

impl Pace {
    pub(crate) fn new(spin: Duration, now: Instant) -> Pace {
        Pace {
            spin,
            last_work: now,
            next_tick: now + TICK,
        }
    }

    /// Poll without sleeping: work is waiting (`hot`: ready connections, deferred commands)
    /// or the spin window since the last work is still open.
    #[inline]
    pub(crate) fn spinning(&self, now: Instant, hot: bool) -> bool {
        hot || now.duration_since(self.last_work) < self.spin
    }

    /// The longest sleep from `now`: until the next tick, at most `max`.
    #[inline]
    pub(crate) fn sleep(&self, now: Instant, max: Duration) -> Duration {
        self.next_tick.saturating_duration_since(now).min(max)
    }

    /// This round did work (at `now`): the spin window restarts.
    #[inline]
    pub(crate) fn worked(&mut self, now: Instant) {
        self.last_work = now;
    }

    /// True once per [`TICK`]: the tick duties are due.
    #[inline]
    pub(crate) fn tick_due(&mut self, now: Instant) -> bool {
        if now < self.next_tick {
            return false;
        }
        self.next_tick = now + TICK;
        true
    }
}
