//! Calls that other NVML clients (pynvml, nvitop) make, answered with fixed,
//! H100-like values or `NOT_SUPPORTED`.

use std::ffi::{c_int, c_uint};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::abi::{Bar1Memory, FieldValue, put};
use crate::call::{Handle, device_call, device_call_taking};
use crate::codes::{INVALID_ARGUMENT, NOT_SUPPORTED, Ret, SUCCESS};
use crate::latency;
use crate::scenario::Feature;

const BAR1_TOTAL_BYTES: u64 = 128 << 30;
const MEMORY_BUS_WIDTH_BITS: c_uint = 5120;
/// `samplingPeriodUs` reported with encoder/decoder utilization.
const CODEC_SAMPLING_PERIOD_US: c_uint = 167_000;

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetEncoderUtilization(
    device: Handle,
    util: *mut c_uint,
    period_us: *mut c_uint,
) -> Ret {
    let feature = Some(Feature::EncoderUtilization);
    device_call(
        "nvmlDeviceGetEncoderUtilization",
        device,
        feature,
        |_, _, _| unsafe {
            put(util, 0)?;
            put(period_us, CODEC_SAMPLING_PERIOD_US)
        },
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetDecoderUtilization(
    device: Handle,
    util: *mut c_uint,
    period_us: *mut c_uint,
) -> Ret {
    let feature = Some(Feature::DecoderUtilization);
    device_call(
        "nvmlDeviceGetDecoderUtilization",
        device,
        feature,
        |_, _, _| unsafe {
            put(util, 0)?;
            put(period_us, CODEC_SAMPLING_PERIOD_US)
        },
    )
}

/// The GPU's `health` fields (see `health.rs`), instant power and the PCIe
/// byte counters (see `fields.rs`); every other field, and one the GPU does
/// not support, answers `NOT_SUPPORTED` in its own `nvmlReturn`. The call
/// succeeds. Asked for a PCIe byte counter, it takes the modelled 0.3 ms.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetFieldValues(
    device: Handle,
    count: c_int,
    values: *mut FieldValue,
) -> Ret {
    // SAFETY: the caller passes `count` records, or null.
    let slow = unsafe { asks_for_pcie_counters(count, values) };
    let latency = slow.then_some(latency::PCIE_COUNTER_FIELDS);
    device_call_taking(
        "nvmlDeviceGetFieldValues",
        device,
        None,
        latency,
        |loaded, index, gpu| {
            crate::xids::write_kernel_log(loaded);
            let count = usize::try_from(count).map_err(|_| INVALID_ARGUMENT)?;
            if values.is_null() {
                return Err(INVALID_ARGUMENT);
            }
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_micros() as i64);
            for i in 0..count {
                // SAFETY: the caller passes `count` records.
                unsafe {
                    let slot = values.add(i);
                    let mut value = slot.read_unaligned();
                    value.timestamp = now;
                    value.latency_usec = 0;
                    let answer = crate::fields::field(index, gpu, value.field_id)
                        .unwrap_or_else(|| crate::health::field(gpu, value.field_id).ok_or(()));
                    match answer {
                        Ok((value_type, v)) => {
                            value.value_type = value_type;
                            value.value = v;
                            value.nvml_return = SUCCESS;
                        }
                        Err(()) => value.nvml_return = NOT_SUPPORTED,
                    }
                    slot.write_unaligned(value);
                }
            }
            Ok(())
        },
    )
}

/// Whether the request names field 197 or 198.
///
/// # Safety
/// `values` is null or valid for reads of `count` records.
unsafe fn asks_for_pcie_counters(count: c_int, values: *const FieldValue) -> bool {
    let Ok(count) = usize::try_from(count) else {
        return false;
    };
    if values.is_null() {
        return false;
    }
    (0..count).any(|i| {
        // SAFETY: per this function's contract.
        let id = unsafe { std::ptr::addr_of!((*values.add(i)).field_id).read_unaligned() };
        crate::fields::is_pcie_counter(id)
    })
}

/// P0.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPerformanceState(device: Handle, state: *mut c_uint) -> Ret {
    let feature = Some(Feature::PerformanceState);
    device_call(
        "nvmlDeviceGetPerformanceState",
        device,
        feature,
        |_, _, _| unsafe { put(state, 0) },
    )
}

/// Enabled.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPersistenceMode(device: Handle, mode: *mut c_uint) -> Ret {
    let feature = Some(Feature::PersistenceMode);
    device_call(
        "nvmlDeviceGetPersistenceMode",
        device,
        feature,
        |_, _, _| unsafe { put(mode, 1) },
    )
}

/// `NVML_COMPUTEMODE_DEFAULT`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeMode(device: Handle, mode: *mut c_uint) -> Ret {
    let feature = Some(Feature::ComputeMode);
    device_call(
        "nvmlDeviceGetComputeMode",
        device,
        feature,
        |_, _, _| unsafe { put(mode, 0) },
    )
}

/// Disabled: no display attached.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetDisplayMode(device: Handle, mode: *mut c_uint) -> Ret {
    let feature = Some(Feature::DisplayMode);
    device_call(
        "nvmlDeviceGetDisplayMode",
        device,
        feature,
        |_, _, _| unsafe { put(mode, 0) },
    )
}

/// Disabled: no display attached.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetDisplayActive(device: Handle, active: *mut c_uint) -> Ret {
    let feature = Some(Feature::DisplayMode);
    device_call(
        "nvmlDeviceGetDisplayActive",
        device,
        feature,
        |_, _, _| unsafe { put(active, 0) },
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCudaComputeCapability(
    device: Handle,
    major: *mut c_int,
    minor: *mut c_int,
) -> Ret {
    let feature = Some(Feature::CudaComputeCapability);
    device_call(
        "nvmlDeviceGetCudaComputeCapability",
        device,
        feature,
        |_, _, g| unsafe {
            let [ma, mi] = g.cuda_compute_capability;
            put(major, ma)?;
            put(minor, mi)
        },
    )
}

/// 128 GiB, none used.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetBAR1MemoryInfo(device: Handle, bar1: *mut Bar1Memory) -> Ret {
    device_call(
        "nvmlDeviceGetBAR1MemoryInfo",
        device,
        Some(Feature::Bar1Memory),
        |_, _, _| {
            let value = Bar1Memory {
                total: BAR1_TOTAL_BYTES,
                free: BAR1_TOTAL_BYTES,
                used: 0,
            };
            unsafe { put(bar1, value) }
        },
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMemoryBusWidth(device: Handle, width: *mut c_uint) -> Ret {
    let feature = Some(Feature::MemoryBusWidth);
    device_call(
        "nvmlDeviceGetMemoryBusWidth",
        device,
        feature,
        |_, _, _| unsafe { put(width, MEMORY_BUS_WIDTH_BITS) },
    )
}
