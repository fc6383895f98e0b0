//! The stand-in NVML library's scenario file (JSON).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = nvidia_ml::check_scenario(text);
    }
});
