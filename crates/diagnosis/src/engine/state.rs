//! One GPU's state in the engine: its history, episodes, evidence,
//! counters and the job-following state of the short reads.

use std::collections::VecDeque;

use super::episodes::{Episodes, KINDS};
use super::lost::{Cause, LOST, LostPlaces};
use crate::{Kind, Verdict};

/// A gap between samples longer than this does not count as stalled or
/// idle time (the daemon was paused, or GPU data was missing); the ledger
/// books it as `unknown`.
pub(super) const MAX_STEP_SECONDS: f64 = 10.0;
/// Recent steps between samples kept to tell the GPU's usual one.
const STEPS_KEPT: usize = 16;

/// Samples of busy power while the job progressed before a baseline counts,
/// and how many recent ones the baseline (their median) is taken from.
pub(super) const BASELINE_SAMPLES: usize = 10;
pub(super) const BASELINE_KEPT: usize = 120;
use crate::confirm::Confirmation;
use crate::types::evidence::{Evidence, FaultEvidence};
use crate::types::frame::GpuFrame;

use crate::ledger::{Booker, LedgerSample, Restarts, Startup};
use crate::phase::Phases;
use crate::tracking::ProcessActivity;
use crate::types::stack_report::StackReport;
use crate::types::status::{JobRef, JobStatus};
use crate::window::History;

#[derive(Debug)]
pub(super) struct GpuState {
    pub(super) index: u32,
    pub(super) uuid: String,
    pub(super) history: History,
    pub(super) episodes: Episodes,
    pub(super) evidence: [Evidence; KINDS],
    pub(super) verdict: Verdict,
    pub(super) verdict_since: f64,
    pub(super) job_idle_seconds_total: f64,
    /// Recent busy power samples taken while the job made progress.
    pub(super) busy_power: VecDeque<f64>,
    pub(super) activity: ProcessActivity,
    pub(super) leftover_pids: Vec<u32>,
    pub(super) last_t: Option<f64>,
    pub(super) jobs: Vec<JobStatus>,
    /// Python stacks sampled for the current episodes of the kinds that want
    /// them; cleared when none of those is active.
    pub(super) stacks: Option<StackReport>,
    /// The job last seen on the GPU and when: a fault may take the job (or
    /// the GPU) away before it is diagnosed.
    pub(super) last_job: Option<(JobRef, f64)>,
    /// The fault behind an active gpu_fault episode, for the hang kinds.
    pub(super) fault: Option<FaultEvidence>,
    /// The confirming reads of the GPU's job, and whether one is due.
    pub(super) confirm: Confirmation,
    pub(super) confirm_due: bool,
    /// The job's own phases, and whether a short read to find one is due.
    pub(super) phases: Phases,
    pub(super) phase_due: bool,
    /// The phase at the latest frame, for the status.
    pub(super) phase: Option<crate::types::phase::PhaseStatus>,
    /// Since when a stall kind's condition has held (a phase may explain it).
    pub(super) stall_since: Option<f64>,
    /// When a phase of normal length last held the stall kinds back: their
    /// windows hold its idle time for a while after it ends.
    pub(super) phase_held_at: Option<f64>,
    /// Where the GPU's time went, and whether its jobs are still starting.
    pub(super) ledger: Booker,
    pub(super) startup: Startup,
    /// The GPU's jobs across restarts of their run.
    pub(super) restarts: Restarts,
    /// The last steps between samples (seconds).
    pub(super) steps: VecDeque<f64>,
    /// Each job's own ledger on this GPU, by (pid, start time's bits), for
    /// the jobs on it now.
    pub(super) job_time: Vec<((u32, u64), Booker)>,
    /// How much of a physical GPU a second of this one is (a MIG instance's
    /// share), as last reported: the ledgers book seconds times this.
    pub(super) weight: f64,
    /// Why the latest fresh frame had no activity reading, if it had none.
    pub(super) no_activity_reading: Option<&'static str>,
    /// Its lost seconds by the place in the job's code that lost them.
    pub(super) lost: LostPlaces,
}

impl GpuState {
    pub(super) fn new(gpu: &GpuFrame, t: f64) -> Self {
        GpuState {
            index: gpu.index,
            uuid: gpu.uuid.clone(),
            history: History::default(),
            episodes: Default::default(),
            evidence: Default::default(),
            verdict: Verdict::Unknown,
            verdict_since: t,
            job_idle_seconds_total: 0.0,
            busy_power: VecDeque::new(),
            activity: ProcessActivity::default(),
            leftover_pids: Vec::new(),
            last_t: None,
            jobs: Vec::new(),
            stacks: None,
            last_job: None,
            fault: None,
            confirm: Confirmation::default(),
            confirm_due: false,
            phases: Phases::default(),
            phase_due: false,
            phase: None,
            stall_since: None,
            phase_held_at: None,
            ledger: Booker::default(),
            startup: Startup::default(),
            restarts: Restarts::default(),
            steps: VecDeque::with_capacity(STEPS_KEPT),
            job_time: Vec::new(),
            weight: gpu.weight(),
            no_activity_reading: None,
            lost: LostPlaces::default(),
        }
    }

    /// Seconds since the last sample, and the part of them that counts as
    /// sampled time: none across a gap (the daemon was paused or GPU data
    /// was missing), a step longer than [`MAX_STEP_SECONDS`] and than three
    /// of the GPU's usual steps (the shortest of the last [`STEPS_KEPT`]: a
    /// daemon sampling every 15 s has no gaps every 15 s); the first step is
    /// taken as it comes.
    pub(super) fn step(&mut self, t: f64) -> (f64, f64) {
        let elapsed = self
            .last_t
            .map(|last| t - last)
            .filter(|d| *d > 0.0)
            .unwrap_or(0.0);
        self.last_t = Some(t);
        // The first step is the sampling interval: no usual one to judge it by.
        let gap = self
            .steps
            .iter()
            .copied()
            .reduce(f64::min)
            .is_some_and(|usual| elapsed > MAX_STEP_SECONDS.max(3.0 * usual));
        if elapsed > 0.0 {
            if self.steps.len() == STEPS_KEPT {
                self.steps.pop_front();
            }
            self.steps.push_back(elapsed);
        }
        (elapsed, if gap { 0.0 } else { elapsed })
    }

    /// Books the time since the last sample, to the GPU and to each of
    /// `jobs` (the jobs on it now; `None`: the ones it had): by the sample's
    /// `outcome`, or, across a gap or with no sample, to `unknown`; each
    /// second weighted by the GPU's share of its physical GPU.
    pub(super) fn book(
        &mut self,
        elapsed: f64,
        dt: f64,
        outcome: Option<&LedgerSample>,
        jobs: Option<&[(u32, u64)]>,
    ) {
        if let Some(jobs) = jobs {
            self.job_time.retain(|(key, _)| jobs.contains(key));
            for key in jobs {
                if !self.job_time.iter().any(|(k, _)| k == key) {
                    self.job_time.push((*key, Booker::default()));
                }
            }
        }
        let (elapsed, dt) = (elapsed * self.weight, dt * self.weight);
        let before = self.ledger.ledger;
        let ledgers =
            std::iter::once(&mut self.ledger).chain(self.job_time.iter_mut().map(|(_, b)| b));
        for booker in ledgers {
            match outcome {
                Some(outcome) if dt > 0.0 => booker.book(outcome, dt),
                _ => booker.book_unknown(elapsed),
            }
        }
        self.book_places(&before);
        for job in &mut self.jobs {
            let key = (job.pid, job.start_time.to_bits());
            if let Some((_, b)) = self.job_time.iter().find(|(k, _)| *k == key) {
                job.time = b.ledger;
            }
        }
    }

    /// Books the lost seconds the GPU's ledger gained since `before` to
    /// their causes' places.
    fn book_places(&mut self, before: &crate::types::ledger::Ledger) {
        let deltas = LostPlaces::deltas(before, &self.ledger.ledger);
        if deltas.iter().all(|d| *d <= 0.0) {
            return;
        }
        let active: Vec<Kind> = Kind::ALL
            .into_iter()
            .enumerate()
            .filter(|(i, _)| self.episodes[*i].is_active())
            .map(|(_, k)| k)
            .collect();
        let causes: Vec<Option<Cause>> = LOST
            .into_iter()
            .zip(deltas)
            .map(|(state, d)| {
                (d > 0.0).then(|| self.lost.cause(state, &active, self.stacks.as_ref()))
            })
            .collect();
        self.lost.book(deltas, &causes, self.last_t.unwrap_or(0.0));
    }

    pub(super) fn set_verdict(&mut self, verdict: Verdict, t: f64) {
        if verdict != self.verdict {
            self.verdict = verdict;
            self.verdict_since = t;
        }
    }
}
