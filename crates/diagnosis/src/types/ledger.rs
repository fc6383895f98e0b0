//! A GPU's booked time as the status shows it: seconds by state, lost
//! seconds by place in the job's code (or why none), and the job that left
//! the GPU last (docs/goodput.md). The booking is `ledger.rs`.

use serde::{Deserialize, Serialize};

use super::time_state::TimeState;

/// Seconds booked to each state.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Ledger {
    seconds: [f64; TimeState::ALL.len()],
}

impl Ledger {
    pub fn book(&mut self, state: TimeState, seconds: f64) {
        if seconds > 0.0 && seconds.is_finite() {
            self.seconds[state.index()] += seconds;
        }
    }

    pub fn seconds(&self, state: TimeState) -> f64 {
        self.seconds[state.index()]
    }

    pub fn total(&self) -> f64 {
        self.seconds.iter().sum()
    }

    /// Every state with its seconds, in `TimeState::ALL` order.
    pub fn iter(&self) -> impl Iterator<Item = (TimeState, f64)> + '_ {
        TimeState::ALL.into_iter().map(|s| (s, self.seconds(s)))
    }
}

impl Serialize for Ledger {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(TimeState::ALL.len()))?;
        for (state, seconds) in self.iter() {
            map.serialize_entry(state.as_str(), &crate::round::round(seconds))?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Ledger {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let by_state = std::collections::BTreeMap::<TimeState, f64>::deserialize(d)?;
        let mut ledger = Ledger::default();
        for (state, seconds) in by_state {
            ledger.book(state, seconds);
        }
        Ok(ledger)
    }
}

/// A place in the job's code, as a label: never a path or an argument.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Place {
    /// The user's own frame: `decode_image (data.py:42)` (function, file
    /// base name, line).
    pub place: String,
    /// The installed function that frame called (`PIL.Image.open`); empty
    /// when the place is the leaf (the user's own code runs).
    #[serde(default)]
    pub library: String,
}

/// Why lost seconds carry no place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unplaced {
    /// No stacks were read for the episode: it ended before a read, the
    /// daemon reads no stacks (`stacks.enabled = false`), or its kind reads
    /// none.
    NoRead,
    /// The daemon may not read the job's memory (no `CAP_SYS_PTRACE`).
    NoPermission,
    /// The job is not Python.
    NotPython,
    /// A Python the reader does not know, or a free-threaded build.
    UnsupportedPython,
    /// Read, but no Python frame was found.
    NoFrames,
    /// The read failed, met a budget or was backed off, or the job exited.
    Failed,
    /// The host already exports its cap of places (the top ones by seconds
    /// over the last day).
    OverCap,
}

impl Unplaced {
    pub const ALL: [Unplaced; 7] = [
        Unplaced::NoRead,
        Unplaced::NoPermission,
        Unplaced::NotPython,
        Unplaced::UnsupportedPython,
        Unplaced::NoFrames,
        Unplaced::Failed,
        Unplaced::OverCap,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Unplaced::NoRead => "no_read",
            Unplaced::NoPermission => "no_permission",
            Unplaced::NotPython => "not_python",
            Unplaced::UnsupportedPython => "unsupported_python",
            Unplaced::NoFrames => "no_frames",
            Unplaced::Failed => "failed",
            Unplaced::OverCap => "over_cap",
        }
    }
}

/// A place's lost seconds on one GPU, as shown.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlaceLoss {
    pub state: TimeState,
    /// The stall kind (`input_starved`, `spinning`, ...) or the phase
    /// (`compiling`, `checkpointing`) that lost them.
    pub kind: String,
    #[serde(flatten)]
    pub place: Place,
    /// GPU-seconds booked to it while shown (a MIG slice's weighted by its
    /// share), since the daemon started.
    pub seconds: f64,
    /// How long one call of it took, as last measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_seconds: Option<f64>,
}

/// Lost seconds on one GPU tied to no place, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UnplacedLoss {
    pub state: TimeState,
    pub reason: Unplaced,
    pub seconds: f64,
}

/// A job set that left the GPU, as the status shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EndedJob {
    /// The main job's pid (the first of the set).
    pub pid: u32,
    /// Its run, when it was a rank of one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
    /// When the daemon first saw the GPU without it, seconds since the epoch.
    pub ended: f64,
    /// When its last checkpoint seen by the daemon ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_checkpoint: Option<f64>,
    /// Productive GPU seconds since that checkpoint (since the job came
    /// when none was seen): what a restart from the checkpoint trains again.
    pub progress_since_checkpoint_seconds: f64,
    /// A job of the same run came back on the GPU: that progress was lost.
    pub restarted: bool,
}
