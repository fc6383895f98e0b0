//! The JSON API: `/api/v1/status` and `/api/v1/events` (schema in docs/api.md).

use axum::extract::{Query, State};
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Json, Response};
use collector::privileges::Privileges;
use collector::sample::kubernetes::KubernetesState;
use diagnosis::costliest::{HostPlace, HostUnplaced};
use diagnosis::{Event, GpuStatus};
use serde::{Deserialize, Serialize};

use crate::api::state::AppState;
use crate::sampling::sampler::Latest;

/// Most events one request returns.
pub const MAX_LIMIT: usize = 1000;
const DEFAULT_LIMIT: usize = 100;

#[derive(Debug, Serialize, Deserialize)]
pub struct StatusResponse {
    /// When the sample behind this status was taken, seconds since the epoch.
    pub time: f64,
    /// `up`, `unavailable` or `stale`.
    pub nvml: String,
    pub gpus: Vec<GpuStatus>,
    /// What the daemon may read (absent from a daemon older than the report).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub privileges: Option<Privileges>,
    /// Where pod names come from and how the kubelet last answered; absent
    /// when no kubelet is asked (`kubernetes.pod_resources_socket` empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<KubernetesState>,
    /// The places in the jobs' code this host's GPUs lost time to, most
    /// first, with the fix each carries (docs/goodput.md#by-place).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub costliest_lines: Vec<HostPlace>,
    /// Lost time no place is tied to, by why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lost_unplaced: Vec<HostUnplaced>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct EventsResponse {
    pub events: Vec<Event>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    /// Only events at or after this time (seconds since the epoch).
    since: Option<f64>,
    /// Only events with a greater id (for polling without gaps).
    after: Option<u64>,
    limit: Option<usize>,
}

pub fn nvml_state(up: bool, stale: bool) -> &'static str {
    match (up, stale) {
        (_, true) => "stale",
        (true, false) => "up",
        (false, false) => "unavailable",
    }
}

pub async fn status(State(state): State<AppState>) -> Response {
    let latest = with_threads_read(&state).await;
    let Some(latest) = latest else {
        return (StatusCode::SERVICE_UNAVAILABLE, "no sample taken yet\n").into_response();
    };
    let gpus = latest.diagnosis.as_ref();
    Json(StatusResponse {
        time: latest.snapshot.timestamp_seconds,
        costliest_lines: diagnosis::costliest::places(gpus),
        lost_unplaced: diagnosis::costliest::unplaced(gpus),
        nvml: nvml_state(latest.snapshot.nvml_up, latest.snapshot.any_gpu_stale()).to_owned(),
        gpus: latest.diagnosis.as_ref().clone(),
        privileges: Some(latest.privileges.as_ref().clone()),
        kubernetes: latest.snapshot.kubernetes.clone(),
    })
    .into_response()
}

/// The latest sample, once every job's threads in it were read in that
/// sample. Asks for thread views: while jobs on busy GPUs had their threads
/// carried (see the collector's thread_reads.rs), waits for the sample
/// that reads them, at most a few intervals.
async fn with_threads_read(state: &AppState) -> Option<Latest> {
    state.thread_views.ask();
    let mut rx = state.latest.clone();
    let deadline = tokio::time::Instant::now() + state.interval * 3;
    loop {
        let latest = rx.borrow_and_update().clone();
        let fresh = latest.as_ref().is_none_or(|l| {
            let s = &l.snapshot;
            s.jobs.iter().all(|j| {
                j.threads_read_seconds
                    .is_none_or(|t| t >= s.timestamp_seconds)
            })
        });
        if fresh
            || !matches!(
                tokio::time::timeout_at(deadline, rx.changed()).await,
                Ok(Ok(()))
            )
        {
            return latest;
        }
    }
}

/// What `/api/v1/events` returns, from its query string.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EventsFilter {
    pub since: f64,
    pub after: u64,
    pub limit: usize,
}

/// Parses and checks the query string of `/api/v1/events`. The error is the
/// body of the 400 response.
pub fn events_filter(uri: &Uri) -> Result<EventsFilter, String> {
    let Query(q) = Query::<EventsQuery>::try_from_uri(uri).map_err(|e| e.body_text())?;
    let limit = q.limit.unwrap_or(DEFAULT_LIMIT);
    if limit == 0 || limit > MAX_LIMIT {
        return Err(format!("limit must be between 1 and {MAX_LIMIT}"));
    }
    let since = q.since.unwrap_or(f64::NEG_INFINITY);
    if since.is_nan() {
        return Err("since must be a number of seconds since the epoch".to_owned());
    }
    Ok(EventsFilter {
        since,
        after: q.after.unwrap_or(0),
        limit,
    })
}

pub async fn events(State(state): State<AppState>, uri: Uri) -> Response {
    let filter = match events_filter(&uri) {
        Ok(f) => f,
        Err(e) => return (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response(),
    };
    let events = state
        .engine
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .events(filter.since, filter.after, filter.limit);
    Json(EventsResponse { events }).into_response()
}
