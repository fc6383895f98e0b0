//! GPU fault series: Xid errors counted by the daemon, and the memory,
//! NVLink and recovery state NVML reports.

use std::collections::BTreeMap;

use collector::faults::KernelLogState;
use collector::faults::xid;
use collector::sample::faults::{GpuHealth, RecoveryAction};
use collector::snapshot::{GpuSnapshot, Snapshot};
use prometheus_client::encoding::DescriptorEncoder;

use super::family::{counter, gauge, no_labels};
use super::labels::{Labels, Value};

fn labels(g: &GpuSnapshot) -> Labels<'_> {
    Labels::gpu(g.index, &g.uuid)
}

fn with<'a>(g: &'a GpuSnapshot, key: &'static str, value: &'a str) -> Labels<'a> {
    labels(g).with(key, value)
}

pub fn encode(e: &mut DescriptorEncoder, s: &Snapshot) -> Result<(), std::fmt::Error> {
    if s.kernel_log != KernelLogState::Disabled {
        gauge(
            e,
            "stallwatch_kernel_log_readable",
            "1 when the kernel log (faults.kernel_log) is being read for the driver's Xid lines, 0 when it cannot be opened (CAP_SYSLOG missing where kernel.dmesg_restrict=1).",
            None,
            no_labels(f64::from(u8::from(
                s.kernel_log == KernelLogState::Readable,
            ))),
        )?;
    }
    // Counted by the daemon: exported for lost GPUs and stale readings too.
    counter(
        e,
        "stallwatch_gpu_xid_errors",
        "Xid errors on the GPU since the daemon started, from NVML events and the kernel log (one report of each), by Xid: the catalogued ones (docs/faults.md), the rest as other.",
        None,
        s.gpus.iter().flat_map(|g| {
            // The catalogued Xids by number, then the rest together as `other`.
            let mut by_label: BTreeMap<Option<u32>, u64> = BTreeMap::new();
            for (x, n) in &g.xid_errors_total {
                let key = xid::lookup(*x).map(|info| info.xid);
                *by_label.entry(key).or_default() += n;
            }
            by_label.into_iter().map(move |(key, n)| {
                let value = key.map_or(Value::Str("other"), Value::from);
                (labels(g).with("xid", value), n as f64)
            })
        }),
    )?;
    let live: Vec<(&GpuSnapshot, &GpuHealth)> = if s.gpu_stale {
        Vec::new()
    } else {
        s.gpus
            .iter()
            .filter(|g| g.up && !g.stale)
            .filter_map(|g| Some((g, g.health.as_ref()?)))
            .collect()
    };
    health(e, &live)
}

type Pick = fn(&GpuHealth) -> Option<u64>;

fn by_type<'a>(
    live: &'a [(&'a GpuSnapshot, &'a GpuHealth)],
    key: &'static str,
    kinds: &'a [(&'static str, Pick)],
) -> impl Iterator<Item = (Labels<'a>, f64)> + 'a {
    live.iter().flat_map(move |(g, h)| {
        kinds
            .iter()
            .filter_map(move |(name, pick)| Some((with(g, key, name), pick(h)? as f64)))
    })
}

fn flag<'a>(
    live: &[(&'a GpuSnapshot, &GpuHealth)],
    pick: fn(&GpuHealth) -> Option<bool>,
) -> Vec<(Labels<'a>, f64)> {
    live.iter()
        .filter_map(|(g, h)| Some((labels(g), f64::from(u8::from(pick(h)?)))))
        .collect()
}

fn health(
    e: &mut DescriptorEncoder,
    live: &[(&GpuSnapshot, &GpuHealth)],
) -> Result<(), std::fmt::Error> {
    let ecc: [(&str, Pick); 2] = [
        ("corrected", |h| h.ecc_corrected),
        ("uncorrected", |h| h.ecc_uncorrected),
    ];
    counter(
        e,
        "stallwatch_gpu_ecc_errors",
        "ECC memory errors since the driver loaded (NVML volatile counts), by type.",
        None,
        by_type(live, "type", &ecc),
    )?;
    let retired: [(&str, Pick); 2] = [
        ("single_bit", |h| h.retired_pages_single_bit),
        ("double_bit", |h| h.retired_pages_double_bit),
    ];
    gauge(
        e,
        "stallwatch_gpu_retired_pages",
        "GPU memory pages retired for ECC errors, by cause (GPUs before Ampere).",
        None,
        by_type(live, "cause", &retired),
    )?;
    gauge(
        e,
        "stallwatch_gpu_retired_pages_pending",
        "1 when a page retirement waits for the next driver reload.",
        None,
        flag(live, |h| h.retired_pages_pending),
    )?;
    let remapped: [(&str, Pick); 2] = [
        ("correctable", |h| h.remapped_rows_correctable),
        ("uncorrectable", |h| h.remapped_rows_uncorrectable),
    ];
    gauge(
        e,
        "stallwatch_gpu_remapped_rows",
        "GPU memory rows remapped, by the kind of error that caused it (Ampere and later).",
        None,
        by_type(live, "type", &remapped),
    )?;
    gauge(
        e,
        "stallwatch_gpu_row_remap_pending",
        "1 when a row remapping waits for the next GPU reset.",
        None,
        flag(live, |h| h.row_remap_pending),
    )?;
    gauge(
        e,
        "stallwatch_gpu_row_remap_failure",
        "1 when a row remapping failed: the GPU needs service.",
        None,
        flag(live, |h| h.row_remap_failure),
    )?;
    let nvlink: [(&str, Pick); 4] = [
        ("crc_flit", |h| h.nvlink_crc_flit_errors),
        ("crc_data", |h| h.nvlink_crc_data_errors),
        ("replay", |h| h.nvlink_replay_errors),
        ("recovery", |h| h.nvlink_recovery_errors),
    ];
    counter(
        e,
        "stallwatch_gpu_nvlink_errors",
        "NVLink errors summed over the GPU's links since the driver loaded, by type.",
        None,
        by_type(live, "type", &nvlink),
    )?;
    gauge(
        e,
        "stallwatch_gpu_recovery_action",
        "The driver's recommended recovery action for the GPU: 1 for the current one, 0 for the others.",
        None,
        live.iter().flat_map(|(g, h)| {
            let current = h.recovery_action;
            RecoveryAction::ALL
                .into_iter()
                .filter(move |_| current.is_some())
                .map(move |a| {
                    (
                        with(g, "action", a.as_str()),
                        f64::from(u8::from(current == Some(a))),
                    )
                })
        }),
    )
}
