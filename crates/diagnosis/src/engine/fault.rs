//! The gpu_fault kind, judged apart from the others: on every frame the GPU
//! is in, fresh or not.

use std::cell::Cell;

use super::episodes::{FAULT, event_for};
use super::state::GpuState;
use super::step::Step;
use crate::Kind;
use crate::detect::{Ctx, UtilizationCache, detect};
use crate::report::primary_job;
use crate::types::frame::JobFrame;
use crate::types::status::Event;

/// The gpu_fault kind, judged on every frame the GPU is in, fresh or
/// not: a GPU that fell off the bus does not answer, and its job is gone.
pub(super) fn observe_fault(
    step: &Step,
    state: &mut GpuState,
    jobs: &[&JobFrame],
    events: &mut Vec<Event>,
) {
    let Step {
        config,
        frame,
        gpu,
        t,
        ..
    } = *step;
    let timing = config.timing(Kind::GpuFault);
    if !timing.enabled {
        return;
    }
    let (_, job_gone) = config.fault_seconds();
    if let Some(job) = primary_job(gpu, jobs) {
        state.last_job = Some((job, t));
    }
    let recent_job = state
        .last_job
        .as_ref()
        .filter(|(_, seen)| t - seen <= job_gone)
        .map(|(job, _)| job.clone());
    let finding = {
        let ctx = Ctx {
            config,
            t,
            gpu,
            jobs: jobs.to_vec(),
            host: &frame.host,
            history: &state.history,
            silent_seconds: None,
            hang_seconds: 0.0,
            stuck: None,
            hang_shape: Cell::new(false),
            power_baseline: None,
            leftovers: Vec::new(),
            sharers: Vec::new(),
            starved_active: false,
            bound_active: false,
            starved_enter: false,
            bound_enter: false,
            had_job: recent_job.is_some(),
            utilization: UtilizationCache::default(),
            active: Cell::new(true),
        };
        detect(Kind::GpuFault, &ctx)
    };
    let transition = state
        .episodes
        .advance(FAULT, step, finding.condition, &timing, true, false);
    if let Some(event) = event_for(
        transition,
        Kind::GpuFault,
        gpu,
        t,
        || primary_job(gpu, jobs).or(recent_job),
        &finding.evidence,
    ) {
        state.episodes.emit(FAULT, event, events);
    }
    if state.episodes[FAULT].is_active() {
        state.fault.clone_from(&finding.evidence.fault);
        state.evidence[FAULT] = finding.evidence;
    } else {
        state.fault = None;
    }
}
