//! The view of a snapshot the diagnosis engine takes.

use collector::faults::xid;
use collector::sample::GpuProcessKind;
use collector::sample::faults::RecoveryAction;
use collector::sample::job::RankRead;
use collector::snapshot::{ClockEventReason, GpuSnapshot, JobSnapshot, Snapshot};
use diagnosis::frame::{
    Attribution, Frame, GpuFrame, HostFrame, JobFrame, JobFramework, ProcessCpuFrame, ProcessFrame,
    RunRank, ThreadFrame, XidFrame,
};
use diagnosis::framework::Framework;

pub fn from_snapshot(s: &Snapshot) -> Frame {
    Frame {
        t: s.timestamp_seconds,
        gpus: s
            .gpus
            .iter()
            .map(|g| gpu(g, s.nvml_up && !s.gpu_stale))
            .collect(),
        jobs: s.jobs.iter().map(job).collect(),
        host: HostFrame {
            cpu_utilization: s.host.cpu_utilization_ratio,
            busiest_core: s.host.busiest_core_ratio,
            cpu_steal: s.host.cpu_steal_ratio,
            cpus: s.host.cpus,
            psi_cpu_some: s.host.pressure.cpu_some,
            psi_io_some: s.host.pressure.io_some,
            psi_memory_some: s.host.pressure.memory_some,
            memory_total_bytes: s.host.memory.map(|m| m.total_bytes),
            memory_available_bytes: s.host.memory.map(|m| m.available_bytes),
            swap_used_bytes: s
                .host
                .memory
                .map(|m| m.swap_total_bytes.saturating_sub(m.swap_free_bytes)),
        },
    }
}

fn gpu(g: &GpuSnapshot, nvml_fresh: bool) -> GpuFrame {
    let bits = |reason: &ClockEventReason| {
        ClockEventReason::ALL
            .iter()
            .find(|(r, _)| r == reason)
            .map_or(0, |(_, bit)| *bit)
    };
    GpuFrame {
        index: g.index,
        uuid: g.uuid.clone(),
        fresh: nvml_fresh && g.up && !g.stale,
        share: g.share,
        mig: g.mig.is_some(),
        utilization: g.utilization_ratio,
        memory_used_bytes: g.memory_used_bytes,
        memory_total_bytes: g.memory_total_bytes,
        power_watts: g.power_watts,
        power_limit_watts: g.power_limit_watts,
        clock_events: g
            .clock_events
            .iter()
            .flatten()
            .map(bits)
            .fold(0, |a, b| a | b),
        temperature_celsius: g.temperature_celsius,
        processes: g
            .processes
            .iter()
            .map(|p| ProcessFrame {
                pid: p.pid,
                memory_bytes: p.memory_bytes,
                sm_utilization: p.sm_utilization_ratio,
                mps: p.kind == GpuProcessKind::Mps,
            })
            .collect(),
        xid: g.last_fatal_xid.as_ref().map(|x| {
            let info = xid::lookup(x.xid);
            let (meaning, action) = xid::describe(x.xid);
            XidFrame {
                xid: x.xid,
                t: x.at_seconds,
                pid: x.pid,
                comm: x.comm.clone(),
                meaning: meaning.to_owned(),
                action: action.as_str().to_owned(),
                fatal: info.is_some_and(|i| i.fatal()),
                job_code: info.is_some_and(|i| i.job_code),
                detail: x.detail.clone(),
            }
        }),
        row_remap_failure: g.health.is_some_and(|h| h.row_remap_failure == Some(true)),
        recovery_action: g
            .health
            .and_then(|h| h.recovery_action)
            .filter(|a| *a != RecoveryAction::None)
            .map(|a| a.as_str().to_owned()),
        sm_active: g.gpm.and_then(|m| m.sm_active_ratio),
        tensor_active: g.gpm.and_then(|m| m.tensor_active_ratio),
        dram_active: g.gpm.and_then(|m| m.dram_active_ratio),
        nvlink_bytes_per_second: g.gpm.and_then(|m| {
            both(
                m.nvlink_transmit_bytes_per_second,
                m.nvlink_receive_bytes_per_second,
            )
        }),
        pcie_bytes_per_second: both(
            g.pcie_transmit_bytes_per_second,
            g.pcie_receive_bytes_per_second,
        ),
    }
}

/// Both directions together; `None` when neither is reported.
fn both(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
    }
}

fn job(j: &JobSnapshot) -> JobFrame {
    let a = &j.attribution;
    JobFrame {
        pid: j.pid,
        comm: j.comm.clone(),
        state: j.state,
        ppid: j.ppid,
        start_time: j.start_time_seconds,
        gpus: j.gpus.clone(),
        attribution: Attribution {
            container_id: a.container_id.clone(),
            systemd_unit: a.systemd_unit.clone(),
            pod_uid: a.pod_uid.clone(),
            namespace: a.namespace.clone(),
            pod: a.pod.clone(),
            container: a.container.clone(),
            pod_unknown: a.pod_unknown.clone(),
            slurm_job_id: a.slurm_job_id.clone(),
            slurm_step: a.slurm_step.clone(),
            slurm_account: a.slurm_account.clone(),
            user: a.user.clone(),
        },
        run: match &j.rank {
            RankRead::Found(r) => Some(RunRank {
                run: r.run.clone(),
                rank: r.rank,
                local_rank: r.local_rank,
                world_size: r.world_size,
                launcher: r.launcher.clone(),
            }),
            _ => None,
        },
        run_unknown: match &j.rank {
            RankRead::Unknown(why) => Some(why.clone()),
            _ => None,
        },
        processes: j.processes,
        cpu_cores: j.cpu_cores,
        top_threads: j
            .top_threads
            .iter()
            .map(|t| ThreadFrame {
                pid: t.pid,
                tid: t.tid,
                name: t.name.clone(),
                state: t.state,
                cpu: t.cpu_ratio,
                wait: t.wait_ratio,
            })
            .collect(),
        threads_read_at: j.threads_read_seconds,
        top_processes: j
            .top_processes
            .iter()
            .map(|p| ProcessCpuFrame {
                pid: p.pid,
                cpu_cores: p.cpu_cores,
            })
            .collect(),
        threads_total: j.threads.total(),
        threads_running: j.threads.running,
        threads_disk_sleep: j.threads.disk_sleep,
        read_bytes_per_second: j.read_bytes_per_second,
        rss_bytes: j.rss_bytes,
        last_output: j.last_output_seconds,
        output_unknown: j.output_unknown,
        framework: JobFramework {
            loaded: [
                (j.frameworks.pytorch, Framework::Pytorch),
                (j.frameworks.tensorflow, Framework::Tensorflow),
                (j.frameworks.jax, Framework::Jax),
            ]
            .into_iter()
            .filter_map(|(loaded, f)| loaded.then_some(f))
            .collect(),
            data_loader_workers: j.data_loader_workers,
            pin_memory_thread: j.pin_memory_thread,
        },
    }
}
