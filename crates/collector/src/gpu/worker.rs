//! The NVML worker thread: owns the library handle, initialises it with
//! backoff, and answers one reading per request, gathered from the GPUs'
//! own threads (`device_thread.rs`) within a budget per GPU.

use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::time::{Duration, Instant};

use nvml_wrapper::Nvml;
use nvml_wrapper::error::NvmlError;

use super::device_thread::{self, Reading, Reply, Request};
use super::older::Calls;
use super::options::GpuOptions;
use crate::meter::{Meter, Work};
use crate::sample::{ErrorCounts, ErrorSource, GpuReadout, GpuSample};

const FIRST_RETRY: Duration = Duration::from_secs(1);

/// The most GPUs read (each has a thread of its own).
const MAX_GPUS: usize = 256;

/// The part of `gpu.timeout` the GPUs' threads have to answer in: the rest
/// is for the device count and handing the reading over.
const DEVICE_BUDGET_SHARE: f64 = 0.8;

/// One GPU's thread as the worker sees it.
struct Slot {
    requests: SyncSender<Request>,
    /// A request was sent and has not been answered.
    pending: bool,
    /// The reading of the round asked in, once it came back in time.
    fresh_in: Option<u64>,
    last: Option<Reading>,
}

struct Worker {
    options: GpuOptions,
    nvml: Option<Arc<Nvml>>,
    driver_version: Option<String>,
    /// Which process calls the driver can be asked (its version decides).
    calls: Calls,
    slots: Vec<Slot>,
    replies: Receiver<Reply>,
    reply_tx: SyncSender<Reply>,
    round: u64,
    next_attempt: Instant,
    backoff: Duration,
    /// The last init failure, logged once until it changes or NVML comes up.
    logged_failure: Option<String>,
    /// Told as each reading ends (this thread's and each GPU's thread's).
    meter: Meter,
}

pub fn run(
    options: GpuOptions,
    requests: Receiver<()>,
    replies: SyncSender<(GpuReadout, ErrorCounts)>,
    meter: Meter,
) {
    let (reply_tx, reply_rx) = mpsc::sync_channel(MAX_GPUS);
    let mut worker = Worker {
        options,
        nvml: None,
        driver_version: None,
        calls: Calls::Newest,
        slots: Vec::new(),
        replies: reply_rx,
        reply_tx,
        round: 0,
        next_attempt: Instant::now(),
        backoff: FIRST_RETRY,
        logged_failure: None,
        meter,
    };
    for () in requests {
        let mut errors = ErrorCounts::default();
        let readout = worker.read(&mut errors);
        if replies.send((readout, errors)).is_err() {
            return;
        }
        meter.finished(Work::Nvml);
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
                self.nvml = Some(Arc::new(nvml));
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
        let Some(nvml) = self.nvml.clone() else {
            return GpuReadout::default();
        };
        let count = match nvml.device_count() {
            Ok(n) => (n as usize).min(MAX_GPUS),
            Err(err) => {
                tracing::warn!(error = %err, "NVML device count failed; will initialise again");
                errors.add(ErrorSource::Nvml);
                // The GPUs' threads free what they keep of this session when
                // they are next asked with a new one.
                self.nvml = None;
                self.next_attempt = Instant::now() + self.backoff;
                return GpuReadout::default();
            }
        };
        self.round += 1;
        let round = self.round;
        // Late replies of earlier rounds free their GPUs to be asked again.
        while let Ok(reply) = self.replies.try_recv() {
            self.take(reply, round, errors);
        }
        while self.slots.len() < count {
            let Some(requests) = self.start_thread(self.slots.len(), errors) else {
                break;
            };
            self.slots.push(Slot {
                requests,
                pending: false,
                fresh_in: None,
                last: None,
            });
        }
        for i in 0..count.min(self.slots.len()) {
            if self.slots[i].pending {
                continue;
            }
            let request = || Request {
                nvml: nvml.clone(),
                calls: self.calls,
                round,
            };
            let mut sent = self.slots[i].requests.send(request()).is_ok();
            if !sent {
                // Its thread is gone (it cannot end on its own): another.
                if let Some(requests) = self.start_thread(i, errors) {
                    sent = requests.send(request()).is_ok();
                    self.slots[i].requests = requests;
                }
            }
            self.slots[i].pending = sent;
        }
        self.gather(round, errors);
        // Keep GPUs that fell off (a lost GPU may drop out of the count) so
        // they are still reported as down.
        let mut gpus = Vec::with_capacity(self.slots.len());
        let mut instances = Vec::new();
        for (i, slot) in self.slots.iter().enumerate() {
            let reading = match (&slot.last, i < count) {
                (Some(r), true) if slot.fresh_in == Some(round) => r.clone(),
                (Some(r), true) => {
                    errors.add(ErrorSource::NvmlTimeout);
                    r.stale()
                }
                (None, true) => {
                    errors.add(ErrorSource::NvmlTimeout);
                    continue;
                }
                (Some(r), false) => Reading {
                    gpu: gone(&r.gpu),
                    instances: Vec::new(),
                },
                (None, false) => continue,
            };
            gpus.push(reading.gpu);
            instances.extend(reading.instances);
        }
        gpus.extend(instances);
        GpuReadout {
            nvml_up: true,
            stale: false,
            read_at_seconds: 0.0,
            read_duration_seconds: 0.0,
            driver_version: self.driver_version.clone(),
            gpus,
        }
    }

    /// Starts the reading thread of GPU `index`; its request channel.
    fn start_thread(&self, index: usize, errors: &mut ErrorCounts) -> Option<SyncSender<Request>> {
        let (requests, request_rx) = mpsc::sync_channel(1);
        match device_thread::spawn(index as u32, request_rx, self.reply_tx.clone(), self.meter) {
            Ok(()) => Some(requests),
            Err(err) => {
                tracing::warn!(error = %err, gpu = index, "cannot start a GPU's reading thread");
                errors.add(ErrorSource::Nvml);
                None
            }
        }
    }

    /// Takes the GPUs' replies until every GPU asked in `round` answered or
    /// the budget is spent. A late reply of an earlier round is kept as the
    /// GPU's last reading, not as fresh.
    fn gather(&mut self, round: u64, errors: &mut ErrorCounts) {
        let deadline = Instant::now() + self.options.timeout.mul_f64(DEVICE_BUDGET_SHARE);
        loop {
            let waiting = self
                .slots
                .iter()
                .any(|s| s.pending && s.fresh_in != Some(round));
            if !waiting {
                return;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.replies.recv_timeout(left) {
                Ok(reply) => self.take(reply, round, errors),
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return,
            }
        }
    }

    fn take(&mut self, reply: Reply, round: u64, errors: &mut ErrorCounts) {
        let Some(slot) = self.slots.get_mut(reply.slot) else {
            return;
        };
        slot.pending = false;
        errors.merge(&reply.errors);
        slot.last = Some(reply.reading);
        if reply.round == round {
            slot.fresh_in = Some(round);
        }
    }
}

/// A GPU no longer counted: down, with its last identity.
fn gone(last: &GpuSample) -> GpuSample {
    GpuSample {
        index: last.index,
        uuid: last.uuid.clone(),
        name: last.name.clone(),
        pci_bus_id: last.pci_bus_id.clone(),
        up: false,
        ..GpuSample::default()
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
