//! Finding devices and their identity: handles, index, name, UUID, PCI info.

use std::ffi::{c_char, c_uint};

use crate::abi::{PciInfo, PciInfoV1, c_array, get_str, put, put_str};
use crate::call::{Handle, device_call, guard, handle_for, pause, settle};
use crate::codes::{GPU_IS_LOST, INVALID_ARGUMENT, NOT_FOUND, Ret};
use crate::latency;
use crate::pci::PciAddress;
use crate::scenario::Gpu;
use crate::state::{self, Loaded};

/// Answers a handle lookup: `find` picks the GPU's index in the scenario.
/// Sleeps the call's modelled driver latency, if any, without holding the state.
///
/// # Safety
/// `out` is null or valid for a write.
unsafe fn lookup(
    call: &str,
    out: *mut Handle,
    find: impl FnOnce(&Loaded) -> Result<usize, Ret>,
) -> Ret {
    let found = |loaded: &Loaded, index: usize| {
        let gpu = loaded.gpu(index).ok_or(NOT_FOUND)?;
        if gpu.lost {
            return Err(GPU_IS_LOST);
        }
        Ok(())
    };
    guard(|| {
        let st = state::lock_ready()?;
        let index = find(st.current()?)?;
        let mut st = settle(st, call, Some(index), state::lock_ready)?;
        found(st.current()?, index)?;
        if let Some(wait) = latency::applies(&st.current()?.scenario, latency::of(call)) {
            st = pause(st, wait, state::lock_ready)?;
            found(st.current()?, index)?;
        }
        // SAFETY: per this function's contract.
        unsafe { put(out, handle_for(index)) }
    })
}

fn by_index(l: &Loaded, index: c_uint) -> Result<usize, Ret> {
    let index = index as usize;
    if index < l.scenario.gpus.len() {
        Ok(index)
    } else {
        Err(INVALID_ARGUMENT)
    }
}

fn find_gpu(l: &Loaded, pred: impl Fn(&Gpu) -> bool) -> Result<usize, Ret> {
    l.scenario.gpus.iter().position(pred).ok_or(NOT_FOUND)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(index: c_uint, device: *mut Handle) -> Ret {
    unsafe {
        lookup("nvmlDeviceGetHandleByIndex_v2", device, |l| {
            by_index(l, index)
        })
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex(index: c_uint, device: *mut Handle) -> Ret {
    unsafe { lookup("nvmlDeviceGetHandleByIndex", device, |l| by_index(l, index)) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByUUID(
    uuid: *const c_char,
    device: *mut Handle,
) -> Ret {
    unsafe {
        lookup("nvmlDeviceGetHandleByUUID", device, |l| {
            let uuid = get_str(uuid)?;
            find_gpu(l, |g| g.uuid.eq_ignore_ascii_case(uuid))
        })
    }
}

/// # Safety
/// `bus_id` is null or a C string; `device` is null or valid for a write.
unsafe fn by_pci_bus_id(call: &str, bus_id: *const c_char, device: *mut Handle) -> Ret {
    unsafe {
        lookup(call, device, |l| {
            let wanted = PciAddress::parse(get_str(bus_id)?).ok_or(INVALID_ARGUMENT)?;
            find_gpu(l, |g| g.pci == wanted)
        })
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByPciBusId_v2(
    bus_id: *const c_char,
    device: *mut Handle,
) -> Ret {
    unsafe { by_pci_bus_id("nvmlDeviceGetHandleByPciBusId_v2", bus_id, device) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByPciBusId(
    bus_id: *const c_char,
    device: *mut Handle,
) -> Ret {
    unsafe { by_pci_bus_id("nvmlDeviceGetHandleByPciBusId", bus_id, device) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetIndex(device: Handle, index: *mut c_uint) -> Ret {
    device_call("nvmlDeviceGetIndex", device, None, |_, i, _| unsafe {
        put(index, i as c_uint)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetName(
    device: Handle,
    name: *mut c_char,
    length: c_uint,
) -> Ret {
    if crate::mig::is_mig(device) {
        return unsafe { crate::mig::name(device, name, length) };
    }
    device_call("nvmlDeviceGetName", device, None, |_, _, g| unsafe {
        put_str(name, length, &g.name)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetUUID(
    device: Handle,
    uuid: *mut c_char,
    length: c_uint,
) -> Ret {
    if crate::mig::is_mig(device) {
        return unsafe { crate::mig::uuid(device, uuid, length) };
    }
    device_call("nvmlDeviceGetUUID", device, None, |_, _, g| unsafe {
        put_str(uuid, length, &g.uuid)
    })
}

fn pci_info(g: &Gpu) -> PciInfo {
    PciInfo {
        bus_id_legacy: c_array(&g.pci.legacy()),
        domain: g.pci.domain,
        bus: g.pci.bus,
        device: g.pci.device,
        pci_device_id: g.pci_device_id,
        pci_sub_system_id: g.pci_subsystem_id,
        bus_id: c_array(&g.pci_bus_id),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v3(device: Handle, pci: *mut PciInfo) -> Ret {
    device_call("nvmlDeviceGetPciInfo_v3", device, None, |_, _, g| unsafe {
        put(pci, pci_info(g))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v2(device: Handle, pci: *mut PciInfo) -> Ret {
    device_call("nvmlDeviceGetPciInfo_v2", device, None, |_, _, g| unsafe {
        put(pci, pci_info(g))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo(device: Handle, pci: *mut PciInfoV1) -> Ret {
    device_call("nvmlDeviceGetPciInfo", device, None, |_, _, g| {
        let info = PciInfoV1 {
            bus_id: c_array(&g.pci.legacy()),
            domain: g.pci.domain,
            bus: g.pci.bus,
            device: g.pci.device,
            pci_device_id: g.pci_device_id,
            pci_sub_system_id: g.pci_subsystem_id,
            reserved: [0; 4],
        };
        unsafe { put(pci, info) }
    })
}
