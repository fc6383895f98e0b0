//! MIG: mode, instance handles, and what a MIG device handle answers (its
//! UUID, name, memory, processes, instance IDs, attributes), from each GPU's
//! `mig` in the scenario. A GPU without `mig` answers `NOT_SUPPORTED` to the
//! MIG queries.

use std::ffi::{c_char, c_uint};

use crate::abi::{
    DeviceAttributes, MEMORY_V2_VERSION, MemoryV1, MemoryV2, ProcessInfoV1, ProcessInfoV2, fill,
    put, put_str,
};
use crate::call::{Handle, device_call, handle_for, mig_call, mig_handle_for, mig_of};
use crate::codes::{ARGUMENT_VERSION_MISMATCH, INVALID_ARGUMENT, NOT_FOUND, NOT_SUPPORTED, Ret};
use crate::scenario::{MAX_MIG, MigInstance, Process, ProcessType};

/// `NVML_VALUE_NOT_AVAILABLE` as an unsigned long long.
const NOT_AVAILABLE: u64 = u64::MAX;

/// Whether `handle` is a MIG device handle of this library.
pub fn is_mig(handle: Handle) -> bool {
    mig_of(handle).is_some()
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMigMode(
    device: Handle,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> Ret {
    device_call("nvmlDeviceGetMigMode", device, None, |_, _, g| {
        g.mig.as_ref().ok_or(NOT_SUPPORTED)?;
        unsafe { put(current, 1) }?;
        unsafe { put(pending, 1) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceIsMigDeviceHandle(device: Handle, is_mig: *mut c_uint) -> Ret {
    if mig_of(device).is_some() {
        return mig_call("nvmlDeviceIsMigDeviceHandle", device, |_, _, _, _| unsafe {
            put(is_mig, 1)
        });
    }
    device_call(
        "nvmlDeviceIsMigDeviceHandle",
        device,
        None,
        |_, _, _| unsafe { put(is_mig, 0) },
    )
}

/// The most instances the GPU can hold (7), while MIG is on.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMaxMigDeviceCount(device: Handle, count: *mut c_uint) -> Ret {
    device_call("nvmlDeviceGetMaxMigDeviceCount", device, None, |_, _, g| {
        g.mig.as_ref().ok_or(NOT_SUPPORTED)?;
        unsafe { put(count, MAX_MIG as c_uint) }
    })
}

/// Instance `index` in scenario order; `NOT_FOUND` for an empty slot.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMigDeviceHandleByIndex(
    device: Handle,
    index: c_uint,
    mig: *mut Handle,
) -> Ret {
    device_call(
        "nvmlDeviceGetMigDeviceHandleByIndex",
        device,
        None,
        |_, i, g| {
            let instances = g.mig.as_ref().ok_or(NOT_SUPPORTED)?;
            let n = index as usize;
            if n >= MAX_MIG {
                return Err(INVALID_ARGUMENT);
            }
            if n >= instances.len() {
                return Err(NOT_FOUND);
            }
            unsafe { put(mig, mig_handle_for(i, n)) }
        },
    )
}

/// The parent of a MIG device handle; any other handle is invalid, as on a
/// real driver.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetDeviceHandleFromMigDeviceHandle(
    mig: Handle,
    device: *mut Handle,
) -> Ret {
    if mig_of(mig).is_none() {
        return device_call(
            "nvmlDeviceGetDeviceHandleFromMigDeviceHandle",
            mig,
            None,
            |_, _, _| Err(INVALID_ARGUMENT),
        );
    }
    mig_call(
        "nvmlDeviceGetDeviceHandleFromMigDeviceHandle",
        mig,
        |_, i, _, _| unsafe { put(device, handle_for(i)) },
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceId(device: Handle, id: *mut c_uint) -> Ret {
    if mig_of(device).is_none() {
        return device_call("nvmlDeviceGetGpuInstanceId", device, None, |_, _, _| {
            Err(NOT_SUPPORTED)
        });
    }
    mig_call("nvmlDeviceGetGpuInstanceId", device, |_, _, _, m| unsafe {
        put(id, m.gpu_instance_id)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeInstanceId(device: Handle, id: *mut c_uint) -> Ret {
    if mig_of(device).is_none() {
        return device_call("nvmlDeviceGetComputeInstanceId", device, None, |_, _, _| {
            Err(NOT_SUPPORTED)
        });
    }
    mig_call(
        "nvmlDeviceGetComputeInstanceId",
        device,
        |_, _, _, m| unsafe { put(id, m.compute_instance_id) },
    )
}

/// `nvmlDeviceGetUUID` on a MIG handle.
pub unsafe fn uuid(device: Handle, uuid: *mut c_char, length: c_uint) -> Ret {
    mig_call("nvmlDeviceGetUUID", device, |_, _, _, m| unsafe {
        put_str(uuid, length, &m.uuid)
    })
}

/// `nvmlDeviceGetName` on a MIG handle: `<parent> MIG <profile>`.
pub unsafe fn name(device: Handle, name: *mut c_char, length: c_uint) -> Ret {
    mig_call("nvmlDeviceGetName", device, |_, _, g, m| unsafe {
        put_str(name, length, &format!("{} MIG {}", g.name, m.profile))
    })
}

/// Streaming multiprocessors per compute slice. An H100 SXM has 132 SMs in 7
/// slices, about 18 each; profiles hand out fewer (a 1g instance has 16), so
/// 16 a slice is used: a 7g instance reports 112.
pub const SMS_PER_SLICE: u32 = 16;

/// What `nvmlDeviceGetAttributes` answers for instance `m`: `NOT_SUPPORTED`
/// when its slices are unknown (no `slices` and no profile that names them).
/// The shared engine counts are 0.
pub fn attributes(m: &MigInstance) -> Result<DeviceAttributes, Ret> {
    let slices = m.slices.ok_or(NOT_SUPPORTED)?;
    let compute = m.compute_slices.unwrap_or(slices);
    Ok(DeviceAttributes {
        multiprocessor_count: compute.saturating_mul(SMS_PER_SLICE),
        shared_copy_engine_count: 0,
        shared_decoder_count: 0,
        shared_encoder_count: 0,
        shared_jpeg_count: 0,
        shared_ofa_count: 0,
        gpu_instance_slice_count: slices,
        compute_instance_slice_count: compute,
        memory_size_mb: m.memory_total_bytes >> 20,
    })
}

/// `nvmlDeviceGetAttributes(_v2)`: a MIG device handle's slices, SMs and
/// memory; a whole GPU answers `NOT_SUPPORTED`, as on a real driver.
fn get_attributes(call: &str, device: Handle, out: *mut DeviceAttributes) -> Ret {
    if mig_of(device).is_none() {
        return device_call(call, device, None, |_, _, _| Err(NOT_SUPPORTED));
    }
    mig_call(call, device, |_, _, _, m| {
        let value = attributes(m)?;
        // SAFETY: the caller passes a valid pointer or null.
        unsafe { put(out, value) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetAttributes_v2(
    device: Handle,
    attributes: *mut DeviceAttributes,
) -> Ret {
    get_attributes("nvmlDeviceGetAttributes_v2", device, attributes)
}

/// The same layout as `_v2`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetAttributes(
    device: Handle,
    attributes: *mut DeviceAttributes,
) -> Ret {
    get_attributes("nvmlDeviceGetAttributes", device, attributes)
}

fn split(m: &MigInstance) -> (u64, u64) {
    let used = m.memory_used_bytes.min(m.memory_total_bytes);
    (m.memory_total_bytes - used, used)
}

/// `nvmlDeviceGetMemoryInfo` on a MIG handle.
pub unsafe fn memory_v1(device: Handle, memory: *mut MemoryV1) -> Ret {
    mig_call("nvmlDeviceGetMemoryInfo", device, |_, _, _, m| {
        let (free, used) = split(m);
        let value = MemoryV1 {
            total: m.memory_total_bytes,
            free,
            used,
        };
        unsafe { put(memory, value) }
    })
}

/// `nvmlDeviceGetMemoryInfo_v2` on a MIG handle.
pub unsafe fn memory_v2(device: Handle, memory: *mut MemoryV2) -> Ret {
    mig_call("nvmlDeviceGetMemoryInfo_v2", device, |_, _, _, m| {
        if memory.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        // SAFETY: non-null; the caller provides an `nvmlMemory_v2_t`.
        if unsafe { memory.read_unaligned().version } != MEMORY_V2_VERSION {
            return Err(ARGUMENT_VERSION_MISMATCH);
        }
        let (free, used) = split(m);
        let value = MemoryV2 {
            version: MEMORY_V2_VERSION,
            total: m.memory_total_bytes,
            reserved: 0,
            free,
            used,
        };
        unsafe { put(memory, value) }
    })
}

fn processes(m: &MigInstance, kind: ProcessType) -> impl Iterator<Item = &Process> {
    m.processes.iter().filter(move |p| p.kind == kind)
}

/// The running-process calls (`_v2`, `_v3`) on a MIG handle: the instance's
/// processes, with its instance IDs.
pub unsafe fn running_v2(
    call: &str,
    device: Handle,
    kind: ProcessType,
    count: *mut c_uint,
    out: *mut ProcessInfoV2,
) -> Ret {
    mig_call(call, device, |_, _, _, m| {
        let records = processes(m, kind)
            .map(|p| ProcessInfoV2 {
                pid: p.pid,
                used_gpu_memory: p.used_memory_bytes.unwrap_or(NOT_AVAILABLE),
                gpu_instance_id: m.gpu_instance_id,
                compute_instance_id: m.compute_instance_id,
            })
            .collect();
        unsafe { fill(count, out, records) }
    })
}

/// The unversioned running-process calls on a MIG handle.
pub unsafe fn running_v1(
    call: &str,
    device: Handle,
    kind: ProcessType,
    count: *mut c_uint,
    out: *mut ProcessInfoV1,
) -> Ret {
    mig_call(call, device, |_, _, _, m| {
        let records = processes(m, kind)
            .map(|p| ProcessInfoV1 {
                pid: p.pid,
                used_gpu_memory: p.used_memory_bytes.unwrap_or(NOT_AVAILABLE),
            })
            .collect();
        unsafe { fill(count, out, records) }
    })
}

/// Calls a MIG handle does not support (utilization, per-process utilization).
pub fn not_supported(call: &str, device: Handle) -> Ret {
    mig_call(call, device, |_, _, _, _| Err(NOT_SUPPORTED))
}
