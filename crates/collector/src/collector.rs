//! One sampling step: GPUs, then the jobs on them, then the host.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Instant, SystemTime};

use crate::error::CollectError;
use crate::faults::{FaultFeed, FaultOptions};
use crate::gpu::{GpuOptions, GpuSource};
use crate::identity::kubelet::{Kubelet, KubeletOptions};
use crate::identity::user::UserOptions;
use crate::meter::{Meter, Work};
use crate::proc::ProcReader;
use crate::sample::faults::KernelLogState;
use crate::sample::{ErrorCounts, GpuReadout, Sample};
use crate::thread_reads::{Reason, ThreadReadCounts, ThreadReads};
use crate::time::unix_seconds;

pub struct Collector {
    gpu: GpuSource,
    proc: ProcReader,
    faults: Option<FaultFeed>,
    kubelet: Option<Kubelet>,
    /// Told as each piece of the collector's work ends, on its thread.
    meter: Meter,
    /// Which jobs' threads the next sample reads.
    thread_reads: ThreadReads,
    samples: u64,
}

impl Collector {
    /// A collector whose threads (the sampler's included) tell `meter` of
    /// each piece of work they finish.
    pub fn new(gpu: GpuOptions, procfs_root: PathBuf, meter: Meter) -> Result<Self, CollectError> {
        Ok(Collector {
            proc: ProcReader::new(procfs_root)?,
            gpu: GpuSource::start(gpu, meter)?,
            faults: None,
            kubelet: None,
            meter,
            thread_reads: ThreadReads::default(),
            samples: 0,
        })
    }

    /// Reads a job's threads every sample only while it needs it (see
    /// thread_reads.rs): while a GPU of it reads under `drop_below` (and
    /// for `hold` samples after) or its recent mean under `mean_below`, and
    /// the others every `every` samples.
    pub fn with_thread_reads(
        mut self,
        drop_below: f64,
        mean_below: f64,
        hold: u64,
        every: u64,
    ) -> Self {
        self.thread_reads.drop_below = Some(drop_below);
        self.thread_reads.mean_below = mean_below;
        self.thread_reads.hold = hold;
        self.thread_reads.every = every;
        self.proc.keep_thread_files(every);
        self
    }

    /// What the next sample must read every thread of: the jobs on
    /// `watched` GPUs (a stall kind pending or active), and every job while
    /// someone `asked` for thread views.
    pub fn set_thread_needs(&mut self, watched: Vec<u32>, asked: bool) {
        self.thread_reads.watched = watched;
        self.thread_reads.asked = asked;
    }

    /// How a job's user is read and shown.
    pub fn with_users(mut self, options: UserOptions) -> Self {
        self.proc.set_user_options(options);
        self
    }

    /// Also asks the kubelet which pod holds each GPU, on a thread of its
    /// own.
    pub fn with_kubelet(mut self, options: KubeletOptions) -> Result<Self, CollectError> {
        self.kubelet = Some(Kubelet::start(options, self.meter)?);
        Ok(self)
    }

    /// Also watches for GPU faults: NVML events and the kernel log, on
    /// threads of their own.
    pub fn with_faults(mut self, options: FaultOptions) -> Result<Self, CollectError> {
        self.faults = Some(FaultFeed::start(options, self.meter)?);
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
        let reasons = self.reasons(&holders, &gpu);
        let carry: Vec<u32> = reasons
            .iter()
            .filter(|(_, r)| r.is_none())
            .map(|(pid, _)| *pid)
            .collect();
        self.meter.finished(Work::Nvml);
        let mut jobs = self.proc.read_jobs_carrying(&holders, &carry, &mut errors);
        let mut thread_reads = ThreadReadCounts::default();
        for job in &jobs {
            let reason = reasons
                .iter()
                .find(|(pid, _)| *pid == job.leader.id.pid)
                .and_then(|(_, r)| *r);
            // Due to be carried but read: a process new or changed.
            let read = reason.or((!job.threads_carried).then_some(Reason::Changed));
            thread_reads.add(read);
        }
        let kubernetes = self
            .kubelet
            .as_mut()
            .map(|k| k.attribute(&gpu.gpus, &mut jobs));
        let host = self.proc.read_host(&mut errors);
        self.meter.finished(Work::Proc);
        Sample {
            timestamp_seconds,
            duration_seconds: started.elapsed().as_secs_f64(),
            gpu,
            jobs,
            host,
            errors,
            kernel_log,
            kubernetes,
            thread_reads,
        }
    }

    /// Why each job's threads are read this sample, by leader; `None`: they
    /// are carried.
    fn reasons(
        &mut self,
        holders: &[(u32, Vec<u32>)],
        gpu: &GpuReadout,
    ) -> Vec<(u32, Option<Reason>)> {
        self.samples += 1;
        // Stale readings say nothing of now: their GPUs' jobs are read
        // (and a GPU stale alone reads as nothing in thread_reads.rs).
        let readings = if gpu.stale { &[][..] } else { &gpu.gpus[..] };
        self.thread_reads.observe(self.samples, readings);
        holders
            .iter()
            .map(|(pid, gpus)| {
                let reason = self.thread_reads.reason(self.samples, *pid, gpus, readings);
                (*pid, reason)
            })
            .collect()
    }
}
