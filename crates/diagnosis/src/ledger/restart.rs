//! A run's restarts on one GPU: a rank of a run leaves the GPU and a job
//! comes back on it under the same run id (torchrun `--max-restarts`, a
//! Slurm requeue, an elastic job). The gap and the new job's start-up are
//! the run's `recovery`; the training since the job's last completed
//! checkpoint is the progress the restart lost (docs/goodput.md).

use crate::types::ledger::EndedJob;

/// How long after a run's rank left a GPU a job of the same run coming
/// back on it is a restart: as long as the ledger holds a run of samples
/// (`ledger::HELD_SECONDS`), so the gap is booked once.
pub const RESTART_SECONDS: f64 = 300.0;

/// Follows the jobs of one GPU across restarts of their run.
#[derive(Debug, Clone, Default)]
pub struct Restarts {
    /// The jobs on the GPU (pid, start time); empty when none.
    jobs: Vec<(u32, u64)>,
    /// Their run, or the run of the last jobs while none holds the GPU.
    run: Option<String>,
    /// When the GPU was first seen without the run's jobs.
    left_at: Option<f64>,
    /// The jobs on the GPU came back under the run that left it.
    restarted: bool,
    /// The current jobs' last completed checkpoint, and whether one is
    /// being written now.
    last_checkpoint: Option<f64>,
    checkpointing: bool,
    /// Productive seconds booked since that checkpoint.
    since_checkpoint: f64,
    /// The jobs that left last.
    pub ended: Option<EndedJob>,
    /// Progress lost to restarts, seconds.
    pub lost_progress_seconds_total: f64,
}

/// Where a sample stands between a run's jobs.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RestartState {
    /// No job holds the GPU, and a run's rank left it under
    /// [`RESTART_SECONDS`] ago.
    pub run_left: bool,
    /// The GPU's jobs came back under the run id of the ones that left.
    pub restarted: bool,
    /// The GPU's jobs are new this sample: none of them held it before (a
    /// job that joins running ones, a new worker, is the same job).
    pub new_set: bool,
}

impl Restarts {
    /// Feeds a sample: the GPU's live jobs (pid, start time) and their run.
    pub fn observe(&mut self, jobs: &[(u32, u64)], run: Option<&str>, t: f64) -> RestartState {
        if jobs.is_empty() {
            if !self.jobs.is_empty() {
                self.end(t);
            }
            let run_left =
                self.run.is_some() && self.left_at.is_some_and(|left| t - left <= RESTART_SECONDS);
            return RestartState {
                run_left,
                ..RestartState::default()
            };
        }
        let new_set = self.jobs.is_empty() || !jobs.iter().any(|j| self.jobs.contains(j));
        if new_set {
            if !self.jobs.is_empty() {
                // Replaced between two samples.
                self.end(t);
            }
            let within = self.left_at.is_some_and(|left| t - left <= RESTART_SECONDS);
            self.restarted = within && run.is_some() && run == self.run.as_deref();
            if self.restarted
                && let Some(ended) = self.ended.as_mut().filter(|e| !e.restarted)
            {
                ended.restarted = true;
                self.lost_progress_seconds_total += ended.progress_since_checkpoint_seconds;
            }
            self.run = run.map(str::to_owned);
            self.left_at = None;
            self.last_checkpoint = None;
            self.checkpointing = false;
            self.since_checkpoint = 0.0;
        } else if self.run.is_none() {
            self.run = run.map(str::to_owned);
        }
        if self.jobs != jobs {
            self.jobs.clear();
            self.jobs.extend_from_slice(jobs);
        }
        RestartState {
            run_left: false,
            restarted: self.restarted,
            new_set,
        }
    }

    /// Ends the restart once the jobs work: their start-up is over.
    pub fn started(&mut self) {
        self.restarted = false;
    }

    /// Feeds what the sample was booked: `productive` seconds newly in the
    /// ledger, and whether it was booked `checkpointing` (a checkpoint
    /// completes when its phase ends with the job still there).
    pub fn booked(&mut self, checkpointing: bool, productive: f64, t: f64) {
        if self.jobs.is_empty() {
            return;
        }
        if checkpointing {
            self.checkpointing = true;
        } else if self.checkpointing {
            self.checkpointing = false;
            self.last_checkpoint = Some(t);
            self.since_checkpoint = 0.0;
        }
        self.since_checkpoint += productive;
    }

    /// The current jobs' last completed checkpoint and the productive
    /// seconds since.
    pub fn progress(&self) -> (Option<f64>, f64) {
        (self.last_checkpoint, self.since_checkpoint)
    }

    fn end(&mut self, t: f64) {
        self.ended = Some(EndedJob {
            pid: self.jobs[0].0,
            run: self.run.clone(),
            ended: t,
            last_checkpoint: self.last_checkpoint,
            progress_since_checkpoint_seconds: crate::round::round(self.since_checkpoint),
            restarted: false,
        });
        self.jobs.clear();
        self.left_at = Some(t);
        self.restarted = false;
        self.checkpointing = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_that_comes_back_is_a_restart_and_loses_its_progress_since_the_checkpoint() {
        let mut r = Restarts::default();
        let run = Some("torchelastic:7");
        let first = r.observe(&[(10, 1)], run, 0.0);
        assert!(first.new_set && !first.restarted && !first.run_left);
        assert!(!r.observe(&[(10, 1)], run, 1.0).new_set);
        r.booked(false, 100.0, 100.0);
        r.booked(true, 0.0, 110.0);
        r.booked(false, 30.0, 140.0);
        assert_eq!(r.progress(), (Some(140.0), 30.0));
        r.booked(false, 20.0, 160.0);
        // Killed: the GPU waits for the run.
        let gap = r.observe(&[], None, 161.0);
        assert!(gap.run_left && !gap.restarted);
        let ended = r.ended.clone().unwrap();
        assert_eq!(ended.progress_since_checkpoint_seconds, 50.0);
        assert_eq!(ended.last_checkpoint, Some(140.0));
        // The run's next job comes back.
        let back = r.observe(&[(20, 2)], run, 170.0);
        assert!(back.restarted && !back.run_left);
        assert_eq!(r.lost_progress_seconds_total, 50.0);
        assert!(r.ended.as_ref().unwrap().restarted);
        // Its progress starts from nothing.
        assert_eq!(r.progress(), (None, 0.0));
        r.started();
        assert!(!r.observe(&[(20, 2)], run, 171.0).restarted);
    }

    #[test]
    fn another_run_or_a_long_gap_is_no_restart() {
        let mut r = Restarts::default();
        r.observe(&[(10, 1)], Some("a"), 0.0);
        r.booked(false, 10.0, 10.0);
        assert!(r.observe(&[], None, 11.0).run_left);
        assert!(!r.observe(&[(11, 1)], Some("b"), 12.0).restarted);
        assert!(r.observe(&[], None, 13.0).run_left);
        assert!(!r.observe(&[], None, 13.0 + RESTART_SECONDS + 1.0).run_left);
        assert!(
            !r.observe(&[(12, 1)], Some("b"), 14.0 + RESTART_SECONDS)
                .restarted
        );
        assert_eq!(r.lost_progress_seconds_total, 0.0);
        // A job of no run leaves nothing to wait for.
        let mut r = Restarts::default();
        r.observe(&[(10, 1)], None, 0.0);
        assert!(!r.observe(&[], None, 1.0).run_left);
    }

    #[test]
    fn a_rank_replaced_between_two_samples_is_a_restart() {
        let mut r = Restarts::default();
        r.observe(&[(10, 1)], Some("a"), 0.0);
        r.booked(false, 5.0, 5.0);
        assert!(r.observe(&[(11, 6)], Some("a"), 6.0).restarted);
        assert_eq!(r.lost_progress_seconds_total, 5.0);
        // A worker joining is the same job.
        let mut r = Restarts::default();
        r.observe(&[(10, 1)], Some("a"), 0.0);
        let joined = r.observe(&[(10, 1), (11, 2)], Some("a"), 1.0);
        assert!(!joined.restarted && !joined.new_set);
    }
}
