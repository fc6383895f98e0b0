//! Reading a job's Python stacks, contained. The job is untrusted: its
//! interpreter's structures can hold anything, and the code that walks them
//! (py-spy) has limits of its own far above what the daemon can afford. So
//! the daemon never walks them itself: a child process, the same binary run
//! as `stallwatch stack-reader`, does the reads under resource limits
//! (heap, CPU time, no core dumps, no files) and hands back only the summed
//! report; the daemon gives each read a time budget and kills the child when
//! a read overruns it or when it dies, then starts a fresh one on the next
//! request. A process whose read failed or met a budget is read again only
//! after a back-off. docs/security.md says why this design.

mod backoff;
pub mod child;
mod limits;
mod parent;
mod protocol;

pub use child::to_report;
pub use limits::ReaderLimits;
pub use parent::ContainedReader;
