//! A Python stack as it may be shown: frames and threads of one read.

/// One Python frame, as it may be shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawFrame {
    pub function: String,
    /// Package-relative (`PIL/Image.py`) or the file's own name.
    pub file: String,
    pub line: u32,
    /// Standard library or installed package, not the user's own code.
    pub library: bool,
}

/// One Python thread in one read, with its state from `/proc`.
#[derive(Debug, Clone, PartialEq)]
pub struct RawThread {
    /// The thread's tid as the host (the reader's `/proc`) sees it.
    pub tid: u32,
    pub name: String,
    pub state: char,
    pub owns_gil: bool,
    /// Leaf first.
    pub frames: Vec<RawFrame>,
}
