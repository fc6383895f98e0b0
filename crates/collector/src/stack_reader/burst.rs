//! What a burst of reads gives: its reads, or why there are none.

use super::budget::Limit;
use super::raw::RawThread;

/// Reads of one burst.
#[derive(Debug, Clone, PartialEq)]
pub struct Sampled {
    pub python_version: String,
    /// Seconds since the epoch when the burst started, and its length.
    pub started: f64,
    pub duration_seconds: f64,
    pub reads: Vec<Vec<RawThread>>,
    /// When each read was taken: seconds after `started` (a monotonic
    /// clock), one per read.
    pub read_times: Vec<f64>,
    /// Reads that failed or tore.
    pub dropped: u32,
    /// The process exited before the burst's end.
    pub exited: bool,
    /// Budgets a read met (what it kept is cut to them), or that ended the
    /// burst early.
    pub limits: std::collections::BTreeSet<Limit>,
}

/// Why a process's stacks cannot be read, each with a sentence saying so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unavailable {
    NotPython(String),
    UnsupportedPython(String),
    FreeThreaded(String),
    /// Every read of the burst found no Python thread.
    NoThreads(String),
    NoPermission(String),
    Exited(String),
    /// A read met a budget before it could keep anything.
    OverBudget(Limit, String),
    Failed(String),
}

impl Unavailable {
    pub fn detail(&self) -> &str {
        match self {
            Unavailable::NotPython(s)
            | Unavailable::UnsupportedPython(s)
            | Unavailable::FreeThreaded(s)
            | Unavailable::NoThreads(s)
            | Unavailable::NoPermission(s)
            | Unavailable::Exited(s)
            | Unavailable::OverBudget(_, s)
            | Unavailable::Failed(s) => s,
        }
    }
}

/// How often and how long to read.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BurstOptions {
    pub rate_hz: f64,
    pub duration: std::time::Duration,
}
