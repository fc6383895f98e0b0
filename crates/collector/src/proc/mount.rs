//! A procfs mount and this host's units: what every reader of it needs.

use std::path::{Path, PathBuf};

use procfs::prelude::*;
use procfs::{ExplicitSystemInfo, KernelStats, ProcResult};

/// The procfs mount being read (`/proc`, or a fixture tree), with the
/// units its numbers are in.
#[derive(Debug, Clone)]
pub struct Mount {
    pub(super) root: PathBuf,
    pub(super) boot_time_seconds: u64,
    pub(super) ticks_per_second: u64,
    pub(super) page_size_bytes: u64,
}

impl Mount {
    pub(super) fn root(&self) -> &Path {
        &self.root
    }

    pub(super) fn ticks_to_seconds(&self, ticks: u64) -> f64 {
        ticks as f64 / self.ticks_per_second as f64
    }
}

/// `<root>/stat`. The parser wants system info only for the tick rate it
/// stores; boot time is what it reads.
pub(super) fn read_kernel_stats(
    path: &Path,
    ticks_per_second: u64,
    page_size: u64,
) -> ProcResult<KernelStats> {
    let info = ExplicitSystemInfo {
        boot_time_secs: 0,
        ticks_per_second,
        page_size,
        is_little_endian: cfg!(target_endian = "little"),
    };
    KernelStats::from_file(path, &info)
}
