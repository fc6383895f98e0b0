//! What the engine learns across samples: each job's output rhythm (for the
//! hang time) and each GPU process's last activity (for leftovers).

use std::collections::{HashMap, VecDeque};

use crate::config::DiagnosisConfig;
use crate::types::frame::{Frame, JobFrame};

/// A job is identified by its pid and start time (a reused pid is a new job).
pub type JobKey = (u32, u64);

pub fn job_key(job: &JobFrame) -> JobKey {
    (job.pid, job.start_time.to_bits())
}

const INTERVALS_KEPT: usize = 32;

#[derive(Debug, Clone)]
struct JobTrack {
    first_seen: f64,
    last_output: Option<f64>,
    /// Recent intervals between output growths, seconds.
    intervals: VecDeque<f64>,
}

/// Output progress of every job seen in the latest frame.
#[derive(Debug, Default)]
pub struct Progress {
    jobs: HashMap<JobKey, JobTrack>,
}

impl Progress {
    pub fn observe(&mut self, frame: &Frame) {
        let mut seen = HashMap::with_capacity(frame.jobs.len());
        for job in &frame.jobs {
            let key = job_key(job);
            let mut track = self.jobs.remove(&key).unwrap_or(JobTrack {
                first_seen: frame.t,
                last_output: None,
                intervals: VecDeque::new(),
            });
            if let Some(now) = job.last_output {
                if let Some(before) = track.last_output.filter(|b| now > *b) {
                    if track.intervals.len() == INTERVALS_KEPT {
                        track.intervals.pop_front();
                    }
                    track.intervals.push_back(now - before);
                }
                if track.last_output.is_none_or(|b| now > b) {
                    track.last_output = Some(now);
                }
            }
            seen.insert(key, track);
        }
        self.jobs = seen;
    }

    /// Seconds since the job last showed output (or since it was first seen,
    /// when it never has); `None` when its output cannot be seen at all.
    pub fn silent_seconds(&self, job: &JobFrame, t: f64) -> Option<f64> {
        if job.output_unknown {
            return None;
        }
        let track = self.jobs.get(&job_key(job))?;
        // Output time read from the job (a log file's mtime) counts even if
        // it is older than our first sight of the job.
        let since = track.last_output.unwrap_or(track.first_seen);
        Some((t - since).max(0.0))
    }

    /// The job's usual interval between output growths (90th percentile of
    /// the recent ones); `None` until three have been seen.
    pub fn usual_interval(&self, job: &JobFrame) -> Option<f64> {
        let track = self.jobs.get(&job_key(job))?;
        if track.intervals.len() < 3 {
            return None;
        }
        let mut sorted: Vec<f64> = track.intervals.iter().copied().collect();
        sorted.sort_by(f64::total_cmp);
        Some(sorted[((sorted.len() - 1) as f64 * 0.9).round() as usize])
    }

    /// The job's hang time: `hang_multiplier` × its usual interval between
    /// output growths, clamped to the configured bounds.
    pub fn hang_seconds(&self, job: &JobFrame, config: &DiagnosisConfig) -> f64 {
        let (min, max) = config.hang_bounds();
        self.usual_interval(job).map_or(min, |usual| {
            (usual * config.hang_multiplier).clamp(min, max)
        })
    }
}

/// When each process on a GPU was first seen and last used the GPU.
#[derive(Debug, Default)]
pub struct ProcessActivity {
    procs: HashMap<u32, (f64, f64)>,
}

impl ProcessActivity {
    /// Feeds the processes on `gpu`. A process with no reading of its own
    /// counts as active where nothing says it idles: on a GPU with no
    /// activity reading at all (an A100's MIG instance), and on a MIG
    /// instance whose SMs work (NVML reports no per-process use on an
    /// instance; the instance's activity is its processes').
    pub fn observe(&mut self, t: f64, gpu: &crate::types::frame::GpuFrame) {
        let unread = if !gpu.measured() {
            true
        } else {
            gpu.mig && gpu.utilization.or(gpu.sm_active).is_some_and(|u| u > 0.0)
        };
        let processes = &gpu.processes;
        let mut next = HashMap::with_capacity(processes.len());
        for p in processes {
            let (first, mut last_active) = self.procs.get(&p.pid).copied().unwrap_or((t, t));
            if p.sm_utilization.map_or(unread, |u| u > 0.0) {
                last_active = t;
            }
            next.insert(p.pid, (first, last_active));
        }
        self.procs = next;
    }

    /// Seconds since the process last used the GPU (or was first seen).
    pub fn idle_seconds(&self, pid: u32, t: f64) -> Option<f64> {
        self.procs.get(&pid).map(|(_, last)| t - last)
    }
}
