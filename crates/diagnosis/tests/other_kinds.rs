//! No-progress, memory, process and throttle kinds, verdicts and the event ring.

mod script;

use diagnosis::frame::Frame;
use diagnosis::framework::Framework;
use diagnosis::{DiagnosisConfig, Kind, Phase, Verdict};
use script::*;

/// A job that printed every 10 s until `stop`, then went silent.
fn logging_until(pid: u32, cpu: f64, t: f64, stop: f64) -> diagnosis::frame::JobFrame {
    let mut j = job(pid, cpu, cpu.min(1.0));
    j.last_output = Some((t.min(stop) / 10.0).floor() * 10.0);
    j
}

#[test]
fn busy_gpu_without_progress_at_low_power_is_a_hang() {
    let mut run = Run::default();
    // Healthy: busy at high power, logging every 10 s (baseline ~595 W).
    run.feed(0, 600, |t| {
        frame(t, 0.99, vec![logging_until(100, 1.0, t, 600.0)])
    });
    assert!(run.events.is_empty());
    // Onset at 600: a stuck collective spins at 100% and 150 W, no output.
    run.feed(600, 1400, |t| {
        let mut f = frame(t, 1.0, vec![logging_until(100, 1.0, t, 600.0)]);
        f.gpus[0].power_watts = Some(150.0);
        f
    });
    let starts = run.starts(Kind::BusyNoProgress);
    assert_eq!(starts.len(), 1, "{:?}", run.kinds());
    // Hang time: 5 x 10 s interval, clamped to the 10 min minimum.
    assert!(
        starts[0] >= 600.0 + 600.0 && starts[0] <= 600.0 + 600.0 + 60.0,
        "at {}",
        starts[0]
    );
    // Without GPM, `spinning` reads the same low power against the baseline
    // and reports it within 3 minutes, long before the hang time.
    assert_eq!(run.kinds(), vec![Kind::BusyNoProgress, Kind::Spinning]);
    let spinning = run.starts(Kind::Spinning);
    assert!(
        spinning[0] > 600.0 && spinning[0] <= 780.0,
        "at {}",
        spinning[0]
    );
    let hang = run.first(Kind::BusyNoProgress);
    let ev = &hang.evidence;
    assert!(ev.power_baseline_watts.unwrap() > 550.0);
    assert_eq!(ev.hang_seconds, Some(600.0));
    assert!(hang.hint.contains("NCCL"));
    // Output resumes: it ends.
    run.feed(1400, 1420, |t| {
        frame(t, 0.99, vec![logging_until(100, 1.0, t, 2000.0)])
    });
    assert_eq!(run.ends(Kind::BusyNoProgress).len(), 1);
}

#[test]
fn busy_and_silent_at_full_power_is_not_a_hang() {
    let mut run = Run::default();
    run.feed(0, 2000, |t| {
        frame(t, 1.0, vec![logging_until(100, 1.0, t, 100.0)])
    });
    assert!(
        run.starts(Kind::BusyNoProgress).is_empty(),
        "{:?}",
        run.kinds()
    );
}

#[test]
fn idle_gpu_idle_job_and_no_output_is_a_deadlock() {
    let mut run = Run::default();
    run.feed(0, 300, |t| {
        frame(t, 0.95, vec![logging_until(100, 1.0, t, 300.0)])
    });
    run.feed(300, 1100, |t| {
        let mut j = logging_until(100, 0.0, t, 300.0);
        j.threads_running = 0;
        j.top_threads[0].cpu = 0.0;
        frame(t, 0.0, vec![j])
    });
    let starts = run.starts(Kind::IdleNoProgress);
    assert_eq!(starts.len(), 1, "{:?}", run.kinds());
    assert!(starts[0] - 300.0 <= 600.0 + 60.0, "at {}", starts[0]);
    assert_eq!(run.kinds(), vec![Kind::IdleNoProgress]);
    assert!(run.events[0].evidence.silent_seconds.unwrap() >= 600.0);
    assert_eq!(run.engine.status()[0].verdict, Verdict::Stalled);
}

#[test]
fn a_job_whose_output_cannot_be_seen_is_never_called_hung() {
    // Run without the capabilities to read another user's io and fds: the
    // job looks silent forever, but that silence is unknown, not evidence.
    let mut run = Run::default();
    run.feed(0, 2000, |t| {
        let mut j = job(100, 0.0, 0.0);
        j.threads_running = 0;
        j.output_unknown = true;
        let mut f = frame(t, if t < 300.0 { 0.99 } else { 0.0 }, vec![j]);
        f.gpus[0].power_watts = Some(150.0);
        f
    });
    assert!(
        run.starts(Kind::IdleNoProgress).is_empty() && run.starts(Kind::BusyNoProgress).is_empty(),
        "{:?}",
        run.kinds()
    );
}

#[test]
fn hang_time_is_learned_from_the_output_rhythm() {
    let mut run = Run::default();
    // Output every 300 s: hang time 5 x 300 = 1500 s.
    let j = |t: f64, stop: f64| {
        let mut j = job(100, 0.0, 0.0);
        j.threads_running = 0;
        j.last_output = Some((t.min(stop) / 300.0).floor() * 300.0);
        j
    };
    run.feed(0, 1500, |t| frame(t, 0.0, vec![j(t, 1500.0)]));
    assert!(
        run.starts(Kind::IdleNoProgress).is_empty(),
        "fired with a long rhythm"
    );
    run.feed(1500, 3200, |t| frame(t, 0.0, vec![j(t, 1500.0)]));
    let starts = run.starts(Kind::IdleNoProgress);
    assert_eq!(starts.len(), 1);
    assert!(starts[0] >= 1500.0 + 1500.0, "at {}", starts[0]);
}

#[test]
fn host_memory_pressure_enters_and_leaves_with_hysteresis() {
    let mut run = Run::default();
    let with_available = |t: f64, gib: u64| {
        let mut f = frame(t, 0.9, vec![job(100, 1.0, 0.5)]);
        f.host.memory_available_bytes = Some(gib * GIB);
        f
    };
    run.feed(0, 100, |t| with_available(t, 3)); // 4.7% of 64 GiB
    assert_eq!(run.starts(Kind::HostMemoryPressure), vec![30.0]);
    // 12%: above the enter threshold but below the exit one: stays.
    run.feed(100, 200, |t| with_available(t, 8));
    assert!(run.ends(Kind::HostMemoryPressure).is_empty());
    run.feed(200, 300, |t| with_available(t, 20));
    assert_eq!(run.ends(Kind::HostMemoryPressure), vec![260.0]);
    let ev = &run.events[0].evidence;
    assert!(ev.memory_available_ratio.unwrap() < 0.1);
    assert_eq!(ev.job_rss_bytes, Some(4 * GIB));
    // Not a stall by itself.
    assert_eq!(run.engine.status()[0].verdict, Verdict::Healthy);
}

fn full_gpu_of(framework: Framework) -> Run {
    let mut run = Run::default();
    run.feed(0, 100, |t| {
        let mut j = job(100, 1.0, 0.5);
        j.framework.loaded = vec![framework];
        let mut f = frame(t, 0.9, vec![j]);
        f.gpus[0].memory_used_bytes = Some(79 * GIB + GIB / 2);
        f
    });
    run
}

#[test]
fn gpu_memory_full_is_reported_with_the_frameworks_own_allocator_hint() {
    let tf = full_gpu_of(Framework::Tensorflow);
    assert_eq!(tf.starts(Kind::GpuMemoryFull), vec![30.0]);
    let hint = &tf.events[0].hint;
    assert!(
        hint.contains("TF_FORCE_GPU_ALLOW_GROWTH") && !hint.contains("torch"),
        "{hint}"
    );
    let torch = full_gpu_of(Framework::Pytorch);
    let hint = &torch.events[0].hint;
    assert!(
        hint.contains("expandable_segments") && !hint.contains("TF_"),
        "{hint}"
    );
    let framework = torch.events[0].evidence.framework.as_ref().unwrap();
    assert_eq!(framework.name, Some(Framework::Pytorch));
}

#[test]
fn two_separate_jobs_on_one_gpu_share_it_but_a_child_does_not_count() {
    let mut run = Run::default();
    run.feed(0, 100, |t| {
        let mut child = job(101, 0.5, 0.5);
        child.ppid = 100;
        frame(t, 0.9, vec![job(100, 1.0, 0.5), child])
    });
    assert!(
        run.starts(Kind::SharedGpu).is_empty(),
        "a descendant is the same job"
    );
    run.feed(100, 300, |t| {
        frame(t, 0.9, vec![job(100, 1.0, 0.5), job(200, 1.0, 0.5)])
    });
    let starts = run.starts(Kind::SharedGpu);
    assert_eq!(starts, vec![130.0]);
    let ev = &run.first(Kind::SharedGpu);
    let pids: Vec<u32> = ev.evidence.processes.iter().map(|p| p.pid).collect();
    assert_eq!(pids, vec![100, 200]);
    assert!(ev.hint.contains("CUDNN_STATUS_INTERNAL_ERROR"));
    run.feed(300, 400, |t| frame(t, 0.9, vec![job(100, 1.0, 0.5)]));
    assert_eq!(run.ends(Kind::SharedGpu), vec![360.0]);
}

#[test]
fn mps_clients_on_one_gpu_do_not_share_it_but_a_process_beside_them_does() {
    let mut run = Run::default();
    let clients = |t: f64| {
        let mut f = frame(t, 0.9, vec![job(100, 1.0, 0.5), job(200, 1.0, 0.5)]);
        for p in &mut f.gpus[0].processes {
            p.mps = true;
        }
        f
    };
    run.feed(0, 200, clients);
    assert!(
        run.starts(Kind::SharedGpu).is_empty(),
        "MPS clients share the GPU by design"
    );
    // With the MPS server, which NVML may list as a compute process: still one context.
    let with_server = |t: f64| {
        let mut f = clients(t);
        let mut server = job(50, 0.1, 0.1);
        server.comm = "nvidia-cuda-mps".into();
        f.jobs.push(server);
        f.gpus[0] = holding(f.gpus[0].clone(), 50, GIB, 0.9);
        f
    };
    run.feed(200, 400, with_server);
    assert!(run.starts(Kind::SharedGpu).is_empty());
    // A process outside MPS beside them: a second context on the GPU.
    run.feed(400, 600, |t| {
        let mut f = with_server(t);
        f.jobs.push(job(300, 1.0, 0.5));
        f.gpus[0] = holding(f.gpus[0].clone(), 300, 4 * GIB, 0.3);
        f
    });
    assert_eq!(run.starts(Kind::SharedGpu), vec![430.0]);
    let pids: Vec<u32> = run
        .first(Kind::SharedGpu)
        .evidence
        .processes
        .iter()
        .map(|p| p.pid)
        .collect();
    assert_eq!(
        pids,
        vec![100, 300],
        "the MPS group once, by its first process"
    );
}

#[test]
fn a_process_left_holding_memory_after_its_parent_died_is_a_leftover() {
    let mut run = Run::default();
    let orphan = |t: f64| {
        let mut j = job(300, 0.0, 0.0);
        j.ppid = 1;
        j.threads_running = 0;
        j.last_output = None;
        let mut f = frame(t, 0.0, vec![j]);
        f.gpus[0].processes[0].sm_utilization = Some(0.0);
        f
    };
    run.feed(0, 700, orphan);
    assert_eq!(run.kinds(), vec![Kind::LeftoverProcess]);
    let start = run.starts(Kind::LeftoverProcess)[0];
    assert!((600.0..=605.0).contains(&start), "at {start}");
    let p = &run.events[0].evidence.processes[0];
    assert_eq!((p.pid, p.state.as_str()), (300, "orphaned"));
    assert!(run.events[0].hint.contains("kill"));
    // The GPU holds no live job: the leftover is not one.
    assert_eq!(run.engine.status()[0].verdict, Verdict::NoJob);
    // Memory released.
    run.feed(700, 720, |t| Frame {
        t,
        gpus: vec![gpu(0.0)],
        jobs: vec![],
        host: host(),
    });
    assert_eq!(run.ends(Kind::LeftoverProcess).len(), 1);
}

#[test]
fn an_orphan_nothing_says_is_idle_is_no_leftover() {
    // An orphan working on a MIG instance: NVML reports no per-process use
    // on an instance; an A100's instance has no activity reading at all, an
    // H100's has its SMs' (busy here).
    for gpm in [None, Some(0.7)] {
        let mut run = Run::default();
        run.feed(0, 700, |t| {
            let mut j = job(300, 1.0, 0.9);
            j.ppid = 1;
            let mut f = frame(t, 0.0, vec![j]);
            let g = &mut f.gpus[0];
            (g.utilization, g.sm_active, g.mig) = (None, gpm, true);
            g.processes[0].sm_utilization = None;
            f
        });
        assert!(
            !run.kinds().contains(&Kind::LeftoverProcess),
            "{gpm:?}: {:?}",
            run.kinds()
        );
    }
    // On an H100 instance whose SMs idle, it is one.
    let mut run = Run::default();
    run.feed(0, 700, |t| {
        let mut j = job(300, 0.0, 0.0);
        j.ppid = 1;
        j.threads_running = 0;
        let mut f = frame(t, 0.0, vec![j]);
        let g = &mut f.gpus[0];
        (g.utilization, g.sm_active, g.mig) = (None, Some(0.0), true);
        g.processes[0].sm_utilization = None;
        f
    });
    assert!(run.kinds().contains(&Kind::LeftoverProcess));
}

#[test]
fn a_pid_gone_from_proc_but_holding_memory_is_a_leftover() {
    let mut run = Run::default();
    run.feed(0, 700, |t| Frame {
        t,
        gpus: vec![holding(gpu(0.0), 999, 2 * GIB, 0.0)],
        jobs: vec![],
        host: host(),
    });
    assert_eq!(run.kinds(), vec![Kind::LeftoverProcess]);
    assert_eq!(run.events[0].evidence.processes[0].state, "gone");
}

#[test]
fn throttling_while_busy_is_reported() {
    let mut run = Run::default();
    run.feed(0, 120, |t| {
        let mut f = frame(t, 0.95, vec![job(100, 1.0, 0.5)]);
        f.gpus[0].clock_events = if t >= 30.0 { 0x40 } else { 0 };
        f
    });
    let starts = run.starts(Kind::Throttled);
    assert_eq!(starts.len(), 1);
    assert_eq!(
        run.events[0].evidence.clock_event_reasons,
        vec!["hw_thermal_slowdown"]
    );
    assert_eq!(
        run.engine.status()[0].verdict,
        Verdict::Healthy,
        "context, not a stall"
    );
}

#[test]
fn verdicts_cover_no_job_unknown_and_counters_add_up() {
    let mut run = Run::default();
    run.feed(0, 10, |t| Frame {
        t,
        gpus: vec![gpu(0.0)],
        jobs: vec![],
        host: host(),
    });
    assert_eq!(run.engine.status()[0].verdict, Verdict::NoJob);
    assert_eq!(run.engine.status()[0].job_idle_seconds_total, 0.0);
    run.feed(10, 20, |t| frame(t, 0.0, vec![job(100, 0.5, 0.2)]));
    assert_eq!(
        run.engine.status()[0].job_idle_seconds_total,
        10.0,
        "one second per idle sample"
    );
    run.feed(20, 25, |t| {
        let mut f = frame(t, 0.0, vec![job(100, 0.5, 0.2)]);
        f.gpus[0].fresh = false;
        f
    });
    assert_eq!(run.engine.status()[0].verdict, Verdict::Unknown);
    assert_eq!(run.engine.status()[0].kinds.len(), Kind::ALL.len());
}

#[test]
fn the_event_ring_is_bounded_and_events_have_increasing_ids() {
    let config = DiagnosisConfig {
        events_capacity: 3,
        ..DiagnosisConfig::default()
    };
    let mut run = Run::new(config);
    for round in 0..4u32 {
        let base = round * 200;
        run.feed(base, base + 100, |t| {
            let mut f = frame(t, 0.9, vec![job(100, 1.0, 0.5)]);
            f.host.memory_available_bytes = Some(GIB);
            f
        });
        run.feed(base + 100, base + 200, |t| {
            frame(t, 0.9, vec![job(100, 1.0, 0.5)])
        });
    }
    assert_eq!(run.events.len(), 8);
    let kept = run.engine.events(0.0, 0, 100);
    assert_eq!(kept.len(), 3);
    assert_eq!(kept.iter().map(|e| e.id).collect::<Vec<_>>(), vec![6, 7, 8]);
    assert_eq!(kept.last().unwrap().phase, Phase::End);
    assert_eq!(run.engine.events(0.0, 7, 100).len(), 1);
    assert_eq!(run.engine.events(0.0, 0, 2).len(), 2);
}

#[test]
fn frames_round_trip_through_json_lines() {
    let f = frame(12.5, 0.3, vec![job(100, 1.0, 0.5)]);
    let line = serde_json::to_string(&f).unwrap();
    assert!(!line.contains('\n'));
    let back: Frame = serde_json::from_str(&line).unwrap();
    assert_eq!(back, f);
}

#[test]
fn a_config_fitted_to_a_short_check_fires_within_it() {
    let config = DiagnosisConfig::default().fitted_to(30.0);
    assert_eq!(
        config.warmup,
        DiagnosisConfig::default().warmup,
        "warm-up is the job's age"
    );
    let mut run = Run::new(config);
    run.feed(0, 30, |t| frame(t, 0.0, vec![job(100, 0.6, 0.99)]));
    assert_eq!(
        run.kinds(),
        vec![Kind::InputStarved, Kind::SingleThreadBound]
    );
}

#[test]
fn silence_known_at_first_sight_counts_toward_the_hang_time() {
    let config = DiagnosisConfig::default().fitted_to(30.0);
    let mut run = Run::new(config);
    run.feed(1000, 1030, |t| {
        let mut j = job(100, 0.0, 0.0);
        j.threads_running = 0;
        j.last_output = Some(100.0); // stdout last written 15 minutes ago
        frame(t, 0.0, vec![j])
    });
    assert_eq!(run.kinds(), vec![Kind::IdleNoProgress]);
}
