//! Adaptive polling, shared by the run loops (the TCP reactor and the RDMA poller): poll
//! without sleeping while work flows or is waiting, sleep when it stops, and do the loop's
//! own chores (the stop flag while spinning, freed memory back to the OS, ended queues) every
//! [`CHORES`]. The queues' timers are not here: each queue has one deadline
//! (`crate::duties::poll_timeout`), kept in the loop's `crate::timers::Timers`.
//!
//! It also keeps the loop's load (`nvmf_target::load`): how long the loop has run and how much
//! of that went to turns that did work, from the clock reads the loop makes anyway.

use nvmf_target::load::LoopLoad;
use std::sync::Arc;
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
    /// When the loop started, when its last turn ended, and its busy time so far.
    born: Instant,
    turn_end: Instant,
    busy: Duration,
    load: Arc<LoopLoad>,
}

impl Pace {
    /// A loop starting at `now` that publishes its load to `load` at the end of every turn.
    pub(crate) fn new(spin: Duration, now: Instant, load: Arc<LoopLoad>) -> Pace {
        Pace {
            spin,
            last_work: now,
            next_chores: now + CHORES,
            born: now,
            turn_end: now,
            busy: Duration::ZERO,
            load,
        }
    }

    /// A turn of the loop ended at `end`. It began its work at `woke` (when epoll returned);
    /// `slept` if it waited in epoll first. A turn that did work is busy from the end of the
    /// previous turn (its poll included) or, after a sleep, from `woke`; the spin window
    /// restarts. An idle turn adds nothing to the busy time.
    #[inline]
    pub(crate) fn turn(&mut self, woke: Instant, end: Instant, work: bool, slept: bool) {
        if work {
            let from = if slept { woke } else { self.turn_end };
            self.busy += end.saturating_duration_since(from);
            self.last_work = end;
        }
        self.turn_end = end;
        self.load
            .publish(self.busy, end.saturating_duration_since(self.born));
    }

    /// Time spent on turns that did work.
    #[cfg(test)]
    pub(crate) fn busy(&self) -> Duration {
        self.busy
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

#[cfg(test)]
mod tests {
    use super::*;
    use nvmf_target::load::{LoadTable, LoopKind};

    #[test]
    fn busy_time_counts_working_turns_only() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let table = LoadTable::default();
        let mut p = Pace::new(
            Duration::from_millis(1),
            t0,
            table.register(3, LoopKind::Tcp),
        );
        // Spinning turn with work: busy from the previous turn's end.
        p.turn(ms(1), ms(2), true, false);
        assert_eq!(p.busy(), Duration::from_millis(2));
        assert!(p.spinning(ms(2), false));
        // Idle spinning turns add nothing.
        p.turn(ms(3), ms(4), false, false);
        assert_eq!(p.busy(), Duration::from_millis(2));
        assert!(
            !p.spinning(ms(4), false),
            "the spin window closed 1 ms after the last work"
        );
        // A turn after a sleep is busy from when epoll returned, not from the sleep's start.
        p.turn(ms(10), ms(13), true, true);
        assert_eq!(p.busy(), Duration::from_millis(5));
        let s = table.snapshot();
        assert_eq!(s.len(), 1);
        assert_eq!(
            (s[0].core, s[0].busy, s[0].run),
            (3, Duration::from_millis(5), Duration::from_millis(13))
        );
    }
}
