//! `GET /api/v1/history?minutes=N`: the last minutes of each GPU's utilization and
//! busiest thread (schema in docs/api.md).

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use crate::api::state::AppState;
use crate::sampling::history::{CAPACITY, RESOLUTION_SECONDS};

/// Most minutes one request may ask for: what the ring holds at one point a second.
pub const MAX_MINUTES: u32 = (CAPACITY as f64 * RESOLUTION_SECONDS / 60.0) as u32;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistoryQuery {
    minutes: Option<u32>,
}

/// The window in seconds a query asks for, or the message for a 400.
pub fn window_seconds(q: &HistoryQuery) -> Result<f64, String> {
    match q.minutes.unwrap_or(MAX_MINUTES) {
        m @ 1..=MAX_MINUTES => Ok(f64::from(m) * 60.0),
        m => Err(format!(
            "minutes must be a whole number from 1 to {MAX_MINUTES}, not {m}\n"
        )),
    }
}

pub async fn history(
    State(state): State<AppState>,
    query: Result<Query<HistoryQuery>, QueryRejection>,
) -> Response {
    let seconds = match query
        .map_err(|e| format!("{}\n", e.body_text()))
        .and_then(|Query(q)| window_seconds(&q))
    {
        Ok(s) => s,
        Err(message) => return (StatusCode::BAD_REQUEST, message).into_response(),
    };
    let Some(history) = state.latest.borrow().as_ref().map(|l| l.history.clone()) else {
        return (StatusCode::SERVICE_UNAVAILABLE, "no sample taken yet\n").into_response();
    };
    // Serialized under the lock straight from the rings: no copy of the points.
    let body = {
        let history = history.lock().unwrap_or_else(|p| p.into_inner());
        history.window(seconds).map(|w| serde_json::to_vec(&w))
    };
    match body {
        Some(Ok(body)) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Some(Err(e)) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot encode the history: {e}\n"),
        )
            .into_response(),
        None => (StatusCode::SERVICE_UNAVAILABLE, "no sample taken yet\n").into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(query: &str) -> Result<f64, String> {
        let uri: axum::http::Uri = format!("/api/v1/history?{query}").parse().unwrap();
        let Query(q) = Query::<HistoryQuery>::try_from_uri(&uri).map_err(|e| e.body_text())?;
        window_seconds(&q)
    }

    #[test]
    fn minutes_default_to_fifteen() {
        assert_eq!(MAX_MINUTES, 15);
        assert_eq!(parse(""), Ok(900.0));
        assert_eq!(parse("minutes=1"), Ok(60.0));
        assert_eq!(parse("minutes=15"), Ok(900.0));
    }

    #[test]
    fn bad_minutes_are_refused_with_a_message_naming_them() {
        for bad in ["minutes=0", "minutes=16"] {
            let e = parse(bad).unwrap_err();
            assert!(
                e.contains("minutes must be a whole number from 1 to 15"),
                "{e}"
            );
        }
        for bad in ["minutes=2.5", "minutes=-1", "minutes=soon"] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains("minutes"), "{bad}: {e}");
        }
        let e = parse("hours=1").unwrap_err();
        assert!(e.contains("hours"), "{e}");
    }
}
