//! Processes on a device: running compute/graphics processes and per-process utilization.

use std::ffi::c_uint;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::abi::{ProcessInfoV1, ProcessInfoV2, ProcessUtilizationSample, fill};
use crate::call::{Handle, device_call};
use crate::codes::{NOT_FOUND, Ret};
use crate::scenario::{Feature, Gpu, Process, ProcessType};

/// `NVML_VALUE_NOT_AVAILABLE` as an unsigned long long.
const NOT_AVAILABLE: u64 = u64::MAX;
/// Instance IDs of a process outside MIG.
const NO_INSTANCE: c_uint = u32::MAX;

fn processes(g: &Gpu, kind: ProcessType) -> impl Iterator<Item = &Process> {
    g.processes.iter().filter(move |p| p.kind == kind)
}

fn memory(p: &Process) -> u64 {
    p.used_memory_bytes.unwrap_or(NOT_AVAILABLE)
}

/// # Safety
/// As for [`fill`].
pub(crate) unsafe fn running_v2(
    call: &str,
    device: Handle,
    kind: ProcessType,
    count: *mut c_uint,
    out: *mut ProcessInfoV2,
) -> Ret {
    if crate::mig::is_mig(device) {
        return unsafe { crate::mig::running_v2(call, device, kind, count, out) };
    }
    device_call(call, device, Some(Feature::Processes), |_, _, g| {
        let records = processes(g, kind)
            .map(|p| ProcessInfoV2 {
                pid: p.pid,
                used_gpu_memory: memory(p),
                gpu_instance_id: NO_INSTANCE,
                compute_instance_id: NO_INSTANCE,
            })
            .collect();
        unsafe { fill(count, out, records) }
    })
}

/// # Safety
/// As for [`fill`].
pub(crate) unsafe fn running_v1(
    call: &str,
    device: Handle,
    kind: ProcessType,
    count: *mut c_uint,
    out: *mut ProcessInfoV1,
) -> Ret {
    if crate::mig::is_mig(device) {
        return unsafe { crate::mig::running_v1(call, device, kind, count, out) };
    }
    device_call(call, device, Some(Feature::Processes), |_, _, g| {
        let records = processes(g, kind)
            .map(|p| ProcessInfoV1 {
                pid: p.pid,
                used_gpu_memory: memory(p),
            })
            .collect();
        unsafe { fill(count, out, records) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    device: Handle,
    count: *mut c_uint,
    infos: *mut ProcessInfoV2,
) -> Ret {
    unsafe {
        running_v2(
            "nvmlDeviceGetComputeRunningProcesses_v3",
            device,
            ProcessType::Compute,
            count,
            infos,
        )
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v2(
    device: Handle,
    count: *mut c_uint,
    infos: *mut ProcessInfoV2,
) -> Ret {
    unsafe {
        running_v2(
            "nvmlDeviceGetComputeRunningProcesses_v2",
            device,
            ProcessType::Compute,
            count,
            infos,
        )
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses(
    device: Handle,
    count: *mut c_uint,
    infos: *mut ProcessInfoV1,
) -> Ret {
    unsafe {
        running_v1(
            "nvmlDeviceGetComputeRunningProcesses",
            device,
            ProcessType::Compute,
            count,
            infos,
        )
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGraphicsRunningProcesses_v3(
    device: Handle,
    count: *mut c_uint,
    infos: *mut ProcessInfoV2,
) -> Ret {
    unsafe {
        running_v2(
            "nvmlDeviceGetGraphicsRunningProcesses_v3",
            device,
            ProcessType::Graphics,
            count,
            infos,
        )
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGraphicsRunningProcesses_v2(
    device: Handle,
    count: *mut c_uint,
    infos: *mut ProcessInfoV2,
) -> Ret {
    unsafe {
        running_v2(
            "nvmlDeviceGetGraphicsRunningProcesses_v2",
            device,
            ProcessType::Graphics,
            count,
            infos,
        )
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGraphicsRunningProcesses(
    device: Handle,
    count: *mut c_uint,
    infos: *mut ProcessInfoV1,
) -> Ret {
    unsafe {
        running_v1(
            "nvmlDeviceGetGraphicsRunningProcesses",
            device,
            ProcessType::Graphics,
            count,
            infos,
        )
    }
}

/// Samples, stamped now (µs since the epoch), for processes with non-zero SM or
/// memory use, when `last_seen` is older than now; none answers `NOT_FOUND`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetProcessUtilization(
    device: Handle,
    utilization: *mut ProcessUtilizationSample,
    count: *mut c_uint,
    last_seen: u64,
) -> Ret {
    if crate::mig::is_mig(device) {
        return crate::mig::not_supported("nvmlDeviceGetProcessUtilization", device);
    }
    let feature = Some(Feature::ProcessUtilization);
    device_call(
        "nvmlDeviceGetProcessUtilization",
        device,
        feature,
        |_, _, g| {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_micros() as u64);
            let records: Vec<_> = g
                .processes
                .iter()
                .filter(|p| (p.sm_util > 0 || p.mem_util > 0) && last_seen < now)
                .map(|p| ProcessUtilizationSample {
                    pid: p.pid,
                    time_stamp: now,
                    sm_util: p.sm_util,
                    mem_util: p.mem_util,
                    enc_util: 0,
                    dec_util: 0,
                })
                .collect();
            if records.is_empty() {
                if !count.is_null() {
                    unsafe { count.write_unaligned(0) };
                }
                return Err(NOT_FOUND);
            }
            unsafe { fill(count, utilization, records) }
        },
    )
}
