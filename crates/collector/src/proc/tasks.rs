//! What the job reader remembers of threads between samples, so that a
//! thread that did not run costs one small read.
//!
//! A thread's `schedstat` (time on a CPU, time waiting for one, timeslices)
//! is three numbers, much cheaper for the kernel to print than `stat`'s 52.
//! A thread changes state only by running: it goes to sleep, wakes into the
//! run queue, stops or exits in its own code. So when none of the three
//! numbers moved since the last sample, its state is the one read before,
//! and its `stat` is not read again; it is read when they moved, when the
//! thread is new (its kept `schedstat` file was freshly opened: a reused tid
//! is a new file), and at least every [`REFRESH_SAMPLES`] samples (staggered
//! by tid), which bounds how stale a name another thread changed can be.
//! A thread woken into the run queue that has not run yet reads as its old
//! state until it runs or its refresh is due.
//!
//! Each process's list of thread ids is kept too: the task directory is
//! listed again only when the process's thread count changed, a listed
//! thread could not be read, or the list is REFRESH_SAMPLES samples old.
//! (Same count, every listed thread alive: the same threads.)

use rustc_hash::FxHashMap;

use super::stat::Schedstat;

/// Samples between two reads of a quiet thread's `stat`.
pub const REFRESH_SAMPLES: u64 = 10;

#[derive(Debug, Clone)]
struct ThreadMemo {
    sched: Schedstat,
    name: String,
    state: char,
    used: u64,
}

#[derive(Debug, Clone, Default)]
pub struct Tasks {
    sample: u64,
    threads: FxHashMap<u32, ThreadMemo>,
    /// (pid, start ticks) -> (thread ids, sample listed at, sample last used)
    lists: FxHashMap<(u32, u64), (Vec<u32>, u64, u64)>,
}

impl Tasks {
    /// Starts a sample: forgets threads and processes not seen in the
    /// previous one.
    pub fn begin(&mut self) {
        let previous = self.sample;
        self.threads.retain(|_, m| m.used == previous);
        self.lists.retain(|_, (_, _, used)| *used == previous);
        self.sample += 1;
    }

    /// The process's thread ids as listed before, if that list still holds:
    /// it has `num_threads` ids and is recent enough.
    pub fn listed(&mut self, pid: u32, start: u64, num_threads: u64) -> Option<&[u32]> {
        let sample = self.sample;
        let (tids, at, used) = self.lists.get_mut(&(pid, start))?;
        if tids.len() as u64 != num_threads || sample - *at >= REFRESH_SAMPLES {
            return None;
        }
        *used = sample;
        Some(tids)
    }

    pub fn put_list(&mut self, pid: u32, start: u64, tids: Vec<u32>) {
        self.lists
            .insert((pid, start), (tids, self.sample, self.sample));
    }

    /// The thread's name and state from its last `stat`, when it did not run
    /// since (`sched` unchanged, its `schedstat` file not `fresh`) and its
    /// refresh is not due.
    pub fn unchanged(&mut self, tid: u32, sched: Schedstat, fresh: bool) -> Option<(&str, char)> {
        let due = (self.sample + u64::from(tid)).is_multiple_of(REFRESH_SAMPLES);
        let sample = self.sample;
        let memo = self.threads.get_mut(&tid)?;
        if fresh || due || memo.sched != sched {
            return None;
        }
        memo.used = sample;
        Some((&memo.name, memo.state))
    }

    pub fn put_thread(&mut self, tid: u32, sched: Schedstat, name: &str, state: char) {
        let sample = self.sample;
        match self.threads.get_mut(&tid) {
            Some(m) => {
                m.sched = sched;
                m.state = state;
                m.used = sample;
                if m.name != name {
                    name.clone_into(&mut m.name);
                }
            }
            None => {
                self.threads.insert(
                    tid,
                    ThreadMemo {
                        sched,
                        name: name.to_owned(),
                        state,
                        used: sample,
                    },
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sched(run_ns: u64) -> Schedstat {
        Schedstat {
            run_ns,
            wait_ns: 0,
            timeslices: run_ns / 1000,
        }
    }

    #[test]
    fn a_quiet_thread_keeps_its_state_until_it_runs_or_its_refresh_is_due() {
        let mut tasks = Tasks::default();
        let tid = 3; // due when (sample + 3) % 10 == 0: sample 7
        tasks.begin();
        assert_eq!(tasks.unchanged(tid, sched(5000), true), None, "new");
        tasks.put_thread(tid, sched(5000), "worker", 'D');
        for _ in 2..7 {
            tasks.begin();
            assert_eq!(
                tasks.unchanged(tid, sched(5000), false),
                Some(("worker", 'D'))
            );
        }
        tasks.begin();
        assert_eq!(
            tasks.unchanged(tid, sched(5000), false),
            None,
            "refresh due"
        );
        tasks.put_thread(tid, sched(5000), "worker", 'D');
        tasks.begin();
        assert_eq!(tasks.unchanged(tid, sched(9000), false), None, "it ran");
        assert_eq!(
            tasks.unchanged(tid, sched(5000), true),
            None,
            "a new file: a new thread"
        );
    }

    #[test]
    fn a_thread_not_seen_for_a_sample_is_forgotten() {
        let mut tasks = Tasks::default();
        tasks.begin();
        tasks.put_thread(1, sched(5), "a", 'S');
        tasks.begin();
        tasks.begin();
        assert_eq!(tasks.unchanged(1, sched(5), false), None);
    }

    #[test]
    fn a_thread_list_holds_while_the_count_does() {
        let mut tasks = Tasks::default();
        tasks.begin();
        tasks.put_list(10, 77, vec![10, 11, 12]);
        tasks.begin();
        assert_eq!(tasks.listed(10, 77, 3), Some(&[10, 11, 12][..]));
        assert_eq!(tasks.listed(10, 77, 4), None, "a thread more");
        assert_eq!(
            tasks.listed(10, 78, 3),
            None,
            "another process with that pid"
        );
        for _ in 2..REFRESH_SAMPLES {
            tasks.begin();
            assert!(tasks.listed(10, 77, 3).is_some());
        }
        tasks.begin();
        assert_eq!(tasks.listed(10, 77, 3), None, "listed again now and then");
    }
}
