//! The outcome of NVML calls on one device, shared by the readers of its
//! parts (`device`, `health`).

use nvml_wrapper::error::NvmlError;

use crate::sample::{ErrorCounts, ErrorSource};

/// Collects the outcome of NVML calls on one device: a value, "not supported"
/// (left out, no error), "GPU lost", or a counted error.
pub(super) struct Reader<'e> {
    pub(super) errors: &'e mut ErrorCounts,
    pub(super) lost: bool,
}

impl Reader<'_> {
    pub(super) fn take<T>(&mut self, result: Result<T, NvmlError>) -> Option<T> {
        match result {
            Ok(v) => Some(v),
            Err(NvmlError::NotSupported | NvmlError::FunctionNotFound) => None,
            Err(NvmlError::FailedToLoadSymbol(_)) => None,
            Err(NvmlError::GpuLost) => {
                self.lost = true;
                None
            }
            Err(_) => {
                self.errors.add(ErrorSource::Nvml);
                None
            }
        }
    }
}
