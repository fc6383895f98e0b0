//! The daemon's own CPU time, by what it was spent on: each thread's CPU
//! clock, charged to stages.
//!
//! Each thread charges the CPU time it used since its last charge (its
//! thread CPU clock, not wall time) to the stage it just worked for: the
//! sampler after each step of a tick, the NVML, event, kernel-log, kubelet
//! and stacks threads after each piece of their work, the HTTP runtime each
//! time it goes idle. A thread's first charge takes everything since it
//! started. So the stages add up to the process's CPU time, less what each
//! thread used since its last charge (the current step) and what threads
//! that never charge used (none of the daemon's).

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use collector::meter::Meter;
use rustix::time::{ClockId, Timespec, clock_gettime};

use super::stage::{STAGES, Stage};

/// Nanoseconds charged to each stage, process-wide.
static SPENT: [AtomicU64; STAGES] = [const { AtomicU64::new(0) }; STAGES];

thread_local! {
    /// This thread's CPU clock at its last charge.
    static MARK: Cell<u64> = const { Cell::new(0) };
}

fn nanos(t: Timespec) -> u64 {
    let secs = u64::try_from(t.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(t.tv_nsec).unwrap_or(0);
    secs.saturating_mul(1_000_000_000).saturating_add(nanos)
}

/// Charges the CPU time this thread used since its last charge (since it
/// started, the first time) to `stage`.
pub fn charge(stage: Stage) {
    let now = nanos(clock_gettime(ClockId::ThreadCPUTime));
    let last = MARK.with(|m| m.replace(now));
    SPENT[stage as usize].fetch_add(now.saturating_sub(last), Ordering::Relaxed);
}

/// The collector's meter: each piece of its work charged, on the thread
/// that did it, to its stage.
pub const COLLECTOR_METER: Meter = Meter::new(|work| charge(Stage::from(work)));

/// What the daemon has used, read at one time.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OwnCost {
    /// CPU seconds charged to each stage, in [`Stage::ALL`]'s order.
    pub stage_cpu_seconds: Vec<f64>,
    /// The whole process's CPU seconds (every thread, live or ended).
    pub process_cpu_seconds: f64,
    /// Resident memory; `None` when `/proc/self/statm` cannot be read.
    pub resident_bytes: Option<u64>,
}

impl OwnCost {
    /// The seconds charged to `stage`.
    pub fn stage(&self, stage: Stage) -> f64 {
        self.stage_cpu_seconds
            .get(stage as usize)
            .copied()
            .unwrap_or(0.0)
    }
}

/// The stages' totals and the process's CPU and memory now.
pub fn reading() -> OwnCost {
    let stage_cpu_seconds = SPENT
        .iter()
        .map(|s| s.load(Ordering::Relaxed) as f64 / 1e9)
        .collect();
    let resident_bytes = procfs::process::Process::myself()
        .and_then(|p| p.statm())
        .ok()
        .map(|m| m.resident.saturating_mul(procfs::page_size()));
    OwnCost {
        stage_cpu_seconds,
        process_cpu_seconds: nanos(clock_gettime(ClockId::ProcessCPUTime)) as f64 / 1e9,
        resident_bytes,
    }
}

#[cfg(test)]
mod tests {
    use collector::meter::Work;

    use super::*;

    fn spin(seconds: f64) {
        let start = nanos(clock_gettime(ClockId::ThreadCPUTime));
        let mut x = 0u64;
        while (nanos(clock_gettime(ClockId::ThreadCPUTime)) - start) as f64 / 1e9 < seconds {
            x = std::hint::black_box(x.wrapping_add(1));
        }
    }

    #[test]
    fn a_threads_cpu_goes_to_the_stage_it_charges_and_the_stages_add_up_to_the_process() {
        // Other tests in this binary may charge too: compare differences,
        // on threads of this test's own.
        let before = reading();
        let worker = std::thread::spawn(|| {
            spin(0.05);
            // The collector's work, through its meter.
            COLLECTOR_METER.finished(Work::Kubelet);
            spin(0.03);
            charge(Stage::Faults);
        });
        worker.join().unwrap();
        let after = reading();
        let kubelet = after.stage(Stage::Kubelet) - before.stage(Stage::Kubelet);
        let faults = after.stage(Stage::Faults) - before.stage(Stage::Faults);
        assert!((0.05..0.07).contains(&kubelet), "{kubelet}");
        assert!((0.03..0.05).contains(&faults), "{faults}");
        let used = after.process_cpu_seconds - before.process_cpu_seconds;
        assert!(
            used >= kubelet + faults - 1e-3,
            "{used} < {kubelet} + {faults}"
        );
        assert!(after.resident_bytes.is_some_and(|b| b > 1 << 20));
    }
}
