//! Diagnosis series: the verdict and every kind's state and counters per GPU.

use diagnosis::phase::JobPhase;
use diagnosis::status::KindCounters;
use diagnosis::{GpuStatus, Kind, Verdict};
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Unit;

use super::family::{counter, gauge};
use super::labels::Labels;

fn labels(g: &GpuStatus) -> Labels<'_> {
    Labels::gpu(g.gpu, &g.uuid)
}

/// One series per GPU and kind.
fn per_kind(
    gpus: &[GpuStatus],
    value: fn(&KindCounters) -> f64,
) -> impl Iterator<Item = (Labels<'_>, f64)> {
    gpus.iter().flat_map(move |g| {
        let l = labels(g);
        Kind::ALL.into_iter().map(move |k| {
            (
                l.with("kind", k.as_str()),
                g.kinds.get(&k).map_or(0.0, value),
            )
        })
    })
}

/// Whether the stall series of `a` and `b` are the same: the same GPUs,
/// each with the same counters for every kind (all that `labels` and
/// `per_kind` read).
pub fn same_stalls(a: &[GpuStatus], b: &[GpuStatus]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(a, b)| a.gpu == b.gpu && a.uuid == b.uuid && a.kinds == b.kinds)
}

/// Each GPU's verdict.
pub fn verdict(e: &mut DescriptorEncoder, gpus: &[GpuStatus]) -> Result<(), std::fmt::Error> {
    gauge(
        e,
        "stallwatch_gpu_verdict",
        "1 for the GPU's current verdict (no_job, warming_up, healthy, stalled, unknown), 0 for the others.",
        None,
        gpus.iter().flat_map(|g| {
            let l = labels(g);
            Verdict::ALL.into_iter().map(move |v| {
                (
                    l.with("verdict", v.as_str()),
                    f64::from(u8::from(g.verdict == v)),
                )
            })
        }),
    )
}

/// Every kind's state and counters per GPU.
pub fn stalls(e: &mut DescriptorEncoder, gpus: &[GpuStatus]) -> Result<(), std::fmt::Error> {
    gauge(
        e,
        "stallwatch_gpu_stall_active",
        "1 while an episode of the kind is active on the GPU.",
        None,
        per_kind(gpus, |c| f64::from(u8::from(c.active))),
    )?;
    counter(
        e,
        "stallwatch_gpu_stall",
        "Time the GPU spent in an active episode of the kind.",
        Some(&Unit::Seconds),
        per_kind(gpus, |c| c.seconds_total),
    )?;
    counter(
        e,
        "stallwatch_gpu_stall_events",
        "Episodes of the kind started on the GPU.",
        None,
        per_kind(gpus, |c| c.events_total as f64),
    )
}

/// Each GPU's job idle time.
pub fn job_idle(e: &mut DescriptorEncoder, gpus: &[GpuStatus]) -> Result<(), std::fmt::Error> {
    counter(
        e,
        "stallwatch_gpu_job_idle",
        "Seconds in which a job held the GPU while it was idle (utilization under diagnosis.idle_below), sample by sample.",
        Some(&Unit::Seconds),
        gpus.iter().map(|g| (labels(g), g.job_idle_seconds_total)),
    )
}

/// Where each GPU's time went: one state per sampled interval.
pub fn time(e: &mut DescriptorEncoder, gpus: &[GpuStatus]) -> Result<(), std::fmt::Error> {
    counter(
        e,
        "stallwatch_gpu_time",
        "The GPU's watched time booked by cause, each sampled interval to exactly one state (no_job, unknown, startup, compiling, checkpointing, input, hung, fault, idle, productive, recovery; docs/goodput.md); the states of a GPU add up to the time the daemon watched it, less a run of samples still being judged (at most 5 minutes).",
        Some(&Unit::Seconds),
        gpus.iter().flat_map(|g| {
            let l = labels(g);
            g.time
                .iter()
                .map(move |(state, seconds)| (l.with("state", state.as_str()), seconds))
        }),
    )
}

/// Training lost to restarts on each GPU.
pub fn lost_progress(e: &mut DescriptorEncoder, gpus: &[GpuStatus]) -> Result<(), std::fmt::Error> {
    counter(
        e,
        "stallwatch_gpu_lost_progress",
        "Productive seconds lost to restarts: when a job comes back on the GPU under the run id of the job that left it, that job's productive seconds since its last checkpoint seen by the daemon (since it came when none was seen).",
        Some(&Unit::Seconds),
        gpus.iter()
            .map(|g| (labels(g), g.lost_progress_seconds_total)),
    )
}

/// Each GPU's time waiting on its job's own phases.
pub fn phases(e: &mut DescriptorEncoder, gpus: &[GpuStatus]) -> Result<(), std::fmt::Error> {
    counter(
        e,
        "stallwatch_gpu_phase",
        "Seconds the GPU looked stalled while its job was in one of its own phases (compiling, checkpointing, data_loader_startup), found in the job's stacks; a phase of normal length raises no stall.",
        Some(&Unit::Seconds),
        gpus.iter().flat_map(|g| {
            let l = labels(g);
            JobPhase::ALL.into_iter().map(move |p| {
                (
                    l.with("phase", p.as_str()),
                    g.phase_seconds_total.get(&p).copied().unwrap_or(0.0),
                )
            })
        }),
    )
}
