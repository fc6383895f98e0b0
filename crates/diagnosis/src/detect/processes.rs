//! Processes on a GPU: several separate ones sharing it, or one left behind.

use super::{Ctx, Finding};
use crate::evidence::Evidence;
use crate::hysteresis::Condition;

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
