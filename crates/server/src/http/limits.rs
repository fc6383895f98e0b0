//! Request checks made before routing: URI length and no body on GET or HEAD
//! (every route is read-only). Header size and count are hyper's limits (431).

use axum::http::{Method, Request, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// The response refusing `req`, or `None` when it may be routed.
pub fn check<B>(req: &Request<B>, max_uri_bytes: usize) -> Option<Response> {
    if uri_len(req.uri()) > max_uri_bytes {
        return Some(refuse(
            StatusCode::URI_TOO_LONG,
            format!("request URI longer than {max_uri_bytes} bytes\n"),
        ));
    }
    if (req.method() == Method::GET || req.method() == Method::HEAD) && has_body(req) {
        return Some(refuse(
            StatusCode::BAD_REQUEST,
            "GET and HEAD requests take no body\n".to_owned(),
        ));
    }
    None
}

fn uri_len(uri: &axum::http::Uri) -> usize {
    let scheme = uri.scheme_str().map_or(0, |s| s.len() + 3);
    let authority = uri.authority().map_or(0, |a| a.as_str().len());
    let path = uri.path_and_query().map_or(0, |p| p.as_str().len());
    scheme + authority + path
}

fn has_body<B>(req: &Request<B>) -> bool {
    let headers = req.headers();
    headers.contains_key(header::TRANSFER_ENCODING)
        || headers
            .get_all(header::CONTENT_LENGTH)
            .iter()
            .any(|v| v.as_bytes() != b"0")
}

/// A refusal that also closes the connection: any body the client sent is
/// left unread.
fn refuse(status: StatusCode, message: String) -> Response {
    (status, [(header::CONNECTION, "close")], message).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: &str, uri: &str, headers: &[(&str, &str)]) -> Request<()> {
        let mut b = Request::builder().method(method).uri(uri);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap()
    }

    fn status(req: &Request<()>) -> Option<StatusCode> {
        check(req, 64).map(|r| r.status())
    }

    #[test]
    fn plain_gets_pass() {
        assert_eq!(status(&request("GET", "/metrics", &[])), None);
        assert_eq!(
            status(&request("HEAD", "/healthz", &[("content-length", "0")])),
            None
        );
    }

    #[test]
    fn long_uris_get_414() {
        let uri = format!("/api/v1/events?since={}", "1".repeat(60));
        assert_eq!(
            status(&request("GET", &uri, &[])),
            Some(StatusCode::URI_TOO_LONG)
        );
    }

    #[test]
    fn a_body_on_get_gets_400() {
        let with_length = request("GET", "/metrics", &[("content-length", "5")]);
        assert_eq!(status(&with_length), Some(StatusCode::BAD_REQUEST));
        let chunked = request("HEAD", "/metrics", &[("transfer-encoding", "chunked")]);
        assert_eq!(status(&chunked), Some(StatusCode::BAD_REQUEST));
    }

    #[test]
    fn other_methods_are_left_to_the_router() {
        let post = request("POST", "/metrics", &[("content-length", "5")]);
        assert_eq!(status(&post), None);
    }
}
