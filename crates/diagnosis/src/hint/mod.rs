//! What to tell the user for each finding, in plain words.

use crate::Kind;
use crate::evidence::{Evidence, FaultEvidence};
use crate::stacks::Outcome;

mod words;

use words::Job;

/// The name PyTorch gives a DataLoader's worker processes.
const DATA_LOADER_WORKER: &str = "pt_data_worker";

fn base_hint(kind: Kind, evidence: &Evidence) -> String {
    let top = evidence.top_threads.first();
    let job = Job::of(evidence);
    match kind {
        Kind::InputStarved => format!(
            "The GPU is waiting for data: the input pipeline cannot keep up. {}",
            words::feed(&job)
        ),
        Kind::InputBound => format!(
            "GPU utilization swings and its mean is low: batches arrive too slowly. {}",
            words::feed(&job)
        ),
        Kind::SingleThreadBound if let Some(g) = &evidence.gil_spread => {
            let tids: Vec<String> = g.threads.iter().map(|t| t.tid.to_string()).collect();
            let process = g
                .process_cpu_cores
                .map(|p| format!(" (the whole process {p:.2})"))
                .unwrap_or_default();
            let waiting = g
                .noticeable_wait()
                .map(|w| {
                    format!(
                        " and waits {w:.2} more for a CPU (a GIL handed over sits unused while \
                         the thread given it waits for a CPU: other work on the host slows it \
                         further)"
                    )
                })
                .unwrap_or_default();
            let stolen = steal_note(evidence, g.cpu_cores, Unit::Cores);
            format!(
                "The input pipeline is bound by the GIL: Python work spread over {} threads of \
                 pid {} (tids {}) uses {:.2} cores together{stolen}{process}{waiting} while the \
                 GPU waits. The threads take turns holding the GIL, so together they get about \
                 one core however many there are. {}",
                g.threads.len(),
                g.pid,
                tids.join(", "),
                g.cpu_cores,
                words::off_the_gil(&job)
            )
        }
        Kind::SingleThreadBound => {
            let who = top
                .map(|t| {
                    let stolen = steal_note(evidence, t.cpu_ratio, Unit::ShareOfCore);
                    format!(
                        "thread `{}` (tid {}) is pinned at {:.0}% of a core{stolen}",
                        t.name,
                        t.tid,
                        t.cpu_ratio * 100.0
                    )
                })
                .unwrap_or_else(|| "one thread is pinned at a full core".to_owned());
            format!(
                "The input pipeline is bound by one thread: {who} while the GPU waits. {}",
                words::unpin(&job, top.map(|t| t.name.as_str()))
            )
        }
        Kind::CpuSaturated => {
            let cpus = evidence
                .host_cpus
                .map(|n| format!(" ({n} CPUs)"))
                .unwrap_or_default();
            format!(
                "The host's CPUs{cpus} are saturated, so preprocessing cannot feed the GPU. Give \
                 the job more cores (or fewer competing processes), move decoding/augmentation to \
                 the GPU, or cache preprocessed data."
            )
        }
        Kind::IoBound => format!(
            "The input pipeline waits on storage (threads in D state or I/O pressure). {}",
            words::read_faster(&job)
        ),
        Kind::BusyNoProgress => {
            "The GPU reads busy but the job shows no progress and draws little \
            power: likely a hang (a stuck NCCL collective, a spinning kernel, or a rank waiting on \
            another). Check the other ranks, dump stacks (py-spy dump --pid PID), set \
            NCCL_DEBUG=INFO and TORCH_NCCL_ASYNC_ERROR_HANDLING=1, and restart the job."
                .to_owned()
        }
        Kind::IdleNoProgress => {
            "The GPU and the job are idle and the job shows no progress: likely a deadlock or a wait that never ends (a data loader worker that \
            died, a lock, a queue with no producer). Dump stacks (py-spy dump --pid PID) and \
            restart the job."
                .to_owned()
        }
        Kind::HostMemoryPressure => format!(
            "The host is short of memory: the job may swap or be OOM-killed. {}",
            words::less_host_memory(&job)
        ),
        Kind::GpuMemoryFull => format!(
            "GPU memory is nearly full. {}",
            words::less_gpu_memory(&job)
        ),
        Kind::SharedGpu => {
            let pids: Vec<String> = evidence
                .processes
                .iter()
                .map(|p| format!("{} ({})", p.pid, p.comm))
                .collect();
            format!(
                "Several separate processes hold memory on this GPU: {}. They compete for memory \
                 and compute and can fail with CUDNN_STATUS_INTERNAL_ERROR or out-of-memory; run \
                 one job per GPU (CUDA_VISIBLE_DEVICES) or stop the extra processes (old notebook \
                 kernels that imported TensorFlow again).",
                pids.join(", ")
            )
        }
        Kind::LeftoverProcess => {
            let pids: Vec<String> = evidence
                .processes
                .iter()
                .map(|p| {
                    format!(
                        "{} ({}, {})",
                        p.pid,
                        if p.comm.is_empty() { "?" } else { &p.comm },
                        p.state
                    )
                })
                .collect();
            format!(
                "A process left behind holds GPU memory without using the GPU: {}. Its parent is \
                 gone; kill it (kill PID) to free the memory, and check for notebook kernels or \
                 data loader workers that outlived their job.",
                pids.join(", ")
            )
        }
        Kind::Spinning => {
            let signal = match evidence.activity_signal {
                Some(crate::window::ActivitySignal::GpmSmActive) => {
                    "its SMs are nearly idle and flat, with no tensor, memory or link traffic"
                }
                _ => "it draws far less power than it does while the job progresses",
            };
            format!(
                "The GPU reads busy but does no work: {signal}, and the job shows no output. \
                 A kernel is spinning, most likely a collective (NCCL all-reduce, barrier) \
                 waiting for a rank that never joins. Check the other ranks (one may have died, \
                 hung or be slower), run with NCCL_DEBUG=INFO and TORCH_NCCL_ASYNC_ERROR_HANDLING=1, \
                 dump the NCCL flight recorder (TORCH_NCCL_TRACE_BUFFER_SIZE, then \
                 torch.distributed's debug dump), and dump stacks (py-spy dump --pid PID)."
            )
        }
        Kind::LaunchBound => format!(
            "utilization.gpu is high but the SMs are mostly idle while the job progresses: its \
             kernels are too small or too few to fill the GPU (time goes to launches and host \
             syncs). {}",
            words::fewer_launches(&job)
        ),
        Kind::GpuFault => fault_hint(evidence),
        Kind::Throttled => {
            let why = if evidence.clock_event_reasons.is_empty() {
                "power or thermal limits".to_owned()
            } else {
                evidence.clock_event_reasons.join(", ")
            };
            format!(
                "The GPU is busy but its clocks are held down ({why}). Check cooling and airflow, \
                 the power limit (nvidia-smi -q -d POWER), and the host's power capping."
            )
        }
    }
}

enum Unit {
    Cores,
    ShareOfCore,
}

/// On a virtual machine whose hypervisor takes a noticeable share of the
/// CPU time (steal), what `cores` would read without it: threads together
/// (`Unit::Cores`) scaled by the steal's share of all CPU time, one thread
/// (`Unit::ShareOfCore`) by its share of the busy time, as the rules do
/// (`steal::without_steal`, `steal::thread_without_steal`).
fn steal_note(evidence: &Evidence, cores: f64, unit: Unit) -> String {
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

fn fault_action(f: &FaultEvidence) -> &'static str {
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

fn fault_hint(evidence: &Evidence) -> String {
    match &evidence.fault {
        Some(f) => format!(
            "The GPU faulted: {}. The job's work on this GPU is lost and will not go on by \
             itself. {}",
            fault_summary(f),
            fault_action(f)
        ),
        None => "The GPU faulted; see docs/faults.md.".to_owned(),
    }
}

/// The hint for a finding; where the job's Python stacks were sampled, it
/// starts with the place they found, and says why when they could not be.
pub fn hint(kind: Kind, evidence: &Evidence) -> String {
    let mut base = base_hint(kind, evidence);
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
        base = format!("{} {base}", crate::phase::hint(p));
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
        Some(s) if s.outcome == Outcome::Sampled => {
            let base = base.replace(
                "dump stacks (py-spy dump --pid PID)",
                "see the stacks below",
            );
            let base = base.replace(
                "Dump stacks (py-spy dump --pid PID)",
                "Check the stacks below",
            );
            format!("Python stacks of pid {}: {}. {base}", s.pid, s.summary)
        }
        Some(s) => format!("{base} (No Python stacks: {}.)", s.summary),
        None => base,
    }
}
