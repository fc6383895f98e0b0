//! One GPU's sample through the engine, stage by stage, in the order
//! [`observe_gpu`] runs them:
//!
//! 1. `holders`: the GPU's processes, its leftovers, its live and
//!    warmed-up jobs, the processes that share it;
//! 2. the `gpu_fault` kind (`fault.rs`);
//! 3. `pace`: the jobs' progress (silence, hang time, usual rhythm);
//! 4. `record`: the sample's point in the history, the busy-power baseline;
//! 5. `gate`: the job the short reads follow, its phase, and whether the
//!    phase holds the stall kinds back;
//! 6. `judge`: every other kind, in `Kind::ALL` order: detection,
//!    hysteresis, counters, events;
//! 7. `settle`: which short reads are due, the verdict, the jobs' status;
//! 8. the ledger: the sample's interval booked to one state (`ledger.rs`).

use std::cell::{Cell, OnceCell};

use super::episodes::event_for;
use super::fault::observe_fault;
use super::point::{median, point};
use super::state::{BASELINE_KEPT, BASELINE_SAMPLES, GpuState};
use super::step::Step;
use crate::config::DiagnosisConfig;
use crate::detect::{Ctx, UtilizationCache, detect};
use crate::ledger::{LedgerSample, StartupSample};
use crate::processes;
use crate::report::{job_status, primary_job};
use crate::tracking::Progress;
use crate::types::evidence::ProcessEvidence;
use crate::types::frame::{Frame, GpuFrame, JobFrame};
use crate::types::phase::PhaseStatus;
use crate::types::status::Event;
use crate::types::time_state::TimeState;
use crate::{Kind, Verdict};

/// Who holds the GPU in this sample.
struct Holders<'f> {
    /// Live jobs on the GPU (not zombies, not leftovers).
    jobs: Vec<&'f JobFrame>,
    /// Those past the warm-up.
    warmed: Vec<&'f JobFrame>,
    leftovers: Vec<ProcessEvidence>,
    sharers: Vec<ProcessEvidence>,
}

/// The warmed-up jobs' progress.
struct Pace {
    /// Seconds since their latest output.
    silent: Option<f64>,
    /// Their hang time.
    hang: f64,
    /// One of them shows output at its usual rhythm.
    progressing: bool,
}

/// The job's phase and what it holds back.
struct Gate {
    phase: Option<PhaseStatus>,
    /// When a phase that held the stall kinds back ended, if it did.
    ended_at: Option<f64>,
    /// The stall kinds a phase explains are held back now.
    holds: bool,
}

/// What judging the kinds leaves for the later stages.
struct Judged {
    /// A stall kind a phase explains is entering.
    stall_looking: bool,
    /// The no-progress detectors saw a hang's shape.
    hang_shape: bool,
    stuck: bool,
    all_warming: bool,
}

pub(super) fn observe_gpu(
    config: &DiagnosisConfig,
    progress: &Progress,
    state: &mut GpuState,
    gpu: &GpuFrame,
    frame: &Frame,
    events: &mut Vec<Event>,
) {
    let t = frame.t;
    let (elapsed, dt) = state.step(t);
    let step = &Step {
        config,
        progress,
        frame,
        gpu,
        t,
        dt,
    };
    state.index = gpu.index;
    state.weight = gpu.weight();
    if !gpu.fresh {
        // A fault may be why the GPU stopped answering (Xid 79).
        observe_fault(step, state, &[], events);
        state.set_verdict(Verdict::Unknown, t);
        let outcome = LedgerSample {
            kinds: active_states(state),
            ..LedgerSample::default()
        };
        state.book(elapsed, dt, Some(&outcome), None);
        return;
    }
    state.no_activity_reading = no_activity_reading(gpu);
    let holders = holders(step, state);
    observe_fault(step, state, &holders.jobs, events);
    let pace = pace(step, &holders.warmed);
    let idle = record(step, state, &holders, &pace);
    let gate = gate(step, state, &holders.warmed);
    let judged = judge(step, state, &holders, &pace, &gate, events);
    let phase = gate.phase.as_ref().map(|p| p.phase);
    settle(step, state, &holders, &pace, gate, &judged);
    let jobs: Vec<(u32, u64)> = holders
        .jobs
        .iter()
        .map(|j| (j.pid, j.start_time.to_bits()))
        .collect();
    let run = holders
        .jobs
        .iter()
        .find_map(|j| j.run.as_ref().map(|r| r.run.as_str()));
    let restart = state.restarts.observe(&jobs, run, t);
    let measured = gpu.measured();
    let starting = state.startup.observe(StartupSample {
        has_jobs: !jobs.is_empty(),
        new_set: restart.new_set,
        young: judged.all_warming,
        busy: measured && !idle,
        host_work: works_on_host(&holders.jobs),
        restarted: restart.restarted,
        t,
    });
    if state.startup.over(t) || jobs.is_empty() {
        state.restarts.started();
    }
    let outcome = LedgerSample {
        fresh: true,
        has_job: !holders.jobs.is_empty(),
        kinds: active_states(state),
        // A phase books only the time the GPU waits for it: once the GPU
        // works again, the phase (kept until the next read) is over.
        phase: phase.filter(|_| idle),
        starting,
        idle,
        unmeasured: !measured,
        run_left: restart.run_left,
        restarted: restart.restarted,
    };
    let productive = state.ledger.ledger.seconds(TimeState::Productive);
    state.book(elapsed, dt, Some(&outcome), Some(&jobs));
    // The job's progress in its own seconds, not in shares of a GPU.
    let productive = (state.ledger.ledger.seconds(TimeState::Productive) - productive)
        / state.weight.max(f64::MIN_POSITIVE);
    state
        .restarts
        .booked(outcome.state() == TimeState::Checkpointing, productive, t);
    let (last_checkpoint, since) = state.restarts.progress();
    for job in &mut state.jobs {
        job.last_checkpoint = last_checkpoint;
        job.progress_since_checkpoint_seconds = crate::round::round(since);
    }
}

/// Why nothing says how busy a fresh GPU is, when nothing does.
fn no_activity_reading(gpu: &GpuFrame) -> Option<&'static str> {
    match (gpu.measured(), gpu.mig) {
        (true, _) => None,
        (false, true) => Some(
            "MIG instance: NVML reports no utilization for a MIG instance, and this GPU has no \
             GPM (A100, A30), so nothing says how busy it is; its held time is booked unknown",
        ),
        (false, false) => Some(
            "NVML reports no utilization for this GPU, and it has no GPM, so nothing says how \
             busy it is; its held time is booked unknown",
        ),
    }
}

/// Least CPU, in cores, of jobs that work on the host while they start.
const HOST_WORK_CORES: f64 = 0.1;
/// Least storage reads, in bytes a second, of jobs that load while they start.
const HOST_WORK_READ_BYTES: f64 = 1024.0 * 1024.0;

/// The jobs do something on the host: use CPU, read from storage, or wait
/// on it. A job that holds a GPU and does none of these (a notebook left
/// open, a process stopped) is not starting.
fn works_on_host(jobs: &[&JobFrame]) -> bool {
    jobs.iter().any(|j| {
        j.cpu_cores.is_some_and(|c| c >= HOST_WORK_CORES)
            || j.read_bytes_per_second
                .is_some_and(|b| b >= HOST_WORK_READ_BYTES)
            || j.threads_disk_sleep > 0
    })
}

/// The ledger states of the GPU's active episodes.
fn active_states(state: &GpuState) -> Vec<TimeState> {
    Kind::ALL
        .into_iter()
        .enumerate()
        .filter(|(i, _)| state.episodes[*i].is_active())
        .filter_map(|(_, k)| TimeState::of_kind(k))
        .collect()
}

fn holders<'f>(step: &Step<'f>, state: &mut GpuState) -> Holders<'f> {
    let Step {
        config,
        frame,
        gpu,
        t,
        ..
    } = *step;
    state.activity.observe(t, gpu);
    let leftovers = processes::leftovers(config, &state.activity, gpu, frame);
    state.leftover_pids = leftovers.iter().map(|p| p.pid).collect();
    let jobs: Vec<&JobFrame> = frame
        .jobs
        .iter()
        .filter(|j| {
            j.gpus.contains(&gpu.index) && j.state != 'Z' && !state.leftover_pids.contains(&j.pid)
        })
        .collect();
    let warmup = config.warmup_seconds();
    let warmed: Vec<&JobFrame> = jobs
        .iter()
        .copied()
        .filter(|j| t - j.start_time >= warmup)
        .collect();
    let sharers = processes::sharers(config, gpu, &jobs);
    Holders {
        jobs,
        warmed,
        leftovers,
        sharers,
    }
}

fn pace(step: &Step, warmed: &[&JobFrame]) -> Pace {
    let Step {
        config,
        progress,
        t,
        ..
    } = *step;
    // The most recent output counts.
    let silent = warmed
        .iter()
        .filter_map(|j| progress.silent_seconds(j, t))
        .reduce(f64::min);
    let hang = warmed
        .iter()
        .map(|j| progress.hang_seconds(j, config))
        .reduce(f64::max)
        .unwrap_or(config.hang_bounds().0);
    let progressing = warmed.iter().any(|j| {
        let usual = progress.usual_interval(j);
        let silent = progress.silent_seconds(j, t);
        matches!((usual, silent), (Some(u), Some(s)) if s <= 2.0 * u)
    });
    Pace {
        silent,
        hang,
        progressing,
    }
}

/// Puts the sample in the history; returns whether the GPU was idle.
fn record(step: &Step, state: &mut GpuState, holders: &Holders, pace: &Pace) -> bool {
    let Step {
        config,
        frame,
        gpu,
        dt,
        ..
    } = *step;
    let point = point(
        frame.t,
        gpu,
        frame,
        &holders.warmed,
        config.single_thread_bound.max_process_cpu,
    );
    // Busy power is learned only while a job shows output at its usual rhythm.
    if let (Some(util), Some(power)) = (point.utilization, point.power_watts)
        && util >= config.baseline_above
        && pace.progressing
    {
        if state.busy_power.len() == BASELINE_KEPT {
            state.busy_power.pop_front();
        }
        state.busy_power.push_back(power);
    }
    let idle = point.utilization.is_some_and(|u| u < config.idle_below);
    if !holders.jobs.is_empty() && idle {
        state.job_idle_seconds_total += dt;
    }
    state.history.push(point, config.history_seconds() + 1.0);
    idle
}

fn gate(step: &Step, state: &mut GpuState, warmed: &[&JobFrame]) -> Gate {
    let Step { config, gpu, t, .. } = *step;
    // The job the confirming reads follow: the one an event would name.
    let primary = primary_job(gpu, warmed).and_then(|r| warmed.iter().find(|j| j.pid == r.pid));
    let followed = primary.map(|j| (j.pid, j.start_time));
    // An orphan (its parent gone, adopted by init) idle at its GPU is the
    // leftover rule's to judge (`leftover_process.idle_for`), not a hang to
    // confirm.
    state
        .confirm
        .follow(followed.filter(|_| primary.is_some_and(|j| j.ppid != 1)));
    state.phases.follow(followed);
    let limits = config.phase_limits();
    if let Some(l) = &limits {
        state.phases.current(t, l);
    }
    let phase = limits.as_ref().and_then(|l| state.phases.status(t, l));
    // A phase of normal length holds back the stall kinds it explains.
    // So does a read asked for that has not come back yet.
    match &phase {
        Some(p) if !p.unusual => state.phase_held_at = Some(t),
        // An unusual phase is reported at once, with the time it held.
        Some(_) => state.phase_held_at = None,
        None => {}
    }
    let ended_at = state.phase_held_at.filter(|_| phase.is_none());
    let holds = phase.as_ref().is_some_and(|p| !p.unusual)
        || (limits.is_some()
            && state
                .stall_since
                .is_some_and(|since| state.phases.awaiting(t, since)));
    Gate {
        phase,
        ended_at,
        holds,
    }
}

fn judge(
    step: &Step,
    state: &mut GpuState,
    holders: &Holders,
    pace: &Pace,
    gate: &Gate,
    events: &mut Vec<Event>,
) -> Judged {
    let Step {
        config,
        frame,
        gpu,
        t,
        ..
    } = *step;
    let mut stall_looking = false;
    let stuck = config
        .confirming()
        .zip(pace.silent)
        .and_then(|(c, s)| state.confirm.stuck(t, s, c.reads, c.interval));
    let mut ctx = Ctx {
        config,
        t,
        gpu,
        jobs: holders.jobs.clone(),
        host: &frame.host,
        history: &state.history,
        silent_seconds: pace.silent,
        hang_seconds: pace.hang,
        stuck,
        hang_shape: Cell::new(false),
        power_baseline: median(&state.busy_power)
            .filter(|_| state.busy_power.len() >= BASELINE_SAMPLES),
        leftovers: holders.leftovers.clone(),
        sharers: holders.sharers.clone(),
        starved_active: false,
        bound_active: false,
        starved_enter: false,
        bound_enter: false,
        had_job: !holders.jobs.is_empty(),
        utilization: UtilizationCache::default(),
        active: Cell::new(false),
    };
    let all_warming = !holders.jobs.is_empty() && holders.warmed.is_empty();
    // The job an event names, found when the first event needs it.
    let job_ref = OnceCell::new();
    // What the jobs say of their framework, made once for the kinds that
    // are active or entering.
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
                finding.evidence.phase = gate.phase.clone().filter(|p| p.unusual);
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
        if kind.waits_for_warmup() && (all_warming || holders.warmed.is_empty()) {
            finding.condition.enter = false;
        }
        // Once a phase ends, a kind it explained starts counting afresh when
        // its window no longer holds the phase's samples (a compilation's
        // idle minutes are not the input pipeline's).
        if kind.yields_to_phase() && gate.ended_at.is_some_and(|at| t - at < timing.window) {
            finding.condition.enter = false;
        }
        let parent = ctx.starved_active || ctx.bound_active;
        let (allowed, force_end) = if kind.is_refinement() {
            (parent, !parent)
        } else {
            (true, false)
        };
        let allowed = allowed && !(gate.holds && kind.yields_to_phase());
        let transition =
            state
                .episodes
                .advance(i, step, finding.condition, &timing, allowed, force_end);
        let job = || {
            job_ref
                .get_or_init(|| primary_job(gpu, &holders.jobs))
                .clone()
        };
        if let Some(event) = event_for(transition, kind, gpu, t, job, &finding.evidence) {
            state.episodes.emit(i, event, events);
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
    Judged {
        stall_looking,
        hang_shape: ctx.hang_shape.get(),
        stuck: ctx.stuck.is_some(),
        all_warming,
    }
}

fn settle(
    step: &Step,
    state: &mut GpuState,
    holders: &Holders,
    pace: &Pace,
    gate: Gate,
    judged: &Judged,
) {
    let Step {
        config, gpu, t, dt, ..
    } = *step;
    let active = |state: &GpuState, test: fn(Kind) -> bool| {
        Kind::ALL
            .into_iter()
            .enumerate()
            .any(|(i, k)| test(k) && state.episodes[i].is_active())
    };
    let no_progress = active(state, |k| {
        matches!(k, Kind::BusyNoProgress | Kind::IdleNoProgress)
    });
    state.stall_since = if judged.stall_looking {
        state.stall_since.or(Some(t))
    } else {
        None
    };
    if let Some(l) = config.phase_limits() {
        if judged.stall_looking {
            state.phases.count(t, dt, &l);
        }
        // Read while a stall kind's condition holds: to hold it back, and to
        // follow the phase (its end, its cost) once reported (not once the
        // job is found hung: a hang is no phase).
        state.phase_due = judged.stall_looking
            && !no_progress
            && !judged.stuck
            && state.phases.wanted(t, l.interval);
    } else {
        state.phase_due = false;
    }
    state.phase = gate.phase;
    state.confirm_due = match (config.confirming(), pace.silent) {
        (Some(c), Some(s)) => {
            judged.hang_shape
                && !no_progress
                && !judged.stuck
                && state.confirm.wanted(t, s, c.after, c.interval)
        }
        _ => false,
    };
    if !active(state, Kind::wants_stacks) {
        state.stacks = None;
        // The episodes ended unread: what waited for their stacks never
        // gets a place.
        state.lost.settle(None);
    }
    let verdict = if holders.jobs.is_empty() {
        Verdict::NoJob
    } else if active(state, Kind::is_stall) {
        Verdict::Stalled
    } else if judged.all_warming {
        Verdict::WarmingUp
    } else {
        Verdict::Healthy
    };
    state.set_verdict(verdict, t);
    let warmup = config.warmup_seconds();
    state.jobs = holders
        .jobs
        .iter()
        .map(|j| job_status(j, gpu, t, warmup))
        .collect();
}
