//! One thread per GPU. Each reads its GPU (and the GPU's MIG instances) when
//! asked, so that a slow or wedged GPU holds up only its own reading: the
//! NVML worker waits for every GPU's answer until one budget runs out and
//! goes on with the last reading of each GPU that has not answered, marked
//! stale. A GPU whose reading has not come back is not asked again until it
//! does, so threads never pile up. NVML is thread-safe; calls on different
//! GPUs run side by side, as they do in the driver.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender};

use nvml_wrapper::{Device, Nvml};

use super::device::{DeviceMemo, read_device};
use super::mig::{MigMemos, read_instances, split_shares};
use super::older::Calls;
use crate::error::CollectError;
use crate::meter::{Meter, Work};
use crate::sample::{ErrorCounts, GpuSample};

/// A request to read GPU `index`, in reading `round`.
pub struct Request {
    pub nvml: Arc<Nvml>,
    pub calls: Calls,
    pub round: u64,
}

/// What one GPU's thread read: the GPU, and its MIG instances when MIG is on.
#[derive(Debug, Clone)]
pub struct Reading {
    pub gpu: GpuSample,
    pub instances: Vec<GpuSample>,
}

impl Reading {
    /// The same reading, marked as not refreshed.
    pub fn stale(&self) -> Reading {
        let mark = |g: &GpuSample| GpuSample {
            stale: true,
            ..g.clone()
        };
        Reading {
            gpu: mark(&self.gpu),
            instances: self.instances.iter().map(mark).collect(),
        }
    }
}

pub struct Reply {
    pub slot: usize,
    pub round: u64,
    pub reading: Reading,
    pub errors: ErrorCounts,
}

/// Starts the thread of GPU `index`; it ends when `requests` closes.
pub fn spawn(
    index: u32,
    requests: Receiver<Request>,
    replies: SyncSender<Reply>,
    meter: Meter,
) -> Result<(), CollectError> {
    std::thread::Builder::new()
        .name(format!("nvml-gpu{index}"))
        .spawn(move || run(index, requests, replies, meter))
        .map(drop)
        .map_err(CollectError::Thread)
}

/// What one GPU's thread keeps between readings, and the `Nvml` it belongs to.
#[derive(Default)]
struct Memos {
    nvml: Option<Arc<Nvml>>,
    device: DeviceMemo,
    mig: MigMemos,
}

impl Memos {
    /// Frees what belongs to the library session kept (GPM samples) and
    /// forgets its handles.
    fn release(&mut self) {
        if let Some(nvml) = self.nvml.take() {
            self.device.gpm.release(&nvml);
            self.mig.release_all(&nvml);
            self.device.forget_handle();
        }
    }
}

fn run(index: u32, requests: Receiver<Request>, replies: SyncSender<Reply>, meter: Meter) {
    let mut memos = Memos::default();
    for request in requests {
        if !memos
            .nvml
            .as_ref()
            .is_some_and(|n| Arc::ptr_eq(n, &request.nvml))
        {
            // The library was initialised again (a driver reload).
            memos.release();
            memos.nvml = Some(request.nvml.clone());
        }
        let mut errors = ErrorCounts::default();
        let reading = read(&request.nvml, request.calls, index, &mut memos, &mut errors);
        let reply = Reply {
            slot: index as usize,
            round: request.round,
            reading,
            errors,
        };
        meter.finished(Work::Nvml);
        if replies.send(reply).is_err() {
            break;
        }
    }
    memos.release();
}

fn read(
    nvml: &Nvml,
    calls: Calls,
    index: u32,
    memos: &mut Memos,
    errors: &mut ErrorCounts,
) -> Reading {
    let mut gpu = read_device(nvml, calls, index, &mut memos.device, errors);
    let mut instances = Vec::new();
    if let Some(raw) = memos.device.handle.filter(|_| gpu.up) {
        // SAFETY: the handle came from this `Nvml` (see `Memos::release`).
        let parent = unsafe { Device::new(raw as _, nvml) };
        let mut seen = Vec::new();
        instances = read_instances(
            nvml,
            calls,
            &parent,
            &gpu,
            &mut memos.mig,
            &mut seen,
            errors,
        );
        memos.mig.keep_only(nvml, &seen);
        if !instances.is_empty() {
            // With MIG on, processes belong to their instances, and the GPU
            // keeps the slices none of them holds.
            gpu.processes.clear();
            gpu.share = Some(split_shares(&mut instances));
        }
    }
    Reading { gpu, instances }
}
