//! The numbers a rule used, carried with every finding and event so a person
//! can check the verdict.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// Length of the window the statistics cover, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_seconds: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub utilization_mean: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub utilization_stddev: Option<f64>,
    /// Share of samples with utilization under `diagnosis.idle_below`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_share: Option<f64>,
    /// Share of samples with utilization at or above `diagnosis.busy_above`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub busy_share: Option<f64>,
    /// Which reading the rule took as the GPU's activity: `utilization_gpu`,
    /// `gpm_sm_active` (GPM; on MIG the only one), or `power_baseline`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activity_signal: Option<super::activity::ActivitySignal>,
    /// GPM SM activity over the window: mean and standard deviation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_active_mean: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_active_stddev: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensor_active_mean: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dram_active_mean: Option<f64>,
    /// NVLink and PCIe traffic over the window, both directions, mean.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvlink_bytes_per_second: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie_bytes_per_second: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_memory_used_ratio: Option<f64>,
    /// Mean CPU of the GPU's jobs over the window, in cores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_cpu_cores: Option<f64>,
    /// The job's busiest threads now, busiest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub top_threads: Vec<ThreadEvidence>,
    /// Share of samples in which the busiest thread used at least
    /// `single_thread_bound.min_thread_cpu` of a core.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinned_share: Option<f64>,
    /// single_thread_bound without one pinned thread: GIL-bound work spread
    /// over several threads of one process (absent for one pinned thread).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gil_spread: Option<GilSpread>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_cpu_ratio: Option<f64>,
    /// single_thread_bound on a virtual machine: the mean share of the
    /// host's CPU time the hypervisor took over the window (from 0.05;
    /// thread figures read low by it, and the rule scales them back up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_steal_ratio: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_cpus: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub psi_cpu_some: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub psi_io_some: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub psi_memory_some: Option<f64>,
    /// Share of samples with a job thread in D (uninterruptible) state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_sleep_share: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_bytes_per_second: Option<f64>,
    /// Seconds since the job's output last grew.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub silent_seconds: Option<f64>,
    /// The hang time used for this job, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hang_seconds: Option<f64>,
    /// No-progress kinds named before the hang time: where the job's
    /// stacks stood in every confirming read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stuck: Option<super::stuck::Stuck>,
    /// The job's own phase that lasted too long or took too large a share
    /// of the last hour (a stall kind it would otherwise explain).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<super::phase::PhaseStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_watts: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_baseline_watts: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_limit_watts: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_available_ratio: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_rss_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swap_used_bytes: Option<u64>,
    /// Processes on the GPU that the finding is about.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub processes: Vec<ProcessEvidence>,
    /// Share of busy samples with a throttle reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttled_share: Option<f64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clock_event_reasons: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature_celsius: Option<f64>,
    /// The GPU fault behind a gpu_fault finding (and behind a hang that
    /// follows one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<FaultEvidence>,
    /// Python stacks of the process that owns the busiest thread (or of the
    /// job, for the no-progress kinds), sampled when the episode started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stacks: Option<super::stack_report::StackReport>,
    /// The job's framework as its libraries and process names tell it
    /// (the stacks' own answer is in `stacks.framework`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub framework: Option<super::framework::FrameworkEvidence>,
}

/// What a GPU fault was and what to do about it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FaultEvidence {
    /// The latest fatal Xid, if one is behind the fault.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xid: Option<super::frame::XidFrame>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub row_remap_failure: bool,
    /// The driver's recommended recovery action, when not `none`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery_action: Option<String>,
    /// What to do: `restart_job`, `reset_gpu` or `drain_node`.
    pub action: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ThreadEvidence {
    pub pid: u32,
    pub tid: u32,
    pub name: String,
    pub state: String,
    /// Share of one core.
    pub cpu_ratio: f64,
    /// Share of the interval it was runnable but waiting for a CPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_ratio: Option<f64>,
}

/// Busy threads of one process that together use about one core while the
/// process as a whole uses not much more: they take turns holding the GIL.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GilSpread {
    pub pid: u32,
    /// The process's busy threads now, busiest first.
    pub threads: Vec<ThreadEvidence>,
    /// Their CPU together, in cores.
    pub cpu_cores: f64,
    /// Their time waiting for a CPU together, in cores: the GIL handed to a
    /// thread that waits in a run queue is used by none of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_cores: Option<f64>,
    /// The whole process's CPU, in cores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_cpu_cores: Option<f64>,
}

impl GilSpread {
    /// Their wait for a CPU together, where it is worth saying (a twentieth
    /// of a core or more).
    pub fn noticeable_wait(&self) -> Option<f64> {
        self.wait_cores.filter(|w| *w >= 0.05)
    }
}
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessEvidence {
    pub pid: u32,
    /// Empty when the process is not in /proc.
    pub comm: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_utilization_ratio: Option<f64>,
    /// `running`, `zombie`, `orphaned`, `gone`, ...
    pub state: String,
    /// Seconds since the process last used the GPU (or since first seen).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_seconds: Option<f64>,
}
