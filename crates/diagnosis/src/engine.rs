//! The engine: frames in, per-GPU state and events out. Pure: time comes
//! with the frames. A GPU's sample goes through the stages of
//! `engine/gpu.rs`, in order; its state is `engine/state.rs`.

mod episodes;
mod fault;
mod gpu;
mod lost;
mod point;
mod state;
mod step;

use std::collections::VecDeque;

use crate::config::DiagnosisConfig;
use crate::detect::hint;
use crate::ledger::{PlaceKey, PlaceLedger};
use crate::tracking::Progress;
use crate::types::frame::{Frame, GpuFrame};
use crate::types::stack_report::StackReport;
use crate::types::status::{ActiveKind, Event, GpuStatus, KindCounters, Phase};
use crate::{Kind, Verdict};
use state::GpuState;

pub struct Engine {
    config: DiagnosisConfig,
    gpus: Vec<GpuState>,
    progress: Progress,
    events: VecDeque<Event>,
    next_event_id: u64,
    /// The host's lost seconds by place, over every GPU (capped).
    places: PlaceLedger,
}

impl Engine {
    pub fn new(config: DiagnosisConfig) -> Self {
        Engine {
            config,
            gpus: Vec::new(),
            progress: Progress::default(),
            events: VecDeque::new(),
            next_event_id: 1,
            places: PlaceLedger::default(),
        }
    }

    /// Feeds one frame; returns the events it caused, oldest first.
    pub fn observe(&mut self, frame: &Frame) -> Vec<Event> {
        self.progress.observe(frame);
        let mut new_events = Vec::new();
        for gpu in &frame.gpus {
            let pos = match self.gpus.iter().position(|g| same_gpu(g, gpu)) {
                Some(p) => p,
                None => {
                    self.gpus.push(GpuState::new(gpu, frame.t));
                    self.gpus.len() - 1
                }
            };
            // In place: a GPU's state is 16 KB (an evidence per kind).
            let state = &mut self.gpus[pos];
            gpu::observe_gpu(
                &self.config,
                &self.progress,
                state,
                gpu,
                frame,
                &mut new_events,
            );
        }
        for state in &mut self.gpus {
            if !frame.gpus.iter().any(|g| same_gpu(state, g)) {
                // Gone from the frame: no data for it.
                state.set_verdict(Verdict::Unknown, frame.t);
                let (elapsed, _) = state.step(frame.t);
                state.book(elapsed, 0.0, None, None);
            }
        }
        for state in &mut self.gpus {
            hand_over(&mut self.places, state, frame.t);
        }
        for event in &mut new_events {
            event.id = self.next_event_id;
            self.next_event_id += 1;
            if self.events.len() == self.config.events_capacity {
                self.events.pop_front();
            }
            self.events.push_back(event.clone());
        }
        new_events
    }

    /// The GPUs whose job a short read of its stacks is due for, as (GPU
    /// index, uuid, pid), after the latest frame: to confirm a hang (a
    /// silent job whose GPU looks hung) or to find the job's phase (a stall
    /// kind's condition holds). The caller reads (a short burst of every
    /// thread), says so with [`Engine::short_read_asked`], and hands the
    /// report to [`Engine::attach_short_read`].
    pub fn short_reads_due(&self) -> Vec<(u32, String, u32)> {
        self.gpus
            .iter()
            .filter(|s| s.confirm_due || s.phase_due)
            .filter_map(|s| Some((s.index, s.uuid.clone(), s.phases.job_pid()?)))
            .collect()
    }

    /// A short read of `gpu`'s job was asked for at `t`.
    pub fn short_read_asked(&mut self, gpu: u32, uuid: &str, t: f64) {
        if let Some(s) = self.gpu_mut(gpu, uuid) {
            if s.confirm_due {
                s.confirm.asked(t);
            }
            s.phases.asked(t);
            s.confirm_due = false;
            s.phase_due = false;
        }
    }

    /// A short read of `gpu`'s job, taken when the report says.
    pub fn attach_short_read(&mut self, gpu: u32, uuid: &str, report: &StackReport) {
        if let Some(s) = self.gpu_mut(gpu, uuid) {
            s.confirm.add(report.pid, report.time, report);
            s.phases.add(report.pid, report.time, report.phase);
            if let Some(phase) = report.phase {
                s.lost.phase_seen(phase, report);
            }
        }
    }

    fn gpu_mut(&mut self, gpu: u32, uuid: &str) -> Option<&mut GpuState> {
        self.gpus
            .iter_mut()
            .find(|s| s.index == gpu && (uuid.is_empty() || s.uuid == uuid))
    }

    /// Attaches a stack report to the GPU's active episodes that want stacks
    /// and to their start events still in the ring. Returns those events, as
    /// now amended; none when no such episode is active any more.
    pub fn attach_stacks(&mut self, gpu: u32, uuid: &str, report: StackReport) -> Vec<Event> {
        let Some(state) = self
            .gpus
            .iter_mut()
            .find(|s| s.index == gpu && (uuid.is_empty() || s.uuid == uuid))
        else {
            return Vec::new();
        };
        let active: Vec<(Kind, f64)> = Kind::ALL
            .iter()
            .enumerate()
            .filter(|(_, k)| k.wants_stacks())
            .filter_map(|(i, k)| Some((*k, state.episodes[i].active_since?)))
            .collect();
        if active.is_empty() {
            return Vec::new();
        }
        for (i, k) in Kind::ALL.iter().enumerate() {
            if k.wants_stacks() && state.episodes[i].is_active() {
                state.evidence[i].stacks = Some(report.clone());
            }
        }
        state.stacks = Some(report.clone());
        // The seconds that waited for the episode's stacks have a place now.
        state.lost.settle(Some(&report));
        hand_over(&mut self.places, state, report.time);
        let uuid = state.uuid.clone();
        let mut amended = Vec::new();
        for event in self.events.iter_mut().rev() {
            let current = active
                .iter()
                .any(|(k, since)| event.kind == *k && event.time >= *since);
            if event.phase == Phase::Start
                && event.gpu == gpu
                && event.uuid == uuid
                && current
                && event.evidence.stacks.is_none()
            {
                event.evidence.stacks = Some(report.clone());
                event.hint = hint(event.kind, &event.evidence);
                amended.push(event.clone());
            }
        }
        amended.reverse();
        amended
    }

    /// The GPUs a stall kind is pending or active on: their jobs' threads
    /// are wanted every sample.
    pub fn watched_gpus(&self) -> Vec<u32> {
        self.gpus
            .iter()
            .filter(|s| {
                Kind::ALL.iter().enumerate().any(|(i, k)| {
                    k.is_stall() && (s.episodes[i].is_active() || s.episodes[i].is_pending())
                })
            })
            .map(|s| s.index)
            .collect()
    }

    /// Per-GPU status, in GPU index order.
    pub fn status(&self) -> Vec<GpuStatus> {
        let mut out: Vec<GpuStatus> = self
            .gpus
            .iter()
            .map(|s| GpuStatus {
                gpu: s.index,
                uuid: s.uuid.clone(),
                verdict: s.verdict,
                verdict_since: s.verdict_since,
                active: Kind::ALL
                    .iter()
                    .enumerate()
                    .filter_map(|(i, k)| {
                        let since = s.episodes[i].active_since?;
                        Some(ActiveKind {
                            kind: *k,
                            since,
                            evidence: s.evidence[i].clone(),
                            hint: hint(*k, &s.evidence[i]),
                        })
                    })
                    .collect(),
                jobs: s.jobs.clone(),
                job_idle_seconds_total: s.job_idle_seconds_total,
                phase: s.phase.clone(),
                phase_seconds_total: crate::types::phase::JobPhase::ALL
                    .into_iter()
                    .map(|p| (p, s.phases.seconds_total[p as usize]))
                    .collect(),
                time: s.ledger.ledger,
                time_held_seconds: s.ledger.held_seconds(),
                lost_progress_seconds_total: s.restarts.lost_progress_seconds_total,
                last_ended: s.restarts.ended.clone(),
                share: (s.weight < 1.0).then_some(crate::round::round(s.weight)),
                no_activity_reading: s.no_activity_reading.map(str::to_owned),
                lost_by_place: self.places.places(s.index, &s.uuid),
                lost_unplaced: self.places.unplaced(s.index, &s.uuid),
                lost_pending_seconds: s.lost.pending_seconds(),
                kinds: Kind::ALL
                    .iter()
                    .enumerate()
                    .map(|(i, k)| {
                        let counters = KindCounters {
                            active: s.episodes[i].is_active(),
                            seconds_total: s.episodes.seconds_total[i],
                            events_total: s.episodes.events_total[i],
                        };
                        (*k, counters)
                    })
                    .collect(),
            })
            .collect();
        out.sort_by_key(|g| g.gpu);
        out
    }

    /// Events with an id greater than `after_id` and a time at or after
    /// `since`, oldest first, at most `limit`.
    pub fn events(&self, since: f64, after_id: u64, limit: usize) -> Vec<Event> {
        self.events
            .iter()
            .filter(|e| e.time >= since && e.id > after_id)
            .take(limit)
            .cloned()
            .collect()
    }
}

/// Hands a GPU's lost seconds, as placed, to the host's ledger of places.
fn hand_over(places: &mut PlaceLedger, state: &mut GpuState, t: f64) {
    for b in state.lost.out.drain(..) {
        match b.at {
            Ok(located) => places.book_place(
                PlaceKey {
                    gpu: state.index,
                    uuid: state.uuid.clone(),
                    state: b.state,
                    kind: b.kind,
                    place: located.place,
                },
                located.call_seconds,
                b.seconds,
                t,
            ),
            Err(reason) => {
                places.book_unplaced(state.index, &state.uuid, b.state, reason, b.seconds)
            }
        }
    }
}

fn same_gpu(state: &GpuState, gpu: &GpuFrame) -> bool {
    if gpu.uuid.is_empty() || state.uuid.is_empty() {
        state.index == gpu.index
    } else {
        state.uuid == gpu.uuid
    }
}
