//! Jobs that make no progress: the GPU busy (a spinning kernel, a stuck
//! collective) or idle (a deadlock), and no output for the hang time, or
//! for less where the job's stacks stood at the same place in every
//! confirming read (`hang_confirmation`, see `confirm.rs`).

use super::ctx::{Ctx, Finding};
use crate::Kind;
use crate::hysteresis::Condition;
use crate::round::{round, round_opt};
use crate::types::evidence::Evidence;
use crate::window::Window;

fn silent_long(ctx: &Ctx) -> bool {
    ctx.silent_seconds.is_some_and(|s| s >= ctx.hang_seconds)
}

/// The window the shape of a hang is judged over: the kind's own at the
/// hang time, the current silence when the stacks confirm it (the job may
/// have worked until a minute ago: a 5-minute mean would still show it).
fn shape_windows<'a>(ctx: &'a Ctx, kind: Kind) -> (Window<'a>, Option<Window<'a>>) {
    let w = ctx.window(kind);
    let silence = ctx
        .silent_seconds
        .filter(|s| *s > 0.0)
        .map(|s| ctx.history.window(s.min(w.seconds())));
    (w, silence)
}

fn evidence(ctx: &Ctx, w: &Window, confirmed: bool) -> Evidence {
    let mut evidence = ctx.utilization_evidence(w);
    evidence.silent_seconds = round_opt(ctx.silent_seconds);
    evidence.hang_seconds = Some(round(ctx.hang_seconds));
    if confirmed {
        evidence.stuck.clone_from(&ctx.stuck);
    }
    evidence
}

pub fn busy(ctx: &Ctx) -> Finding {
    let c = &ctx.config.busy_no_progress;
    let shape = |w: &Window| {
        let stats = ctx.utilization(w);
        let power = w.mean(|p| p.power_watts);
        let limit = ctx.gpu.power_limit_watts;
        let low_power = match (power, ctx.power_baseline, limit) {
            (Some(p), Some(base), _) => p < c.max_power_of_baseline * base,
            (Some(p), None, Some(l)) => p < c.max_power_of_limit * l,
            // No power reading: busy and silent must do.
            (None, _, _) | (Some(_), None, None) => true,
        };
        let busy = stats.is_some_and(|s| s.busy_share >= c.min_busy_share);
        (ctx.job_throughout(w) && busy && low_power, power)
    };
    let (w, silence) = shape_windows(ctx, Kind::BusyNoProgress);
    let (long_shape, power) = shape(&w);
    let silence_shape = silence.as_ref().is_some_and(|s| shape(s).0);
    ctx.hang_shape.set(ctx.hang_shape.get() || silence_shape);
    let confirmed = ctx.stuck.is_some() && silence_shape;
    let enter = (long_shape && silent_long(ctx)) || confirmed;
    let recent = ctx
        .history
        .window(ctx.config.timing(Kind::BusyNoProgress).exit_for.max(1.0));
    let recent_busy = recent
        .share(|p| Some(p.utilization? >= ctx.config.busy_above))
        .unwrap_or(0.0);
    let has_job = ctx.history.latest().is_some_and(|p| p.has_job);
    let exit =
        !has_job || (!silent_long(ctx) && ctx.stuck.is_none()) || recent_busy < c.exit_busy_share;
    ctx.finding(Condition { enter, exit }, || {
        let window = if confirmed && !silent_long(ctx) {
            silence.as_ref().unwrap_or(&w)
        } else {
            &w
        };
        let mut evidence = evidence(ctx, window, confirmed);
        ctx.power_evidence(power, &mut evidence);
        evidence
    })
}

pub fn idle(ctx: &Ctx) -> Finding {
    let c = &ctx.config.idle_no_progress;
    let shape = |w: &Window| {
        let mean = w.mean(|p| p.utilization);
        let job_cpu = w.mean(|p| p.job_cpu).unwrap_or(0.0);
        let running = w
            .mean(|p| {
                (p.threads_total > 0)
                    .then(|| f64::from(p.threads_running) / f64::from(p.threads_total))
            })
            .unwrap_or(0.0);
        ctx.job_throughout(w)
            && mean.is_some_and(|m| m < c.max_mean)
            && job_cpu < c.max_job_cpu
            && running <= 0.1
    };
    let (w, silence) = shape_windows(ctx, Kind::IdleNoProgress);
    let silence_shape = silence.as_ref().is_some_and(shape);
    ctx.hang_shape.set(ctx.hang_shape.get() || silence_shape);
    let confirmed = ctx.stuck.is_some() && silence_shape;
    let enter = (shape(&w) && silent_long(ctx)) || confirmed;
    let latest = ctx.history.latest();
    let has_job = latest.is_some_and(|p| p.has_job);
    let woke = latest.is_some_and(|p| {
        p.utilization.is_some_and(|u| u >= 0.25)
            || p.job_cpu
                .is_some_and(|cpu| cpu >= 4.0 * c.max_job_cpu.max(0.05))
    });
    let exit = !has_job || (!silent_long(ctx) && ctx.stuck.is_none()) || woke;
    ctx.finding(Condition { enter, exit }, || {
        let window = if confirmed && !silent_long(ctx) {
            silence.as_ref().unwrap_or(&w)
        } else {
            &w
        };
        evidence(ctx, window, confirmed)
    })
}

/// The hint of `busy_no_progress`: what to tell the user, in plain words.
pub fn busy_hint(_: &Evidence) -> String {
    "The GPU reads busy but the job shows no progress and draws little \
    power: likely a hang (a stuck NCCL collective, a spinning kernel, or a rank waiting on \
    another). Check the other ranks, dump stacks (py-spy dump --pid PID), set \
    NCCL_DEBUG=INFO and TORCH_NCCL_ASYNC_ERROR_HANDLING=1, and restart the job."
        .to_owned()
}

/// The hint of `idle_no_progress`: what to tell the user, in plain words.
pub fn idle_hint(_: &Evidence) -> String {
    "The GPU and the job are idle and the job shows no progress: likely a deadlock or a wait that never ends (a data loader worker that \
    died, a lock, a queue with no producer). Dump stacks (py-spy dump --pid PID) and \
    restart the job."
        .to_owned()
}
