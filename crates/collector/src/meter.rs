//! What the collector's threads tell of their work, for whoever accounts for
//! the daemon's cost.
//!
//! The collector does not measure what it spends: each of its threads calls
//! its [`Meter`] on that thread as each piece of its work ends (the sampler
//! after the GPU reading and after the `/proc` reads, the NVML, event,
//! kernel-log and kubelet threads after each of theirs), and the meter's
//! owner charges the thread's time since its last charge to that work.

/// What a collector thread just worked on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Work {
    /// The NVML calls (their threads, and the wait for them) and the GPU
    /// events thread.
    Nvml,
    /// Reading the jobs' and the host's `/proc` files.
    Proc,
    /// The kernel log's reader (Xid lines).
    Faults,
    /// Asking the kubelet which pod holds each GPU.
    Kubelet,
}

/// Told, on the thread that did it, each time a piece of [`Work`] ends.
#[derive(Debug, Clone, Copy)]
pub struct Meter(fn(Work));

impl Meter {
    /// A meter that counts nothing.
    pub const NONE: Meter = Meter(|_| ());

    pub const fn new(finished: fn(Work)) -> Meter {
        Meter(finished)
    }

    /// This thread has just finished a piece of `work`.
    pub fn finished(self, work: Work) {
        (self.0)(work)
    }
}
