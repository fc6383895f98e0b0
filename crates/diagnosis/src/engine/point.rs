//! What one sample of a GPU puts in its history.

use std::collections::VecDeque;

use crate::types::activity::ActivitySignal;
use crate::types::frame::{Frame, GpuFrame, JobFrame};
use crate::window::Point;

const THROTTLE_MASK: u64 = crate::detect::THROTTLE_MASK;

pub(super) fn point(
    t: f64,
    gpu: &GpuFrame,
    frame: &Frame,
    warmed: &[&JobFrame],
    max_process_cpu: f64,
) -> Point {
    let sum =
        |f: fn(&JobFrame) -> Option<f64>| warmed.iter().filter_map(|j| f(j)).reduce(|a, b| a + b);
    let activity = match (gpu.utilization, gpu.sm_active) {
        (Some(_), _) => Some(ActivitySignal::UtilizationGpu),
        (None, Some(_)) => Some(ActivitySignal::GpmSmActive),
        (None, None) => None,
    };
    let steal = frame.host.cpu_steal;
    let spread = crate::detect::spread_load(warmed, max_process_cpu, steal);
    Point {
        t,
        utilization: gpu.utilization.or(gpu.sm_active),
        activity,
        sm_active: gpu.sm_active,
        tensor_active: gpu.tensor_active,
        dram_active: gpu.dram_active,
        nvlink_bytes_per_second: gpu.nvlink_bytes_per_second,
        pcie_bytes_per_second: gpu.pcie_bytes_per_second,
        has_job: !warmed.is_empty(),
        job_cpu: sum(|j| j.cpu_cores),
        top_thread_cpu: warmed
            .iter()
            .filter_map(|j| j.top_threads.first().map(|th| th.cpu))
            .reduce(f64::max)
            .map(|cpu| crate::steal::thread_without_steal(cpu, steal, frame.host.cpu_utilization)),
        spread_cpu: spread.map(|s| s.cpu),
        spread_demand: spread.map(|s| s.demand),
        disk_sleep: warmed.iter().any(|j| j.threads_disk_sleep > 0),
        threads_running: warmed.iter().map(|j| j.threads_running).sum(),
        threads_total: warmed.iter().map(|j| j.threads_total).sum(),
        host_cpu: frame.host.cpu_utilization,
        steal,
        psi_cpu: frame.host.psi_cpu_some,
        psi_io: frame.host.psi_io_some,
        power_watts: gpu.power_watts,
        throttled: gpu.clock_events & THROTTLE_MASK != 0,
    }
}

pub(super) fn median(values: &VecDeque<f64>) -> Option<f64> {
    let mut sorted: Vec<f64> = values.iter().copied().collect();
    sorted.sort_by(f64::total_cmp);
    sorted.get(sorted.len() / 2).copied()
}
