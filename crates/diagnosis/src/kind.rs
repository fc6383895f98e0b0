//! The closed set of things stallwatch can find on a GPU. The snake_case
//! names are part of the metrics contract (`kind` label).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    InputStarved,
    InputBound,
    SingleThreadBound,
    CpuSaturated,
    IoBound,
    BusyNoProgress,
    IdleNoProgress,
    HostMemoryPressure,
    GpuMemoryFull,
    SharedGpu,
    LeftoverProcess,
    Throttled,
    Spinning,
    LaunchBound,
    GpuFault,
}

impl Kind {
    pub const ALL: [Kind; 15] = [
        Kind::InputStarved,
        Kind::InputBound,
        Kind::SingleThreadBound,
        Kind::CpuSaturated,
        Kind::IoBound,
        Kind::BusyNoProgress,
        Kind::IdleNoProgress,
        Kind::HostMemoryPressure,
        Kind::GpuMemoryFull,
        Kind::SharedGpu,
        Kind::LeftoverProcess,
        Kind::Throttled,
        Kind::Spinning,
        Kind::LaunchBound,
        Kind::GpuFault,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::InputStarved => "input_starved",
            Kind::InputBound => "input_bound",
            Kind::SingleThreadBound => "single_thread_bound",
            Kind::CpuSaturated => "cpu_saturated",
            Kind::IoBound => "io_bound",
            Kind::BusyNoProgress => "busy_no_progress",
            Kind::IdleNoProgress => "idle_no_progress",
            Kind::HostMemoryPressure => "host_memory_pressure",
            Kind::GpuMemoryFull => "gpu_memory_full",
            Kind::SharedGpu => "shared_gpu",
            Kind::LeftoverProcess => "leftover_process",
            Kind::Throttled => "throttled",
            Kind::Spinning => "spinning",
            Kind::LaunchBound => "launch_bound",
            Kind::GpuFault => "gpu_fault",
        }
    }

    /// Kinds that make a GPU's verdict `stalled`: the GPU is idle (or busy
    /// without progress) because of the job, or its job's work was lost to a
    /// GPU fault. The others are findings that
    /// explain or threaten, shown alongside the verdict.
    pub fn is_stall(self) -> bool {
        matches!(
            self,
            Kind::InputStarved
                | Kind::InputBound
                | Kind::SingleThreadBound
                | Kind::CpuSaturated
                | Kind::IoBound
                | Kind::BusyNoProgress
                | Kind::IdleNoProgress
                | Kind::Spinning
                | Kind::GpuFault
        )
    }

    /// Refinements say why a GPU is starved or input-bound, and are active
    /// only together with one of those.
    pub fn is_refinement(self) -> bool {
        matches!(
            self,
            Kind::SingleThreadBound | Kind::CpuSaturated | Kind::IoBound
        )
    }

    /// Kinds whose episodes are worth the job's Python stacks: where the
    /// job's own code keeps the GPU waiting.
    pub fn wants_stacks(self) -> bool {
        matches!(
            self,
            Kind::InputStarved
                | Kind::InputBound
                | Kind::SingleThreadBound
                | Kind::BusyNoProgress
                | Kind::IdleNoProgress
                | Kind::Spinning
        )
    }

    /// Stall kinds a job's own phase (compiling, checkpointing, the
    /// DataLoader's start-up) explains while it lasts a normal time.
    pub fn yields_to_phase(self) -> bool {
        matches!(
            self,
            Kind::InputStarved
                | Kind::InputBound
                | Kind::SingleThreadBound
                | Kind::CpuSaturated
                | Kind::IoBound
                | Kind::BusyNoProgress
                | Kind::IdleNoProgress
        )
    }

    /// Whether its stacks should show every thread (where each one waits)
    /// rather than the busy work.
    pub fn stacks_focus(self) -> crate::stacks::Focus {
        match self {
            Kind::BusyNoProgress | Kind::IdleNoProgress | Kind::Spinning => {
                crate::stacks::Focus::AllThreads
            }
            _ => crate::stacks::Focus::Busy,
        }
    }

    /// Whether the warm-up grace period holds this kind back.
    pub fn waits_for_warmup(self) -> bool {
        !matches!(
            self,
            Kind::LeftoverProcess | Kind::Throttled | Kind::GpuMemoryFull | Kind::GpuFault
        )
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The primary verdict for one GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// No fresh GPU data (NVML down, stale, or the GPU is lost).
    Unknown,
    /// No live job holds the GPU.
    NoJob,
    /// Every job on the GPU is within its warm-up grace period.
    WarmingUp,
    Healthy,
    /// A stall kind is active.
    Stalled,
}

impl Verdict {
    pub const ALL: [Verdict; 5] = [
        Verdict::NoJob,
        Verdict::WarmingUp,
        Verdict::Healthy,
        Verdict::Stalled,
        Verdict::Unknown,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Unknown => "unknown",
            Verdict::NoJob => "no_job",
            Verdict::WarmingUp => "warming_up",
            Verdict::Healthy => "healthy",
            Verdict::Stalled => "stalled",
        }
    }
}
