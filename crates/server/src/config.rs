//! The configuration file: TOML, every key has a default, unknown keys are
//! rejected, durations are human strings (`"1s"`, `"500ms"`, `"2m"`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use diagnosis::DiagnosisConfig;
use serde::{Deserialize, Serialize};

/// Where the daemon looks when `--config` is not given. A missing file at
/// this path means "all defaults"; a missing file given explicitly is an error.
pub const DEFAULT_PATH: &str = "/etc/stallwatch/config.toml";

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub server: ServerConfig,
    pub sampling: SamplingConfig,
    pub gpu: GpuConfig,
    pub procfs: ProcfsConfig,
    pub diagnosis: DiagnosisConfig,
    pub stacks: StacksConfig,
    pub faults: FaultsConfig,
    pub identity: IdentityConfig,
    pub kubernetes: KubernetesConfig,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Address the HTTP server listens on.
    pub listen: SocketAddr,
    /// Web config file (TLS, basic auth) in the Prometheus exporters'
    /// `web-config.yml` format; empty serves plain HTTP without auth.
    pub web_config: PathBuf,
    /// Most connections open at once; more wait in the listen queue.
    pub max_connections: usize,
    /// How long a client has to send a request's headers (and the TLS
    /// handshake) from connecting or from the request's first byte.
    #[serde(with = "humantime_serde")]
    pub header_read_timeout: Duration,
    /// How long a kept-alive connection may wait for its next request.
    #[serde(with = "humantime_serde")]
    pub idle_timeout: Duration,
    /// How long a request may take from its headers to its response being
    /// handed over, and how long a write may wait on a client not reading.
    #[serde(with = "humantime_serde")]
    pub request_timeout: Duration,
    /// Largest request head (request line and headers) in bytes.
    pub max_header_bytes: usize,
    /// Most request headers.
    pub max_headers: usize,
    /// Longest request URI in bytes.
    pub max_uri_bytes: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: SocketAddr::from(([0, 0, 0, 0], 9847)),
            web_config: PathBuf::new(),
            max_connections: 256,
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
            request_timeout: Duration::from_secs(30),
            max_header_bytes: 8192,
            max_headers: 64,
            max_uri_bytes: 2048,
        }
    }
}

impl ServerConfig {
    /// The web config file to load, `None` for plain HTTP without auth.
    pub fn web_config_file(&self) -> Option<&Path> {
        let path = self.web_config.as_path();
        (!path.as_os_str().is_empty()).then_some(path)
    }

    fn validate(&self) -> Result<(), (&'static str, &'static str)> {
        if !(1..=1_000_000).contains(&self.max_connections) {
            return Err(("server.max_connections", "must be between 1 and 1000000"));
        }
        let timeouts = [
            ("server.header_read_timeout", self.header_read_timeout),
            ("server.idle_timeout", self.idle_timeout),
            ("server.request_timeout", self.request_timeout),
        ];
        for (key, value) in timeouts {
            if value < Duration::from_millis(100) || value > Duration::from_secs(86400) {
                return Err((key, "must be between 100ms and 1d"));
            }
        }
        if !(1024..=1 << 20).contains(&self.max_header_bytes) {
            return Err((
                "server.max_header_bytes",
                "must be between 1024 and 1048576",
            ));
        }
        if !(1..=10_000).contains(&self.max_headers) {
            return Err(("server.max_headers", "must be between 1 and 10000"));
        }
        if self.max_uri_bytes < 16 || self.max_uri_bytes > self.max_header_bytes {
            return Err((
                "server.max_uri_bytes",
                "must be between 16 and server.max_header_bytes",
            ));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SamplingConfig {
    /// Time between two samples.
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
    /// Time between two reads of the threads of a job whose GPUs are all
    /// busy, no stall pending or active on them, nobody asking for thread
    /// views; 0 reads every job's threads every sample.
    #[serde(with = "humantime_serde")]
    pub busy_threads_interval: Duration,
}

impl Default for SamplingConfig {
    fn default() -> Self {
        SamplingConfig {
            interval: Duration::from_secs(1),
            busy_threads_interval: Duration::from_secs(15),
        }
    }
}

impl SamplingConfig {
    /// Samples between two reads of a busy job's threads (1: every one).
    pub fn busy_threads_every(&self) -> u64 {
        let every = self.busy_threads_interval.as_secs_f64() / self.interval.as_secs_f64();
        if every.is_finite() && every >= 1.0 {
            every.round().min(3600.0) as u64
        } else {
            1
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GpuConfig {
    /// NVML library file; empty means the system's `libnvidia-ml.so.1`.
    pub nvml_library: PathBuf,
    /// How long a sample waits for NVML before marking GPU data stale.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// Longest wait between two attempts to load and initialise NVML.
    #[serde(with = "humantime_serde")]
    pub init_retry_max: Duration,
    /// Most processes exported per GPU, largest GPU memory first; only
    /// their jobs get job series.
    pub max_processes: usize,
}

impl Default for GpuConfig {
    fn default() -> Self {
        GpuConfig {
            nvml_library: PathBuf::new(),
            timeout: Duration::from_millis(500),
            init_retry_max: Duration::from_secs(60),
            max_processes: 16,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProcfsConfig {
    /// Where procfs is mounted (a fixture tree in tests).
    pub root: PathBuf,
}

impl Default for ProcfsConfig {
    fn default() -> Self {
        ProcfsConfig {
            root: PathBuf::from("/proc"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StacksConfig {
    /// Sample the Python stacks of a stalled job (and answer
    /// `/api/v1/stacks/<pid>`).
    pub enabled: bool,
    /// Reads per second during a burst.
    pub rate: f64,
    /// Length of the burst taken when an episode starts.
    #[serde(with = "humantime_serde")]
    pub duration: Duration,
    /// Longest burst `/api/v1/stacks/<pid>` may ask for.
    #[serde(with = "humantime_serde")]
    pub max_on_demand: Duration,
    /// Answer `/api/v1/stacks/<pid>` to any client; by default only to
    /// loopback clients and, with a web config, to clients it authenticates.
    pub allow_remote: bool,
    /// Longest a read may take before the stack reader is stopped.
    #[serde(with = "humantime_serde")]
    pub read_timeout: Duration,
    /// Longest the first read of a process may take (it maps the
    /// interpreter's binaries and reads their symbols).
    #[serde(with = "humantime_serde")]
    pub spy_timeout: Duration,
    /// Heap the stack reader may use, in MiB.
    pub reader_memory_mib: u64,
    /// Python threads kept from one read.
    pub max_threads: usize,
    /// Frames kept per thread (the leaf-most).
    pub max_frames: usize,
    /// Characters kept of a function or file name.
    pub max_name_chars: usize,
}

impl Default for StacksConfig {
    fn default() -> Self {
        StacksConfig {
            enabled: true,
            rate: 20.0,
            duration: Duration::from_secs(10),
            max_on_demand: Duration::from_secs(30),
            allow_remote: false,
            read_timeout: Duration::from_millis(250),
            spy_timeout: Duration::from_secs(2),
            reader_memory_mib: 64,
            max_threads: 256,
            max_frames: 512,
            max_name_chars: 256,
        }
    }
}

impl StacksConfig {
    /// What the stack reader may use, and how long it is waited for.
    pub fn reader_limits(&self) -> crate::contained::ReaderLimits {
        crate::contained::ReaderLimits {
            memory_bytes: self.reader_memory_mib << 20,
            read_timeout: self.read_timeout,
            spy_timeout: self.spy_timeout,
            ..crate::contained::ReaderLimits::default()
        }
    }

    /// What one read and one burst may keep.
    pub fn budgets(&self) -> collector::stack_reader::Budgets {
        collector::stack_reader::Budgets {
            threads: self.max_threads,
            frames: self.max_frames,
            name_chars: self.max_name_chars,
            ..collector::stack_reader::Budgets::default()
        }
    }

    /// A reader of stacks with these settings.
    pub fn reader(&self, root: &Path) -> crate::contained::ContainedReader {
        crate::contained::ContainedReader::new(root, self.reader_limits(), self.budgets())
    }

    fn validate(&self) -> Result<(), (&'static str, &'static str)> {
        if !(0.1..=200.0).contains(&self.rate) {
            return Err((
                "stacks.rate",
                "must be between 0.1 and 200 reads per second",
            ));
        }
        for (key, value) in [
            ("stacks.duration", self.duration),
            ("stacks.max_on_demand", self.max_on_demand),
        ] {
            if value < Duration::from_millis(100) || value > Duration::from_secs(600) {
                return Err((key, "must be between 100ms and 10m"));
            }
        }
        if self.read_timeout < Duration::from_millis(10)
            || self.read_timeout > Duration::from_secs(10)
        {
            return Err(("stacks.read_timeout", "must be between 10ms and 10s"));
        }
        if self.spy_timeout < Duration::from_millis(100)
            || self.spy_timeout > Duration::from_secs(60)
        {
            return Err(("stacks.spy_timeout", "must be between 100ms and 1m"));
        }
        if !(16..=4096).contains(&self.reader_memory_mib) {
            return Err(("stacks.reader_memory_mib", "must be between 16 and 4096"));
        }
        for (key, value) in [
            ("stacks.max_threads", self.max_threads),
            ("stacks.max_frames", self.max_frames),
        ] {
            if !(1..=4096).contains(&value) {
                return Err((key, "must be between 1 and 4096"));
            }
        }
        if !(16..=4096).contains(&self.max_name_chars) {
            return Err(("stacks.max_name_chars", "must be between 16 and 4096"));
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("invalid config file {path}: {message}")]
    Diagnosis { path: PathBuf, message: String },
    #[error("invalid config file {path}: `{key}` {message}")]
    Invalid {
        path: PathBuf,
        key: &'static str,
        message: String,
    },
}

impl Config {
    /// Loads `path`. `explicit` says whether the user named the file: a
    /// missing default file means defaults, a missing named file is an error.
    pub fn load(path: &Path, explicit: bool) -> Result<Config, ConfigError> {
        match std::fs::read_to_string(path) {
            Ok(text) => Config::parse(&text, path),
            Err(e) if !explicit && e.kind() == std::io::ErrorKind::NotFound => {
                Ok(Config::default())
            }
            Err(source) => Err(ConfigError::Read {
                path: path.to_owned(),
                source,
            }),
        }
    }

    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            message: e.to_string().trim_end().to_owned(),
        })?;
        config.validate(path)?;
        Ok(config)
    }

    fn validate(&self, path: &Path) -> Result<(), ConfigError> {
        let invalid = |key, message: &str| ConfigError::Invalid {
            path: path.to_owned(),
            key,
            message: message.to_owned(),
        };
        self.server
            .validate()
            .map_err(|(key, message)| invalid(key, message))?;
        if self.sampling.interval < Duration::from_millis(100) {
            return Err(invalid("sampling.interval", "must be at least 100ms"));
        }
        let busy = self.sampling.busy_threads_interval;
        if !busy.is_zero() && (busy < self.sampling.interval || busy > Duration::from_secs(3600)) {
            return Err(invalid(
                "sampling.busy_threads_interval",
                "must be 0s (every sample) or between sampling.interval and 1h",
            ));
        }
        if self.gpu.timeout.is_zero() {
            return Err(invalid("gpu.timeout", "must be greater than 0"));
        }
        if self.gpu.timeout >= self.sampling.interval {
            return Err(invalid(
                "gpu.timeout",
                "must be shorter than sampling.interval",
            ));
        }
        if self.gpu.init_retry_max < Duration::from_secs(1) {
            return Err(invalid("gpu.init_retry_max", "must be at least 1s"));
        }
        self.diagnosis
            .validate()
            .map_err(|message| ConfigError::Diagnosis {
                path: path.to_owned(),
                message,
            })?;
        self.stacks
            .validate()
            .map_err(|(key, message)| invalid(key, message))?;
        self.faults
            .validate()
            .map_err(|(key, message)| invalid(key, message))?;
        self.identity
            .validate()
            .map_err(|(key, message)| invalid(key, message))?;
        self.kubernetes
            .validate()
            .map_err(|(key, message)| invalid(key, message))?;
        if self.procfs.root.as_os_str().is_empty() {
            return Err(invalid("procfs.root", "must not be empty"));
        }
        Ok(())
    }

    /// The NVML library to load, `None` for the system's.
    pub fn nvml_library(&self) -> Option<PathBuf> {
        let path = &self.gpu.nvml_library;
        (!path.as_os_str().is_empty()).then(|| path.clone())
    }
}

mod faults;
mod identity;
pub use faults::FaultsConfig;
pub use identity::{IdentityConfig, KubernetesConfig};

#[cfg(test)]
mod tests;
