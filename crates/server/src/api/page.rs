//! `GET /`: the status page, one self-contained HTML document (inline CSS, script
//! and SVG; it fetches only this daemon's JSON API). It is compiled into the binary.

use axum::http::header;
use axum::response::IntoResponse;

/// The page: crates/server/assets/status.html.
pub const STATUS_HTML: &str = include_str!("../../assets/status.html");

/// Lets the page run its inline script and style and talk to this origin only:
/// the browser refuses anything else it might try to load.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'unsafe-inline'; \
     style-src 'unsafe-inline'; img-src data:; connect-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

pub async fn status_page() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
            (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
        ],
        STATUS_HTML,
    )
}
