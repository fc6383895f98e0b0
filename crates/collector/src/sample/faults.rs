//! What the fault readers report, as samples carry it: the kernel log's
//! state, a GPU's health fields, its latest Xid.

use serde::{Deserialize, Serialize};

/// Where an Xid report came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultSource {
    Nvml,
    KernelLog,
}

/// Whether the kernel log can be read: a closed set, exported as
/// `stallwatch_kernel_log_readable`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KernelLogState {
    #[default]
    Disabled,
    Readable,
    Unreadable,
}

impl KernelLogState {
    pub(crate) fn from_u8(v: u8) -> Self {
        match v {
            1 => KernelLogState::Readable,
            2 => KernelLogState::Unreadable,
            _ => KernelLogState::Disabled,
        }
    }
}

/// `nvmlDeviceGpuRecoveryAction_t` (field 230): what the driver says the
/// GPU needs. A closed set, exported as the `action` label of
/// `stallwatch_gpu_recovery_action`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecoveryAction {
    None,
    GpuReset,
    NodeReboot,
    DrainP2p,
    DrainAndReset,
}

impl RecoveryAction {
    pub const ALL: [RecoveryAction; 5] = [
        RecoveryAction::None,
        RecoveryAction::GpuReset,
        RecoveryAction::NodeReboot,
        RecoveryAction::DrainP2p,
        RecoveryAction::DrainAndReset,
    ];

    pub fn from_nvml(v: u64) -> Option<Self> {
        Self::ALL.get(usize::try_from(v).ok()?).copied()
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RecoveryAction::None => "none",
            RecoveryAction::GpuReset => "gpu_reset",
            RecoveryAction::NodeReboot => "node_reboot",
            RecoveryAction::DrainP2p => "drain_p2p",
            RecoveryAction::DrainAndReset => "drain_and_reset",
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuHealth {
    /// Volatile ECC error counts (since the driver loaded).
    pub ecc_corrected: Option<u64>,
    pub ecc_uncorrected: Option<u64>,
    /// Pages retired for single-bit and double-bit errors (pre-Ampere GPUs).
    pub retired_pages_single_bit: Option<u64>,
    pub retired_pages_double_bit: Option<u64>,
    pub retired_pages_pending: Option<bool>,
    /// Rows remapped for correctable and uncorrectable errors (Ampere and later).
    pub remapped_rows_correctable: Option<u64>,
    pub remapped_rows_uncorrectable: Option<u64>,
    /// A remapping waits for the next GPU reset.
    pub row_remap_pending: Option<bool>,
    /// A remapping failed: the GPU needs service.
    pub row_remap_failure: Option<bool>,
    /// NVLink error counts summed over the links.
    pub nvlink_crc_flit_errors: Option<u64>,
    pub nvlink_crc_data_errors: Option<u64>,
    pub nvlink_replay_errors: Option<u64>,
    pub nvlink_recovery_errors: Option<u64>,
    pub recovery_action: Option<RecoveryAction>,
}

impl GpuHealth {
    pub fn is_empty(&self) -> bool {
        *self == GpuHealth::default()
    }
}

/// The latest Xid on a GPU, with what the reports said about it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct XidRecord {
    pub xid: u32,
    pub at_seconds: f64,
    pub pid: Option<u32>,
    pub comm: Option<String>,
    pub detail: String,
    pub source: FaultSource,
}
