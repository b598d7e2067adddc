//! The namespace gate: what makes a fused Compare-and-Write atomic against every other command
//! on its namespace, on every queue and core, without a lock on the data path.
//!
//! Every command that touches namespace data (Read, Write, Write Zeroes, Dataset Management,
//! Compare, Copy) *enters* the gate before it does and *exits* when it is over (its slot is
//! freed; a read streamed from memory only once its data has been sent). Entering is one
//! `fetch_add` on the calling thread's own counter (a cache-padded stripe, so cores never write
//! the same line) followed by one load of the read-mostly `exclusive` flag. If the flag is set
//! the command backs out (`fetch_sub`) and is deferred by its queue, which retries it later.
//!
//! A Compare-and-Write takes `exclusive` (compare-exchange; only one at a time per namespace)
//! and then waits, deferred and without blocking its reactor, until the stripes sum to zero:
//! every command that entered before has finished, and every later one backs out. It then
//! compares and writes, and clears the flag.
//!
//! Why it is correct (Dekker's pattern): the command does `stripe += 1; load exclusive`, the
//! C&W does `exclusive = true; load stripes`, all sequentially consistent. In the single total
//! order of these operations one of the two comes second and sees the other: either the
//! command sees the flag and backs out, or the C&W sees the count and waits.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};

/// Number of counters per namespace. Threads beyond this share stripes (still correct, only
/// their counter lines are then shared).
pub const STRIPES: usize = 32;

/// One counter on its own cache line pair (the adjacent-line prefetcher pairs 64-byte lines).
#[derive(Debug, Default)]
#[repr(align(128))]
struct Stripe(AtomicUsize);

/// The flag on its own line: read by every command, written only by Compare-and-Write.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Flag(AtomicBool);

/// A namespace's gate (see the module docs).
/// Inline in the namespace (no pointer to chase on the command path): ~4.2 KiB.
#[derive(Debug)]
pub struct Gate {
    exclusive: Flag,
    stripes: [Stripe; STRIPES],
}

impl Default for Gate {
    fn default() -> Self {
        Gate {
            exclusive: Flag::default(),
            stripes: std::array::from_fn(|_| Stripe::default()),
        }
    }
}

/// Next stripe to hand to a thread that enters a gate for the first time.
static NEXT_STRIPE: AtomicU32 = AtomicU32::new(0);

thread_local! {
    static MY_STRIPE: Cell<u8> = const { Cell::new(u8::MAX) };
}

/// The calling thread's stripe (assigned round robin on first use).
fn my_stripe() -> u8 {
    MY_STRIPE.with(|c| {
        let s = c.get();
        if s != u8::MAX {
            return s;
        }
        let s = (NEXT_STRIPE.fetch_add(1, Ordering::Relaxed) as usize % STRIPES) as u8;
        c.set(s);
        s
    })
}

impl Gate {
    /// Enter as a data command. True: entered; [`Gate::exit`] when done. False: a
    /// Compare-and-Write holds the namespace; defer and retry.
    #[inline]
    pub fn enter(&self) -> bool {
        let c = &self.stripes[usize::from(my_stripe())].0;
        c.fetch_add(1, Ordering::SeqCst);
        if self.exclusive.0.load(Ordering::SeqCst) {
            c.fetch_sub(1, Ordering::Release);
            return false;
        }
        true
    }

    /// Leave `n` entries. They go off the calling thread's stripe, whichever thread entered:
    /// only the sum of the stripes means anything (they wrap), so a queue that moved to another
    /// thread in between still leaves the sum right.
    #[inline]
    pub fn exit(&self, n: usize) {
        self.stripes[usize::from(my_stripe())]
            .0
            .fetch_sub(n, Ordering::Release);
    }

    /// Take the namespace for a Compare-and-Write. False if another one holds it.
    pub fn try_lock(&self) -> bool {
        self.exclusive
            .0
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }

    /// With the namespace taken: true once no data command is inside any more.
    pub fn drained(&self) -> bool {
        self.stripes
            .iter()
            .map(|s| s.0.load(Ordering::SeqCst))
            .fold(0usize, usize::wrapping_add)
            == 0
    }

    /// Give the namespace back.
    pub fn unlock(&self) {
        self.exclusive.0.store(false, Ordering::SeqCst);
    }

    /// True while a Compare-and-Write holds the namespace (for tests and metrics).
    pub fn is_locked(&self) -> bool {
        self.exclusive.0.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enter_exit_and_lock() {
        let g = Gate::default();
        assert!(g.enter());
        assert!(g.enter());
        assert!(g.try_lock());
        assert!(!g.try_lock(), "one Compare-and-Write at a time");
        assert!(!g.drained());
        assert!(!g.enter(), "the gate is closed while locked");
        g.exit(1);
        assert!(!g.drained());
        // Left from another thread: the sum is what counts.
        std::thread::scope(|s| {
            s.spawn(|| g.exit(1));
        });
        assert!(g.drained());
        g.unlock();
        assert!(g.enter());
    }

    /// Threads entering and leaving while another locks: whenever the locker sees the gate
    /// drained, nobody is inside (checked with a separate "inside" counter).
    #[test]
    fn drained_means_nobody_inside() {
        use std::sync::Arc;
        let g = Arc::new(Gate::default());
        let inside = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let workers: Vec<_> = (0..3)
            .map(|_| {
                let (g, inside, stop) = (g.clone(), inside.clone(), stop.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        if g.enter() {
                            inside.fetch_add(1, Ordering::SeqCst);
                            std::hint::spin_loop();
                            inside.fetch_sub(1, Ordering::SeqCst);
                            g.exit(1);
                        }
                    }
                })
            })
            .collect();
        let mut locked = 0;
        while locked < 2000 {
            if !g.try_lock() {
                continue;
            }
            while !g.drained() {
                std::hint::spin_loop();
            }
            assert_eq!(inside.load(Ordering::SeqCst), 0);
            locked += 1;
            g.unlock();
        }
        stop.store(true, Ordering::Relaxed);
        for w in workers {
            w.join().unwrap();
        }
    }
}
