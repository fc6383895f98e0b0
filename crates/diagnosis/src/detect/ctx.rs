//! What every detector looks at for one GPU at one sample, and what it says.

use std::cell::{Cell, RefCell};

use crate::Kind;
use crate::config::DiagnosisConfig;
use crate::hysteresis::Condition;
use crate::round::{round, round_opt};
use crate::types::evidence::{Evidence, ProcessEvidence, ThreadEvidence};
use crate::types::frame::{GpuFrame, HostFrame, JobFrame};
use crate::window::{History, UtilizationStats, Window};

/// Everything a detector may look at for one GPU at one sample.
pub struct Ctx<'a> {
    pub config: &'a DiagnosisConfig,
    pub t: f64,
    pub gpu: &'a GpuFrame,
    /// Live jobs on this GPU (not zombies, not leftovers), warming up or not.
    pub jobs: Vec<&'a JobFrame>,
    pub host: &'a HostFrame,
    pub history: &'a History,
    /// Seconds since the GPU's jobs last showed output progress.
    pub silent_seconds: Option<f64>,
    /// The hang time for the GPU's jobs.
    pub hang_seconds: f64,
    /// The GPU's job stood at the same place in its confirming reads
    /// during the current silence.
    pub stuck: Option<crate::types::stuck::Stuck>,
    /// Set by the no-progress detectors: the GPU looks hung over the
    /// current silence (idle with an idle job, or busy at low power),
    /// whatever its length: a confirming read is worth taking.
    pub hang_shape: Cell<bool>,
    /// Typical busy power of this GPU while its job made progress.
    pub power_baseline: Option<f64>,
    /// Processes the leftover tracker currently accuses.
    pub leftovers: Vec<ProcessEvidence>,
    /// Separate live processes with sizeable memory on this GPU.
    pub sharers: Vec<ProcessEvidence>,
    /// Whether input_starved / input_bound are active, and whether their
    /// enter conditions hold now (set as they are evaluated, before the
    /// kinds that depend on them).
    pub starved_active: bool,
    pub bound_active: bool,
    pub starved_enter: bool,
    pub bound_enter: bool,
    /// The GPU holds a job, or lost its last one within `gpu_fault.job_gone`.
    pub had_job: bool,
    /// Activity statistics of the windows asked for so far at this sample.
    pub utilization: UtilizationCache,
    /// The kind being detected is active (set by the engine before each
    /// kind): its evidence is kept and its end event carries it.
    pub active: Cell<bool>,
}

/// Activity statistics by window length, for one GPU at one sample: the
/// detectors and their evidence ask for the same few windows many times.
#[derive(Default)]
pub struct UtilizationCache(RefCell<Vec<(f64, Option<UtilizationStats>)>>);

/// A detector's answer for one sample.
pub struct Finding {
    pub condition: Condition,
    pub evidence: Evidence,
}

impl Ctx<'_> {
    /// A detector's finding. Its evidence is built only where it can be
    /// used: the kind is active (the evidence is kept, an end event carries
    /// it) or its enter condition holds (a start event would carry it).
    /// Otherwise the evidence is left empty: most kinds are inactive on most
    /// GPUs at most samples, and their evidence would be thrown away.
    pub fn finding(&self, condition: Condition, evidence: impl FnOnce() -> Evidence) -> Finding {
        let wanted = self.active.get() || condition.enter;
        Finding {
            condition,
            evidence: if wanted {
                evidence()
            } else {
                Evidence::default()
            },
        }
    }

    pub fn window(&self, kind: Kind) -> Window<'_> {
        self.history.window(self.config.timing(kind).window)
    }

    /// The window's activity statistics (`Window::utilization` with the
    /// configured thresholds), computed once per window length and sample.
    pub fn utilization(&self, w: &Window) -> Option<UtilizationStats> {
        let mut cache = self.utilization.0.borrow_mut();
        if let Some((_, stats)) = cache.iter().find(|(s, _)| *s == w.seconds()) {
            return *stats;
        }
        let stats = w.utilization(self.config.idle_below, self.config.busy_above);
        cache.push((w.seconds(), stats));
        stats
    }

    /// Utilization evidence over a window.
    pub fn utilization_evidence(&self, w: &Window) -> Evidence {
        let stats = self.utilization(w);
        Evidence {
            window_seconds: Some(round(w.seconds())),
            activity_signal: self.history.latest().and_then(|p| p.activity),
            utilization_mean: stats.map(|s| round(s.mean)),
            utilization_stddev: stats.map(|s| round(s.stddev)),
            idle_share: stats.map(|s| round(s.idle_share)),
            busy_share: stats.map(|s| round(s.busy_share)),
            gpu_memory_used_ratio: round_opt(self.gpu.memory_used_ratio()),
            job_cpu_cores: round_opt(w.mean(|p| p.job_cpu)),
            top_threads: self.top_threads(),
            psi_cpu_some: round_opt(self.host.psi_cpu_some),
            psi_io_some: round_opt(self.host.psi_io_some),
            ..Evidence::default()
        }
    }

    /// Power evidence: the window's mean `power`, the busy baseline, the limit.
    pub fn power_evidence(&self, power: Option<f64>, evidence: &mut Evidence) {
        evidence.power_watts = round_opt(power);
        evidence.power_baseline_watts = round_opt(self.power_baseline);
        evidence.power_limit_watts = round_opt(self.gpu.power_limit_watts);
    }

    /// The busiest threads across the GPU's jobs, busiest first (at most 3).
    pub fn top_threads(&self) -> Vec<ThreadEvidence> {
        let mut threads: Vec<ThreadEvidence> = self
            .jobs
            .iter()
            .flat_map(|j| j.top_threads.iter())
            .map(ThreadEvidence::from)
            .collect();
        threads.sort_by(|a, b| b.cpu_ratio.total_cmp(&a.cpu_ratio));
        threads.truncate(3);
        threads
    }

    /// The window is covered by samples in which a live, warmed-up job held the GPU.
    pub fn job_throughout(&self, w: &Window) -> bool {
        w.covered() && w.all(|p| p.has_job)
    }

    /// A refinement may look for its cause while the GPU is starved or
    /// input-bound, or about to be.
    pub fn refinement_parent(&self) -> bool {
        self.starved_active || self.bound_active || self.starved_enter || self.bound_enter
    }
}
