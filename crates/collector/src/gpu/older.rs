//! The calls whose newest version nvml-wrapper uses, on drivers that lack it,
//! and the process lists the daemon reads: compute, graphics and MPS clients.
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

/// The processes with a `kind` of context on the device (MPS clients: the
/// MPS calls), from the newest call the library has: `_v3` (unless `calls`
/// skips it), `_v2`, the unversioned call.
pub fn processes(
    nvml: &Nvml,
    device: &Device,
    calls: Calls,
    kind: GpuProcessKind,
) -> Result<Vec<ProcessInfo>, NvmlError> {
    let lib = nvml.lib();
    let call = |version| match (kind, version) {
        (GpuProcessKind::Compute, 3) => device.running_compute_processes(),
        (GpuProcessKind::Compute, 2) => device.running_compute_processes_v2(),
        (GpuProcessKind::Compute, _) => nvml_sym(lib.nvmlDeviceGetComputeRunningProcesses.as_ref())
            .and_then(|c| raw(*c, device, from_v1)),
        (GpuProcessKind::Graphics, 3) => device.running_graphics_processes(),
        (GpuProcessKind::Graphics, 2) => device.running_graphics_processes_v2(),
        (GpuProcessKind::Graphics, _) => {
            nvml_sym(lib.nvmlDeviceGetGraphicsRunningProcesses.as_ref())
                .and_then(|c| raw(*c, device, from_v1))
        }
        (GpuProcessKind::Mps, 3) => device.mps_running_compute_processes(),
        (GpuProcessKind::Mps, 2) => {
            nvml_sym(lib.nvmlDeviceGetMPSComputeRunningProcesses_v2.as_ref())
                .and_then(|c| raw(*c, device, ProcessInfo::from))
        }
        (GpuProcessKind::Mps, _) => nvml_sym(lib.nvmlDeviceGetMPSComputeRunningProcesses.as_ref())
            .and_then(|c| raw(*c, device, from_v1)),
    };
    let mut answer = Err(NvmlError::FunctionNotFound);
    for version in [3, 2, 1] {
        if version == 3 && calls == Calls::SkipV3 {
            continue;
        }
        answer = call(version);
        if !lacks(&answer) {
            break;
        }
    }
    match answer {
        // The MPS list adds to the others, and GPUs before Volta, virtual
        // GPUs and containers can answer it with assorted errors: one it
        // cannot give is not a failed read, counted every sample. A lost GPU
        // stays lost.
        Err(e) if kind == GpuProcessKind::Mps && !matches!(e, NvmlError::GpuLost) => {
            Err(NvmlError::NotSupported)
        }
        other => other,
    }
}

/// A process call's records, read through `call` with NVML's count-then-fill
/// protocol: the count first (a null buffer), then the records, with room
/// for a few processes started in between.
fn raw<R: Copy>(
    call: unsafe extern "C" fn(nvmlDevice_t, *mut c_uint, *mut R) -> nvmlReturn_t,
    device: &Device,
    info: impl Fn(R) -> ProcessInfo,
) -> Result<Vec<ProcessInfo>, NvmlError> {
    // SAFETY: `device` is a live handle of this library and `call` one of
    // its process calls, whose records are `R`. The first call gets a null
    // buffer with a count of 0, as NVML documents for asking the count; the
    // second a buffer of `count` zeroed records.
    unsafe {
        let mut count: c_uint = 0;
        nvml_try_count(call(device.handle(), &mut count, std::ptr::null_mut()))?;
        if count == 0 {
            return Ok(Vec::new());
        }
        count += 5;
        let mut records: Vec<R> = vec![std::mem::zeroed(); count as usize];
        nvml_try(call(device.handle(), &mut count, records.as_mut_ptr()))?;
        records.truncate(count as usize);
        Ok(records.into_iter().map(info).collect())
    }
}

/// An unversioned record: no MIG instance IDs.
fn from_v1(record: nvmlProcessInfo_v1_t) -> ProcessInfo {
    ProcessInfo {
        pid: record.pid,
        used_gpu_memory: match record.usedGpuMemory {
            NOT_AVAILABLE => UsedGpuMemory::Unavailable,
            bytes => UsedGpuMemory::Used(bytes),
        },
        gpu_instance_id: None,
        compute_instance_id: None,
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
