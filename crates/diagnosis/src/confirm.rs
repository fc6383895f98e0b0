//! Hangs confirmed by the job's own stacks. A job that stops making output
//! while its GPU idles (or spins at low power) is read again and again, a
//! short burst every `hang_confirmation.interval`: when the threads that
//! matter stand at the same place in every read, it is stuck, and the
//! no-progress kinds need not wait for the hang time (10 minutes at least,
//! like NCCL's watchdog). Jobs whose stacks move, or cannot be read, keep
//! the hang-time rule.
//!
//! Pure: the engine says when it wants a read ([`Confirmation::wanted`]),
//! the server reads and hands the report back ([`Confirmation::add`]).

use crate::round::round;
use crate::stack_text::describe_spot;
use crate::types::stack_report::{HotSpot, ReadOutcome, StackReport, ThreadStacks};
pub use crate::types::stuck::Stuck;

/// A thread stands still in a burst when its most frequent place holds at
/// least this share of its reads.
const STILL_SHARE: f64 = 0.9;
/// Reads kept per GPU (more than any sensible `reads`).
const KEPT: usize = 16;

/// The place one thread stood at, without line numbers (a loop's lines
/// are one place; the line shown is the last read's).
#[derive(Debug, Clone, PartialEq, Eq)]
struct ThreadPlace {
    tid: u32,
    function: String,
    file: String,
    user_function: Option<String>,
    user_file: Option<String>,
}

/// One confirming read: where every Python thread stood, or `None` when a
/// thread moved within the burst or no stack could be read.
#[derive(Debug, Clone)]
struct Read {
    t: f64,
    places: Option<Vec<ThreadPlace>>,
    /// The place to name: the main thread's, else the first listed.
    named: Option<(String, String, Option<String>)>,
}

/// The confirming reads of one GPU's job.
#[derive(Debug, Default)]
pub struct Confirmation {
    /// The job read (pid, start time); reads of another are dropped.
    job: Option<(u32, f64)>,
    reads: Vec<Read>,
    /// When the last read was asked for.
    asked: Option<f64>,
}

fn place_of(t: &ThreadStacks) -> Option<(ThreadPlace, &HotSpot)> {
    let top = t.top.first()?;
    Some((
        ThreadPlace {
            tid: t.tid,
            function: top.function.clone(),
            file: top.file.clone(),
            user_function: top.user_function.clone(),
            user_file: top.user_file.clone(),
        },
        top,
    ))
}

fn read_of(t: f64, report: &StackReport) -> Read {
    let unread = Read {
        t,
        places: None,
        named: None,
    };
    // An interactive kernel waiting for its user stands still by design.
    // So does a job in one of its own phases (a long save, a compilation).
    if report.outcome != ReadOutcome::Sampled
        || report.samples == 0
        || report.interactive
        || report.phase.is_some()
    {
        return unread;
    }
    let mut places = Vec::new();
    for thread in &report.threads {
        let Some((place, top)) = place_of(thread) else {
            continue; // no Python frame: a native thread
        };
        if top.share < STILL_SHARE {
            return unread; // it moved within the burst
        }
        places.push(place);
    }
    if places.is_empty() {
        return unread;
    }
    places.sort_by_key(|p| p.tid);
    let main = report
        .threads
        .iter()
        .find(|t| t.tid == report.pid && !t.top.is_empty())
        .or_else(|| report.threads.iter().find(|t| !t.top.is_empty()));
    let named = main.map(|m| {
        (
            describe_spot(&m.top[0]),
            format!("tid {} ({})", m.tid, m.name),
            m.waiting_on.clone(),
        )
    });
    Read {
        t,
        places: Some(places),
        named,
    }
}

impl Confirmation {
    /// Follows the GPU's job: a new one starts with no reads.
    pub fn follow(&mut self, job: Option<(u32, f64)>) {
        if job != self.job {
            *self = Confirmation {
                job,
                ..Confirmation::default()
            };
        }
    }

    pub fn job_pid(&self) -> Option<u32> {
        self.job.map(|(pid, _)| pid)
    }

    /// A read is due: the job has been silent `after` seconds while its GPU
    /// looks hung, and the last read was asked for `interval` ago or more
    /// (or before the silence began).
    pub fn wanted(&self, t: f64, silent: f64, after: f64, interval: f64) -> bool {
        self.job.is_some()
            && silent >= after
            && self
                .asked
                .is_none_or(|a| t - a >= interval || a < t - silent)
    }

    pub fn asked(&mut self, t: f64) {
        self.asked = Some(t);
    }

    /// A finished read of `pid`, taken at `t`.
    pub fn add(&mut self, pid: u32, t: f64, report: &StackReport) {
        if self.job_pid() != Some(pid) {
            return;
        }
        if self.reads.len() == KEPT {
            self.reads.remove(0);
        }
        self.reads.push(read_of(t, report));
    }

    /// Stuck: the last `reads` reads, all taken in the current silence (it
    /// began `silent` seconds before `t`), found every thread at the same
    /// place, and span at least `(reads - 1) * interval` (within a tenth).
    pub fn stuck(&self, t: f64, silent: f64, reads: u32, interval: f64) -> Option<Stuck> {
        let n = reads.max(2) as usize;
        let recent: Vec<&Read> = self.reads.iter().filter(|r| r.t >= t - silent).collect();
        let last = recent.get(recent.len().checked_sub(n)?..)?;
        let first = last.first()?;
        let places = first.places.as_ref()?;
        if !last.iter().all(|r| r.places.as_ref() == Some(places)) {
            return None;
        }
        let span = last.last()?.t - first.t;
        if span < 0.9 * (n as f64 - 1.0) * interval {
            return None;
        }
        let (place, thread, waiting_on) = last.last()?.named.clone()?;
        Some(Stuck {
            place,
            thread,
            waiting_on,
            reads: n as u32,
            over_seconds: round(span),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stack_report::{Burst, aggregate};
    use crate::types::reads::{CodeFrame, ThreadRead};
    use crate::types::stack_report::Focus;

    fn frame(function: &str, file: &str, line: u32, library: bool) -> CodeFrame {
        CodeFrame {
            function: function.into(),
            file: file.into(),
            line,
            library,
        }
    }

    /// A burst of 10 reads of a main thread (tid 7) at `main` and a worker
    /// thread (tid 8) waiting on a queue.
    fn burst(main: &[Vec<CodeFrame>]) -> StackReport {
        let worker = vec![
            frame("Condition.wait", "threading.py", 320, true),
            frame("get", "queue.py", 171, true),
            frame("feed", "train.py", 20, false),
        ];
        let reads: Vec<Vec<ThreadRead>> = (0..10)
            .map(|i| {
                vec![
                    ThreadRead {
                        pid: 7,
                        tid: 7,
                        name: "python3".into(),
                        state: 'S',
                        owns_gil: false,
                        frames: main[i % main.len()].clone(),
                    },
                    ThreadRead {
                        pid: 7,
                        tid: 8,
                        name: "feeder".into(),
                        state: 'S',
                        owns_gil: false,
                        frames: worker.clone(),
                    },
                ]
            })
            .collect();
        aggregate(
            &Burst {
                pid: 7,
                python_version: None,
                time: 0.0,
                duration_seconds: 1.0,
                reads: &reads,
                times: &[],
                dropped: 0,
            },
            Focus::AllThreads,
        )
    }

    fn locked() -> Vec<CodeFrame> {
        vec![
            frame("Lock.acquire", "threading.py", 100, true),
            frame("run", "train.py", 88, false),
        ]
    }

    fn stepping() -> Vec<CodeFrame> {
        vec![frame("step", "train.py", 60, false)]
    }

    #[test]
    fn the_same_stacks_in_three_reads_over_forty_seconds_are_stuck() {
        let mut c = Confirmation::default();
        c.follow(Some((7, 100.0)));
        assert!(c.wanted(1000.0, 25.0, 20.0, 20.0));
        for t in [1000.0, 1020.0, 1040.0] {
            c.asked(t);
            c.add(7, t, &burst(&[locked()]));
        }
        assert!(!c.wanted(1045.0, 70.0, 20.0, 20.0), "asked 5 s ago");
        let stuck = c.stuck(1041.0, 70.0, 3, 20.0).expect("stuck");
        assert_eq!(stuck.place, "threading.Lock.acquire <- run (train.py:88)");
        assert_eq!(stuck.thread, "tid 7 (python3)");
        assert_eq!((stuck.reads, stuck.over_seconds), (3, 40.0));
        // Output came back 10 s ago: the reads are from before it.
        assert_eq!(c.stuck(1041.0, 10.0, 3, 20.0), None);
    }

    #[test]
    fn stacks_that_move_or_too_few_reads_are_not_stuck() {
        let mut c = Confirmation::default();
        c.follow(Some((7, 100.0)));
        c.add(7, 1000.0, &burst(&[locked()]));
        c.add(7, 1020.0, &burst(&[locked()]));
        assert_eq!(c.stuck(1021.0, 60.0, 3, 20.0), None, "two reads");
        c.add(7, 1040.0, &burst(&[stepping()]));
        assert_eq!(
            c.stuck(1041.0, 60.0, 3, 20.0),
            None,
            "the main thread moved"
        );
        // Moving within a burst: half its reads at one place, half at another.
        let mut m = Confirmation::default();
        m.follow(Some((7, 100.0)));
        for t in [1000.0, 1020.0, 1040.0] {
            m.add(7, t, &burst(&[locked(), stepping()]));
        }
        assert_eq!(m.stuck(1041.0, 60.0, 3, 20.0), None);
    }

    #[test]
    fn a_notebook_kernel_waiting_for_its_user_is_not_stuck() {
        let mut c = Confirmation::default();
        c.follow(Some((7, 100.0)));
        for t in [1000.0, 1020.0, 1040.0] {
            let mut kernel = burst(&[locked()]);
            kernel.interactive = true;
            c.add(7, t, &kernel);
        }
        assert_eq!(c.stuck(1041.0, 60.0, 3, 20.0), None);
    }

    #[test]
    fn reads_of_another_job_or_without_stacks_confirm_nothing() {
        let mut c = Confirmation::default();
        c.follow(Some((7, 100.0)));
        for t in [1000.0, 1020.0, 1040.0] {
            c.add(8, t, &burst(&[locked()]));
        }
        assert_eq!(c.stuck(1041.0, 60.0, 3, 20.0), None);
        let none = crate::stack_report::unavailable(7, ReadOutcome::NoPermission, "no".into(), 0.0);
        for t in [1000.0, 1020.0, 1040.0] {
            c.add(7, t, &none);
        }
        assert_eq!(c.stuck(1041.0, 60.0, 3, 20.0), None);
        c.follow(Some((9, 200.0)));
        assert_eq!(c.job_pid(), Some(9));
        assert_eq!(c.stuck(1041.0, 60.0, 3, 20.0), None);
    }
}
