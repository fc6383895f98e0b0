//! Memory: the host short of it, or the GPU's nearly full.

use super::ctx::{Ctx, Finding};
use crate::hint::{Job, words};
use crate::hysteresis::Condition;
use crate::round::round_opt;
use crate::types::evidence::Evidence;

pub fn host_pressure(ctx: &Ctx) -> Finding {
    let c = &ctx.config.host_memory_pressure;
    let available = ctx.host.memory_available_ratio();
    let psi = ctx.host.psi_memory_some;
    let short = available.is_some_and(|a| a < c.max_available)
        || psi.is_some_and(|p| p >= c.min_psi_memory);
    let recovered =
        available.is_none_or(|a| a > c.exit_available) && psi.is_none_or(|p| p < c.exit_psi_memory);
    let condition = Condition {
        enter: !ctx.jobs.is_empty() && short,
        exit: ctx.jobs.is_empty() || recovered,
    };
    ctx.finding(condition, || Evidence {
        memory_available_ratio: round_opt(available),
        psi_memory_some: round_opt(psi),
        job_rss_bytes: ctx.jobs.iter().map(|j| j.rss_bytes).reduce(|a, b| a + b),
        swap_used_bytes: ctx.host.swap_used_bytes,
        ..Evidence::default()
    })
}

pub fn gpu_full(ctx: &Ctx) -> Finding {
    let c = &ctx.config.gpu_memory_full;
    let used = ctx.gpu.memory_used_ratio();
    let condition = Condition {
        enter: !ctx.gpu.processes.is_empty() && used.is_some_and(|u| u >= c.min_used),
        exit: used.is_none_or(|u| u < c.exit_used),
    };
    ctx.finding(condition, || Evidence {
        gpu_memory_used_ratio: round_opt(used),
        processes: ctx.sharers.clone(),
        ..Evidence::default()
    })
}

/// The hint of `host_memory_pressure`: what to tell the user, in plain words.
pub fn host_pressure_hint(evidence: &Evidence) -> String {
    let job = Job::of(evidence);
    format!(
        "The host is short of memory: the job may swap or be OOM-killed. {}",
        words::less_host_memory(&job)
    )
}

/// The hint of `gpu_memory_full`: what to tell the user, in plain words.
pub fn gpu_full_hint(evidence: &Evidence) -> String {
    let job = Job::of(evidence);
    format!(
        "GPU memory is nearly full. {}",
        words::less_gpu_memory(&job)
    )
}
