//! Small `/proc` files read with one `open`, one `read` and one `close`
//! (or one `read` of a file kept open, see `open_files.rs`), into a buffer
//! reused across the whole sample, and parsed by procfs.

use std::fs::File;
use std::io;
use std::path::Path;

use procfs::{FromRead, ProcErrorExt, ProcResult};

use super::open_files::{OpenFiles, read_all_at};

/// A reusable read buffer.
pub struct Buffer(Vec<u8>);

impl Default for Buffer {
    fn default() -> Self {
        Buffer(vec![0; 4096])
    }
}

impl Buffer {
    /// The whole content of `path`.
    pub fn read(&mut self, path: &Path) -> io::Result<&[u8]> {
        let len = read_all_at(&File::open(path)?, &mut self.0)?;
        Ok(&self.0[..len])
    }

    /// Reads and parses `path` with procfs's parser for `T`.
    pub fn parse<T: FromRead>(&mut self, path: &Path) -> ProcResult<T> {
        let bytes = self
            .read(path)
            .map_err(|e| procfs::ProcError::from(e).error_path(path))?;
        T::from_read(bytes)
    }

    /// Like [`Buffer::parse`], through a file kept open in `files`.
    pub fn parse_kept<T: FromRead>(&mut self, files: &mut OpenFiles, path: &Path) -> ProcResult<T> {
        let len = files
            .read(path, &mut self.0)
            .map_err(|e| procfs::ProcError::from(e).error_path(path))?;
        T::from_read(&self.0[..len])
    }

    /// Whitespace-separated pids (a `children` file).
    pub fn pids(&mut self, path: &Path) -> ProcResult<Vec<u32>> {
        let bytes = self
            .read(path)
            .map_err(|e| procfs::ProcError::from(e).error_path(path))?;
        parse_pids(bytes).map_err(|e| procfs::ProcError::Other(format!("{}: {e}", path.display())))
    }
}

/// Parses whitespace-separated pids, the text of a `children` file.
pub fn parse_pids(bytes: &[u8]) -> Result<Vec<u32>, String> {
    std::str::from_utf8(bytes)
        .map_err(|_| "not text".to_owned())?
        .split_whitespace()
        .map(|pid| pid.parse().map_err(|_| format!("bad pid `{pid}`")))
        .collect()
}
