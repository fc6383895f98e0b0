//! One sampling step: GPUs, then the jobs on them, then the host.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Instant, SystemTime};

use crate::error::CollectError;
use crate::faults::{FaultFeed, FaultOptions};
use crate::gpu::{GpuOptions, GpuSource};
use crate::kubelet::{Kubelet, KubeletOptions};
use crate::proc::ProcReader;
use crate::proc::user::UserOptions;
use crate::sample::faults::KernelLogState;
use crate::sample::{ErrorCounts, Sample};
use crate::time::unix_seconds;

pub struct Collector {
    gpu: GpuSource,
    proc: ProcReader,
    faults: Option<FaultFeed>,
    kubelet: Option<Kubelet>,
}

impl Collector {
    pub fn new(gpu: GpuOptions, procfs_root: PathBuf) -> Result<Self, CollectError> {
        Ok(Collector {
            proc: ProcReader::new(procfs_root)?,
            gpu: GpuSource::start(gpu)?,
            faults: None,
            kubelet: None,
        })
    }

    /// How a job's user is read and shown.
    pub fn with_users(mut self, options: UserOptions) -> Self {
        self.proc.set_user_options(options);
        self
    }

    /// Also asks the kubelet which pod holds each GPU, on a thread of its
    /// own.
    pub fn with_kubelet(mut self, options: KubeletOptions) -> Result<Self, CollectError> {
        self.kubelet = Some(Kubelet::start(options)?);
        Ok(self)
    }

    /// Also watches for GPU faults: NVML events and the kernel log, on
    /// threads of their own.
    pub fn with_faults(mut self, options: FaultOptions) -> Result<Self, CollectError> {
        self.faults = Some(FaultFeed::start(options)?);
        Ok(self)
    }

    /// Takes one raw sample. Never fails: what cannot be read is left out and
    /// counted in `Sample::errors`.
    pub fn sample(&mut self) -> Sample {
        let started = Instant::now();
        let timestamp_seconds = unix_seconds(SystemTime::now());
        let mut errors = ErrorCounts::default();
        let mut gpu = self.gpu.read(timestamp_seconds, &mut errors);
        let mut kernel_log = KernelLogState::Disabled;
        if let Some(faults) = &mut self.faults {
            faults.drain(&mut gpu.gpus, timestamp_seconds);
            kernel_log = faults.kernel_log_state();
        }
        let mut holders: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for g in gpu.gpus.iter().filter(|g| g.up) {
            for p in &g.processes {
                holders.entry(p.pid).or_default().push(g.index);
            }
        }
        let holders: Vec<(u32, Vec<u32>)> = holders.into_iter().collect();
        let mut jobs = self.proc.read_jobs(&holders, &mut errors);
        let kubernetes = self
            .kubelet
            .as_mut()
            .map(|k| k.attribute(&gpu.gpus, &mut jobs));
        let host = self.proc.read_host(&mut errors);
        Sample {
            timestamp_seconds,
            duration_seconds: started.elapsed().as_secs_f64(),
            gpu,
            jobs,
            host,
            errors,
            kernel_log,
            kubernetes,
        }
    }
}
