//! The query string of `/api/v1/events`, through the handler's own parser.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stallwatch::api::status::{MAX_LIMIT, events_filter};

fuzz_target!(|data: &[u8]| {
    let Ok(query) = std::str::from_utf8(data) else {
        return;
    };
    // What the HTTP server would accept as a request target; anything else
    // never reaches the handler.
    let Ok(uri) = format!("/api/v1/events?{query}").parse::<http::Uri>() else {
        return;
    };
    if let Ok(filter) = events_filter(&uri) {
        assert!((1..=MAX_LIMIT).contains(&filter.limit), "{filter:?}");
        assert!(!filter.since.is_nan(), "{filter:?}");
    }
});
