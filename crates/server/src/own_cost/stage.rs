//! The stages the daemon's CPU time is charged to, and which stage each
//! piece of the collector's work goes to.

use collector::meter::Work;

/// What the daemon's CPU time goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stage {
    /// The NVML calls (their thread) and the GPU events thread.
    Nvml,
    /// Reading the jobs' and the host's `/proc` files.
    Proc,
    /// The kernel log's reader (Xid lines).
    Faults,
    /// Asking the kubelet which pod holds each GPU.
    Kubelet,
    /// Rates from two samples, the diagnosis, the ledger and the history.
    Diagnosis,
    /// Reading Python stacks and what they are turned into.
    Stacks,
    /// Writing (and gzipping) `/metrics` bodies.
    Render,
    /// Everything else the HTTP side does: connections, requests, the API
    /// and the page.
    Http,
    /// Starting up: the configuration, the first NVML set-up.
    Startup,
}

pub const STAGES: usize = 9;

impl Stage {
    pub const ALL: [Stage; STAGES] = [
        Stage::Nvml,
        Stage::Proc,
        Stage::Faults,
        Stage::Kubelet,
        Stage::Diagnosis,
        Stage::Stacks,
        Stage::Render,
        Stage::Http,
        Stage::Startup,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Nvml => "nvml",
            Stage::Proc => "proc",
            Stage::Faults => "faults",
            Stage::Kubelet => "kubelet",
            Stage::Diagnosis => "diagnosis",
            Stage::Stacks => "stacks",
            Stage::Render => "render",
            Stage::Http => "http",
            Stage::Startup => "startup",
        }
    }
}

impl From<Work> for Stage {
    fn from(work: Work) -> Stage {
        match work {
            Work::Nvml => Stage::Nvml,
            Work::Proc => Stage::Proc,
            Work::Faults => Stage::Faults,
            Work::Kubelet => Stage::Kubelet,
        }
    }
}
