//! Raw samples: what the readers saw at one instant, cumulative counters in
//! canonical units (bytes, seconds, watts, joules, hertz, ratios 0-1).
//! Nothing here is a rate; `crate::delta` turns two samples into a snapshot.

use serde::{Deserialize, Serialize};

pub mod faults;
pub mod job;
pub mod kubernetes;
pub mod reads;

/// One complete reading of the host, its GPUs and the jobs on them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Wall-clock time of the sample, seconds since the Unix epoch.
    pub timestamp_seconds: f64,
    /// How long taking the sample took, in seconds.
    pub duration_seconds: f64,
    pub gpu: GpuReadout,
    pub jobs: Vec<JobSample>,
    pub host: HostSample,
    /// Read errors met while taking this sample, by source.
    pub errors: ErrorCounts,
    /// Whether the kernel log (Xid lines) is being read.
    #[serde(default)]
    pub kernel_log: faults::KernelLogState,
    /// The kubelet reader's state; `None` when it is off.
    #[serde(default)]
    pub kubernetes: Option<kubernetes::KubernetesState>,
    /// Which jobs read their threads in this sample, and why.
    #[serde(default)]
    pub thread_reads: reads::ThreadReadCounts,
}

/// The state of NVML and every GPU it reported.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuReadout {
    /// NVML is loaded and initialised.
    pub nvml_up: bool,
    /// The GPU data below was not refreshed in this sample because an NVML call
    /// did not return within `gpu.timeout`; it is the last data that was read.
    pub stale: bool,
    /// Wall-clock time the GPU data below was read, seconds since the epoch.
    pub read_at_seconds: f64,
    /// How long the sample waited for this reading (wall time): every GPU's
    /// calls, on their threads side by side.
    #[serde(default)]
    pub read_duration_seconds: f64,
    pub driver_version: Option<String>,
    pub gpus: Vec<GpuSample>,
}

/// One GPU. Every measurement is optional: a field the device does not
/// support is left out.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuSample {
    pub index: u32,
    pub uuid: String,
    pub name: String,
    pub pci_bus_id: String,
    /// False when the GPU fell off the bus or stopped answering.
    pub up: bool,
    pub utilization_ratio: Option<f64>,
    pub memory_utilization_ratio: Option<f64>,
    pub memory_used_bytes: Option<u64>,
    pub memory_total_bytes: Option<u64>,
    pub temperature_celsius: Option<f64>,
    pub power_watts: Option<f64>,
    pub power_limit_watts: Option<f64>,
    /// Cumulative energy since the driver was loaded.
    pub energy_joules: Option<f64>,
    pub sm_clock_hertz: Option<f64>,
    pub memory_clock_hertz: Option<f64>,
    /// NVML clock-event (throttle) reason bitmask.
    pub clock_event_reasons: Option<u64>,
    pub pcie_transmit_bytes_per_second: Option<f64>,
    pub pcie_receive_bytes_per_second: Option<f64>,
    pub processes: Vec<GpuProcessSample>,
    /// Memory, NVLink and recovery state; `None` when the device reports none.
    #[serde(default)]
    pub health: Option<faults::GpuHealth>,
    /// Xid errors counted on this GPU since the daemon started, by Xid.
    #[serde(default)]
    pub xid_errors: std::collections::BTreeMap<u32, u64>,
    /// The latest of them.
    #[serde(default)]
    pub last_xid: Option<faults::XidRecord>,
    /// The latest fatal one (catalogue action other than `none`).
    #[serde(default)]
    pub last_fatal_xid: Option<faults::XidRecord>,
    /// Whether the GPU has GPM (`None` until asked, or when NVML is too old).
    #[serde(default)]
    pub gpm_supported: Option<bool>,
    /// GPM metrics since the previous sample; `None` without GPM, on the
    /// first sample, or when the reading failed.
    #[serde(default)]
    pub gpm: Option<GpmReading>,
    /// Set for a MIG instance: which GPU it is part of, and its instance IDs.
    /// Its `index` is then `mig_index(parent, gpu instance, compute instance)`.
    #[serde(default)]
    pub mig: Option<MigIdentity>,
    /// The part of its physical GPU this is, for the GPU-time ledger: a MIG
    /// instance's GPU slices over its GPU's (3/7 for a 3g instance of an
    /// H100), a MIG-enabled GPU's slices that no instance holds; `None` for
    /// a whole GPU (all of it).
    #[serde(default)]
    pub share: Option<f64>,
    /// This GPU did not answer within its own budget in this reading (its
    /// values are its last ones); the other GPUs' are fresh.
    #[serde(default)]
    pub stale: bool,
}

/// Where a MIG instance lives.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigIdentity {
    pub parent_index: u32,
    pub parent_uuid: String,
    pub gpu_instance_id: u32,
    pub compute_instance_id: u32,
}

/// MIG instances' indices start here: `MIG_INDEX_BASE + parent << 16 +
/// gpu instance << 8 + compute instance`, so they never meet a GPU's index
/// and each names its instance.
pub const MIG_INDEX_BASE: u32 = 1 << 24;

/// The index standing for a MIG instance (IDs above 255 are clamped; NVML's
/// are below 16).
pub fn mig_index(parent: u32, gpu_instance: u32, compute_instance: u32) -> u32 {
    MIG_INDEX_BASE
        + (parent.min(255) << 16)
        + (gpu_instance.min(255) << 8)
        + compute_instance.min(255)
}

/// The `gpu` label for an index: the GPU's index, or for a MIG instance
/// `<parent>/<gpu instance>/<compute instance>`.
pub fn gpu_label(index: u32) -> String {
    GpuLabel(index).to_string()
}

/// The `gpu` label of an index, written where it is displayed (no string
/// made for it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuLabel(pub u32);

impl std::fmt::Display for GpuLabel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let index = self.0;
        if index < MIG_INDEX_BASE {
            return write!(f, "{index}");
        }
        let i = index - MIG_INDEX_BASE;
        write!(f, "{}/{}/{}", i >> 16, (i >> 8) & 0xff, i & 0xff)
    }
}

/// What the SMs did between two GPM samples (Hopper and later). Ratios 0-1,
/// rates in bytes per second; a metric the device does not report is `None`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct GpmReading {
    /// Share of time each SM had at least one warp assigned, averaged over
    /// the SMs (NVML `SM_UTIL`, DCGM `PROF_SM_ACTIVE`).
    pub sm_active_ratio: Option<f64>,
    /// Resident warps over the maximum, averaged over the SMs.
    pub sm_occupancy_ratio: Option<f64>,
    /// Share of time any tensor pipe was active.
    pub tensor_active_ratio: Option<f64>,
    /// Share of DRAM bandwidth used.
    pub dram_active_ratio: Option<f64>,
    pub nvlink_transmit_bytes_per_second: Option<f64>,
    pub nvlink_receive_bytes_per_second: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GpuProcessKind {
    Compute,
    Graphics,
    /// An MPS client: its work runs in the MPS server's context, and NVML
    /// lists it with the MPS calls.
    Mps,
}

/// A process holding a context on a GPU, as NVML reports it (host pid).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuProcessSample {
    pub pid: u32,
    pub kind: GpuProcessKind,
    /// GPU memory used by the process; `None` when the driver does not say.
    pub memory_bytes: Option<u64>,
    /// Mean SM utilization since the previous sample; 0 when NVML had no
    /// sample for it (`NOT_FOUND`), `None` when the call is not supported.
    pub sm_utilization_ratio: Option<f64>,
    pub memory_utilization_ratio: Option<f64>,
}

/// A process identity that survives pid reuse: (pid, start time in clock ticks
/// since boot).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ProcessId {
    pub pid: u32,
    pub start_ticks: u64,
}

/// A job: a process holding a GPU context plus all its descendants (down to,
/// not including, descendants that hold a GPU context themselves).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobSample {
    /// GPU indices the leader holds a context on.
    pub gpus: Vec<u32>,
    /// The GPU-holding process, with each of its threads.
    pub leader: ProcessSample,
    /// Its descendants, with their threads.
    pub descendants: Vec<ProcessSample>,
    pub attribution: Attribution,
    /// Its distributed run and rank, from the launcher's variables.
    #[serde(default)]
    pub rank: job::RankRead,
    /// The ML frameworks whose libraries the leader has mapped.
    #[serde(default)]
    pub frameworks: job::Frameworks,
    /// Size of the regular files behind the leader's fd 1 and fd 2, when they
    /// are regular files.
    pub stdout_bytes: Option<u64>,
    pub stderr_bytes: Option<u64>,
    /// Latest modification time of those files, seconds since the epoch.
    pub output_modified_seconds: Option<f64>,
    /// Its threads were not read this sample: each is as last read (see
    /// thread_reads.rs).
    #[serde(default)]
    pub threads_carried: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessSample {
    pub id: ProcessId,
    pub ppid: u32,
    pub comm: String,
    /// Kernel state letter (`R`, `S`, `D`, `Z`, ...).
    pub state: char,
    /// Start time, seconds since the epoch.
    pub start_time_seconds: f64,
    /// utime + stime of the whole process, including exited threads.
    pub cpu_seconds: f64,
    pub rss_bytes: u64,
    pub threads: Vec<ThreadSample>,
    /// `/proc/<pid>/io`; `None` when it could not be read (e.g. permission).
    pub io: Option<IoCounters>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadSample {
    pub tid: u32,
    pub name: String,
    pub state: char,
    /// utime + stime of this thread.
    pub cpu_seconds: f64,
    /// Time it was runnable but waiting for a CPU (`schedstat`'s second
    /// field); `None` where `schedstat` is not read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_seconds: Option<f64>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct IoCounters {
    pub rchar: u64,
    pub wchar: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
}

/// Where a job runs and whose it is: from `/proc/<pid>/cgroup` (container,
/// unit, pod UID, Slurm job and step), the job leader's `status` and the
/// host's user database (user), its environment (Slurm account) and the
/// kubelet (namespace, pod, container).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attribution {
    pub container_id: Option<String>,
    pub systemd_unit: Option<String>,
    pub pod_uid: Option<String>,
    pub slurm_job_id: Option<String>,
    /// The Slurm step (`0`, `batch`, `extern`, `interactive`, ...), from the
    /// cgroup path below the job.
    #[serde(default)]
    pub slurm_step: Option<String>,
    /// The uid in Slurm's v1 cgroup path (`/slurm/uid_<uid>/job_<id>`).
    #[serde(default)]
    pub slurm_uid: Option<u32>,
    /// The job's user as `[identity] user_label` allows: its name, or its
    /// uid as a number (see `identity::user`).
    #[serde(default)]
    pub user: Option<String>,
    /// `SLURM_JOB_ACCOUNT` from the job's environment.
    #[serde(default)]
    pub slurm_account: Option<String>,
    /// The job's Kubernetes pod, from the kubelet's PodResources API.
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub pod: Option<String>,
    #[serde(default)]
    pub container: Option<String>,
    /// Why a job in a pod (or on a GPU the kubelet lists) has no namespace
    /// and pod name.
    #[serde(default)]
    pub pod_unknown: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostSample {
    /// Aggregate CPU times from `/proc/stat`.
    pub cpu: Option<CpuTimes>,
    /// Per-core CPU times from `/proc/stat`, in core order.
    pub cores: Vec<CpuTimes>,
    pub online_cpus: Option<u32>,
    pub pressure: Pressure,
    pub memory: Option<HostMemory>,
}

/// Cumulative CPU time in seconds: busy (everything but idle and iowait),
/// total, and the part of busy the hypervisor took (steal; `None` where the
/// kernel does not report it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuTimes {
    pub busy_seconds: f64,
    pub total_seconds: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steal_seconds: Option<f64>,
}

/// `/proc/pressure/*` avg10 values as ratios (0-1). `None` where the kernel
/// has no PSI or the line is absent (`full` for cpu on older kernels).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Pressure {
    pub cpu_some: Option<f64>,
    pub cpu_full: Option<f64>,
    pub io_some: Option<f64>,
    pub io_full: Option<f64>,
    pub memory_some: Option<f64>,
    pub memory_full: Option<f64>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct HostMemory {
    pub total_bytes: u64,
    pub available_bytes: u64,
    pub swap_total_bytes: u64,
    pub swap_free_bytes: u64,
}

/// Where a read error came from: a closed set, exported as the `source` label
/// of `stallwatch_source_errors_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorSource {
    /// NVML init or a device call failed.
    Nvml,
    /// An NVML call did not return within `gpu.timeout`.
    NvmlTimeout,
    /// A job process file could not be read for a reason other than the
    /// process exiting (most often permission denied on `io` or `fd`).
    ProcJob,
    /// A host file (`/proc/stat`, `/proc/meminfo`, `/proc/pressure/*`) could
    /// not be read or parsed.
    ProcHost,
}

impl ErrorSource {
    pub const ALL: [ErrorSource; 4] = [
        ErrorSource::Nvml,
        ErrorSource::NvmlTimeout,
        ErrorSource::ProcJob,
        ErrorSource::ProcHost,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorSource::Nvml => "nvml",
            ErrorSource::NvmlTimeout => "nvml_timeout",
            ErrorSource::ProcJob => "proc_job",
            ErrorSource::ProcHost => "proc_host",
        }
    }
}

/// Error counts for one sample, indexed by `ErrorSource`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorCounts(pub [u64; 4]);

impl ErrorCounts {
    pub fn add(&mut self, source: ErrorSource) {
        self.0[source as usize] += 1;
    }

    pub fn get(&self, source: ErrorSource) -> u64 {
        self.0[source as usize]
    }

    pub fn merge(&mut self, other: &ErrorCounts) {
        for (a, b) in self.0.iter_mut().zip(other.0) {
            *a += b;
        }
    }
}
