//! Replays the committed fuzz corpus of the collector's `/proc` text parsers
//! (fuzz/corpus/proc_text/, grown by `scripts/fuzz`) through the same calls
//! as the fuzz target: no input may panic. Runs without libFuzzer.

use std::path::Path;

use collector::proc::{parse_attribution, parse_pids, parse_pressure};

#[test]
fn proc_text_corpus_never_panics() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/proc_text");
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let data = std::fs::read(entry.expect("corpus entry").path()).expect("corpus file");
        // fuzz/fuzz_targets/proc_text.rs
        let _ = parse_attribution(&String::from_utf8_lossy(&data));
        if let Ok(text) = std::str::from_utf8(&data) {
            let _ = parse_pressure(text);
        }
        let _ = parse_pids(&data);
        count += 1;
    }
    assert!(count > 0, "{} is empty", dir.display());
}
