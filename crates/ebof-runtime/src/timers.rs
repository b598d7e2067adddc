//! The run loops' timer list: each queue's one deadline ([`crate::duties::poll_timeout`]),
//! earliest first. A queue is armed with the deadline it reported; arming it earlier adds an
//! entry, and entries that no longer match what their queue holds are dropped when they come
//! up (lazy removal: no search on the hot path).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Instant;

/// Deadlines of a run loop's queues, by (queue index, generation).
#[derive(Debug, Default)]
pub(crate) struct Timers {
    heap: BinaryHeap<Reverse<(Instant, usize, u64)>>,
}

impl Timers {
    /// Queue `conn` (of `generation`), whose armed deadline is `armed`, reports `at`: arm it
    /// unless it is armed no later already.
    #[inline]
    pub(crate) fn arm(
        &mut self,
        at: Instant,
        conn: usize,
        generation: u64,
        armed: &mut Option<Instant>,
    ) {
        if armed.is_some_and(|a| a <= at) {
            return;
        }
        *armed = Some(at);
        self.heap.push(Reverse((at, conn, generation)));
    }

    /// The earliest deadline (possibly of a stale entry: waking for it early costs one round).
    #[inline]
    pub(crate) fn next(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse((at, _, _))| *at)
    }

    /// Take every entry due at `now`: `due(conn, generation, at)` is called for each, and
    /// the caller checks that the queue is still armed with `at` (else the entry is stale).
    #[inline]
    pub(crate) fn expire(&mut self, now: Instant, mut due: impl FnMut(usize, u64, Instant)) {
        while let Some(Reverse((at, conn, generation))) = self.heap.peek().copied() {
            if at > now {
                return;
            }
            self.heap.pop();
            due(conn, generation, at);
        }
    }
}
