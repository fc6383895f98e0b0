//! Python stacks as the evidence shows them: the report of one sampling
//! burst, its hot places, threads and call times. The reading of a burst
//! into a report is `stack_report.rs`.

use serde::{Deserialize, Serialize};

/// What a burst is for: the work that keeps a thread busy (CPU-bound
/// kinds), or where every thread stands (no-progress kinds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Focus {
    Busy,
    AllThreads,
}

/// How a burst ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReadOutcome {
    Sampled,
    NotPython,
    UnsupportedPython,
    FreeThreaded,
    /// The interpreter was read, but no read found a Python thread in it.
    NoThreads,
    NoPermission,
    Exited,
    Failed,
    /// Asked for on demand, of a process that is no GPU job's.
    NotWatched,
    /// A read met a budget before it could keep anything (the job's
    /// structures are too large, loop, or took too long to read).
    OverBudget,
    /// Not read: a read of this process failed or met a budget a short
    /// while ago, and it is read again only after a back-off.
    BackedOff,
}

/// The stacks of one process over a burst, as carried in evidence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StackReport {
    pub pid: u32,
    pub outcome: ReadOutcome,
    /// What the summary is about: the busy work, or every thread.
    pub focus: Focus,
    /// Plain words: why there are no stacks, or what limited them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python_version: Option<String>,
    /// When the burst started, seconds since the epoch.
    pub time: f64,
    pub duration_seconds: f64,
    /// Reads that succeeded, and reads dropped (torn or failed).
    pub samples: u32,
    #[serde(default)]
    pub dropped: u32,
    /// Budgets the reads met (`frames`, `thread_cycle`, `read_time`, ...):
    /// what was kept is cut to them, or the burst ended there.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub limits: Vec<String>,
    /// One line for logs and reports.
    pub summary: String,
    /// The most frequent places across the process's running threads.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hot: Vec<HotSpot>,
    /// Number of threads that ran the hot work (several: GIL-bound work
    /// hopping between pool threads).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub busy_threads: Option<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub threads: Vec<ThreadStacks>,
    /// The framework most of the installed frames read belong to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub framework: Option<super::framework::Framework>,
    /// An interactive kernel (Jupyter's `ipykernel` in a stack): waiting
    /// for its user is not a hang.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interactive: bool,
    /// The job's own phase the reads show (compiling, checkpointing, the
    /// DataLoader's start-up), when at least half of them do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<super::phase::JobPhase>,
    /// How long the training loop's thread waits for each batch, where it
    /// waits on a known data-loading call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_wait: Option<BatchWait>,
}

/// The training loop's wait for each batch: a thread's calls of a known
/// data-loading call (the DataLoader's or tf.data's `__next__`,
/// `queue.get`) from the user's own code.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchWait {
    /// What it waits on, in words (`the DataLoader's next batch`).
    pub waiting_on: String,
    pub tid: u32,
    pub thread: String,
    /// The user's frame that makes the call: the loop.
    pub function: String,
    pub file: String,
    pub line: u32,
    pub per_batch: CallTime,
}

/// A place in the code: the leaf frame and the first frame in the user's
/// own code above it (absent when the leaf is the user's code).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HotSpot {
    /// `PIL.Image.open` for installed code, the bare name for the user's.
    pub function: String,
    pub file: String,
    pub line: u32,
    /// The installed function the user's code called, when the leaf lies
    /// deeper (`PIL.Image.open` for a leaf in `PIL.ImageFile.load`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_function: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_line: Option<u32>,
    /// The user's own frames that called it, innermost first: the run of
    /// the user's frames right above the leaf (or above `user_function`),
    /// up to [`CALLERS_KEPT`](crate::stack_report::CALLERS_KEPT) in all with it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub callers: Vec<Caller>,
    /// Reads in which it was seen, and their share of all reads (of the
    /// thread's reads, for a thread's own list).
    pub samples: u32,
    pub share: f64,
    /// How long one call of it takes (the call the user's frame makes), from
    /// runs of reads inside the same call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_call: Option<CallTime>,
}

/// One of the user's own frames above a hot place.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Caller {
    pub function: String,
    pub file: String,
    pub line: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadStacks {
    pub pid: u32,
    pub tid: u32,
    pub name: String,
    /// State at the last read.
    pub state: String,
    /// Reads the thread was in, the share of them it was running (`R`) and
    /// the share it held the GIL.
    pub samples: u32,
    pub running_share: f64,
    pub gil_share: f64,
    /// What it waits on, for well-known blocking calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_on: Option<String>,
    pub top: Vec<HotSpot>,
}

/// How long one call of a place takes, over the calls of a burst.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallTime {
    /// Calls seen whole: begun and ended between two reads of the burst.
    pub calls: u32,
    /// Median and 90th percentile of their durations, seconds; absent when
    /// they are too short to time (`under_seconds`) or none was seen whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub median_seconds: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p90_seconds: Option<f64>,
    /// The calls seen whole were shorter than this (a few sampling
    /// periods), so no figure is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub under_seconds: Option<f64>,
    /// The longest call still running at the burst's start or end lasted at
    /// least this long (absent when none was).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_least_seconds: Option<f64>,
    /// The sampling period the reads were taken at (their median spacing).
    pub period_seconds: f64,
    /// The calls were made by a PyTorch DataLoader's fetch of a batch,
    /// one item after another from one line: a batch's calls merge, so the
    /// figures are a batch's, not an item's.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub batch_of_items: bool,
    /// The calls were made one after another from one place by tf.data's
    /// runner of a `py_function` (a map's Python function): back-to-back
    /// calls merge, so the figures span several calls, not one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub merged_by_tf_data: bool,
}
