//! One GPU's lost seconds tied to the place in the job's code that lost
//! them (docs/goodput.md#by-place): each second the ledger books to
//! `input`, `hung`, `compiling` or `checkpointing` goes to the place the
//! episode's stacks name, or to why none is named. Seconds booked before
//! the episode's first stack report (the held run a finding re-books, the
//! first seconds of the episode) wait for it.

use crate::Kind;
use crate::ledger::{Located, place};
use crate::types::ledger::{Ledger, Unplaced};
use crate::types::phase::JobPhase;
use crate::types::stack_report::StackReport;
use crate::types::time_state::TimeState;

/// The states whose seconds are lost to a cause a place can name.
pub(super) const LOST: [TimeState; 4] = [
    TimeState::Input,
    TimeState::Hung,
    TimeState::Compiling,
    TimeState::Checkpointing,
];

/// Longest seconds wait for an episode's first stack report before they
/// are booked as never read (a read comes within seconds of the episode's
/// start where stacks are read at all).
pub(super) const PENDING_LIMIT_SECONDS: f64 = 300.0;

/// Lost seconds, where they went.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Booking {
    pub(crate) state: TimeState,
    pub(crate) kind: &'static str,
    pub(crate) at: Result<Located, Unplaced>,
    pub(crate) seconds: f64,
}

/// What lost a state's seconds now: the kind (or phase), and where, if
/// known yet.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Cause {
    pub(super) kind: &'static str,
    /// `None`: the kind reads stacks and none came yet.
    pub(super) at: Option<Result<Located, Unplaced>>,
}

#[derive(Debug, Clone, Default)]
pub(super) struct LostPlaces {
    /// Seconds waiting for their episode's first stack report, by state and
    /// kind, and since when the oldest waits.
    pending: Vec<(TimeState, &'static str, f64)>,
    pending_since: Option<f64>,
    /// The last cause of each lost state: seconds booked once it ended (a
    /// run held until the kind's end) are its.
    last: [Option<Cause>; LOST.len()],
    /// Where each phase was last seen (compiling, checkpointing).
    phase_at: [Option<Result<Located, Unplaced>>; 2],
    /// Bookings not yet handed to the host's ledger.
    pub(super) out: Vec<Booking>,
}

fn slot(state: TimeState) -> usize {
    LOST.iter().position(|s| *s == state).unwrap_or(0)
}

impl LostPlaces {
    /// Lost seconds of each state between two ledgers.
    pub(super) fn deltas(before: &Ledger, after: &Ledger) -> [f64; LOST.len()] {
        LOST.map(|s| after.seconds(s) - before.seconds(s))
    }

    /// The cause of a state's seconds now: its active kind (a refinement
    /// first), where the stacks read for it say; else the state's last
    /// cause; a phase where its short read found it.
    pub(super) fn cause(
        &mut self,
        state: TimeState,
        active: &[Kind],
        stacks: Option<&StackReport>,
    ) -> Cause {
        let phase = match state {
            TimeState::Compiling => Some(0),
            TimeState::Checkpointing => Some(1),
            _ => None,
        };
        if let Some(p) = phase {
            return Cause {
                kind: state.as_str(),
                at: Some(self.phase_at[p].clone().unwrap_or(Err(Unplaced::NoRead))),
            };
        }
        let mut of_state = active
            .iter()
            .filter(|k| TimeState::of_kind(**k) == Some(state));
        let kind = of_state
            .clone()
            .find(|k| k.is_refinement())
            .or_else(|| of_state.next());
        let Some(kind) = kind else {
            return self.last[slot(state)].clone().unwrap_or(Cause {
                kind: state.as_str(),
                at: Some(Err(Unplaced::NoRead)),
            });
        };
        let reads = active
            .iter()
            .any(|k| TimeState::of_kind(*k) == Some(state) && k.wants_stacks());
        let at = match stacks {
            Some(report) => Some(place::locate(report)),
            None if reads => None,
            None => Some(Err(Unplaced::NoRead)),
        };
        let cause = Cause {
            kind: kind.as_str(),
            at,
        };
        self.last[slot(state)] = Some(cause.clone());
        cause
    }

    /// Books the lost seconds of each state to its cause (one for each
    /// state that gained seconds).
    pub(super) fn book(&mut self, deltas: [f64; LOST.len()], causes: &[Option<Cause>], t: f64) {
        for ((state, seconds), cause) in LOST.into_iter().zip(deltas).zip(causes) {
            let Some(cause) = cause.as_ref().filter(|_| seconds > 0.0) else {
                continue;
            };
            match &cause.at {
                Some(at) => self.out.push(Booking {
                    state,
                    kind: cause.kind,
                    at: at.clone(),
                    seconds,
                }),
                None => {
                    self.pending_since.get_or_insert(t);
                    match self
                        .pending
                        .iter_mut()
                        .find(|(s, k, _)| *s == state && *k == cause.kind)
                    {
                        Some(p) => p.2 += seconds,
                        None => self.pending.push((state, cause.kind, seconds)),
                    }
                }
            }
        }
        if self
            .pending_since
            .is_some_and(|since| t - since > PENDING_LIMIT_SECONDS)
        {
            self.settle(None);
        }
    }

    /// The seconds waiting for a stack report go where `report` says, or,
    /// with none (the episode ended unread), to `no_read`.
    pub(super) fn settle(&mut self, report: Option<&StackReport>) {
        let at = report.map_or(Err(Unplaced::NoRead), place::locate);
        for (state, kind, seconds) in self.pending.drain(..) {
            self.out.push(Booking {
                state,
                kind,
                at: at.clone(),
                seconds,
            });
        }
        self.pending_since = None;
        // The causes that waited for it know their place now.
        for cause in self.last.iter_mut().flatten() {
            if cause.at.is_none() {
                cause.at = Some(at.clone());
            }
        }
    }

    /// A short read found the job in a phase: where it stands.
    pub(super) fn phase_seen(&mut self, phase: JobPhase, report: &StackReport) {
        let p = match phase {
            JobPhase::Compiling => 0,
            JobPhase::Checkpointing => 1,
            JobPhase::DataLoaderStartup => return,
        };
        self.phase_at[p] = Some(place::locate(report));
    }

    /// Seconds waiting for a stack report.
    pub(super) fn pending_seconds(&self) -> f64 {
        self.pending.iter().map(|p| p.2).sum()
    }
}
