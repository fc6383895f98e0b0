//! A process or thread that is gone: not an error, it exited while it was read.

use std::io;

use procfs::{ProcError, ProcResult};

use crate::sample::{ErrorCounts, ErrorSource};

/// "No such process": what reads of an open `/proc/<pid>` file return once
/// the process has been reaped. Its value is 3 on every Linux architecture.
const ESRCH: i32 = 3;

/// The read failed because the process or thread is gone (exited and reaped,
/// or its pid directory never existed).
pub(super) fn io_vanished(error: &io::Error) -> bool {
    error.kind() == io::ErrorKind::NotFound || error.raw_os_error() == Some(ESRCH)
}

fn vanished(error: &ProcError) -> bool {
    match error {
        ProcError::NotFound(_) => true,
        ProcError::Io(e, _) => io_vanished(e),
        _ => false,
    }
}

/// The value of a job read: `None` without an error when the process is
/// gone, `None` with one [`ErrorSource::ProcJob`] error on any other failure.
pub(super) fn job_value<T>(
    result: ProcResult<T>,
    what: &str,
    errors: &mut ErrorCounts,
) -> Option<T> {
    match result {
        Ok(value) => Some(value),
        Err(e) if vanished(&e) => None,
        Err(e) => {
            tracing::debug!(error = %e, "cannot read {what}");
            errors.add(ErrorSource::ProcJob);
            None
        }
    }
}
