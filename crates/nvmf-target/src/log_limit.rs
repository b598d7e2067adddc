//! Rate-limited warnings: the first occurrence of a cause is logged at once, later ones within
//! the window are counted, and the next occurrence after the window is logged with that count
//! (`suppressed = N`). A full disk, a truncated file or a misbehaving host thus costs a line per
//! window per cause instead of a line per command.
//!
//! Use [`warn_every!`](crate::warn_every): each call site has its own limiter, so a site per
//! cause gives a limit per cause.

#[doc(hidden)]
pub use tracing;

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Default window of [`warn_every!`](crate::warn_every).
pub const WINDOW: Duration = Duration::from_secs(10);

/// One cause's limiter (lock-free; shared by every thread that hits the call site).
#[derive(Debug)]
pub struct RateLimit {
    window_ms: u64,
    /// Milliseconds since [`epoch`] from which the next line may be written; 0: never written.
    next_ms: AtomicU64,
    suppressed: AtomicU64,
}

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

impl RateLimit {
    /// A limiter logging at most one line per `window` (plus the count suppressed meanwhile).
    pub const fn new(window: Duration) -> RateLimit {
        RateLimit {
            window_ms: window.as_millis() as u64,
            next_ms: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }

    /// `Some(n)`: write the line now; `n` occurrences were suppressed since the last one.
    /// `None`: suppressed (counted).
    pub fn allow(&self) -> Option<u64> {
        self.allow_at(epoch().elapsed())
    }

    /// [`RateLimit::allow`] at a given time since the process epoch (tests).
    pub fn allow_at(&self, now: Duration) -> Option<u64> {
        // +1 so that "never written" (0) is always in the past.
        let now = now.as_millis() as u64 + 1;
        let next = self.next_ms.load(Ordering::Relaxed);
        if now >= next
            && self
                .next_ms
                .compare_exchange(
                    next,
                    now + self.window_ms,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
        {
            return Some(self.suppressed.swap(0, Ordering::Relaxed));
        }
        self.suppressed.fetch_add(1, Ordering::Relaxed);
        None
    }
}

/// `tracing::warn!` at most once per [`WINDOW`] for this call site, with the number of
/// occurrences suppressed since the previous line as the field `suppressed`.
#[macro_export]
macro_rules! warn_every {
    ($($arg:tt)+) => {{
        static LIMIT: $crate::log_limit::RateLimit =
            $crate::log_limit::RateLimit::new($crate::log_limit::WINDOW);
        if let Some(suppressed) = LIMIT.allow() {
            $crate::log_limit::tracing::warn!(suppressed, $($arg)+);
        }
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_then_one_per_window_with_the_count() {
        let l = RateLimit::new(Duration::from_secs(10));
        let s = Duration::from_secs;
        assert_eq!(l.allow_at(s(100)), Some(0));
        for t in 100..110 {
            assert_eq!(l.allow_at(s(t)), None);
        }
        // The window has passed: the line carries the ten suppressed ones.
        assert_eq!(l.allow_at(s(111)), Some(10));
        assert_eq!(l.allow_at(s(112)), None);
        assert_eq!(l.allow_at(s(200)), Some(1));
    }

    #[test]
    fn many_threads_write_one_line_per_window() {
        let l = std::sync::Arc::new(RateLimit::new(Duration::from_secs(3600)));
        let hits: u64 = (0..4)
            .map(|_| {
                let l = l.clone();
                std::thread::spawn(move || (0..10_000).filter(|_| l.allow().is_some()).count())
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().unwrap_or(0) as u64)
            .sum();
        assert_eq!(hits, 1);
        assert_eq!(l.suppressed.load(Ordering::Relaxed), 39_999);
    }
}
