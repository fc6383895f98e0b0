//! Diagnosis series: the verdict and every kind's state and counters per GPU.

use diagnosis::status::KindCounters;
use diagnosis::{GpuStatus, Kind, Verdict};
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Unit;

use super::{Labels, counter, gauge};

fn labels(g: &GpuStatus) -> Labels {
    vec![
        ("gpu", collector::sample::gpu_label(g.gpu)),
        ("uuid", g.uuid.clone()),
    ]
}

/// One series per GPU and kind.
fn per_kind(gpus: &[GpuStatus], value: impl Fn(&KindCounters) -> f64) -> Vec<(Labels, f64)> {
    let mut out = Vec::with_capacity(gpus.len() * Kind::ALL.len());
    for g in gpus {
        for k in Kind::ALL {
            let mut l = labels(g);
            l.push(("kind", k.as_str().to_owned()));
            out.push((l, g.kinds.get(&k).map_or(0.0, &value)));
        }
    }
    out
}

pub fn encode(e: &mut DescriptorEncoder, gpus: &[GpuStatus]) -> Result<(), std::fmt::Error> {
    gauge(
        e,
        "stallwatch_gpu_verdict",
        "1 for the GPU's current verdict (no_job, warming_up, healthy, stalled, unknown), 0 for the others.",
        None,
        gpus.iter().flat_map(|g| {
            Verdict::ALL.into_iter().map(move |v| {
                let mut l = labels(g);
                l.push(("verdict", v.as_str().to_owned()));
                (l, f64::from(u8::from(g.verdict == v)))
            })
        }),
    )?;
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
    )?;
    counter(
        e,
        "stallwatch_gpu_job_idle",
        "Seconds in which a job held the GPU while it was idle (utilization under diagnosis.idle_below), sample by sample.",
        Some(&Unit::Seconds),
        gpus.iter().map(|g| (labels(g), g.job_idle_seconds_total)),
    )
}
