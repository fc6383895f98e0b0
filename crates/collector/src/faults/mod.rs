//! GPU faults: Xid errors from NVML events and from the kernel log, each on
//! a thread of its own, counted per GPU once (the two sources report the
//! same Xid) and handed to the sampler with each sample.
//!
//! - `events`: one NVML event set holding every GPU, waited on with a timeout.
//! - `kernel_log`: the driver's `NVRM: Xid` lines from `/dev/kmsg` (or a
//!   file or FIFO a test feeds), from the daemon's start onward; they carry
//!   the pid and cover Xids NVML events miss (79, 119, 120).
//! - `xid_counts`: matches lines to GPUs by PCI address, drops the second report
//!   of one Xid, and keeps the counts.

mod events;
mod kernel_log;
pub use kernel_log::Lines;
pub mod kmsg;
mod report;
pub mod xid;
pub mod xid_counts;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::time::Duration;

use crate::error::CollectError;
use crate::meter::Meter;
use crate::sample::GpuSample;
pub use crate::sample::faults::{FaultSource, KernelLogState};
pub use kmsg::PciAddr;
pub use report::{GpuRef, XidReport};
use xid_counts::XidCounts;

#[derive(Debug, Clone, Default)]
pub struct FaultOptions {
    /// Wait on NVML events (`gpu.library` is the library to load).
    pub nvml_events: bool,
    pub library: Option<PathBuf>,
    /// The kernel log to follow (`/dev/kmsg`); `None` reads none.
    pub kernel_log: Option<PathBuf>,
    /// Longest single wait on NVML events.
    pub event_wait: Duration,
}

/// How long an NVML event waits for its kernel-log line (which names the
/// process) before it is counted alone, while the kernel log is readable.
pub const WAIT_FOR_LINE_SECONDS: f64 = 1.5;

/// The receiving end: the sampler drains it once per sample.
pub struct FaultFeed {
    reports: Receiver<XidReport>,
    kernel_log: Arc<AtomicU8>,
    xid_counts: XidCounts,
    /// NVML events waiting for their kernel-log line.
    held: Vec<XidReport>,
}

impl FaultFeed {
    pub fn start(options: FaultOptions, meter: Meter) -> Result<Self, CollectError> {
        let (tx, reports) = mpsc::channel();
        let kernel_log = Arc::new(AtomicU8::new(0));
        if let Some(path) = options.kernel_log.clone() {
            let tx = tx.clone();
            let state = kernel_log.clone();
            std::thread::Builder::new()
                .name("kernel-log".into())
                .spawn(move || kernel_log::run(path, tx, state, meter))
                .map_err(CollectError::Thread)?;
        }
        if options.nvml_events {
            let library = options.library.clone();
            let wait = options.event_wait;
            std::thread::Builder::new()
                .name("nvml-events".into())
                .spawn(move || events::run(library, wait, tx, meter))
                .map_err(CollectError::Thread)?;
        }
        Ok(FaultFeed {
            reports,
            kernel_log,
            xid_counts: XidCounts::default(),
            held: Vec::new(),
        })
    }

    pub fn kernel_log_state(&self) -> KernelLogState {
        KernelLogState::from_u8(self.kernel_log.load(Ordering::Relaxed))
    }

    /// Takes the reports that arrived since the last call, counts them on
    /// their GPUs, and writes every GPU's counts into `gpus`.
    pub fn drain(&mut self, gpus: &mut [GpuSample], now_seconds: f64) {
        let mut batch = std::mem::take(&mut self.held);
        batch.extend(self.reports.try_iter());
        let wait = self.kernel_log_state() == KernelLogState::Readable;
        self.held = xid_counts::order(batch, now_seconds, wait, WAIT_FOR_LINE_SECONDS)
            .into_iter()
            .filter_map(|(report, hold)| {
                if hold {
                    return Some(report);
                }
                self.xid_counts.record(report, gpus);
                None
            })
            .collect();
        self.xid_counts.apply(gpus);
    }
}
