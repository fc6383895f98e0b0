//! The collector's own parsers of `/proc` text: `<pid>/cgroup` (container
//! runtimes put what they like in names), `pressure/*`, `children`, and the
//! fields of `stat`, `schedstat` and `io` the job reader keeps.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // As the job reader does: cgroup names need not be UTF-8.
    let _ = collector::identity::parse_attribution(&String::from_utf8_lossy(data));
    if let Ok(text) = std::str::from_utf8(data) {
        let psi = collector::proc::parse_pressure(text);
        for ratio in [psi.some, psi.full].into_iter().flatten() {
            assert!((0.0..=1.0).contains(&ratio), "{psi:?}");
        }
    }
    let _ = collector::proc::parse_pids(data);
    if let Some(stat) = collector::proc::parse_stat(data) {
        assert!(stat.comm.len() < data.len());
    }
    let _ = collector::proc::parse_schedstat(data);
    let _ = collector::proc::parse_io(data);
});
