//! Replays the committed fuzz corpus of the collector's `/proc` text parsers
//! (fuzz/corpus/proc_text/, grown by `scripts/fuzz`) through the same calls
//! as the fuzz target: no input may panic. Runs without libFuzzer.

use std::path::Path;

use collector::identity::parse_attribution;
use collector::proc::{parse_io, parse_pids, parse_pressure, parse_schedstat, parse_stat};

#[test]
fn proc_text_corpus_never_panics() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/proc_text");
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let data = std::fs::read(entry.expect("corpus entry").path()).expect("corpus file");
        // fuzz/fuzz_targets/proc_text.rs
        let _ = parse_attribution(&String::from_utf8_lossy(&data));
        if let Ok(text) = std::str::from_utf8(&data) {
            let psi = parse_pressure(text);
            for ratio in [psi.some, psi.full].into_iter().flatten() {
                assert!((0.0..=1.0).contains(&ratio), "{psi:?}");
            }
        }
        let _ = parse_pids(&data);
        if let Some(stat) = parse_stat(&data) {
            assert!(stat.comm.len() < data.len());
        }
        let _ = parse_schedstat(&data);
        let _ = parse_io(&data);
        count += 1;
    }
    assert!(count > 0, "{} is empty", dir.display());
}

/// fuzz/corpus/kernel_log/ through fuzz/fuzz_targets/kernel_log.rs's checks.
#[test]
fn kernel_log_corpus_never_panics() {
    use collector::faults::Lines;
    use collector::faults::kmsg::{PciAddr, parse_line};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/kernel_log");
    let mut parsed = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let data = std::fs::read(entry.expect("corpus entry").path()).expect("corpus file");
        let (cut, bytes) = match data.split_first() {
            Some((c, rest)) => (usize::from(*c).min(rest.len()), rest),
            None => (0, &data[..]),
        };
        let mut lines = Lines::default();
        let mut all = lines.feed(&bytes[..cut]);
        all.extend(lines.feed(&bytes[cut..]));
        for line in all.iter().map(Vec::as_slice).chain([bytes]) {
            if let Some(x) = parse_line(line) {
                assert!(x.comm.as_ref().is_none_or(|c| c.chars().count() <= 32));
                assert!(x.detail.chars().count() <= 160);
                assert_eq!(PciAddr::parse(&x.pci.to_string()), Some(x.pci));
                parsed += 1;
            }
        }
    }
    assert!(parsed > 0, "no input in {} is an Xid line", dir.display());
}

/// Found by the fuzzer: procfs cuts the first 5 bytes off a pressure line
/// unchecked, which panicked inside a multi-byte character.
#[test]
fn pressure_line_with_a_multibyte_character_is_a_bad_line() {
    let data = b"some\xdf\x9e\0\0\n  =0\n";
    let psi = parse_pressure(std::str::from_utf8(data).unwrap());
    assert_eq!(psi.some, None);
    assert_eq!(psi.bad_lines, ["some\u{7de}\0\0", "=0"]);
}

#[test]
fn pressure_outside_0_to_100_percent_is_a_bad_line() {
    let text = "some avg10=NaN avg60=0.00 avg300=0.00 total=0\n\
                full avg10=-1.00 avg60=0.00 avg300=0.00 total=0\n";
    let psi = parse_pressure(text);
    assert_eq!((psi.some, psi.full), (None, None));
    assert_eq!(psi.bad_lines.len(), 2);
    let psi = parse_pressure("some avg10=2.10 avg60=0.12 avg300=0.00 total=391926\n");
    assert_eq!((psi.some, psi.full), (Some(0.021), None));
    assert!(psi.bad_lines.is_empty());
}
