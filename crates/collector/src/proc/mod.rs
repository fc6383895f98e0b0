//! Reads jobs and host counters from a procfs mount.
//!
//! The root is a value (`/proc` in production, a fixture tree in tests), never
//! a global. Everything is converted to canonical units while reading: ticks to
//! seconds, pages to bytes, PSI percent to ratios.
//!
//! A process or thread that exits while it is being read is skipped without
//! counting an error; any other failure leaves the field out and is counted in
//! [`ErrorCounts`] under [`ErrorSource::ProcJob`] or [`ErrorSource::ProcHost`].

mod children;
mod gone;
mod host;
mod job;
pub mod libraries;
mod mount;
mod open_files;
mod output;
mod read;
mod singles;
mod stat;
mod tasks;

use std::io;
use std::path::{Path, PathBuf};

use procfs::ProcError;

use crate::error::CollectError;
use crate::identity::user;
use crate::sample::{ErrorCounts, HostSample, JobSample};
use mount::{Mount, read_kernel_stats};

pub use host::{PsiAvg10, parse_pressure};
pub use open_files::raise_open_files_limit;
pub use read::parse_pids;
pub use stat::{StatFields, parse_io, parse_schedstat, parse_stat};

/// Reads job and host samples from one procfs mount.
#[derive(Debug, Clone)]
pub struct ProcReader {
    mount: Mount,
    memory: job::Memory,
}

impl ProcReader {
    /// `root` is a procfs mount (`/proc` in production, a fixture tree in
    /// tests). Clock ticks and page size are this host's.
    pub fn new(root: impl Into<PathBuf>) -> Result<Self, CollectError> {
        Self::with_units(root, procfs::ticks_per_second(), procfs::page_size())
    }

    /// Like [`ProcReader::new`], with explicit clock ticks per second and page
    /// size, for reading a tree captured on another host (and for tests).
    /// Fails when `<root>/stat` cannot be read or parsed (it needs its `cpu`,
    /// `ctxt`, `btime` and `processes` lines).
    pub fn with_units(
        root: impl Into<PathBuf>,
        ticks_per_second: u64,
        page_size_bytes: u64,
    ) -> Result<Self, CollectError> {
        let root = root.into();
        let ticks_per_second = ticks_per_second.max(1);
        let path = root.join("stat");
        let stats = read_kernel_stats(&path, ticks_per_second, page_size_bytes)
            .map_err(|e| collect_error(path, e))?;
        let files = open_files::OpenFiles::for_root(&root);
        let memory = job::Memory {
            schedstat: files.enabled() && schedstat_works(&root),
            files,
            ..job::Memory::default()
        };
        Ok(ProcReader {
            memory,
            mount: Mount {
                root,
                boot_time_seconds: stats.btime,
                ticks_per_second,
                page_size_bytes,
            },
        })
    }

    /// The procfs mount this reader reads.
    pub fn root(&self) -> &Path {
        self.mount.root()
    }

    /// Boot time from `<root>/stat`, seconds since the epoch.
    pub fn boot_time_seconds(&self) -> u64 {
        self.mount.boot_time_seconds
    }

    /// `holders`: for each pid NVML reports holding a GPU context, the GPU
    /// indices it is on. Returns one [`JobSample`] per holder that could be
    /// read; a holder whose `/proc` entry is gone is skipped silently.
    /// A process's children are read every few samples, not every one, and
    /// less often while no pid is given out (see `children.rs`); a thread
    /// that did not run costs one small read (see `tasks.rs`); the files
    /// read again and again are kept open on a real procfs (see
    /// `open_files.rs`).
    pub fn read_jobs(
        &mut self,
        holders: &[(u32, Vec<u32>)],
        errors: &mut ErrorCounts,
    ) -> Vec<JobSample> {
        self.read_jobs_carrying(holders, &[], errors)
    }

    /// [`ProcReader::read_jobs`], carrying the threads of the jobs whose
    /// leader is in `carry` as last read, where they were read before (see
    /// thread_reads.rs): their processes are read, their threads are not.
    pub fn read_jobs_carrying(
        &mut self,
        holders: &[(u32, Vec<u32>)],
        carry: &[u32],
        errors: &mut ErrorCounts,
    ) -> Vec<JobSample> {
        let mut memory = std::mem::take(&mut self.memory);
        memory.files.begin();
        memory.tasks.begin();
        memory.singles.begin();
        memory.attributions.begin();
        memory.ranks.begin();
        memory.users.begin();
        memory.libraries.begin();
        let jobs = job::read_jobs(&self.mount, holders, carry, errors, &mut memory);
        self.memory = memory;
        jobs
    }

    /// How a job's user is read and shown (`[identity]`; see `identity/user.rs`).
    pub fn set_user_options(&mut self, options: user::UserOptions) {
        self.memory.users = user::Users::new(options);
    }

    /// Keeps the threads' files open for `samples` samples unread: as long
    /// as a job's threads may go unread (see thread_reads.rs).
    pub fn keep_thread_files(&mut self, samples: u64) {
        self.memory.files.keep_thread_files(samples);
    }

    /// Whether threads' CPU time comes from `schedstat` (see `tasks.rs`).
    pub fn reads_schedstat(&self) -> bool {
        self.memory.schedstat
    }

    /// CPU times, online CPUs, pressure and memory of the whole host.
    pub fn read_host(&self, errors: &mut ErrorCounts) -> HostSample {
        host::read_host(&self.mount, errors)
    }
}

/// The kernel keeps per-thread run accounting (`CONFIG_SCHED_INFO`): this
/// thread's `schedstat` shows time on a CPU (it is all zeros without it).
fn schedstat_works(root: &Path) -> bool {
    std::fs::read(root.join("thread-self/schedstat"))
        .ok()
        .and_then(|bytes| stat::parse_schedstat(&bytes))
        .is_some_and(|s| s.run_ns > 0 && s.timeslices > 0)
}

fn collect_error(path: PathBuf, error: ProcError) -> CollectError {
    match error {
        ProcError::Io(source, _) => CollectError::Read { path, source },
        ProcError::NotFound(_) => CollectError::Read {
            path,
            source: io::ErrorKind::NotFound.into(),
        },
        ProcError::PermissionDenied(_) => CollectError::Read {
            path,
            source: io::ErrorKind::PermissionDenied.into(),
        },
        other => CollectError::Parse {
            path,
            message: other.to_string(),
        },
    }
}
