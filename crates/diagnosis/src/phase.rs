//! A job's own phases that idle its GPU: compiling (`torch.compile`'s
//! Dynamo and Inductor, Triton, XLA, TensorFlow's tracing), checkpointing
//! (saving or loading model state) and the DataLoader's start-up (its
//! worker processes starting). Every run has them; an alert on each would
//! teach people to ignore alerts. So while a phase lasts a normal time, the
//! stall kinds it explains hold back and its GPU-time is counted; a phase
//! that lasts too long, or takes too large a share of the last hour
//! (recompilations, checkpoints too frequent), lets them through with the
//! phase named and its fix.
//!
//! The phase comes from the job's stacks: the short reads the engine asks
//! for while a stall kind's condition holds (the same reads that confirm a
//! hang, see `confirm.rs`).

use std::collections::VecDeque;

pub use crate::config::{Limits, MIN_INTERVAL};
use crate::round::round;
pub use crate::types::phase::{JobPhase, PhaseStatus};
use crate::types::reads::{CodeFrame, ThreadRead};

/// Installed code that runs only in a phase, by package-relative file
/// (a prefix ending in `/` is a package) and function (empty: any).
/// Files that also run at every step of a compiled model
/// (`torch/_dynamo/eval_frame.py`, a `tf.function`'s call) are left out.
const MARKS: &[(&str, &str, JobPhase)] = &[
    ("torch/_dynamo/convert_frame.py", "", JobPhase::Compiling),
    ("torch/_dynamo/symbolic_convert.py", "", JobPhase::Compiling),
    ("torch/_dynamo/output_graph.py", "", JobPhase::Compiling),
    (
        "torch/_inductor/compile_fx.py",
        "compile_fx",
        JobPhase::Compiling,
    ),
    ("torch/_inductor/graph.py", "", JobPhase::Compiling),
    ("torch/_inductor/scheduler.py", "", JobPhase::Compiling),
    ("torch/_inductor/codecache.py", "", JobPhase::Compiling),
    ("torch/_inductor/async_compile.py", "", JobPhase::Compiling),
    ("triton/compiler/", "", JobPhase::Compiling),
    ("jax/_src/compiler.py", "", JobPhase::Compiling),
    ("jax/_src/interpreters/mlir.py", "", JobPhase::Compiling),
    (
        "tensorflow/python/framework/func_graph.py",
        "",
        JobPhase::Compiling,
    ),
    // AutoGraph's converter, not `autograph/impl/api.py`: its
    // `do_not_convert` wrapper runs at every call of a `tf.py_function`.
    ("tensorflow/python/autograph/pyct/", "", JobPhase::Compiling),
    (
        "tensorflow/python/autograph/converters/",
        "",
        JobPhase::Compiling,
    ),
    ("torch/serialization.py", "", JobPhase::Checkpointing),
    ("torch/distributed/checkpoint/", "", JobPhase::Checkpointing),
    ("safetensors/", "", JobPhase::Checkpointing),
    ("tensorflow/python/checkpoint/", "", JobPhase::Checkpointing),
    (
        "tensorflow/python/training/saving/",
        "",
        JobPhase::Checkpointing,
    ),
    ("orbax/checkpoint/", "", JobPhase::Checkpointing),
    ("keras/src/saving/", "", JobPhase::Checkpointing),
    (
        "torch/utils/data/dataloader.py",
        "_MultiProcessingDataLoaderIter.__init__",
        JobPhase::DataLoaderStartup,
    ),
];

fn mark(f: &CodeFrame) -> Option<JobPhase> {
    if !f.library {
        // The user's own `save_checkpoint`, `load_checkpoint`: an fsync or
        // a write of their own around the framework's save.
        let name = f.function.to_ascii_lowercase();
        let checkpoint = name.contains("checkpoint") || name.contains("ckpt");
        return (checkpoint && (name.contains("save") || name.contains("load")))
            .then_some(JobPhase::Checkpointing);
    }
    let function = f.function.as_str();
    MARKS
        .iter()
        .find(|(file, func, _)| {
            let file_matches = if file.ends_with('/') {
                f.file.starts_with(file)
            } else {
                f.file == *file
            };
            file_matches
                && (func.is_empty() || function == *func || function.ends_with(&format!(".{func}")))
        })
        .map(|(_, _, p)| *p)
}

/// The phase one read shows: in the threads that were running, or in every
/// thread when none was (a save waiting on the disk); compiling first.
fn of_read(read: &[ThreadRead]) -> Option<JobPhase> {
    let running: Vec<&ThreadRead> = read.iter().filter(|t| t.state == 'R').collect();
    let threads: Vec<&ThreadRead> = if running.is_empty() {
        read.iter().collect()
    } else {
        running
    };
    threads
        .iter()
        .flat_map(|t| t.frames.iter())
        .filter_map(mark)
        .min()
}

/// The phase of a burst: the one at least half of its reads show.
pub fn of_reads(reads: &[Vec<ThreadRead>]) -> Option<JobPhase> {
    let mut counts = [0usize; 3];
    for read in reads {
        if let Some(p) = of_read(read) {
            counts[p as usize] += 1;
        }
    }
    JobPhase::ALL
        .into_iter()
        .max_by_key(|p| counts[*p as usize])
        .filter(|p| !reads.is_empty() && counts[*p as usize] * 2 >= reads.len())
}

/// Longest the stall kinds wait for the first short read of a stall (real
/// seconds: a read is a burst of 1 s, the first read of a process makes its
/// spy, up to 2 s and more on a loaded host).
pub const AWAIT_SECONDS: f64 = 10.0;
#[derive(Debug, Clone, Copy)]
struct Current {
    phase: JobPhase,
    since: f64,
    last_seen: f64,
}

/// One GPU's job's phases.
#[derive(Debug, Default)]
pub struct Phases {
    job: Option<(u32, f64)>,
    current: Option<Current>,
    asked: Option<f64>,
    /// When the last read came back.
    answered: Option<f64>,
    /// GPU-seconds per phase, per minute (scaled) over the last hour.
    minutes: VecDeque<(f64, [f64; 3])>,
    /// When a phase was entered, over the last hour.
    entered: VecDeque<(f64, JobPhase)>,
    /// Every GPU-second waited on a phase since the daemon started.
    pub seconds_total: [f64; 3],
}

impl Phases {
    /// Follows the GPU's job: a new one is in no phase yet.
    pub fn follow(&mut self, job: Option<(u32, f64)>) {
        if job != self.job {
            self.job = job;
            self.current = None;
            self.asked = None;
        }
    }

    pub fn job_pid(&self) -> Option<u32> {
        self.job.map(|(pid, _)| pid)
    }

    pub fn wanted(&self, t: f64, interval: f64) -> bool {
        self.job.is_some() && self.asked.is_none_or(|a| t - a >= interval)
    }

    pub fn asked(&mut self, t: f64) {
        self.asked = Some(t);
    }

    /// The GPU has looked stalled since `since`, less than
    /// [`AWAIT_SECONDS`] ago, and the read asked for since has not come back
    /// yet: the stall kinds wait for it (it may show a phase). Only the first
    /// read of a stall is waited for.
    pub fn awaiting(&self, t: f64, since: f64) -> bool {
        t - since < AWAIT_SECONDS
            && self.asked.is_some_and(|a| a >= since)
            && self.answered.is_none_or(|r| r < since)
    }

    /// A short read of `pid`, taken at `t`, that showed `phase`.
    pub fn add(&mut self, pid: u32, t: f64, phase: Option<JobPhase>) {
        if self.job.map(|(p, _)| p) != Some(pid) {
            return;
        }
        self.answered = Some(t);
        self.current = match (phase, self.current) {
            (Some(p), Some(c)) if c.phase == p => Some(Current { last_seen: t, ..c }),
            (Some(phase), _) => {
                self.entered.push_back((t, phase));
                Some(Current {
                    phase,
                    since: t,
                    last_seen: t,
                })
            }
            (None, _) => None,
        };
    }

    /// The phase now: the last read showed it, not longer ago than two
    /// reads' interval (a phase no read confirms any more is over).
    pub fn current(&mut self, t: f64, limits: &Limits) -> Option<JobPhase> {
        if self
            .current
            .is_some_and(|c| t - c.last_seen > 2.0 * limits.interval + 2.0)
        {
            self.current = None;
        }
        self.current.map(|c| c.phase)
    }

    /// Counts `dt` GPU-seconds waited on the current phase.
    pub fn count(&mut self, t: f64, dt: f64, limits: &Limits) {
        let Some(c) = self.current else {
            return;
        };
        let i = c.phase as usize;
        self.seconds_total[i] += dt;
        let minute = limits.hour / 60.0;
        match self.minutes.back_mut() {
            Some((start, s)) if t - *start < minute => s[i] += dt,
            _ => {
                let mut s = [0.0; 3];
                s[i] = dt;
                self.minutes.push_back((t, s));
            }
        }
        while self
            .minutes
            .front()
            .is_some_and(|(s, _)| t - s > limits.hour)
        {
            self.minutes.pop_front();
        }
        while self
            .entered
            .front()
            .is_some_and(|(s, _)| t - s > limits.hour)
        {
            self.entered.pop_front();
        }
    }

    /// The current phase as the status and the evidence carry it.
    pub fn status(&self, t: f64, limits: &Limits) -> Option<PhaseStatus> {
        let c = self.current?;
        let i = c.phase as usize;
        let seconds: f64 = self.minutes.iter().map(|(_, s)| s[i]).sum();
        let share = seconds / limits.hour.max(1e-9);
        let entered = self
            .entered
            .iter()
            .filter(|(s, p)| *p == c.phase && t - s <= limits.hour)
            .count() as u32;
        let too_long = t - c.since > limits.max_for[i];
        // A share is the repeated phase's (recompilations, frequent saves):
        // one long phase is judged by its length alone.
        let too_much =
            c.phase != JobPhase::DataLoaderStartup && entered > 1 && share > limits.max_share;
        Some(PhaseStatus {
            phase: c.phase,
            since: c.since,
            seconds: round((t - c.since).max(0.0)),
            seconds_last_hour: round(seconds),
            share_last_hour: round(share),
            entered_last_hour: entered,
            unusual: too_long || too_much,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hint::phase::hint;

    fn frame(function: &str, file: &str, library: bool) -> CodeFrame {
        CodeFrame {
            function: function.into(),
            file: file.into(),
            line: 1,
            library,
        }
    }

    fn read(state: char, frames: Vec<CodeFrame>) -> Vec<ThreadRead> {
        vec![ThreadRead {
            pid: 1,
            tid: 1,
            name: "python3".into(),
            state,
            owns_gil: true,
            frames,
        }]
    }

    #[test]
    fn compile_and_checkpoint_frames_name_their_phase() {
        let compiling = read(
            'R',
            vec![
                frame(
                    "InstructionTranslator.run",
                    "torch/_dynamo/symbolic_convert.py",
                    true,
                ),
                frame("_fn", "torch/_dynamo/eval_frame.py", true),
                frame("train", "train.py", false),
            ],
        );
        assert_eq!(of_reads(&[compiling]), Some(JobPhase::Compiling));
        // A compiled model at work: eval_frame only.
        let running = read(
            'R',
            vec![
                frame("_fn", "torch/_dynamo/eval_frame.py", true),
                frame("train", "train.py", false),
            ],
        );
        assert_eq!(of_reads(&[running]), None);
        // A tf.data `py_function` at work: it runs through AutoGraph's
        // `do_not_convert` wrapper at every call.
        let py_function = read(
            'R',
            vec![
                frame("decode_image", "tf_pipeline.py", false),
                frame(
                    "do_not_convert.<locals>.wrapper",
                    "tensorflow/python/autograph/impl/api.py",
                    true,
                ),
                frame(
                    "EagerFunc.__call__",
                    "tensorflow/python/ops/script_ops.py",
                    true,
                ),
            ],
        );
        assert_eq!(of_reads(&[py_function]), None);
        let converting = read(
            'R',
            vec![
                frame(
                    "parse_entity",
                    "tensorflow/python/autograph/pyct/parser.py",
                    true,
                ),
                frame(
                    "converted_call",
                    "tensorflow/python/autograph/impl/api.py",
                    true,
                ),
            ],
        );
        assert_eq!(of_reads(&[converting]), Some(JobPhase::Compiling));
        let saving = read(
            'D',
            vec![
                frame("save_checkpoint", "train.py", false),
                frame("train", "train.py", false),
            ],
        );
        assert_eq!(of_reads(&[saving]), Some(JobPhase::Checkpointing));
        let torch_save = read('R', vec![frame("save", "torch/serialization.py", true)]);
        assert_eq!(of_reads(&[torch_save]), Some(JobPhase::Checkpointing));
        let starting = read(
            'S',
            vec![frame(
                "_MultiProcessingDataLoaderIter.__init__",
                "torch/utils/data/dataloader.py",
                true,
            )],
        );
        assert_eq!(of_reads(&[starting]), Some(JobPhase::DataLoaderStartup));
    }

    #[test]
    fn a_phase_needs_half_the_reads() {
        let compiling = read(
            'R',
            vec![frame("compile_fx", "torch/_inductor/compile_fx.py", true)],
        );
        let other = read('R', vec![frame("step", "train.py", false)]);
        let reads = vec![compiling.clone(), other.clone(), other.clone()];
        assert_eq!(of_reads(&reads), None);
        assert_eq!(of_reads(&[compiling, other]), Some(JobPhase::Compiling));
    }

    fn limits() -> Limits {
        Limits {
            interval: 20.0,
            max_for: [600.0, 300.0, 300.0],
            max_share: 0.1,
            hour: 3600.0,
        }
    }

    #[test]
    fn a_phase_lasts_while_reads_show_it_and_counts_its_seconds() {
        let l = limits();
        let mut p = Phases::default();
        p.follow(Some((7, 1.0)));
        for t in 100..140 {
            if t % 20 == 0 {
                p.add(7, f64::from(t), Some(JobPhase::Compiling));
            }
            assert_eq!(p.current(f64::from(t), &l), Some(JobPhase::Compiling));
            p.count(f64::from(t), 1.0, &l);
        }
        let s = p.status(140.0, &l).unwrap();
        assert_eq!(
            (s.seconds_last_hour, s.entered_last_hour, s.unusual),
            (40.0, 1, false)
        );
        // No read confirms it for more than two intervals: over.
        assert_eq!(p.current(120.0 + 43.0, &l), None);
        // A read without it ends it at once.
        p.add(7, 150.0, Some(JobPhase::Compiling));
        p.add(7, 170.0, None);
        assert_eq!(p.current(171.0, &l), None);
        assert_eq!(p.seconds_total[JobPhase::Compiling as usize], 40.0);
    }

    #[test]
    fn a_phase_too_long_or_too_frequent_is_unusual() {
        let l = limits();
        let mut p = Phases::default();
        p.follow(Some((7, 1.0)));
        p.add(7, 0.0, Some(JobPhase::DataLoaderStartup));
        p.current(0.0, &l);
        assert!(!p.status(299.0, &l).unwrap().unusual);
        assert!(
            p.status(301.0, &l).unwrap().unusual,
            "longer than its 5 minutes"
        );
        // Recompilations: 8 compilations of 60 s within the hour, 13%.
        let mut r = Phases::default();
        r.follow(Some((7, 1.0)));
        for k in 0..8 {
            let start = f64::from(k) * 400.0;
            r.add(7, start, Some(JobPhase::Compiling));
            for t in 0..60 {
                if t % 20 == 0 {
                    r.add(7, start + f64::from(t), Some(JobPhase::Compiling));
                }
                r.current(start + f64::from(t), &l);
                r.count(start + f64::from(t), 1.0, &l);
            }
            r.add(7, start + 61.0, None);
        }
        r.add(7, 3300.0, Some(JobPhase::Compiling));
        let s = r.status(3300.0, &l).unwrap();
        assert!(
            s.unusual && s.share_last_hour > 0.1 && s.entered_last_hour == 9,
            "{s:?}"
        );
        assert!(hint(&s).contains("torch._dynamo.mark_dynamic"));
    }
}
