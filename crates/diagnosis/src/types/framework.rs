//! The ML frameworks a job may run, and what its frames said of its
//! framework, as evidence. Telling the framework is `framework.rs`.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Framework {
    Pytorch,
    Tensorflow,
    Jax,
}

impl Framework {
    pub fn name(self) -> &'static str {
        match self {
            Framework::Pytorch => "PyTorch",
            Framework::Tensorflow => "TensorFlow",
            Framework::Jax => "JAX",
        }
    }
}

/// What the job's frames (libraries and process names) said of its
/// framework, as evidence.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FrameworkEvidence {
    /// The framework, where one is settled without the stacks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<Framework>,
    /// The frameworks whose libraries the job has mapped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub libraries: Vec<Framework>,
    /// PyTorch DataLoader worker processes now (`pt_data_worker`), where
    /// the job is a PyTorch job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_loader_workers: Option<u32>,
    /// Whether the DataLoader's pin-memory thread runs (`pt_data_pin`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pin_memory: Option<bool>,
    /// CPUs of the host left idle now: room for more workers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_cpus: Option<f64>,
}
