//! What the kubelet reader reports with each sample: where the pod names
//! come from and how its last refresh went (`/api/v1/status`'s
//! `kubernetes`).

use serde::{Deserialize, Serialize};

/// Where a job's namespace, pod and container come from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PodSource {
    /// The kubelet's PodResources `List` answered recently: jobs are matched
    /// to pods by their GPUs.
    Kubelet,
    /// No recent answer: a job in a pod has the pod UID of its cgroup only.
    #[default]
    Cgroup,
}

/// The kubelet reader's state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KubernetesState {
    /// The PodResources socket asked.
    pub socket: String,
    pub source: PodSource,
    /// When `List` last answered, seconds since the epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_refresh: Option<f64>,
    /// Pods in that answer (at most `MAX_PODS` are kept).
    pub pods: u32,
    /// Why the latest attempt failed, or what of its answer was left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}
