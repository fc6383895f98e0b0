//! Why a GPU is starved or input-bound: one pinned thread, too little CPU,
//! or storage waits. Each is reported together with its parent finding.

use super::{Ctx, Finding};
use crate::Kind;
use crate::evidence::{round, round_opt};
use crate::hysteresis::Condition;

/// Whether the host is short of CPU over the cpu_saturated window. Where the
/// kernel has PSI, tasks waiting for a CPU decide: a host kept busy by one
/// pinned thread plus work that has cores of its own is busy, not short.
/// Without PSI, the host's busy share stands in.
fn host_saturated(ctx: &Ctx) -> (bool, Option<f64>, Option<f64>) {
    let c = &ctx.config.cpu_saturated;
    let w = ctx.window(Kind::CpuSaturated);
    let host = w.mean(|p| p.host_cpu);
    let psi = w.mean(|p| p.psi_cpu);
    let saturated = match psi {
        Some(p) => p >= c.min_psi_cpu,
        None => host.is_some_and(|h| h >= c.min_host_cpu),
    };
    (saturated, host, psi)
}

pub fn single_thread(ctx: &Ctx) -> Finding {
    let c = &ctx.config.single_thread_bound;
    let w = ctx.window(Kind::SingleThreadBound);
    let pinned = w.share(|p| Some(p.top_thread_cpu? >= c.min_thread_cpu));
    let (saturated, host, psi) = host_saturated(ctx);
    let enter = ctx.refinement_parent()
        && w.covered()
        && pinned.is_some_and(|s| s >= c.min_pinned_share)
        && !saturated;
    let latest = ctx
        .history
        .latest()
        .and_then(|p| p.top_thread_cpu)
        .unwrap_or(0.0);
    let mut evidence = ctx.utilization_evidence(&w);
    evidence.pinned_share = round_opt(pinned);
    evidence.host_cpu_ratio = round_opt(host);
    evidence.psi_cpu_some = round_opt(psi);
    evidence.host_cpus = ctx.host.cpus;
    Finding {
        condition: Condition {
            enter,
            exit: latest < c.exit_thread_cpu,
        },
        evidence,
    }
}

pub fn cpu_saturated(ctx: &Ctx) -> Finding {
    let c = &ctx.config.cpu_saturated;
    let w = ctx.window(Kind::CpuSaturated);
    let (saturated, host, psi) = host_saturated(ctx);
    let enter = ctx.refinement_parent() && w.covered() && saturated;
    let latest = ctx.history.latest();
    let host_now = latest.and_then(|p| p.host_cpu).unwrap_or(0.0);
    let calm = match latest.and_then(|p| p.psi_cpu) {
        Some(psi_now) => psi_now < c.exit_psi_cpu,
        None => host_now < c.exit_host_cpu,
    };
    let mut evidence = ctx.utilization_evidence(&w);
    evidence.host_cpu_ratio = round_opt(host);
    evidence.psi_cpu_some = round_opt(psi);
    evidence.host_cpus = ctx.host.cpus;
    Finding {
        condition: Condition { enter, exit: calm },
        evidence,
    }
}

pub fn io_bound(ctx: &Ctx) -> Finding {
    let c = &ctx.config.io_bound;
    let w = ctx.window(Kind::IoBound);
    let psi = w.mean(|p| p.psi_io);
    let disk_sleep = w.share(|p| p.has_job.then_some(p.disk_sleep));
    let enter = ctx.refinement_parent()
        && w.covered()
        && (psi.is_some_and(|p| p >= c.min_psi_io)
            || disk_sleep.is_some_and(|d| d >= c.min_disk_sleep_share));
    let recent = ctx
        .history
        .window(ctx.config.timing(Kind::IoBound).exit_for.max(1.0));
    let recent_d = recent
        .share(|p| p.has_job.then_some(p.disk_sleep))
        .unwrap_or(0.0);
    let psi_now = ctx.history.latest().and_then(|p| p.psi_io).unwrap_or(0.0);
    let mut evidence = ctx.utilization_evidence(&w);
    evidence.psi_io_some = round_opt(psi);
    evidence.disk_sleep_share = round_opt(disk_sleep);
    evidence.read_bytes_per_second = ctx
        .jobs
        .iter()
        .filter_map(|j| j.read_bytes_per_second)
        .reduce(|a, b| a + b)
        .map(round);
    Finding {
        condition: Condition {
            enter,
            exit: psi_now < c.exit_psi_io && recent_d < c.exit_disk_sleep_share,
        },
        evidence,
    }
}
