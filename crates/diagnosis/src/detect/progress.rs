//! Jobs that make no progress: the GPU busy (a spinning kernel, a stuck
//! collective) or idle (a deadlock), and no output for the hang time.

use super::{Ctx, Finding};
use crate::Kind;
use crate::evidence::{round, round_opt};
use crate::hysteresis::Condition;

fn silent_long(ctx: &Ctx) -> bool {
    ctx.silent_seconds.is_some_and(|s| s >= ctx.hang_seconds)
}

pub fn busy(ctx: &Ctx) -> Finding {
    let c = &ctx.config.busy_no_progress;
    let w = ctx.window(Kind::BusyNoProgress);
    let stats = ctx.utilization(&w);
    let power = w.mean(|p| p.power_watts);
    let limit = ctx.gpu.power_limit_watts;
    let low_power = match (power, ctx.power_baseline, limit) {
        (Some(p), Some(base), _) => p < c.max_power_of_baseline * base,
        (Some(p), None, Some(l)) => p < c.max_power_of_limit * l,
        // No power reading: busy and silent must do.
        (None, _, _) | (Some(_), None, None) => true,
    };
    let enter = ctx.job_throughout(&w)
        && stats.is_some_and(|s| s.busy_share >= c.min_busy_share)
        && silent_long(ctx)
        && low_power;
    let recent = ctx
        .history
        .window(ctx.config.timing(Kind::BusyNoProgress).exit_for.max(1.0));
    let recent_busy = recent
        .share(|p| Some(p.utilization? >= ctx.config.busy_above))
        .unwrap_or(0.0);
    let has_job = ctx.history.latest().is_some_and(|p| p.has_job);
    let exit = !has_job || !silent_long(ctx) || recent_busy < c.exit_busy_share;
    ctx.finding(Condition { enter, exit }, || {
        let mut evidence = ctx.utilization_evidence(&w);
        evidence.silent_seconds = round_opt(ctx.silent_seconds);
        evidence.hang_seconds = Some(round(ctx.hang_seconds));
        ctx.power_evidence(power, &mut evidence);
        evidence
    })
}

pub fn idle(ctx: &Ctx) -> Finding {
    let c = &ctx.config.idle_no_progress;
    let w = ctx.window(Kind::IdleNoProgress);
    let mean = w.mean(|p| p.utilization);
    let job_cpu = w.mean(|p| p.job_cpu).unwrap_or(0.0);
    let running = w
        .mean(|p| {
            (p.threads_total > 0).then(|| f64::from(p.threads_running) / f64::from(p.threads_total))
        })
        .unwrap_or(0.0);
    let enter = ctx.job_throughout(&w)
        && mean.is_some_and(|m| m < c.max_mean)
        && job_cpu < c.max_job_cpu
        && running <= 0.1
        && silent_long(ctx);
    let latest = ctx.history.latest();
    let has_job = latest.is_some_and(|p| p.has_job);
    let woke = latest.is_some_and(|p| {
        p.utilization.is_some_and(|u| u >= 0.25)
            || p.job_cpu
                .is_some_and(|cpu| cpu >= 4.0 * c.max_job_cpu.max(0.05))
    });
    let exit = !has_job || !silent_long(ctx) || woke;
    ctx.finding(Condition { enter, exit }, || {
        let mut evidence = ctx.utilization_evidence(&w);
        evidence.silent_seconds = round_opt(ctx.silent_seconds);
        evidence.hang_seconds = Some(round(ctx.hang_seconds));
        evidence
    })
}
