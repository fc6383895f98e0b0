//! The GPU waits for data: almost always (starved) or a good part of the
//! time (input-bound: a low mean, steady or swinging).

use super::ctx::{Ctx, Finding};
use crate::Kind;
use crate::hint::{Job, words};
use crate::hysteresis::Condition;
use crate::types::evidence::Evidence;

/// Share of samples with a job thread waiting on storage that counts as the
/// pipeline working (a reader blocked on I/O uses no CPU).
const WAITING_ON_STORAGE: f64 = 0.3;

/// The job is working on its input: it uses CPU, or its threads wait on
/// storage, over the window and over its last quarter (a job that stopped
/// doing either is not feeding anything, whatever its past).
fn job_alive(ctx: &Ctx, window: &crate::window::Window, min_cpu: f64) -> bool {
    let recent = ctx.history.window(window.seconds() / 4.0);
    let working = |w: &crate::window::Window| {
        w.mean(|p| p.job_cpu).unwrap_or(0.0) >= min_cpu
            || w.share(|p| Some(p.disk_sleep)).unwrap_or(0.0) >= WAITING_ON_STORAGE
    };
    working(window) && working(&recent)
}

fn job_stopped(ctx: &Ctx, window_seconds: f64, min_cpu: f64) -> bool {
    let recent = ctx.history.window(window_seconds / 4.0);
    recent.mean(|p| p.job_cpu).unwrap_or(0.0) < min_cpu / 2.0
        && recent.share(|p| Some(p.disk_sleep)).unwrap_or(0.0) < WAITING_ON_STORAGE / 2.0
}

pub fn starved(ctx: &Ctx) -> Finding {
    let c = &ctx.config.input_starved;
    let w = ctx.window(Kind::InputStarved);
    let stats = ctx.utilization(&w);
    // NVML spreads a short burst over its whole averaging period (up to a
    // second): a batch every few seconds reads as a run of 5-15% samples, so
    // the idle share of a GPU busy 3% of the time can sit under 0.8. A mean
    // under half of `max_mean` is starved however the bursts fall.
    let enter = ctx.job_throughout(&w)
        && stats.is_some_and(|s| {
            s.mean < c.max_mean && (s.idle_share >= c.min_idle_share || s.mean < c.max_mean / 2.0)
        })
        && job_alive(ctx, &w, c.min_job_cpu);
    let recent = ctx
        .history
        .window(ctx.config.timing(Kind::InputStarved).exit_for.max(1.0));
    let has_job = ctx.history.latest().is_some_and(|p| p.has_job);
    let exit = !has_job
        || recent
            .mean(|p| p.utilization)
            .is_some_and(|m| m > c.exit_mean);
    ctx.finding(Condition { enter, exit }, || ctx.utilization_evidence(&w))
}

pub fn bound(ctx: &Ctx) -> Finding {
    let c = &ctx.config.input_bound;
    let w = ctx.window(Kind::InputBound);
    let stats = ctx.utilization(&w);
    // Starved is the stronger finding: bound covers the rest. A low mean
    // counts whether utilization swings or holds a steady mid value (NVML
    // averages over its period); idle samples only matter when configured.
    let starved = ctx.starved_active || ctx.starved_enter;
    let enter = ctx.job_throughout(&w)
        && !starved
        && job_alive(ctx, &w, c.min_job_cpu)
        && stats.is_some_and(|s| s.mean < c.max_mean && s.idle_share >= c.min_idle_share);
    let recent = ctx
        .history
        .window(ctx.config.timing(Kind::InputBound).exit_for.max(1.0));
    let recent_stats = ctx.utilization(&recent);
    let has_job = ctx.history.latest().is_some_and(|p| p.has_job);
    let exit = !has_job
        || ctx.starved_active
        || job_stopped(ctx, w.seconds(), c.min_job_cpu)
        || recent_stats.is_some_and(|s| s.mean >= c.exit_mean || s.idle_share < c.exit_idle_share);
    ctx.finding(Condition { enter, exit }, || ctx.utilization_evidence(&w))
}

/// The hint of `input_starved`: what to tell the user, in plain words.
pub fn starved_hint(evidence: &Evidence) -> String {
    let job = Job::of(evidence);
    format!(
        "The GPU is waiting for data: the input pipeline cannot keep up. {}",
        words::feed(&job)
    )
}

/// The hint of `input_bound`: what to tell the user, in plain words.
pub fn bound_hint(evidence: &Evidence) -> String {
    let job = Job::of(evidence);
    format!(
        "GPU utilization swings and its mean is low: batches arrive too slowly. {}",
        words::feed(&job)
    )
}
