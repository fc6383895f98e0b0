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
