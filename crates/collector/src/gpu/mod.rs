//! GPUs through NVML, on a worker thread of their own.
//!
//! Every NVML call runs off the sampler: the `nvml` worker thread owns the
//! library and asks each GPU's own thread for its reading (`device_thread`).
//! The sampler asks the worker for a reading and waits at most `timeout`;
//! the worker waits for the GPUs for most of it, and a GPU that has not
//! answered by then (a slow or wedged GPU) is reported with its last
//! reading marked stale while the others are fresh. When the worker itself
//! hangs (the device count, a wedged driver) the sampler goes on with the
//! last reading marked stale, and asks again only once the hung request has
//! returned, so threads never pile up.

mod device;
mod device_thread;
mod gpm;
mod health;
mod mig;
mod older;
mod options;
mod reader;
mod worker;

use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::time::Duration;

use crate::error::CollectError;
use crate::meter::Meter;
use crate::sample::{ErrorCounts, ErrorSource, GpuReadout};
pub use options::GpuOptions;

pub struct GpuSource {
    requests: SyncSender<()>,
    replies: Receiver<(GpuReadout, ErrorCounts)>,
    pending: bool,
    last: GpuReadout,
    timeout: Duration,
}

impl GpuSource {
    pub fn start(options: GpuOptions, meter: Meter) -> Result<Self, CollectError> {
        let (requests, request_rx) = mpsc::sync_channel::<()>(1);
        let (reply_tx, replies) = mpsc::sync_channel(1);
        let timeout = options.timeout;
        std::thread::Builder::new()
            .name("nvml".into())
            .spawn(move || worker::run(options, request_rx, reply_tx, meter))
            .map_err(CollectError::Thread)?;
        Ok(GpuSource {
            requests,
            replies,
            pending: false,
            last: GpuReadout::default(),
            timeout,
        })
    }

    /// A fresh reading, or the last one marked stale when NVML did not answer
    /// within the timeout.
    pub fn read(&mut self, now_seconds: f64, errors: &mut ErrorCounts) -> GpuReadout {
        let started = std::time::Instant::now();
        let mut readout = self.read_waiting(now_seconds, errors);
        readout.read_duration_seconds = started.elapsed().as_secs_f64();
        readout
    }

    fn read_waiting(&mut self, now_seconds: f64, errors: &mut ErrorCounts) -> GpuReadout {
        if !self.pending {
            if self.requests.send(()).is_err() {
                // The worker is gone (it cannot be restarted): report no NVML.
                errors.add(ErrorSource::Nvml);
                return GpuReadout::default();
            }
            self.pending = true;
        }
        match self.replies.recv_timeout(self.timeout) {
            Ok((mut readout, worker_errors)) => {
                self.pending = false;
                errors.merge(&worker_errors);
                readout.read_at_seconds = now_seconds;
                self.last = readout.clone();
                readout
            }
            Err(RecvTimeoutError::Timeout) => {
                errors.add(ErrorSource::NvmlTimeout);
                GpuReadout {
                    stale: true,
                    ..self.last.clone()
                }
            }
            Err(RecvTimeoutError::Disconnected) => {
                self.pending = false;
                errors.add(ErrorSource::Nvml);
                GpuReadout::default()
            }
        }
    }
}
