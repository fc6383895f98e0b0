//! Where a GPU's time went: every sampled interval booked to exactly one
//! state, by a fixed precedence, from the GPU's outcome of that sample
//! (docs/goodput.md). The states of one GPU add up to the time the daemon
//! watched it.

use crate::types::phase::JobPhase;

pub mod by_place;
pub mod place;
mod restart;
pub use crate::types::ledger::{EndedJob, Ledger, Place, PlaceLoss, Unplaced, UnplacedLoss};
pub use crate::types::time_state::TimeState;
pub use by_place::{PlaceKey, PlaceLedger};
pub use place::Located;
pub use restart::{RESTART_SECONDS, RestartState, Restarts};

/// One GPU's sample, as the ledger needs it.
#[derive(Debug, Clone, Default)]
pub struct LedgerSample {
    /// The GPU answered with data this sample.
    pub fresh: bool,
    /// A job (not a leftover, not a zombie) holds the GPU.
    pub has_job: bool,
    /// The states of the kinds active after the sample.
    pub kinds: Vec<TimeState>,
    /// The job's own phase now, if one was found.
    pub phase: Option<JobPhase>,
    /// The GPU's jobs have not done sustained work yet.
    pub starting: bool,
    /// The GPU was idle this sample (utilization under `idle_below`).
    pub idle: bool,
    /// Nothing said how busy the GPU was this sample (no utilization, no
    /// GPM): neither idle nor working can be booked.
    pub unmeasured: bool,
    /// No job holds the GPU, and a rank of a run left it less than
    /// [`HELD_SECONDS`] ago: a restart of the run may be under way.
    pub run_left: bool,
    /// The GPU's jobs came back under the run id of the jobs that left it.
    pub restarted: bool,
}

impl LedgerSample {
    /// The one state the sample's interval is booked to: the first that
    /// applies of fault, unknown, no_job, hung, compiling, checkpointing,
    /// startup (the DataLoader's), input, startup (no sustained work yet),
    /// unknown (no activity reading), idle, productive; a restarted run's
    /// start-up is its recovery.
    pub fn state(&self) -> TimeState {
        let kind = |s| self.kinds.contains(&s);
        if kind(TimeState::Fault) {
            TimeState::Fault
        } else if !self.fresh {
            TimeState::Unknown
        } else if !self.has_job {
            TimeState::NoJob
        } else if kind(TimeState::Hung) {
            TimeState::Hung
        } else if self.phase == Some(JobPhase::Compiling) {
            TimeState::Compiling
        } else if self.phase == Some(JobPhase::Checkpointing) {
            TimeState::Checkpointing
        } else if self.phase == Some(JobPhase::DataLoaderStartup) {
            self.startup()
        } else if kind(TimeState::Input) {
            // Found past the warm-up: the job's set-up is over.
            TimeState::Input
        } else if self.starting {
            self.startup()
        } else if self.unmeasured {
            TimeState::Unknown
        } else if self.idle {
            TimeState::Idle
        } else {
            TimeState::Productive
        }
    }
}

impl LedgerSample {
    /// The GPU was measured working this sample.
    fn busy(&self) -> bool {
        !self.idle && !self.unmeasured
    }

    fn startup(&self) -> TimeState {
        if self.restarted {
            TimeState::Recovery
        } else {
            TimeState::Startup
        }
    }
}

/// The longest run of samples held back before it is booked (see
/// [`Booker`]): as long as the slowest kind that books time (a hang) takes
/// to be found.
pub const HELD_SECONDS: f64 = 300.0;

/// A run of samples whose state waits on what comes next.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Held {
    /// The GPU idles and no kind says why yet: `idle`, unless a kind that
    /// books time starts before the run ends (its onset was the run's).
    Idle(f64),
    /// The GPU works while an input kind is still active: `input`, unless
    /// the kind ends before the GPU idles again (it ended with the run).
    BusyUnderInput(f64),
    /// No job holds the GPU since a run's rank left it: `recovery` if a job
    /// of the same run comes back on it, else `no_job`.
    RunLeft(f64),
    /// The GPU works while its jobs are starting (`startup` or `recovery`):
    /// `productive` if the work lasts until it ends the start-up, else the
    /// start-up's.
    BusyStarting(f64, TimeState),
}

/// Books each sample's interval to one state, holding back a run of samples
/// whose cause is being judged, at most [`HELD_SECONDS`] of it: the idle
/// seconds before a stall kind starts are booked to the kind once it does
/// (a kind becomes active only after its window and enter time), and the
/// busy seconds after an input kind's cause cleared are booked productive
/// once it ends (its exit time). What is held is not yet in the ledger:
/// booked and held seconds add up to the watched time.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Booker {
    pub ledger: Ledger,
    held: Option<Held>,
}

impl Booker {
    /// Seconds held back, not yet booked.
    pub fn held_seconds(&self) -> f64 {
        match self.held {
            Some(
                Held::Idle(s)
                | Held::BusyUnderInput(s)
                | Held::RunLeft(s)
                | Held::BusyStarting(s, _),
            ) => s,
            None => 0.0,
        }
    }

    /// Books `seconds` of a sample whose outcome is `outcome`.
    pub fn book(&mut self, outcome: &LedgerSample, seconds: f64) {
        let state = outcome.state();
        let now = match state {
            TimeState::Idle => Some(Held::Idle(seconds)),
            TimeState::Input if outcome.busy() => Some(Held::BusyUnderInput(seconds)),
            TimeState::NoJob if outcome.run_left => Some(Held::RunLeft(seconds)),
            TimeState::Startup | TimeState::Recovery if outcome.starting && outcome.busy() => {
                Some(Held::BusyStarting(seconds, state))
            }
            _ => None,
        };
        match (self.held, now) {
            (Some(Held::Idle(run)), Some(Held::Idle(s))) => self.hold(Held::Idle(run + s)),
            (Some(Held::BusyUnderInput(run)), Some(Held::BusyUnderInput(s))) => {
                self.hold(Held::BusyUnderInput(run + s))
            }
            (Some(Held::RunLeft(run)), Some(Held::RunLeft(s))) => self.hold(Held::RunLeft(run + s)),
            (Some(Held::BusyStarting(run, was)), Some(Held::BusyStarting(s, _))) => {
                self.hold(Held::BusyStarting(run + s, was))
            }
            (held, now) => {
                // The run ends here; what ends it says what it was.
                match held {
                    Some(Held::Idle(run)) => {
                        // A kind or a phase found: the run was its.
                        let to = match state {
                            TimeState::Input
                            | TimeState::Hung
                            | TimeState::Compiling
                            | TimeState::Checkpointing => state,
                            _ => TimeState::Idle,
                        };
                        self.ledger.book(to, run);
                    }
                    Some(Held::BusyUnderInput(run)) => {
                        let to = if state == TimeState::Input {
                            TimeState::Input
                        } else if outcome.unmeasured {
                            // Nothing says the work went on once the kind
                            // ended: the run stays the kind's.
                            TimeState::Input
                        } else {
                            TimeState::Productive
                        };
                        self.ledger.book(to, run);
                    }
                    Some(Held::RunLeft(run)) => {
                        let to = if outcome.restarted {
                            TimeState::Recovery
                        } else {
                            TimeState::NoJob
                        };
                        self.ledger.book(to, run);
                    }
                    Some(Held::BusyStarting(run, was)) => {
                        // The sustained work that ended the start-up (the
                        // sample that ends it is busy; a start-up that ends
                        // at its limit or with the job doing nothing ends on
                        // a sample that is not).
                        let to = if outcome.fresh
                            && outcome.has_job
                            && !outcome.starting
                            && outcome.busy()
                        {
                            TimeState::Productive
                        } else {
                            was
                        };
                        self.ledger.book(to, run);
                    }
                    None => {}
                }
                self.held = None;
                match now {
                    Some(h) => self.hold(h),
                    None => self.ledger.book(state, seconds),
                }
            }
        }
    }

    /// Books `seconds` with no sample behind them (a gap, a GPU gone): to
    /// `unknown`, after what was held, booked as it stands.
    pub fn book_unknown(&mut self, seconds: f64) {
        match self.held.take() {
            Some(Held::Idle(run)) => self.ledger.book(TimeState::Idle, run),
            Some(Held::BusyUnderInput(run)) => self.ledger.book(TimeState::Input, run),
            Some(Held::RunLeft(run)) => self.ledger.book(TimeState::NoJob, run),
            Some(Held::BusyStarting(run, was)) => self.ledger.book(was, run),
            None => {}
        }
        self.ledger.book(TimeState::Unknown, seconds);
    }

    /// Holds `run`, booking what is over [`HELD_SECONDS`] as it stands.
    fn hold(&mut self, run: Held) {
        let (seconds, as_is) = match run {
            Held::Idle(s) => (s, TimeState::Idle),
            Held::BusyUnderInput(s) => (s, TimeState::Input),
            Held::RunLeft(s) => (s, TimeState::NoJob),
            Held::BusyStarting(s, was) => (s, was),
        };
        if seconds > HELD_SECONDS {
            self.ledger.book(as_is, seconds - HELD_SECONDS);
            self.held = Some(match run {
                Held::Idle(_) => Held::Idle(HELD_SECONDS),
                Held::BusyUnderInput(_) => Held::BusyUnderInput(HELD_SECONDS),
                Held::RunLeft(_) => Held::RunLeft(HELD_SECONDS),
                Held::BusyStarting(_, was) => Held::BusyStarting(HELD_SECONDS, was),
            });
        } else {
            self.held = Some(run);
        }
    }
}

/// Sustained work that ends a job's start-up: this many seconds of the GPU
/// busy in a row.
pub const STARTUP_WORK_SECONDS: f64 = 10.0;

/// The longest start-up: a job that has held its GPU this long without
/// sustained work on it is no longer starting, whatever it does on the host.
pub const STARTUP_LIMIT_SECONDS: f64 = 600.0;

/// Whether the jobs on a GPU are still starting: since they came, the GPU
/// has not yet been busy for [`STARTUP_WORK_SECONDS`] in a row, they work
/// (the GPU busy, or the jobs on the host: CPU, storage), and it is less
/// than [`STARTUP_LIMIT_SECONDS`] since they came. A job that holds a GPU
/// and does nothing at all is not starting: it holds the GPU idle.
#[derive(Debug, Clone, Default)]
pub struct Startup {
    busy_since: Option<f64>,
    worked: bool,
    /// When the jobs came.
    since: Option<f64>,
}

/// What one sample says of a GPU's jobs, for [`Startup::observe`].
#[derive(Debug, Clone, Copy, Default)]
pub struct StartupSample {
    pub has_jobs: bool,
    /// The jobs are new this sample (as [`Restarts`] tells).
    pub new_set: bool,
    /// They are all young (still in the warm-up).
    pub young: bool,
    /// The GPU was measured busy.
    pub busy: bool,
    /// The jobs work on the host (CPU, storage).
    pub host_work: bool,
    /// They came back under the run id of the jobs that left (a restart):
    /// waiting for the run's other ranks is part of their recovery.
    pub restarted: bool,
    pub t: f64,
}

impl Startup {
    /// Feeds a sample; returns whether the jobs are still starting. A new
    /// set of young jobs starts again; jobs first seen past their warm-up
    /// (the daemon started after them) do not.
    pub fn observe(&mut self, s: StartupSample) -> bool {
        if !s.has_jobs {
            *self = Startup::default();
            return false;
        }
        if s.new_set {
            self.worked = !s.young;
            self.busy_since = None;
            self.since = Some(s.t);
        }
        if !self.worked {
            if s.busy {
                let since = *self.busy_since.get_or_insert(s.t);
                self.worked = s.t - since >= STARTUP_WORK_SECONDS;
            } else {
                self.busy_since = None;
            }
        }
        let within = self
            .since
            .is_none_or(|since| s.t - since < STARTUP_LIMIT_SECONDS);
        !self.worked && within && (s.busy || s.host_work || s.restarted)
    }

    /// The start-up is over: the jobs worked, or its limit passed.
    pub fn over(&self, t: f64) -> bool {
        self.worked
            || self
                .since
                .is_some_and(|since| t - since >= STARTUP_LIMIT_SECONDS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Kind;

    fn outcome() -> LedgerSample {
        LedgerSample {
            fresh: true,
            has_job: true,
            ..LedgerSample::default()
        }
    }

    #[test]
    fn one_state_by_precedence() {
        assert_eq!(outcome().state(), TimeState::Productive);
        let idle = LedgerSample {
            idle: true,
            ..outcome()
        };
        assert_eq!(idle.state(), TimeState::Idle);
        let input = LedgerSample {
            kinds: vec![TimeState::Input],
            ..idle.clone()
        };
        assert_eq!(input.state(), TimeState::Input);
        let compiling = LedgerSample {
            phase: Some(JobPhase::Compiling),
            ..input.clone()
        };
        assert_eq!(
            compiling.state(),
            TimeState::Compiling,
            "a phase explains the wait"
        );
        let hung = LedgerSample {
            kinds: vec![TimeState::Input, TimeState::Hung],
            ..compiling.clone()
        };
        assert_eq!(hung.state(), TimeState::Hung);
        let lost = LedgerSample {
            fresh: false,
            ..hung.clone()
        };
        assert_eq!(lost.state(), TimeState::Unknown);
        let fault = LedgerSample {
            kinds: vec![TimeState::Fault],
            ..lost
        };
        assert_eq!(fault.state(), TimeState::Fault);
        let free = LedgerSample {
            has_job: false,
            idle: true,
            ..outcome()
        };
        assert_eq!(free.state(), TimeState::NoJob);
        let starting = LedgerSample {
            starting: true,
            idle: true,
            ..outcome()
        };
        assert_eq!(starting.state(), TimeState::Startup);
        // A stall found past the warm-up is no start-up.
        let starved = LedgerSample {
            kinds: vec![TimeState::Input],
            ..starting.clone()
        };
        assert_eq!(starved.state(), TimeState::Input);
        let loader = LedgerSample {
            phase: Some(JobPhase::DataLoaderStartup),
            ..starved
        };
        assert_eq!(loader.state(), TimeState::Startup);
    }

    #[test]
    fn every_kind_is_booked_somewhere_on_purpose() {
        let booked: Vec<Kind> = Kind::ALL
            .into_iter()
            .filter(|k| TimeState::of_kind(*k).is_some())
            .collect();
        assert_eq!(booked.len(), 9, "{booked:?}");
    }

    #[test]
    fn a_ledger_adds_up_and_shows_every_state() {
        let mut l = Ledger::default();
        l.book(TimeState::Productive, 1.5);
        l.book(TimeState::Input, 2.0);
        l.book(TimeState::Input, -1.0);
        l.book(TimeState::Idle, f64::NAN);
        assert_eq!(l.total(), 3.5);
        let json = serde_json::to_value(l).unwrap();
        assert_eq!(json.as_object().unwrap().len(), 11);
        assert_eq!(json["input"], 2.0);
        let back: Ledger = serde_json::from_value(json).unwrap();
        assert_eq!(back, l);
    }

    fn sample(state: TimeState, idle: bool) -> LedgerSample {
        let kinds = match state {
            TimeState::Input | TimeState::Hung => vec![state],
            _ => vec![],
        };
        LedgerSample {
            kinds,
            idle,
            ..outcome()
        }
    }

    #[test]
    fn the_idle_run_before_a_stall_is_booked_to_it_once_it_starts() {
        let mut b = Booker::default();
        b.book(&sample(TimeState::Productive, false), 10.0);
        for _ in 0..80 {
            b.book(&sample(TimeState::Idle, true), 1.0);
        }
        assert_eq!(b.held_seconds(), 80.0);
        assert_eq!(b.ledger.total(), 10.0);
        // input_starved starts: the 80 idle seconds were its.
        b.book(&sample(TimeState::Input, true), 1.0);
        assert_eq!(b.ledger.seconds(TimeState::Input), 81.0);
        assert_eq!(b.ledger.seconds(TimeState::Idle), 0.0);
        // Fed again while the kind waits out its exit time: held...
        for _ in 0..30 {
            b.book(&sample(TimeState::Input, false), 1.0);
        }
        assert_eq!(b.held_seconds(), 30.0);
        // ...and productive once it ends.
        b.book(&sample(TimeState::Productive, false), 1.0);
        assert_eq!(b.ledger.seconds(TimeState::Productive), 41.0);
        assert_eq!(b.ledger.seconds(TimeState::Input), 81.0);
        assert_eq!(b.ledger.total() + b.held_seconds(), 122.0);
    }

    #[test]
    fn an_idle_run_no_kind_explains_is_idle_and_held_no_longer_than_the_cap() {
        let mut b = Booker::default();
        for _ in 0..400 {
            b.book(&sample(TimeState::Idle, true), 1.0);
        }
        assert_eq!(b.held_seconds(), HELD_SECONDS);
        assert_eq!(b.ledger.seconds(TimeState::Idle), 400.0 - HELD_SECONDS);
        b.book(&sample(TimeState::Productive, false), 1.0);
        assert_eq!(b.ledger.seconds(TimeState::Idle), 400.0);
        // A swinging input-bound GPU: its busy samples between idle ones
        // are the kind's.
        for i in 0..20 {
            b.book(&sample(TimeState::Input, i % 2 == 0), 1.0);
        }
        b.book_unknown(5.0);
        assert_eq!(b.ledger.seconds(TimeState::Input), 20.0);
        assert_eq!(b.ledger.seconds(TimeState::Unknown), 5.0);
        assert_eq!(b.held_seconds(), 0.0);
    }

    #[test]
    fn a_restart_is_awaited_as_long_as_a_run_is_held() {
        assert_eq!(RESTART_SECONDS, HELD_SECONDS);
    }

    #[test]
    fn the_idle_run_before_a_phase_is_found_is_the_phases() {
        let mut b = Booker::default();
        for _ in 0..20 {
            b.book(&sample(TimeState::Idle, true), 1.0);
        }
        // The first read finds a save under way.
        let saving = LedgerSample {
            phase: Some(JobPhase::Checkpointing),
            idle: true,
            ..outcome()
        };
        b.book(&saving, 1.0);
        assert_eq!(b.ledger.seconds(TimeState::Checkpointing), 21.0);
        assert_eq!(b.ledger.seconds(TimeState::Idle), 0.0);
    }

    #[test]
    fn the_work_that_ends_a_start_up_is_training() {
        let starting = |idle| LedgerSample {
            starting: true,
            idle,
            ..outcome()
        };
        let mut b = Booker::default();
        for _ in 0..30 {
            b.book(&starting(true), 1.0);
        }
        // Work that breaks off stays start-up...
        for _ in 0..4 {
            b.book(&starting(false), 1.0);
        }
        b.book(&starting(true), 1.0);
        assert_eq!(b.ledger.seconds(TimeState::Startup), 35.0);
        // ...work that lasts until the start-up ends is training.
        for _ in 0..10 {
            b.book(&starting(false), 1.0);
        }
        assert_eq!(b.held_seconds(), 10.0);
        b.book(&outcome(), 1.0);
        assert_eq!(b.ledger.seconds(TimeState::Productive), 11.0);
        assert_eq!(b.ledger.seconds(TimeState::Startup), 35.0);
        // A restart's start-up is its recovery, held the same way.
        let restarting = LedgerSample {
            restarted: true,
            ..starting(false)
        };
        b.book(&restarting, 1.0);
        b.book_unknown(1.0);
        assert_eq!(b.ledger.seconds(TimeState::Recovery), 1.0);
    }

    fn seen(new_set: bool, young: bool, busy: bool, host_work: bool, t: f64) -> StartupSample {
        StartupSample {
            has_jobs: true,
            new_set,
            young,
            busy,
            host_work,
            restarted: false,
            t,
        }
    }

    #[test]
    fn start_up_ends_with_sustained_work_and_starts_again_with_a_new_job() {
        let mut s = Startup::default();
        // Importing: the CPU works, the GPU does not yet.
        assert!(s.observe(seen(true, true, false, true, 0.0)));
        assert!(s.observe(seen(false, true, true, true, 1.0)));
        // A dip resets the run of busy samples.
        assert!(s.observe(seen(false, true, false, true, 5.0)));
        assert!(s.observe(seen(false, true, true, false, 6.0)));
        assert!(s.observe(seen(false, true, true, false, 15.0)));
        assert!(!s.observe(seen(false, true, true, false, 16.0)));
        assert!(s.over(16.0));
        // Once working, an idle sample is no start-up, nor a worker joining.
        assert!(!s.observe(seen(false, true, false, true, 17.0)));
        // The job restarted (a new set of jobs): start-up again.
        assert!(s.observe(seen(true, true, false, true, 19.0)));
        let gone = StartupSample {
            has_jobs: false,
            ..seen(false, false, false, false, 20.0)
        };
        assert!(!s.observe(gone));
        // A job the daemon found running long since is past its start-up.
        assert!(!s.observe(seen(true, false, false, true, 21.0)));
    }

    #[test]
    fn a_job_that_does_nothing_is_not_starting_and_a_start_up_has_a_limit() {
        let mut s = Startup::default();
        // Holds the GPU, no CPU, no storage, the GPU idle: not starting.
        assert!(!s.observe(seen(true, true, false, false, 0.0)));
        assert!(!s.over(0.0));
        // It starts working on the host: a start-up after all.
        assert!(s.observe(seen(false, true, false, true, 30.0)));
        // ...but not for ever without sustained work on the GPU.
        assert!(s.observe(seen(false, true, false, true, STARTUP_LIMIT_SECONDS - 1.0)));
        assert!(!s.observe(seen(false, true, false, true, STARTUP_LIMIT_SECONDS)));
        assert!(s.over(STARTUP_LIMIT_SECONDS));
        // A restarted rank waiting for its peers, CPU idle, is recovering.
        let mut r = Startup::default();
        let waiting = StartupSample {
            restarted: true,
            ..seen(true, true, false, false, 0.0)
        };
        assert!(r.observe(waiting));
    }

    #[test]
    fn nothing_is_productive_or_idle_without_an_activity_reading() {
        let unmeasured = LedgerSample {
            unmeasured: true,
            ..outcome()
        };
        assert_eq!(unmeasured.state(), TimeState::Unknown);
        // A kind or a start-up still says what the time was.
        let hung = LedgerSample {
            kinds: vec![TimeState::Hung],
            ..unmeasured.clone()
        };
        assert_eq!(hung.state(), TimeState::Hung);
        let starting = LedgerSample {
            starting: true,
            ..unmeasured.clone()
        };
        assert_eq!(starting.state(), TimeState::Startup);
        // A start-up on an unmeasured GPU is never held as work, so it
        // never turns into training.
        let mut b = Booker::default();
        for _ in 0..20 {
            b.book(&starting, 1.0);
        }
        for _ in 0..100 {
            b.book(&unmeasured, 1.0);
        }
        assert_eq!(b.held_seconds(), 0.0);
        assert_eq!(b.ledger.seconds(TimeState::Startup), 20.0);
        assert_eq!(b.ledger.seconds(TimeState::Unknown), 100.0);
        assert_eq!(b.ledger.seconds(TimeState::Productive), 0.0);
    }

    #[test]
    fn busy_start_up_work_that_breaks_off_when_the_job_stops_is_start_up() {
        let busy_starting = LedgerSample {
            starting: true,
            ..outcome()
        };
        let mut b = Booker::default();
        for _ in 0..5 {
            b.book(&busy_starting, 1.0);
        }
        // The job stops doing anything: no longer starting, the GPU idle.
        let idle = LedgerSample {
            idle: true,
            ..outcome()
        };
        b.book(&idle, 1.0);
        assert_eq!(b.ledger.seconds(TimeState::Startup), 5.0);
        assert_eq!(b.ledger.seconds(TimeState::Productive), 0.0);
    }
}
