//! The daemon's own cost: its CPU time by stage (each thread's CPU clock,
//! charged as each step ends; the collector's threads through the meter the
//! collector is given) and its memory, read as each sample ends.

mod clock;
mod sample_cost;
mod stage;

pub use clock::{COLLECTOR_METER, OwnCost, charge, reading};
pub use sample_cost::SampleCost;
pub use stage::{STAGES, Stage};
