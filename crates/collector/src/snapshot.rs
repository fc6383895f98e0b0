//! Snapshots: gauges, rates and monotonic totals derived from raw samples.
//! `/metrics`, the JSON API and the diagnosis read snapshots only.

use serde::{Deserialize, Serialize};

use crate::sample::{
    Attribution, ErrorCounts, GpmReading, GpuProcessKind, HostMemory, MigIdentity, Pressure,
};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Wall-clock time of the sample this snapshot comes from.
    pub timestamp_seconds: f64,
    /// Seconds since the previous sample; `None` for the first one.
    pub interval_seconds: Option<f64>,
    pub nvml_up: bool,
    /// GPU data was not refreshed by the latest sample (a hung NVML call).
    pub gpu_stale: bool,
    /// Wall-clock time the GPU data was read.
    pub gpu_read_at_seconds: f64,
    /// How long the sample waited for the GPU data (wall time).
    #[serde(default)]
    pub gpu_read_duration_seconds: f64,
    pub driver_version: Option<String>,
    pub gpus: Vec<GpuSnapshot>,
    pub jobs: Vec<JobSnapshot>,
    pub host: HostSnapshot,
    /// Read errors since the daemon started, by source.
    pub errors_total: ErrorCounts,
    #[serde(default)]
    pub kernel_log: crate::sample::faults::KernelLogState,
    /// The kubelet reader's state; `None` when it is off.
    #[serde(default)]
    pub kubernetes: Option<crate::sample::kubernetes::KubernetesState>,
    /// Job samples that read their threads, by reason, and that carried
    /// them, since the daemon started.
    #[serde(default)]
    pub thread_reads_total: crate::sample::reads::ThreadReadCounts,
}

impl Snapshot {
    /// Some GPU data was not refreshed: the whole reading, or one GPU's.
    pub fn any_gpu_stale(&self) -> bool {
        self.gpu_stale || self.gpus.iter().any(|g| g.stale)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuSnapshot {
    pub index: u32,
    pub uuid: String,
    pub name: String,
    pub pci_bus_id: String,
    pub up: bool,
    pub utilization_ratio: Option<f64>,
    pub memory_utilization_ratio: Option<f64>,
    pub memory_used_bytes: Option<u64>,
    pub memory_total_bytes: Option<u64>,
    pub temperature_celsius: Option<f64>,
    pub power_watts: Option<f64>,
    pub power_limit_watts: Option<f64>,
    pub energy_joules_total: Option<f64>,
    pub sm_clock_hertz: Option<f64>,
    pub memory_clock_hertz: Option<f64>,
    /// Active clock-event reasons; `None` when the device does not report them.
    pub clock_events: Option<Vec<ClockEventReason>>,
    pub pcie_transmit_bytes_per_second: Option<f64>,
    pub pcie_receive_bytes_per_second: Option<f64>,
    /// Processes on this GPU, largest GPU memory first.
    pub processes: Vec<GpuProcessSnapshot>,
    /// Whether the GPU has GPM (`None` while unknown).
    #[serde(default)]
    pub gpm_supported: Option<bool>,
    /// GPM activity over the last interval.
    #[serde(default)]
    pub gpm: Option<GpmReading>,
    /// Set for a MIG instance.
    #[serde(default)]
    pub mig: Option<MigIdentity>,
    /// Its share of its physical GPU (`GpuSample::share`); `None`: all of it.
    #[serde(default)]
    pub share: Option<f64>,
    /// Its reading is its last one: it did not answer within its budget.
    #[serde(default)]
    pub stale: bool,
    /// Memory, NVLink and recovery state (`None`: the device reports none).
    #[serde(default)]
    pub health: Option<crate::sample::faults::GpuHealth>,
    /// Xid errors since the daemon started, by Xid.
    #[serde(default)]
    pub xid_errors_total: std::collections::BTreeMap<u32, u64>,
    #[serde(default)]
    pub last_xid: Option<crate::sample::faults::XidRecord>,
    #[serde(default)]
    pub last_fatal_xid: Option<crate::sample::faults::XidRecord>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuProcessSnapshot {
    pub pid: u32,
    /// Process name from `/proc/<pid>/stat`; empty when the process is not
    /// visible in `/proc` (another PID namespace, or already gone).
    pub comm: String,
    pub kind: GpuProcessKind,
    pub memory_bytes: Option<u64>,
    pub sm_utilization_ratio: Option<f64>,
    pub memory_utilization_ratio: Option<f64>,
}

/// NVML clock-event (throttle) reasons: a closed set, exported as the
/// `reason` label of `stallwatch_gpu_clock_event_active`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClockEventReason {
    GpuIdle,
    ApplicationsClocksSetting,
    SwPowerCap,
    HwSlowdown,
    SyncBoost,
    SwThermalSlowdown,
    HwThermalSlowdown,
    HwPowerBrakeSlowdown,
    DisplayClockSetting,
}

impl ClockEventReason {
    /// Every reason with its NVML bit.
    pub const ALL: [(ClockEventReason, u64); 9] = [
        (ClockEventReason::GpuIdle, 0x1),
        (ClockEventReason::ApplicationsClocksSetting, 0x2),
        (ClockEventReason::SwPowerCap, 0x4),
        (ClockEventReason::HwSlowdown, 0x8),
        (ClockEventReason::SyncBoost, 0x10),
        (ClockEventReason::SwThermalSlowdown, 0x20),
        (ClockEventReason::HwThermalSlowdown, 0x40),
        (ClockEventReason::HwPowerBrakeSlowdown, 0x80),
        (ClockEventReason::DisplayClockSetting, 0x100),
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ClockEventReason::GpuIdle => "gpu_idle",
            ClockEventReason::ApplicationsClocksSetting => "applications_clocks_setting",
            ClockEventReason::SwPowerCap => "sw_power_cap",
            ClockEventReason::HwSlowdown => "hw_slowdown",
            ClockEventReason::SyncBoost => "sync_boost",
            ClockEventReason::SwThermalSlowdown => "sw_thermal_slowdown",
            ClockEventReason::HwThermalSlowdown => "hw_thermal_slowdown",
            ClockEventReason::HwPowerBrakeSlowdown => "hw_power_brake_slowdown",
            ClockEventReason::DisplayClockSetting => "display_clock_setting",
        }
    }

    /// The reasons whose bits are set in an NVML bitmask.
    pub fn from_mask(mask: u64) -> Vec<ClockEventReason> {
        Self::ALL
            .iter()
            .filter(|(_, bit)| mask & bit != 0)
            .map(|(reason, _)| *reason)
            .collect()
    }
}

/// A job: a GPU-holding process and its descendants.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobSnapshot {
    /// Pid of the GPU-holding process.
    pub pid: u32,
    pub start_ticks: u64,
    pub comm: String,
    pub state: char,
    pub ppid: u32,
    /// Start time of the GPU-holding process, seconds since the epoch.
    pub start_time_seconds: f64,
    pub gpus: Vec<u32>,
    pub attribution: Attribution,
    /// Its distributed run and rank, from the launcher's variables.
    #[serde(default)]
    pub rank: crate::sample::job::RankRead,
    /// The ML frameworks whose libraries the leader has mapped.
    #[serde(default)]
    pub frameworks: crate::sample::job::Frameworks,
    /// PyTorch DataLoader worker processes among the job's descendants
    /// (named `pt_data_worker` by PyTorch), and whether the leader runs the
    /// DataLoader's pin-memory thread (`pt_data_pin`).
    #[serde(default)]
    pub data_loader_workers: u32,
    #[serde(default)]
    pub pin_memory_thread: bool,
    /// Processes in the job, leader included.
    pub processes: u32,
    pub threads: ThreadStates,
    /// CPU time of every process that has been part of the job while watched.
    pub cpu_seconds_total: f64,
    /// CPU used over the last interval, in cores.
    pub cpu_cores: Option<f64>,
    /// The busiest threads over the interval between the last two reads of
    /// the job's threads, busiest first (at most `delta::TOP_THREADS`).
    pub top_threads: Vec<ThreadUsage>,
    /// When the job's threads were last read (they are not read every
    /// sample while its GPUs are busy: thread_reads.rs), seconds since the
    /// epoch; `None` while its threads were never read.
    #[serde(default)]
    pub threads_read_seconds: Option<f64>,
    /// CPU over the last interval of each process that owns one of
    /// `top_threads`, busiest first: whether busy threads share one process
    /// (and so one GIL) and how much that process used as a whole.
    #[serde(default)]
    pub top_processes: Vec<ProcessUsage>,
    pub rss_bytes: u64,
    /// Storage and character I/O of every process that has been part of the
    /// job while watched (`/proc/<pid>/io`); `None` while no process's `io`
    /// could be read (another user's process, without the capabilities).
    pub read_bytes_total: Option<u64>,
    pub write_bytes_total: Option<u64>,
    pub rchar_total: Option<u64>,
    pub wchar_total: Option<u64>,
    /// Storage reads over the last interval; `None` on the first sample and
    /// while `io` is unreadable.
    pub read_bytes_per_second: Option<f64>,
    /// Last time the job's output grew (fd 1/2 file size or mtime, or the
    /// leader's `wchar`), seconds since the epoch; `None` until seen.
    pub last_output_seconds: Option<f64>,
    /// True when no output progress can be seen: neither the leader's `io`
    /// nor a regular file behind its fd 1 or 2 could be read (another user's
    /// process, without the capabilities). Silence then means nothing.
    pub output_unknown: bool,
}

/// Threads of a job by kernel state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadStates {
    pub running: u32,
    pub sleeping: u32,
    pub disk_sleep: u32,
    pub stopped: u32,
    pub zombie: u32,
    pub other: u32,
}

impl ThreadStates {
    pub const LABELS: [&'static str; 6] = [
        "running",
        "sleeping",
        "disk_sleep",
        "stopped",
        "zombie",
        "other",
    ];

    pub fn add(&mut self, state: char) {
        match state {
            'R' => self.running += 1,
            'S' | 'I' => self.sleeping += 1,
            'D' => self.disk_sleep += 1,
            'T' | 't' => self.stopped += 1,
            'Z' | 'X' => self.zombie += 1,
            _ => self.other += 1,
        }
    }

    /// Counts in the order of `LABELS`.
    pub fn counts(&self) -> [u32; 6] {
        [
            self.running,
            self.sleeping,
            self.disk_sleep,
            self.stopped,
            self.zombie,
            self.other,
        ]
    }

    pub fn total(&self) -> u32 {
        self.counts().iter().sum()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadUsage {
    pub pid: u32,
    pub tid: u32,
    pub name: String,
    pub state: char,
    /// Share of one core used over the last interval.
    pub cpu_ratio: f64,
    /// Share of the last interval it was runnable but waiting for a CPU (a
    /// busy host, or a lock such as Python's GIL handed to it while its CPU
    /// ran something else); absent where `schedstat` is not read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_ratio: Option<f64>,
}

/// CPU of one process of a job over the last interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ProcessUsage {
    pub pid: u32,
    /// All the process's threads together, in cores.
    pub cpu_cores: f64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostSnapshot {
    pub cpu_utilization_ratio: Option<f64>,
    pub busiest_core_ratio: Option<f64>,
    /// The share of all CPU time the hypervisor took (steal; part of
    /// `cpu_utilization_ratio`); 0 on bare metal, `None` where the kernel
    /// does not report it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_steal_ratio: Option<f64>,
    pub cpus: Option<u32>,
    pub pressure: Pressure,
    pub memory: Option<HostMemory>,
}
