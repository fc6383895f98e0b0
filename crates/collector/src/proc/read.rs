//! Small `/proc` files read with one `open`, one `read` and one `close`,
//! into a buffer reused across the whole sample, and parsed by procfs.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

use procfs::{FromRead, ProcErrorExt, ProcResult};

/// A reusable read buffer.
pub struct Buffer(Vec<u8>);

impl Default for Buffer {
    fn default() -> Self {
        Buffer(vec![0; 4096])
    }
}

impl Buffer {
    /// The whole content of `path`. procfs generates these files in one go,
    /// so one `read` returns all of a file shorter than the buffer; longer
    /// ones are read on until end of file.
    pub fn read(&mut self, path: &Path) -> io::Result<&[u8]> {
        let mut file = File::open(path)?;
        let mut len = 0;
        loop {
            if len == self.0.len() {
                self.0.resize(self.0.len() * 2, 0);
            }
            let n = file.read(&mut self.0[len..])?;
            len += n;
            if n == 0 || len < self.0.len() {
                return Ok(&self.0[..len]);
            }
        }
    }

    /// Reads and parses `path` with procfs's parser for `T`.
    pub fn parse<T: FromRead>(&mut self, path: &Path) -> ProcResult<T> {
        let bytes = self
            .read(path)
            .map_err(|e| procfs::ProcError::from(e).error_path(path))?;
        T::from_read(bytes)
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
