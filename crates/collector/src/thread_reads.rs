//! Which jobs' threads a sample reads.
//!
//! Per-thread CPU and state matter to the diagnosis only while a GPU waits:
//! the seed's "one core pinned at 100% while the GPU idles". The kinds that
//! read them (`single_thread_bound`, `cpu_saturated`, `io_bound`) refine
//! `input_starved` and `input_bound`, which start only from a GPU whose
//! utilization drops (a mean under 10% over a minute) or stays low (a mean
//! under 50% over two). A healthy GPU reads 85-99% with dips at every input
//! wait, optimizer step and log line, and none of that can start them. So a
//! job's per-thread files are read every sample only while one of its GPUs
//! could start one:
//! - it dropped under `drop_below` in the last `hold` samples: read from the
//!   first sample that shows the drop, so the pinned thread is named at
//!   once; a drop that lasts is then read as its mean says (below): a pause
//!   for an evaluation or a checkpoint is not read through, as the kinds'
//!   windows cannot hold until the pause has lasted most of a minute;
//! - its recent mean (a moving average over about `MEAN_SAMPLES` samples
//!   on the way down, `RISE_SAMPLES` on the way up: a GPU back at work after
//!   a pause is taken as busy again within seconds)
//!   is under `mean_below` (a GPU that swings or stays low);
//! - nothing says how busy it is (no utilization and no SM activity: NVML
//!   down or stale, an A100's MIG instance, a GPU that reports neither);
//!   where there is no utilization, SM activity (GPM, a Hopper MIG
//!   instance) is the reading;
//!
//! and while a stall kind is pending or active on one of them, or someone
//! asks for thread views (the API's status and stacks). Otherwise they are
//! read every `every` samples (staggered by pid), and between two reads the
//! job's threads are carried as last read. A job's processes, their `stat`
//! and `io`, are read every sample whatever this says.

use std::collections::HashMap;

use crate::sample::GpuSample;
pub use crate::sample::reads::{Reason, ThreadReadCounts};

/// Samples the recent mean of a GPU's reading spans (its weight halves in
/// about 40 samples: `input_starved`'s window is a minute, `input_bound`'s
/// two).
pub const MEAN_SAMPLES: f64 = 60.0;
/// Samples the recent mean spans while readings are above it: a GPU that
/// works again after a 40 s pause stops being read in about 8 samples, not
/// 35, while a GPU swinging 0-60% keeps a mean under 40%.
pub const RISE_SAMPLES: f64 = 20.0;

/// What decides which jobs' threads are read; the needs set before each
/// sample, the GPUs' recent readings kept across samples.
#[derive(Debug, Clone, Default)]
pub struct ThreadReads {
    /// A reading under this is a drop; `None` reads every job's threads
    /// every sample.
    pub drop_below: Option<f64>,
    /// A recent mean under this could start a kind.
    pub mean_below: f64,
    /// Samples a drop is read for from its first low reading.
    pub hold: u64,
    /// Samples between two reads of a busy job's threads (0 or 1: every one).
    pub every: u64,
    /// GPUs a stall kind is pending or active on.
    pub watched: Vec<u32>,
    /// Someone asks for thread views.
    pub asked: bool,
    /// Each GPU's recent readings, by index.
    gpus: HashMap<u32, Recent>,
}

/// A GPU's recent readings.
#[derive(Debug, Clone, Copy)]
struct Recent {
    /// A moving average of its readings.
    mean: f64,
    /// The first sample of the run of low readings it is in, if it is.
    dropped_at: Option<u64>,
    /// The sample it was last read in.
    seen_at: u64,
}

/// How busy a GPU reads: utilization, or SM activity where there is none;
/// `None` when nothing says (or the GPU does not answer, or its reading is
/// its last one).
fn reading(g: &GpuSample) -> Option<f64> {
    let sm_active = || g.gpm.as_ref().and_then(|m| m.sm_active_ratio);
    (g.up && !g.stale)
        .then(|| g.utilization_ratio.or_else(sm_active))
        .flatten()
        .filter(|r| r.is_finite())
}

impl ThreadReads {
    /// Takes the `sample`-th sample's GPU readings (fresh ones only).
    pub fn observe(&mut self, sample: u64, readings: &[GpuSample]) {
        let Some(drop_below) = self.drop_below else {
            return;
        };
        for g in readings {
            let Some(now) = reading(g) else {
                self.gpus.remove(&g.index);
                continue;
            };
            let recent = self.gpus.entry(g.index).or_insert(Recent {
                mean: now,
                dropped_at: None,
                seen_at: sample,
            });
            let span = if now > recent.mean {
                RISE_SAMPLES
            } else {
                MEAN_SAMPLES
            };
            recent.mean += (now - recent.mean) / span;
            recent.seen_at = sample;
            if now < drop_below {
                recent.dropped_at.get_or_insert(sample);
            } else {
                recent.dropped_at = None;
            }
        }
        // GPUs gone from the readings for long are forgotten.
        let horizon = MEAN_SAMPLES as u64 * 4;
        self.gpus
            .retain(|_, r| sample.saturating_sub(r.seen_at) <= horizon);
    }

    /// Why the job of `pid` on `gpus` is read this sample (the `sample`-th),
    /// or `None` when its threads are carried. `readings` are this sample's
    /// fresh GPU readings, already observed.
    pub fn reason(
        &self,
        sample: u64,
        pid: u32,
        gpus: &[u32],
        readings: &[GpuSample],
    ) -> Option<Reason> {
        if self.drop_below.is_none() || self.every <= 1 {
            return Some(Reason::Always);
        }
        if self.asked {
            return Some(Reason::Asked);
        }
        if gpus.iter().any(|g| self.watched.contains(g)) {
            return Some(Reason::Finding);
        }
        let quiet = |index: &u32| {
            let read_now = readings
                .iter()
                .any(|g| g.index == *index && reading(g).is_some());
            let Some(recent) = self.gpus.get(index).filter(|_| read_now) else {
                return false;
            };
            let dropped = recent
                .dropped_at
                .is_some_and(|at| sample.saturating_sub(at) <= self.hold);
            !dropped && recent.mean >= self.mean_below
        };
        if gpus.is_empty() || !gpus.iter().all(quiet) {
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

    fn policy() -> ThreadReads {
        ThreadReads {
            drop_below: Some(0.1),
            mean_below: 0.6,
            hold: 5,
            every: 15,
            ..ThreadReads::default()
        }
    }

    /// The reasons of the job of `pid` on GPU 0 over the readings `util`,
    /// one a sample, each observed first.
    fn reads(p: &mut ThreadReads, pid: u32, util: &[Option<f64>]) -> Vec<Option<Reason>> {
        util.iter()
            .enumerate()
            .map(|(s, u)| {
                let readings = [gpu(0, *u)];
                p.observe(s as u64, &readings);
                p.reason(s as u64, pid, &[0], &readings)
            })
            .collect()
    }

    #[test]
    fn a_gpu_healthy_with_dips_is_read_at_the_slow_cadence() {
        // 85-99% with a dip to 40-75% one sample in eight.
        let healthy: Vec<Option<f64>> = (0..120)
            .map(|i| {
                Some(if i % 8 == 7 {
                    0.4 + 0.05 * f64::from(i % 7)
                } else {
                    0.85 + 0.01 * f64::from(i % 15)
                })
            })
            .collect();
        let mut p = policy();
        let got = reads(&mut p, 7, &healthy);
        assert!(got.iter().all(|r| *r != Some(Reason::NotBusy)), "{got:?}");
        assert_eq!(
            got.iter().filter(|r| r.is_some()).count(),
            8,
            "every 15th sample"
        );
        assert_eq!(got[8], Some(Reason::Cadence), "staggered by pid");
    }

    #[test]
    fn a_drop_is_read_at_once_and_a_pause_as_its_mean_says() {
        let mut util = vec![Some(0.95); 40];
        util.extend([Some(0.0); 3]);
        util.extend([Some(0.95); 10]);
        let got = reads(&mut policy(), 7, &util);
        let read: Vec<usize> = (0..got.len())
            .filter(|i| got[*i] == Some(Reason::NotBusy))
            .collect();
        assert_eq!(read, [40, 41, 42], "the drop's samples, from its first");
        // A pause of 40 samples (an evaluation): its first samples, then
        // again once its mean says a kind's window could hold.
        let mut util = vec![Some(0.9); 100];
        util.extend([Some(0.0); 40]);
        util.extend([Some(0.9); 30]);
        let got = reads(&mut policy(), 7, &util);
        // Back at work: taken as busy again within 10 samples.
        let after: Vec<usize> = (140..170)
            .filter(|i| got[*i] == Some(Reason::NotBusy))
            .collect();
        assert!(after.iter().all(|i| *i < 150), "{after:?}");
        let read: Vec<usize> = (100..140)
            .filter(|i| got[*i] == Some(Reason::NotBusy))
            .collect();
        assert_eq!(&read[..6], &[100, 101, 102, 103, 104, 105], "{read:?}");
        let again = read[6];
        assert!((120..135).contains(&again), "{read:?}");
        assert!(read[6..].iter().copied().eq(again..140), "{read:?}");
    }

    #[test]
    fn a_gpu_that_stays_low_or_swings_is_read_every_sample() {
        // Down to 30% and staying: read once the recent mean is under 60%,
        // well before input_bound's two-minute window could hold.
        let mut util = vec![Some(0.9); 60];
        util.extend([Some(0.3); 80]);
        let got = reads(&mut policy(), 7, &util);
        let first = got[60..]
            .iter()
            .position(|r| *r == Some(Reason::NotBusy))
            .unwrap();
        assert!((30..50).contains(&first), "after {first} samples");
        assert!(
            got[60 + first..]
                .iter()
                .all(|r| *r == Some(Reason::NotBusy))
        );
        // Swinging 20-60% from the start.
        let swing: Vec<Option<f64>> = (0..30)
            .map(|i| Some(if i % 2 == 0 { 0.2 } else { 0.6 }))
            .collect();
        assert!(
            reads(&mut policy(), 7, &swing)
                .iter()
                .all(|r| *r == Some(Reason::NotBusy))
        );
    }

    #[test]
    fn sm_activity_stands_in_for_utilization_and_nothing_is_read_every_sample() {
        let mut p = policy();
        let mig = |sm: Option<f64>| GpuSample {
            gpm: Some(crate::sample::GpmReading {
                sm_active_ratio: sm,
                ..Default::default()
            }),
            ..gpu(0, None)
        };
        for s in 0..30 {
            let readings = [mig(Some(0.9))];
            p.observe(s, &readings);
            if s > 0 {
                assert_ne!(p.reason(s, 7, &[0], &readings), Some(Reason::NotBusy));
            }
        }
        // No utilization, no SM activity: nothing says it is busy.
        let readings = [mig(None)];
        p.observe(30, &readings);
        assert_eq!(p.reason(30, 7, &[0], &readings), Some(Reason::NotBusy));
    }

    #[test]
    fn findings_asks_down_gpus_and_the_switch_come_first() {
        let mut p = ThreadReads {
            watched: vec![3],
            ..policy()
        };
        let gpus = [gpu(0, Some(1.0)), gpu(3, Some(1.0))];
        p.observe(1, &gpus);
        assert_eq!(p.reason(1, 7, &[0, 3], &gpus), Some(Reason::Finding));
        assert_eq!(
            p.reason(1, 7, &[9], &gpus),
            Some(Reason::NotBusy),
            "a GPU not read"
        );
        let mut down = gpus.clone();
        down[0].up = false;
        p.observe(2, &down);
        assert_eq!(p.reason(2, 7, &[0], &down), Some(Reason::NotBusy));
        p.asked = true;
        assert_eq!(p.reason(2, 7, &[0], &gpus), Some(Reason::Asked));
        let off = ThreadReads {
            every: 1,
            ..policy()
        };
        assert_eq!(off.reason(1, 7, &[0], &gpus), Some(Reason::Always));
        assert_eq!(
            ThreadReads::default().reason(1, 7, &[0], &gpus),
            Some(Reason::Always)
        );
    }
}
