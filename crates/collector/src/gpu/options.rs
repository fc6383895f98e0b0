//! How the GPUs are read.

use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct GpuOptions {
    /// The NVML library file; `None` loads the system's `libnvidia-ml.so.1`.
    pub library: Option<PathBuf>,
    /// How long a sample waits for NVML before using stale data.
    pub timeout: Duration,
    /// Longest wait between two attempts to initialise NVML.
    pub init_retry_max: Duration,
}
