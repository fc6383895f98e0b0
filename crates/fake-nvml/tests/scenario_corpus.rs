//! Replays the committed fuzz corpus of the scenario format
//! (fuzz/corpus/scenario/, grown by `scripts/fuzz`) through the same call as
//! the fuzz target: no input may panic. Runs without libFuzzer.

use std::path::Path;

#[test]
fn scenario_corpus_never_panics() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/scenario");
    let (mut count, mut accepted) = (0, 0);
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let data = std::fs::read(entry.expect("corpus entry").path()).expect("corpus file");
        // fuzz/fuzz_targets/scenario.rs
        if let Ok(text) = std::str::from_utf8(&data) {
            accepted += usize::from(nvidia_ml::check_scenario(text).is_ok());
        }
        count += 1;
    }
    assert!(count > 0, "{} is empty", dir.display());
    // The seeds include the shipped demo scenario, which must stay valid.
    assert!(accepted >= 1, "no scenario in the corpus was accepted");
}
