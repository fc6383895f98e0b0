//! Host series: CPU, pressure stall information, memory.

use collector::snapshot::HostSnapshot;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Unit;

use super::family::{gauge, ratio};
use super::labels::Labels;

fn one(value: Option<f64>) -> Option<(Labels<'static>, f64)> {
    Some((Labels::none(), value?))
}

pub fn encode(e: &mut DescriptorEncoder, h: &HostSnapshot) -> Result<(), std::fmt::Error> {
    gauge(
        e,
        "stallwatch_host_cpu_utilization",
        "Share of all CPU time that was busy over the last interval.",
        Some(&ratio()),
        one(h.cpu_utilization_ratio),
    )?;
    gauge(
        e,
        "stallwatch_host_cpu_busiest_core",
        "Busy share of the busiest core over the last interval.",
        Some(&ratio()),
        one(h.busiest_core_ratio),
    )?;
    gauge(
        e,
        "stallwatch_host_cpu_steal",
        "Share of all CPU time the hypervisor took (steal) over the last interval: time a CPU had work and did not run, charged to no thread.",
        Some(&ratio()),
        one(h.cpu_steal_ratio),
    )?;
    gauge(
        e,
        "stallwatch_host_cpus",
        "Online CPUs.",
        None,
        one(h.cpus.map(f64::from)),
    )?;
    let p = &h.pressure;
    let psi = [
        ("cpu", "some", p.cpu_some),
        ("cpu", "full", p.cpu_full),
        ("io", "some", p.io_some),
        ("io", "full", p.io_full),
        ("memory", "some", p.memory_some),
        ("memory", "full", p.memory_full),
    ];
    gauge(
        e,
        "stallwatch_host_pressure",
        "Pressure stall information: share of the last 10 s in which some or all tasks stalled on the resource (avg10).",
        Some(&ratio()),
        psi.into_iter().filter_map(|(resource, scope, v)| {
            Some((
                Labels::none()
                    .with("resource", resource)
                    .with("scope", scope),
                v?,
            ))
        }),
    )?;
    let m = h.memory.as_ref();
    gauge(
        e,
        "stallwatch_host_memory_total",
        "Host memory (MemTotal).",
        Some(&Unit::Bytes),
        one(m.map(|m| m.total_bytes as f64)),
    )?;
    gauge(
        e,
        "stallwatch_host_memory_available",
        "Host memory available without swapping (MemAvailable).",
        Some(&Unit::Bytes),
        one(m.map(|m| m.available_bytes as f64)),
    )?;
    gauge(
        e,
        "stallwatch_host_swap_total",
        "Swap space (SwapTotal).",
        Some(&Unit::Bytes),
        one(m.map(|m| m.swap_total_bytes as f64)),
    )?;
    gauge(
        e,
        "stallwatch_host_swap_free",
        "Unused swap space (SwapFree).",
        Some(&Unit::Bytes),
        one(m.map(|m| m.swap_free_bytes as f64)),
    )
}
