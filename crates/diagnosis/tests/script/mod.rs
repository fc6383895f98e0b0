//! Helpers to drive the engine with scripted sequences of frames.
#![allow(dead_code)]

use diagnosis::frame::{Frame, GpuFrame, HostFrame, JobFrame, ProcessFrame, ThreadFrame};
use diagnosis::{DiagnosisConfig, Engine, Event, Kind, Phase};

pub const GIB: u64 = 1 << 30;

/// A fresh GPU 0 with the given utilization, 80 GiB, 40 GiB used.
pub fn gpu(util: f64) -> GpuFrame {
    GpuFrame {
        index: 0,
        uuid: "GPU-0".into(),
        fresh: true,
        utilization: Some(util),
        memory_used_bytes: Some(40 * GIB),
        memory_total_bytes: Some(80 * GIB),
        power_watts: Some(100.0 + 500.0 * util),
        power_limit_watts: Some(700.0),
        clock_events: 0,
        temperature_celsius: Some(60.0),
        processes: vec![],
        ..GpuFrame::default()
    }
}

pub fn holding(mut g: GpuFrame, pid: u32, memory: u64, sm: f64) -> GpuFrame {
    g.processes.push(ProcessFrame {
        pid,
        memory_bytes: Some(memory),
        sm_utilization: Some(sm),
        mps: false,
    });
    g
}

/// A job started long before the daemon (not warming up).
pub fn job(pid: u32, cpu: f64, top_thread: f64) -> JobFrame {
    JobFrame {
        pid,
        comm: "python3".into(),
        state: 'S',
        ppid: 4000,
        start_time: -10_000.0,
        gpus: vec![0],
        attribution: Default::default(),
        run: None,
        run_unknown: None,
        processes: 3,
        cpu_cores: Some(cpu),
        top_threads: vec![ThreadFrame {
            pid,
            tid: pid + 1,
            name: "py_map".into(),
            state: 'R',
            cpu: top_thread,
            wait: None,
        }],
        threads_read_at: None,
        top_processes: vec![],
        threads_total: 20,
        threads_running: 2,
        threads_disk_sleep: 0,
        read_bytes_per_second: Some(1e6),
        rss_bytes: 4 * GIB,
        last_output: None,
        output_unknown: false,
        framework: Default::default(),
    }
}

pub fn host() -> HostFrame {
    HostFrame {
        cpu_utilization: Some(0.5),
        busiest_core: Some(1.0),
        cpu_steal: Some(0.0),
        cpus: Some(2),
        psi_cpu_some: Some(0.02),
        psi_io_some: Some(0.0),
        psi_memory_some: Some(0.0),
        memory_total_bytes: Some(64 * GIB),
        memory_available_bytes: Some(40 * GIB),
        swap_used_bytes: Some(0),
    }
}

/// One frame: GPU 0 held by `jobs`, each holding 8 GiB at the GPU's SM share.
pub fn frame(t: f64, util: f64, jobs: Vec<JobFrame>) -> Frame {
    let mut g = gpu(util);
    for j in &jobs {
        g = holding(g, j.pid, 8 * GIB, util);
    }
    Frame {
        t,
        gpus: vec![g],
        jobs,
        host: host(),
    }
}

pub struct Run {
    pub engine: Engine,
    pub events: Vec<Event>,
}

impl Run {
    pub fn new(config: DiagnosisConfig) -> Run {
        Run {
            engine: Engine::new(config),
            events: Vec::new(),
        }
    }

    pub fn default() -> Run {
        Run::new(DiagnosisConfig::default())
    }

    /// Feeds frames at 1 Hz for t in [from, to).
    pub fn feed(&mut self, from: u32, to: u32, f: impl Fn(f64) -> Frame) -> &mut Self {
        for t in from..to {
            let events = self.engine.observe(&f(f64::from(t)));
            self.events.extend(events);
        }
        self
    }

    pub fn starts(&self, kind: Kind) -> Vec<f64> {
        self.events
            .iter()
            .filter(|e| e.kind == kind && e.phase == Phase::Start)
            .map(|e| e.time)
            .collect()
    }

    /// The first event of `kind` (its start).
    pub fn first(&self, kind: Kind) -> &Event {
        self.events
            .iter()
            .find(|e| e.kind == kind)
            .unwrap_or_else(|| panic!("no {kind:?} event in {:?}", self.kinds()))
    }

    pub fn ends(&self, kind: Kind) -> Vec<f64> {
        self.events
            .iter()
            .filter(|e| e.kind == kind && e.phase == Phase::End)
            .map(|e| e.time)
            .collect()
    }

    /// Kinds that started at least once.
    pub fn kinds(&self) -> Vec<Kind> {
        let mut kinds: Vec<Kind> = self
            .events
            .iter()
            .filter(|e| e.phase == Phase::Start)
            .map(|e| e.kind)
            .collect();
        kinds.sort();
        kinds.dedup();
        kinds
    }

    pub fn active(&self) -> Vec<Kind> {
        self.engine.status()[0]
            .active
            .iter()
            .map(|a| a.kind)
            .collect()
    }
}
