//! The calls whose newest version nvml-wrapper uses, on drivers that lack it.
//!
//! nvml-wrapper asks for memory with `nvmlDeviceGetMemoryInfo_v2` and for
//! processes with `nvmlDeviceGetComputeRunningProcesses_v3` (and its graphics
//! twin), which came with the R510 driver. An older driver's library has no
//! such symbol (a missing symbol reads as `FailedToLoadSymbol`; a library
//! that has it but does not implement it answers `FUNCTION_NOT_FOUND`), and
//! without them a GPU would show no memory and no process: no job, no
//! diagnosis. So each falls back, in turn, to the versions before it:
//! memory to `nvmlDeviceGetMemoryInfo` (every driver), processes to `_v2`
//! (R450) and then the unversioned call (older drivers: no MIG instance
//! IDs). The first call that the library has answers; its errors are the
//! caller's to count, as for any call.
//!
//! One driver range has the newest process calls but must not be asked them:
//! from 535.43 to 535.86 the `_v3` calls fill records of 32 bytes (a
//! `usedGpuCcProtectedMemory` field added without a new version; 535.98 took
//! it back), where nvml-wrapper's records, like every other driver's, are 24:
//! every process after the first would be read from the wrong bytes (and
//! with many processes the driver writes past the buffer). There the `_v2`
//! calls are made instead ([`Calls::for_driver`]).

use std::os::raw::c_uint;

use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::{NvmlError, nvml_sym, nvml_try, nvml_try_count};
use nvml_wrapper::struct_wrappers::device::{MemoryInfo, ProcessInfo};
use nvml_wrapper::{Device, Nvml};
use nvml_wrapper_sys::bindings::{nvmlDevice_t, nvmlProcessInfo_v1_t, nvmlReturn_t};

use crate::sample::GpuProcessKind;

/// NVML's "not available" for a process's memory.
const NOT_AVAILABLE: u64 = u64::MAX;

/// Whether `result` says the library lacks the call, so an older one may do.
fn lacks<T>(result: &Result<T, NvmlError>) -> bool {
    matches!(
        result,
        Err(NvmlError::FailedToLoadSymbol(_) | NvmlError::FunctionNotFound)
    )
}

/// The device's memory, from the newest call the library has.
pub fn memory_info(nvml: &Nvml, device: &Device) -> Result<MemoryInfo, NvmlError> {
    let newest = device.memory_info();
    if !lacks(&newest) {
        return newest;
    }
    let call = nvml_sym(nvml.lib().nvmlDeviceGetMemoryInfo.as_ref())?;
    // SAFETY: `device` is a live handle of this library; the out-pointer is
    // valid for one `nvmlMemory_t`, which the call fills.
    let m = unsafe {
        let mut m = std::mem::zeroed();
        nvml_try(call(device.handle(), &mut m))?;
        m
    };
    Ok(MemoryInfo {
        free: m.free,
        reserved: 0,
        total: m.total,
        used: m.used,
        version: 1,
    })
}

/// Which process calls a driver can be asked first.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Calls {
    /// The newest the library has.
    #[default]
    Newest,
    /// The `_v2` calls first: the driver's `_v3` records are not nvml-wrapper's.
    SkipV3,
}

impl Calls {
    /// From the driver version (`nvmlSystemGetDriverVersion`, "535.54.03"):
    /// 535 releases before 535.98 skip the `_v3` process calls. An unknown
    /// or unreadable version asks the newest calls.
    pub fn for_driver(version: Option<&str>) -> Calls {
        let mut parts = version.unwrap_or_default().split('.');
        let major = parts.next().and_then(|p| p.parse::<u32>().ok());
        let minor = parts.next().and_then(|p| p.parse::<u32>().ok());
        match (major, minor) {
            (Some(535), Some(minor)) if minor < 98 => Calls::SkipV3,
            _ => Calls::Newest,
        }
    }
}

/// The processes with a `kind` of context on the device, from the newest
/// call the library has: `_v3` (unless `calls` skips it), `_v2`, the
/// unversioned call.
pub fn processes<'d, 'n>(
    nvml: &Nvml,
    device: &'d Device<'n>,
    calls: Calls,
    kind: GpuProcessKind,
) -> Result<Vec<ProcessInfo>, NvmlError> {
    type Call<'d, 'n> = fn(&'d Device<'n>) -> Result<Vec<ProcessInfo>, NvmlError>;
    let lib = nvml.lib();
    let (v3, v2, v1): (Call<'d, 'n>, Call<'d, 'n>, _) = match kind {
        GpuProcessKind::Compute => (
            Device::running_compute_processes,
            Device::running_compute_processes_v2,
            lib.nvmlDeviceGetComputeRunningProcesses.as_ref(),
        ),
        GpuProcessKind::Graphics => (
            Device::running_graphics_processes,
            Device::running_graphics_processes_v2,
            lib.nvmlDeviceGetGraphicsRunningProcesses.as_ref(),
        ),
    };
    if calls == Calls::Newest {
        let newest = v3(device);
        if !lacks(&newest) {
            return newest;
        }
    }
    let older = v2(device);
    if !lacks(&older) {
        return older;
    }
    processes_v1(*nvml_sym(v1)?, device)
}

type ProcessesV1 =
    unsafe extern "C" fn(nvmlDevice_t, *mut c_uint, *mut nvmlProcessInfo_v1_t) -> nvmlReturn_t;

/// The unversioned process call: the count first (a null buffer), then the
/// records, with room for a few processes started in between.
fn processes_v1(call: ProcessesV1, device: &Device) -> Result<Vec<ProcessInfo>, NvmlError> {
    // SAFETY: `device` is a live handle of this library. The first call gets
    // a null buffer with a count of 0, as NVML documents for asking the
    // count; the second a buffer of `count` zeroed records.
    unsafe {
        let mut count: c_uint = 0;
        nvml_try_count(call(device.handle(), &mut count, std::ptr::null_mut()))?;
        if count == 0 {
            return Ok(Vec::new());
        }
        count += 5;
        let mut records: Vec<nvmlProcessInfo_v1_t> = vec![std::mem::zeroed(); count as usize];
        nvml_try(call(device.handle(), &mut count, records.as_mut_ptr()))?;
        records.truncate(count as usize);
        Ok(records
            .into_iter()
            .map(|r| ProcessInfo {
                pid: r.pid,
                used_gpu_memory: match r.usedGpuMemory {
                    NOT_AVAILABLE => UsedGpuMemory::Unavailable,
                    bytes => UsedGpuMemory::Used(bytes),
                },
                gpu_instance_id: None,
                compute_instance_id: None,
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::Calls;

    #[test]
    fn early_535_drivers_skip_the_v3_process_calls() {
        for early in ["535.43.02", "535.54.03", "535.86.05", "535.86.10"] {
            assert_eq!(Calls::for_driver(Some(early)), Calls::SkipV3, "{early}");
        }
        for other in [
            "535.98",
            "535.104.05",
            "535.261.03",
            "530.41.03",
            "550.54.15",
            "470.256.02",
            "440.118.02",
            "",
            "garbage",
            "535",
        ] {
            assert_eq!(Calls::for_driver(Some(other)), Calls::Newest, "{other}");
        }
        assert_eq!(Calls::for_driver(None), Calls::Newest);
    }
}
