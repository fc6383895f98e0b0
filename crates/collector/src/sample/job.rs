//! What a job's own files say of it beyond its counters: its place in a
//! distributed run (its environment) and the frameworks it loaded (its memory
//! map).

use serde::{Deserialize, Serialize};

/// A job's place in a distributed run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rank {
    /// Equal on every rank of one run, different between runs.
    pub run: String,
    /// Global rank.
    pub rank: u32,
    pub local_rank: Option<u32>,
    pub world_size: Option<u32>,
    /// `torchrun`, `torch`, `deepspeed`, `slurm`, `mpi`, `tensorflow`, `jax`.
    pub launcher: String,
}

/// What the environment said.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "state", content = "detail")]
pub enum RankRead {
    /// Not read yet, or no launcher variable: not part of a run.
    #[default]
    None,
    Found(Rank),
    /// Launcher variables that do not make a rank, or an environment that
    /// could not be read: why, in words.
    Unknown(String),
}

impl RankRead {
    /// The rank, where the environment made one.
    pub fn found(&self) -> Option<&Rank> {
        match self {
            RankRead::Found(r) => Some(r),
            _ => None,
        }
    }
}

/// The frameworks whose libraries a process has mapped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Frameworks {
    #[serde(default)]
    pub pytorch: bool,
    #[serde(default)]
    pub tensorflow: bool,
    #[serde(default)]
    pub jax: bool,
}

impl Frameworks {
    pub fn any(&self) -> bool {
        self.pytorch || self.tensorflow || self.jax
    }

    pub(crate) fn all(&self) -> bool {
        self.pytorch && self.tensorflow && self.jax
    }

    /// Notes the framework a mapped file belongs to, by its base name
    /// (`libtorch_cpu.so`, `libtensorflow_framework.so.2`) or, for JAX,
    /// its package directory (`jaxlib/`).
    pub(crate) fn note(&mut self, path: &str) {
        let base = path.rsplit('/').next().unwrap_or(path);
        if base.starts_with("libtorch") || base.starts_with("libc10") {
            self.pytorch = true;
        } else if base.starts_with("libtensorflow") || base.starts_with("_pywrap_tensorflow") {
            self.tensorflow = true;
        } else if path.contains("/jaxlib/") || base.starts_with("libjax") {
            self.jax = true;
        }
    }
}
