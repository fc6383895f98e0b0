//! Which jobs' threads a sample reads.
//!
//! Per-thread CPU and state matter to the diagnosis only while a GPU waits:
//! the seed's "one core pinned at 100% while the GPU idles". So a job's
//! per-thread files are read every sample only while one of its GPUs is not
//! busy (utilization below the diagnosis's `busy_above`, or unknown: NVML
//! down or stale, a MIG instance, a GPU that reports none), while a stall
//! kind is pending or active on one of them, or while someone asks for
//! thread views (the API's status and stacks). Otherwise they are read every
//! `every` samples (staggered by pid), and between two reads the job's
//! threads are carried as last read. The decision is taken on the same
//! sample's GPU readings, so the first sample on which a GPU drops reads its
//! jobs' threads, and the next gives their rates. A job's processes, their
//! `stat` and `io`, are read every sample whatever this says.

use crate::sample::GpuSample;
pub use crate::sample::reads::{Reason, ThreadReadCounts};

/// What decides which jobs' threads are read; set before each sample.
#[derive(Debug, Clone, Default)]
pub struct ThreadReads {
    /// Utilization (0 to 1) at or above which a GPU is busy; `None` reads
    /// every job's threads every sample.
    pub busy_above: Option<f64>,
    /// Samples between two reads of a busy job's threads (0 or 1: every one).
    pub every: u64,
    /// GPUs a stall kind is pending or active on.
    pub watched: Vec<u32>,
    /// Someone asks for thread views.
    pub asked: bool,
}

impl ThreadReads {
    /// Why the job of `pid` on `gpus` is read this sample (the `sample`-th),
    /// or `None` when its threads are carried.
    pub fn reason(
        &self,
        sample: u64,
        pid: u32,
        gpus: &[u32],
        readings: &[GpuSample],
    ) -> Option<Reason> {
        let Some(busy_above) = self.busy_above.filter(|_| self.every > 1) else {
            return Some(Reason::Always);
        };
        if self.asked {
            return Some(Reason::Asked);
        }
        if gpus.iter().any(|g| self.watched.contains(g)) {
            return Some(Reason::Finding);
        }
        let busy = |index: &u32| {
            readings.iter().any(|g| {
                g.index == *index && g.up && g.utilization_ratio.is_some_and(|u| u >= busy_above)
            })
        };
        if gpus.is_empty() || !gpus.iter().all(busy) {
            return Some(Reason::NotBusy);
        }
        (sample + u64::from(pid))
            .is_multiple_of(self.every)
            .then_some(Reason::Cadence)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(index: u32, utilization: Option<f64>) -> GpuSample {
        GpuSample {
            index,
            up: true,
            utilization_ratio: utilization,
            ..GpuSample::default()
        }
    }

    #[test]
    fn a_job_on_busy_gpus_is_read_at_the_slow_cadence_and_any_other_every_sample() {
        let policy = ThreadReads {
            busy_above: Some(0.95),
            every: 15,
            watched: vec![3],
            asked: false,
        };
        let gpus = [
            gpu(0, Some(1.0)),
            gpu(1, Some(0.96)),
            gpu(2, Some(0.5)),
            gpu(3, Some(1.0)),
            gpu(4, None),
        ];
        let reads = |pid: u32, on: &[u32]| {
            (0..30)
                .map(|s| policy.reason(s, pid, on, &gpus))
                .collect::<Vec<_>>()
        };
        let busy = reads(7, &[0, 1]);
        assert_eq!(busy.iter().filter(|r| r.is_some()).count(), 2);
        assert_eq!(busy[8], Some(Reason::Cadence), "staggered by pid");
        assert!(
            reads(7, &[0, 2])
                .iter()
                .all(|r| *r == Some(Reason::NotBusy))
        );
        assert!(reads(7, &[4]).iter().all(|r| *r == Some(Reason::NotBusy)));
        assert!(
            reads(7, &[9]).iter().all(|r| *r == Some(Reason::NotBusy)),
            "a GPU not read"
        );
        assert!(
            reads(7, &[0, 3])
                .iter()
                .all(|r| *r == Some(Reason::Finding))
        );

        let mut down = gpus.clone();
        down[0].up = false;
        assert_eq!(policy.reason(1, 7, &[0], &down), Some(Reason::NotBusy));

        let asked = ThreadReads {
            asked: true,
            ..policy.clone()
        };
        assert_eq!(asked.reason(1, 7, &[0], &gpus), Some(Reason::Asked));
        let off = ThreadReads { every: 1, ..policy };
        assert_eq!(off.reason(1, 7, &[0], &gpus), Some(Reason::Always));
        assert_eq!(
            ThreadReads::default().reason(1, 7, &[0], &gpus),
            Some(Reason::Always)
        );
    }
}
