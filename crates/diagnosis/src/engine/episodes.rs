//! What the engine's stages share about the kinds' episodes: the per-kind
//! arrays' size, `gpu_fault`'s place in them, and the event of an episode's
//! transition.

use crate::Kind;
use crate::evidence::Evidence;
use crate::frame::GpuFrame;
use crate::hysteresis::Transition;
use crate::report::make_event;
use crate::status::{Event, JobRef, Phase};

pub(super) const KINDS: usize = Kind::ALL.len();
/// `Kind::GpuFault`'s place in `Kind::ALL` (and in the per-kind arrays).
pub(super) const FAULT: usize = {
    let mut i = 0;
    while !matches!(Kind::ALL[i], Kind::GpuFault) {
        i += 1;
    }
    i
};

/// The start or end event of an episode's transition, if there was one.
pub(super) fn event_for(
    transition: Option<Transition>,
    kind: Kind,
    gpu: &GpuFrame,
    t: f64,
    job: impl FnOnce() -> Option<JobRef>,
    evidence: &Evidence,
) -> Option<Event> {
    let (phase, since) = match transition? {
        Transition::Started { onset } => (Phase::Start, onset),
        Transition::Ended { since } => (Phase::End, since),
    };
    Some(make_event(phase, kind, gpu, t, since, job(), evidence))
}
