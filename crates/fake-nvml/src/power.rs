//! Power draw, power limits and the energy counter.

use std::ffi::c_uint;

use crate::abi::put;
use crate::call::{Handle, device_call};
use crate::codes::Ret;
use crate::scenario::Feature;

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPowerUsage(device: Handle, power: *mut c_uint) -> Ret {
    device_call(
        "nvmlDeviceGetPowerUsage",
        device,
        Some(Feature::Power),
        |_, _, g| unsafe { put(power, g.power_mw) },
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetEnforcedPowerLimit(
    device: Handle,
    limit: *mut c_uint,
) -> Ret {
    device_call(
        "nvmlDeviceGetEnforcedPowerLimit",
        device,
        Some(Feature::PowerLimit),
        |_, _, g| unsafe { put(limit, g.power_limit_mw) },
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPowerManagementLimit(
    device: Handle,
    limit: *mut c_uint,
) -> Ret {
    device_call(
        "nvmlDeviceGetPowerManagementLimit",
        device,
        Some(Feature::PowerLimit),
        |_, _, g| unsafe { put(limit, g.power_limit_mw) },
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTotalEnergyConsumption(
    device: Handle,
    energy: *mut u64,
) -> Ret {
    device_call(
        "nvmlDeviceGetTotalEnergyConsumption",
        device,
        Some(Feature::Energy),
        |l, i, _| unsafe { put(energy, l.energy_mj(i)) },
    )
}
