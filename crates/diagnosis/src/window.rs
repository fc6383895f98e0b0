//! Per-GPU history of recent samples and statistics over time windows.

use std::collections::VecDeque;

pub use crate::types::activity::ActivitySignal;

/// What one sample says about one GPU and the jobs on it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Point {
    pub t: f64,
    /// The GPU's activity as the rules read it: `utilization.gpu`, or GPM SM
    /// activity where `utilization.gpu` is not reported (MIG).
    pub utilization: Option<f64>,
    /// Which of the two `utilization` is.
    pub activity: Option<ActivitySignal>,
    /// GPM activity (absent without GPM).
    pub sm_active: Option<f64>,
    pub tensor_active: Option<f64>,
    pub dram_active: Option<f64>,
    pub nvlink_bytes_per_second: Option<f64>,
    pub pcie_bytes_per_second: Option<f64>,
    /// A live job (not warming up) holds the GPU.
    pub has_job: bool,
    /// CPU used by the GPU's jobs, in cores.
    pub job_cpu: Option<f64>,
    /// Share of one core used by the busiest job thread, scaled up by what
    /// the hypervisor took (`steal::without_steal`).
    pub top_thread_cpu: Option<f64>,
    /// CPU (cores, scaled up by what the hypervisor took) of the busy
    /// threads of one process together, where work spreads over several
    /// threads and the process stays under the GIL cap.
    pub spread_cpu: Option<f64>,
    /// The same threads' CPU and waits for a CPU together (their CPU alone
    /// where a wait is unknown).
    pub spread_demand: Option<f64>,
    /// Some job thread was in uninterruptible (D) state.
    pub disk_sleep: bool,
    /// Job threads running, and in all.
    pub threads_running: u32,
    pub threads_total: u32,
    pub host_cpu: Option<f64>,
    /// The share of the host's CPU time the hypervisor took (steal).
    pub steal: Option<f64>,
    pub psi_cpu: Option<f64>,
    pub psi_io: Option<f64>,
    pub power_watts: Option<f64>,
    /// A power, thermal or hardware slowdown clock-event reason was set.
    pub throttled: bool,
}

/// Samples for as long as the longest window needs.
#[derive(Debug, Default)]
pub struct History {
    points: VecDeque<Point>,
}

impl History {
    pub fn push(&mut self, point: Point, keep_seconds: f64) {
        let oldest = point.t - keep_seconds;
        while self.points.front().is_some_and(|p| p.t < oldest) {
            self.points.pop_front();
        }
        self.points.push_back(point);
    }

    /// The samples of the last `seconds`, ending at the newest one.
    pub fn window(&self, seconds: f64) -> Window<'_> {
        let now = self.points.back().map_or(0.0, |p| p.t);
        let start = self.points.partition_point(|p| p.t <= now - seconds);
        Window {
            points: &self.points,
            start,
            seconds,
            now,
        }
    }

    pub fn latest(&self) -> Option<&Point> {
        self.points.back()
    }
}

/// Samples in a window: a view into the history, nothing copied.
pub struct Window<'a> {
    points: &'a VecDeque<Point>,
    start: usize,
    seconds: f64,
    now: f64,
}

impl Window<'_> {
    fn iter(&self) -> impl Iterator<Item = &Point> {
        self.points.range(self.start..)
    }

    pub fn len(&self) -> usize {
        self.points.len() - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn seconds(&self) -> f64 {
        self.seconds
    }

    /// The history reaches back over (nearly) the whole window.
    pub fn covered(&self) -> bool {
        let n = self.len();
        if n < 3 {
            return false;
        }
        let oldest = &self.points[self.start];
        // Each sample stands for one interval: n samples cover n/(n-1) spans.
        let covered = (self.now - oldest.t) * n as f64 / (n - 1) as f64;
        covered >= self.seconds * 0.9 - 1e-9
    }

    pub fn mean(&self, f: impl Fn(&Point) -> Option<f64>) -> Option<f64> {
        let (sum, n) = self
            .iter()
            .filter_map(f)
            .fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
        (n > 0).then(|| sum / n as f64)
    }

    /// Several means in one pass over the window: `f` gives each sample's
    /// values (each mean the same as `mean`'s).
    pub fn means<const N: usize>(
        &self,
        f: impl Fn(&Point) -> [Option<f64>; N],
    ) -> [Option<f64>; N] {
        let mut sums = [(0.0, 0usize); N];
        for p in self.iter() {
            for (v, (sum, n)) in f(p).into_iter().zip(&mut sums) {
                if let Some(v) = v {
                    *sum += v;
                    *n += 1;
                }
            }
        }
        sums.map(|(sum, n)| (n > 0).then(|| sum / n as f64))
    }

    pub fn stddev(&self, f: impl Fn(&Point) -> Option<f64>) -> Option<f64> {
        let mean = self.mean(&f)?;
        let (sum, n) = self
            .iter()
            .filter_map(f)
            .fold((0.0, 0usize), |(s, n), v| (s + (v - mean).powi(2), n + 1));
        Some((sum / n as f64).sqrt())
    }

    /// Share of samples (where `f` has an answer) for which `f` is true.
    pub fn share(&self, f: impl Fn(&Point) -> Option<bool>) -> Option<f64> {
        let (yes, n) = self
            .iter()
            .filter_map(f)
            .fold((0usize, 0usize), |(y, n), b| (y + usize::from(b), n + 1));
        (n > 0).then(|| yes as f64 / n as f64)
    }

    /// Whether every sample satisfies `f`.
    pub fn all(&self, f: impl Fn(&Point) -> bool) -> bool {
        !self.is_empty() && self.iter().all(f)
    }
}

/// Utilization statistics over a window, as evidence carries them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct UtilizationStats {
    pub mean: f64,
    pub stddev: f64,
    pub idle_share: f64,
    pub busy_share: f64,
}

impl Window<'_> {
    /// Mean, spread and idle and busy shares of the activity, in two passes
    /// (the figures `mean`, `stddev` and `share` give, computed the same way).
    pub fn utilization(&self, idle_below: f64, busy_above: f64) -> Option<UtilizationStats> {
        let (mut sum, mut n, mut idle, mut busy) = (0.0, 0usize, 0usize, 0usize);
        for u in self.iter().filter_map(|p| p.utilization) {
            sum += u;
            n += 1;
            idle += usize::from(u < idle_below);
            busy += usize::from(u >= busy_above);
        }
        if n == 0 {
            return None;
        }
        let mean = sum / n as f64;
        let squares = self
            .iter()
            .filter_map(|p| p.utilization)
            .fold(0.0, |s, u| s + (u - mean).powi(2));
        Some(UtilizationStats {
            mean,
            stddev: (squares / n as f64).sqrt(),
            idle_share: idle as f64 / n as f64,
            busy_share: busy as f64 / n as f64,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn history() -> History {
        let mut h = History::default();
        for i in 0..40 {
            h.push(
                Point {
                    t: f64::from(i),
                    // Some samples without a reading.
                    utilization: (i % 7 != 3).then(|| f64::from((i * 37) % 100) / 100.0),
                    power_watts: (i % 5 != 0).then(|| f64::from(100 + i)),
                    ..Point::default()
                },
                300.0,
            );
        }
        h
    }

    #[test]
    fn the_one_pass_figures_equal_the_separate_ones() {
        let h = history();
        let w = h.window(30.0);
        let util = |p: &Point| p.utilization;
        let stats = w.utilization(0.1, 0.8).unwrap();
        assert_eq!(stats.mean, w.mean(util).unwrap());
        assert_eq!(stats.stddev, w.stddev(util).unwrap());
        assert_eq!(
            stats.idle_share,
            w.share(|p| Some(p.utilization? < 0.1)).unwrap()
        );
        assert_eq!(
            stats.busy_share,
            w.share(|p| Some(p.utilization? >= 0.8)).unwrap()
        );
        let [u, p, none] = w.means(|p| [p.utilization, p.power_watts, None]);
        assert_eq!(u, w.mean(util));
        assert_eq!(p, w.mean(|p| p.power_watts));
        assert_eq!(none, None);
        assert!(h.window(30.0).utilization(0.1, 0.8).is_some());
        assert!(
            History::default()
                .window(30.0)
                .utilization(0.1, 0.8)
                .is_none()
        );
    }
}
