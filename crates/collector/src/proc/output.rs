//! The files behind a job leader's stdout and stderr: how big they are and
//! when they were last written, a cheap "is it still making progress" signal.

use std::fs::{self, Metadata};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::gone::io_vanished;
use crate::sample::{ErrorCounts, ErrorSource};

#[derive(Debug, Default)]
pub(super) struct Output {
    pub stdout_bytes: Option<u64>,
    pub stderr_bytes: Option<u64>,
    /// Latest modification time of those files, seconds since the epoch.
    pub modified_seconds: Option<f64>,
}

/// Follows `<root>/<pid>/fd/1` and `fd/2`. Only regular files count: a pipe,
/// a terminal or a socket has no size worth reporting.
pub(super) fn read_output(root: &Path, pid: u32, errors: &mut ErrorCounts) -> Output {
    let fds = root.join(pid.to_string()).join("fd");
    let stdout = regular_file(&fds.join("1"), errors);
    let stderr = regular_file(&fds.join("2"), errors);
    let modified_seconds = [&stdout, &stderr]
        .into_iter()
        .flatten()
        .map(|m| m.mtime() as f64 + m.mtime_nsec() as f64 * 1e-9)
        .reduce(f64::max);
    Output {
        stdout_bytes: stdout.as_ref().map(Metadata::len),
        stderr_bytes: stderr.as_ref().map(Metadata::len),
        modified_seconds,
    }
}

fn regular_file(fd_link: &Path, errors: &mut ErrorCounts) -> Option<Metadata> {
    match fs::metadata(fd_link) {
        Ok(metadata) if metadata.is_file() => Some(metadata),
        Ok(_) => None,
        // The fd is closed, or the process is gone.
        Err(e) if io_vanished(&e) => None,
        Err(e) => {
            tracing::debug!(error = %e, path = %fd_link.display(), "cannot follow output fd");
            errors.add(ErrorSource::ProcJob);
            None
        }
    }
}
