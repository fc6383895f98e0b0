//! What the detectors see of one sample: a compact, serialisable view of a
//! snapshot. Recorded runs are JSON lines of frames, replayed in tests.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Frame {
    /// Seconds since the Unix epoch.
    pub t: f64,
    pub gpus: Vec<GpuFrame>,
    pub jobs: Vec<JobFrame>,
    pub host: HostFrame,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuFrame {
    pub index: u32,
    pub uuid: String,
    /// GPU data is current: NVML up, not stale, GPU answering.
    pub fresh: bool,
    /// The part of its physical GPU this is (a MIG instance's slices over
    /// the GPU's; a MIG-enabled GPU's slices no instance holds): its
    /// seconds count this much in the GPU-time ledger. `None`: a whole GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share: Option<f64>,
    /// A MIG instance.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub mig: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub utilization: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_used_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_total_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_watts: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_limit_watts: Option<f64>,
    /// NVML clock-event reason bitmask (0 when not reported).
    #[serde(default)]
    pub clock_events: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature_celsius: Option<f64>,
    #[serde(default)]
    pub processes: Vec<ProcessFrame>,
    /// GPM (Hopper and later) over the last interval: SM, tensor and DRAM
    /// activity as ratios, NVLink and PCIe bytes per second (both
    /// directions together). Absent without GPM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_active: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensor_active: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dram_active: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvlink_bytes_per_second: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie_bytes_per_second: Option<f64>,
    /// The latest fatal Xid error on the GPU (absent from frames without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xid: Option<XidFrame>,
    /// A row remapping failed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub row_remap_failure: bool,
    /// The driver's recommended recovery action, when it is not `none`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery_action: Option<String>,
}

impl GpuFrame {
    /// How much of a physical GPU a second of this one is (0 to 1).
    pub fn weight(&self) -> f64 {
        self.share
            .filter(|s| s.is_finite())
            .map_or(1.0, |s| s.clamp(0.0, 1.0))
    }

    /// Something says how busy the GPU is: its utilization or, without it
    /// (a MIG instance, a failed call), GPM's SM activity.
    pub fn measured(&self) -> bool {
        self.utilization.is_some() || self.sm_active.is_some()
    }
}

/// An Xid error, with its catalogue entry.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct XidFrame {
    pub xid: u32,
    /// When it was reported, seconds since the epoch.
    pub t: f64,
    /// The process the driver blamed (from the kernel log).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comm: Option<String>,
    pub meaning: String,
    /// `restart_job`, `reset_gpu`, `drain_node` or `none`.
    pub action: String,
    /// The job's work on the GPU is lost (action other than `none`).
    pub fatal: bool,
    /// Most often caused by the job's own code.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub job_code: bool,
    /// The driver's own words, shortened.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

/// A process holding a context on the GPU, as NVML reports it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessFrame {
    pub pid: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_utilization: Option<f64>,
    /// An MPS client (listed by NVML's MPS calls): sharing the GPU with the
    /// other clients is what MPS is for.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub mps: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobFrame {
    /// Pid of the GPU-holding process.
    pub pid: u32,
    pub comm: String,
    /// Kernel state letter of the GPU-holding process.
    pub state: char,
    pub ppid: u32,
    /// Start time of the GPU-holding process, seconds since the epoch.
    pub start_time: f64,
    pub gpus: Vec<u32>,
    #[serde(default)]
    pub attribution: Attribution,
    /// Its distributed run and rank, from the launcher's variables.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<RunRank>,
    /// Why launcher variables made no rank (malformed, unreadable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_unknown: Option<String>,
    pub processes: u32,
    /// CPU used over the last interval by all the job's processes, in cores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_cores: Option<f64>,
    /// Busiest threads between the last two reads of the job's threads,
    /// busiest first.
    #[serde(default)]
    pub top_threads: Vec<ThreadFrame>,
    /// When the job's threads were last read, seconds since the epoch (not
    /// every sample while its GPUs are busy; absent from older frames).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads_read_at: Option<f64>,
    /// CPU over the last interval of the processes owning the top threads,
    /// busiest first (absent from frames recorded before it existed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub top_processes: Vec<ProcessCpuFrame>,
    /// Threads by state across the job.
    pub threads_total: u32,
    pub threads_running: u32,
    pub threads_disk_sleep: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_bytes_per_second: Option<f64>,
    pub rss_bytes: u64,
    /// Last time the job's output grew, seconds since the epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_output: Option<f64>,
    /// No output progress can be seen (the job's `io` and output files are
    /// unreadable): its silence is not evidence of a hang.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub output_unknown: bool,
    /// What the job's libraries and process names say of its framework.
    #[serde(default)]
    pub framework: JobFramework,
}

/// The framework signs of one job, as the collector saw them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobFramework {
    /// Frameworks whose libraries the GPU-holding process has mapped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub loaded: Vec<super::framework::Framework>,
    /// Its PyTorch DataLoader worker processes (`pt_data_worker`).
    #[serde(default)]
    pub data_loader_workers: u32,
    /// It runs the DataLoader's pin-memory thread (`pt_data_pin`).
    #[serde(default)]
    pub pin_memory_thread: bool,
}

/// A job's place in a distributed run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRank {
    /// Equal on every rank of one run.
    pub run: String,
    pub rank: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_rank: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub world_size: Option<u32>,
    pub launcher: String,
}

/// Where a job runs and whose it is; a field is absent when unknown.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attribution {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub systemd_unit: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_uid: Option<String>,
    /// The pod's namespace, name and the container, from the kubelet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// Why a job in a pod has no namespace and pod name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_unknown: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm_job_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm_step: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm_account: Option<String>,
    /// The job's user: a name or a uid, as `[identity] user_label` allows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ThreadFrame {
    pub pid: u32,
    pub tid: u32,
    pub name: String,
    pub state: char,
    /// Share of one core over the last interval.
    pub cpu: f64,
    /// Share of the last interval it was runnable but waiting for a CPU;
    /// absent where not known (frames recorded before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<f64>,
}

/// CPU of one process of a job over the last interval.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessCpuFrame {
    pub pid: u32,
    /// All its threads together, in cores.
    pub cpu_cores: f64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostFrame {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_utilization: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub busiest_core: Option<f64>,
    /// The share of all CPU time the hypervisor took (steal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_steal: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub psi_cpu_some: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub psi_io_some: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub psi_memory_some: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_total_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_available_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swap_used_bytes: Option<u64>,
}

impl HostFrame {
    pub fn memory_available_ratio(&self) -> Option<f64> {
        let total = self.memory_total_bytes.filter(|t| *t > 0)? as f64;
        Some(self.memory_available_bytes? as f64 / total)
    }
}

impl GpuFrame {
    pub fn memory_used_ratio(&self) -> Option<f64> {
        let total = self.memory_total_bytes.filter(|t| *t > 0)? as f64;
        Some(self.memory_used_bytes? as f64 / total)
    }
}
