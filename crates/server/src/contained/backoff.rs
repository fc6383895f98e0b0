//! Processes whose last read failed or met a budget wait before they are
//! read again, so that a hostile job cannot keep a core busy: 1 minute after
//! the first miss, doubling with each miss after it, at most an hour.

use std::collections::HashMap;
use std::time::{Duration, Instant};

const FIRST: Duration = Duration::from_secs(60);
const LONGEST: Duration = Duration::from_secs(3600);
/// Processes remembered at most; the one whose wait ends first goes.
const KEPT: usize = 1024;

struct Miss {
    start_ticks: u64,
    misses: u32,
    until: Instant,
    why: String,
}

#[derive(Default)]
pub struct BackOff {
    missed: HashMap<u32, Miss>,
}

/// A process still waiting: until when, and what its last read met.
pub struct Waiting<'a> {
    pub left: Duration,
    pub why: &'a str,
}

impl BackOff {
    /// Whether `pid` (started at `start_ticks`) waits at `now`.
    pub fn waiting(&self, pid: u32, start_ticks: u64, now: Instant) -> Option<Waiting<'_>> {
        self.missed
            .get(&pid)
            .filter(|m| m.start_ticks == start_ticks && m.until > now)
            .map(|m| Waiting {
                left: m.until - now,
                why: &m.why,
            })
    }

    /// A read of `pid` failed or met a budget; returns how long it waits.
    pub fn missed(&mut self, pid: u32, start_ticks: u64, now: Instant, why: String) -> Duration {
        let misses = self
            .missed
            .get(&pid)
            .filter(|m| m.start_ticks == start_ticks)
            .map_or(1, |m| m.misses + 1);
        let wait = FIRST.saturating_mul(1 << (misses - 1).min(6)).min(LONGEST);
        if self.missed.len() >= KEPT && !self.missed.contains_key(&pid) {
            self.missed.retain(|_, m| m.until > now);
            if self.missed.len() >= KEPT
                && let Some(first) = self
                    .missed
                    .iter()
                    .min_by_key(|(_, m)| m.until)
                    .map(|(p, _)| *p)
            {
                self.missed.remove(&first);
            }
        }
        self.missed.insert(
            pid,
            Miss {
                start_ticks,
                misses,
                until: now + wait,
                why,
            },
        );
        wait
    }

    /// A read of `pid` went well: it no longer waits.
    pub fn read(&mut self, pid: u32) {
        self.missed.remove(&pid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_with_each_miss_up_to_an_hour() {
        let mut b = BackOff::default();
        let t = Instant::now();
        assert!(b.waiting(7, 100, t).is_none());
        assert_eq!(b.missed(7, 100, t, "a".into()), FIRST);
        let w = b.waiting(7, 100, t + Duration::from_secs(10)).unwrap();
        assert_eq!((w.left, w.why), (Duration::from_secs(50), "a"));
        assert!(b.waiting(7, 100, t + FIRST).is_none());
        assert_eq!(b.missed(7, 100, t, "b".into()), 2 * FIRST);
        for _ in 0..10 {
            b.missed(7, 100, t, "c".into());
        }
        assert_eq!(b.missed(7, 100, t, "c".into()), LONGEST);
        b.read(7);
        assert!(b.waiting(7, 100, t).is_none());
    }

    #[test]
    fn a_new_process_under_the_same_pid_does_not_wait() {
        let mut b = BackOff::default();
        let t = Instant::now();
        b.missed(7, 100, t, "a".into());
        assert!(b.waiting(7, 200, t).is_none());
        assert_eq!(b.missed(7, 200, t, "a".into()), FIRST);
    }

    #[test]
    fn the_table_stays_bounded() {
        let mut b = BackOff::default();
        let t = Instant::now();
        for pid in 0..(KEPT as u32 + 50) {
            b.missed(
                pid,
                1,
                t + Duration::from_millis(u64::from(pid)),
                "a".into(),
            );
        }
        assert_eq!(b.missed.len(), KEPT);
        assert!(b.waiting(KEPT as u32 + 49, 1, t).is_some());
    }
}
