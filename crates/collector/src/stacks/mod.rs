//! Python stacks of a process, read out of process with py-spy while a GPU
//! stalls. Never pauses the target: py-spy's non-blocking mode only copies
//! memory (`process_vm_readv`). A read that fails or tears is one dropped
//! sample. One spy is kept per (pid, start time), reused by later bursts and
//! dropped when the process exits. What a burst returns is already stripped
//! to what may be shown: function names, package-relative file names and
//! line numbers; never locals, arguments, command lines or directories.

mod access;
pub mod budget;
mod frames;
mod reader;
pub mod tids;

pub use access::in_jobs;
pub use budget::{Budgets, Limit};
pub use reader::{StackReader, start_ticks};

/// One Python frame, as it may be shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawFrame {
    pub function: String,
    /// Package-relative (`PIL/Image.py`) or the file's own name.
    pub file: String,
    pub line: u32,
    /// Standard library or installed package, not the user's own code.
    pub library: bool,
}

/// One Python thread in one read, with its state from `/proc`.
#[derive(Debug, Clone, PartialEq)]
pub struct RawThread {
    /// The thread's tid as the host (the reader's `/proc`) sees it.
    pub tid: u32,
    pub name: String,
    pub state: char,
    pub owns_gil: bool,
    /// Leaf first.
    pub frames: Vec<RawFrame>,
}

/// Reads of one burst.
#[derive(Debug, Clone, PartialEq)]
pub struct Sampled {
    pub python_version: String,
    /// Seconds since the epoch when the burst started, and its length.
    pub started: f64,
    pub duration_seconds: f64,
    pub reads: Vec<Vec<RawThread>>,
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
