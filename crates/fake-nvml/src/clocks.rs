//! Clock speeds and clock-event (throttle) reasons.

use std::ffi::c_uint;

use crate::abi::put;
use crate::call::{Handle, device_call};
use crate::codes::{INVALID_ARGUMENT, Ret};
use crate::scenario::Feature;

/// `NVML_CLOCK_GRAPHICS` (0), `SM` (1) and `VIDEO` (3) follow the SM clock; `MEM` (2) the memory clock.
fn clock(kind: c_uint, sm: u32, mem: u32) -> Result<u32, Ret> {
    match kind {
        0 | 1 | 3 => Ok(sm),
        2 => Ok(mem),
        _ => Err(INVALID_ARGUMENT),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetClockInfo(
    device: Handle,
    kind: c_uint,
    mhz: *mut c_uint,
) -> Ret {
    device_call(
        "nvmlDeviceGetClockInfo",
        device,
        Some(Feature::Clocks),
        |_, _, g| {
            let value = clock(kind, g.sm_clock_mhz, g.memory_clock_mhz)?;
            unsafe { put(mhz, value) }
        },
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMaxClockInfo(
    device: Handle,
    kind: c_uint,
    mhz: *mut c_uint,
) -> Ret {
    device_call(
        "nvmlDeviceGetMaxClockInfo",
        device,
        Some(Feature::Clocks),
        |_, _, g| {
            let value = clock(kind, g.max_sm_clock_mhz, g.max_memory_clock_mhz)?;
            unsafe { put(mhz, value) }
        },
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCurrentClocksThrottleReasons(
    device: Handle,
    reasons: *mut u64,
) -> Ret {
    let feature = Some(Feature::ClockEventReasons);
    device_call(
        "nvmlDeviceGetCurrentClocksThrottleReasons",
        device,
        feature,
        |_, _, g| unsafe { put(reasons, g.clock_event_reasons) },
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCurrentClocksEventReasons(
    device: Handle,
    reasons: *mut u64,
) -> Ret {
    let feature = Some(Feature::ClockEventReasons);
    device_call(
        "nvmlDeviceGetCurrentClocksEventReasons",
        device,
        feature,
        |_, _, g| unsafe { put(reasons, g.clock_event_reasons) },
    )
}
