//! Steal: time a hypervisor takes from a virtual machine's CPUs while they
//! have work, charged to no task. A thread that never leaves its virtual CPU
//! reads half a core when half of that CPU's busy time is stolen (measured
//! on a cloud VM: two tf.data `py_function` threads, one of them always
//! runnable, 0.54 cores together at 49% steal), so rules that compare thread
//! CPU with a core scale it back up.

use crate::frame::HostFrame;

/// The most of the CPU time taken as stolen when scaling CPU back up (a
/// factor of 4 at most), so that an odd reading cannot turn a trickle into
/// a pinned core.
const MAX_STEAL: f64 = 0.75;

/// What the hypervisor took over one interval, two ways.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Steal {
    /// Share of the busy CPU time. Exact for a thread that keeps to one
    /// virtual CPU; more than a thread lost where work hops between CPUs,
    /// since every CPU it wakes can be stolen from too (three GIL-bound
    /// threads: 0.55 cores at 58% of busy time, 1.31 scaled by it).
    pub of_busy: f64,
    /// Share of all CPU time, idle included: less than a thread on one
    /// stolen-from CPU lost while the others idle (the same threads: 0.93).
    pub of_all: f64,
}

impl Steal {
    /// From the host's figures; `None` where the kernel does not report it.
    pub fn of(host: &HostFrame) -> Option<Steal> {
        let of_busy = host.cpu_steal?;
        Some(Steal {
            of_busy,
            of_all: host.cpu_utilization.map_or(0.0, |u| of_busy * u),
        })
    }
}

fn scaled(cores: f64, share: f64) -> f64 {
    if share > 0.0 {
        cores / (1.0 - share.min(MAX_STEAL))
    } else {
        cores
    }
}

/// The most `cores` of CPU can stand for without steal: for a rule that asks
/// whether threads would fill a core.
pub fn most_without(cores: f64, steal: Option<Steal>) -> f64 {
    steal.map_or(cores, |s| scaled(cores, s.of_busy))
}

/// The least `cores` of CPU stands for without steal: for a rule that asks
/// whether a process stays under a cap.
pub fn least_without(cores: f64, steal: Option<Steal>) -> f64 {
    steal.map_or(cores, |s| scaled(cores, s.of_all))
}
