//! GPM (GPU Performance Monitoring): support query, samples, and the metrics
//! between two samples, from each GPU's `gpm` in the scenario.
//!
//! A sample is a heap record whose address is the `nvmlGpmSample_t`; live
//! addresses are kept in a table so a freed or foreign handle is refused
//! (`INVALID_ARGUMENT`) instead of read.

use std::ffi::{c_char, c_uint};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::abi::put;
use crate::call::{Handle, device_call, guard, settle};
use crate::codes::{ARGUMENT_VERSION_MISMATCH, INVALID_ARGUMENT, NOT_SUPPORTED, Ret, SUCCESS};
use crate::scenario::Gpm;
use crate::state;

/// `NVML_GPM_SUPPORT_VERSION` and `NVML_GPM_METRICS_GET_VERSION`.
const SUPPORT_VERSION: c_uint = 1;
const METRICS_GET_VERSION: c_uint = 1;
/// `NVML_GPM_METRIC_MAX`: the length of `nvmlGpmMetricsGet_t.metrics`.
const METRIC_MAX: c_uint = 210;
/// Samples closer together than this are refused, as NVML asks for 100 ms.
const MIN_APART: Duration = Duration::from_millis(100);

/// `nvmlGpmSupport_t`.
#[repr(C)]
pub struct Support {
    pub version: c_uint,
    pub is_supported_device: c_uint,
}

/// `nvmlGpmMetric_t`.
#[repr(C)]
pub struct Metric {
    pub metric_id: c_uint,
    pub nvml_return: Ret,
    pub value: f64,
    pub short_name: *mut c_char,
    pub long_name: *mut c_char,
    pub unit: *mut c_char,
}

/// The head of `nvmlGpmMetricsGet_t`; `metrics[METRIC_MAX]` follows it.
#[repr(C)]
pub struct MetricsGetHead {
    pub version: c_uint,
    pub num_metrics: c_uint,
    pub sample1: *mut Sample,
    pub sample2: *mut Sample,
}

const _: () = {
    use std::mem::size_of;
    assert!(size_of::<Support>() == 8);
    assert!(size_of::<Metric>() == 40);
    assert!(size_of::<MetricsGetHead>() == 24);
};

/// What a sample holds once taken: the device, the MIG GPU instance (if
/// any), the scenario's values then, and when.
#[derive(Debug, Clone, Copy)]
struct Taken {
    device: usize,
    gpu_instance: Option<u32>,
    values: Gpm,
    at: Instant,
}

/// `nvmlGpmSample_st`: opaque to callers.
pub struct Sample {
    taken: Option<Taken>,
}

/// Addresses of the samples allocated and not yet freed.
static LIVE: Mutex<Vec<usize>> = Mutex::new(Vec::new());

fn live() -> std::sync::MutexGuard<'static, Vec<usize>> {
    LIVE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs `f` on a live sample; `INVALID_ARGUMENT` for any other pointer.
fn with_sample<T>(sample: *mut Sample, f: impl FnOnce(&mut Sample) -> T) -> Result<T, Ret> {
    let table = live();
    if sample.is_null() || !table.contains(&(sample as usize)) {
        return Err(INVALID_ARGUMENT);
    }
    // SAFETY: the address is in the table, so it is a `Box<Sample>` this
    // library allocated and has not freed; the table lock is held.
    Ok(f(unsafe { &mut *sample }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpmQueryDeviceSupport(device: Handle, support: *mut Support) -> Ret {
    device_call("nvmlGpmQueryDeviceSupport", device, None, |_, _, g| {
        if support.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        // SAFETY: non-null; the caller provides an `nvmlGpmSupport_t`.
        if unsafe { support.read_unaligned().version } != SUPPORT_VERSION {
            return Err(ARGUMENT_VERSION_MISMATCH);
        }
        let value = Support {
            version: SUPPORT_VERSION,
            is_supported_device: c_uint::from(g.gpm.is_some()),
        };
        unsafe { put(support, value) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpmSampleAlloc(sample: *mut *mut Sample) -> Ret {
    crate::call::system_call("nvmlGpmSampleAlloc", |_| {
        if sample.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        let raw = Box::into_raw(Box::new(Sample { taken: None }));
        live().push(raw as usize);
        unsafe { put(sample, raw) }
    })
}

/// Frees a sample. Needs no initialised library (the wrapper frees on drop).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpmSampleFree(sample: *mut Sample) -> Ret {
    guard(|| {
        let mut table = live();
        let at = table
            .iter()
            .position(|a| *a == sample as usize)
            .ok_or(INVALID_ARGUMENT)?;
        table.swap_remove(at);
        // SAFETY: the address was in the table: a live `Box<Sample>` of ours,
        // now out of the table, so freed once.
        drop(unsafe { Box::from_raw(sample) });
        Ok(())
    })
}

fn take(call: &str, device: Handle, gpu_instance: Option<u32>, sample: *mut Sample) -> Ret {
    device_call(call, device, None, |_, index, g| {
        let values = g.gpm.ok_or(NOT_SUPPORTED)?;
        let values = match gpu_instance {
            None => values,
            Some(gi) => mig_values(g, gi)?,
        };
        with_sample(sample, |s| {
            s.taken = Some(Taken {
                device: index,
                gpu_instance,
                values,
                at: Instant::now(),
            });
        })
    })
}

/// GPM of one MIG GPU instance: its `gpm`; `NOT_SUPPORTED` without MIG or
/// without one, `INVALID_ARGUMENT` for an instance ID the GPU does not have.
fn mig_values(gpu: &crate::scenario::Gpu, gpu_instance: u32) -> Result<Gpm, Ret> {
    let instances = gpu.mig.as_ref().ok_or(NOT_SUPPORTED)?;
    let instance = instances
        .iter()
        .find(|m| m.gpu_instance_id == gpu_instance)
        .ok_or(INVALID_ARGUMENT)?;
    instance.gpm.ok_or(NOT_SUPPORTED)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpmSampleGet(device: Handle, sample: *mut Sample) -> Ret {
    take("nvmlGpmSampleGet", device, None, sample)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpmMigSampleGet(
    device: Handle,
    gpu_instance_id: c_uint,
    sample: *mut Sample,
) -> Ret {
    take("nvmlGpmMigSampleGet", device, Some(gpu_instance_id), sample)
}

/// The value of metric `id` (an `nvmlGpmMetricId_t`) and its names, or `None`
/// for metrics the stand-in does not model.
fn metric(id: c_uint, v: &Gpm) -> Option<(f64, &'static std::ffi::CStr, &'static std::ffi::CStr)> {
    Some(match id {
        1 => (v.graphics_util, c"GR_UTIL", c"%"),
        2 => (v.sm_util, c"SM_UTIL", c"%"),
        3 => (v.sm_occupancy, c"SM_OCCUPANCY", c"%"),
        5 => (v.any_tensor_util, c"TENSOR_UTIL", c"%"),
        10 => (v.dram_bw_util, c"DRAM_BW_UTIL", c"%"),
        20 => (v.pcie_tx_mibps, c"PCIE_TX", c"MiB/sec"),
        21 => (v.pcie_rx_mibps, c"PCIE_RX", c"MiB/sec"),
        60 => (v.nvlink_rx_mibps, c"NVLINK_TOTAL_RX", c"MiB/sec"),
        61 => (v.nvlink_tx_mibps, c"NVLINK_TOTAL_TX", c"MiB/sec"),
        _ => return None,
    })
}

/// Fills `metrics[0..numMetrics)` from the later sample's values. Both
/// samples must be taken, of one device (and instance), the later one at
/// least 100 ms after the earlier.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpmMetricsGet(request: *mut MetricsGetHead) -> Ret {
    guard(|| {
        if request.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        // SAFETY: non-null; the caller provides an `nvmlGpmMetricsGet_t`.
        let head = unsafe { request.read_unaligned() };
        if head.version != METRICS_GET_VERSION {
            return Err(ARGUMENT_VERSION_MISMATCH);
        }
        if head.num_metrics > METRIC_MAX {
            return Err(INVALID_ARGUMENT);
        }
        let first = with_sample(head.sample1, |s| s.taken)?.ok_or(INVALID_ARGUMENT)?;
        let second = with_sample(head.sample2, |s| s.taken)?.ok_or(INVALID_ARGUMENT)?;
        if first.device != second.device
            || first.gpu_instance != second.gpu_instance
            || second.at.saturating_duration_since(first.at) < MIN_APART
        {
            return Err(INVALID_ARGUMENT);
        }
        let st = state::lock_ready()?;
        let st = settle(
            st,
            "nvmlGpmMetricsGet",
            Some(second.device),
            state::lock_ready,
        )?;
        let gpu = st.current()?.gpu(second.device).ok_or(INVALID_ARGUMENT)?;
        if gpu.lost {
            return Err(crate::codes::GPU_IS_LOST);
        }
        drop(st);
        // SAFETY: the metrics array follows the head in the caller's struct;
        // only the first `num_metrics` (at most METRIC_MAX) entries are touched.
        let metrics = unsafe { request.add(1).cast::<Metric>() };
        for i in 0..head.num_metrics as usize {
            let slot = unsafe { metrics.add(i) };
            let id = unsafe { std::ptr::addr_of!((*slot).metric_id).read_unaligned() };
            let (ret, value, short, unit) = match metric(id, &second.values) {
                Some((value, short, unit)) => (SUCCESS, value, short, unit),
                None => (NOT_SUPPORTED, 0.0, c"", c""),
            };
            let filled = Metric {
                metric_id: id,
                nvml_return: ret,
                value,
                short_name: short.as_ptr().cast_mut(),
                long_name: short.as_ptr().cast_mut(),
                unit: unit.as_ptr().cast_mut(),
            };
            unsafe { put(slot, filled) }?;
        }
        Ok(())
    })
}
