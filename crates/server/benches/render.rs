//! Times, in memory, what the daemon does with a sample besides reading it
//! and what a scrape costs, at the size the performance targets name: 8 GPUs
//! with 9 processes on each, 8 jobs of 9 processes (20 threads in the
//! GPU-holding one, 1 in each child). Steps timed: rendering `/metrics`
//! (both formats), a gzip scrape's body (render + gzip, as `/metrics` makes
//! it for a new sample), `collector::delta::derive`, the diagnosis frame, and the
//! diagnosis engine's `observe` + `status`.
//!
//! Plain `Instant` timing (no criterion): a warm-up, then every iteration is
//! timed on its own; mean, p50, p99 and max are printed in microseconds.
//!
//! Run with `cargo bench -p stallwatch --bench render`. Any argument that is
//! a number sets the iteration count (default 5000).

use std::hint::black_box;
use std::sync::Arc;

use collector::delta::derive;
use collector::sample::{
    Attribution, CpuTimes, ErrorCounts, GpmReading, GpuProcessKind, GpuProcessSample, GpuReadout,
    GpuSample, HostMemory, HostSample, IoCounters, JobSample, Pressure, ProcessId, ProcessSample,
    Sample, ThreadSample,
};
use collector::snapshot::Snapshot;
use diagnosis::{DiagnosisConfig, Engine, GpuStatus};
use stallwatch::metrics::{Format, Scrape, render};
use stallwatch::own_cost::SampleCost;
use stallwatch::sampling::bodies::MetricsBodies;
use stallwatch::sampling::frame;

mod timing;
use timing::{measure, report};

const GPUS: u32 = 8;
const CHILDREN_PER_JOB: u32 = 8;
const LEADER_THREADS: u32 = 20;
const MAX_PROCESSES: usize = 16;
const CORES: usize = 2;
/// Seconds of samples fed to the diagnosis before timing: more than its
/// longest window (300 s by default), so its history is full.
const HISTORY_SECONDS: f64 = 330.0;

/// Pid of job `job`'s leader (`child` 0) or of its `child`-th child (1-8).
fn pid(job: u32, child: u32) -> u32 {
    100_000 + job * 100 + child * 10
}

fn thread(tid: u32, name: String, state: char, cpu_seconds: f64) -> ThreadSample {
    ThreadSample {
        tid,
        name,
        state,
        cpu_seconds,
        wait_seconds: Some(0.0),
    }
}

fn process(
    pid: u32,
    ppid: u32,
    comm: &str,
    threads: Vec<ThreadSample>,
    io_scale: u64,
) -> ProcessSample {
    let cpu_seconds = threads.iter().map(|t| t.cpu_seconds).sum();
    ProcessSample {
        id: ProcessId {
            pid,
            start_ticks: u64::from(pid) * 7,
        },
        ppid,
        comm: comm.to_owned(),
        state: 'S',
        start_time_seconds: 1_700_000_000.0,
        cpu_seconds,
        rss_bytes: 512 << 20,
        threads,
        io: Some(IoCounters {
            rchar: 1_000_000 * io_scale,
            wchar: 20_000 * io_scale,
            read_bytes: 4096 * io_scale,
            write_bytes: 8192 * io_scale,
        }),
    }
}

/// One job `tf` seconds into the run: CPU counters and I/O grow with time.
fn job(j: u32, tf: f64) -> JobSample {
    let leader_pid = pid(j, 0);
    let mut leader_threads = vec![thread(leader_pid, "python3".into(), 'R', 100.0 + tf * 0.9)];
    leader_threads.extend((1..LEADER_THREADS).map(|i| {
        let name = match i {
            1 => "pt_main_thread".to_owned(),
            2..=5 => format!("pt_autograd_{}", i - 2),
            _ => format!("python3-{i}"),
        };
        thread(
            leader_pid + i,
            name,
            'S',
            10.0 + f64::from(i) + tf * 0.01 * f64::from(i),
        )
    }));
    let leader = process(leader_pid, 1, "python3", leader_threads, tf as u64 + 1);
    let descendants = (1..=CHILDREN_PER_JOB)
        .map(|c| {
            let p = pid(j, c);
            process(
                p,
                leader_pid,
                "pt_data_worker",
                vec![thread(p, "pt_data_worker".into(), 'S', 5.0 + tf * 0.2)],
                tf as u64 + 1,
            )
        })
        .collect();
    JobSample {
        gpus: vec![j],
        leader,
        descendants,
        attribution: Attribution {
            container_id: Some(format!("{:064x}", 0xabcdef_u64 + u64::from(j))),
            systemd_unit: None,
            pod_uid: Some(format!("1b4e28ba-2fa1-11d2-883f-0016d3cca42{j}")),
            namespace: Some("ml".into()),
            pod: Some(format!("trainer-{j}")),
            container: Some("main".into()),
            ..Attribution::default()
        },
        rank: Default::default(),
        frameworks: Default::default(),
        stdout_bytes: Some(10_000 + tf as u64 * 100),
        stderr_bytes: Some(500),
        output_modified_seconds: Some(1_700_000_000.0 + tf),
        threads_carried: false,
    }
}

fn gpu(index: u32, tf: f64) -> GpuSample {
    GpuSample {
        index,
        uuid: format!("GPU-00000000-0000-0000-0000-00000000000{index}"),
        name: "NVIDIA H100 80GB HBM3".into(),
        pci_bus_id: format!("00000000:{:02X}:00.0", 0x17 + index),
        up: true,
        utilization_ratio: Some(0.5),
        memory_utilization_ratio: Some(0.2),
        memory_used_bytes: Some(70 << 30),
        memory_total_bytes: Some(80 << 30),
        temperature_celsius: Some(50.0),
        power_watts: Some(200.0),
        power_limit_watts: Some(700.0),
        energy_joules: Some(1_000.0 + tf * 200.0),
        sm_clock_hertz: Some(1.98e9),
        memory_clock_hertz: Some(2.619e9),
        clock_event_reasons: Some(0x1 | 0x4),
        pcie_transmit_bytes_per_second: Some(1.024e6),
        pcie_receive_bytes_per_second: Some(2.048e6),
        // The job's leader and its 8 children: 9 processes on every GPU.
        processes: (0..=CHILDREN_PER_JOB)
            .map(|c| GpuProcessSample {
                pid: pid(index, c),
                kind: GpuProcessKind::Compute,
                memory_bytes: Some((8 << 30) - u64::from(c) * (1 << 20)),
                sm_utilization_ratio: Some(0.4),
                memory_utilization_ratio: Some(0.1),
            })
            .collect(),
        gpm_supported: Some(true),
        gpm: Some(GpmReading {
            sm_active_ratio: Some(0.7),
            sm_occupancy_ratio: Some(0.35),
            tensor_active_ratio: Some(0.4),
            dram_active_ratio: Some(0.3),
            nvlink_transmit_bytes_per_second: Some(1e10),
            nvlink_receive_bytes_per_second: Some(1e10),
        }),
        ..GpuSample::default()
    }
}

/// The whole sample `tf` seconds into the run.
fn sample(tf: f64) -> Sample {
    let cpu = |busy: f64| CpuTimes {
        busy_seconds: busy + tf * 0.5,
        total_seconds: 2.0 * busy + tf,
        steal_seconds: Some(0.0),
    };
    Sample {
        timestamp_seconds: 1_700_000_000.0 + tf,
        duration_seconds: 0.002,
        gpu: GpuReadout {
            nvml_up: true,
            stale: false,
            read_at_seconds: 1_700_000_000.0 + tf,
            read_duration_seconds: 0.001,
            driver_version: Some("550.54.15".into()),
            gpus: (0..GPUS).map(|g| gpu(g, tf)).collect(),
        },
        jobs: (0..GPUS).map(|j| job(j, tf)).collect(),
        kernel_log: Default::default(),
        kubernetes: None,
        thread_reads: Default::default(),
        host: HostSample {
            cpu: Some(cpu(1000.0)),
            cores: (0..CORES).map(|c| cpu(500.0 + c as f64)).collect(),
            online_cpus: Some(CORES as u32),
            pressure: Pressure {
                cpu_some: Some(0.01),
                cpu_full: Some(0.0),
                io_some: Some(0.02),
                io_full: Some(0.01),
                memory_some: Some(0.0),
                memory_full: Some(0.0),
            },
            memory: Some(HostMemory {
                total_bytes: 24 << 30,
                available_bytes: 20 << 30,
                swap_total_bytes: 0,
                swap_free_bytes: 0,
            }),
        },
        errors: ErrorCounts::default(),
    }
}

/// Feeds samples `interval` seconds apart through the steps the sampling
/// thread takes (derive, frame, diagnosis) until the diagnosis history is
/// full; returns the last sample, its snapshot and the engine.
fn history(interval: f64) -> (Sample, Snapshot, Engine) {
    let mut engine = Engine::new(DiagnosisConfig::default());
    let mut prev: Option<(Sample, Snapshot)> = None;
    let steps = (HISTORY_SECONDS / interval) as u32;
    for i in 0..steps {
        let cur = sample(f64::from(i) * interval);
        let snap = derive(prev.as_ref().map(|(s, n)| (s, n)), &cur);
        engine.observe(&frame::from_snapshot(&snap));
        prev = Some((cur, snap));
    }
    let (s, n) = prev.expect("a history");
    (s, n, engine)
}

/// Times the engine taking the next frames, `interval` seconds apart: the
/// last frame again, one interval later each time (the engine's state moves
/// on with every frame, so each iteration is a new sample to it).
fn time_diagnosis(warmup: usize, iterations: usize, interval: f64, label: &str) {
    let (_, snap, mut engine) = history(interval);
    let mut next = frame::from_snapshot(&snap);
    let stats = measure(warmup, iterations, || {
        next.t += interval;
        let events = engine.observe(black_box(&next));
        black_box((events, engine.status()));
    });
    report(label, &stats);
}

fn main() {
    // `cargo bench` passes `--bench`; a number sets the iteration count.
    let iterations = std::env::args()
        .skip(1)
        .find_map(|a| a.parse::<usize>().ok())
        .unwrap_or(5000);
    let warmup = (iterations / 10).max(100);

    // A history of samples one second apart (the default interval), as the
    // daemon would have taken them.
    let (s0, snap0, mut engine) = history(1.0);
    let s1 = sample(s0.timestamp_seconds - 1_700_000_000.0 + 1.0);
    let snap1: Arc<Snapshot> = Arc::new(derive(Some((&s0, &snap0)), &s1));
    let frame1 = frame::from_snapshot(&snap1);
    engine.observe(&frame1);
    let diagnosis: Arc<Vec<GpuStatus>> = Arc::new(engine.status());
    let cost = Arc::new(SampleCost {
        duration_seconds: s1.duration_seconds,
        ..Default::default()
    });
    let scrape = || Scrape {
        snapshot: snap1.clone(),
        cost: cost.clone(),
        diagnosis: diagnosis.clone(),
        max_processes: MAX_PROCESSES,
    };

    let processes: u32 = snap1.jobs.iter().map(|j| j.processes).sum();
    let threads: u32 = snap1.jobs.iter().map(|j| j.threads.total()).sum();
    let gpu_processes: usize = snap1.gpus.iter().map(|g| g.processes.len()).sum();
    assert_eq!(snap1.gpus.len(), 8);
    assert_eq!(snap1.jobs.len(), 8);
    assert!(snap1.jobs.iter().all(|j| j.processes == 9));
    assert!(
        snap1
            .jobs
            .iter()
            .all(|j| j.top_threads.len() == collector::delta::TOP_THREADS)
    );
    assert!(snap1.gpus.iter().all(|g| g.processes.len() == 9));
    assert_eq!(diagnosis.len(), 8);

    let open_metrics = render(scrape(), Format::OpenMetrics);
    let prometheus_text = render(scrape(), Format::PrometheusText);
    let series = open_metrics
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .count();

    println!(
        "shape: {} GPUs, {gpu_processes} GPU processes, {} jobs, {processes} job processes, \
         {threads} job threads; {HISTORY_SECONDS} s of history; \
         {iterations} timed iterations after {warmup} warm-up",
        snap1.gpus.len(),
        snap1.jobs.len(),
    );
    println!(
        "output: OpenMetrics {} bytes, {series} series; Prometheus text {} bytes",
        open_metrics.len(),
        prometheus_text.len()
    );

    let stats = measure(warmup, iterations, || {
        black_box(render(black_box(scrape()), Format::OpenMetrics));
    });
    report("render (OpenMetrics)", &stats);

    let stats = measure(warmup, iterations, || {
        black_box(render(black_box(scrape()), Format::PrometheusText));
    });
    report("render (Prometheus text)", &stats);

    // What one gzip scrape of a new sample costs the server: the body
    // rendered and gzipped as `/metrics` makes it (two snapshots in turn, so
    // that every call is a new sample's first scrape; the diagnosis stays the
    // same, so the stall series are reused as they are on a host where no
    // episode starts or runs).
    let bodies = MetricsBodies::default();
    let other: Arc<Snapshot> = Arc::new((*snap1).clone());
    let mut flip = false;
    let gzipped = bodies.body(scrape(), Format::OpenMetrics, true).len();
    let stats = measure(warmup, iterations, || {
        flip = !flip;
        let snapshot = if flip { &other } else { &snap1 }.clone();
        let s = Scrape {
            snapshot,
            ..scrape()
        };
        black_box(bodies.body(black_box(s), Format::OpenMetrics, true));
    });
    report(&format!("render + gzip ({gzipped} bytes)"), &stats);

    let stats = measure(warmup, iterations, || {
        let snap = derive(Some((black_box(&s0), black_box(&snap0))), black_box(&s1));
        black_box(snap);
    });
    report("delta::derive", &stats);

    let stats = measure(warmup, iterations, || {
        black_box(frame::from_snapshot(black_box(&snap1)));
    });
    report("frame::from_snapshot", &stats);

    time_diagnosis(warmup, iterations, 1.0, "diagnosis observe+status (1s)");
    time_diagnosis(warmup, iterations, 0.1, "diagnosis observe+status (100ms)");
}
