//! What the job reader remembers of threads between samples, so that a
//! thread that did not run costs one small read, and a process none of
//! whose threads ran costs none.
//!
//! A thread's `schedstat` (time on a CPU, time waiting for one, timeslices)
//! is three numbers, much cheaper for the kernel to print than `stat`'s 52.
//! A thread changes state only by running: it goes to sleep, wakes into the
//! run queue, stops or exits in its own code. So when none of the three
//! numbers moved since the last sample, its state is the one read before,
//! and its `stat` is not read again; it is read when they moved, when the
//! thread is new (its kept `schedstat` file was freshly opened: a reused tid
//! is a new file), and when its process is due (below), which bounds how
//! stale a name another thread changed can be.
//! A thread woken into the run queue that has not run yet reads as its old
//! state until it runs or its refresh is due.
//!
//! A quiet process: one whose threads were all asleep (`S`) when last read,
//! and whose [`Activity`], read every sample anyway, has not moved since:
//! its CPU time in its own `stat` (the sum over its threads, in clock ticks
//! of 10 ms) and its `io` counters (any read or write that moved a byte).
//! Then its threads used under a tick between them and did no I/O, and none
//! of their `schedstat`s is read: each thread is carried as it was, its CPU
//! time included. What they used is counted when the process's ticks move
//! (so a thread's CPU time is late by under 10 ms, never lost), and a thread
//! that went from asleep to another state in under a tick, moving no byte
//! (a stop signal, a lock, a read that has not returned), shows it when its
//! process is due. A thread in any other state (running, in the run queue,
//! in I/O wait) makes its process read in full every sample, as before.
//! Every process is due once every [`REFRESH_SAMPLES`] samples (staggered by
//! pid): its threads are read in full, each thread's `stat` included.
//!
//! Each process's list of thread ids is kept too: the task directory is
//! listed again only when the process's thread count changed, a listed
//! thread could not be read, or the process is due. (Same count, every
//! listed thread alive: the same threads. A quiet process whose thread was
//! replaced by another, the count the same, shows the new one when due.)

use rustc_hash::FxHashMap;

use super::stat::Schedstat;
use crate::sample::{IoCounters, ThreadSample};

/// Samples between two full reads of a process's threads.
pub const REFRESH_SAMPLES: u64 = 10;

#[derive(Debug, Clone)]
struct ThreadMemo {
    sched: Schedstat,
    name: String,
    state: char,
    used: u64,
    /// CPU seconds from the thread's `stat`, where `schedstat` is not read.
    stat_cpu: Option<f64>,
}

impl ThreadMemo {
    fn sample(&self, tid: u32) -> ThreadSample {
        ThreadSample {
            tid,
            name: self.name.clone(),
            state: self.state,
            cpu_seconds: self.stat_cpu.unwrap_or_else(|| self.sched.cpu_seconds()),
            wait_seconds: self.stat_cpu.is_none().then(|| self.sched.wait_seconds()),
        }
    }
}

/// What moves when a process's threads run: its CPU time in clock ticks and
/// its `io` counters (`None` when they cannot be read).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Activity {
    pub cpu_ticks: u64,
    pub io: Option<IoCounters>,
}

/// A process's thread ids as listed, and whether it was quiet.
#[derive(Debug, Clone)]
struct ProcessMemo {
    tids: Vec<u32>,
    used: u64,
    /// The process's activity when its threads were last read, every one
    /// of them asleep; `None` when one was not.
    asleep_at: Option<Activity>,
}

#[derive(Debug, Clone, Default)]
pub struct Tasks {
    sample: u64,
    threads: FxHashMap<u32, ThreadMemo>,
    /// (pid, start ticks) -> its threads
    processes: FxHashMap<(u32, u64), ProcessMemo>,
}

impl Tasks {
    /// Starts a sample: forgets threads and processes not seen in the
    /// previous one.
    pub fn begin(&mut self) {
        let previous = self.sample;
        self.threads.retain(|_, m| m.used == previous);
        self.processes.retain(|_, m| m.used == previous);
        self.sample += 1;
    }

    /// Whether the process `pid` is read in full this sample.
    pub fn due(&self, pid: u32) -> bool {
        (self.sample + u64::from(pid)).is_multiple_of(REFRESH_SAMPLES)
    }

    /// The process's memo while it holds, marked used: the process is not
    /// due and its list has `num_threads` ids. (Borrows only the processes,
    /// so that the threads can be read alongside.)
    fn holding(
        processes: &mut FxHashMap<(u32, u64), ProcessMemo>,
        sample: u64,
        due: bool,
        key: (u32, u64),
        num_threads: u64,
    ) -> Option<&mut ProcessMemo> {
        let memo = processes.get_mut(&key).filter(|_| !due)?;
        if memo.tids.len() as u64 != num_threads {
            return None;
        }
        memo.used = sample;
        Some(memo)
    }

    /// The process's thread ids as listed before, if that list still holds.
    pub fn listed(&mut self, pid: u32, start: u64, num_threads: u64) -> Option<&[u32]> {
        let due = self.due(pid);
        let memo = Self::holding(
            &mut self.processes,
            self.sample,
            due,
            (pid, start),
            num_threads,
        )?;
        Some(&memo.tids)
    }

    pub fn put_list(&mut self, pid: u32, start: u64, tids: Vec<u32>) {
        let memo = ProcessMemo {
            tids,
            used: self.sample,
            asleep_at: None,
        };
        self.processes.insert((pid, start), memo);
    }

    /// Records how the process's threads were found by a full read: all
    /// asleep at `activity` (`Some`), or not (`None`).
    pub fn set_asleep(&mut self, pid: u32, start: u64, activity: Option<Activity>) {
        if let Some(memo) = self.processes.get_mut(&(pid, start)) {
            memo.asleep_at = activity;
        }
    }

    /// The threads of a quiet process as they were last read, when it is
    /// quiet (see above): `num_threads` listed, all asleep at `activity`,
    /// and it is not due.
    pub fn quiet(
        &mut self,
        pid: u32,
        start: u64,
        num_threads: u64,
        activity: Activity,
    ) -> Option<Vec<ThreadSample>> {
        let (sample, due) = (self.sample, self.due(pid));
        let memo = Self::holding(&mut self.processes, sample, due, (pid, start), num_threads)?;
        if memo.asleep_at != Some(activity) {
            return None;
        }
        Self::as_last_read(&mut self.threads, sample, &memo.tids)
    }

    /// The threads `tids` as last read, marked used; `None` when one was
    /// never read.
    fn as_last_read(
        threads: &mut FxHashMap<u32, ThreadMemo>,
        sample: u64,
        tids: &[u32],
    ) -> Option<Vec<ThreadSample>> {
        let mut out = Vec::with_capacity(tids.len());
        for tid in tids {
            let thread = threads.get_mut(tid)?;
            thread.used = sample;
            out.push(thread.sample(*tid));
        }
        Some(out)
    }

    /// The threads of a process whose job's threads are not read this
    /// sample (see thread_reads.rs), as last read: while its list holds
    /// (`num_threads` listed) and every thread on it was read before.
    /// Unlike [`Tasks::quiet`], whatever the threads did since.
    pub fn carried(&mut self, pid: u32, start: u64, num_threads: u64) -> Option<Vec<ThreadSample>> {
        let sample = self.sample;
        let memo = Self::holding(
            &mut self.processes,
            sample,
            false,
            (pid, start),
            num_threads,
        )?;
        Self::as_last_read(&mut self.threads, sample, &memo.tids)
    }

    /// The thread's name and state from its last `stat`, when it did not run
    /// since (`sched` unchanged, its `schedstat` file not `fresh`) and its
    /// process `pid` is not due.
    pub fn unchanged(
        &mut self,
        pid: u32,
        tid: u32,
        sched: Schedstat,
        fresh: bool,
    ) -> Option<(&str, char)> {
        let due = self.due(pid);
        let sample = self.sample;
        let memo = self.threads.get_mut(&tid)?;
        if fresh || due || memo.sched != sched {
            return None;
        }
        memo.used = sample;
        Some((&memo.name, memo.state))
    }

    pub fn put_thread(&mut self, tid: u32, sched: Schedstat, name: &str, state: char) {
        self.put(tid, sched, None, name, state);
    }

    /// A thread read from its `stat` alone (no `schedstat`): kept only to be
    /// carried (see [`Tasks::carried`]).
    pub fn put_stat_thread(&mut self, tid: u32, cpu_seconds: f64, name: &str, state: char) {
        self.put(tid, Schedstat::default(), Some(cpu_seconds), name, state);
    }

    fn put(&mut self, tid: u32, sched: Schedstat, stat_cpu: Option<f64>, name: &str, state: char) {
        let sample = self.sample;
        match self.threads.get_mut(&tid) {
            Some(m) => {
                m.sched = sched;
                m.stat_cpu = stat_cpu;
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
                        stat_cpu,
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

    /// Starts samples until the one where `pid` is due.
    fn until_due(tasks: &mut Tasks, pid: u32) {
        tasks.begin();
        while !tasks.due(pid) {
            tasks.begin();
        }
    }

    #[test]
    fn a_quiet_thread_keeps_its_state_until_it_runs_or_its_process_is_due() {
        let mut tasks = Tasks::default();
        let (pid, tid) = (20, 23);
        until_due(&mut tasks, pid);
        assert_eq!(tasks.unchanged(pid, tid, sched(5000), true), None, "new");
        tasks.put_thread(tid, sched(5000), "worker", 'D');
        for _ in 1..REFRESH_SAMPLES {
            tasks.begin();
            assert_eq!(
                tasks.unchanged(pid, tid, sched(5000), false),
                Some(("worker", 'D'))
            );
        }
        tasks.begin();
        assert_eq!(
            tasks.unchanged(pid, tid, sched(5000), false),
            None,
            "the process is due"
        );
        tasks.put_thread(tid, sched(5000), "worker", 'D');
        tasks.begin();
        assert_eq!(
            tasks.unchanged(pid, tid, sched(9000), false),
            None,
            "it ran"
        );
        assert_eq!(
            tasks.unchanged(pid, tid, sched(5000), true),
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
        assert_eq!(tasks.unchanged(1, 1, sched(5), false), None);
    }

    #[test]
    fn a_thread_list_holds_while_the_count_does_until_the_process_is_due() {
        let mut tasks = Tasks::default();
        until_due(&mut tasks, 10);
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
        assert_eq!(tasks.listed(10, 77, 3), None, "listed again when due");
    }

    fn at(cpu_ticks: u64, rchar: u64) -> Activity {
        let io = IoCounters {
            rchar,
            ..IoCounters::default()
        };
        Activity {
            cpu_ticks,
            io: Some(io),
        }
    }

    /// A process 30 (start 5) of threads 30 and 31, read in full.
    fn read_in_full(tasks: &mut Tasks, states: [char; 2], activity: Activity) {
        tasks.put_list(30, 5, vec![30, 31]);
        tasks.put_thread(30, sched(1_000_000), "main", states[0]);
        tasks.put_thread(31, sched(2_500_000), "loader", states[1]);
        let asleep = states.iter().all(|s| *s == 'S');
        tasks.set_asleep(30, 5, asleep.then_some(activity));
    }

    #[test]
    fn a_process_asleep_is_carried_while_its_ticks_and_io_stay_until_it_is_due() {
        let mut tasks = Tasks::default();
        until_due(&mut tasks, 30);
        read_in_full(&mut tasks, ['S', 'S'], at(700, 64));
        for _ in 1..REFRESH_SAMPLES {
            tasks.begin();
            let threads = tasks.quiet(30, 5, 2, at(700, 64)).expect("quiet");
            let carried: Vec<_> = threads
                .iter()
                .map(|t| (t.tid, t.name.as_str(), t.state, t.cpu_seconds))
                .collect();
            assert_eq!(
                carried,
                [(30, "main", 'S', 0.001), (31, "loader", 'S', 0.0025)]
            );
        }
        tasks.begin();
        assert!(
            tasks.quiet(30, 5, 2, at(700, 64)).is_none(),
            "due: read in full"
        );
        read_in_full(&mut tasks, ['S', 'S'], at(700, 64));
        tasks.begin();
        assert!(tasks.quiet(30, 5, 2, at(700, 64)).is_some());
        assert!(
            tasks.quiet(30, 5, 2, at(701, 64)).is_none(),
            "a tick: one ran"
        );
        let read = at(700, 4160);
        assert!(tasks.quiet(30, 5, 2, read).is_none(), "one read 4 KiB");
        assert!(
            tasks.quiet(30, 5, 3, at(700, 64)).is_none(),
            "a thread more"
        );
        assert!(
            tasks.quiet(30, 6, 2, at(700, 64)).is_none(),
            "another process"
        );
    }

    #[test]
    fn a_process_with_a_thread_awake_is_read_in_full_every_sample() {
        for state in ['R', 'D', 'T', 'Z'] {
            let mut tasks = Tasks::default();
            until_due(&mut tasks, 30);
            read_in_full(&mut tasks, ['S', state], at(700, 64));
            tasks.begin();
            assert!(tasks.quiet(30, 5, 2, at(700, 64)).is_none(), "{state}");
        }
    }

    #[test]
    fn carried_threads_are_remembered_for_the_next_sample() {
        let mut tasks = Tasks::default();
        until_due(&mut tasks, 30);
        read_in_full(&mut tasks, ['S', 'S'], at(700, 64));
        for _ in 0..5 {
            tasks.begin();
            assert!(tasks.quiet(30, 5, 2, at(700, 64)).is_some());
        }
        tasks.begin();
        assert_eq!(
            tasks.unchanged(30, 31, sched(2_500_000), false),
            Some(("loader", 'S')),
            "still known after five samples carried"
        );
        assert_eq!(tasks.listed(30, 5, 2), Some(&[30, 31][..]));
    }
}
