//! One Xid report, from either source, before `xid_counts` matches it.

use super::kmsg::PciAddr;
use crate::sample::faults::FaultSource;

/// The GPU a report names: NVML events know the device, kernel lines only
/// its PCI address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuRef {
    Uuid(String),
    Pci(PciAddr),
}

/// One Xid report from either source.
#[derive(Debug, Clone, PartialEq)]
pub struct XidReport {
    pub at_seconds: f64,
    pub gpu: GpuRef,
    pub xid: u32,
    pub source: FaultSource,
    pub pid: Option<u32>,
    pub comm: Option<String>,
    pub detail: String,
}
