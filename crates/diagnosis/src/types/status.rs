//! What the engine tells the rest of the program: per-GPU status and events.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::evidence::Evidence;
use super::frame::Attribution;
use super::kind::{Kind, Verdict};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Start,
    End,
}

/// The start or end of an episode of one kind on one GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Increasing number, unique within the daemon's run.
    pub id: u64,
    /// When it was decided, seconds since the epoch.
    pub time: f64,
    pub phase: Phase,
    pub kind: Kind,
    pub gpu: u32,
    pub uuid: String,
    /// Start: when the condition first held. End: when the episode started.
    pub since: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<JobRef>,
    pub evidence: Evidence,
    pub hint: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRef {
    pub pid: u32,
    pub comm: String,
    #[serde(default)]
    pub attribution: Attribution,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActiveKind {
    pub kind: Kind,
    /// When the episode started, seconds since the epoch.
    pub since: f64,
    pub evidence: Evidence,
    pub hint: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobStatus {
    pub pid: u32,
    pub comm: String,
    #[serde(default)]
    pub attribution: Attribution,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<super::frame::RunRank>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_unknown: Option<String>,
    pub start_time: f64,
    pub warming_up: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_cores: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_thread: Option<super::evidence::ThreadEvidence>,
    /// When the job's threads behind `top_thread` were read, seconds since
    /// the epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads_read_at: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_output: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_memory_bytes: Option<u64>,
    /// The GPU's time since the job came to it, booked as the GPU's is
    /// (docs/goodput.md): the job's own ledger on this GPU.
    #[serde(default)]
    pub time: super::ledger::Ledger,
    /// When the job's last checkpoint seen by the daemon ended (it saves
    /// while its GPU waits), seconds since the epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_checkpoint: Option<f64>,
    /// Productive GPU seconds since that checkpoint (since the job came
    /// when none was seen): what the job would lose if it died now.
    #[serde(default)]
    pub progress_since_checkpoint_seconds: f64,
}

/// Per-kind counters for one GPU.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KindCounters {
    pub active: bool,
    pub seconds_total: f64,
    pub events_total: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuStatus {
    pub gpu: u32,
    pub uuid: String,
    pub verdict: Verdict,
    /// When the verdict last changed.
    pub verdict_since: f64,
    pub active: Vec<ActiveKind>,
    pub jobs: Vec<JobStatus>,
    /// Seconds in which a job held the GPU while it was idle.
    pub job_idle_seconds_total: f64,
    /// The job's own phase now (compiling, checkpointing, the DataLoader's
    /// start-up), found in its stacks while its GPU looked stalled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<super::phase::PhaseStatus>,
    /// GPU-seconds the GPU waited on each phase since the daemon started.
    #[serde(default)]
    pub phase_seconds_total: BTreeMap<super::phase::JobPhase, f64>,
    /// Seconds of the GPU's watched time booked to each state
    /// (docs/goodput.md): they add up to the time the daemon watched it.
    #[serde(default)]
    pub time: super::ledger::Ledger,
    /// Seconds of a run of samples whose cause is still being judged, not
    /// yet in `time` (at most `ledger::HELD_SECONDS`).
    #[serde(default)]
    pub time_held_seconds: f64,
    /// Productive seconds lost to restarts: each restarted job's training
    /// since its last checkpoint (docs/goodput.md).
    #[serde(default)]
    pub lost_progress_seconds_total: f64,
    /// The job that left the GPU last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_ended: Option<super::ledger::EndedJob>,
    /// The part of its physical GPU this is, when not all of it (a MIG
    /// instance): its `time` counts that much of each second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share: Option<f64>,
    /// Why nothing says how busy the GPU is, when nothing does: its held
    /// time is then booked `unknown`, never `productive` or `idle`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_activity_reading: Option<String>,
    /// The lost seconds of `time` (input, hung, compiling, checkpointing)
    /// by the place in the job's code that lost them (docs/goodput.md#by-place),
    /// most first: the host shows at most `ledger::by_place::PLACES_EXPORTED`
    /// places over all its GPUs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lost_by_place: Vec<super::ledger::PlaceLoss>,
    /// Lost seconds tied to no place, by state and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lost_unplaced: Vec<super::ledger::UnplacedLoss>,
    /// Lost seconds of `time` waiting for their episode's first stack read.
    #[serde(default)]
    pub lost_pending_seconds: f64,
    /// Counters for every kind.
    pub kinds: BTreeMap<Kind, KindCounters>,
}
