//! The daemon's own cost: its CPU by stage (adding up to its process CPU),
//! its memory, and how many job samples read their threads.

use collector::snapshot::Snapshot;
use collector::thread_reads::Reason;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Unit;

use super::family::{counter, gauge};
use super::labels::Labels;
use crate::own_cost::{OwnCost, STAGES, Stage};

pub fn encode(
    e: &mut DescriptorEncoder,
    s: &Snapshot,
    own: &OwnCost,
) -> Result<(), std::fmt::Error> {
    // Absent until the sampler read it (a scrape made elsewhere).
    let stages = (own.stage_cpu_seconds.len() == STAGES).then_some(Stage::ALL);
    counter(
        e,
        "stallwatch_self_cpu",
        "The daemon's CPU time by what it was spent on (thread CPU clocks, not wall time); the stages add up to process_cpu_seconds_total.",
        Some(&Unit::Seconds),
        stages.into_iter().flatten().map(|stage| {
            (
                Labels::none().with("stage", stage.as_str()),
                own.stage(stage),
            )
        }),
    )?;
    counter(
        e,
        "process_cpu",
        "Total user and system CPU time of the daemon's process.",
        Some(&Unit::Seconds),
        (own.process_cpu_seconds > 0.0).then_some((Labels::none(), own.process_cpu_seconds)),
    )?;
    gauge(
        e,
        "process_resident_memory",
        "Resident memory of the daemon's process.",
        Some(&Unit::Bytes),
        own.resident_bytes.map(|b| (Labels::none(), b as f64)),
    )?;
    let reads = &s.thread_reads_total;
    counter(
        e,
        "stallwatch_thread_reads",
        "Job samples that read the job's per-thread files, by why: always (every job every sample), asked (someone asked for thread views), finding (a stall kind pending or active on its GPU), not_busy (a GPU of it not busy), cadence (its GPUs busy, its slow-cadence read due), changed (due to be carried, but a process of it new or its thread count changed).",
        None,
        Reason::ALL.map(|r| {
            (
                Labels::none().with("reason", r.as_str()),
                reads.get(r) as f64,
            )
        }),
    )?;
    counter(
        e,
        "stallwatch_thread_reads_deferred",
        "Job samples that carried the job's threads as last read: its GPUs busy, no stall pending or active, nobody asking.",
        None,
        [(Labels::none(), reads.deferred as f64)],
    )
}
