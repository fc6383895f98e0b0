//! GPU series from GPM (Hopper and later): what the SMs did, next to the
//! coarse `utilization.gpu`. Each has the DCGM profiling field it matches in
//! `docs/metrics.md`.

use collector::sample::GpmReading;
use collector::snapshot::GpuSnapshot;
use prometheus_client::encoding::DescriptorEncoder;

use super::family::{per_gpu, ratio};

/// A ratio series: its name (before the unit), help, and value.
type RatioSeries = (&'static str, &'static str, fn(&GpmReading) -> Option<f64>);

pub fn encode(e: &mut DescriptorEncoder, live: &[&GpuSnapshot]) -> Result<(), std::fmt::Error> {
    per_gpu(
        e,
        live,
        "stallwatch_gpu_gpm_supported",
        "1 when the GPU has GPM (Hopper and later) and its activity series are read, 0 when it has none.",
        None,
        |g| g.gpm_supported.map(|s| f64::from(u8::from(s))),
    )?;
    let r = ratio();
    let series: [RatioSeries; 4] = [
        (
            "stallwatch_gpu_sm_active",
            "Share of time the SMs had at least one warp assigned, averaged over SMs, over the last interval (GPM; DCGM_FI_PROF_SM_ACTIVE).",
            |m| m.sm_active_ratio,
        ),
        (
            "stallwatch_gpu_sm_occupancy",
            "Resident warps over the SMs' maximum, averaged over SMs, over the last interval (GPM; DCGM_FI_PROF_SM_OCCUPANCY).",
            |m| m.sm_occupancy_ratio,
        ),
        (
            "stallwatch_gpu_tensor_active",
            "Share of time any tensor pipe was active over the last interval (GPM; DCGM_FI_PROF_PIPE_TENSOR_ACTIVE).",
            |m| m.tensor_active_ratio,
        ),
        (
            "stallwatch_gpu_dram_active",
            "Share of DRAM bandwidth used over the last interval (GPM; DCGM_FI_PROF_DRAM_ACTIVE).",
            |m| m.dram_active_ratio,
        ),
    ];
    for (name, help, value) in series {
        per_gpu(e, live, name, help, Some(&r), |g| value(g.gpm.as_ref()?))?;
    }
    per_gpu(
        e,
        live,
        "stallwatch_gpu_nvlink_transmit_bytes_per_second",
        "NVLink bytes sent per second over the last interval, all links (GPM; DCGM_FI_PROF_NVLINK_TX_BYTES).",
        None,
        |g| g.gpm?.nvlink_transmit_bytes_per_second,
    )?;
    per_gpu(
        e,
        live,
        "stallwatch_gpu_nvlink_receive_bytes_per_second",
        "NVLink bytes received per second over the last interval, all links (GPM; DCGM_FI_PROF_NVLINK_RX_BYTES).",
        None,
        |g| g.gpm?.nvlink_receive_bytes_per_second,
    )
}
