//! The router: `/metrics`, `/healthz`, the JSON API and the page. Handlers read the latest
//! snapshot only; none of them touches NVML or `/proc`.

use std::time::Instant;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Json, Response};
use axum::routing::get;
use tower_http::CompressionLevel;
use tower_http::compression::CompressionLayer;

use super::state::AppState;
use super::{health, history, page, stacks, status};
use crate::metrics;
use crate::sampling::bodies;

pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(healthz_handler))
        .route("/api/v1/status", get(status::status))
        .route("/api/v1/events", get(status::events))
        .route("/api/v1/history", get(history::history))
        .route("/api/v1/stacks/{pid}", get(stacks::stacks))
        .route("/", get(page::status_page))
        .fallback(not_found)
        // Fastest gzip: a quarter of the default level's CPU, a slightly larger body.
        .layer(CompressionLayer::new().quality(CompressionLevel::Fastest))
        .with_state(state)
}

async fn metrics_handler(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let format = metrics::Format::negotiate(accept);
    let encoding = headers
        .get(header::ACCEPT_ENCODING)
        .and_then(|v| v.to_str().ok());
    let gzip = bodies::accepts_gzip(encoding);
    let latest = state.latest.borrow().clone();
    let Some(latest) = latest else {
        return (StatusCode::SERVICE_UNAVAILABLE, "no sample taken yet\n").into_response();
    };
    let scrape = metrics::Scrape {
        snapshot: latest.snapshot,
        cost: latest.cost,
        diagnosis: latest.diagnosis,
        max_processes: state.max_processes,
    };
    let body = state.metrics.body(scrape, format, gzip);
    let mut response = ([(header::CONTENT_TYPE, format.content_type())], body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
    if gzip {
        headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    response
}

async fn healthz_handler(State(state): State<AppState>) -> Response {
    let health = health::check(
        state.latest.borrow().as_ref(),
        state.interval,
        Instant::now(),
    );
    let status = if health.is_ok() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(health)).into_response()
}

async fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        "not found; stallwatch serves / (status page), /metrics, /healthz, /api/v1/status, \
         /api/v1/events, /api/v1/history and /api/v1/stacks/<pid>\n",
    )
        .into_response()
}
