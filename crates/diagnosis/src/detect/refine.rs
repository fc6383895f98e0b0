//! Why a GPU is starved or input-bound: one pinned thread (or GIL-bound work
//! spread over several threads of one process), too little CPU, or storage
//! waits. Each is reported together with its parent finding.

use super::ctx::{Ctx, Finding};
use crate::Kind;
use crate::hint::{Job, Unit, steal_note, words};
use crate::hysteresis::Condition;
use crate::round::{round, round_opt};
use crate::steal::without_steal;
use crate::types::evidence::Evidence;
use crate::types::evidence::{GilSpread, ThreadEvidence};
use crate::types::frame::{JobFrame, ThreadFrame};
use crate::window::{Point, Window};

/// Whether the host is short of CPU over the cpu_saturated window. Where the
/// kernel has PSI, tasks waiting for a CPU decide: a host kept busy by one
/// pinned thread plus work that has cores of its own is busy, not short.
/// Without PSI, the host's busy share stands in; so it does beside PSI while
/// the job's threads hand the GIL to each other.
fn host_saturated(ctx: &Ctx) -> (bool, Option<f64>, Option<f64>) {
    let c = &ctx.config.cpu_saturated;
    let w = ctx.window(Kind::CpuSaturated);
    let host = w.mean(|p| p.host_cpu);
    let psi = w.mean(|p| p.psi_cpu);
    let busy = host.is_some_and(|h| h >= c.min_host_cpu);
    let saturated = match psi {
        Some(p) => p >= c.min_psi_cpu && (busy || !gil_handovers(ctx, &w)),
        None => busy,
    };
    (saturated, host, psi)
}

/// Whether the job's GIL-bound threads hand the GIL to each other through
/// most of the window. Each handover wakes a thread that then waits, briefly,
/// for the CPU the last holder is leaving: PSI cpu rises (by 0.1-0.2 on a
/// 2-core host) while CPUs sit idle, so PSI alone does not show a host short
/// of CPU. Their CPU alone decides here, not their waits: threads that get
/// nearly a core between them leave PSI to the handovers, while threads
/// kept well under a core by waits for a CPU (a job confined to a core it
/// shares) are short of CPU.
fn gil_handovers(ctx: &Ctx, w: &Window) -> bool {
    let s = &ctx.config.single_thread_bound;
    w.share(|p| Some(p.spread_cpu.is_some_and(|v| v >= s.min_spread_cpu)))
        .is_some_and(|share| share >= s.min_pinned_share)
}

/// A thread using at least this share of a core counts as one of a
/// process's busy threads when GIL-bound work spreads over several.
const BUSY_THREAD_CPU: f64 = 0.05;

/// The busy threads of one process, their CPU together, and their waits
/// for a CPU together.
struct Spread<'a> {
    pid: u32,
    threads: Vec<&'a ThreadFrame>,
    cpu: f64,
    /// Known only when every busy thread's wait is.
    wait: Option<f64>,
    /// The whole process's CPU, in cores, where known.
    process_cpu: Option<f64>,
}

impl Spread<'_> {
    /// Two or more busy threads in a process that stays under the GIL cap:
    /// their CPU together is what one Python thread pinned would show.
    /// On a virtual machine the process's CPU is scaled up by what the
    /// hypervisor took, as the threads' is.
    fn gil_bound(&self, max_process_cpu: f64, steal: Option<f64>) -> bool {
        self.threads.len() >= 2
            && self
                .process_cpu
                .is_some_and(|p| without_steal(p, steal) < max_process_cpu)
    }

    /// What the threads would have used, in cores: their CPU (scaled up by
    /// what the hypervisor took, where it took some) and their waits for a
    /// CPU. A GIL handed over on a busy host sits unused while the thread
    /// given it waits in a run queue: on 2 cores with a third of one taken
    /// by other work, three GIL-bound threads ran 0.58 cores together and
    /// waited 0.34 (see docs/diagnosis.md).
    fn demand(&self, steal: Option<f64>) -> f64 {
        without_steal(self.cpu, steal) + self.wait.unwrap_or(0.0)
    }
}

/// Per process of the jobs, its busy top threads, busiest process first.
fn spreads<'a>(jobs: &[&'a JobFrame]) -> Vec<Spread<'a>> {
    let mut out: Vec<Spread<'a>> = Vec::new();
    for job in jobs {
        for t in job.top_threads.iter().filter(|t| t.cpu >= BUSY_THREAD_CPU) {
            match out.iter_mut().find(|s| s.pid == t.pid) {
                Some(s) => {
                    s.threads.push(t);
                    s.cpu += t.cpu;
                    s.wait = s.wait.zip(t.wait).map(|(a, b)| a + b);
                }
                None => out.push(Spread {
                    pid: t.pid,
                    threads: vec![t],
                    cpu: t.cpu,
                    wait: t.wait,
                    process_cpu: process_cpu(job, t.pid),
                }),
            }
        }
    }
    out.sort_by(|a, b| b.cpu.total_cmp(&a.cpu));
    out
}

/// A process's CPU from the frame; frames recorded before it carried
/// per-process CPU still tell it for a job of one process.
fn process_cpu(job: &JobFrame, pid: u32) -> Option<f64> {
    match job.top_processes.iter().find(|p| p.pid == pid) {
        Some(p) => Some(p.cpu_cores),
        None if job.top_processes.is_empty() && job.processes == 1 && job.pid == pid => {
            job.cpu_cores
        }
        None => None,
    }
}

/// What the busy threads of a GIL-bound process used, in cores.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SpreadLoad {
    /// Their CPU together, scaled up by what the hypervisor took.
    pub cpu: f64,
    /// That and their waits for a CPU together.
    pub demand: f64,
}

/// The load of the busy threads of the one process whose GIL-bound work is
/// spread over several threads (the busiest such process), for one sample
/// on a host whose hypervisor took `steal` of all CPU time.
pub fn spread_load(
    jobs: &[&JobFrame],
    max_process_cpu: f64,
    steal: Option<f64>,
) -> Option<SpreadLoad> {
    spreads(jobs)
        .into_iter()
        .find(|s| s.gil_bound(max_process_cpu, steal))
        .map(|s| SpreadLoad {
            cpu: without_steal(s.cpu, steal),
            demand: s.demand(steal),
        })
}

pub fn single_thread(ctx: &Ctx) -> Finding {
    let c = &ctx.config.single_thread_bound;
    let w = ctx.window(Kind::SingleThreadBound);
    let one = |p: &Point| p.top_thread_cpu.is_some_and(|v| v >= c.min_thread_cpu);
    let spread = |p: &Point| p.spread_demand.is_some_and(|v| v >= c.min_spread_cpu);
    let pinned = w.share(|p| Some(one(p) || spread(p)));
    let one_share = w.share(|p| Some(one(p))).unwrap_or(0.0);
    let spread_share = w.share(|p| Some(spread(p) && !one(p))).unwrap_or(0.0);
    let (saturated, host, psi) = host_saturated(ctx);
    let enter = ctx.refinement_parent()
        && w.covered()
        && pinned.is_some_and(|s| s >= c.min_pinned_share)
        && !saturated;
    let latest = ctx.history.latest();
    let load = latest
        .map(|p| {
            let one = p.top_thread_cpu.unwrap_or(0.0);
            one.max(p.spread_demand.unwrap_or(0.0))
        })
        .unwrap_or(0.0);
    let condition = Condition {
        enter,
        exit: load < c.exit_thread_cpu,
    };
    ctx.finding(condition, || {
        let mut evidence = ctx.utilization_evidence(&w);
        evidence.pinned_share = round_opt(pinned);
        evidence.host_cpu_ratio = round_opt(host);
        evidence.psi_cpu_some = round_opt(psi);
        evidence.host_cpus = ctx.host.cpus;
        evidence.cpu_steal_ratio =
            round_opt(w.mean(|p| p.steal).filter(|s| *s >= NOTICEABLE_STEAL));
        if spread_share > one_share {
            evidence.gil_spread = gil_spread(ctx, c.max_process_cpu);
        }
        evidence
    })
}

/// Steal from this share of the CPU time up is shown in the evidence.
const NOTICEABLE_STEAL: f64 = 0.05;

/// The spread to show now: the GIL-bound process with the most busy-thread
/// CPU, else the process with the most.
fn gil_spread(ctx: &Ctx, max_process_cpu: f64) -> Option<GilSpread> {
    let all = spreads(&ctx.jobs);
    let steal = ctx.host.cpu_steal;
    let best = match all.iter().position(|s| s.gil_bound(max_process_cpu, steal)) {
        Some(i) => &all[i],
        None => all.first()?,
    };
    Some(GilSpread {
        pid: best.pid,
        threads: best
            .threads
            .iter()
            .map(|t| ThreadEvidence::from(*t))
            .collect(),
        cpu_cores: round(best.cpu),
        wait_cores: round_opt(best.wait),
        process_cpu_cores: round_opt(best.process_cpu),
    })
}

pub fn cpu_saturated(ctx: &Ctx) -> Finding {
    let c = &ctx.config.cpu_saturated;
    let w = ctx.window(Kind::CpuSaturated);
    let (saturated, host, psi) = host_saturated(ctx);
    let enter = ctx.refinement_parent() && w.covered() && saturated;
    let latest = ctx.history.latest();
    let host_now = latest.and_then(|p| p.host_cpu).unwrap_or(0.0);
    let calm = match latest.and_then(|p| p.psi_cpu) {
        Some(psi_now) => {
            psi_now < c.exit_psi_cpu || (host_now < c.exit_host_cpu && gil_handovers(ctx, &w))
        }
        None => host_now < c.exit_host_cpu,
    };
    ctx.finding(Condition { enter, exit: calm }, || {
        let mut evidence = ctx.utilization_evidence(&w);
        evidence.host_cpu_ratio = round_opt(host);
        evidence.psi_cpu_some = round_opt(psi);
        evidence.host_cpus = ctx.host.cpus;
        evidence
    })
}

pub fn io_bound(ctx: &Ctx) -> Finding {
    let c = &ctx.config.io_bound;
    let w = ctx.window(Kind::IoBound);
    let psi = w.mean(|p| p.psi_io);
    let disk_sleep = w.share(|p| p.has_job.then_some(p.disk_sleep));
    let enter = ctx.refinement_parent()
        && w.covered()
        && (psi.is_some_and(|p| p >= c.min_psi_io)
            || disk_sleep.is_some_and(|d| d >= c.min_disk_sleep_share));
    let recent = ctx
        .history
        .window(ctx.config.timing(Kind::IoBound).exit_for.max(1.0));
    let recent_d = recent
        .share(|p| p.has_job.then_some(p.disk_sleep))
        .unwrap_or(0.0);
    let psi_now = ctx.history.latest().and_then(|p| p.psi_io).unwrap_or(0.0);
    let condition = Condition {
        enter,
        exit: psi_now < c.exit_psi_io && recent_d < c.exit_disk_sleep_share,
    };
    ctx.finding(condition, || {
        let mut evidence = ctx.utilization_evidence(&w);
        evidence.psi_io_some = round_opt(psi);
        evidence.disk_sleep_share = round_opt(disk_sleep);
        evidence.read_bytes_per_second = ctx
            .jobs
            .iter()
            .filter_map(|j| j.read_bytes_per_second)
            .reduce(|a, b| a + b)
            .map(round);
        evidence
    })
}

/// The hint of `single_thread_bound`: what to tell the user, in plain words.
pub fn single_thread_hint(evidence: &Evidence) -> String {
    let top = evidence.top_threads.first();
    let job = Job::of(evidence);
    if let Some(g) = &evidence.gil_spread {
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
        return format!(
            "The input pipeline is bound by the GIL: Python work spread over {} threads of \
             pid {} (tids {}) uses {:.2} cores together{stolen}{process}{waiting} while the \
             GPU waits. The threads take turns holding the GIL, so together they get about \
             one core however many there are. {}",
            g.threads.len(),
            g.pid,
            tids.join(", "),
            g.cpu_cores,
            words::off_the_gil(&job)
        );
    }
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

/// The hint of `cpu_saturated`: what to tell the user, in plain words.
pub fn cpu_saturated_hint(evidence: &Evidence) -> String {
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

/// The hint of `io_bound`: what to tell the user, in plain words.
pub fn io_bound_hint(evidence: &Evidence) -> String {
    let job = Job::of(evidence);
    format!(
        "The input pipeline waits on storage (threads in D state or I/O pressure). {}",
        words::read_faster(&job)
    )
}
