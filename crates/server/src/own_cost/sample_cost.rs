//! What one sample cost the daemon, carried beside the snapshot it made.

use super::clock::OwnCost;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct SampleCost {
    /// Wall time of the whole sample, start to end: reading GPUs, jobs and
    /// host, deriving rates, the diagnosis and the stacks' requests (the
    /// collector's own figure, `Sample::duration_seconds`, covers the reads
    /// only).
    pub duration_seconds: f64,
    /// The daemon's own CPU by stage and memory, read as the sample ended.
    pub own: OwnCost,
}
