//! Someone asking for thread views: the API's status (the page polls it,
//! `stallwatch status` reads it) and a job's stacks (`stallwatch stacks`).
//! For a while after each ask, every job's threads are read every sample,
//! busy GPUs or not (see the collector's thread_reads.rs), so that the
//! busiest thread shown is the last second's.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long one ask keeps every job's threads read every sample: longer
/// than the page's polling interval.
pub const HOLD: Duration = Duration::from_secs(30);

#[derive(Debug)]
pub struct ThreadViews {
    origin: Instant,
    /// Milliseconds from `origin` until which threads are wanted (0: never asked).
    until_ms: AtomicU64,
}

impl Default for ThreadViews {
    fn default() -> Self {
        ThreadViews {
            origin: Instant::now(),
            until_ms: AtomicU64::new(0),
        }
    }
}

impl ThreadViews {
    fn ms(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.origin).as_millis()).unwrap_or(u64::MAX)
    }

    /// Someone asks now.
    pub fn ask(&self) {
        self.ask_at(Instant::now());
    }

    fn ask_at(&self, now: Instant) {
        self.until_ms
            .fetch_max(self.ms(now + HOLD), Ordering::Relaxed);
    }

    /// Whether threads are wanted now.
    pub fn asked(&self) -> bool {
        self.asked_at(Instant::now())
    }

    fn asked_at(&self, now: Instant) -> bool {
        self.ms(now) < self.until_ms.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ask_holds_for_a_while() {
        let views = ThreadViews::default();
        let t0 = Instant::now();
        assert!(!views.asked_at(t0), "never asked");
        views.ask_at(t0);
        assert!(views.asked_at(t0 + HOLD / 2));
        assert!(!views.asked_at(t0 + HOLD + Duration::from_millis(1)));
        views.ask_at(t0 + HOLD);
        assert!(views.asked_at(t0 + HOLD + HOLD / 2), "asked again");
    }
}
