//! What the SMs are doing while utilization.gpu reads busy: a kernel that
//! spins without work (a collective waiting for a rank), or kernels too small
//! or too few to fill the GPU. GPM activity where the GPU has it; for
//! `spinning` without GPM, power against the learned busy baseline.

use super::ctx::{Ctx, Finding};
use crate::Kind;
use crate::hint::{Job, words};
use crate::hysteresis::Condition;
use crate::round::{round, round_opt};
use crate::types::activity::ActivitySignal;
use crate::types::evidence::Evidence;
use crate::window::Window;

/// The GPM evidence of a window: SM activity (mean, spread), tensor and DRAM
/// activity, link traffic.
fn gpm_evidence(w: &Window, evidence: &mut Evidence) {
    let [sm, tensor, dram, nvlink, pcie] = w.means(|p| {
        [
            p.sm_active,
            p.tensor_active,
            p.dram_active,
            p.nvlink_bytes_per_second,
            p.pcie_bytes_per_second,
        ]
    });
    evidence.sm_active_mean = round_opt(sm);
    evidence.sm_active_stddev = round_opt(w.stddev(|p| p.sm_active));
    evidence.tensor_active_mean = round_opt(tensor);
    evidence.dram_active_mean = round_opt(dram);
    evidence.nvlink_bytes_per_second = nvlink.map(f64::round);
    evidence.pcie_bytes_per_second = pcie.map(f64::round);
}

/// Whether the window has GPM throughout (every sample has SM activity).
fn gpm_throughout(w: &Window) -> bool {
    w.all(|p| p.sm_active.is_some())
}

/// Share of samples with utilization.gpu busy, where it is reported.
fn utilization_busy_share(ctx: &Ctx, w: &Window) -> Option<f64> {
    w.share(|p| {
        (p.activity == Some(ActivitySignal::UtilizationGpu))
            .then(|| p.utilization.is_some_and(|u| u >= ctx.config.busy_above))
    })
}

/// Mean of utilization.gpu, where it is reported.
fn utilization_gpu_mean(w: &Window) -> Option<f64> {
    w.mean(|p| {
        (p.activity == Some(ActivitySignal::UtilizationGpu))
            .then_some(p.utilization)
            .flatten()
    })
}

fn at_most(v: Option<f64>, max: f64) -> bool {
    v.is_none_or(|v| v <= max)
}

pub fn spinning(ctx: &Ctx) -> Finding {
    let c = &ctx.config.spinning;
    let w = ctx.window(Kind::Spinning);
    let window_seconds = ctx.config.timing(Kind::Spinning).window;
    let silent = ctx.silent_seconds.is_some_and(|s| s >= window_seconds);
    let busy_share = utilization_busy_share(ctx, &w);
    // Busy by utilization.gpu where it is reported; on MIG (GPM only) a
    // resident kernel: SM activity above zero in every sample.
    let busy = match busy_share {
        Some(share) => share >= c.min_busy_share,
        None => gpm_throughout(&w) && w.all(|p| p.sm_active.is_some_and(|a| a > 0.0)),
    };
    let power = w.mean(|p| p.power_watts);
    let limit = ctx.gpu.power_limit_watts;
    let under_baseline = match (power, ctx.power_baseline) {
        (Some(p), Some(base)) => Some(p < c.max_power_of_baseline * base),
        _ => None,
    };
    let gpm = gpm_throughout(&w);
    let (signal, quiet) = if gpm {
        let low_power = match (under_baseline, power, limit) {
            (Some(low), _, _) => low,
            (None, Some(p), Some(l)) => p < c.max_power_of_limit * l,
            _ => true,
        };
        let quiet = w
            .mean(|p| p.sm_active)
            .is_some_and(|m| m <= c.max_sm_active)
            && w.stddev(|p| p.sm_active)
                .is_some_and(|s| s <= c.max_sm_active_stddev)
            && at_most(w.mean(|p| p.tensor_active), c.max_tensor_active)
            && at_most(w.mean(|p| p.dram_active), c.max_dram_active)
            && at_most(
                w.mean(|p| p.nvlink_bytes_per_second),
                c.max_link_bytes_per_second,
            )
            && at_most(
                w.mean(|p| p.pcie_bytes_per_second),
                c.max_link_bytes_per_second,
            )
            && low_power;
        (ActivitySignal::GpmSmActive, quiet)
    } else {
        // No GPM: only a learned baseline tells a spinning kernel's power.
        (ActivitySignal::PowerBaseline, under_baseline == Some(true))
    };
    let enter = ctx.job_throughout(&w) && busy && quiet && silent;

    let recent = ctx
        .history
        .window(ctx.config.timing(Kind::Spinning).exit_for.max(1.0));
    let working = if gpm {
        recent
            .mean(|p| p.sm_active)
            .is_some_and(|m| m > c.exit_sm_active)
            || recent
                .mean(|p| p.tensor_active)
                .is_some_and(|m| m > 4.0 * c.max_tensor_active.max(0.01))
    } else {
        match (recent.mean(|p| p.power_watts), ctx.power_baseline) {
            (Some(p), Some(base)) => p >= c.max_power_of_baseline * base,
            _ => false,
        }
    };
    let has_job = ctx.history.latest().is_some_and(|p| p.has_job);
    let exit = !has_job || !silent || working;

    ctx.finding(Condition { enter, exit }, || {
        let mut evidence = ctx.utilization_evidence(&w);
        evidence.activity_signal = Some(signal);
        if gpm {
            gpm_evidence(&w, &mut evidence);
        }
        evidence.silent_seconds = round_opt(ctx.silent_seconds);
        ctx.power_evidence(power, &mut evidence);
        evidence
    })
}

pub fn launch_bound(ctx: &Ctx) -> Finding {
    let c = &ctx.config.launch_bound;
    let w = ctx.window(Kind::LaunchBound);
    // Output progresses: it grew more recently than the silence after which
    // a busy GPU may be spinning (`spinning.window`).
    let quiet_limit = ctx.config.timing(Kind::Spinning).window;
    let progressing = ctx.silent_seconds.is_some_and(|s| s < quiet_limit);
    let busy = utilization_gpu_mean(&w).is_some_and(|m| m >= c.min_utilization);
    let sm_mean = w.mean(|p| p.sm_active);
    let enter = ctx.job_throughout(&w)
        && gpm_throughout(&w)
        && busy
        && sm_mean.is_some_and(|m| m < c.max_sm_active)
        && progressing;
    let recent = ctx
        .history
        .window(ctx.config.timing(Kind::LaunchBound).exit_for.max(1.0));
    let recent_mean = utilization_gpu_mean(&recent).unwrap_or(0.0);
    let has_job = ctx.history.latest().is_some_and(|p| p.has_job);
    let exit = !has_job
        || !progressing
        || recent
            .mean(|p| p.sm_active)
            .is_none_or(|m| m >= c.exit_sm_active)
        || recent_mean < c.min_utilization - 0.2;
    ctx.finding(Condition { enter, exit }, || {
        let mut evidence = ctx.utilization_evidence(&w);
        evidence.activity_signal = Some(ActivitySignal::GpmSmActive);
        gpm_evidence(&w, &mut evidence);
        evidence.silent_seconds = round_opt(ctx.silent_seconds);
        evidence.window_seconds = Some(round(w.seconds()));
        evidence
    })
}

/// The hint of `spinning`: what to tell the user, in plain words.
pub fn spinning_hint(evidence: &Evidence) -> String {
    let signal = match evidence.activity_signal {
        Some(crate::types::activity::ActivitySignal::GpmSmActive) => {
            "its SMs are nearly idle and flat, with no tensor, memory or link traffic"
        }
        _ => "it draws far less power than it does while the job progresses",
    };
    format!(
        "The GPU reads busy but does no work: {signal}, and the job shows no output. \
         A kernel is spinning, most likely a collective (NCCL all-reduce, barrier) \
         waiting for a rank that never joins. Check the other ranks (one may have died, \
         hung or be slower), run with NCCL_DEBUG=INFO and TORCH_NCCL_ASYNC_ERROR_HANDLING=1, \
         dump the NCCL flight recorder (TORCH_NCCL_TRACE_BUFFER_SIZE, then \
         torch.distributed's debug dump), and dump stacks (py-spy dump --pid PID)."
    )
}

/// The hint of `launch_bound`: what to tell the user, in plain words.
pub fn launch_bound_hint(evidence: &Evidence) -> String {
    let job = Job::of(evidence);
    format!(
        "utilization.gpu is high but the SMs are mostly idle while the job progresses: its \
         kernels are too small or too few to fill the GPU (time goes to launches and host \
         syncs). {}",
        words::fewer_launches(&job)
    )
}
