//! Starved and input-bound GPUs, their refinements, warm-up and hysteresis.

mod script;

use diagnosis::{Kind, Verdict};
use script::*;

#[test]
fn starved_gpu_fires_once_within_three_minutes_and_ends_when_fed() {
    let mut run = Run::default();
    run.feed(0, 120, |t| frame(t, 0.9, vec![job(100, 1.2, 0.4)]));
    assert!(run.events.is_empty(), "healthy: {:?}", run.events);
    assert_eq!(run.engine.status()[0].verdict, Verdict::Healthy);
    // Onset at t=120: the GPU idles while the pipeline works.
    run.feed(120, 400, |t| frame(t, 0.01, vec![job(100, 0.6, 0.3)]));
    let starts = run.starts(Kind::InputStarved);
    assert_eq!(starts.len(), 1, "{:?}", run.events);
    assert!(
        starts[0] - 120.0 <= 180.0,
        "reported {}s after onset",
        starts[0] - 120.0
    );
    assert_eq!(run.kinds(), vec![Kind::InputStarved]);
    let status = &run.engine.status()[0];
    assert_eq!(status.verdict, Verdict::Stalled);
    let active = &status.active[0];
    assert!(active.evidence.utilization_mean.unwrap() < 0.1);
    assert!(active.evidence.idle_share.unwrap() >= 0.8);
    assert!(active.hint.contains("prefetch"));
    let event = &run.events[0];
    assert_eq!(event.job.as_ref().unwrap().pid, 100);
    assert!(event.since >= 120.0 && event.since < event.time);
    // Fed again: one end event after the exit time.
    run.feed(400, 500, |t| frame(t, 0.9, vec![job(100, 1.2, 0.4)]));
    assert_eq!(run.ends(Kind::InputStarved).len(), 1);
    assert_eq!(run.engine.status()[0].verdict, Verdict::Healthy);
    let counters = &run.engine.status()[0].kinds[&Kind::InputStarved];
    assert_eq!(counters.events_total, 1);
    assert!(counters.seconds_total > 100.0);
}

#[test]
fn a_batch_every_few_seconds_on_an_idle_gpu_is_starved_not_input_bound() {
    let mut run = Run::default();
    run.feed(0, 120, |t| frame(t, 0.9, vec![job(100, 1.2, 0.4)]));
    // A batch every 3 s: NVML spreads its short burst over a one-second
    // reading, so one sample in three reads 12% (mean 4%, idle share 0.67).
    run.feed(120, 400, |t| {
        let u = if (t as u32).is_multiple_of(3) {
            0.12
        } else {
            0.0
        };
        frame(t, u, vec![job(100, 1.0, 0.5)])
    });
    // Within three minutes of the onset, once, and never as input_bound.
    let (starved, bound) = (run.starts(Kind::InputStarved), run.starts(Kind::InputBound));
    assert!(matches!(starved[..], [t] if t <= 300.0), "{:?}", run.events);
    assert!(bound.is_empty(), "{:?}", run.events);
    let ev = &run.engine.status()[0].active[0].evidence;
    assert!(ev.idle_share.unwrap() < 0.8);
}

#[test]
fn idle_job_that_uses_no_cpu_is_not_starved() {
    let mut run = Run::default();
    run.feed(0, 400, |t| frame(t, 0.0, vec![job(100, 0.0, 0.0)]));
    assert!(run.starts(Kind::InputStarved).is_empty());
}

#[test]
fn warm_up_holds_stalls_back_from_the_jobs_own_start() {
    let mut run = Run::default();
    let young = |t: f64| {
        let mut j = job(100, 0.6, 0.3);
        j.start_time = 0.0;
        frame(t, 0.0, vec![j])
    };
    run.feed(0, 119, young);
    assert!(run.events.is_empty());
    assert_eq!(run.engine.status()[0].verdict, Verdict::WarmingUp);
    run.feed(119, 400, young);
    let starts = run.starts(Kind::InputStarved);
    assert_eq!(starts.len(), 1);
    assert!(starts[0] >= 120.0 + 60.0, "fired at {}", starts[0]);
    assert!(starts[0] <= 120.0 + 180.0);
}

#[test]
fn a_job_already_running_when_the_daemon_starts_is_not_warming_up() {
    let mut run = Run::default();
    run.feed(0, 200, |t| frame(t, 0.0, vec![job(100, 0.6, 0.3)]));
    let starts = run.starts(Kind::InputStarved);
    assert_eq!(starts.len(), 1);
    assert!(starts[0] <= 100.0, "fired at {}", starts[0]);
}

#[test]
fn swinging_utilization_with_a_low_mean_is_input_bound() {
    let mut run = Run::default();
    run.feed(0, 60, |t| frame(t, 0.9, vec![job(100, 1.0, 0.5)]));
    // Onset: utilization swings between 0 and 60%.
    run.feed(60, 400, |t| {
        frame(
            t,
            if (t as u32).is_multiple_of(2) {
                0.0
            } else {
                0.6
            },
            vec![job(100, 1.0, 0.5)],
        )
    });
    let starts = run.starts(Kind::InputBound);
    assert_eq!(starts.len(), 1, "{:?}", run.events);
    assert!(starts[0] - 60.0 <= 180.0);
    assert_eq!(run.kinds(), vec![Kind::InputBound]);
    let ev = &run.events[0].evidence;
    assert!((ev.utilization_mean.unwrap() - 0.3).abs() < 0.05);
    assert!(ev.utilization_stddev.unwrap() > 0.25);
}

#[test]
fn healthy_bursty_with_eval_and_checkpoint_pauses_raises_nothing() {
    let mut run = Run::default();
    run.feed(0, 1800, |t| {
        let phase = (t as u32) % 300;
        let util = match phase {
            0..=14 => 0.0,    // checkpoint: GPU idle 15 s every 5 min
            100..=129 => 0.6, // evaluation: lighter load
            _ if (t as u32).is_multiple_of(7) => 0.3,
            _ => 0.95,
        };
        frame(t, util, vec![job(100, 1.5, 0.6)])
    });
    assert!(run.events.is_empty(), "{:?}", run.kinds());
}

#[test]
fn one_pinned_thread_on_a_starved_gpu_is_single_thread_bound() {
    let mut run = Run::default();
    run.feed(0, 300, |t| frame(t, 0.02, vec![job(100, 1.0, 0.99)]));
    assert_eq!(
        run.kinds(),
        vec![Kind::InputStarved, Kind::SingleThreadBound]
    );
    let single = run.first(Kind::SingleThreadBound);
    assert!(single.time <= 180.0);
    assert_eq!(single.evidence.top_threads[0].name, "py_map");
    assert!(single.hint.contains("`py_map`"), "{}", single.hint);
    assert!(single.hint.contains("GIL"));
    // The parent ends: the refinement ends with it, at the same time.
    run.feed(300, 400, |t| frame(t, 0.9, vec![job(100, 1.0, 0.3)]));
    assert_eq!(
        run.ends(Kind::SingleThreadBound),
        run.ends(Kind::InputStarved)
    );
}

#[test]
fn a_saturated_host_is_cpu_saturated_not_single_thread_bound() {
    let mut run = Run::default();
    run.feed(0, 300, |t| {
        let mut f = frame(t, 0.02, vec![job(100, 1.9, 0.99)]);
        f.host.cpu_utilization = Some(0.97);
        f.host.psi_cpu_some = Some(0.45);
        f
    });
    assert_eq!(run.kinds(), vec![Kind::InputStarved, Kind::CpuSaturated]);
    let ev = &run.first(Kind::CpuSaturated).evidence;
    assert_eq!(ev.host_cpus, Some(2));
    assert!(ev.psi_cpu_some.unwrap() > 0.4);
}

#[test]
fn a_busy_host_without_cpu_waits_is_not_saturated() {
    // One thread pinned on one of two cores, other work busy on the other:
    // the host reads 100% busy, but PSI shows nobody waiting for a CPU.
    let mut run = Run::default();
    run.feed(0, 300, |t| {
        let mut f = frame(t, 0.02, vec![job(100, 1.0, 0.99)]);
        f.host.cpu_utilization = Some(0.99);
        f.host.psi_cpu_some = Some(0.06);
        f
    });
    assert_eq!(
        run.kinds(),
        vec![Kind::InputStarved, Kind::SingleThreadBound]
    );
}

#[test]
fn without_psi_a_busy_host_is_saturated() {
    let mut run = Run::default();
    run.feed(0, 300, |t| {
        let mut f = frame(t, 0.02, vec![job(100, 1.9, 0.99)]);
        f.host.cpu_utilization = Some(0.97);
        f.host.psi_cpu_some = None;
        f
    });
    assert_eq!(run.kinds(), vec![Kind::InputStarved, Kind::CpuSaturated]);
}

#[test]
fn threads_in_disk_sleep_on_a_starved_gpu_are_io_bound() {
    let mut run = Run::default();
    run.feed(0, 300, |t| {
        let mut j = job(100, 0.2, 0.1);
        j.threads_disk_sleep = if (t as u32).is_multiple_of(2) { 2 } else { 0 };
        let mut f = frame(t, 0.03, vec![j]);
        f.host.psi_io_some = Some(0.1);
        f
    });
    assert_eq!(run.kinds(), vec![Kind::InputStarved, Kind::IoBound]);
    let ev = &run.first(Kind::IoBound).evidence;
    assert!((ev.disk_sleep_share.unwrap() - 0.5).abs() < 0.05);
}

#[test]
fn refinements_never_fire_without_a_starved_or_bound_gpu() {
    let mut run = Run::default();
    run.feed(0, 400, |t| {
        let mut j = job(100, 2.0, 1.0);
        j.threads_disk_sleep = 3;
        let mut f = frame(t, 0.9, vec![j]);
        f.host.cpu_utilization = Some(0.99);
        f.host.psi_io_some = Some(0.5);
        f
    });
    assert!(run.events.is_empty(), "{:?}", run.kinds());
}

#[test]
fn utilization_hovering_at_the_threshold_gives_one_episode() {
    let mut run = Run::default();
    run.feed(0, 200, |t| frame(t, 0.0, vec![job(100, 0.5, 0.2)]));
    // Around the exit threshold: short bursts above it, never 30 s in a row.
    run.feed(200, 800, |t| {
        let util = if (t as u32) % 40 < 15 { 0.5 } else { 0.0 };
        frame(t, util, vec![job(100, 0.5, 0.2)])
    });
    assert_eq!(run.starts(Kind::InputStarved).len(), 1, "{:?}", run.events);
    assert!(run.ends(Kind::InputStarved).len() <= 1);
}

#[test]
fn a_disabled_kind_never_fires() {
    let mut config = diagnosis::DiagnosisConfig::default();
    config.input_starved.enabled = false;
    let mut run = Run::new(config);
    run.feed(0, 400, |t| frame(t, 0.0, vec![job(100, 0.6, 0.3)]));
    assert!(run.starts(Kind::InputStarved).is_empty());
}

#[test]
fn time_scale_shortens_every_window() {
    let config = diagnosis::DiagnosisConfig {
        time_scale: 0.1,
        ..Default::default()
    };
    let mut run = Run::new(config);
    run.feed(0, 30, |t| frame(t, 0.0, vec![job(100, 0.6, 0.3)]));
    let starts = run.starts(Kind::InputStarved);
    assert_eq!(starts.len(), 1);
    assert!(starts[0] <= 10.0, "fired at {}", starts[0]);
}

#[test]
fn a_pipeline_blocked_on_storage_uses_no_cpu_but_starves_the_gpu() {
    let mut run = Run::default();
    run.feed(0, 300, |t| {
        let mut j = job(100, 0.01, 0.01);
        j.threads_disk_sleep = 4;
        frame(t, 0.02, vec![j])
    });
    assert_eq!(run.kinds(), vec![Kind::InputStarved, Kind::IoBound]);
}
