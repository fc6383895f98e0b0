//! The table of kinds: one entry per kind, read by everything that lists
//! the kinds. `Kind` and its traits (`kind.rs`), the kind's section of the
//! configuration with its defaults, its timing and the checks of its values
//! (`config.rs`), and the dispatch to its detector and its hint
//! (`detect/mod.rs`) are made from it, so adding a kind is its detector and
//! its hint (two functions in a file of `detect/`), its entry here, its
//! section in docs/diagnosis.md and its lines in config.example.toml.
//!
//! An entry: the kind's doc (also its section's), its name and its
//! `[diagnosis.<key>]`, then
//! - `detector`: the function in `detect/` that judges it, and `hint`: the
//!   one beside it that says what to do about it;
//! - `traits`: what else it is (`kind.rs`): a stall (makes the verdict
//!   `stalled`), a refinement of `input_starved` / `input_bound`, worth the
//!   job's stacks (the busy work, or `ALL_THREADS`: where each one waits),
//!   explained by the job's phases, held back by the warm-up;
//! - `times`: `windowed` (a `window`, `enter_for`, `exit_for`), `latest` (the
//!   latest sample: `enter_for`, `exit_for`) or `idle_for` (its own idle time
//!   instead of an enter time, and `exit_for`);
//! - `ratios`: the settings that must lie between 0 and 1;
//! - `settings`: the section's keys beside `enabled`, with their defaults.
//!
//! The order is the order of `Kind::ALL`: of the metrics, the status, the
//! docs.

/// Hands the table to `$generator`, after the tokens in braces (what the
/// generator needs beside it), each entry as
/// `(docs) Kind key (detector) (hint) (traits) times (ratios) (settings)`.
macro_rules! kind_table {
    ($generator:ident $({ $($pass:tt)* })?) => {
        $crate::kinds::kind_table!(@rows $generator { $($($pass)*)? }
            /// GPU almost always idle while the job's pipeline works.
            InputStarved input_starved {
                detector: input::starved,
                hint: input::starved_hint,
                traits: STALL | STACKS | PHASE | WARMUP,
                times: windowed,
                ratios: [max_mean, min_idle_share, exit_mean],
                settings: {
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
                },
            },
            /// GPU busy well under half the time while the job works: utilization
            /// steady or swinging, mean low.
            InputBound input_bound {
                detector: input::bound,
                hint: input::bound_hint,
                traits: STALL | STACKS | PHASE | WARMUP,
                times: windowed,
                ratios: [max_mean, min_idle_share, exit_mean, exit_idle_share],
                settings: {
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
                },
            },
            /// One thread of the job pinned at a full core while the GPU waits, or
            /// GIL-bound work of one process spread over several threads.
            SingleThreadBound single_thread_bound {
                detector: refine::single_thread,
                hint: refine::single_thread_hint,
                traits: STALL | REFINEMENT | STACKS | PHASE | WARMUP,
                times: windowed,
                ratios: [min_pinned_share],
                settings: {
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
                },
            },
            /// The host has too little CPU for the input pipeline.
            CpuSaturated cpu_saturated {
                detector: refine::cpu_saturated,
                hint: refine::cpu_saturated_hint,
                traits: STALL | REFINEMENT | PHASE | WARMUP,
                times: windowed,
                ratios: [min_host_cpu],
                settings: {
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
                },
            },
            /// The input pipeline waits on storage.
            IoBound io_bound {
                detector: refine::io_bound,
                hint: refine::io_bound_hint,
                traits: STALL | REFINEMENT | PHASE | WARMUP,
                times: windowed,
                ratios: [min_disk_sleep_share],
                settings: {
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
                },
            },
            /// GPU busy all the time, no output for the hang time, power low: a hang
            /// (a spinning kernel or a stuck collective).
            BusyNoProgress busy_no_progress {
                detector: progress::busy,
                hint: progress::busy_hint,
                traits: STALL | STACKS | ALL_THREADS | PHASE | WARMUP,
                times: windowed,
                ratios: [min_busy_share],
                settings: {
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
                },
            },
            /// GPU idle, job idle, no output for the hang time: a deadlock or a wait
            /// that never ends.
            IdleNoProgress idle_no_progress {
                detector: progress::idle,
                hint: progress::idle_hint,
                traits: STALL | STACKS | ALL_THREADS | PHASE | WARMUP,
                times: windowed,
                ratios: [],
                settings: {
                    #[serde(with = "humantime_serde")]
                    window: Duration = secs(300),
                    #[serde(with = "humantime_serde")]
                    enter_for: Duration = secs(30),
                    #[serde(with = "humantime_serde")]
                    exit_for: Duration = secs(5),
                    max_mean: f64 = 0.05,
                    /// Job CPU in cores, mean over the window.
                    max_job_cpu: f64 = 0.05,
                },
            },
            /// The host is short of memory.
            HostMemoryPressure host_memory_pressure {
                detector: memory::host_pressure,
                hint: memory::host_pressure_hint,
                traits: WARMUP,
                times: latest,
                ratios: [max_available],
                settings: {
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
                },
            },
            /// GPU memory nearly full (context: TensorFlow preallocates by default).
            GpuMemoryFull gpu_memory_full {
                detector: memory::gpu_full,
                hint: memory::gpu_full_hint,
                traits: 0,
                times: latest,
                ratios: [min_used],
                settings: {
                    #[serde(with = "humantime_serde")]
                    enter_for: Duration = secs(30),
                    #[serde(with = "humantime_serde")]
                    exit_for: Duration = secs(30),
                    min_used: f64 = 0.98,
                    exit_used: f64 = 0.95,
                },
            },
            /// Two or more separate processes hold sizeable memory on one GPU.
            SharedGpu shared_gpu {
                detector: processes::shared,
                hint: processes::shared_hint,
                traits: WARMUP,
                times: latest,
                ratios: [],
                settings: {
                    #[serde(with = "humantime_serde")]
                    enter_for: Duration = secs(30),
                    #[serde(with = "humantime_serde")]
                    exit_for: Duration = secs(60),
                    min_process_memory_bytes: u64 = 256 << 20,
                },
            },
            /// A process holds GPU memory without using the GPU, and its parent is
            /// gone (zombie, orphaned to pid 1, or no longer in /proc).
            LeftoverProcess leftover_process {
                detector: processes::leftover,
                hint: processes::leftover_hint,
                traits: 0,
                times: idle_for,
                ratios: [],
                settings: {
                    /// How long without SM activity before it counts.
                    #[serde(with = "humantime_serde")]
                    idle_for: Duration = secs(600),
                    #[serde(with = "humantime_serde")]
                    exit_for: Duration = secs(5),
                },
            },
            /// Clocks held down by power or thermal limits while the GPU is busy.
            Throttled throttled {
                detector: throttle::throttled,
                hint: throttle::throttled_hint,
                traits: 0,
                times: windowed,
                ratios: [min_share],
                settings: {
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
                },
            },
            /// The GPU reads busy but does no work: a kernel spins (a collective
            /// waiting for a rank). With GPM: SM activity low and flat, tensor and
            /// DRAM idle, no NVLink or PCIe traffic, power low. Without GPM: busy at
            /// a fraction of the learned busy power. Either way with no output for
            /// the window.
            Spinning spinning {
                detector: activity::spinning,
                hint: activity::spinning_hint,
                traits: STALL | STACKS | ALL_THREADS | WARMUP,
                times: windowed,
                ratios: [min_busy_share, max_sm_active, max_sm_active_stddev, max_tensor_active, max_dram_active, max_power_of_baseline, max_power_of_limit, exit_sm_active],
                settings: {
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
                },
            },
            /// utilization.gpu high but SM activity (GPM) low for a long window
            /// while the job makes progress: kernels too small or too few. A
            /// finding, not a stall.
            LaunchBound launch_bound {
                detector: activity::launch_bound,
                hint: activity::launch_bound_hint,
                traits: WARMUP,
                times: windowed,
                ratios: [min_utilization, max_sm_active, exit_sm_active],
                settings: {
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
                },
            },
            /// A fault the job's work does not survive: a fatal Xid, a failed row
            /// remapping, or a recovery action the driver asks for, on a GPU with a
            /// job (or that lost it a moment ago).
            GpuFault gpu_fault {
                detector: fault::gpu_fault,
                hint: fault::gpu_fault_hint,
                traits: STALL,
                times: latest,
                ratios: [],
                settings: {
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
                },
            },
        );
    };
    (@rows $generator:ident { $($pass:tt)* }
        $(
            $(#[$doc:meta])*
            $kind:ident $key:ident {
                detector: $($detector:ident)::+,
                hint: $($hint:ident)::+,
                traits: $traits:expr,
                times: $times:ident,
                ratios: [$($ratio:ident),* $(,)?],
                settings: {
                    $($(#[$fmeta:meta])* $field:ident : $ty:ty = $default:expr),* $(,)?
                } $(,)?
            }
        ),* $(,)?
    ) => {
        $generator! {
            { $($pass)* }
            $(
                ($(#[$doc])*) $kind $key ($($detector)::+) ($($hint)::+) ($traits) $times ($($ratio)*)
                ($($(#[$fmeta])* $field : $ty = $default,)*)
            )*
        }
    };
}

pub(crate) use kind_table;
