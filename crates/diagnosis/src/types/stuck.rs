//! A hang confirmed by the job's own stacks, as the evidence shows it. The
//! confirming reads are `confirm.rs`.

use serde::{Deserialize, Serialize};

/// A job found stuck: the same stacks in `reads` reads over `over_seconds`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stuck {
    /// `threading.Lock.acquire <- run (train.py:88)`.
    pub place: String,
    /// The thread it names: `tid 42 (python3)`.
    pub thread: String,
    /// What it waits on, for well-known blocking calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_on: Option<String>,
    pub reads: u32,
    pub over_seconds: f64,
}
