//! Small `/proc` files read with one `open`, one `read` and one `close`
//! (or one `read` of a file kept open, see `open_files.rs`), into a buffer
//! reused across the whole sample, and parsed by procfs.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use procfs::ProcResult;

use super::open_files::{Kind, OpenFiles, read_all_at};

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

    /// The file `(id, kind)` through `files` (see `open_files.rs`), and
    /// whether it was freshly opened.
    pub fn kept(
        &mut self,
        files: &mut OpenFiles,
        id: u32,
        kind: Kind,
        path: impl FnOnce() -> PathBuf,
    ) -> ProcResult<(&[u8], bool)> {
        let (len, fresh) = files
            .read(id, kind, path, &mut self.0)
            .map_err(procfs::ProcError::from)?;
        Ok((&self.0[..len], fresh))
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
