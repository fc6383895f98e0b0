//! The jobs as the engine reports them: their status, and the job an event
//! names.

use crate::round::round;
use crate::types::evidence::ThreadEvidence;
use crate::types::frame::{GpuFrame, JobFrame};
use crate::types::status::{JobRef, JobStatus};

/// The job an event names: the one holding the most memory on the GPU.
pub fn primary_job(gpu: &GpuFrame, jobs: &[&JobFrame]) -> Option<JobRef> {
    let memory = |j: &JobFrame| {
        gpu.processes
            .iter()
            .find(|p| p.pid == j.pid)
            .and_then(|p| p.memory_bytes)
            .unwrap_or(0)
    };
    jobs.iter()
        .max_by_key(|j| (memory(j), std::cmp::Reverse(j.pid)))
        .map(|j| JobRef {
            pid: j.pid,
            comm: j.comm.clone(),
            attribution: j.attribution.clone(),
        })
}

pub fn job_status(job: &JobFrame, gpu: &GpuFrame, t: f64, warmup: f64) -> JobStatus {
    JobStatus {
        pid: job.pid,
        comm: job.comm.clone(),
        attribution: job.attribution.clone(),
        run: job.run.clone(),
        run_unknown: job.run_unknown.clone(),
        start_time: job.start_time,
        warming_up: t - job.start_time < warmup,
        cpu_cores: job.cpu_cores.map(round),
        top_thread: job.top_threads.first().map(ThreadEvidence::from),
        threads_read_at: job.threads_read_at,
        last_output: job.last_output,
        gpu_memory_bytes: gpu
            .processes
            .iter()
            .find(|p| p.pid == job.pid)
            .and_then(|p| p.memory_bytes),
        time: Default::default(),
        last_checkpoint: None,
        progress_since_checkpoint_seconds: 0.0,
    }
}
