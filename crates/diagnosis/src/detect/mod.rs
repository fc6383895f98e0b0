//! One small detector per kind. Each looks at the GPU's history and the
//! current frame and says whether its enter and exit conditions hold, with
//! the evidence it used. Timing (enter/exit times) is the engine's job.

mod activity;
mod ctx;
mod fault;
mod input;
mod memory;
mod processes;
mod progress;
mod refine;
mod throttle;

pub use ctx::{Ctx, Finding, UtilizationCache};
pub use refine::spread_load;
pub use throttle::THROTTLE_MASK;

use crate::Kind;
use crate::types::evidence::Evidence;

/// `detect` and `hint`: each kind's detector and hint, from the table in
/// `kinds.rs`.
macro_rules! dispatch {
    ({}
        $(
            ($(#[$doc:meta])*) $kind:ident $key:ident ($($detector:ident)::+) ($($hint:ident)::+)
            ($traits:expr)
            $times:ident ($($ratio:ident)*) ($($settings:tt)*)
        )*
    ) => {
        pub fn detect(kind: Kind, ctx: &Ctx) -> Finding {
            match kind {
                $(Kind::$kind => $($detector)::+(ctx),)*
            }
        }

        /// The hint for a finding: its kind's, in the context of what else
        /// its evidence holds (`hint::with_context`).
        pub fn hint(kind: Kind, evidence: &Evidence) -> String {
            let base = match kind {
                $(Kind::$kind => $($hint)::+(evidence),)*
            };
            crate::hint::with_context(kind, evidence, base)
        }
    };
}

crate::kinds::kind_table!(dispatch);
