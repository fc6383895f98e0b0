use std::path::PathBuf;

/// Errors the collector reports to its caller. Per-process read failures are
/// not errors: they are counted in the sample (`ErrorCounts`) and skipped.
#[derive(Debug, thiserror::Error)]
pub enum CollectError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot parse {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("cannot start the NVML worker thread: {0}")]
    Thread(#[source] std::io::Error),
}
