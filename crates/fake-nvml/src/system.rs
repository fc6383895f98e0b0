//! Library-wide calls: init and shutdown, versions, device count.

use std::ffi::{c_char, c_int, c_uint};

use crate::abi::{put, put_str};
use crate::call::{guard, pause, settle, system_call};
use crate::codes::{Ret, UNINITIALIZED, UNKNOWN};
use crate::{latency, state};

/// Loads the scenario (failing with `NVML_ERROR_UNKNOWN` when there is none),
/// answers `init_error` and faults on `call`, sleeps the modelled latency of
/// init, then counts one more init.
fn init(call: &str) -> Ret {
    guard(|| {
        let (st, res) = state::lock();
        if res.is_err() && (st.init_count == 0 || st.loaded.is_none()) {
            return Err(UNKNOWN);
        }
        if let Some(code) = st.current()?.scenario.init_error {
            return Err(code.0);
        }
        let relock: fn() -> Result<_, Ret> = || Ok(state::lock().0);
        let mut st = settle(st, call, None, relock)?;
        if let Some(wait) = latency::applies(&st.current()?.scenario, latency::of(call)) {
            st = pause(st, wait, relock)?;
        }
        st.init_count += 1;
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlInit_v2() -> Ret {
    init("nvmlInit_v2")
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlInit() -> Ret {
    init("nvmlInit")
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> Ret {
    init("nvmlInitWithFlags")
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlShutdown() -> Ret {
    guard(|| {
        let mut st = settle(
            state::lock_ready()?,
            "nvmlShutdown",
            None,
            state::lock_ready,
        )?;
        st.init_count = st.init_count.checked_sub(1).ok_or(UNINITIALIZED)?;
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(version: *mut c_char, length: c_uint) -> Ret {
    system_call("nvmlSystemGetDriverVersion", |l| unsafe {
        put_str(version, length, &l.scenario.driver_version)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetNVMLVersion(version: *mut c_char, length: c_uint) -> Ret {
    system_call("nvmlSystemGetNVMLVersion", |l| unsafe {
        put_str(version, length, &l.scenario.nvml_version)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion(version: *mut c_int) -> Ret {
    system_call("nvmlSystemGetCudaDriverVersion", |l| unsafe {
        put(version, l.scenario.cuda_driver_version)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion_v2(version: *mut c_int) -> Ret {
    system_call("nvmlSystemGetCudaDriverVersion_v2", |l| unsafe {
        put(version, l.scenario.cuda_driver_version)
    })
}

/// # Safety
/// `count` is null or valid for a write.
unsafe fn device_count(call: &str, count: *mut c_uint) -> Ret {
    system_call(call, |l| {
        let n = l.scenario.gpus.len() as c_uint;
        // SAFETY: the caller passes a valid pointer or null.
        unsafe { put(count, n) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(count: *mut c_uint) -> Ret {
    unsafe { device_count("nvmlDeviceGetCount_v2", count) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCount(count: *mut c_uint) -> Ret {
    unsafe { device_count("nvmlDeviceGetCount", count) }
}
