//! The closed set of things stallwatch can find on a GPU. The snake_case
//! names are part of the metrics contract (`kind` label).

use serde::{Deserialize, Serialize};

// What else a kind is (the `traits` of its entry in `kinds.rs`).
/// Makes the GPU's verdict `stalled`.
const STALL: u8 = 1;
/// Says why a GPU is starved or input-bound; active only with one of those.
const REFINEMENT: u8 = 1 << 1;
/// Worth the job's Python stacks.
const STACKS: u8 = 1 << 2;
/// Its stacks show every thread (where each one waits), not the busy work.
const ALL_THREADS: u8 = 1 << 3;
/// Explained by the job's own phase while that lasts a normal time.
const PHASE: u8 = 1 << 4;
/// Held back by the warm-up grace period.
const WARMUP: u8 = 1 << 5;

/// `Kind`, its list and its traits, from the table.
macro_rules! kind_enum {
    ({}
        $(
            ($(#[$doc:meta])*) $kind:ident $key:ident ($($detector:ident)::+) ($($hint:ident)::+)
            ($traits:expr)
            $times:ident ($($ratio:ident)*) ($($settings:tt)*)
        )*
    ) => {
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
        )]
        #[serde(rename_all = "snake_case")]
        pub enum Kind {
            $($(#[$doc])* $kind,)*
        }

        impl Kind {
            pub const ALL: [Kind; [$(Kind::$kind),*].len()] = [$(Kind::$kind),*];

            pub fn as_str(self) -> &'static str {
                match self {
                    $(Kind::$kind => stringify!($key),)*
                }
            }

            fn traits(self) -> u8 {
                match self {
                    $(Kind::$kind => $traits,)*
                }
            }
        }
    };
}

crate::kinds::kind_table!(kind_enum);

impl Kind {
    /// Kinds that make a GPU's verdict `stalled`: the GPU is idle (or busy
    /// without progress) because of the job, or its job's work was lost to a
    /// GPU fault. The others are findings that
    /// explain or threaten, shown alongside the verdict.
    pub fn is_stall(self) -> bool {
        self.traits() & STALL != 0
    }

    /// Refinements say why a GPU is starved or input-bound, and are active
    /// only together with one of those.
    pub fn is_refinement(self) -> bool {
        self.traits() & REFINEMENT != 0
    }

    /// Kinds whose episodes are worth the job's Python stacks: where the
    /// job's own code keeps the GPU waiting.
    pub fn wants_stacks(self) -> bool {
        self.traits() & STACKS != 0
    }

    /// Stall kinds a job's own phase (compiling, checkpointing, the
    /// DataLoader's start-up) explains while it lasts a normal time.
    pub fn yields_to_phase(self) -> bool {
        self.traits() & PHASE != 0
    }

    /// Whether its stacks should show every thread (where each one waits)
    /// rather than the busy work.
    pub fn stacks_focus(self) -> super::stack_report::Focus {
        if self.traits() & ALL_THREADS != 0 {
            super::stack_report::Focus::AllThreads
        } else {
            super::stack_report::Focus::Busy
        }
    }

    /// Whether the warm-up grace period holds this kind back.
    pub fn waits_for_warmup(self) -> bool {
        self.traits() & WARMUP != 0
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
