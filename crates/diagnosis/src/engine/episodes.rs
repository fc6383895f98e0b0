//! What the engine's stages share about the kinds' episodes: a GPU's
//! episode and counters per kind, `gpu_fault`'s place among them, and the
//! event of an episode's transition.

use std::ops::Index;

use super::step::Step;
use crate::Kind;
use crate::config::Timing;
use crate::detect::hint;
use crate::hysteresis::{Condition, Episode, Transition};
use crate::types::evidence::Evidence;
use crate::types::frame::GpuFrame;
use crate::types::status::{Event, JobRef, Phase};

pub(super) const KINDS: usize = Kind::ALL.len();
/// `Kind::GpuFault`'s place in `Kind::ALL` (and in the per-kind arrays).
pub(super) const FAULT: usize = {
    let mut i = 0;
    while !matches!(Kind::ALL[i], Kind::GpuFault) {
        i += 1;
    }
    i
};

/// A GPU's episode of every kind, with the seconds each was active and the
/// episodes each started.
#[derive(Debug, Default)]
pub(super) struct Episodes {
    of: [Episode; KINDS],
    pub(super) seconds_total: [f64; KINDS],
    pub(super) events_total: [u64; KINDS],
}

impl Index<usize> for Episodes {
    type Output = Episode;

    fn index(&self, i: usize) -> &Episode {
        &self.of[i]
    }
}

impl Episodes {
    /// Feeds kind `i`'s condition to its episode at the step's time,
    /// counting the step's seconds to it if it was active; returns the
    /// transition, if any.
    pub(super) fn advance(
        &mut self,
        i: usize,
        step: &Step,
        condition: Condition,
        timing: &Timing,
        allowed: bool,
        force_end: bool,
    ) -> Option<Transition> {
        if self.of[i].is_active() {
            self.seconds_total[i] += step.dt;
        }
        self.of[i].update(
            step.t,
            condition,
            timing.enter_for,
            timing.exit_for,
            allowed,
            force_end,
        )
    }

    /// Hands on kind `i`'s event, counting a start.
    pub(super) fn emit(&mut self, i: usize, event: Event, events: &mut Vec<Event>) {
        if event.phase == Phase::Start {
            self.events_total[i] += 1;
        }
        events.push(event);
    }
}

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

/// The event of kind `kind`'s episode, with its hint.
fn make_event(
    phase: Phase,
    kind: Kind,
    gpu: &GpuFrame,
    t: f64,
    since: f64,
    job: Option<JobRef>,
    evidence: &Evidence,
) -> Event {
    Event {
        id: 0,
        time: t,
        phase,
        kind,
        gpu: gpu.index,
        uuid: gpu.uuid.clone(),
        since,
        job,
        evidence: evidence.clone(),
        hint: hint(kind, evidence),
    }
}
