//! Further calls nvitop makes: driver model, ECC counts, serial number, MPS
//! clients (the scenario's processes of type `mps`). No ECC errors (MIG is
//! in `mig.rs`).

use std::ffi::{c_char, c_uint};

use crate::abi::{ProcessInfoV1, ProcessInfoV2, put, put_str};
use crate::call::{Handle, device_call};
use crate::codes::{INVALID_ARGUMENT, NOT_SUPPORTED, Ret};
use crate::scenario::ProcessType;

/// WDDM/TCC driver models exist on Windows only.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetDriverModel(
    device: Handle,
    _current: *mut c_uint,
    _pending: *mut c_uint,
) -> Ret {
    device_call("nvmlDeviceGetDriverModel", device, None, |_, _, _| {
        Err(NOT_SUPPORTED)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetDriverModel_v2(
    device: Handle,
    _current: *mut c_uint,
    _pending: *mut c_uint,
) -> Ret {
    device_call("nvmlDeviceGetDriverModel_v2", device, None, |_, _, _| {
        Err(NOT_SUPPORTED)
    })
}

/// The GPU's `health` counts; zero errors of every kind without one.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTotalEccErrors(
    device: Handle,
    kind: c_uint,
    counter: c_uint,
    count: *mut u64,
) -> Ret {
    device_call("nvmlDeviceGetTotalEccErrors", device, None, |_, _, g| {
        if kind > 1 || counter > 1 {
            return Err(INVALID_ARGUMENT);
        }
        let n = if g.health.is_some() {
            crate::health::total_ecc(g, kind)?
        } else {
            0
        };
        unsafe { put(count, n) }
    })
}

/// Derived from the index: `1650000000000` + index.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetSerial(
    device: Handle,
    serial: *mut c_char,
    length: c_uint,
) -> Ret {
    device_call("nvmlDeviceGetSerial", device, None, |_, i, _| unsafe {
        put_str(
            serial,
            length,
            &(1_650_000_000_000u64 + i as u64).to_string(),
        )
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMPSComputeRunningProcesses_v3(
    device: Handle,
    count: *mut c_uint,
    infos: *mut ProcessInfoV2,
) -> Ret {
    unsafe {
        crate::process::running_v2(
            "nvmlDeviceGetMPSComputeRunningProcesses_v3",
            device,
            ProcessType::Mps,
            count,
            infos,
        )
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMPSComputeRunningProcesses_v2(
    device: Handle,
    count: *mut c_uint,
    infos: *mut ProcessInfoV2,
) -> Ret {
    unsafe {
        crate::process::running_v2(
            "nvmlDeviceGetMPSComputeRunningProcesses_v2",
            device,
            ProcessType::Mps,
            count,
            infos,
        )
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMPSComputeRunningProcesses(
    device: Handle,
    count: *mut c_uint,
    infos: *mut ProcessInfoV1,
) -> Ret {
    unsafe {
        crate::process::running_v1(
            "nvmlDeviceGetMPSComputeRunningProcesses",
            device,
            ProcessType::Mps,
            count,
            infos,
        )
    }
}
