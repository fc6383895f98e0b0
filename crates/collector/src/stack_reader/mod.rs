//! Python stacks of a process, read out of process with py-spy while a GPU
//! stalls. Never pauses the target: py-spy's non-blocking mode only copies
//! memory (`process_vm_readv`). A read that fails or tears is one dropped
//! sample. One spy is kept per (pid, start time), reused by later bursts and
//! dropped when the process exits. What a burst returns is already stripped
//! to what may be shown: function names, package-relative file names and
//! line numbers; never locals, arguments, command lines or directories.

mod access;
pub mod budget;
mod burst;
mod frames;
mod pthread;
mod raw;
mod reader;
pub mod tids;

pub use access::in_jobs;
pub use budget::{Budgets, Limit};
pub use burst::{BurstOptions, Sampled, Unavailable};
pub use raw::{RawFrame, RawThread};
pub use reader::{StackReader, start_ticks};
