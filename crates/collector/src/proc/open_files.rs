//! The jobs' `/proc` files read every sample (each process's `stat` and
//! `io`, each thread's `stat`), kept open from one sample to the next and
//! read again from offset 0. Opening and closing a `/proc` file (path
//! lookup, permission check) cost the kernel more than generating it; this
//! halves the system calls of a sample.
//!
//! Only on a real procfs: there an open file stays bound to its process or
//! thread, and reads fail with ESRCH once it is reaped, even if its pid is
//! reused. A read that fails is retried once on a freshly opened file, so
//! errors and vanished processes read exactly as without the cache. Files
//! not read during a sample are closed at the start of the next one, and at
//! most `MAX_OPEN` are kept open (the rest are opened and closed each time).

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Files kept open at most: well under the usual soft limit of 1024 open
/// files, leaving room for the HTTP server's connections.
pub const MAX_OPEN: usize = 512;

#[derive(Debug, Default)]
pub struct OpenFiles {
    enabled: bool,
    sample: u64,
    /// path -> (open file, sample last read in)
    files: HashMap<PathBuf, (File, u64)>,
}

impl Clone for OpenFiles {
    /// A clone starts with no files open.
    fn clone(&self) -> Self {
        OpenFiles {
            enabled: self.enabled,
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
            ..OpenFiles::default()
        }
    }

    /// Starts a sample: closes the files not read in the previous one.
    pub fn begin(&mut self) {
        let previous = self.sample;
        self.files.retain(|_, (_, used)| *used == previous);
        self.sample += 1;
    }

    /// How many files are open now.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// Reads all of `path` into `buf` (grown as needed); returns the length.
    pub fn read(&mut self, path: &Path, buf: &mut Vec<u8>) -> io::Result<usize> {
        if let Some((file, used)) = self.files.get_mut(path) {
            *used = self.sample;
            match read_all_at(file, buf) {
                Ok(len) => return Ok(len),
                // Gone, or any other failure: answer as a fresh open would.
                Err(_) => {
                    self.files.remove(path);
                }
            }
        }
        let file = File::open(path)?;
        let len = read_all_at(&file, buf)?;
        if self.enabled && self.files.len() < MAX_OPEN {
            self.files.insert(path.to_path_buf(), (file, self.sample));
        }
        Ok(len)
    }
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
        let len = files.read(&path, &mut buf).unwrap();
        assert!(buf[..len].starts_with(format!("{} (", child.id()).as_bytes()));
        assert_eq!(files.len(), 1);
        files.begin();
        child.kill().unwrap();
        child.wait().unwrap();
        let err = files.read(&path, &mut buf).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound, "{err}");
        assert_eq!(files.len(), 0, "the stale file is closed");
    }

    #[test]
    fn a_kept_file_reads_fresh_content_each_time() {
        let mut files = OpenFiles::for_root(Path::new("/proc"));
        let (mut child, path) = sleeper();
        let state = |files: &mut OpenFiles| {
            let mut buf = Vec::new();
            let len = files.read(&path, &mut buf).unwrap();
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
        files.begin();
        files.read(Path::new("/proc/self/stat"), &mut buf).unwrap();
        files.read(Path::new("/proc/self/io"), &mut buf).unwrap();
        assert_eq!(files.len(), 2);
        files.begin();
        files.read(Path::new("/proc/self/stat"), &mut buf).unwrap();
        files.begin();
        assert_eq!(files.len(), 1, "io was not read in the previous sample");
    }

    #[test]
    fn a_copied_tree_is_never_kept_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stat");
        std::fs::write(&path, "1 (x) S").unwrap();
        let mut files = OpenFiles::for_root(dir.path());
        let mut buf = Vec::new();
        files.begin();
        let len = files.read(&path, &mut buf).unwrap();
        assert_eq!(&buf[..len], b"1 (x) S");
        assert_eq!(files.len(), 0);
        std::fs::remove_file(&path).unwrap();
        assert!(
            files.read(&path, &mut buf).is_err(),
            "a removed file is gone"
        );
    }
}
