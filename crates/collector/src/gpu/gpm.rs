//! GPM (GPU Performance Monitoring, Hopper and later): what the SMs did
//! between the previous sample and this one.
//!
//! Each device keeps its previous GPM sample between readings, as a raw
//! handle (a `GpmSample` borrows the `Nvml`, which the worker owns beside
//! it). Two samples must be at least 100 ms apart; a reading sooner than
//! that keeps the older sample and reports nothing.
//!
//! A library may lack any GPM symbol, and `GpmSample`'s `Drop` calls
//! `nvmlGpmSampleFree` unchecked (it panics when the symbol is missing), so
//! no sample is made unless all four symbols are there.

use std::ffi::c_void;
use std::time::{Duration, Instant};

use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::gpm::gpm_metrics_get;
use nvml_wrapper::{Device, GpmSample, Nvml};

use crate::sample::{ErrorCounts, ErrorSource, GpmReading};

/// NVML's minimum time between the two samples of a metrics query.
const MIN_APART: Duration = Duration::from_millis(100);

/// The metrics read, in the order `reading` expects.
const IDS: [GpmMetricId; 6] = [
    GpmMetricId::SmUtil,
    GpmMetricId::SmOccupancy,
    GpmMetricId::AnyTensorUtil,
    GpmMetricId::DramBwUtil,
    GpmMetricId::NvlinkTotalTxPerSec,
    GpmMetricId::NvlinkTotalRxPerSec,
];

const MIB: f64 = 1024.0 * 1024.0;

/// What is kept per device between readings.
#[derive(Debug, Default)]
pub struct GpmMemo {
    /// `Some(false)` once the device (or the library) said it has no GPM.
    pub supported: Option<bool>,
    /// The previous sample (an owned `nvmlGpmSample_t`) and when it was taken.
    previous: Option<(*mut c_void, Instant)>,
}

impl GpmMemo {
    /// Frees the kept sample. Call before the `Nvml` it came from is dropped,
    /// and when the device at this index changes.
    pub fn release(&mut self, nvml: &Nvml) {
        if let Some((raw, _)) = self.previous.take() {
            // SAFETY: `raw` came from `into_handle` on a sample of this `Nvml`
            // and is owned by this memo alone; it is freed once, here.
            drop(unsafe { GpmSample::from_handle(nvml, raw.cast()) });
        }
        self.supported = None;
    }
}

/// All the calls GPM needs are in the library (`Drop` needs the free).
fn symbols_present(nvml: &Nvml) -> bool {
    let lib = nvml.lib();
    lib.nvmlGpmQueryDeviceSupport.is_ok()
        && lib.nvmlGpmSampleAlloc.is_ok()
        && lib.nvmlGpmSampleGet.is_ok()
        && lib.nvmlGpmSampleFree.is_ok()
        && lib.nvmlGpmMetricsGet.is_ok()
}

/// The outcome of one reading: the metrics (when there were two samples far
/// enough apart) and whether the device is lost.
pub struct GpmRead {
    pub reading: Option<GpmReading>,
    pub lost: bool,
}

/// Reads GPM metrics of `device` since its previous sample. "Not supported"
/// and missing symbols leave them out silently; other failures are counted
/// as NVML errors and leave them out for this reading.
pub fn read(nvml: &Nvml, device: &Device, memo: &mut GpmMemo, errors: &mut ErrorCounts) -> GpmRead {
    read_with(nvml, device, memo, errors, |d| d.gpm_sample())
}

/// GPM of one MIG GPU instance of `parent`, likewise.
pub fn read_mig(
    nvml: &Nvml,
    parent: &Device,
    gpu_instance: u32,
    memo: &mut GpmMemo,
    errors: &mut ErrorCounts,
) -> GpmRead {
    if nvml.lib().nvmlGpmMigSampleGet.is_err() {
        return GpmRead {
            reading: None,
            lost: false,
        };
    }
    read_with(nvml, parent, memo, errors, |d| {
        d.gpm_mig_sample(gpu_instance)
    })
}

fn read_with<'n>(
    nvml: &'n Nvml,
    device: &Device<'n>,
    memo: &mut GpmMemo,
    errors: &mut ErrorCounts,
    take: impl FnOnce(&Device<'n>) -> Result<GpmSample<'n>, NvmlError>,
) -> GpmRead {
    let none = |lost| GpmRead {
        reading: None,
        lost,
    };
    if memo.supported == Some(false) {
        return none(false);
    }
    if !symbols_present(nvml) {
        memo.supported = Some(false);
        return none(false);
    }
    if memo.supported.is_none() {
        match device.gpm_support() {
            Ok(yes) => memo.supported = Some(yes),
            Err(e) => return failed(e, memo, errors),
        }
        if memo.supported == Some(false) {
            return none(false);
        }
    }
    if memo
        .previous
        .is_some_and(|(_, at)| at.elapsed() < MIN_APART)
    {
        return none(false);
    }
    let now = Instant::now();
    let current = match take(device) {
        Ok(s) => s,
        Err(e) => return failed(e, memo, errors),
    };
    let metrics = memo.previous.take().map(|(raw, _)| {
        // SAFETY: as in `release`: owned here, freed once when this drops.
        let previous = unsafe { GpmSample::from_handle(nvml, raw.cast()) };
        gpm_metrics_get(nvml, &previous, &current, &IDS)
    });
    memo.previous = Some((current.into_handle().cast(), now));
    match metrics {
        None => none(false),
        Some(Ok(values)) => GpmRead {
            reading: Some(reading(&values, errors)),
            lost: false,
        },
        Some(Err(e)) => {
            let lost = matches!(e, NvmlError::GpuLost);
            if !lost && !matches!(e, NvmlError::NotSupported) {
                errors.add(ErrorSource::Nvml);
            }
            none(lost)
        }
    }
}

fn failed(e: NvmlError, memo: &mut GpmMemo, errors: &mut ErrorCounts) -> GpmRead {
    let lost = matches!(e, NvmlError::GpuLost);
    match e {
        NvmlError::NotSupported | NvmlError::FailedToLoadSymbol(_) => {
            memo.supported = Some(false);
        }
        NvmlError::GpuLost => {}
        _ => errors.add(ErrorSource::Nvml),
    }
    GpmRead {
        reading: None,
        lost,
    }
}

type MetricResult = Result<nvml_wrapper::struct_wrappers::gpm::GpmMetricResult, NvmlError>;

/// Ratios from percent, bytes from MiB/s; a metric that failed is left out
/// (counted unless it is merely not supported).
fn reading(values: &[MetricResult], errors: &mut ErrorCounts) -> GpmReading {
    let mut value = |i: usize| match values.get(i)? {
        Ok(m) if m.value.is_finite() => Some(m.value),
        Ok(_) | Err(NvmlError::NotSupported) => None,
        Err(_) => {
            errors.add(ErrorSource::Nvml);
            None
        }
    };
    let ratio = |v: Option<f64>| v.map(|p| (p / 100.0).clamp(0.0, 1.0));
    let bytes = |v: Option<f64>| v.map(|mib| mib.max(0.0) * MIB);
    GpmReading {
        sm_active_ratio: ratio(value(0)),
        sm_occupancy_ratio: ratio(value(1)),
        tensor_active_ratio: ratio(value(2)),
        dram_active_ratio: ratio(value(3)),
        nvlink_transmit_bytes_per_second: bytes(value(4)),
        nvlink_receive_bytes_per_second: bytes(value(5)),
    }
}
