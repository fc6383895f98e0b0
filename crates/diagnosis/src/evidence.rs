//! The numbers a rule used, carried with every finding and event so a person
//! can check the verdict.

use crate::round::{round, round_opt};
pub use crate::types::evidence::{
    Evidence, FaultEvidence, GilSpread, ProcessEvidence, ThreadEvidence,
};
use crate::types::frame::{HostFrame, JobFrame};
use crate::types::framework::{Framework, FrameworkEvidence};

impl From<&crate::types::frame::ThreadFrame> for ThreadEvidence {
    fn from(t: &crate::types::frame::ThreadFrame) -> Self {
        ThreadEvidence {
            pid: t.pid,
            tid: t.tid,
            name: t.name.clone(),
            state: t.state.to_string(),
            cpu_ratio: round(t.cpu),
            wait_ratio: round_opt(t.wait),
        }
    }
}

/// The framework evidence of a GPU's jobs; `None` where nothing points at
/// any framework.
pub fn framework(jobs: &[&JobFrame], host: &HostFrame) -> Option<FrameworkEvidence> {
    let mut libraries: Vec<Framework> = jobs
        .iter()
        .flat_map(|j| j.framework.loaded.iter().copied())
        .collect();
    libraries.sort();
    libraries.dedup();
    let workers: u32 = jobs.iter().map(|j| j.framework.data_loader_workers).sum();
    let pin = jobs.iter().any(|j| j.framework.pin_memory_thread);
    let named = workers > 0 || pin;
    let name = match libraries.as_slice() {
        _ if named => Some(Framework::Pytorch),
        [one] => Some(*one),
        _ => None,
    };
    if name.is_none() && libraries.is_empty() {
        return None;
    }
    let pytorch = name == Some(Framework::Pytorch) || libraries.contains(&Framework::Pytorch);
    let idle_cpus = host
        .cpus
        .zip(host.cpu_utilization)
        .map(|(n, used)| round(n as f64 * (1.0 - used).clamp(0.0, 1.0)));
    Some(FrameworkEvidence {
        name,
        libraries,
        data_loader_workers: pytorch.then_some(workers),
        pin_memory: pytorch.then_some(pin),
        idle_cpus,
    })
}
