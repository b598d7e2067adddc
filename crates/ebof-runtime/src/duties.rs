//! The driver contract: what every transport driver owes `nvmf_target::Queue`, written once.
//!
//! A transport core (NVMe/TCP: [`crate::conn::ConnCore`]; NVMe/RDMA:
//! [`crate::rdma_core::RdmaQueueCore`]) turns its transport's events into calls on a
//! [`Queue`]. Around those calls the queue needs the same things from every transport; they
//! live here, and a core gets them by implementing [`Driver`] (how to flush completions and
//! give idle buffers back on *its* transport) and calling [`after_batch`], [`io_done`] and
//! [`on_tick`] from its run loop. No run loop re-spells a duty.
//!
//! | when | duty | here |
//! |---|---|---|
//! | after each batch of input (commands, data, RDMA READ done) | run the slots that became ready: inline when the backend does not block, else through the driver's [`Offload`] (its I/O engine) | [`after_batch`] → [`Duties::run`] |
//! | after each batch, while any command is deferred | retry commands deferred at a namespace gate (a fused Compare-and-Write also times out its drain here) | [`after_batch`] → [`Queue::retry_deferred`] |
//! | after each batch | release commands held by their namespace's QoS limits whose tokens have accrued | [`after_batch`] → [`Queue::retry_throttled`] |
//! | after each batch | drain completions into the transport's output | [`after_batch`] → [`Driver::flush`] |
//! | offloaded I/O done | complete the slot, drain completions | [`io_done`] |
//! | when [`poll_timeout`] comes | everything timed, through one deadline (below) | [`handle_timeout`] |
//! | output sent (transport-specific moment) | streamed reads leave their namespace gate | the core: [`Queue::output_sent`] |
//!
//! **Time reaches a driver one way** (quinn's shape): [`poll_timeout`] is the earliest instant
//! the queue needs the run loop back without input, and [`handle_timeout`] does what is due
//! then. The run loop sleeps no longer than the earliest deadline of its queues and calls
//! [`handle_timeout`] for those whose deadline has come. The deadline folds:
//!
//! | timer | when | done by [`handle_timeout`] |
//! |---|---|---|
//! | deferred commands | already due while any wait (the loop does not sleep: a Compare-and-Write waits only for commands already running, at most `CAW_DRAIN_TIMEOUT`) | [`Queue::retry_deferred`] |
//! | QoS wake-up | the earliest instant a throttled command may run (a timer, not a spin) | [`Queue::retry_throttled`] |
//! | periodic timers | every [`nvmf_target::TIMER_PERIOD`] (500 ms, on one grid for all queues) | keep-alive expiry, AER delivery, counters published ([`Queue::poll_timers`]); close when the controller is gone or reset |
//! | handshake | `[target] handshake_timeout_ms` after accept, until Fabrics Connect; then, if the host must authenticate, [`AUTH_TIMEOUT`] from Connect | [`Deadlines`] |
//! | idle buffers | with the periodic timers: a queue that received nothing since the last period gives idle buffers back | [`Driver::release_idle`] |
//!
//! The core never reads the clock: every `now` comes from the driver, and the latency of a
//! command is measured to the driver's [`Clock`] (set with `set_clock`; without one, to the
//! last `now` given, which keeps tests and replays deterministic).
//!
//! A third transport implements [`Driver`], feeds its input through the queue, and calls the
//! functions; that is the whole contract.

use nvme_spec::Status;
use nvmf_target::Queue;
use std::time::{Duration, Instant};

/// Time a queue that must authenticate (DH-HMAC-CHAP) has, from its Connect, to finish: the
/// exchange takes a few round trips and, with the large FFDHE groups, real CPU time on a slow
/// host.
pub const AUTH_TIMEOUT: Duration = Duration::from_secs(30);

/// Why the duties say a queue must close.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Close {
    /// The controller was torn down (keep-alive expiry, reset, admin queue gone).
    ControllerGone,
    /// No Fabrics Connect within the handshake deadline (the configured timeout).
    HandshakeTimeout(Duration),
    /// Connected, but DH-HMAC-CHAP not finished within [`AUTH_TIMEOUT`] of Connect.
    AuthTimeout,
}

/// The driver's clock, read by a core only to measure (command latency), never to decide.
pub type Clock = fn() -> Instant;

/// The handshake and authentication deadlines of one queue.
#[derive(Debug)]
pub struct Deadlines {
    timeout: Duration,
    /// Until Fabrics Connect succeeds (and authentication, if asked): when the queue closes.
    deadline: Option<Instant>,
    /// `deadline` has been moved to the authentication deadline.
    auth: bool,
}

impl Deadlines {
    /// A queue accepted at `now` with the configured handshake timeout.
    pub fn new(now: Instant, timeout: Duration) -> Deadlines {
        Deadlines {
            timeout,
            deadline: now.checked_add(timeout),
            auth: false,
        }
    }

    /// The configured handshake timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// When [`Deadlines::expired`] must be checked next (`None`: connected, nothing pending).
    #[inline]
    pub fn at(&self) -> Option<Instant> {
        self.deadline
    }

    /// Check at `now`: `Some` when the queue must close. Once the queue is connected (and
    /// authenticated, if its host must) the deadline is cleared and this costs nothing.
    pub fn expired(&mut self, q: &Queue, now: Instant) -> Option<Close> {
        let deadline = self.deadline?;
        if q.controller().is_some() {
            if !q.auth_pending() {
                self.deadline = None;
                return None;
            }
            if !self.auth {
                self.auth = true;
                self.deadline = now.checked_add(AUTH_TIMEOUT.max(self.timeout));
                return None;
            }
            return (now >= deadline).then_some(Close::AuthTimeout);
        }
        (now >= deadline).then_some(Close::HandshakeTimeout(self.timeout))
    }
}

/// Where a core sends a ready slot whose backend may block (file, block): the run loop's I/O
/// engine. Its completion comes back through [`io_done`]. Any `FnMut(&mut Queue, u16)` is one
/// (tests and replays run the I/O on the spot).
pub trait Offload {
    /// Start the prepared I/O of `slot` (`Queue::io_request`, `Queue::take_io_buffer`)
    /// elsewhere.
    fn offload(&mut self, q: &mut Queue, slot: u16);
}

impl<F: FnMut(&mut Queue, u16)> Offload for F {
    #[inline]
    fn offload(&mut self, q: &mut Queue, slot: u16) {
        self(q, slot)
    }
}

/// The transport-independent state a core keeps for its duties.
#[derive(Debug)]
pub struct Duties {
    /// Slots ready to run after the current batch.
    to_execute: Vec<u16>,
    /// Input arrived since the last tick.
    active: bool,
    /// Handshake and authentication deadlines.
    pub deadlines: Deadlines,
    /// The driver's clock, for latency (`None`: the last `now` given).
    clock: Option<Clock>,
    /// The last `now` a driver gave.
    last_now: Instant,
}

impl Duties {
    /// Duties of a queue accepted at `now`.
    pub fn new(now: Instant, handshake_timeout: Duration) -> Duties {
        Duties {
            to_execute: Vec::with_capacity(64),
            active: false,
            deadlines: Deadlines::new(now, handshake_timeout),
            clock: None,
            last_now: now,
        }
    }

    /// Measure command latency with `clock` (a run loop: `Instant::now`).
    pub fn set_clock(&mut self, clock: Clock) {
        self.clock = Some(clock);
    }

    /// The time to measure completions against: the driver's clock, else the last `now`.
    #[inline]
    pub fn clock(&self) -> impl FnMut() -> Instant + use<> {
        let (clock, last) = (self.clock, self.last_now);
        move || clock.map_or(last, |c| c())
    }

    /// The one deadline of the queue with these duties ([`poll_timeout`]).
    #[inline]
    pub fn poll_timeout(&self, q: &Queue) -> Option<Instant> {
        let t = q.poll_timeout();
        match self.deadlines.at() {
            Some(d) => Some(t.map_or(d, |t| t.min(d))),
            None => t,
        }
    }

    /// `Disposition::Execute { slot }`: run it at the end of the batch.
    #[inline]
    pub fn execute_later(&mut self, slot: u16) {
        self.to_execute.push(slot);
    }

    /// Input arrived (for the idle-buffer duty).
    #[inline]
    pub fn input(&mut self) {
        self.active = true;
    }

    /// Run the ready slots, then (if any command is deferred or throttled) retry those and
    /// run the ones that may go. Returns whether a deferred command ran.
    pub fn run(&mut self, q: &mut Queue, now: Instant, offload: &mut dyn Offload) -> bool {
        self.last_now = now;
        self.execute(q, offload);
        let throttled = q.has_throttled();
        if !throttled && !q.has_deferred() {
            return false;
        }
        if throttled {
            q.retry_throttled(now, &mut self.to_execute);
        }
        if q.has_deferred() {
            q.retry_deferred(now, &mut self.to_execute);
        }
        let any = !self.to_execute.is_empty();
        self.execute(q, offload);
        any
    }

    fn execute(&mut self, q: &mut Queue, offload: &mut dyn Offload) {
        for i in 0..self.to_execute.len() {
            let slot = self.to_execute[i];
            if q.io_request(slot).is_some_and(|r| r.may_block()) {
                offload.offload(q, slot);
            } else {
                q.execute_inline(slot);
            }
        }
        self.to_execute.clear();
    }
}

/// What a transport core provides so the duties can be done for it.
pub trait Driver {
    /// What flushing needs from the run loop (NVMe/TCP: nothing; NVMe/RDMA: the thread's
    /// registered memory).
    type Io<'a>: ?Sized;
    /// The queue and the duties' state, borrowed together.
    fn parts(&mut self) -> (&mut Queue, &mut Duties);
    /// Turn every finished command into transport output (and start data movement the
    /// transport owes, such as RDMA READs waiting for a buffer).
    fn flush(&mut self, io: &mut Self::Io<'_>);
    /// Nothing arrived since the last tick: give back buffers sized for the last burst. The
    /// queue's own (slot table and data buffers) through `Queue::release_idle_buffers`.
    fn release_idle(&mut self, io: &mut Self::Io<'_>);
}

/// After a batch of input: run what became ready, retry deferred commands, flush. Returns
/// whether a deferred command ran.
pub fn after_batch<D: Driver>(
    d: &mut D,
    io: &mut D::Io<'_>,
    now: Instant,
    offload: &mut dyn Offload,
) -> bool {
    let (q, duties) = d.parts();
    let any = duties.run(q, now, offload);
    d.flush(io);
    any
}

/// The one deadline (quinn's `poll_timeout`): the earliest instant the run loop must call
/// [`handle_timeout`] for this queue without input. It folds every timer of the queue (the
/// table above); an instant already past means "now, and do not sleep" (commands deferred at a
/// namespace gate). `None`: nothing timed (a queue always has its periodic timers, so only
/// a core that has none).
#[inline]
pub fn poll_timeout<D: Driver>(d: &mut D) -> Option<Instant> {
    let (q, duties) = d.parts();
    duties.poll_timeout(q)
}

/// Do what is due at `now` ([`poll_timeout`]): retry deferred commands and release throttled
/// ones (running those that may go), the periodic timers with the idle-buffer duty, the
/// handshake and authentication deadlines; flush what that completed (an AER, released
/// commands). `Ok(ran)`: whether a deferred or throttled command ran; `Err` when the queue must
/// close.
pub fn handle_timeout<D: Driver>(
    d: &mut D,
    io: &mut D::Io<'_>,
    now: Instant,
    offload: &mut dyn Offload,
) -> Result<bool, Close> {
    let (q, duties) = d.parts();
    duties.last_now = now;
    let fired = q.handle_timeout(now, &mut duties.to_execute);
    let ran = !duties.to_execute.is_empty();
    duties.execute(q, offload);
    let close = if fired.close {
        Some(Close::ControllerGone)
    } else if fired.timers || duties.deadlines.at().is_some_and(|t| now >= t) {
        duties.deadlines.expired(q, now)
    } else {
        None
    };
    let idle = fired.timers && !std::mem::take(&mut duties.active);
    d.flush(io);
    if idle {
        d.release_idle(io);
    }
    close.map_or(Ok(ran), Err)
}

/// Offloaded I/O of `slot` finished with `status` (its buffer back): complete and flush.
pub fn io_done<D: Driver>(d: &mut D, io: &mut D::Io<'_>, slot: u16, status: Status, buf: Vec<u8>) {
    d.parts().0.complete_io(slot, status, buf);
    d.flush(io);
}

/// The periodic part of [`handle_timeout`], run at `now` whether or not its period has come
/// (tests and replays drive time this way): timers and events, deadlines, idle buffers;
/// flushes what the timers completed (an AER). `Some` when the queue must close.
pub fn on_tick<D: Driver>(d: &mut D, io: &mut D::Io<'_>, now: Instant) -> Option<Close> {
    let (q, duties) = d.parts();
    duties.last_now = now;
    let gone = q.poll_timers(now);
    let close = if gone {
        Some(Close::ControllerGone)
    } else {
        duties.deadlines.expired(q, now)
    };
    let idle = !std::mem::take(&mut duties.active);
    if q.has_completions() {
        d.flush(io);
    }
    if idle {
        d.release_idle(io);
    }
    close
}
