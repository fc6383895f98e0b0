//! Lost GPU time by the place in the job's code that lost it
//! (docs/goodput.md#by-place): at most `PLACES_EXPORTED` place series a
//! host, the rest and the seconds no stack named by reason.

use diagnosis::GpuStatus;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Unit;

use super::family::{counter, gauge};
use super::labels::Labels;

pub fn encode(e: &mut DescriptorEncoder, gpus: &[GpuStatus]) -> Result<(), std::fmt::Error> {
    counter(
        e,
        "stallwatch_gpu_lost_by_place",
        "GPU-seconds the ledger booked to a lost state (input, hung, compiling, checkpointing) that the job's Python stacks tie to a place: the user's own frame (place: function, file base name, line) and the installed function it called (library, empty when the user's code itself runs), with the stall kind or phase (kind). At most 32 series a host, the top places over the last day; the rest in stallwatch_gpu_lost_unplaced_seconds_total{reason=\"over_cap\"}.",
        Some(&Unit::Seconds),
        gpus.iter().flat_map(|g| {
            g.lost_by_place.iter().map(move |p| {
                let l = Labels::gpu(g.gpu, &g.uuid)
                    .with("state", p.state.as_str())
                    .with("kind", p.kind.as_str())
                    .with("place", p.place.place.as_str())
                    .with("library", p.place.library.as_str());
                (l, p.seconds)
            })
        }),
    )?;
    counter(
        e,
        "stallwatch_gpu_lost_unplaced",
        "GPU-seconds the ledger booked to a lost state that no place in the job's code is tied to, by why (reason: no_read, no_permission, not_python, unsupported_python, no_frames, failed, over_cap).",
        Some(&Unit::Seconds),
        gpus.iter().flat_map(|g| {
            g.lost_unplaced.iter().map(move |u| {
                let l = Labels::gpu(g.gpu, &g.uuid)
                    .with("state", u.state.as_str())
                    .with("reason", u.reason.as_str());
                (l, u.seconds)
            })
        }),
    )?;
    gauge(
        e,
        "stallwatch_gpu_place_call",
        "How long one call at the place took (the median of the calls a stack read timed), as last measured; for the places of stallwatch_gpu_lost_by_place_seconds_total that were timed.",
        Some(&Unit::Seconds),
        gpus.iter().flat_map(|g| {
            let mut seen: Vec<&diagnosis::ledger::Place> = Vec::new();
            g.lost_by_place.iter().filter_map(move |p| {
                let call = p.call_seconds?;
                if seen.contains(&&p.place) {
                    return None;
                }
                seen.push(&p.place);
                let l = Labels::gpu(g.gpu, &g.uuid)
                    .with("place", p.place.place.as_str())
                    .with("library", p.place.library.as_str());
                Some((l, call))
            })
        }),
    )
}
