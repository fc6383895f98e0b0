//! The engine: frames in, per-GPU state and events out. Pure: time comes
//! with the frames.

use std::cell::{Cell, OnceCell};
use std::collections::VecDeque;

use crate::config::DiagnosisConfig;
use crate::confirm::Confirmation;
use crate::detect::hint;
use crate::detect::{Ctx, UtilizationCache, detect};
use crate::evidence::{Evidence, FaultEvidence};
use crate::frame::{Frame, GpuFrame, JobFrame};
use crate::hysteresis::{Episode, Transition};
use crate::phase::Phases;
use crate::processes;
use crate::report::{job_status, make_event, primary_job};
use crate::stacks::StackReport;
use crate::status::{ActiveKind, Event, GpuStatus, JobRef, JobStatus, KindCounters, Phase};
use crate::tracking::{ProcessActivity, Progress};
use crate::window::{ActivitySignal, History, Point};
use crate::{Kind, Verdict};

/// A gap between samples longer than this does not count as stalled or
/// idle time (the daemon was paused, or GPU data was missing).
const MAX_STEP_SECONDS: f64 = 10.0;

/// Samples of busy power while the job progressed before a baseline counts,
/// and how many recent ones the baseline (their median) is taken from.
const BASELINE_SAMPLES: usize = 10;
const BASELINE_KEPT: usize = 120;

const THROTTLE_MASK: u64 = crate::detect::THROTTLE_MASK;

const KINDS: usize = Kind::ALL.len();
/// `Kind::GpuFault`'s place in `Kind::ALL` (and in the per-kind arrays).
const FAULT: usize = {
    let mut i = 0;
    while !matches!(Kind::ALL[i], Kind::GpuFault) {
        i += 1;
    }
    i
};

#[derive(Debug)]
struct GpuState {
    index: u32,
    uuid: String,
    history: History,
    episodes: [Episode; KINDS],
    evidence: [Evidence; KINDS],
    seconds_total: [f64; KINDS],
    events_total: [u64; KINDS],
    verdict: Verdict,
    verdict_since: f64,
    job_idle_seconds_total: f64,
    /// Recent busy power samples taken while the job made progress.
    busy_power: VecDeque<f64>,
    activity: ProcessActivity,
    leftover_pids: Vec<u32>,
    last_t: Option<f64>,
    jobs: Vec<JobStatus>,
    /// Python stacks sampled for the current episodes of the kinds that want
    /// them; cleared when none of those is active.
    stacks: Option<StackReport>,
    /// The job last seen on the GPU and when: a fault may take the job (or
    /// the GPU) away before it is diagnosed.
    last_job: Option<(JobRef, f64)>,
    /// The fault behind an active gpu_fault episode, for the hang kinds.
    fault: Option<FaultEvidence>,
    /// The confirming reads of the GPU's job, and whether one is due.
    confirm: Confirmation,
    confirm_due: bool,
    /// The job's own phases, and whether a short read to find one is due.
    phases: Phases,
    phase_due: bool,
    /// The phase at the latest frame, for the status.
    phase: Option<crate::phase::PhaseStatus>,
    /// Since when a stall kind's condition has held (a phase may explain it).
    stall_since: Option<f64>,
    /// When a phase of normal length last held the stall kinds back: their
    /// windows hold its idle time for a while after it ends.
    phase_held_at: Option<f64>,
}

impl GpuState {
    fn new(gpu: &GpuFrame, t: f64) -> Self {
        GpuState {
            index: gpu.index,
            uuid: gpu.uuid.clone(),
            history: History::default(),
            episodes: Default::default(),
            evidence: Default::default(),
            seconds_total: [0.0; KINDS],
            events_total: [0; KINDS],
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
        }
    }

    fn set_verdict(&mut self, verdict: Verdict, t: f64) {
        if verdict != self.verdict {
            self.verdict = verdict;
            self.verdict_since = t;
        }
    }
}

pub struct Engine {
    config: DiagnosisConfig,
    gpus: Vec<GpuState>,
    progress: Progress,
    events: VecDeque<Event>,
    next_event_id: u64,
}

impl Engine {
    pub fn new(config: DiagnosisConfig) -> Self {
        Engine {
            config,
            gpus: Vec::new(),
            progress: Progress::default(),
            events: VecDeque::new(),
            next_event_id: 1,
        }
    }

    /// Feeds one frame; returns the events it caused, oldest first.
    pub fn observe(&mut self, frame: &Frame) -> Vec<Event> {
        self.progress.observe(frame);
        let mut new_events = Vec::new();
        for gpu in &frame.gpus {
            let pos = match self.gpus.iter().position(|g| same_gpu(g, gpu)) {
                Some(p) => p,
                None => {
                    self.gpus.push(GpuState::new(gpu, frame.t));
                    self.gpus.len() - 1
                }
            };
            // In place: a GPU's state is 16 KB (an evidence per kind).
            let state = &mut self.gpus[pos];
            Self::observe_gpu(
                &self.config,
                &self.progress,
                state,
                gpu,
                frame,
                &mut new_events,
            );
        }
        for state in &mut self.gpus {
            if !frame.gpus.iter().any(|g| same_gpu(state, g)) {
                state.set_verdict(Verdict::Unknown, frame.t);
                state.last_t = Some(frame.t);
            }
        }
        for event in &mut new_events {
            event.id = self.next_event_id;
            self.next_event_id += 1;
            if self.events.len() == self.config.events_capacity {
                self.events.pop_front();
            }
            self.events.push_back(event.clone());
        }
        new_events
    }

    fn observe_gpu(
        config: &DiagnosisConfig,
        progress: &Progress,
        state: &mut GpuState,
        gpu: &GpuFrame,
        frame: &Frame,
        events: &mut Vec<Event>,
    ) {
        let t = frame.t;
        let dt = state
            .last_t
            .map(|last| t - last)
            .filter(|d| *d > 0.0 && *d <= MAX_STEP_SECONDS)
            .unwrap_or(0.0);
        state.last_t = Some(t);
        state.index = gpu.index;
        if !gpu.fresh {
            // A fault may be why the GPU stopped answering (Xid 79).
            Self::observe_fault(config, state, gpu, frame, &[], dt, events);
            state.set_verdict(Verdict::Unknown, t);
            return;
        }
        let warmup = config.warmup_seconds();

        // Processes and jobs on this GPU.
        state.activity.observe(t, &gpu.processes);
        let leftovers = processes::leftovers(config, &state.activity, gpu, frame);
        state.leftover_pids = leftovers.iter().map(|p| p.pid).collect();
        let jobs: Vec<&JobFrame> = frame
            .jobs
            .iter()
            .filter(|j| {
                j.gpus.contains(&gpu.index)
                    && j.state != 'Z'
                    && !state.leftover_pids.contains(&j.pid)
            })
            .collect();
        let warmed: Vec<&JobFrame> = jobs
            .iter()
            .copied()
            .filter(|j| t - j.start_time >= warmup)
            .collect();
        let sharers = processes::sharers(config, gpu, &jobs);
        Self::observe_fault(config, state, gpu, frame, &jobs, dt, events);

        // Progress of the GPU's warmed-up jobs: the most recent output counts.
        let silent = warmed
            .iter()
            .filter_map(|j| progress.silent_seconds(j, t))
            .reduce(f64::min);
        let hang = warmed
            .iter()
            .map(|j| progress.hang_seconds(j, config))
            .reduce(f64::max)
            .unwrap_or(config.hang_bounds().0);

        // Busy power is learned only while a job shows output at its usual rhythm.
        let progressing = warmed.iter().any(|j| {
            let usual = progress.usual_interval(j);
            let silent = progress.silent_seconds(j, t);
            matches!((usual, silent), (Some(u), Some(s)) if s <= 2.0 * u)
        });
        let point = point(
            t,
            gpu,
            frame,
            &warmed,
            config.single_thread_bound.max_process_cpu,
        );
        if let (Some(util), Some(power)) = (point.utilization, point.power_watts)
            && util >= config.baseline_above
            && progressing
        {
            if state.busy_power.len() == BASELINE_KEPT {
                state.busy_power.pop_front();
            }
            state.busy_power.push_back(power);
        }
        if !jobs.is_empty() && point.utilization.is_some_and(|u| u < config.idle_below) {
            state.job_idle_seconds_total += dt;
        }
        state.history.push(point, config.history_seconds() + 1.0);

        // The job the confirming reads follow: the one an event would name.
        let primary =
            primary_job(gpu, &warmed).and_then(|r| warmed.iter().find(|j| j.pid == r.pid));
        let followed = primary.map(|j| (j.pid, j.start_time));
        // An orphan (its parent gone, adopted by init) idle at its GPU is
        // the leftover rule's to judge (`leftover_process.idle_for`), not a
        // hang to confirm.
        state
            .confirm
            .follow(followed.filter(|_| primary.is_some_and(|j| j.ppid != 1)));
        state.phases.follow(followed);
        let phase_limits = config.phase_limits();
        if let Some(l) = &phase_limits {
            state.phases.current(t, l);
        }
        let phase = phase_limits
            .as_ref()
            .and_then(|l| state.phases.status(t, l));
        // A phase of normal length holds back the stall kinds it explains.
        // So does a read asked for that has not come back yet.
        match &phase {
            Some(p) if !p.unusual => state.phase_held_at = Some(t),
            // An unusual phase is reported at once, with the time it held.
            Some(_) => state.phase_held_at = None,
            None => {}
        }
        let phase_ended_at = state.phase_held_at.filter(|_| phase.is_none());
        let phase_holds = phase.as_ref().is_some_and(|p| !p.unusual)
            || (phase_limits.is_some()
                && state
                    .stall_since
                    .is_some_and(|since| state.phases.awaiting(t, since)));
        let mut stall_looking = false;
        let confirming = config.confirming();
        let stuck = confirming
            .zip(silent)
            .and_then(|(c, s)| state.confirm.stuck(t, s, c.reads, c.interval));
        let mut ctx = Ctx {
            config,
            t,
            gpu,
            jobs: jobs.clone(),
            host: &frame.host,
            history: &state.history,
            silent_seconds: silent,
            hang_seconds: hang,
            stuck,
            hang_shape: Cell::new(false),
            power_baseline: median(&state.busy_power)
                .filter(|_| state.busy_power.len() >= BASELINE_SAMPLES),
            leftovers,
            sharers,
            starved_active: false,
            bound_active: false,
            starved_enter: false,
            bound_enter: false,
            had_job: !jobs.is_empty(),
            utilization: UtilizationCache::default(),
            active: Cell::new(false),
        };
        let all_warming = !jobs.is_empty() && warmed.is_empty();
        // The job an event names, found when the first event needs it.
        let job_ref = OnceCell::new();
        // What the jobs say of their framework, made once for the kinds
        // that are active or entering.
        let framework_ref = OnceCell::new();
        for (i, kind) in Kind::ALL.into_iter().enumerate() {
            let timing = config.timing(kind);
            if !timing.enabled || kind == Kind::GpuFault {
                continue;
            }
            let was_active = state.episodes[i].is_active();
            ctx.active.set(was_active);
            let mut finding = detect(kind, &ctx);
            if was_active || finding.condition.enter {
                finding.evidence.framework.clone_from(
                    framework_ref.get_or_init(|| crate::evidence::framework(&ctx.jobs, ctx.host)),
                );
                if kind.yields_to_phase() {
                    finding.evidence.phase = phase.clone().filter(|p| p.unusual);
                }
            }
            if kind.yields_to_phase() && finding.condition.enter {
                stall_looking = true;
            }
            if kind.wants_stacks() {
                finding.evidence.stacks.clone_from(&state.stacks);
            }
            if matches!(
                kind,
                Kind::BusyNoProgress | Kind::IdleNoProgress | Kind::Spinning
            ) {
                finding.evidence.fault.clone_from(&state.fault);
            }
            if kind.waits_for_warmup() && (all_warming || warmed.is_empty()) {
                finding.condition.enter = false;
            }
            // Once a phase ends, a kind it explained starts counting afresh
            // when its window no longer holds the phase's samples (a
            // compilation's idle minutes are not the input pipeline's).
            if kind.yields_to_phase() && phase_ended_at.is_some_and(|at| t - at < timing.window) {
                finding.condition.enter = false;
            }
            let parent = ctx.starved_active || ctx.bound_active;
            let (allowed, force_end) = if kind.is_refinement() {
                (parent, !parent)
            } else {
                (true, false)
            };
            let allowed = allowed && !(phase_holds && kind.yields_to_phase());
            let transition = state.episodes[i].update(
                t,
                finding.condition,
                timing.enter_for,
                timing.exit_for,
                allowed,
                force_end,
            );
            if was_active {
                state.seconds_total[i] += dt;
            }
            let job = || job_ref.get_or_init(|| primary_job(gpu, &jobs)).clone();
            if let Some(event) = event_for(transition, kind, gpu, t, job, &finding.evidence) {
                if event.phase == Phase::Start {
                    state.events_total[i] += 1;
                }
                events.push(event);
            }
            if state.episodes[i].is_active() {
                state.evidence[i] = finding.evidence;
            }
            match kind {
                Kind::InputStarved => {
                    ctx.starved_active = state.episodes[i].is_active();
                    ctx.starved_enter = finding.condition.enter;
                }
                Kind::InputBound => {
                    ctx.bound_active = state.episodes[i].is_active();
                    ctx.bound_enter = finding.condition.enter;
                }
                _ => {}
            }
        }

        let no_progress = Kind::ALL.iter().enumerate().any(|(i, k)| {
            matches!(k, Kind::BusyNoProgress | Kind::IdleNoProgress)
                && state.episodes[i].is_active()
        });
        state.stall_since = if stall_looking {
            state.stall_since.or(Some(t))
        } else {
            None
        };
        if let Some(l) = &phase_limits {
            if stall_looking {
                state.phases.count(t, dt, l);
            }
            // Read while a stall kind's condition holds: to hold it back,
            // and to follow the phase (its end, its cost) once reported.
            // (not once the job is found hung: a hang is no phase).
            state.phase_due = stall_looking
                && !no_progress
                && ctx.stuck.is_none()
                && state.phases.wanted(t, l.interval);
        } else {
            state.phase_due = false;
        }
        state.phase = phase;
        state.confirm_due = match (confirming, silent) {
            (Some(c), Some(s)) => {
                ctx.hang_shape.get()
                    && !no_progress
                    && ctx.stuck.is_none()
                    && state.confirm.wanted(t, s, c.after, c.interval)
            }
            _ => false,
        };
        if !Kind::ALL
            .iter()
            .enumerate()
            .any(|(i, k)| k.wants_stacks() && state.episodes[i].is_active())
        {
            state.stacks = None;
        }
        let stalled = Kind::ALL
            .iter()
            .enumerate()
            .any(|(i, k)| k.is_stall() && state.episodes[i].is_active());
        let verdict = if jobs.is_empty() {
            Verdict::NoJob
        } else if stalled {
            Verdict::Stalled
        } else if all_warming {
            Verdict::WarmingUp
        } else {
            Verdict::Healthy
        };
        state.set_verdict(verdict, t);
        state.jobs = jobs.iter().map(|j| job_status(j, gpu, t, warmup)).collect();
    }

    /// The gpu_fault kind, judged on every frame the GPU is in, fresh or
    /// not: a GPU that fell off the bus does not answer, and its job is gone.
    fn observe_fault(
        config: &DiagnosisConfig,
        state: &mut GpuState,
        gpu: &GpuFrame,
        frame: &Frame,
        jobs: &[&JobFrame],
        dt: f64,
        events: &mut Vec<Event>,
    ) {
        let t = frame.t;
        let timing = config.timing(Kind::GpuFault);
        if !timing.enabled {
            return;
        }
        let (_, job_gone) = config.fault_seconds();
        if let Some(job) = primary_job(gpu, jobs) {
            state.last_job = Some((job, t));
        }
        let recent_job = state
            .last_job
            .as_ref()
            .filter(|(_, seen)| t - seen <= job_gone)
            .map(|(job, _)| job.clone());
        let finding = {
            let ctx = Ctx {
                config,
                t,
                gpu,
                jobs: jobs.to_vec(),
                host: &frame.host,
                history: &state.history,
                silent_seconds: None,
                hang_seconds: 0.0,
                stuck: None,
                hang_shape: Cell::new(false),
                power_baseline: None,
                leftovers: Vec::new(),
                sharers: Vec::new(),
                starved_active: false,
                bound_active: false,
                starved_enter: false,
                bound_enter: false,
                had_job: recent_job.is_some(),
                utilization: UtilizationCache::default(),
                active: Cell::new(true),
            };
            detect(Kind::GpuFault, &ctx)
        };
        let was_active = state.episodes[FAULT].is_active();
        let transition = state.episodes[FAULT].update(
            t,
            finding.condition,
            timing.enter_for,
            timing.exit_for,
            true,
            false,
        );
        if was_active {
            state.seconds_total[FAULT] += dt;
        }
        if let Some(event) = event_for(
            transition,
            Kind::GpuFault,
            gpu,
            t,
            || primary_job(gpu, jobs).or(recent_job),
            &finding.evidence,
        ) {
            if event.phase == Phase::Start {
                state.events_total[FAULT] += 1;
            }
            events.push(event);
        }
        if state.episodes[FAULT].is_active() {
            state.fault.clone_from(&finding.evidence.fault);
            state.evidence[FAULT] = finding.evidence;
        } else {
            state.fault = None;
        }
    }

    /// The GPUs whose job a short read of its stacks is due for, as (GPU
    /// index, uuid, pid), after the latest frame: to confirm a hang (a
    /// silent job whose GPU looks hung) or to find the job's phase (a stall
    /// kind's condition holds). The caller reads (a short burst of every
    /// thread), says so with [`Engine::short_read_asked`], and hands the
    /// report to [`Engine::attach_short_read`].
    pub fn short_reads_due(&self) -> Vec<(u32, String, u32)> {
        self.gpus
            .iter()
            .filter(|s| s.confirm_due || s.phase_due)
            .filter_map(|s| Some((s.index, s.uuid.clone(), s.phases.job_pid()?)))
            .collect()
    }

    /// A short read of `gpu`'s job was asked for at `t`.
    pub fn short_read_asked(&mut self, gpu: u32, uuid: &str, t: f64) {
        if let Some(s) = self.gpu_mut(gpu, uuid) {
            if s.confirm_due {
                s.confirm.asked(t);
            }
            s.phases.asked(t);
            s.confirm_due = false;
            s.phase_due = false;
        }
    }

    /// A short read of `gpu`'s job, taken when the report says.
    pub fn attach_short_read(&mut self, gpu: u32, uuid: &str, report: &StackReport) {
        if let Some(s) = self.gpu_mut(gpu, uuid) {
            s.confirm.add(report.pid, report.time, report);
            s.phases.add(report.pid, report.time, report.phase);
        }
    }

    fn gpu_mut(&mut self, gpu: u32, uuid: &str) -> Option<&mut GpuState> {
        self.gpus
            .iter_mut()
            .find(|s| s.index == gpu && (uuid.is_empty() || s.uuid == uuid))
    }

    /// Attaches a stack report to the GPU's active episodes that want stacks
    /// and to their start events still in the ring. Returns those events, as
    /// now amended; none when no such episode is active any more.
    pub fn attach_stacks(&mut self, gpu: u32, uuid: &str, report: StackReport) -> Vec<Event> {
        let Some(state) = self
            .gpus
            .iter_mut()
            .find(|s| s.index == gpu && (uuid.is_empty() || s.uuid == uuid))
        else {
            return Vec::new();
        };
        let active: Vec<(Kind, f64)> = Kind::ALL
            .iter()
            .enumerate()
            .filter(|(_, k)| k.wants_stacks())
            .filter_map(|(i, k)| Some((*k, state.episodes[i].active_since?)))
            .collect();
        if active.is_empty() {
            return Vec::new();
        }
        for (i, k) in Kind::ALL.iter().enumerate() {
            if k.wants_stacks() && state.episodes[i].is_active() {
                state.evidence[i].stacks = Some(report.clone());
            }
        }
        state.stacks = Some(report.clone());
        let uuid = state.uuid.clone();
        let mut amended = Vec::new();
        for event in self.events.iter_mut().rev() {
            let current = active
                .iter()
                .any(|(k, since)| event.kind == *k && event.time >= *since);
            if event.phase == Phase::Start
                && event.gpu == gpu
                && event.uuid == uuid
                && current
                && event.evidence.stacks.is_none()
            {
                event.evidence.stacks = Some(report.clone());
                event.hint = hint(event.kind, &event.evidence);
                amended.push(event.clone());
            }
        }
        amended.reverse();
        amended
    }

    /// Per-GPU status, in GPU index order.
    pub fn status(&self) -> Vec<GpuStatus> {
        let mut out: Vec<GpuStatus> = self
            .gpus
            .iter()
            .map(|s| GpuStatus {
                gpu: s.index,
                uuid: s.uuid.clone(),
                verdict: s.verdict,
                verdict_since: s.verdict_since,
                active: Kind::ALL
                    .iter()
                    .enumerate()
                    .filter_map(|(i, k)| {
                        let since = s.episodes[i].active_since?;
                        Some(ActiveKind {
                            kind: *k,
                            since,
                            evidence: s.evidence[i].clone(),
                            hint: hint(*k, &s.evidence[i]),
                        })
                    })
                    .collect(),
                jobs: s.jobs.clone(),
                job_idle_seconds_total: s.job_idle_seconds_total,
                phase: s.phase.clone(),
                phase_seconds_total: crate::phase::JobPhase::ALL
                    .into_iter()
                    .map(|p| (p, s.phases.seconds_total[p as usize]))
                    .collect(),
                kinds: Kind::ALL
                    .iter()
                    .enumerate()
                    .map(|(i, k)| {
                        let counters = KindCounters {
                            active: s.episodes[i].is_active(),
                            seconds_total: s.seconds_total[i],
                            events_total: s.events_total[i],
                        };
                        (*k, counters)
                    })
                    .collect(),
            })
            .collect();
        out.sort_by_key(|g| g.gpu);
        out
    }

    /// Events with an id greater than `after_id` and a time at or after
    /// `since`, oldest first, at most `limit`.
    pub fn events(&self, since: f64, after_id: u64, limit: usize) -> Vec<Event> {
        self.events
            .iter()
            .filter(|e| e.time >= since && e.id > after_id)
            .take(limit)
            .cloned()
            .collect()
    }
}

/// The start or end event of an episode's transition, if there was one.
fn event_for(
    transition: Option<Transition>,
    kind: Kind,
    gpu: &GpuFrame,
    t: f64,
    job: impl FnOnce() -> Option<JobRef>,
    evidence: &Evidence,
) -> Option<Event> {
    let (phase, since) = match transition? {
        Transition::Started { onset } => (Phase::Start, onset),
        Transition::Ended { since } => (Phase::End, since),
    };
    Some(make_event(phase, kind, gpu, t, since, job(), evidence))
}

fn same_gpu(state: &GpuState, gpu: &GpuFrame) -> bool {
    if gpu.uuid.is_empty() || state.uuid.is_empty() {
        state.index == gpu.index
    } else {
        state.uuid == gpu.uuid
    }
}

fn point(
    t: f64,
    gpu: &GpuFrame,
    frame: &Frame,
    warmed: &[&JobFrame],
    max_process_cpu: f64,
) -> Point {
    let sum =
        |f: fn(&JobFrame) -> Option<f64>| warmed.iter().filter_map(|j| f(j)).reduce(|a, b| a + b);
    let activity = match (gpu.utilization, gpu.sm_active) {
        (Some(_), _) => Some(ActivitySignal::UtilizationGpu),
        (None, Some(_)) => Some(ActivitySignal::GpmSmActive),
        (None, None) => None,
    };
    let steal = frame.host.cpu_steal;
    let spread = crate::detect::spread_load(warmed, max_process_cpu, steal);
    Point {
        t,
        utilization: gpu.utilization.or(gpu.sm_active),
        activity,
        sm_active: gpu.sm_active,
        tensor_active: gpu.tensor_active,
        dram_active: gpu.dram_active,
        nvlink_bytes_per_second: gpu.nvlink_bytes_per_second,
        pcie_bytes_per_second: gpu.pcie_bytes_per_second,
        has_job: !warmed.is_empty(),
        job_cpu: sum(|j| j.cpu_cores),
        top_thread_cpu: warmed
            .iter()
            .filter_map(|j| j.top_threads.first().map(|th| th.cpu))
            .reduce(f64::max)
            .map(|cpu| crate::steal::thread_without_steal(cpu, steal, frame.host.cpu_utilization)),
        spread_cpu: spread.map(|s| s.cpu),
        spread_demand: spread.map(|s| s.demand),
        disk_sleep: warmed.iter().any(|j| j.threads_disk_sleep > 0),
        threads_running: warmed.iter().map(|j| j.threads_running).sum(),
        threads_total: warmed.iter().map(|j| j.threads_total).sum(),
        host_cpu: frame.host.cpu_utilization,
        steal,
        psi_cpu: frame.host.psi_cpu_some,
        psi_io: frame.host.psi_io_some,
        power_watts: gpu.power_watts,
        throttled: gpu.clock_events & THROTTLE_MASK != 0,
    }
}

fn median(values: &VecDeque<f64>) -> Option<f64> {
    let mut sorted: Vec<f64> = values.iter().copied().collect();
    sorted.sort_by(f64::total_cmp);
    sorted.get(sorted.len() / 2).copied()
}
