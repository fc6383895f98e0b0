//! Which jobs' threads a sample read, and why (the policy: `thread_reads.rs`).

use serde::{Deserialize, Serialize};

/// Why a job's threads were read this sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// Every job is read every sample (`every` 0 or 1, or no threshold).
    Always,
    /// Someone asked for thread views.
    Asked,
    /// A stall kind is pending or active on one of its GPUs.
    Finding,
    /// One of its GPUs is not busy, or its utilization is unknown.
    NotBusy,
    /// Its GPUs are busy and its slow-cadence read is due.
    Cadence,
    /// Its threads were due to be carried, but a process of it is new or
    /// its thread count changed since they were last read.
    Changed,
}

impl Reason {
    pub const ALL: [Reason; 6] = [
        Reason::Always,
        Reason::Asked,
        Reason::Finding,
        Reason::NotBusy,
        Reason::Cadence,
        Reason::Changed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Always => "always",
            Reason::Asked => "asked",
            Reason::Finding => "finding",
            Reason::NotBusy => "not_busy",
            Reason::Cadence => "cadence",
            Reason::Changed => "changed",
        }
    }
}

/// How many job samples read their threads, by reason, and how many carried
/// them, since the daemon started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ThreadReadCounts {
    /// In [`Reason::ALL`]'s order.
    pub read: [u64; 6],
    pub deferred: u64,
}

impl ThreadReadCounts {
    pub fn add(&mut self, reason: Option<Reason>) {
        match reason {
            Some(r) => self.read[r as usize] += 1,
            None => self.deferred += 1,
        }
    }

    pub fn merge(&mut self, other: &ThreadReadCounts) {
        for (a, b) in self.read.iter_mut().zip(other.read) {
            *a += b;
        }
        self.deferred += other.deferred;
    }

    pub fn get(&self, reason: Reason) -> u64 {
        self.read[reason as usize]
    }
}
