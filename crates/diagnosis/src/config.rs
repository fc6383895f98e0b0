//! Every threshold and time of the detectors, with the defaults in one place.
//! `[diagnosis]` holds the shared settings, `[diagnosis.<kind>]` each kind's.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::Kind;

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

macro_rules! config_struct {
    ($(#[$meta:meta])* $name:ident { $($(#[$fmeta:meta])* $field:ident : $ty:ty = $default:expr),* $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
        #[serde(default, deny_unknown_fields)]
        pub struct $name {
            $($(#[$fmeta])* pub $field: $ty,)*
        }

        impl Default for $name {
            fn default() -> Self {
                $name { $($field: $default,)* }
            }
        }
    };
}

config_struct!(
    /// Shared settings and one section per kind.
    DiagnosisConfig {
        /// Grace period after a job's own start time in which no stall kind fires.
        #[serde(with = "humantime_serde")]
        warmup: Duration = secs(120),
        /// Utilization below this makes a sample "idle".
        idle_below: f64 = 0.05,
        /// Utilization at or above this makes a sample "busy".
        busy_above: f64 = 0.95,
        /// Utilization at or above this, while the job shows output at its
        /// usual rhythm, makes a sample count toward the busy-power baseline:
        /// a job that runs healthy at 80% draws its working power there too.
        baseline_above: f64 = 0.7,
        /// How many recent events are kept in memory for the API.
        events_capacity: usize = 1000,
        /// Multiplies every window, enter, exit, warm-up and hang time (1 = as written).
        time_scale: f64 = 1.0,
        /// No-progress kinds: the hang time is this many times the job's usual
        /// interval between output growths, clamped to [hang_min, hang_max].
        hang_multiplier: f64 = 5.0,
        #[serde(with = "humantime_serde")]
        hang_min: Duration = secs(600),
        #[serde(with = "humantime_serde")]
        hang_max: Duration = secs(3600),
        hang_confirmation: HangConfirmation = HangConfirmation::default(),
        phases: JobPhases = JobPhases::default(),
        input_starved: InputStarved = InputStarved::default(),
        input_bound: InputBound = InputBound::default(),
        single_thread_bound: SingleThreadBound = SingleThreadBound::default(),
        cpu_saturated: CpuSaturated = CpuSaturated::default(),
        io_bound: IoBound = IoBound::default(),
        busy_no_progress: BusyNoProgress = BusyNoProgress::default(),
        idle_no_progress: IdleNoProgress = IdleNoProgress::default(),
        host_memory_pressure: HostMemoryPressure = HostMemoryPressure::default(),
        gpu_memory_full: GpuMemoryFull = GpuMemoryFull::default(),
        shared_gpu: SharedGpu = SharedGpu::default(),
        leftover_process: LeftoverProcess = LeftoverProcess::default(),
        throttled: Throttled = Throttled::default(),
        spinning: Spinning = Spinning::default(),
        launch_bound: LaunchBound = LaunchBound::default(),
        gpu_fault: GpuFault = GpuFault::default(),
    }
);

config_struct!(
    /// The no-progress kinds without waiting for the hang time: a job silent
    /// while its GPU idles or spins is read in short bursts, and when every
    /// Python thread stands at the same place in `reads` reads, `interval`
    /// apart, it is stuck.
    HangConfirmation {
        enabled: bool = true,
        /// Silence before the first read.
        #[serde(with = "humantime_serde")]
        after: Duration = secs(20),
        /// Time between reads.
        #[serde(with = "humantime_serde")]
        interval: Duration = secs(20),
        /// Reads that must agree (2 to 16).
        reads: u32 = 3,
    }
);

config_struct!(
    /// The job's own phases (compiling, checkpointing, the DataLoader's
    /// start-up), named from its stacks: while one lasts a normal time, the
    /// stall kinds it explains hold back and its GPU-time is counted.
    JobPhases {
        enabled: bool = true,
        /// Time between the short reads that find a phase, while a stall
        /// kind's condition holds.
        #[serde(with = "humantime_serde")]
        interval: Duration = secs(20),
        /// Longest normal compilation, checkpoint and DataLoader start-up.
        #[serde(with = "humantime_serde")]
        compiling_max: Duration = secs(600),
        #[serde(with = "humantime_serde")]
        checkpointing_max: Duration = secs(300),
        #[serde(with = "humantime_serde")]
        data_loader_startup_max: Duration = secs(300),
        /// Largest normal share of the last hour spent compiling or
        /// checkpointing (more: recompilations, checkpoints too frequent).
        max_share: f64 = 0.1,
    }
);

/// The hang confirmation's times, scaled by `time_scale`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Confirming {
    pub after: f64,
    pub interval: f64,
    pub reads: u32,
}

config_struct!(
    /// GPU almost always idle while the job's pipeline works.
    InputStarved {
        enabled: bool = true,
        #[serde(with = "humantime_serde")]
        window: Duration = secs(60),
        #[serde(with = "humantime_serde")]
        enter_for: Duration = secs(20),
        #[serde(with = "humantime_serde")]
        exit_for: Duration = secs(30),
        max_mean: f64 = 0.10,
        min_idle_share: f64 = 0.8,
        /// The job must be alive: CPU in cores, mean over the window.
        min_job_cpu: f64 = 0.05,
        /// Leave when the utilization mean over `exit_for` rises above this.
        exit_mean: f64 = 0.25,
    }
);

config_struct!(
    /// GPU busy well under half the time while the job works: utilization
    /// steady or swinging, mean low.
    InputBound {
        enabled: bool = true,
        #[serde(with = "humantime_serde")]
        window: Duration = secs(120),
        #[serde(with = "humantime_serde")]
        enter_for: Duration = secs(30),
        #[serde(with = "humantime_serde")]
        exit_for: Duration = secs(60),
        /// Enter when the utilization mean over the window is below this,
        /// steady or swinging: idle samples are not needed (NVML averages
        /// utilization over its own period, so a fast serial pipeline reads a
        /// steady mid value, never 0).
        max_mean: f64 = 0.5,
        /// Optionally also require this share of idle samples (0: not required).
        min_idle_share: f64 = 0.0,
        /// The job must be alive: CPU in cores, mean over the window.
        min_job_cpu: f64 = 0.05,
        /// Leave when the mean over `exit_for` reaches this...
        exit_mean: f64 = 0.6,
        /// ...or the idle share over `exit_for` falls below this (0: never;
        /// meant to go with a `min_idle_share`).
        exit_idle_share: f64 = 0.0,
    }
);

config_struct!(
    /// One thread of the job pinned at a full core while the GPU waits, or
    /// GIL-bound work of one process spread over several threads.
    SingleThreadBound {
        enabled: bool = true,
        #[serde(with = "humantime_serde")]
        window: Duration = secs(60),
        #[serde(with = "humantime_serde")]
        enter_for: Duration = secs(15),
        #[serde(with = "humantime_serde")]
        exit_for: Duration = secs(60),
        /// A sample counts as pinned when the busiest thread used this share
        /// of a core...
        min_thread_cpu: f64 = 0.9,
        /// ...or when two or more busy threads of one process used this many
        /// cores together, counting their waits for a CPU (GIL-bound work
        /// hopping between threads: each handover of the GIL costs a wake-up,
        /// so they fall a little short of the full core one pinned thread
        /// shows, and on a busy host the GIL waits with the thread it was
        /// handed to)...
        min_spread_cpu: f64 = 0.8,
        /// ...while that whole process used less than this many cores: the
        /// GIL lets its Python threads use about one core between them.
        max_process_cpu: f64 = 1.3,
        /// Share of the window's samples that must be pinned.
        min_pinned_share: f64 = 0.8,
        /// Leave when the busiest thread (or one process's busy threads
        /// together) stays below this share of a core.
        exit_thread_cpu: f64 = 0.7,
    }
);

config_struct!(
    /// The host has too little CPU for the input pipeline.
    CpuSaturated {
        enabled: bool = true,
        #[serde(with = "humantime_serde")]
        window: Duration = secs(60),
        #[serde(with = "humantime_serde")]
        enter_for: Duration = secs(15),
        #[serde(with = "humantime_serde")]
        exit_for: Duration = secs(60),
        min_host_cpu: f64 = 0.85,
        /// PSI cpu "some" avg10, as a ratio.
        min_psi_cpu: f64 = 0.20,
        exit_host_cpu: f64 = 0.70,
        exit_psi_cpu: f64 = 0.10,
    }
);

config_struct!(
    /// The input pipeline waits on storage.
    IoBound {
        enabled: bool = true,
        #[serde(with = "humantime_serde")]
        window: Duration = secs(60),
        #[serde(with = "humantime_serde")]
        enter_for: Duration = secs(15),
        #[serde(with = "humantime_serde")]
        exit_for: Duration = secs(60),
        /// PSI io "some" avg10, as a ratio.
        min_psi_io: f64 = 0.20,
        /// Share of samples with a job thread in D (uninterruptible) state.
        min_disk_sleep_share: f64 = 0.3,
        exit_psi_io: f64 = 0.10,
        exit_disk_sleep_share: f64 = 0.1,
    }
);

config_struct!(
    /// GPU busy all the time, no output for the hang time, power low: a hang
    /// (a spinning kernel or a stuck collective).
    BusyNoProgress {
        enabled: bool = true,
        #[serde(with = "humantime_serde")]
        window: Duration = secs(300),
        #[serde(with = "humantime_serde")]
        enter_for: Duration = secs(30),
        #[serde(with = "humantime_serde")]
        exit_for: Duration = secs(5),
        min_busy_share: f64 = 0.95,
        /// Power must be under this share of the GPU's busy baseline (learned
        /// while the job made progress)...
        max_power_of_baseline: f64 = 0.7,
        /// ...or, with no baseline yet, under this share of the power limit.
        max_power_of_limit: f64 = 0.4,
        exit_busy_share: f64 = 0.5,
    }
);

config_struct!(
    /// GPU idle, job idle, no output for the hang time: a deadlock or a wait
    /// that never ends.
    IdleNoProgress {
        enabled: bool = true,
        #[serde(with = "humantime_serde")]
        window: Duration = secs(300),
        #[serde(with = "humantime_serde")]
        enter_for: Duration = secs(30),
        #[serde(with = "humantime_serde")]
        exit_for: Duration = secs(5),
        max_mean: f64 = 0.05,
        /// Job CPU in cores, mean over the window.
        max_job_cpu: f64 = 0.05,
    }
);

config_struct!(
    /// The host is short of memory.
    HostMemoryPressure {
        enabled: bool = true,
        #[serde(with = "humantime_serde")]
        enter_for: Duration = secs(30),
        #[serde(with = "humantime_serde")]
        exit_for: Duration = secs(60),
        /// MemAvailable / MemTotal.
        max_available: f64 = 0.10,
        /// PSI memory "some" avg10, as a ratio.
        min_psi_memory: f64 = 0.10,
        exit_available: f64 = 0.15,
        exit_psi_memory: f64 = 0.05,
    }
);

config_struct!(
    /// GPU memory nearly full (context: TensorFlow preallocates by default).
    GpuMemoryFull {
        enabled: bool = true,
        #[serde(with = "humantime_serde")]
        enter_for: Duration = secs(30),
        #[serde(with = "humantime_serde")]
        exit_for: Duration = secs(30),
        min_used: f64 = 0.98,
        exit_used: f64 = 0.95,
    }
);

config_struct!(
    /// Two or more separate processes hold sizeable memory on one GPU.
    SharedGpu {
        enabled: bool = true,
        #[serde(with = "humantime_serde")]
        enter_for: Duration = secs(30),
        #[serde(with = "humantime_serde")]
        exit_for: Duration = secs(60),
        min_process_memory_bytes: u64 = 256 << 20,
    }
);

config_struct!(
    /// A process holds GPU memory without using the GPU, and its parent is
    /// gone (zombie, orphaned to pid 1, or no longer in /proc).
    LeftoverProcess {
        enabled: bool = true,
        /// How long without SM activity before it counts.
        #[serde(with = "humantime_serde")]
        idle_for: Duration = secs(600),
        #[serde(with = "humantime_serde")]
        exit_for: Duration = secs(5),
    }
);

config_struct!(
    /// Clocks held down by power or thermal limits while the GPU is busy.
    Throttled {
        enabled: bool = true,
        #[serde(with = "humantime_serde")]
        window: Duration = secs(60),
        #[serde(with = "humantime_serde")]
        enter_for: Duration = secs(10),
        #[serde(with = "humantime_serde")]
        exit_for: Duration = secs(60),
        /// Share of busy samples with a power, thermal or hardware slowdown reason.
        min_share: f64 = 0.8,
        /// Samples at or above this utilization count as busy here.
        min_utilization: f64 = 0.5,
    }
);

config_struct!(
    /// The GPU reads busy but does no work: a kernel spins (a collective
    /// waiting for a rank). With GPM: SM activity low and flat, tensor and
    /// DRAM idle, no NVLink or PCIe traffic, power low. Without GPM: busy at
    /// a fraction of the learned busy power. Either way with no output for
    /// the window.
    Spinning {
        enabled: bool = true,
        #[serde(with = "humantime_serde")]
        window: Duration = secs(120),
        #[serde(with = "humantime_serde")]
        enter_for: Duration = secs(30),
        #[serde(with = "humantime_serde")]
        exit_for: Duration = secs(10),
        /// Share of samples with utilization.gpu at or above `busy_above`
        /// (where utilization.gpu is reported).
        min_busy_share: f64 = 0.9,
        /// GPM: SM activity mean at most this...
        max_sm_active: f64 = 0.25,
        /// ...and flat: its standard deviation at most this.
        max_sm_active_stddev: f64 = 0.03,
        /// GPM: tensor and DRAM activity means at most these.
        max_tensor_active: f64 = 0.01,
        max_dram_active: f64 = 0.02,
        /// NVLink and PCIe traffic (each, both directions) at most this, bytes/s.
        max_link_bytes_per_second: f64 = 16_777_216.0,
        /// Power under this share of the GPU's busy baseline (learned while
        /// the job made progress); the only signal without GPM...
        max_power_of_baseline: f64 = 0.5,
        /// ...or, with GPM and no baseline yet, under this share of the limit.
        max_power_of_limit: f64 = 0.3,
        /// Leave when SM activity over `exit_for` rises above this (GPM), or
        /// power back above the baseline share (no GPM), or output resumes.
        exit_sm_active: f64 = 0.4,
    }
);

config_struct!(
    /// utilization.gpu high but SM activity (GPM) low for a long window
    /// while the job makes progress: kernels too small or too few. A
    /// finding, not a stall.
    LaunchBound {
        enabled: bool = true,
        #[serde(with = "humantime_serde")]
        window: Duration = secs(300),
        #[serde(with = "humantime_serde")]
        enter_for: Duration = secs(60),
        #[serde(with = "humantime_serde")]
        exit_for: Duration = secs(60),
        /// utilization.gpu mean over the window at least this (busy by the
        /// coarse reading).
        min_utilization: f64 = 0.8,
        /// SM activity mean over the window under this.
        max_sm_active: f64 = 0.5,
        /// Leave when SM activity over `exit_for` reaches this.
        exit_sm_active: f64 = 0.65,
    }
);

config_struct!(
    /// A fault the job's work does not survive: a fatal Xid, a failed row
    /// remapping, or a recovery action the driver asks for, on a GPU with a
    /// job (or that lost it a moment ago).
    GpuFault {
        enabled: bool = true,
        /// A fatal Xid counts this long after it was reported: as long as
        /// the longest hang time, so a job that hangs after the fault is
        /// still explained by it.
        #[serde(with = "humantime_serde")]
        fault_for: Duration = secs(3600),
        /// A GPU whose job went away this recently still counts as having one
        /// (the fault may have killed it, or the GPU fell off the bus).
        #[serde(with = "humantime_serde")]
        job_gone: Duration = secs(300),
        #[serde(with = "humantime_serde")]
        enter_for: Duration = Duration::ZERO,
        #[serde(with = "humantime_serde")]
        exit_for: Duration = secs(60),
    }
);

/// What every kind's section under `[diagnosis.<kind>]` has: its switch, its
/// times and the values that are ratios. `timing`, `fitted_to` and `validate`
/// read every kind through it, and `sections!` below is the one table from a
/// kind to its section.
pub trait KindConfig {
    fn enabled(&self) -> bool;
    /// How far back the kind looks; `None` for kinds that judge the latest sample.
    fn window(&self) -> Option<&Duration>;
    /// How long the condition must hold before the kind enters; `None` where the
    /// kind has no such time.
    fn enter_for(&self) -> Option<&Duration>;
    fn exit_for(&self) -> &Duration;
    /// The window, enter and exit times `fitted_to` shrinks together.
    fn times_to_fit(&mut self) -> (Option<&mut Duration>, &mut Duration, &mut Duration);
    /// The keys in the section whose values must lie between 0 and 1.
    fn ratios(&self) -> Vec<(&'static str, f64)>;
}

/// `KindConfig` for a section with `enabled`, `enter_for` and `exit_for`, a
/// `window` when it names one, and the ratio keys it lists.
macro_rules! kind_config {
    ($name:ident, $($window:ident,)? [$($ratio:ident),* $(,)?]) => {
        impl KindConfig for $name {
            fn enabled(&self) -> bool {
                self.enabled
            }
            fn window(&self) -> Option<&Duration> {
                some_or_none!($(&self.$window)?)
            }
            fn enter_for(&self) -> Option<&Duration> {
                Some(&self.enter_for)
            }
            fn exit_for(&self) -> &Duration {
                &self.exit_for
            }
            fn times_to_fit(&mut self) -> (Option<&mut Duration>, &mut Duration, &mut Duration) {
                (some_or_none!($(&mut self.$window)?), &mut self.enter_for, &mut self.exit_for)
            }
            fn ratios(&self) -> Vec<(&'static str, f64)> {
                vec![$((stringify!($ratio), self.$ratio)),*]
            }
        }
    };
}

/// `Some(e)`, or `None` without one.
macro_rules! some_or_none {
    () => {
        None
    };
    ($e:expr) => {
        Some($e)
    };
}

kind_config!(InputStarved, window, [max_mean, min_idle_share, exit_mean]);
kind_config!(
    InputBound,
    window,
    [max_mean, min_idle_share, exit_mean, exit_idle_share]
);
kind_config!(SingleThreadBound, window, [min_pinned_share]);
kind_config!(CpuSaturated, window, [min_host_cpu]);
kind_config!(IoBound, window, [min_disk_sleep_share]);
kind_config!(BusyNoProgress, window, [min_busy_share]);
kind_config!(IdleNoProgress, window, []);
kind_config!(HostMemoryPressure, [max_available]);
kind_config!(GpuMemoryFull, [min_used]);
kind_config!(SharedGpu, []);
kind_config!(Throttled, window, [min_share]);
kind_config!(
    Spinning,
    window,
    [
        min_busy_share,
        max_sm_active,
        max_sm_active_stddev,
        max_tensor_active,
        max_dram_active,
        max_power_of_baseline,
        max_power_of_limit,
        exit_sm_active
    ]
);
kind_config!(
    LaunchBound,
    window,
    [min_utilization, max_sm_active, exit_sm_active]
);
kind_config!(GpuFault, []);

/// A leftover process counts after `idle_for` without SM activity, read on its
/// own (`leftover_idle_seconds`); it has no window or enter time, and `fitted_to`
/// shrinks `idle_for` as the enter time.
impl KindConfig for LeftoverProcess {
    fn enabled(&self) -> bool {
        self.enabled
    }
    fn window(&self) -> Option<&Duration> {
        None
    }
    fn enter_for(&self) -> Option<&Duration> {
        None
    }
    fn exit_for(&self) -> &Duration {
        &self.exit_for
    }
    fn times_to_fit(&mut self) -> (Option<&mut Duration>, &mut Duration, &mut Duration) {
        (None, &mut self.idle_for, &mut self.exit_for)
    }
    fn ratios(&self) -> Vec<(&'static str, f64)> {
        Vec::new()
    }
}

/// The table from a kind to its section: a new kind adds its row here (beside
/// its field in `DiagnosisConfig`, its section struct and its `kind_config!`).
macro_rules! sections {
    ($($kind:ident => $field:ident),* $(,)?) => {
        impl DiagnosisConfig {
            fn section(&self, kind: Kind) -> &dyn KindConfig {
                match kind {
                    $(Kind::$kind => &self.$field,)*
                }
            }

            fn section_mut(&mut self, kind: Kind) -> &mut dyn KindConfig {
                match kind {
                    $(Kind::$kind => &mut self.$field,)*
                }
            }
        }
    };
}

sections! {
    InputStarved => input_starved,
    InputBound => input_bound,
    SingleThreadBound => single_thread_bound,
    CpuSaturated => cpu_saturated,
    IoBound => io_bound,
    BusyNoProgress => busy_no_progress,
    IdleNoProgress => idle_no_progress,
    HostMemoryPressure => host_memory_pressure,
    GpuMemoryFull => gpu_memory_full,
    SharedGpu => shared_gpu,
    LeftoverProcess => leftover_process,
    Throttled => throttled,
    Spinning => spinning,
    LaunchBound => launch_bound,
    GpuFault => gpu_fault,
}

/// Longest any time may be once multiplied by `time_scale`. Far beyond any
/// use, and it keeps every derived time a valid `Duration`.
const MAX_YEARS: u64 = 100;

fn too_long(seconds: f64) -> bool {
    seconds.is_nan() || seconds > (MAX_YEARS * 365 * 86_400) as f64
}

/// The timing every kind has, scaled by `time_scale`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timing {
    pub enabled: bool,
    pub window: f64,
    pub enter_for: f64,
    pub exit_for: f64,
}

impl DiagnosisConfig {
    fn scaled(&self, d: Duration) -> f64 {
        d.as_secs_f64() * self.time_scale
    }

    pub fn warmup_seconds(&self) -> f64 {
        self.scaled(self.warmup)
    }

    /// The phases' limits, scaled, when phases are enabled.
    /// The same rules where no stack reader answers short reads (stacks
    /// turned off): no phases, no hang confirmation.
    pub fn without_short_reads(mut self) -> Self {
        self.phases.enabled = false;
        self.hang_confirmation.enabled = false;
        self
    }

    pub fn phase_limits(&self) -> Option<crate::phase::Limits> {
        let p = &self.phases;
        p.enabled.then(|| crate::phase::Limits {
            interval: self.scaled(p.interval).max(crate::phase::MIN_INTERVAL),
            max_for: [
                self.scaled(p.compiling_max),
                self.scaled(p.checkpointing_max),
                self.scaled(p.data_loader_startup_max),
            ],
            max_share: p.max_share,
            hour: self.scaled(Duration::from_secs(3600)),
        })
    }

    /// The hang confirmation, when enabled.
    pub fn confirming(&self) -> Option<Confirming> {
        let c = &self.hang_confirmation;
        c.enabled.then(|| Confirming {
            after: self.scaled(c.after),
            interval: self.scaled(c.interval),
            reads: c.reads,
        })
    }

    pub fn hang_bounds(&self) -> (f64, f64) {
        (self.scaled(self.hang_min), self.scaled(self.hang_max))
    }

    pub fn leftover_idle_seconds(&self) -> f64 {
        self.scaled(self.leftover_process.idle_for)
    }

    /// How long a fatal Xid counts, and how long a GPU that lost its job
    /// still counts as having one (gpu_fault), in seconds.
    pub fn fault_seconds(&self) -> (f64, f64) {
        (
            self.scaled(self.gpu_fault.fault_for),
            self.scaled(self.gpu_fault.job_gone),
        )
    }

    /// Enabled flag, window, enter and exit times of a kind, in seconds.
    pub fn timing(&self, kind: Kind) -> Timing {
        let section = self.section(kind);
        let zero = Duration::ZERO;
        let window = section.window().copied().unwrap_or(zero);
        let enter_for = section.enter_for().copied().unwrap_or(zero);
        Timing {
            enabled: section.enabled(),
            window: self.scaled(window),
            enter_for: self.scaled(enter_for),
            exit_for: self.scaled(*section.exit_for()),
        }
    }

    /// The longest history any detector needs, in seconds.
    pub fn history_seconds(&self) -> f64 {
        Kind::ALL
            .iter()
            .map(|k| self.timing(*k).window)
            .fold(0.0, f64::max)
    }

    /// Checks values; the error names the key.
    pub fn validate(&self) -> Result<(), String> {
        let ratio = |key: &str, v: f64| {
            if (0.0..=1.0).contains(&v) {
                Ok(())
            } else {
                Err(format!(
                    "`diagnosis.{key}` must be between 0 and 1, got {v}"
                ))
            }
        };
        ratio("idle_below", self.idle_below)?;
        ratio("busy_above", self.busy_above)?;
        ratio("baseline_above", self.baseline_above)?;
        ratio("phases.max_share", self.phases.max_share)?;
        if self.phases.interval.is_zero() {
            return Err("`diagnosis.phases.interval` must be more than 0".to_owned());
        }
        if !(self.time_scale > 0.0 && self.time_scale.is_finite()) {
            return Err(format!(
                "`diagnosis.time_scale` must be greater than 0, got {}",
                self.time_scale
            ));
        }
        if self.hang_min > self.hang_max {
            return Err("`diagnosis.hang_min` must not exceed `diagnosis.hang_max`".to_owned());
        }
        if self.hang_multiplier < 1.0 {
            return Err("`diagnosis.hang_multiplier` must be at least 1".to_owned());
        }
        if !(2..=16).contains(&self.hang_confirmation.reads) {
            return Err(format!(
                "`diagnosis.hang_confirmation.reads` must be between 2 and 16, got {}",
                self.hang_confirmation.reads
            ));
        }
        if self.hang_confirmation.interval.is_zero() {
            return Err("`diagnosis.hang_confirmation.interval` must be more than 0".to_owned());
        }
        if self.events_capacity == 0 {
            return Err("`diagnosis.events_capacity` must be at least 1".to_owned());
        }
        for kind in Kind::ALL {
            let t = self.timing(kind);
            if t.window < 0.0 || t.enter_for < 0.0 || t.exit_for < 0.0 {
                return Err(format!("`diagnosis.{kind}` times must not be negative"));
            }
            if [t.window, t.enter_for, t.exit_for]
                .into_iter()
                .any(too_long)
            {
                return Err(format!(
                    "`diagnosis.{kind}` times must not exceed {MAX_YEARS} years (after time_scale)"
                ));
            }
        }
        let (hang_min, hang_max) = self.hang_bounds();
        for (key, seconds) in [
            ("warmup", self.warmup_seconds()),
            ("hang_min", hang_min),
            ("hang_max", hang_max),
            (
                "hang_confirmation.after",
                self.scaled(self.hang_confirmation.after),
            ),
            (
                "hang_confirmation.interval",
                self.scaled(self.hang_confirmation.interval),
            ),
            ("phases.interval", self.scaled(self.phases.interval)),
            (
                "phases.compiling_max",
                self.scaled(self.phases.compiling_max),
            ),
            (
                "phases.checkpointing_max",
                self.scaled(self.phases.checkpointing_max),
            ),
            (
                "phases.data_loader_startup_max",
                self.scaled(self.phases.data_loader_startup_max),
            ),
            ("leftover_process.idle_for", self.leftover_idle_seconds()),
            ("gpu_fault.fault_for", self.fault_seconds().0),
            ("gpu_fault.job_gone", self.fault_seconds().1),
        ] {
            if too_long(seconds) {
                return Err(format!(
                    "`diagnosis.{key}` must not exceed {MAX_YEARS} years (after time_scale)"
                ));
            }
        }
        for kind in Kind::ALL {
            for (key, value) in self.section(kind).ratios() {
                ratio(&format!("{kind}.{key}"), value)?;
            }
        }
        Ok(())
    }
}

impl DiagnosisConfig {
    /// The same rules with windows, enter, exit and leftover idle times
    /// shrunk so every enabled kind can fire within `seconds` of watching
    /// (for `stallwatch check`). Warm-up and hang times are left as they
    /// are: a job's age and its silence are known from its first sample.
    pub fn fitted_to(&self, seconds: f64) -> DiagnosisConfig {
        let budget = seconds * 0.8;
        let mut c = self.clone();
        c.time_scale = 1.0;
        c.warmup = self.warmup.mul_f64(self.time_scale);
        c.hang_min = self.hang_min.mul_f64(self.time_scale);
        c.hang_max = self.hang_max.mul_f64(self.time_scale);
        let confirmation = &mut c.hang_confirmation;
        confirmation.after = confirmation.after.mul_f64(self.time_scale);
        confirmation.interval = confirmation.interval.mul_f64(self.time_scale);
        let phases = &mut c.phases;
        for d in [
            &mut phases.interval,
            &mut phases.compiling_max,
            &mut phases.checkpointing_max,
            &mut phases.data_loader_startup_max,
        ] {
            *d = d.mul_f64(self.time_scale);
        }
        // Each kind's window, enter and exit times shrink together, just
        // enough for window + enter time to fit the budget.
        let fit = |window: &mut Duration, enter: &mut Duration, exit: &mut Duration| {
            let scale = self.time_scale;
            let need = (window.as_secs_f64() + enter.as_secs_f64()) * scale;
            let factor = scale * if need > budget { budget / need } else { 1.0 };
            for d in [window, enter, exit] {
                *d = d.mul_f64(factor);
            }
        };
        for kind in Kind::ALL {
            let mut none = Duration::ZERO;
            let (window, enter, exit) = c.section_mut(kind).times_to_fit();
            fit(window.unwrap_or(&mut none), enter, exit);
        }
        c
    }
}
