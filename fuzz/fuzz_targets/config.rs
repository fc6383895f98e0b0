//! The config file: TOML text to the daemon's `Config`, then what `run` and
//! `check` derive from an accepted one. Errors are fine; a panic is a bug.
#![no_main]

use std::path::Path;

use diagnosis::Engine;
use libfuzzer_sys::fuzz_target;
use stallwatch::config::Config;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(config) = Config::parse(text, Path::new("fuzz.toml")) else {
        return;
    };
    // `run`: the engine and the history it keeps.
    let _ = Engine::new(config.diagnosis.clone());
    let _ = config.diagnosis.history_seconds();
    // `check --duration`: the rules fitted to the shortest and a long watch.
    for seconds in [5.0, 3600.0] {
        let _ = Engine::new(config.diagnosis.fitted_to(seconds));
    }
});
