//! GPU and per-process GPU series.

use collector::snapshot::{ClockEventReason, GpuSnapshot, Snapshot};
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Unit;

use super::family::{counter, exported_processes, gauge, hertz, info, no_labels, per_gpu, ratio};
use super::labels::Labels;

fn labels(g: &GpuSnapshot) -> Labels<'_> {
    Labels::gpu(g.index, &g.uuid)
}

pub fn encode(
    e: &mut DescriptorEncoder,
    s: &Snapshot,
    max_processes: usize,
) -> Result<(), std::fmt::Error> {
    gauge(
        e,
        "stallwatch_nvml_up",
        "1 when NVML is loaded and initialised, 0 when there is no library or driver.",
        None,
        no_labels(f64::from(u8::from(s.nvml_up))),
    )?;
    gauge(
        e,
        "stallwatch_nvml_stale",
        "1 when the latest NVML reading, or one GPU's, did not return in time; the measurements of the GPUs it holds back are then left out.",
        None,
        no_labels(f64::from(u8::from(s.any_gpu_stale()))),
    )?;
    if s.nvml_up {
        gauge(
            e,
            "stallwatch_nvml_last_read_timestamp",
            "When GPU data was last read from NVML, as a Unix time.",
            Some(&Unit::Seconds),
            no_labels(s.gpu_read_at_seconds),
        )?;
    }
    let all: Vec<&GpuSnapshot> = s.gpus.iter().collect();
    info(
        e,
        "stallwatch_gpu",
        "GPU identity.",
        all.iter().map(|g| {
            labels(g)
                .with("name", &g.name)
                .with("pci_bus_id", &g.pci_bus_id)
                .with("driver_version", s.driver_version.as_deref().unwrap_or(""))
        }),
    )?;
    info(
        e,
        "stallwatch_gpu_mig",
        "A MIG instance monitored as a GPU: its parent GPU and instance IDs.",
        all.iter().filter_map(|g| {
            let m = g.mig.as_ref()?;
            Some(
                labels(g)
                    .with("parent_gpu", m.parent_index)
                    .with("parent_uuid", &m.parent_uuid)
                    .with("gpu_instance", m.gpu_instance_id)
                    .with("compute_instance", m.compute_instance_id),
            )
        }),
    )?;
    per_gpu(
        e,
        &all,
        "stallwatch_gpu_up",
        "1 when the GPU answers, 0 when it is lost.",
        None,
        |g| Some(f64::from(u8::from(g.up))),
    )?;
    // Measurements only from fresh data of GPUs that answered.
    let live: Vec<&GpuSnapshot> = if s.gpu_stale {
        Vec::new()
    } else {
        s.gpus.iter().filter(|g| g.up && !g.stale).collect()
    };
    measurements(e, &live)?;
    super::gpm::encode(e, &live)?;
    clock_events(e, &live)?;
    processes(e, &live, max_processes)
}

fn measurements(e: &mut DescriptorEncoder, live: &[&GpuSnapshot]) -> Result<(), std::fmt::Error> {
    let r = ratio();
    per_gpu(
        e,
        live,
        "stallwatch_gpu_utilization",
        "Share of the last NVML sample period in which a kernel ran (utilization.gpu).",
        Some(&r),
        |g| g.utilization_ratio,
    )?;
    per_gpu(
        e,
        live,
        "stallwatch_gpu_memory_utilization",
        "Share of the last NVML sample period in which device memory was read or written (utilization.memory).",
        Some(&r),
        |g| g.memory_utilization_ratio,
    )?;
    per_gpu(
        e,
        live,
        "stallwatch_gpu_memory_used",
        "GPU memory allocated.",
        Some(&Unit::Bytes),
        |g| g.memory_used_bytes.map(|v| v as f64),
    )?;
    per_gpu(
        e,
        live,
        "stallwatch_gpu_memory_total",
        "GPU memory installed.",
        Some(&Unit::Bytes),
        |g| g.memory_total_bytes.map(|v| v as f64),
    )?;
    per_gpu(
        e,
        live,
        "stallwatch_gpu_temperature",
        "GPU die temperature.",
        Some(&Unit::Celsius),
        |g| g.temperature_celsius,
    )?;
    per_gpu(
        e,
        live,
        "stallwatch_gpu_power",
        "Power draw.",
        Some(&Unit::Other("watts".into())),
        |g| g.power_watts,
    )?;
    per_gpu(
        e,
        live,
        "stallwatch_gpu_power_limit",
        "Enforced power limit.",
        Some(&Unit::Other("watts".into())),
        |g| g.power_limit_watts,
    )?;
    counter(
        e,
        "stallwatch_gpu_energy",
        "Energy used since the driver was loaded.",
        Some(&Unit::Joules),
        live.iter()
            .filter_map(|g| Some((labels(g), g.energy_joules_total?))),
    )?;
    per_gpu(
        e,
        live,
        "stallwatch_gpu_sm_clock",
        "Current SM clock.",
        Some(&hertz()),
        |g| g.sm_clock_hertz,
    )?;
    per_gpu(
        e,
        live,
        "stallwatch_gpu_memory_clock",
        "Current memory clock.",
        Some(&hertz()),
        |g| g.memory_clock_hertz,
    )?;
    per_gpu(
        e,
        live,
        "stallwatch_gpu_pcie_transmit_bytes_per_second",
        "PCIe transmit throughput since the previous reading (the driver's byte counter), or over NVML's 20 ms window where it has no counter.",
        None,
        |g| g.pcie_transmit_bytes_per_second,
    )?;
    per_gpu(
        e,
        live,
        "stallwatch_gpu_pcie_receive_bytes_per_second",
        "PCIe receive throughput since the previous reading (the driver's byte counter), or over NVML's 20 ms window where it has no counter.",
        None,
        |g| g.pcie_receive_bytes_per_second,
    )
}

fn clock_events(e: &mut DescriptorEncoder, live: &[&GpuSnapshot]) -> Result<(), std::fmt::Error> {
    let series = live.iter().flat_map(|g| {
        let active = g.clock_events.as_ref();
        ClockEventReason::ALL.iter().filter_map(move |(reason, _)| {
            let on = active?.contains(reason);
            Some((
                labels(g).with("reason", reason.as_str()),
                f64::from(u8::from(on)),
            ))
        })
    });
    gauge(
        e,
        "stallwatch_gpu_clock_event_active",
        "1 while NVML reports this clock-event (throttle) reason.",
        None,
        series,
    )
}

fn processes(
    e: &mut DescriptorEncoder,
    live: &[&GpuSnapshot],
    max: usize,
) -> Result<(), std::fmt::Error> {
    let series = |value: fn(&collector::snapshot::GpuProcessSnapshot) -> Option<f64>| {
        live.iter().flat_map(move |g| {
            exported_processes(g, max).filter_map(move |p| {
                let l = labels(g).with("pid", p.pid).with("comm", &p.comm);
                Some((l, value(p)?))
            })
        })
    };
    gauge(
        e,
        "stallwatch_process_gpu_memory",
        "GPU memory used by a process (largest gpu.max_processes per GPU).",
        Some(&Unit::Bytes),
        series(|p| p.memory_bytes.map(|v| v as f64)),
    )?;
    gauge(
        e,
        "stallwatch_process_gpu_sm_utilization",
        "A process's mean SM utilization since the previous sample.",
        Some(&ratio()),
        series(|p| p.sm_utilization_ratio),
    )
}
