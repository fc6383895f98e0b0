//! Steal: time a hypervisor takes from a virtual machine's CPUs while they
//! have work, charged to no task. A thread that never leaves its virtual CPU
//! reads half a core when half of that CPU's time is stolen (in the frames of
//! tests/workloads/recorded/tfdata_starved_steal.jsonl, the stall's two
//! `py_function` threads run 0.53 cores together where a third of the CPU
//! time is stolen, 0.90 where under a tenth is), so rules that compare
//! thread CPU with a core scale it back up.

/// The most of the CPU time taken as stolen when scaling CPU back up (a
/// factor of 4 at most), so that an odd reading cannot turn a trickle into
/// a pinned core.
const MAX_STEAL: f64 = 0.75;

/// `cores` of CPU scaled back up by `steal`, the share of all the host's CPU
/// time the hypervisor took over the same interval (idle time included).
///
/// That share is the least a thread can have lost: steal falls mostly on
/// the CPUs that have work, so a thread on one of them lost at least the
/// average. The share of the busy time alone scales up too far where work
/// hops between CPUs: each CPU a handover wakes can be stolen from while the
/// work waits on another, and a serial tf.data map of 0.6 cores read as a
/// full core that way. Too little is the safer error: a missed refinement
/// leaves the parent finding, a false one sends the user to the wrong fix.
/// On a large VM with few busy CPUs the share is small and little changes.
pub fn without_steal(cores: f64, steal: Option<f64>) -> f64 {
    match steal {
        Some(s) if s > 0.0 => cores / (1.0 - s.min(MAX_STEAL)),
        _ => cores,
    }
}

/// The busiest thread's `cores` scaled back up by the steal's share of the
/// busy CPU time (`steal` over `busy`, both shares of all CPU time; the busy
/// share includes the steal), the share its own virtual CPU most likely lost.
///
/// One thread that stays on one virtual CPU loses what that CPU loses while
/// busy, and on a mostly idle VM that is far more than the share of all time.
/// In the 77 frames of tests/workloads/recorded/single_thread_bound_steal.jsonl
/// where a Python thread spinning on one core reads at least half a core
/// with some steal, it reads 0.52 to 1.0 cores (59 frames under the
/// pinned-thread rule's 0.9) with 4 to 39% of all the CPU time stolen (5 to
/// 50% of the busy time); scaled this way 0.92 to 1.53 (none under 0.9; a
/// thread reads one core at most), by the share of all time 0.72 to 1.53
/// (30 under 0.9).
/// The spreads and the process cap keep the share of all time
/// ([`without_steal`]): work that hops between CPUs is where the busy share
/// scales too far. Without the busy share this falls back to the share of
/// all time.
pub fn thread_without_steal(cores: f64, steal: Option<f64>, busy: Option<f64>) -> f64 {
    let of_busy = steal.map(|s| share_of_busy(s, busy).unwrap_or(s));
    // One thread runs on one CPU at a time: scaled, it reads a core at most.
    without_steal(cores, of_busy).min(cores.max(1.0))
}

/// The steal's share of the busy CPU time: `steal` over `busy`, both shares
/// of all CPU time (the busy share includes the steal), at most the whole;
/// `None` without a busy share above zero.
pub fn share_of_busy(steal: f64, busy: Option<f64>) -> Option<f64> {
    busy.filter(|b| *b > 0.0).map(|b| (steal / b).min(1.0))
}
