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

/// Shortest time between phase reads, whatever `time_scale` (a read takes
/// 1 s of the stacks thread, which the episodes' bursts need too).
pub const MIN_INTERVAL: f64 = 5.0;

/// The limits of a normal phase (`[diagnosis.phases]`), scaled.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// Time between reads while a stall kind's condition holds.
    pub interval: f64,
    /// Longest a phase may last before the stall kinds are reported.
    pub max_for: [f64; 3],
    /// Largest share of the last hour it may take.
    pub max_share: f64,
    /// The hour, scaled.
    pub hour: f64,
}

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

/// `KindConfig` for a section, by its `times` (see `kinds.rs`).
macro_rules! kind_config {
    ($name:ident, windowed, [$($ratio:ident),*]) => {
        kind_config!(@impl $name, (window), (enter_for), enter_for, [$($ratio),*]);
    };
    ($name:ident, latest, [$($ratio:ident),*]) => {
        kind_config!(@impl $name, (), (enter_for), enter_for, [$($ratio),*]);
    };
    // Counts after its own `idle_for` (`leftover_idle_seconds`), which
    // `fitted_to` shrinks as the enter time.
    ($name:ident, idle_for, [$($ratio:ident),*]) => {
        kind_config!(@impl $name, (), (), idle_for, [$($ratio),*]);
    };
    (@impl $name:ident, ($($window:ident)?), ($($enter:ident)?), $fit_enter:ident,
        [$($ratio:ident),*]) => {
        impl KindConfig for $name {
            fn enabled(&self) -> bool {
                self.enabled
            }
            fn window(&self) -> Option<&Duration> {
                some_or_none!($(&self.$window)?)
            }
            fn enter_for(&self) -> Option<&Duration> {
                some_or_none!($(&self.$enter)?)
            }
            fn exit_for(&self) -> &Duration {
                &self.exit_for
            }
            fn times_to_fit(&mut self) -> (Option<&mut Duration>, &mut Duration, &mut Duration) {
                (some_or_none!($(&mut self.$window)?), &mut self.$fit_enter, &mut self.exit_for)
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

/// `DiagnosisConfig` (the shared settings handed over, then a section per
/// kind), each kind's section with its `KindConfig`, and the way from a kind
/// to its section: all from the table in `kinds.rs`.
macro_rules! diagnosis_config {
    ({ $($shared:tt)* }
        $(
            ($(#[$doc:meta])*) $kind:ident $key:ident ($($detector:ident)::+) ($($hint:ident)::+)
            ($traits:expr)
            $times:ident ($($ratio:ident)*)
            ($($(#[$fmeta:meta])* $field:ident : $ty:ty = $default:expr,)*)
        )*
    ) => {
        config_struct!(
            /// Shared settings and one section per kind.
            DiagnosisConfig {
                $($shared)*
                $($key: $kind = $kind::default(),)*
            }
        );

        $(
            config_struct!(
                $(#[$doc])*
                $kind {
                    enabled: bool = true,
                    $($(#[$fmeta])* $field: $ty = $default,)*
                }
            );
            kind_config!($kind, $times, [$($ratio),*]);
        )*

        impl DiagnosisConfig {
            fn section(&self, kind: Kind) -> &dyn KindConfig {
                match kind {
                    $(Kind::$kind => &self.$key,)*
                }
            }

            fn section_mut(&mut self, kind: Kind) -> &mut dyn KindConfig {
                match kind {
                    $(Kind::$kind => &mut self.$key,)*
                }
            }
        }
    };
}

crate::kinds::kind_table!(diagnosis_config {
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
});

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

    /// The same rules where no stack reader answers short reads (stacks
    /// turned off): no phases, no hang confirmation.
    pub fn without_short_reads(mut self) -> Self {
        self.phases.enabled = false;
        self.hang_confirmation.enabled = false;
        self
    }

    /// The phases' limits, scaled, when phases are enabled.
    pub fn phase_limits(&self) -> Option<Limits> {
        let p = &self.phases;
        p.enabled.then(|| Limits {
            interval: self.scaled(p.interval).max(MIN_INTERVAL),
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
