//! Per-device readings: utilization, memory, temperature, PCIe throughput, fans.

use std::ffi::c_uint;

use crate::abi::{
    MEMORY_V2_VERSION, MemoryV1, MemoryV2, TEMPERATURE_V1_VERSION, TemperatureV1, Utilization, put,
};
use crate::call::{Handle, device_call};
use crate::codes::{ARGUMENT_VERSION_MISMATCH, INVALID_ARGUMENT, Ret};
use crate::scenario::{Feature, Gpu};

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetUtilizationRates(
    device: Handle,
    utilization: *mut Utilization,
) -> Ret {
    if crate::mig::is_mig(device) {
        return crate::mig::not_supported("nvmlDeviceGetUtilizationRates", device);
    }
    device_call(
        "nvmlDeviceGetUtilizationRates",
        device,
        Some(Feature::Utilization),
        |_, _, g| {
            // With MIG on, utilization is per instance (GPM), not the GPU's.
            if g.mig.is_some() {
                return Err(crate::codes::NOT_SUPPORTED);
            }
            let value = Utilization {
                gpu: g.utilization_gpu,
                memory: g.utilization_memory,
            };
            unsafe { put(utilization, value) }
        },
    )
}

/// (free, used excluding reserved) in bytes.
fn memory_split(g: &Gpu) -> (u64, u64) {
    let used = g.memory_used_bytes.min(g.memory_total_bytes);
    let free = g
        .memory_total_bytes
        .saturating_sub(used)
        .saturating_sub(g.memory_reserved_bytes);
    (free, used)
}

/// v1 counts reserved memory as used.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(device: Handle, memory: *mut MemoryV1) -> Ret {
    if crate::mig::is_mig(device) {
        return unsafe { crate::mig::memory_v1(device, memory) };
    }
    device_call(
        "nvmlDeviceGetMemoryInfo",
        device,
        Some(Feature::Memory),
        |_, _, g| {
            let (free, _) = memory_split(g);
            let value = MemoryV1 {
                total: g.memory_total_bytes,
                free,
                used: g.memory_total_bytes - free,
            };
            unsafe { put(memory, value) }
        },
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(device: Handle, memory: *mut MemoryV2) -> Ret {
    if crate::mig::is_mig(device) {
        return unsafe { crate::mig::memory_v2(device, memory) };
    }
    device_call(
        "nvmlDeviceGetMemoryInfo_v2",
        device,
        Some(Feature::Memory),
        |_, _, g| {
            if memory.is_null() {
                return Err(INVALID_ARGUMENT);
            }
            // SAFETY: non-null; the caller provides an `nvmlMemory_v2_t`.
            if unsafe { memory.read_unaligned().version } != MEMORY_V2_VERSION {
                return Err(ARGUMENT_VERSION_MISMATCH);
            }
            let (free, used) = memory_split(g);
            let value = MemoryV2 {
                version: MEMORY_V2_VERSION,
                total: g.memory_total_bytes,
                reserved: g.memory_reserved_bytes.min(g.memory_total_bytes - used),
                free,
                used,
            };
            unsafe { put(memory, value) }
        },
    )
}

/// Sensor 0 (`NVML_TEMPERATURE_GPU`) is the only sensor.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTemperature(
    device: Handle,
    sensor: c_uint,
    temp: *mut c_uint,
) -> Ret {
    device_call(
        "nvmlDeviceGetTemperature",
        device,
        Some(Feature::Temperature),
        |_, _, g| {
            if sensor != 0 {
                return Err(INVALID_ARGUMENT);
            }
            unsafe { put(temp, g.temperature_c) }
        },
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTemperatureV(
    device: Handle,
    temperature: *mut TemperatureV1,
) -> Ret {
    device_call(
        "nvmlDeviceGetTemperatureV",
        device,
        Some(Feature::Temperature),
        |_, _, g| {
            if temperature.is_null() {
                return Err(INVALID_ARGUMENT);
            }
            // SAFETY: non-null; the caller provides an `nvmlTemperature_t`.
            let request = unsafe { temperature.read_unaligned() };
            if request.version != TEMPERATURE_V1_VERSION {
                return Err(ARGUMENT_VERSION_MISMATCH);
            }
            if request.sensor_type != 0 {
                return Err(INVALID_ARGUMENT);
            }
            let value = TemperatureV1 {
                temperature: g.temperature_c.try_into().unwrap_or(i32::MAX),
                ..request
            };
            unsafe { put(temperature, value) }
        },
    )
}

/// Counter 0 is TX, 1 is RX; KB/s.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPcieThroughput(
    device: Handle,
    counter: c_uint,
    value: *mut c_uint,
) -> Ret {
    device_call(
        "nvmlDeviceGetPcieThroughput",
        device,
        Some(Feature::Pcie),
        |_, _, g| {
            let kbps = match counter {
                0 => g.pcie_tx_kbps,
                1 => g.pcie_rx_kbps,
                _ => return Err(INVALID_ARGUMENT),
            };
            unsafe { put(value, kbps) }
        },
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetFanSpeed(device: Handle, speed: *mut c_uint) -> Ret {
    device_call(
        "nvmlDeviceGetFanSpeed",
        device,
        Some(Feature::FanSpeed),
        |_, _, g| unsafe { put(speed, g.fan_speed) },
    )
}

/// One fan per device.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetFanSpeed_v2(
    device: Handle,
    fan: c_uint,
    speed: *mut c_uint,
) -> Ret {
    device_call(
        "nvmlDeviceGetFanSpeed_v2",
        device,
        Some(Feature::FanSpeed),
        |_, _, g| {
            if fan != 0 {
                return Err(INVALID_ARGUMENT);
            }
            unsafe { put(speed, g.fan_speed) }
        },
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetNumFans(device: Handle, count: *mut c_uint) -> Ret {
    device_call(
        "nvmlDeviceGetNumFans",
        device,
        Some(Feature::FanSpeed),
        |_, _, _| unsafe { put(count, 1) },
    )
}
