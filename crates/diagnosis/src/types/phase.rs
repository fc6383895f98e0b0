//! A job's own phases that idle its GPU (compiling, checkpointing, the
//! DataLoader's start-up), as the status and the evidence show them. Finding
//! and timing them is `phase.rs`.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobPhase {
    Compiling,
    Checkpointing,
    DataLoaderStartup,
}

impl JobPhase {
    pub const ALL: [JobPhase; 3] = [
        JobPhase::Compiling,
        JobPhase::Checkpointing,
        JobPhase::DataLoaderStartup,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            JobPhase::Compiling => "compiling",
            JobPhase::Checkpointing => "checkpointing",
            JobPhase::DataLoaderStartup => "data_loader_startup",
        }
    }
}

/// The phase a GPU's job is in now, for the status and the evidence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseStatus {
    pub phase: JobPhase,
    /// When the job entered it (the first read that showed it), and how
    /// long it has lasted since.
    pub since: f64,
    pub seconds: f64,
    /// Seconds the GPU waited on it over the last hour, and their share.
    pub seconds_last_hour: f64,
    pub share_last_hour: f64,
    /// Times the job entered it over the last hour (compilations, saves).
    pub entered_last_hour: u32,
    /// It lasted too long or took too large a share: the stall kinds it
    /// held back are reported, with it named.
    pub unusual: bool,
}
