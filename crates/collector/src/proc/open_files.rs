//! The jobs' `/proc` files read again and again (each process's `stat` and
//! `io`, each thread's `schedstat` and `stat`, the `children` files, each
//! job leader's `cgroup`), kept
//! open from one read to the next and read again from offset 0. Opening and
//! closing a `/proc` file (path lookup, permission check) cost the kernel
//! more than generating it; this halves the system calls of a sample.
//!
//! Only on a real procfs: there an open file stays bound to its process or
//! thread, and reads fail with ESRCH once it is reaped, even if its pid is
//! reused. A read that fails is retried once on a freshly opened file, so
//! errors and vanished processes read exactly as without the cache; a read
//! says whether its file was freshly opened (a new thread behind a reused
//! tid is always a fresh file). Files are keyed by (pid or tid, kind), so a
//! read that finds its file builds no path. Files not read for their kind's
//! period are closed at the start of a sample, and at most
//! [`OpenFiles::max_open`] are kept open (the rest are opened and closed each
//! time): half the soft limit on open files less a reserve, which the daemon
//! raises to its hard limit at start.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use rustc_hash::FxHashMap;

/// What a kept file is, for one pid or tid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `<pid>/stat`
    ProcessStat,
    /// `<pid>/io`
    Io,
    /// `<pid>/task/<tid>/stat`
    ThreadStat,
    /// `<pid>/task/<tid>/schedstat`
    Schedstat,
    /// `<pid>/task/<tid>/children`, read every few samples
    Children,
    /// `<pid>/cgroup` of a job's leader
    Cgroup,
    /// `loadavg` (id 0), for the last pid given out (see children.rs)
    Loadavg,
}

impl Kind {
    /// Samples a file may go unread before it is closed; `threads` for the
    /// threads' files.
    fn keep_samples(self, threads: u64) -> u64 {
        match self {
            Kind::Children => super::children::QUIET_REFRESH_SAMPLES + 1,
            // Thread `stat`s are read only when a thread ran (see tasks.rs),
            // `schedstat`s not while their process is quiet; both at least
            // every REFRESH_SAMPLES samples, or a busy job's every few
            // (thread_reads.rs).
            Kind::ThreadStat | Kind::Schedstat => threads,
            _ => 1,
        }
    }
}

/// Samples a thread's file may go unread by default.
const THREAD_KEEP: u64 = super::tasks::REFRESH_SAMPLES + 1;

/// The most files kept open when the limit on open files is the usual 1024.
const MIN_OPEN: usize = 512;
/// Open files left to the rest of the daemon (HTTP connections, NVML, logs).
const RESERVE: u64 = 1024;
/// The most files kept open whatever the limit.
const MAX_OPEN: usize = 65_536;

#[derive(Debug, Default)]
pub struct OpenFiles {
    enabled: bool,
    max_open: usize,
    sample: u64,
    /// Samples the threads' files may go unread, beyond `THREAD_KEEP`.
    thread_keep: u64,
    /// (pid or tid, kind) -> (open file, sample last read in)
    files: FxHashMap<(u32, Kind), (File, u64)>,
}

impl Clone for OpenFiles {
    /// A clone starts with no files open.
    fn clone(&self) -> Self {
        OpenFiles {
            enabled: self.enabled,
            max_open: self.max_open,
            thread_keep: self.thread_keep,
            ..OpenFiles::default()
        }
    }
}

impl OpenFiles {
    /// Keeps files open only when `root` is a procfs mount (not a copied tree,
    /// whose open files would not follow changes made by replacing them).
    pub fn for_root(root: &Path) -> Self {
        let enabled = rustix::fs::statfs(root)
            .map(|fs| fs.f_type == rustix::fs::PROC_SUPER_MAGIC)
            .unwrap_or(false);
        OpenFiles {
            enabled,
            max_open: max_open(),
            ..OpenFiles::default()
        }
    }

    /// Whether files are kept open (a real procfs).
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Starts a sample: closes the files not read for their kind's period.
    pub fn begin(&mut self) {
        let (now, threads) = (self.sample, self.thread_keep.max(THREAD_KEEP));
        self.files
            .retain(|(_, kind), (_, used)| now - *used < kind.keep_samples(threads));
        self.sample += 1;
    }

    /// Keeps the threads' files open while a job's threads go unread for
    /// up to `samples` samples.
    pub fn keep_thread_files(&mut self, samples: u64) {
        self.thread_keep = samples.saturating_add(1);
    }

    /// How many files are open now.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// Reads all of the file `(id, kind)` into `buf` (grown as needed),
    /// opening `path()` when it is not open. Returns the length and whether
    /// the file was freshly opened.
    pub fn read(
        &mut self,
        id: u32,
        kind: Kind,
        path: impl FnOnce() -> PathBuf,
        buf: &mut Vec<u8>,
    ) -> io::Result<(usize, bool)> {
        if let Some((file, used)) = self.files.get_mut(&(id, kind)) {
            *used = self.sample;
            match read_all_at(file, buf) {
                Ok(len) => return Ok((len, false)),
                // Gone, or any other failure: answer as a fresh open would.
                Err(_) => {
                    self.files.remove(&(id, kind));
                }
            }
        }
        let file = File::open(path())?;
        let len = read_all_at(&file, buf)?;
        if self.enabled && self.files.len() < self.max_open {
            self.files.insert((id, kind), (file, self.sample));
        }
        Ok((len, true))
    }
}

/// Raises the soft limit on open files to the hard one (systemd's default
/// soft limit is 1024, its hard limit 524288), so that many jobs' files can
/// be kept open. Returns the soft limit now in force. Call it before the
/// first [`crate::proc::ProcReader`] is made.
pub fn raise_open_files_limit() -> Option<u64> {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        limit.current = limit.maximum;
        if let Err(e) = setrlimit(Resource::Nofile, limit) {
            tracing::debug!(error = %e, "cannot raise the limit on open files");
        }
    }
    getrlimit(Resource::Nofile).current
}

/// Half of what the soft limit on open files leaves after the reserve, at
/// least [`MIN_OPEN`] and at most [`MAX_OPEN`].
fn max_open() -> usize {
    let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(u64::MAX);
    let spare = usize::try_from(soft.saturating_sub(RESERVE) / 2).unwrap_or(MAX_OPEN);
    spare.clamp(MIN_OPEN, MAX_OPEN)
}

/// The whole file from offset 0. procfs generates these files in one go,
/// so one read returns all of a file shorter than the buffer; longer ones
/// are read on until end of file.
pub fn read_all_at(file: &File, buf: &mut Vec<u8>) -> io::Result<usize> {
    let mut len = 0;
    loop {
        if len == buf.len() {
            buf.resize(buf.len().max(4096) * 2, 0);
        }
        let n = file.read_at(&mut buf[len..], len as u64)?;
        len += n;
        if n == 0 || len < buf.len() {
            return Ok(len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Child, Command, Stdio};

    /// A real process to read, and its `stat` path.
    fn sleeper() -> (Child, PathBuf) {
        let child = Command::new("sleep")
            .arg("30")
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let path = PathBuf::from(format!("/proc/{}/stat", child.id()));
        (child, path)
    }

    #[test]
    fn a_kept_file_reads_its_process_until_it_is_reaped() {
        let mut files = OpenFiles::for_root(Path::new("/proc"));
        assert!(files.enabled, "/proc is a procfs mount");
        let (mut child, path) = sleeper();
        let mut buf = Vec::new();
        files.begin();
        let id = child.id();
        let (len, fresh) = files
            .read(id, Kind::ProcessStat, || path.clone(), &mut buf)
            .unwrap();
        assert!(buf[..len].starts_with(format!("{id} (").as_bytes()));
        assert!(fresh);
        assert_eq!(files.len(), 1);
        files.begin();
        let (_, fresh) = files
            .read(id, Kind::ProcessStat, || unreachable!(), &mut buf)
            .unwrap();
        assert!(!fresh, "kept open: no path built, no open");
        files.begin();
        child.kill().unwrap();
        child.wait().unwrap();
        let err = files
            .read(id, Kind::ProcessStat, || path.clone(), &mut buf)
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound, "{err}");
        assert_eq!(files.len(), 0, "the stale file is closed");
    }

    #[test]
    fn a_kept_file_reads_fresh_content_each_time() {
        let mut files = OpenFiles::for_root(Path::new("/proc"));
        let (mut child, path) = sleeper();
        let id = child.id();
        let state = |files: &mut OpenFiles| {
            let mut buf = Vec::new();
            let (len, _) = files
                .read(id, Kind::ProcessStat, || path.clone(), &mut buf)
                .unwrap();
            let text = String::from_utf8_lossy(&buf[..len]).into_owned();
            text.rsplit_once(") ").unwrap().1.chars().next().unwrap()
        };
        files.begin();
        assert_ne!(state(&mut files), 'T');
        Command::new("kill")
            .args(["-STOP", &child.id().to_string()])
            .status()
            .unwrap();
        // The signal takes effect when the child next runs.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while state(&mut files) != 'T' {
            assert!(
                std::time::Instant::now() < deadline,
                "never read as stopped"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(files.len(), 1);
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn files_not_read_in_a_sample_are_closed() {
        let mut files = OpenFiles::for_root(Path::new("/proc"));
        let mut buf = Vec::new();
        let me = std::process::id();
        let stat = || PathBuf::from("/proc/self/stat");
        let children = || PathBuf::from(format!("/proc/self/task/{me}/children"));
        files.begin();
        files.read(me, Kind::ProcessStat, stat, &mut buf).unwrap();
        files
            .read(me, Kind::Io, || PathBuf::from("/proc/self/io"), &mut buf)
            .unwrap();
        files.read(me, Kind::Children, children, &mut buf).unwrap();
        assert_eq!(files.len(), 3);
        files.begin();
        files.read(me, Kind::ProcessStat, stat, &mut buf).unwrap();
        files.begin();
        assert_eq!(files.len(), 2, "io was not read in the previous sample");
        // Children files stay open while their next read can be due (up to
        // QUIET_REFRESH_SAMPLES while no pid is given out).
        for _ in 1..super::super::children::QUIET_REFRESH_SAMPLES {
            files.begin();
        }
        assert_eq!(
            files.len(),
            1,
            "children files are kept until their next read is due"
        );
        files.begin();
        assert_eq!(files.len(), 0);
    }

    #[test]
    fn a_copied_tree_is_never_kept_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stat");
        std::fs::write(&path, "1 (x) S").unwrap();
        let mut files = OpenFiles::for_root(dir.path());
        let mut buf = Vec::new();
        files.begin();
        let (len, _) = files
            .read(1, Kind::ProcessStat, || path.clone(), &mut buf)
            .unwrap();
        assert_eq!(&buf[..len], b"1 (x) S");
        assert_eq!(files.len(), 0);
        std::fs::remove_file(&path).unwrap();
        assert!(
            files
                .read(1, Kind::ProcessStat, || path.clone(), &mut buf)
                .is_err(),
            "a removed file is gone"
        );
    }
}
