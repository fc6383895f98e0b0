//! `GET /api/v1/stacks/<pid>?seconds=N`: the Python stacks of a process of a
//! GPU job, on demand. One burst at a time (429 while another caller's
//! holds the thread), at most `stacks.max_on_demand` long; an automatic burst in progress is waited for
//! (at most its own length and the grace), and no new one starts meanwhile.
//! The handler waits on the stacks thread's answer, never on `/proc` itself.

use std::time::Duration;

use axum::Extension;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Json, Response};
use diagnosis::stack_report::{Focus, ReadOutcome};
use serde::Deserialize;

use crate::api::state::AppState;
use crate::http::serve::Caller;
use crate::sampling::stack_bursts::{Deliver, Request};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StacksQuery {
    /// Length of the burst in seconds (default: `stacks.duration`, capped at
    /// `stacks.max_on_demand`).
    seconds: Option<f64>,
}

/// Extra time the stacks thread gets beyond the burst (making a spy).
const GRACE: Duration = Duration::from_secs(10);

pub async fn stacks(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
    Path(pid): Path<u32>,
    Query(q): Query<StacksQuery>,
) -> Response {
    // The names in another tenant's code, on demand: only to whom the host
    // trusts (docs/security.md).
    let trusted = state.stacks_config.allow_remote
        || caller.is_some_and(|Extension(c)| c.loopback || c.authenticated);
    if !trusted {
        return (
            StatusCode::FORBIDDEN,
            "Python stacks are served only to clients on this host's loopback, or to clients the \
             web config authenticates (basic auth or required client certificates); run \
             `stallwatch stacks PID` on the host, or set stacks.allow_remote = true\n",
        )
            .into_response();
    }
    state.thread_views.ask();
    let Some(stacks) = &state.stacks else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "stack sampling is turned off ([stacks] enabled = false)\n",
        )
            .into_response();
    };
    let max = state.stacks_config.max_on_demand;
    let duration = match q.seconds {
        None => state.stacks_config.duration.min(max),
        Some(s) if s.is_finite() && s >= 0.1 && s <= max.as_secs_f64() => {
            Duration::from_secs_f64(s)
        }
        Some(_) => {
            return (
                StatusCode::BAD_REQUEST,
                format!(
                    "seconds must be between 0.1 and {} (stacks.max_on_demand)\n",
                    max.as_secs_f64()
                ),
            )
                .into_response();
        }
    };
    let jobs: Vec<u32> = state
        .latest
        .borrow()
        .as_ref()
        .map(|l| l.snapshot.jobs.iter().map(|j| j.pid).collect())
        .unwrap_or_default();
    let (reply, answer) = tokio::sync::oneshot::channel();
    let request = Request {
        pid,
        focus: Focus::AllThreads,
        duration,
        only_jobs: Some(jobs),
        deliver: Deliver::Caller(reply),
    };
    let wait = state.stacks_config.duration + GRACE;
    if stacks.request_within(request, wait).await.is_err() {
        return (
            StatusCode::TOO_MANY_REQUESTS,
            [(header::RETRY_AFTER, "10")],
            "a stack sampling is already running; try again later\n",
        )
            .into_response();
    }
    match tokio::time::timeout(duration + GRACE, answer).await {
        Ok(Ok(report)) if report.outcome == ReadOutcome::NotWatched => {
            (StatusCode::FORBIDDEN, Json(report)).into_response()
        }
        Ok(Ok(report)) => Json(report).into_response(),
        _ => (
            StatusCode::GATEWAY_TIMEOUT,
            "the stack sampling did not finish in time (the process may be hung in the kernel)\n",
        )
            .into_response(),
    }
}
