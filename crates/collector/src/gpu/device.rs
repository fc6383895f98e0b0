//! Reading one GPU through nvml-wrapper into a `GpuSample`.

use std::collections::HashMap;

use nvml_wrapper::enum_wrappers::device::{Clock, PcieUtilCounter, TemperatureSensor};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::struct_wrappers::device::ProcessInfo;
use nvml_wrapper::{Device, Nvml};

use super::gpm::{self, GpmMemo};
use super::health::{PcieCounters, Telemetry};
use super::older::{self, Calls};
use super::reader::Reader;
use crate::sample::{ErrorCounts, ErrorSource, GpuProcessKind, GpuProcessSample, GpuSample};

/// Where the driver has no PCIe byte counter fields, `nvmlDeviceGetPcieThroughput`
/// (20 ms a direction) is asked once in this many readings, its rates kept
/// between.
const PCIE_FALLBACK_EVERY: u32 = 10;

/// Identity of a GPU that does not change while the driver is loaded.
#[derive(Debug, Clone, Default)]
pub struct Identity {
    pub uuid: String,
    pub name: String,
    pub pci_bus_id: String,
}

/// What is kept per GPU index between samples.
#[derive(Debug, Default)]
pub struct DeviceMemo {
    pub identity: Option<Identity>,
    /// NVML timestamp (µs) of the newest process-utilization sample seen.
    pub last_seen_us: u64,
    /// The previous GPM sample.
    pub gpm: GpmMemo,
    /// The device handle, fetched once (`nvmlDeviceGetHandleByIndex` takes
    /// milliseconds) and again after the GPU was lost or stopped answering.
    /// An `nvmlDevice_t`, kept as an address: a `Device` borrows the `Nvml`.
    pub handle: Option<usize>,
    /// The PCIe byte counters at the previous reading.
    pcie_counters: Option<PcieCounters>,
    /// The PCIe rates from the slow fallback call, and readings since it.
    pcie_fallback: Option<(Option<f64>, Option<f64>)>,
    pcie_fallback_age: u32,
}

impl DeviceMemo {
    /// Forgets what belongs to one driver session (the handle), for a new one.
    pub fn forget_handle(&mut self) {
        self.handle = None;
    }
}

/// A GPU that is known but does not answer: `up: false`, last identity.
pub fn down_sample(index: u32, memo: &DeviceMemo) -> GpuSample {
    let id = memo.identity.clone().unwrap_or_default();
    GpuSample {
        index,
        uuid: id.uuid,
        name: id.name,
        pci_bus_id: id.pci_bus_id,
        up: false,
        ..GpuSample::default()
    }
}

/// Reads GPU `index`. Returns a sample with `up: false` (and the last known
/// identity) when the GPU is lost or its handle cannot be had.
pub fn read_device(
    nvml: &Nvml,
    calls: Calls,
    index: u32,
    memo: &mut DeviceMemo,
    errors: &mut ErrorCounts,
) -> GpuSample {
    let down = |memo: &mut DeviceMemo| {
        // Fetched again next time: the GPU may come back under a new handle.
        memo.handle = None;
        down_sample(index, memo)
    };
    let device = match memo.handle {
        // SAFETY: the handle came from this `Nvml`'s `device_by_index` (the
        // worker forgets it when the library is initialised again).
        Some(raw) => unsafe { Device::new(raw as _, nvml) },
        None => match nvml.device_by_index(index) {
            Ok(d) => {
                // SAFETY: only the address is kept.
                memo.handle = Some(unsafe { d.handle() } as usize);
                d
            }
            Err(NvmlError::GpuLost) => return down(memo),
            Err(_) => {
                errors.add(ErrorSource::Nvml);
                return down(memo);
            }
        },
    };
    let mut r = Reader {
        errors,
        lost: false,
    };
    let identity = match r.take(device.uuid()) {
        Some(uuid) => match &memo.identity {
            Some(id) if id.uuid == uuid => id.clone(),
            _ => {
                memo.gpm.release(nvml);
                Identity {
                    name: r.take(device.name()).unwrap_or_default(),
                    pci_bus_id: r
                        .take(device.pci_info())
                        .map(|p| p.bus_id)
                        .unwrap_or_default(),
                    uuid,
                }
            }
        },
        None => return down(memo),
    };
    memo.identity = Some(identity.clone());

    let util = r.take(device.utilization_rates());
    let memory = r.take(older::memory_info(nvml, &device));
    let mut sample = GpuSample {
        index,
        uuid: identity.uuid,
        name: identity.name,
        pci_bus_id: identity.pci_bus_id,
        up: true,
        utilization_ratio: util.as_ref().map(|u| percent(u.gpu)),
        memory_utilization_ratio: util.as_ref().map(|u| percent(u.memory)),
        memory_used_bytes: memory.as_ref().map(|m| m.used),
        memory_total_bytes: memory.as_ref().map(|m| m.total),
        temperature_celsius: r
            .take(device.temperature(TemperatureSensor::Gpu))
            .map(f64::from),
        power_limit_watts: r
            .take(device.enforced_power_limit())
            .map(|mw| f64::from(mw) / 1e3),
        energy_joules: r
            .take(device.total_energy_consumption())
            .map(|mj| mj as f64 / 1e3),
        sm_clock_hertz: r.take(device.clock_info(Clock::SM)).map(mhz),
        memory_clock_hertz: r.take(device.clock_info(Clock::Memory)).map(mhz),
        clock_event_reasons: r.take(device.current_throttle_reasons()).map(|b| b.bits()),
        processes: Vec::new(),
        ..GpuSample::default()
    };
    let (health, telemetry) = super::health::read(&device, &mut r);
    sample.health = health;
    sample.power_watts = match telemetry.power_milliwatts {
        Some(mw) => Some(mw as f64 / 1e3),
        // An older driver: the averaged reading (milliseconds a call).
        None => r.take(device.power_usage()).map(|mw| f64::from(mw) / 1e3),
    };
    let (tx, rx) = pcie_rates(&device, &mut r, memo, &telemetry);
    sample.pcie_transmit_bytes_per_second = tx;
    sample.pcie_receive_bytes_per_second = rx;
    sample.processes = read_processes(nvml, calls, &device, &mut r, memo);
    let activity = gpm::read(nvml, &device, &mut memo.gpm, r.errors);
    sample.gpm = activity.reading;
    sample.gpm_supported = memo.gpm.supported;
    r.lost |= activity.lost;
    if r.lost {
        return down(memo);
    }
    sample
}

/// PCIe bytes a second each way: from the cumulative counters' growth since
/// the previous reading (none on the first, or across a counter going back:
/// a wrap or a reset), or, where the driver lacks them, from the slow
/// sampling call once in [`PCIE_FALLBACK_EVERY`] readings.
fn pcie_rates(
    device: &Device,
    r: &mut Reader,
    memo: &mut DeviceMemo,
    telemetry: &Telemetry,
) -> (Option<f64>, Option<f64>) {
    if let Some(now) = telemetry.pcie_counters {
        let before = memo.pcie_counters.replace(now);
        memo.pcie_fallback = None;
        let Some(before) = before else {
            return (None, None);
        };
        let seconds = (now.timestamp_us - before.timestamp_us) as f64 / 1e6;
        let rate = |a: u64, b: u64| (seconds > 0.0 && b >= a).then(|| (b - a) as f64 / seconds);
        return (
            rate(before.transmit_bytes, now.transmit_bytes),
            rate(before.receive_bytes, now.receive_bytes),
        );
    }
    memo.pcie_counters = None;
    match memo.pcie_fallback {
        Some(rates) if memo.pcie_fallback_age + 1 < PCIE_FALLBACK_EVERY => {
            memo.pcie_fallback_age += 1;
            rates
        }
        _ => {
            let rates = (
                r.take(device.pcie_throughput(PcieUtilCounter::Send))
                    .map(kilobytes),
                r.take(device.pcie_throughput(PcieUtilCounter::Receive))
                    .map(kilobytes),
            );
            memo.pcie_fallback = Some(rates);
            memo.pcie_fallback_age = 0;
            rates
        }
    }
}

fn percent(p: u32) -> f64 {
    f64::from(p.min(100)) / 100.0
}

fn mhz(v: u32) -> f64 {
    f64::from(v) * 1e6
}

fn kilobytes(v: u32) -> f64 {
    f64::from(v) * 1024.0
}

fn read_processes(
    nvml: &Nvml,
    calls: Calls,
    device: &Device,
    r: &mut Reader,
    memo: &mut DeviceMemo,
) -> Vec<GpuProcessSample> {
    let mut out: Vec<GpuProcessSample> = Vec::new();
    for kind in [
        GpuProcessKind::Compute,
        GpuProcessKind::Graphics,
        GpuProcessKind::Mps,
    ] {
        let list = r.take(older::processes(nvml, device, calls, kind));
        for info in list.unwrap_or_default() {
            push_process(&mut out, kind, &info);
        }
    }
    if out.is_empty() {
        return out;
    }
    // Samples since the newest one seen; NOT_FOUND means no process used the
    // GPU since then (0%), not an error.
    let utilization = match device.process_utilization_stats(memo.last_seen_us) {
        Ok(samples) => Some(samples),
        Err(NvmlError::NotFound) => Some(Vec::new()),
        other => r.take(other),
    };
    let Some(samples) = utilization else {
        return out;
    };
    let mut sums: HashMap<u32, (u32, u32, u32)> = HashMap::new();
    for s in samples
        .iter()
        .filter(|s| s.sm_util <= 100 && s.mem_util <= 100)
    {
        memo.last_seen_us = memo.last_seen_us.max(s.timestamp);
        let e = sums.entry(s.pid).or_default();
        *e = (e.0 + s.sm_util, e.1 + s.mem_util, e.2 + 1);
    }
    for p in &mut out {
        let (sm, mem, n) = sums.get(&p.pid).copied().unwrap_or((0, 0, 1));
        p.sm_utilization_ratio = Some(f64::from(sm) / f64::from(n) / 100.0);
        p.memory_utilization_ratio = Some(f64::from(mem) / f64::from(n) / 100.0);
    }
    out
}

/// Adds a process record, merging a pid that appears in both lists.
pub(super) fn push_process(
    out: &mut Vec<GpuProcessSample>,
    kind: GpuProcessKind,
    info: &ProcessInfo,
) {
    let memory = match info.used_gpu_memory {
        UsedGpuMemory::Used(bytes) => Some(bytes),
        UsedGpuMemory::Unavailable => None,
    };
    if let Some(existing) = out.iter_mut().find(|p| p.pid == info.pid) {
        existing.memory_bytes = match (existing.memory_bytes, memory) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        return;
    }
    out.push(GpuProcessSample {
        pid: info.pid,
        kind,
        memory_bytes: memory,
        sm_utilization_ratio: None,
        memory_utilization_ratio: None,
    });
}
