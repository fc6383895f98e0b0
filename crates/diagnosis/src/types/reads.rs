//! What one read of a process's Python stacks saw: its threads and their
//! frames, already stripped to what may be shown.

use serde::{Deserialize, Serialize};

/// One Python frame as read, already stripped to what may be shown: the
/// function's name, a package-relative file name and the line.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CodeFrame {
    pub function: String,
    /// Package-relative (`PIL/Image.py`) or the file's own name (`data.py`).
    pub file: String,
    /// 0 when unknown.
    pub line: u32,
    /// Installed code (standard library, site-packages), not the user's own.
    pub library: bool,
}

/// One thread in one read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadRead {
    /// Process the thread belongs to and its Linux tid, as the host sees them.
    pub pid: u32,
    pub tid: u32,
    /// `comm` from `/proc`.
    pub name: String,
    /// Kernel state letter from `/proc` at the read.
    pub state: char,
    pub owns_gil: bool,
    /// Leaf first.
    pub frames: Vec<CodeFrame>,
}
