//! One GPU's sample as the engine's per-GPU stages (`gpu.rs`, `fault.rs`)
//! see it.

use crate::config::DiagnosisConfig;
use crate::tracking::Progress;
use crate::types::frame::{Frame, GpuFrame};

/// What every per-GPU stage reads of one sample: the configuration, the
/// jobs' progress, the frame and the GPU's part of it, the frame's time and
/// the seconds since the GPU's previous sample. The GPU's state, which the
/// stages change, is handed beside it.
pub(super) struct Step<'a> {
    pub(super) config: &'a DiagnosisConfig,
    pub(super) progress: &'a Progress,
    pub(super) frame: &'a Frame,
    pub(super) gpu: &'a GpuFrame,
    /// The frame's time, seconds since the epoch.
    pub(super) t: f64,
    /// Seconds since the GPU's previous sample.
    pub(super) dt: f64,
}
