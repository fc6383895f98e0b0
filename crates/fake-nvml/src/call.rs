//! What every exported call goes through: panic containment, the init check,
//! device-handle validation, injected faults, modelled driver latencies, lost
//! GPUs and unsupported features.

use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::MutexGuard;
use std::thread;
use std::time::{Duration, Instant};

use crate::codes::{GPU_IS_LOST, INVALID_ARGUMENT, NOT_SUPPORTED, Ret, SUCCESS, UNKNOWN};
use crate::latency;
use crate::scenario::{Feature, Gpu, MAX_GPUS, MAX_MIG, MigInstance};
use crate::state::{self, Loaded, State};

/// `nvmlDevice_t`: an opaque pointer.
pub type Handle = *mut c_void;

/// Device handles point into this table: entry `i` is GPU `i`.
static HANDLES: [u8; MAX_GPUS] = [0; MAX_GPUS];

/// How often a delayed call looks at the scenario file again.
const DELAY_SLICE: Duration = Duration::from_millis(100);

type Guard = MutexGuard<'static, State>;

pub fn handle_for(index: usize) -> Handle {
    HANDLES.as_ptr().wrapping_add(index).cast_mut().cast()
}

/// MIG device handles point into this table: entry `gpu * MAX_MIG + n` is
/// instance `n` of GPU `gpu`.
static MIG_HANDLES: [u8; MAX_GPUS * MAX_MIG] = [0; MAX_GPUS * MAX_MIG];

pub fn mig_handle_for(gpu: usize, instance: usize) -> Handle {
    MIG_HANDLES
        .as_ptr()
        .wrapping_add(gpu * MAX_MIG + instance)
        .cast_mut()
        .cast()
}

/// (GPU index, instance position) of a MIG device handle.
pub fn mig_of(handle: Handle) -> Option<(usize, usize)> {
    let offset = (handle as usize).wrapping_sub(MIG_HANDLES.as_ptr() as usize);
    (offset < MAX_GPUS * MAX_MIG).then_some((offset / MAX_MIG, offset % MAX_MIG))
}

/// A call on a MIG device handle: the parent's faults (by its index) and
/// `lost` apply; an instance no longer in the scenario is `INVALID_ARGUMENT`.
pub fn mig_call(
    call: &str,
    handle: Handle,
    f: impl FnOnce(&Loaded, usize, &Gpu, &MigInstance) -> Result<(), Ret>,
) -> Ret {
    guard(|| {
        let (index, n) = mig_of(handle).ok_or(INVALID_ARGUMENT)?;
        let st = state::lock_ready()?;
        let st = settle(st, call, Some(index), state::lock_ready)?;
        let loaded = st.current()?;
        let gpu = loaded.gpu(index).ok_or(INVALID_ARGUMENT)?;
        if gpu.lost {
            return Err(GPU_IS_LOST);
        }
        let instance = gpu
            .mig
            .as_ref()
            .and_then(|m| m.get(n))
            .ok_or(INVALID_ARGUMENT)?;
        f(loaded, index, gpu, instance)
    })
}

fn index_of(handle: Handle) -> Option<usize> {
    let offset = (handle as usize).wrapping_sub(HANDLES.as_ptr() as usize);
    (offset < MAX_GPUS).then_some(offset)
}

/// Runs `f`, turning a panic into `NVML_ERROR_UNKNOWN`.
pub fn guard(f: impl FnOnce() -> Result<(), Ret>) -> Ret {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => SUCCESS,
        Ok(Err(code)) => code,
        Err(_) => UNKNOWN,
    }
}

/// A call that needs an initialised library but no device.
pub fn system_call(call: &str, f: impl FnOnce(&Loaded) -> Result<(), Ret>) -> Ret {
    guard(|| {
        let st = settle(state::lock_ready()?, call, None, state::lock_ready)?;
        f(st.current()?)
    })
}

/// A call about one device. `feature` names the group that `unsupported` can
/// turn off. Sleeps the call's modelled driver latency (`latency.rs`), if any.
pub fn device_call(
    call: &str,
    handle: Handle,
    feature: Option<Feature>,
    f: impl FnOnce(&Loaded, usize, &Gpu) -> Result<(), Ret>,
) -> Ret {
    device_call_taking(call, handle, feature, latency::of(call), f)
}

/// [`device_call`] that sleeps `latency` (while latencies are on) once the call
/// passed its checks and faults, without holding the state, so that calls on
/// other GPUs proceed meanwhile. The checks are made again after the sleep.
pub fn device_call_taking(
    call: &str,
    handle: Handle,
    feature: Option<Feature>,
    latency: Option<Duration>,
    f: impl FnOnce(&Loaded, usize, &Gpu) -> Result<(), Ret>,
) -> Ret {
    guard(|| {
        let st = state::lock_ready()?;
        let count = st.current()?.scenario.gpus.len();
        let index = index_of(handle)
            .filter(|i| *i < count)
            .ok_or(INVALID_ARGUMENT)?;
        let mut st = settle(st, call, Some(index), state::lock_ready)?;
        let loaded = st.current()?;
        if let Some(wait) = latency::applies(&loaded.scenario, latency) {
            usable(loaded, index, feature)?;
            st = pause(st, wait, state::lock_ready)?;
        }
        let loaded = st.current()?;
        f(loaded, index, usable(loaded, index, feature)?)
    })
}

/// GPU `index`, when a call on it can be answered: still in the scenario, not
/// lost, and `feature` supported.
fn usable(loaded: &Loaded, index: usize, feature: Option<Feature>) -> Result<&Gpu, Ret> {
    let gpu = loaded.gpu(index).ok_or(INVALID_ARGUMENT)?;
    if gpu.lost {
        return Err(GPU_IS_LOST);
    }
    if let Some(feature) = feature
        && !gpu.supports(feature)
    {
        return Err(NOT_SUPPORTED);
    }
    Ok(gpu)
}

/// Sleeps `wait` (a modelled driver latency) without holding the state, then
/// takes it again with `relock`.
pub fn pause(st: Guard, wait: Duration, relock: fn() -> Result<Guard, Ret>) -> Result<Guard, Ret> {
    drop(st);
    thread::sleep(wait);
    relock()
}

/// Applies the scenario's fault for `call` on `gpu`, if any: waits out its delay
/// (ending early once the fault is gone from the scenario), then answers its error.
/// `relock` takes the state again after the wait.
pub fn settle(
    st: Guard,
    call: &str,
    gpu: Option<usize>,
    relock: fn() -> Result<Guard, Ret>,
) -> Result<Guard, Ret> {
    let Some(fault) = st.current()?.scenario.fault(call, gpu) else {
        return Ok(st);
    };
    if fault.delay_ms == 0 {
        return match fault.error {
            Some(code) => Err(code.0),
            None => Ok(st),
        };
    }
    let deadline = Instant::now() + Duration::from_millis(fault.delay_ms);
    drop(st);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        thread::sleep(left.min(DELAY_SLICE));
        let st = relock()?;
        let still_delayed = st
            .current()?
            .scenario
            .fault(call, gpu)
            .is_some_and(|f| f.delay_ms > 0);
        if !still_delayed {
            break;
        }
    }
    let st = relock()?;
    match st
        .current()?
        .scenario
        .fault(call, gpu)
        .and_then(|f| f.error)
    {
        Some(code) => Err(code.0),
        None => Ok(st),
    }
}
