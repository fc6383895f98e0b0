//! Events and job summaries as the engine reports them.

use crate::Kind;
use crate::detect::hint;
use crate::round::round;
use crate::types::evidence::{Evidence, ThreadEvidence};
use crate::types::frame::{GpuFrame, JobFrame};
use crate::types::status::{Event, JobRef, JobStatus, Phase};

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

pub fn make_event(
    phase: Phase,
    kind: Kind,
    gpu: &GpuFrame,
    t: f64,
    since: f64,
    job: Option<JobRef>,
    evidence: &Evidence,
) -> Event {
    Event {
        id: 0,
        time: t,
        phase,
        kind,
        gpu: gpu.index,
        uuid: gpu.uuid.clone(),
        since,
        job,
        evidence: evidence.clone(),
        hint: hint(kind, evidence),
    }
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
