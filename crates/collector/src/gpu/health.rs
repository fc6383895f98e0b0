//! Reading a GPU's memory, NVLink and recovery state with one field-values
//! call (nvml-wrapper has no wrapper for remapped rows or the recovery
//! action, and one call is cheaper than a call per counter and link).

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

pub const FIELDS: [u32; 14] = [
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
];

/// `None` when the device answers none of the fields.
pub fn read(device: &Device, r: &mut Reader) -> Option<GpuHealth> {
    let ids: Vec<FieldId> = FIELDS.iter().map(|id| FieldId(*id)).collect();
    let samples = r.take(device.field_values_for(&ids))?;
    let health = from_samples(samples);
    (!health.is_empty()).then_some(health)
}

fn from_samples(samples: Vec<Result<FieldValueSample, NvmlError>>) -> GpuHealth {
    let mut h = GpuHealth::default();
    for s in samples.into_iter().flatten() {
        let Some(v) = s.value.ok().and_then(unsigned) else {
            continue;
        };
        match s.field.0 {
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
    h
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
