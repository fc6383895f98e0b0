//! What to tell the user for each finding, in plain words.

use crate::Kind;
use crate::types::evidence::{Evidence, FaultEvidence};
use crate::types::stack_report::ReadOutcome;

pub mod phase;
pub mod words;

pub use words::Job;

pub enum Unit {
    Cores,
    ShareOfCore,
}

/// On a virtual machine whose hypervisor takes a noticeable share of the
/// CPU time (steal), what `cores` would read without it: threads together
/// (`Unit::Cores`) scaled by the steal's share of all CPU time, one thread
/// (`Unit::ShareOfCore`) by its share of the busy time, as the rules do
/// (`steal::without_steal`, `steal::thread_without_steal`).
pub fn steal_note(evidence: &Evidence, cores: f64, unit: Unit) -> String {
    let Some(s) = evidence.cpu_steal_ratio else {
        return String::new();
    };
    let (without, of_busy) = match unit {
        Unit::Cores => {
            let w = crate::steal::without_steal(cores, Some(s));
            (format!("{w:.2} cores"), String::new())
        }
        Unit::ShareOfCore => {
            let busy = evidence.host_cpu_ratio;
            let w = crate::steal::thread_without_steal(cores, Some(s), busy);
            let of_busy = crate::steal::share_of_busy(s, busy)
                .map(|share| format!(", {:.0}% of its busy time", share * 100.0))
                .unwrap_or_default();
            (format!("{:.0}%", w * 100.0), of_busy)
        }
    };
    format!(
        " ({without} without steal: the hypervisor took {:.0}% of this host's CPU time{of_busy}, \
         which no thread is charged for)",
        s * 100.0
    )
}

/// What the fault was, in a sentence: the Xid with its meaning and the
/// process the driver blamed, a failed remapping, the driver's recovery action.
pub fn fault_summary(f: &FaultEvidence) -> String {
    let mut parts = Vec::new();
    if let Some(x) = &f.xid {
        let who = match (x.pid, &x.comm) {
            (Some(pid), Some(comm)) => format!(", pid {pid} ({comm})"),
            (Some(pid), None) => format!(", pid {pid}"),
            _ => String::new(),
        };
        parts.push(format!("Xid {} ({}{who})", x.xid, x.meaning));
    }
    if f.row_remap_failure {
        parts.push("a failed row remapping".to_owned());
    }
    if let Some(a) = &f.recovery_action {
        parts.push(format!("the driver asks for recovery action {a}"));
    }
    parts.join(", and ")
}

pub fn fault_action(f: &FaultEvidence) -> &'static str {
    let job_code = f.xid.as_ref().is_some_and(|x| x.job_code);
    match f.action.as_str() {
        "drain_node" => {
            "Drain the node (stop scheduling work on it) and reboot it, and restart the job \
             elsewhere; if the fault comes back, the GPU (or its slot, riser or power) needs \
             service."
        }
        "reset_gpu" => {
            "Stop the GPU's jobs and reset it (nvidia-smi -r -i <gpu>, or reload the driver), \
             then restart the job; if it repeats, the GPU needs service."
        }
        _ if job_code => {
            "Restart the job. This Xid most often comes from the job's own kernels (an \
             out-of-range index or a bad pointer): run it with CUDA_LAUNCH_BLOCKING=1 to find \
             the call; a repeat on this GPU only, with other GPUs fine, points at the GPU."
        }
        _ => "Restart the job; if the fault repeats on this GPU, reset it.",
    }
}

/// The hint for a finding, from its kind's own (`base`, by its detector in
/// `detect/`): after a GPU fault, a phase past its normal length or a stack
/// that stood still, it starts with them; where the job's Python stacks were
/// sampled, with the place they found, and it says why when they could not
/// be.
pub fn with_context(kind: Kind, evidence: &Evidence, base: String) -> String {
    let mut base = base;
    // A hang after a GPU fault: the fault explains it.
    if kind != Kind::GpuFault
        && let Some(f) = &evidence.fault
    {
        base = format!(
            "This GPU faulted ({}): the hang most likely follows from it, not from the job's \
             code. {} {base}",
            fault_summary(f),
            fault_action(f)
        );
    }
    if let Some(p) = &evidence.phase {
        base = format!("{} {base}", phase::hint(p));
    }
    if let Some(s) = &evidence.stuck {
        let waits = s
            .waiting_on
            .as_ref()
            .map(|w| format!(", waiting on {w}"))
            .unwrap_or_default();
        base = format!(
            "Stuck at {} ({}{waits}): every Python thread stood at the same place in {} reads \
             over {:.0} s, so this is named before the hang time. {base}",
            s.place, s.thread, s.reads, s.over_seconds
        );
    }
    match &evidence.stacks {
        Some(s) if s.outcome == ReadOutcome::Sampled => {
            let base = base.replace(
                "dump stacks (py-spy dump --pid PID)",
                "see the stacks below",
            );
            let base = base.replace(
                "Dump stacks (py-spy dump --pid PID)",
                "Check the stacks below",
            );
            // The input kinds: how long the loop waits for each batch.
            let wait = s
                .batch_wait
                .as_ref()
                .filter(|_| {
                    matches!(kind, Kind::InputStarved | Kind::InputBound) || kind.is_refinement()
                })
                .map(|b| {
                    format!(
                        " {}.",
                        capitalized(&crate::stack_text::describe_batch_wait(b))
                    )
                })
                .unwrap_or_default();
            format!(
                "Python stacks of pid {}: {}.{wait} {base}",
                s.pid, s.summary
            )
        }
        Some(s) => format!("{base} (No Python stacks: {}.)", s.summary),
        None => base,
    }
}

fn capitalized(s: &str) -> String {
    let mut chars = s.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}
