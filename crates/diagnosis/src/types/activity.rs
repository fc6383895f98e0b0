//! Which reading a rule took as a GPU's activity.

use serde::{Deserialize, Serialize};

/// Which reading a rule took as the GPU's activity; named in the evidence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActivitySignal {
    /// NVML `utilization.gpu`: a kernel ran (however few SMs it used).
    UtilizationGpu,
    /// GPM SM activity (Hopper and later; the only one on a MIG instance).
    GpmSmActive,
    /// Power against the GPU's learned busy-power baseline (no GPM).
    PowerBaseline,
}
