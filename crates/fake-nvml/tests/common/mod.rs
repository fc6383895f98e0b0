//! Shared helpers: where the built library is, and a scenario file that is
//! rewritten atomically. `STALLWATCH_FAKE_NVML` is process-wide, so each test
//! file holds one test function that walks through its steps in order.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use nvml_wrapper::Nvml;
use nvml_wrapper::error::NvmlError;
use serde_json::Value;

pub const ENV_VAR: &str = "STALLWATCH_FAKE_NVML";

/// `target/<profile>/libnvidia_ml.so`, found from the test executable in
/// `target/<profile>/deps/`.
pub fn lib_path() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe
        .parent()
        .expect("test executable has a parent directory");
    let candidates = [
        deps.join("libnvidia_ml.so"),
        deps.parent().unwrap_or(deps).join("libnvidia_ml.so"),
    ];
    candidates.iter().find(|p| p.is_file()).cloned().unwrap_or_else(|| {
        panic!(
            "libnvidia_ml.so not found (looked at {:?}); build it first with `cargo build -p fake-nvml`",
            candidates
        )
    })
}

/// Loads the library through nvml-wrapper.
pub fn try_init() -> Result<Nvml, NvmlError> {
    let path = lib_path();
    Nvml::builder().lib_path(path.as_os_str()).init()
}

pub fn init() -> Nvml {
    try_init().expect("nvml init")
}

/// A scenario file in its own temporary directory, named by `STALLWATCH_FAKE_NVML`.
pub struct ScenarioFile {
    dir: PathBuf,
    path: PathBuf,
}

impl ScenarioFile {
    /// Creates the directory and points the env var at the file (not yet written).
    pub fn new(test: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("fake-nvml-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create scenario dir");
        let path = dir.join("scenario.json");
        // SAFETY: set before any NVML call; each test binary runs one test.
        unsafe { std::env::set_var(ENV_VAR, &path) };
        Self { dir, path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `scenario` atomically (temporary file, then rename).
    pub fn write(&self, scenario: &Value) {
        self.write_text(&serde_json::to_string_pretty(scenario).expect("serialize"));
    }

    pub fn write_text(&self, text: &str) {
        let tmp = self.dir.join("scenario.json.tmp");
        std::fs::write(&tmp, text).expect("write scenario");
        std::fs::rename(&tmp, &self.path).expect("rename scenario");
    }
}

impl Drop for ScenarioFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}
