//! Processes on a GPU: several separate ones sharing it, or one left behind.

use super::ctx::{Ctx, Finding};
use crate::hysteresis::Condition;
use crate::types::evidence::Evidence;

pub fn shared(ctx: &Ctx) -> Finding {
    let n = ctx.sharers.len();
    let warming = ctx
        .jobs
        .iter()
        .any(|j| ctx.t - j.start_time < ctx.config.warmup_seconds());
    let condition = Condition {
        enter: n >= 2 && !warming,
        exit: n <= 1,
    };
    ctx.finding(condition, || Evidence {
        processes: ctx.sharers.clone(),
        gpu_memory_used_ratio: ctx.gpu.memory_used_ratio(),
        ..Evidence::default()
    })
}

pub fn leftover(ctx: &Ctx) -> Finding {
    let any = !ctx.leftovers.is_empty();
    let condition = Condition {
        enter: any,
        exit: !any,
    };
    ctx.finding(condition, || Evidence {
        processes: ctx.leftovers.clone(),
        gpu_memory_used_ratio: ctx.gpu.memory_used_ratio(),
        ..Evidence::default()
    })
}

/// The hint of `shared_gpu`: what to tell the user, in plain words.
pub fn shared_hint(evidence: &Evidence) -> String {
    let pids: Vec<String> = evidence
        .processes
        .iter()
        .map(|p| format!("{} ({})", p.pid, p.comm))
        .collect();
    format!(
        "Several separate processes hold memory on this GPU: {}. They compete for memory \
         and compute and can fail with CUDNN_STATUS_INTERNAL_ERROR or out-of-memory; run \
         one job per GPU (CUDA_VISIBLE_DEVICES) or stop the extra processes (old notebook \
         kernels that imported TensorFlow again).",
        pids.join(", ")
    )
}

/// The hint of `leftover_process`: what to tell the user, in plain words.
pub fn leftover_hint(evidence: &Evidence) -> String {
    let pids: Vec<String> = evidence
        .processes
        .iter()
        .map(|p| {
            format!(
                "{} ({}, {})",
                p.pid,
                if p.comm.is_empty() { "?" } else { &p.comm },
                p.state
            )
        })
        .collect();
    format!(
        "A process left behind holds GPU memory without using the GPU: {}. Its parent is \
         gone; kill it (kill PID) to free the memory, and check for notebook kernels or \
         data loader workers that outlived their job.",
        pids.join(", ")
    )
}
