//! The pure step from raw samples to a snapshot: no I/O, no clock.
//!
//! Rates come from two samples; totals that must never go backwards (a job's
//! CPU time and I/O, whose processes come and go) are carried forward in the
//! previous snapshot and grow by each process's own non-negative delta.

use rustc_hash::FxHashMap as HashMap;

use crate::sample::{
    CpuTimes, GpuSample, HostSample, IoCounters, JobSample, ProcessId, ProcessSample, Sample,
    ThreadSample,
};
use crate::snapshot::{
    ClockEventReason, GpuProcessSnapshot, GpuSnapshot, HostSnapshot, JobSnapshot, ProcessUsage,
    Snapshot, ThreadStates, ThreadUsage,
};

/// How many of a job's busiest threads a snapshot keeps: enough to see
/// GIL-bound work spread over a few threads next to the main thread.
pub const TOP_THREADS: usize = 5;

/// Difference of two cumulative counters; `None` when it went backwards.
pub fn counter_delta(prev: f64, cur: f64) -> Option<f64> {
    (cur >= prev).then_some(cur - prev)
}

/// Builds the snapshot for `cur`, given the previous sample and the snapshot
/// made from it (both `None` for the first sample).
pub fn derive(prev: Option<(&Sample, &Snapshot)>, cur: &Sample) -> Snapshot {
    let interval = prev
        .map(|(p, _)| cur.timestamp_seconds - p.timestamp_seconds)
        .filter(|dt| *dt > 0.0);
    let mut errors_total = prev.map(|(_, s)| s.errors_total).unwrap_or_default();
    errors_total.merge(&cur.errors);
    let mut thread_reads_total = prev.map(|(_, s)| s.thread_reads_total).unwrap_or_default();
    thread_reads_total.merge(&cur.thread_reads);

    let comms: HashMap<u32, &str> = cur
        .jobs
        .iter()
        .map(|j| (j.leader.id.pid, j.leader.comm.as_str()))
        .collect();
    let jobs = cur
        .jobs
        .iter()
        .map(|job| {
            let before = prev.and_then(|(ps, pss)| {
                let same = |id: &ProcessId| *id == job.leader.id;
                let sample = ps.jobs.iter().find(|j| same(&j.leader.id))?;
                let snap = pss.jobs.iter().find(|j| {
                    j.pid == job.leader.id.pid && j.start_ticks == job.leader.id.start_ticks
                })?;
                Some((sample, snap))
            });
            derive_job(before, job, cur.timestamp_seconds, interval)
        })
        .collect();

    Snapshot {
        timestamp_seconds: cur.timestamp_seconds,
        interval_seconds: interval,
        nvml_up: cur.gpu.nvml_up,
        gpu_stale: cur.gpu.stale,
        gpu_read_at_seconds: cur.gpu.read_at_seconds,
        gpu_read_duration_seconds: cur.gpu.read_duration_seconds,
        driver_version: cur.gpu.driver_version.clone(),
        gpus: cur.gpu.gpus.iter().map(|g| derive_gpu(g, &comms)).collect(),
        jobs,
        host: derive_host(prev.map(|(p, _)| &p.host), &cur.host),
        errors_total,
        kernel_log: cur.kernel_log,
        kubernetes: cur.kubernetes.clone(),
        thread_reads_total,
    }
}

fn derive_gpu(gpu: &GpuSample, comms: &HashMap<u32, &str>) -> GpuSnapshot {
    let mut processes: Vec<GpuProcessSnapshot> = gpu
        .processes
        .iter()
        .map(|p| GpuProcessSnapshot {
            pid: p.pid,
            comm: comms.get(&p.pid).copied().unwrap_or_default().to_owned(),
            kind: p.kind,
            memory_bytes: p.memory_bytes,
            sm_utilization_ratio: p.sm_utilization_ratio,
            memory_utilization_ratio: p.memory_utilization_ratio,
        })
        .collect();
    processes.sort_by(|a, b| b.memory_bytes.cmp(&a.memory_bytes).then(a.pid.cmp(&b.pid)));
    GpuSnapshot {
        index: gpu.index,
        uuid: gpu.uuid.clone(),
        name: gpu.name.clone(),
        pci_bus_id: gpu.pci_bus_id.clone(),
        up: gpu.up,
        utilization_ratio: gpu.utilization_ratio,
        memory_utilization_ratio: gpu.memory_utilization_ratio,
        memory_used_bytes: gpu.memory_used_bytes,
        memory_total_bytes: gpu.memory_total_bytes,
        temperature_celsius: gpu.temperature_celsius,
        power_watts: gpu.power_watts,
        power_limit_watts: gpu.power_limit_watts,
        energy_joules_total: gpu.energy_joules,
        sm_clock_hertz: gpu.sm_clock_hertz,
        memory_clock_hertz: gpu.memory_clock_hertz,
        clock_events: gpu.clock_event_reasons.map(ClockEventReason::from_mask),
        pcie_transmit_bytes_per_second: gpu.pcie_transmit_bytes_per_second,
        pcie_receive_bytes_per_second: gpu.pcie_receive_bytes_per_second,
        processes,
        gpm_supported: gpu.gpm_supported,
        gpm: gpu.gpm,
        mig: gpu.mig.clone(),
        share: gpu.share,
        stale: gpu.stale,
        health: gpu.health,
        xid_errors_total: gpu.xid_errors.clone(),
        last_xid: gpu.last_xid.clone(),
        last_fatal_xid: gpu.last_fatal_xid.clone(),
    }
}

/// Running totals of a job's processes, each growing by that process's own
/// delta, so processes that exit never make a total go backwards. `io` stays
/// `None` until some process's `io` has been read.
#[derive(Default)]
struct Totals {
    cpu_seconds: f64,
    io: Option<IoCounters>,
}

impl Totals {
    fn add_whole(&mut self, p: &ProcessSample) {
        self.cpu_seconds += p.cpu_seconds;
        if let Some(io) = p.io {
            self.add_io(io, IoCounters::default());
        }
    }

    fn add_delta(&mut self, before: &ProcessSample, p: &ProcessSample) {
        self.cpu_seconds += counter_delta(before.cpu_seconds, p.cpu_seconds).unwrap_or(0.0);
        match (before.io, p.io) {
            (Some(b), Some(c)) => self.add_io(c, b),
            // io became readable (or the process is new to us): count it once.
            (None, Some(c)) => self.add_io(c, IoCounters::default()),
            _ => {}
        }
    }

    fn add_io(&mut self, cur: IoCounters, before: IoCounters) {
        let io = self.io.get_or_insert_with(IoCounters::default);
        io.rchar += cur.rchar.saturating_sub(before.rchar);
        io.wchar += cur.wchar.saturating_sub(before.wchar);
        io.read_bytes += cur.read_bytes.saturating_sub(before.read_bytes);
        io.write_bytes += cur.write_bytes.saturating_sub(before.write_bytes);
    }
}

fn job_processes(job: &JobSample) -> impl Iterator<Item = &ProcessSample> {
    std::iter::once(&job.leader).chain(job.descendants.iter())
}

/// The names PyTorch gives a DataLoader's worker processes and its
/// pin-memory thread (`torch.multiprocessing._set_thread_name`).
const DATA_LOADER_WORKER: &str = "pt_data_worker";
const PIN_MEMORY_THREAD: &str = "pt_data_pin";

fn derive_job(
    before: Option<(&JobSample, &JobSnapshot)>,
    job: &JobSample,
    now: f64,
    interval: Option<f64>,
) -> JobSnapshot {
    let mut totals = Totals::default();
    match before {
        None => job_processes(job).for_each(|p| totals.add_whole(p)),
        Some((prev, snap)) => {
            totals.cpu_seconds = snap.cpu_seconds_total;
            totals.io = io_totals(snap);
            let old: HashMap<ProcessId, &ProcessSample> =
                job_processes(prev).map(|p| (p.id, p)).collect();
            for p in job_processes(job) {
                match old.get(&p.id) {
                    Some(b) => totals.add_delta(b, p),
                    None => totals.add_whole(p),
                }
            }
        }
    }

    let mut threads = ThreadStates::default();
    job_processes(job).for_each(|p| p.threads.iter().for_each(|t| threads.add(t.state)));

    let (cpu_cores, read_rate) = match (before, interval) {
        (Some((_, snap)), Some(dt)) => (
            Some((totals.cpu_seconds - snap.cpu_seconds_total) / dt),
            totals
                .io
                .zip(snap.read_bytes_total)
                .map(|(io, before)| (io.read_bytes - before) as f64 / dt),
        ),
        _ => (None, None),
    };
    // Threads carried as last read: the rates of the last two reads hold.
    // Read again: over the time since the last read (a sample's interval,
    // or the slow cadence's when the job's GPUs were busy).
    let (top_threads, threads_read_seconds) = match before {
        Some((_, snap)) if job.threads_carried => {
            (snap.top_threads.clone(), snap.threads_read_seconds)
        }
        Some((prev, snap)) if interval.is_some() => {
            let top = match snap.threads_read_seconds.map(|t| now - t) {
                Some(dt) if dt > 0.0 => top_threads(prev, job, dt),
                _ => Vec::new(),
            };
            (top, Some(now))
        }
        _ => (Vec::new(), (!job.threads_carried).then_some(now)),
    };
    let top_processes = match (before, interval) {
        (Some((prev, _)), Some(dt)) => top_processes(prev, job, &top_threads, dt),
        _ => Vec::new(),
    };

    JobSnapshot {
        pid: job.leader.id.pid,
        start_ticks: job.leader.id.start_ticks,
        comm: job.leader.comm.clone(),
        state: job.leader.state,
        ppid: job.leader.ppid,
        start_time_seconds: job.leader.start_time_seconds,
        gpus: job.gpus.clone(),
        attribution: job.attribution.clone(),
        rank: job.rank.clone(),
        frameworks: job.frameworks,
        data_loader_workers: job
            .descendants
            .iter()
            .filter(|p| p.comm == DATA_LOADER_WORKER)
            .count() as u32,
        pin_memory_thread: job
            .leader
            .threads
            .iter()
            .any(|t| t.name == PIN_MEMORY_THREAD),
        processes: 1 + job.descendants.len() as u32,
        threads,
        cpu_seconds_total: totals.cpu_seconds,
        cpu_cores,
        top_threads,
        threads_read_seconds,
        top_processes,
        rss_bytes: job_processes(job).map(|p| p.rss_bytes).sum(),
        read_bytes_total: totals.io.map(|io| io.read_bytes),
        write_bytes_total: totals.io.map(|io| io.write_bytes),
        rchar_total: totals.io.map(|io| io.rchar),
        wchar_total: totals.io.map(|io| io.wchar),
        read_bytes_per_second: read_rate,
        last_output_seconds: last_output(before, job, now),
        output_unknown: job.leader.io.is_none()
            && job.stdout_bytes.is_none()
            && job.stderr_bytes.is_none(),
    }
}

/// The I/O totals a previous snapshot carried, if it had any.
fn io_totals(snap: &JobSnapshot) -> Option<IoCounters> {
    Some(IoCounters {
        rchar: snap.rchar_total?,
        wchar: snap.wchar_total?,
        read_bytes: snap.read_bytes_total?,
        write_bytes: snap.write_bytes_total?,
    })
}

/// The busiest threads over the interval, from per-thread CPU deltas (and
/// their run-queue waits, where read). Only the few kept are copied out
/// (names included).
fn top_threads(prev: &JobSample, job: &JobSample, dt: f64) -> Vec<ThreadUsage> {
    let old: HashMap<(ProcessId, u32), &ThreadSample> = job_processes(prev)
        .flat_map(|p| p.threads.iter().map(move |t| ((p.id, t.tid), t)))
        .collect();
    let mut usage: Vec<(f64, &ProcessSample, &ThreadSample, &ThreadSample)> = job_processes(job)
        .flat_map(|p| p.threads.iter().map(move |t| (p, t)))
        .filter_map(|(p, t)| {
            let before = old.get(&(p.id, t.tid))?;
            let used = counter_delta(before.cpu_seconds, t.cpu_seconds)?;
            Some(((used / dt).clamp(0.0, 1.0), p, t, *before))
        })
        .collect();
    let busier = |a: &(f64, &ProcessSample, &ThreadSample, &ThreadSample),
                  b: &(f64, &ProcessSample, &ThreadSample, &ThreadSample)| {
        b.0.total_cmp(&a.0).then(a.2.tid.cmp(&b.2.tid))
    };
    if usage.len() > TOP_THREADS {
        usage.select_nth_unstable_by(TOP_THREADS, busier);
        usage.truncate(TOP_THREADS);
    }
    usage.sort_by(busier);
    usage
        .into_iter()
        .map(|(cpu_ratio, p, t, before)| ThreadUsage {
            pid: p.id.pid,
            tid: t.tid,
            name: t.name.clone(),
            state: t.state,
            cpu_ratio,
            wait_ratio: before
                .wait_seconds
                .zip(t.wait_seconds)
                .and_then(|(before, now)| counter_delta(before, now))
                .map(|waited| (waited / dt).clamp(0.0, 1.0)),
        })
        .collect()
}

/// CPU over the interval of the processes that own the top threads, busiest
/// first; a process new since the last sample is left out (its CPU time is
/// not all from this interval).
fn top_processes(
    prev: &JobSample,
    job: &JobSample,
    top: &[ThreadUsage],
    dt: f64,
) -> Vec<ProcessUsage> {
    let old: HashMap<ProcessId, f64> = job_processes(prev).map(|p| (p.id, p.cpu_seconds)).collect();
    let mut usage: Vec<ProcessUsage> = job_processes(job)
        .filter(|p| top.iter().any(|t| t.pid == p.id.pid))
        .filter_map(|p| {
            let used = counter_delta(*old.get(&p.id)?, p.cpu_seconds)?;
            Some(ProcessUsage {
                pid: p.id.pid,
                cpu_cores: (used / dt).max(0.0),
            })
        })
        .collect();
    usage.sort_by(|a, b| b.cpu_cores.total_cmp(&a.cpu_cores).then(a.pid.cmp(&b.pid)));
    usage
}

fn last_output(
    before: Option<(&JobSample, &JobSnapshot)>,
    job: &JobSample,
    now: f64,
) -> Option<f64> {
    let Some((prev, snap)) = before else {
        return job.output_modified_seconds;
    };
    let grew = |b: Option<u64>, c: Option<u64>| matches!((b, c), (Some(b), Some(c)) if c > b);
    let wchar = |p: &ProcessSample| p.io.map(|io| io.wchar);
    let output_grew = grew(prev.stdout_bytes, job.stdout_bytes)
        || grew(prev.stderr_bytes, job.stderr_bytes)
        || grew(wchar(&prev.leader), wchar(&job.leader));
    let seen = if output_grew { Some(now) } else { None };
    [snap.last_output_seconds, job.output_modified_seconds, seen]
        .into_iter()
        .flatten()
        .reduce(f64::max)
}

fn busy_ratio(prev: &CpuTimes, cur: &CpuTimes) -> Option<f64> {
    let busy = counter_delta(prev.busy_seconds, cur.busy_seconds)?;
    let total = counter_delta(prev.total_seconds, cur.total_seconds)?;
    (total > 0.0).then(|| (busy / total).clamp(0.0, 1.0))
}

/// The share of all CPU time (idle included) that the hypervisor took
/// (steal): time a virtual CPU had work and did not run, counted as no
/// task's CPU time. Of the same total as the busy ratio, which includes it.
fn steal_ratio(prev: &CpuTimes, cur: &CpuTimes) -> Option<f64> {
    let steal = counter_delta(prev.steal_seconds?, cur.steal_seconds?)?;
    let total = counter_delta(prev.total_seconds, cur.total_seconds)?;
    (total > 0.0).then(|| (steal / total).clamp(0.0, 1.0))
}

fn derive_host(prev: Option<&HostSample>, cur: &HostSample) -> HostSnapshot {
    let host_cpu = prev.and_then(|p| Some((p.cpu.as_ref()?, cur.cpu.as_ref()?)));
    let cpu_utilization_ratio = host_cpu.and_then(|(p, c)| busy_ratio(p, c));
    let cpu_steal_ratio = host_cpu.and_then(|(p, c)| steal_ratio(p, c));
    let busiest_core_ratio = prev
        .filter(|p| p.cores.len() == cur.cores.len())
        .and_then(|p| {
            p.cores
                .iter()
                .zip(&cur.cores)
                .filter_map(|(p, c)| busy_ratio(p, c))
                .reduce(f64::max)
        });
    HostSnapshot {
        cpu_utilization_ratio,
        busiest_core_ratio,
        cpu_steal_ratio,
        cpus: cur.online_cpus,
        pressure: cur.pressure,
        memory: cur.memory,
    }
}
