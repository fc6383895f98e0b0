//! Reading a GPU's memory, NVLink and recovery state, its instant power and
//! its cumulative PCIe byte counters with one field-values call
//! (nvml-wrapper has no wrapper for remapped rows or the recovery action;
//! one call is cheaper than a call per counter and link, and the power and
//! PCIe fields take microseconds where `nvmlDeviceGetPowerUsage` takes
//! milliseconds and `nvmlDeviceGetPcieThroughput` 20 ms a direction).

use nvml_wrapper::Device;
use nvml_wrapper::enums::device::SampleValue;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::struct_wrappers::device::FieldValueSample;
use nvml_wrapper::structs::device::FieldId;

use super::reader::Reader;
use crate::sample::faults::{GpuHealth, RecoveryAction};

// Field ids from nvml.h (below 251: the same numbers on every driver).
const ECC_SBE_VOL_TOTAL: u32 = 3;
const ECC_DBE_VOL_TOTAL: u32 = 4;
const RETIRED_SBE: u32 = 29;
const RETIRED_DBE: u32 = 30;
const RETIRED_PENDING: u32 = 31;
const NVLINK_CRC_FLIT_TOTAL: u32 = 38;
const NVLINK_CRC_DATA_TOTAL: u32 = 45;
const NVLINK_REPLAY_TOTAL: u32 = 52;
const NVLINK_RECOVERY_TOTAL: u32 = 59;
const REMAPPED_COR: u32 = 142;
const REMAPPED_UNC: u32 = 143;
const REMAPPED_PENDING: u32 = 144;
const REMAPPED_FAILURE: u32 = 145;
const RECOVERY_ACTION: u32 = 230;
const POWER_INSTANT: u32 = 186;
const PCIE_COUNT_TX_BYTES: u32 = 197;
const PCIE_COUNT_RX_BYTES: u32 = 198;

pub const FIELDS: [u32; 17] = [
    ECC_SBE_VOL_TOTAL,
    ECC_DBE_VOL_TOTAL,
    RETIRED_SBE,
    RETIRED_DBE,
    RETIRED_PENDING,
    NVLINK_CRC_FLIT_TOTAL,
    NVLINK_CRC_DATA_TOTAL,
    NVLINK_REPLAY_TOTAL,
    NVLINK_RECOVERY_TOTAL,
    REMAPPED_COR,
    REMAPPED_UNC,
    REMAPPED_PENDING,
    REMAPPED_FAILURE,
    RECOVERY_ACTION,
    POWER_INSTANT,
    PCIE_COUNT_TX_BYTES,
    PCIE_COUNT_RX_BYTES,
];

/// The fast telemetry fields, each `None` where the driver lacks it (older
/// branches answer `NOT_SUPPORTED` per field).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Telemetry {
    pub power_milliwatts: Option<u64>,
    /// Cumulative PCIe bytes sent and received, with the driver's time of
    /// the reading (µs since the epoch).
    pub pcie_counters: Option<PcieCounters>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PcieCounters {
    pub transmit_bytes: u64,
    pub receive_bytes: u64,
    pub timestamp_us: i64,
}

/// The health fields (`None` when the device answers none of them) and the
/// telemetry fields.
pub fn read(device: &Device, r: &mut Reader) -> (Option<GpuHealth>, Telemetry) {
    let ids: Vec<FieldId> = FIELDS.iter().map(|id| FieldId(*id)).collect();
    let Some(samples) = r.take(device.field_values_for(&ids)) else {
        return (None, Telemetry::default());
    };
    let (health, telemetry) = from_samples(samples);
    ((!health.is_empty()).then_some(health), telemetry)
}

fn from_samples(samples: Vec<Result<FieldValueSample, NvmlError>>) -> (GpuHealth, Telemetry) {
    let mut h = GpuHealth::default();
    let mut t = Telemetry::default();
    let (mut tx, mut rx, mut at) = (None, None, 0);
    for s in samples.into_iter().flatten() {
        let Some(v) = s.value.ok().and_then(unsigned) else {
            continue;
        };
        match s.field.0 {
            POWER_INSTANT => t.power_milliwatts = Some(v),
            PCIE_COUNT_TX_BYTES => (tx, at) = (Some(v), s.timestamp),
            PCIE_COUNT_RX_BYTES => rx = Some(v),
            ECC_SBE_VOL_TOTAL => h.ecc_corrected = Some(v),
            ECC_DBE_VOL_TOTAL => h.ecc_uncorrected = Some(v),
            RETIRED_SBE => h.retired_pages_single_bit = Some(v),
            RETIRED_DBE => h.retired_pages_double_bit = Some(v),
            RETIRED_PENDING => h.retired_pages_pending = Some(v != 0),
            NVLINK_CRC_FLIT_TOTAL => h.nvlink_crc_flit_errors = Some(v),
            NVLINK_CRC_DATA_TOTAL => h.nvlink_crc_data_errors = Some(v),
            NVLINK_REPLAY_TOTAL => h.nvlink_replay_errors = Some(v),
            NVLINK_RECOVERY_TOTAL => h.nvlink_recovery_errors = Some(v),
            REMAPPED_COR => h.remapped_rows_correctable = Some(v),
            REMAPPED_UNC => h.remapped_rows_uncorrectable = Some(v),
            REMAPPED_PENDING => h.row_remap_pending = Some(v != 0),
            REMAPPED_FAILURE => h.row_remap_failure = Some(v != 0),
            RECOVERY_ACTION => h.recovery_action = RecoveryAction::from_nvml(v),
            _ => {}
        }
    }
    if let (Some(transmit_bytes), Some(receive_bytes)) = (tx, rx) {
        t.pcie_counters = Some(PcieCounters {
            transmit_bytes,
            receive_bytes,
            timestamp_us: at,
        });
    }
    (h, t)
}

/// A counter or flag as a whole number; negative or fractional values are
/// not one.
fn unsigned(v: SampleValue) -> Option<u64> {
    match v {
        SampleValue::U32(v) => Some(u64::from(v)),
        SampleValue::U64(v) => Some(v),
        SampleValue::I64(v) => u64::try_from(v).ok(),
        SampleValue::F64(v) if v >= 0.0 && v.fract() == 0.0 && v < 1e18 => Some(v as u64),
        SampleValue::F64(_) => None,
    }
}
