//! Which processes on a GPU are leftovers, and which share it.

use crate::config::DiagnosisConfig;
use crate::round::round;
use crate::tracking::ProcessActivity;
use crate::types::evidence::ProcessEvidence;
use crate::types::frame::{Frame, GpuFrame, JobFrame};

/// Processes holding memory without using the GPU for `idle_for`, whose
/// parent is gone: zombies, orphans (parent pid 1), or not in /proc.
pub fn leftovers(
    config: &DiagnosisConfig,
    activity: &ProcessActivity,
    gpu: &GpuFrame,
    frame: &Frame,
) -> Vec<ProcessEvidence> {
    let idle_for = config.leftover_idle_seconds();
    gpu.processes
        .iter()
        .filter(|p| p.memory_bytes.is_none_or(|m| m > 0))
        .filter_map(|p| {
            let idle = activity.idle_seconds(p.pid, frame.t)?;
            if idle < idle_for {
                return None;
            }
            let job = frame.jobs.iter().find(|j| j.pid == p.pid);
            let (why, comm) = match job {
                None => ("gone", String::new()),
                Some(j) if j.state == 'Z' => ("zombie", j.comm.clone()),
                Some(j) if j.ppid == 1 => ("orphaned", j.comm.clone()),
                Some(_) => return None,
            };
            Some(ProcessEvidence {
                pid: p.pid,
                comm,
                memory_bytes: p.memory_bytes,
                sm_utilization_ratio: p.sm_utilization,
                state: why.to_owned(),
                idle_seconds: Some(round(idle)),
            })
        })
        .collect()
}

/// The MPS server's `comm` (`nvidia-cuda-mps-server`, cut to the kernel's
/// 15 characters).
const MPS_SERVER_COMM: &str = "nvidia-cuda-mps";

/// Separate live jobs with at least `min_process_memory_bytes` on the GPU
/// (one whose parent is also one of them does not count: same job). MPS
/// clients and the MPS server count once together: their work runs in the
/// server's one context, which is how MPS shares a GPU by design; a process
/// outside MPS beside them is a second context.
pub fn sharers(
    config: &DiagnosisConfig,
    gpu: &GpuFrame,
    jobs: &[&JobFrame],
) -> Vec<ProcessEvidence> {
    let min = config.shared_gpu.min_process_memory_bytes;
    let big: Vec<(&crate::types::frame::ProcessFrame, &JobFrame)> = gpu
        .processes
        .iter()
        .filter(|p| p.memory_bytes.is_some_and(|m| m >= min))
        .filter_map(|p| Some((p, *jobs.iter().find(|j| j.pid == p.pid)?)))
        .collect();
    let mut mps_counted = false;
    big.iter()
        .filter(|(_, j)| !big.iter().any(|(other, _)| other.pid == j.ppid))
        .filter(|(p, j)| {
            let mps = p.mps || j.comm == MPS_SERVER_COMM;
            let first = !mps || !mps_counted;
            mps_counted |= mps;
            first
        })
        .map(|(p, j)| ProcessEvidence {
            pid: p.pid,
            comm: j.comm.clone(),
            memory_bytes: p.memory_bytes,
            sm_utilization_ratio: p.sm_utilization,
            state: "running".to_owned(),
            idle_seconds: None,
        })
        .collect()
}
