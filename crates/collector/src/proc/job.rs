//! Jobs: a GPU-holding process and its descendants, found by walking
//! `/proc/<pid>/task/<tid>/children`, so the cost grows with the jobs'
//! processes and threads only, never with the rest of the host.

use std::collections::{HashSet, VecDeque};
use std::io::Read;

use procfs::ProcResult;
use procfs::process::Process;

use super::{ProcReader, cgroup, job_value, output, vanished};
use crate::sample::{
    Attribution, ErrorCounts, IoCounters, JobSample, ProcessId, ProcessSample, ThreadSample,
};

pub(super) fn read_jobs(
    reader: &ProcReader,
    holders: &[(u32, Vec<u32>)],
    errors: &mut ErrorCounts,
) -> Vec<JobSample> {
    let holder_pids: HashSet<u32> = holders.iter().map(|(pid, _)| *pid).collect();
    let mut read = HashSet::new();
    holders
        .iter()
        .filter(|(pid, _)| read.insert(*pid))
        .filter_map(|(pid, gpus)| read_job(reader, *pid, gpus, &holder_pids, errors))
        .collect()
}

fn read_job(
    reader: &ProcReader,
    pid: u32,
    gpus: &[u32],
    holders: &HashSet<u32>,
    errors: &mut ErrorCounts,
) -> Option<JobSample> {
    let process = open(reader, pid, errors)?;
    let (leader, children) = read_process(reader, &process, None, errors)?;
    let attribution = unless_exited(&process, errors, |e| read_attribution(&process, e));
    let output = unless_exited(&process, errors, |e| {
        output::read_output(reader.root(), pid, e)
    });
    let descendants = read_descendants(reader, pid, children, holders, errors);
    Some(JobSample {
        gpus: gpus.to_vec(),
        leader,
        descendants,
        attribution,
        stdout_bytes: output.stdout_bytes,
        stderr_bytes: output.stderr_bytes,
        output_modified_seconds: output.modified_seconds,
    })
}

/// Breadth-first walk below the leader. Stops at processes that hold a GPU
/// context themselves (they are their own job), and reads every pid at most
/// once, so a pid reused into a loop cannot make the walk cycle.
fn read_descendants(
    reader: &ProcReader,
    leader: u32,
    children: Vec<u32>,
    holders: &HashSet<u32>,
    errors: &mut ErrorCounts,
) -> Vec<ProcessSample> {
    let mut seen = HashSet::from([leader]);
    let mut queue: VecDeque<(u32, u32)> = children.into_iter().map(|c| (c, leader)).collect();
    let mut descendants = Vec::new();
    while let Some((pid, parent)) = queue.pop_front() {
        if holders.contains(&pid) || !seen.insert(pid) {
            continue;
        }
        let Some(process) = open(reader, pid, errors) else {
            continue;
        };
        let Some((sample, children)) = read_process(reader, &process, Some(parent), errors) else {
            continue;
        };
        queue.extend(children.into_iter().map(|c| (c, pid)));
        descendants.push(sample);
    }
    descendants
}

fn open(reader: &ProcReader, pid: u32, errors: &mut ErrorCounts) -> Option<Process> {
    let dir = reader.root().join(pid.to_string());
    job_value(Process::new_with_root(dir), "process directory", errors)
}

/// One process with its threads, and the pids of its children (from every
/// thread). `None` when it is gone, when its `stat` cannot be read, or when
/// its parent is not `expected_parent` (the pid was reused outside the job).
fn read_process(
    reader: &ProcReader,
    process: &Process,
    expected_parent: Option<u32>,
    errors: &mut ErrorCounts,
) -> Option<(ProcessSample, Vec<u32>)> {
    let stat = job_value(process.stat(), "stat", errors)?;
    let ppid = u32::try_from(stat.ppid).unwrap_or(0);
    if expected_parent.is_some_and(|parent| parent != ppid) {
        return None;
    }
    let (threads, children) = read_threads(reader, process, errors);
    let io = unless_exited(process, errors, |e| job_value(process.io(), "io", e));
    let io = io.map(|io| IoCounters {
        rchar: io.rchar,
        wchar: io.wchar,
        read_bytes: io.read_bytes,
        write_bytes: io.write_bytes,
    });
    let sample = ProcessSample {
        id: ProcessId {
            pid: u32::try_from(process.pid).unwrap_or(0),
            start_ticks: stat.starttime,
        },
        ppid,
        comm: stat.comm,
        state: stat.state,
        start_time_seconds: reader.boot_time_seconds as f64
            + reader.ticks_to_seconds(stat.starttime),
        cpu_seconds: reader.ticks_to_seconds(stat.utime.saturating_add(stat.stime)),
        rss_bytes: stat.rss.saturating_mul(reader.page_size_bytes),
        threads,
        io,
    };
    Some((sample, children))
}

/// Every thread's `stat`, in tid order, and the children listed by every
/// thread (a child belongs to the thread that forked it), in tid order too.
/// One task directory is open at a time: jobs can have thousands of threads.
fn read_threads(
    reader: &ProcReader,
    process: &Process,
    errors: &mut ErrorCounts,
) -> (Vec<ThreadSample>, Vec<u32>) {
    let mut threads = Vec::new();
    let mut children_by_thread = Vec::new();
    let Some(tasks) = job_value(process.tasks(), "task directory", errors) else {
        return (threads, Vec::new());
    };
    for task in tasks {
        // The iterator already skips threads that exit while it runs; an
        // error here is a failed directory read, which would repeat.
        let Some(task) = job_value(task, "task directory", errors) else {
            break;
        };
        let tid = u32::try_from(task.tid).unwrap_or(0);
        if let Some(stat) = job_value(task.stat(), "thread stat", errors) {
            threads.push(ThreadSample {
                tid,
                name: stat.comm,
                state: stat.state,
                cpu_seconds: reader.ticks_to_seconds(stat.utime.saturating_add(stat.stime)),
            });
        }
        if let Some(pids) = job_value(task.children(), "thread children", errors) {
            children_by_thread.push((tid, pids));
        }
    }
    // procfs lists tasks in tid order; other trees may not.
    threads.sort_by_key(|t| t.tid);
    children_by_thread.sort_by_key(|(tid, _)| *tid);
    let children = children_by_thread
        .into_iter()
        .flat_map(|(_, pids)| pids)
        .collect();
    (threads, children)
}

/// Runs a read whose failures count only while the process is alive: once
/// it is a zombie, its `io` and `fd/*` deny access to readers other than root.
fn unless_exited<T>(
    process: &Process,
    errors: &mut ErrorCounts,
    read: impl FnOnce(&mut ErrorCounts) -> T,
) -> T {
    let mut failures = ErrorCounts::default();
    let value = read(&mut failures);
    if failures != ErrorCounts::default() && !exited(process) {
        errors.merge(&failures);
    }
    value
}

/// The process is a zombie, dead, or gone (checked only after a failure).
fn exited(process: &Process) -> bool {
    match process.stat() {
        Ok(stat) => matches!(stat.state, 'Z' | 'X' | 'x'),
        Err(e) => vanished(&e),
    }
}

fn read_attribution(process: &Process, errors: &mut ErrorCounts) -> Attribution {
    job_value(read_text(process, "cgroup"), "cgroup", errors)
        .map(|text| cgroup::parse_attribution(&text))
        .unwrap_or_default()
}

fn read_text(process: &Process, name: &str) -> ProcResult<String> {
    let mut text = String::new();
    process.open_relative(name)?.read_to_string(&mut text)?;
    Ok(text)
}
