//! What every handler gets: the latest published sample, the engine, the stacks
//! thread and the settings the routes need. Built by `commands::run`.

use std::sync::Arc;
use std::time::Duration;

use crate::config::StacksConfig;
use crate::sampling::asked::ThreadViews;
use crate::sampling::bodies::MetricsBodies;
use crate::sampling::sampler::{LatestRx, SharedEngine};
use crate::sampling::stack_bursts::Stacks;

#[derive(Clone)]
pub struct AppState {
    pub latest: LatestRx,
    pub engine: SharedEngine,
    pub interval: Duration,
    pub max_processes: usize,
    /// The stacks thread, unless `[stacks] enabled = false`.
    pub stacks: Option<Stacks>,
    pub stacks_config: StacksConfig,
    /// `/metrics` bodies of the latest sample.
    pub metrics: Arc<MetricsBodies>,
    /// Someone asking for thread views (the status, a job's stacks).
    pub thread_views: Arc<ThreadViews>,
}
