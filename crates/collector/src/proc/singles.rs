//! Single-threaded processes that did not run: a job's `sleep`, a shell
//! waiting for its child, a launcher waiting for its ranks. Their `stat` and
//! `io` cannot have changed while they did not run (their CPU time, state,
//! thread count and I/O counters all move only by running), so once such a
//! process is known, a sample reads its `schedstat` (three numbers, cheaper
//! for the kernel than `stat`'s 52) and, when those did not move and the
//! file is the one read before (a reused pid is a new file), carries the
//! process as last read instead of reading its `stat` and `io`. Its memory
//! (pages reclaimed from a sleeper) and its parent (when its parent dies) can
//! change without it running: it is read in full when due, every
//! `REFRESH_SAMPLES` samples (tasks.rs), and at once when its parent is not
//! the one expected.
//!
//! A process found running is read as before, `stat` and `io`, without the
//! `schedstat` check for `REFRESH_SAMPLES` samples: a busy single-threaded
//! process costs no read more than it did.

use rustc_hash::FxHashMap;

use super::stat::Schedstat;
use super::tasks::REFRESH_SAMPLES;
use crate::sample::ProcessSample;

#[derive(Debug, Clone)]
struct Memo {
    process: ProcessSample,
    /// Its `schedstat` when `process` was read; `None` when not read then.
    sched: Option<Schedstat>,
    used: u64,
    /// No check before this sample (it was found running).
    check_from: u64,
}

#[derive(Debug, Clone, Default)]
pub struct Singles {
    sample: u64,
    /// pid -> the process as last read
    of: FxHashMap<u32, Memo>,
}

impl Singles {
    /// Starts a sample: forgets processes not seen in the previous one.
    pub fn begin(&mut self) {
        let previous = self.sample;
        self.of.retain(|_, m| m.used == previous);
        self.sample += 1;
    }

    /// Whether `pid` is checked through its `schedstat` this sample: it was
    /// single-threaded when last read, is not `due`, and was not found
    /// running lately.
    pub fn checks(&self, pid: u32, due: bool) -> bool {
        !due && self
            .of
            .get(&pid)
            .is_some_and(|m| m.check_from <= self.sample)
    }

    /// The process as last read, when `sched` (read from a file that was not
    /// freshly opened) is what it was then.
    pub fn unchanged(&mut self, pid: u32, sched: Schedstat, fresh: bool) -> Option<ProcessSample> {
        let sample = self.sample;
        let memo = self.of.get_mut(&pid)?;
        if fresh || memo.sched != Some(sched) {
            return None;
        }
        memo.used = sample;
        Some(memo.process.clone())
    }

    /// Records a process just read in full; `sched` is its `schedstat` read
    /// just before, when it was checked. Only single-threaded processes are
    /// kept.
    pub fn put(&mut self, process: &ProcessSample, sched: Option<Schedstat>) {
        let pid = process.id.pid;
        if process.threads.len() != 1 {
            self.of.remove(&pid);
            return;
        }
        let sample = self.sample;
        let same = self.of.get(&pid).filter(|m| m.process.id == process.id);
        let before = same.and_then(|m| m.sched);
        let unchecked_until = same.map_or(0, |m| m.check_from);
        let ran = matches!((before, sched), (Some(b), Some(s)) if b != s);
        self.of.insert(
            pid,
            Memo {
                process: process.clone(),
                sched: if ran { None } else { sched },
                used: sample,
                check_from: if ran {
                    sample + REFRESH_SAMPLES
                } else {
                    unchecked_until.max(sample + 1)
                },
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::{ProcessId, ThreadSample};

    fn process(pid: u32, threads: usize) -> ProcessSample {
        ProcessSample {
            id: ProcessId {
                pid,
                start_ticks: 7,
            },
            ppid: 1,
            comm: "sleep".into(),
            state: 'S',
            start_time_seconds: 0.0,
            cpu_seconds: 0.01,
            rss_bytes: 4096,
            threads: (0..threads as u32)
                .map(|i| ThreadSample {
                    tid: pid + i,
                    name: "sleep".into(),
                    state: 'S',
                    cpu_seconds: 0.0,
                    wait_seconds: None,
                })
                .collect(),
            io: None,
        }
    }

    fn sched(run_ns: u64) -> Schedstat {
        Schedstat {
            run_ns,
            wait_ns: 0,
            timeslices: 1,
        }
    }

    #[test]
    fn a_sleeper_is_carried_a_runner_read_and_left_unchecked_for_a_while() {
        let mut singles = Singles::default();
        singles.begin();
        assert!(!singles.checks(5, false), "not known yet");
        singles.put(&process(5, 1), None);
        singles.begin();
        assert!(singles.checks(5, false));
        assert!(!singles.checks(5, true), "due: read in full");
        assert_eq!(
            singles.unchanged(5, sched(100), false),
            None,
            "no baseline yet"
        );
        singles.put(&process(5, 1), Some(sched(100)));
        singles.begin();
        assert!(
            singles.unchanged(5, sched(100), false).is_some(),
            "did not run"
        );
        assert_eq!(
            singles.unchanged(5, sched(100), true),
            None,
            "a new file: another process"
        );
        singles.begin();
        assert_eq!(singles.unchanged(5, sched(900), false), None, "it ran");
        singles.put(&process(5, 1), Some(sched(900)));
        for _ in 1..REFRESH_SAMPLES {
            singles.begin();
            assert!(!singles.checks(5, false), "running lately: read as before");
            singles.put(&process(5, 1), None);
        }
        singles.begin();
        assert!(singles.checks(5, false));

        singles.put(&process(5, 2), Some(sched(1000)));
        singles.begin();
        assert!(!singles.checks(5, false), "a thread more: no longer single");
        singles.begin();
        singles.begin();
        assert!(singles.of.is_empty(), "forgotten once not seen");
    }
}
