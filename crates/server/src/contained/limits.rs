//! The resource limits the stack reader runs under, set by the reader on
//! itself before it reads anything.

use std::time::Duration;

use rustix::process::{Resource, Rlimit, setrlimit};

/// What the stack reader may use, and how long the daemon waits on it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReaderLimits {
    /// Heap and other private writable memory (`RLIMIT_DATA`): an
    /// allocation past it fails and the reader aborts.
    pub memory_bytes: u64,
    /// CPU time over the reader's life (`RLIMIT_CPU`): past it the reader
    /// is ended and a fresh one started on the next request.
    pub cpu_seconds: u64,
    /// Longest wait for one read (making the spy of a new process has
    /// `spy_timeout` instead): past it the reader is killed.
    pub read_timeout: Duration,
    /// Longest wait for the first read of a process, which makes its spy
    /// (mapping the interpreter's binaries and reading their symbols).
    pub spy_timeout: Duration,
}

impl Default for ReaderLimits {
    fn default() -> Self {
        ReaderLimits {
            memory_bytes: 64 << 20,
            cpu_seconds: 600,
            read_timeout: Duration::from_millis(250),
            spy_timeout: Duration::from_secs(2),
        }
    }
}

/// Applies the limits to the calling process (the reader): heap, CPU time,
/// no core dump (it would hold the job's memory), no file written, and
/// killed with its parent.
pub fn apply(memory_bytes: u64, cpu_seconds: u64) -> std::io::Result<()> {
    let both = |v: u64| Rlimit {
        current: Some(v),
        maximum: Some(v),
    };
    setrlimit(Resource::Core, both(0))?;
    setrlimit(Resource::Fsize, both(0))?;
    setrlimit(Resource::Data, both(memory_bytes))?;
    // SIGXCPU at the soft limit ends it; the hard limit a second later
    // kills it should it catch that.
    setrlimit(
        Resource::Cpu,
        Rlimit {
            current: Some(cpu_seconds),
            maximum: Some(cpu_seconds + 1),
        },
    )?;
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
    Ok(())
}
