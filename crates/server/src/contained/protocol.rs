//! What the daemon and its stack reader say to each other: one JSON object
//! a line, a request down the child's stdin, replies up its stdout.

use collector::stack_reader::Budgets;
use diagnosis::stack_report::{Focus, StackReport};
use serde::{Deserialize, Serialize};

/// Longest request line the child accepts.
pub const MAX_REQUEST: usize = 64 << 10;
/// Longest reply line the daemon accepts (a report is a few KiB: at most
/// 8 threads and 3 places each, names cut to the budget).
pub const MAX_REPLY: usize = 1 << 20;

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "request", rename_all = "snake_case")]
pub enum Request {
    /// Read `pid` `rate_hz` times a second for `duration_ms`.
    Burst {
        pid: u32,
        focus: Focus,
        rate_hz: f64,
        duration_ms: u64,
        budgets: Budgets,
    },
    /// Drop what is kept for processes that exited.
    Prune,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum Reply {
    /// `reads` reads done so far (kept or dropped).
    Read {
        reads: usize,
    },
    /// The reads are done; the report is being made.
    Summing,
    /// The burst's report, and how many processes the reader keeps a spy for.
    Report {
        report: Box<StackReport>,
        spies: usize,
    },
    Pruned {
        spies: usize,
    },
}
