//! The states a GPU's time is booked to (docs/goodput.md).

use serde::{Deserialize, Serialize};

use super::kind::Kind;

/// What a GPU's time went to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeState {
    /// Nothing holds the GPU.
    NoJob,
    /// No GPU data: NVML down, the GPU not answering, or the daemon not
    /// sampling (a gap between samples); or a job holds it and nothing
    /// says how busy it is (no utilization and no GPM: a MIG instance of an
    /// A100 or A30, a failed utilization call), and no kind or phase
    /// explains the time.
    Unknown,
    /// A job holds it before its first sustained work and works on the host
    /// (imports, CUDA and NCCL set-up, the DataLoader's start), for at most
    /// [`STARTUP_LIMIT_SECONDS`].
    Startup,
    /// The job compiles (`torch.compile`, XLA, AutoGraph).
    Compiling,
    /// The job saves a checkpoint.
    Checkpointing,
    /// The input side holds the GPU back (the input kinds).
    Input,
    /// The job makes no progress (the no-progress kinds, `spinning`).
    Hung,
    /// A GPU fault (`gpu_fault`), or the GPU lost under a job.
    Fault,
    /// A job holds it and it idles, with no diagnosis of why.
    Idle,
    /// The rest: a job holds it and it works.
    Productive,
    /// A run's restart: from its job leaving the GPU to the job that comes
    /// back on it under the same run id, and that job's start-up.
    Recovery,
}

impl TimeState {
    pub const ALL: [TimeState; 11] = [
        TimeState::NoJob,
        TimeState::Unknown,
        TimeState::Startup,
        TimeState::Compiling,
        TimeState::Checkpointing,
        TimeState::Input,
        TimeState::Hung,
        TimeState::Fault,
        TimeState::Idle,
        TimeState::Productive,
        TimeState::Recovery,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TimeState::NoJob => "no_job",
            TimeState::Unknown => "unknown",
            TimeState::Startup => "startup",
            TimeState::Compiling => "compiling",
            TimeState::Checkpointing => "checkpointing",
            TimeState::Input => "input",
            TimeState::Hung => "hung",
            TimeState::Fault => "fault",
            TimeState::Idle => "idle",
            TimeState::Productive => "productive",
            TimeState::Recovery => "recovery",
        }
    }

    /// The state an active episode of `kind` books its GPU's time to, if
    /// any; the other kinds leave the time to the GPU's activity (a job
    /// that trains while throttled, launch-bound or short of memory trains).
    pub fn of_kind(kind: Kind) -> Option<TimeState> {
        match kind {
            Kind::InputStarved
            | Kind::InputBound
            | Kind::SingleThreadBound
            | Kind::CpuSaturated
            | Kind::IoBound => Some(TimeState::Input),
            Kind::BusyNoProgress | Kind::IdleNoProgress | Kind::Spinning => Some(TimeState::Hung),
            Kind::GpuFault => Some(TimeState::Fault),
            Kind::HostMemoryPressure
            | Kind::GpuMemoryFull
            | Kind::SharedGpu
            | Kind::LeftoverProcess
            | Kind::Throttled
            | Kind::LaunchBound => None,
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}
