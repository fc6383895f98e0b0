//! The NVML worker thread: owns the library handle, initialises it with
//! backoff, and answers one reading per request.

use std::sync::mpsc::{Receiver, SyncSender};
use std::time::{Duration, Instant};

use nvml_wrapper::Nvml;
use nvml_wrapper::error::NvmlError;

use super::device::{DeviceMemo, down_sample, read_device};
use super::mig::{MigMemos, read_instances};
use super::older::Calls;
use super::options::GpuOptions;
use crate::sample::{ErrorCounts, ErrorSource, GpuReadout, GpuSample};

const FIRST_RETRY: Duration = Duration::from_secs(1);

struct Worker {
    options: GpuOptions,
    nvml: Option<Nvml>,
    driver_version: Option<String>,
    /// Which process calls the driver can be asked (its version decides).
    calls: Calls,
    memos: Vec<DeviceMemo>,
    /// GPM memos of MIG instances.
    mig: MigMemos,
    next_attempt: Instant,
    backoff: Duration,
    /// The last init failure, logged once until it changes or NVML comes up.
    logged_failure: Option<String>,
}

pub fn run(
    options: GpuOptions,
    requests: Receiver<()>,
    replies: SyncSender<(GpuReadout, ErrorCounts)>,
) {
    let mut worker = Worker {
        options,
        nvml: None,
        driver_version: None,
        calls: Calls::Newest,
        memos: Vec::new(),
        mig: MigMemos::default(),
        next_attempt: Instant::now(),
        backoff: FIRST_RETRY,
        logged_failure: None,
    };
    for () in requests {
        let mut errors = ErrorCounts::default();
        let readout = worker.read(&mut errors);
        if replies.send((readout, errors)).is_err() {
            return;
        }
        crate::cost::charge(crate::cost::Stage::Nvml);
    }
}

impl Worker {
    fn init(&mut self) -> Result<Nvml, NvmlError> {
        match &self.options.library {
            Some(path) => Nvml::builder().lib_path(path.as_os_str()).init(),
            None => Nvml::init(),
        }
    }

    fn ensure_init(&mut self, errors: &mut ErrorCounts) {
        if self.nvml.is_some() || Instant::now() < self.next_attempt {
            return;
        }
        match self.init() {
            Ok(nvml) => {
                self.driver_version = nvml.sys_driver_version().ok();
                self.calls = Calls::for_driver(self.driver_version.as_deref());
                tracing::info!(
                    driver_version = self.driver_version.as_deref().unwrap_or("unknown"),
                    library = ?self.options.library,
                    process_calls = ?self.calls,
                    "NVML initialised"
                );
                self.nvml = Some(nvml);
                self.backoff = FIRST_RETRY;
                self.logged_failure = None;
            }
            Err(err) => {
                let message = describe(&err);
                if self.logged_failure.as_deref() != Some(&message) {
                    tracing::warn!(
                        error = %message,
                        library = ?self.options.library,
                        "NVML unavailable; serving host metrics and retrying with backoff"
                    );
                    self.logged_failure = Some(message);
                }
                if !is_absent(&err) {
                    errors.add(ErrorSource::Nvml);
                }
                self.next_attempt = Instant::now() + self.backoff;
                self.backoff = (self.backoff * 2).min(self.options.init_retry_max);
            }
        }
    }

    fn read(&mut self, errors: &mut ErrorCounts) -> GpuReadout {
        self.ensure_init(errors);
        let Some(nvml) = &self.nvml else {
            return GpuReadout::default();
        };
        let count = match nvml.device_count() {
            Ok(n) => n,
            Err(err) => {
                tracing::warn!(error = %err, "NVML device count failed; will initialise again");
                errors.add(ErrorSource::Nvml);
                for memo in &mut self.memos {
                    memo.gpm.release(nvml);
                }
                self.mig.release_all(nvml);
                self.nvml = None;
                self.next_attempt = Instant::now() + self.backoff;
                return GpuReadout::default();
            }
        };
        // Keep memos of GPUs that fell off (a lost GPU may drop out of the
        // count) so they are still reported as down.
        if self.memos.len() < count as usize {
            self.memos.resize_with(count as usize, DeviceMemo::default);
        }
        let mut gpus: Vec<GpuSample> = self
            .memos
            .iter_mut()
            .enumerate()
            .filter(|(i, memo)| (*i as u32) < count || memo.identity.is_some())
            .map(|(i, memo)| match i as u32 {
                i if i < count => read_device(nvml, self.calls, i, memo, errors),
                i => down_sample(i, memo),
            })
            .collect();
        let mut instances = Vec::new();
        let mut seen = Vec::new();
        for g in gpus.iter_mut().filter(|g| g.up) {
            let Ok(parent) = nvml.device_by_index(g.index) else {
                continue;
            };
            let found = read_instances(
                nvml,
                self.calls,
                &parent,
                g,
                &mut self.mig,
                &mut seen,
                errors,
            );
            if !found.is_empty() {
                // With MIG on, processes belong to their instances.
                g.processes.clear();
            }
            instances.extend(found);
        }
        self.mig.keep_only(nvml, &seen);
        gpus.extend(instances);
        GpuReadout {
            nvml_up: true,
            stale: false,
            read_at_seconds: 0.0,
            driver_version: self.driver_version.clone(),
            gpus,
        }
    }
}

/// "No GPU here": no library, or no driver. Not counted as an error.
fn is_absent(err: &NvmlError) -> bool {
    matches!(
        err,
        NvmlError::LibloadingError(_) | NvmlError::LibraryNotFound | NvmlError::DriverNotLoaded
    )
}

fn describe(err: &NvmlError) -> String {
    match err {
        NvmlError::LibloadingError(e) => format!("cannot load the NVML library: {e}"),
        NvmlError::DriverNotLoaded => "the NVIDIA driver is not loaded".to_owned(),
        other => other.to_string(),
    }
}
