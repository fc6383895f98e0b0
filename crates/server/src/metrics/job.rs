//! Job series: a GPU-holding process and its descendants, labelled by the
//! holder's `pid` and `comm` (never its command line). Only jobs whose
//! holder is among the `gpu.max_processes` exported processes of a GPU get
//! series, so a GPU crowded with processes cannot flood the exposition.

use std::collections::HashSet;

use collector::snapshot::{JobSnapshot, Snapshot, ThreadStates};
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Unit;

use super::family::{counter, exported_processes, gauge, info, ratio};
use super::labels::Labels;

fn labels(j: &JobSnapshot) -> Labels<'_> {
    Labels::none().with("pid", j.pid).with("comm", &j.comm)
}

fn per_job<'a>(
    jobs: &'a [&'a JobSnapshot],
    value: impl Fn(&JobSnapshot) -> Option<f64> + 'a,
) -> impl Iterator<Item = (Labels<'a>, f64)> + 'a {
    jobs.iter()
        .filter_map(move |j| Some((labels(j), value(j)?)))
}

/// The jobs that get series: those whose holder is among the first
/// `max_processes` processes (largest GPU memory first) of some GPU.
fn exported(s: &Snapshot, max_processes: usize) -> Vec<&JobSnapshot> {
    let pids: HashSet<u32> = s
        .gpus
        .iter()
        .flat_map(|g| exported_processes(g, max_processes).map(|p| p.pid))
        .collect();
    s.jobs.iter().filter(|j| pids.contains(&j.pid)).collect()
}

pub fn encode(
    e: &mut DescriptorEncoder,
    s: &Snapshot,
    max_processes: usize,
) -> Result<(), std::fmt::Error> {
    let jobs = &exported(s, max_processes);
    info(
        e,
        "stallwatch_job",
        "A job (a GPU-holding process and its descendants), where it runs and whose it is: its container, systemd unit, Kubernetes pod (namespace, pod, container from the kubelet), Slurm job, step and account, and user; empty labels are unknown.",
        jobs.iter().map(|j| {
            let a = &j.attribution;
            let mut l = labels(j);
            for (name, value) in [
                ("container_id", &a.container_id),
                ("systemd_unit", &a.systemd_unit),
                ("pod_uid", &a.pod_uid),
                ("namespace", &a.namespace),
                ("pod", &a.pod),
                ("container", &a.container),
                ("slurm_job_id", &a.slurm_job_id),
                ("slurm_step", &a.slurm_step),
                ("slurm_account", &a.slurm_account),
                ("user", &a.user),
            ] {
                l = l.with(name, value.as_deref().unwrap_or(""));
            }
            l
        }),
    )?;
    info(
        e,
        "stallwatch_job_rank",
        "The job's distributed run and its rank in it, from the launcher's variables (one series per GPU it holds): join on gpu and pid.",
        jobs.iter().flat_map(|j| {
            j.rank.found().into_iter().flat_map(move |r| {
                j.gpus.iter().map(move |gpu| {
                    let l = Labels::none()
                        .with("gpu", *gpu)
                        .with("pid", j.pid)
                        .with("run", &r.run)
                        .with("rank", r.rank);
                    let l = match r.local_rank {
                        Some(n) => l.with("local_rank", n),
                        None => l.with("local_rank", ""),
                    };
                    let l = match r.world_size {
                        Some(n) => l.with("world_size", n),
                        None => l.with("world_size", ""),
                    };
                    l.with("launcher", &r.launcher)
                })
            })
        }),
    )?;
    gauge(
        e,
        "stallwatch_job_world_size",
        "Ranks in the job's distributed run, from the launcher's variables (one series per GPU it holds; what the run rules compare the ranks seen with).",
        None,
        jobs.iter().flat_map(|j| {
            let world = j.rank.found().and_then(|r| r.world_size);
            world.into_iter().flat_map(move |w| {
                j.gpus.iter().map(move |gpu| {
                    (
                        Labels::none().with("gpu", *gpu).with("pid", j.pid),
                        f64::from(w),
                    )
                })
            })
        }),
    )?;
    gauge(
        e,
        "stallwatch_job_processes",
        "Processes in the job, the GPU-holding one included.",
        None,
        per_job(jobs, |j| Some(f64::from(j.processes))),
    )?;
    gauge(
        e,
        "stallwatch_job_threads",
        "Threads of the job's processes by kernel state.",
        None,
        jobs.iter().flat_map(|j| {
            ThreadStates::LABELS
                .iter()
                .zip(j.threads.counts())
                .map(move |(state, n)| (labels(j).with("state", *state), f64::from(n)))
        }),
    )?;
    counter(
        e,
        "stallwatch_job_cpu",
        "CPU time used by the job's processes while watched.",
        Some(&Unit::Seconds),
        per_job(jobs, |j| Some(j.cpu_seconds_total)),
    )?;
    gauge(
        e,
        "stallwatch_job_top_thread_cpu",
        "Share of one core used over the last interval by the job's busiest thread, named in `thread`.",
        Some(&ratio()),
        jobs.iter().filter_map(|j| {
            let top = j.top_threads.first()?;
            Some((labels(j).with("thread", &top.name), top.cpu_ratio))
        }),
    )?;
    gauge(
        e,
        "stallwatch_job_memory_rss",
        "Resident memory of the job's processes.",
        Some(&Unit::Bytes),
        per_job(jobs, |j| Some(j.rss_bytes as f64)),
    )?;
    counter(
        e,
        "stallwatch_job_read",
        "Bytes the job's processes read from storage (/proc/<pid>/io read_bytes).",
        Some(&Unit::Bytes),
        per_job(jobs, |j| j.read_bytes_total.map(|v| v as f64)),
    )?;
    counter(
        e,
        "stallwatch_job_write",
        "Bytes the job's processes wrote to storage (/proc/<pid>/io write_bytes).",
        Some(&Unit::Bytes),
        per_job(jobs, |j| j.write_bytes_total.map(|v| v as f64)),
    )?;
    gauge(
        e,
        "stallwatch_job_last_output_timestamp",
        "Last time the job's output grew (stdout/stderr file or written characters), as a Unix time.",
        Some(&Unit::Seconds),
        per_job(jobs, |j| j.last_output_seconds),
    )
}
