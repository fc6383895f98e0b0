//! Replays the committed fuzz corpora of the config file and the events query
//! (fuzz/corpus/, grown by `scripts/fuzz`) through the same calls as the fuzz
//! targets: no input may panic. Runs without libFuzzer.

use std::path::{Path, PathBuf};

use axum::http::Uri;
use diagnosis::Engine;
use stallwatch::api::status::{MAX_LIMIT, events_filter};
use stallwatch::config::Config;

fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut inputs: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.expect("corpus entry").path();
            let data = std::fs::read(&path).expect("corpus file");
            (path, data)
        })
        .collect();
    inputs.sort();
    assert!(!inputs.is_empty(), "{} is empty", dir.display());
    inputs
}

/// fuzz/fuzz_targets/config.rs. Returns whether the config was accepted.
fn config_input(data: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(data) else {
        return false;
    };
    let Ok(config) = Config::parse(text, Path::new("fuzz.toml")) else {
        return false;
    };
    let _ = Engine::new(config.diagnosis.clone());
    let _ = config.diagnosis.history_seconds();
    for seconds in [5.0, 3600.0] {
        let _ = Engine::new(config.diagnosis.fitted_to(seconds));
    }
    true
}

/// fuzz/fuzz_targets/events_query.rs. Returns whether the query was accepted.
fn events_query_input(data: &[u8]) -> bool {
    let Ok(query) = std::str::from_utf8(data) else {
        return false;
    };
    let Ok(uri) = format!("/api/v1/events?{query}").parse::<Uri>() else {
        return false;
    };
    let Ok(filter) = events_filter(&uri) else {
        return false;
    };
    assert!((1..=MAX_LIMIT).contains(&filter.limit), "{filter:?}");
    assert!(!filter.since.is_nan(), "{filter:?}");
    true
}

#[test]
fn config_corpus_never_panics() {
    let inputs = corpus("config");
    let accepted = inputs.iter().filter(|(_, d)| config_input(d)).count();
    // The seeds include the shipped example, which must stay valid.
    assert!(accepted >= 1, "no config in the corpus was accepted");
}

#[test]
fn events_query_corpus_never_panics() {
    let inputs = corpus("events_query");
    let accepted = inputs.iter().filter(|(_, d)| events_query_input(d)).count();
    assert!(accepted >= 1, "no query in the corpus was accepted");
}
