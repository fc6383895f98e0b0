//! Input-bound at a steady mid-range utilization (no idle samples).

mod script;

use diagnosis::{DiagnosisConfig, Kind, Verdict};
use script::*;

/// A steady utilization between 30% and 45%, never idle: a serial pipeline
/// whose steps are far shorter than NVML's averaging period.
fn steady_mid(t: f64) -> f64 {
    0.30 + 0.15 * f64::from((t as u32 * 7) % 10) / 10.0
}

#[test]
fn steady_mid_range_utilization_of_a_working_job_is_input_bound() {
    let mut run = Run::default();
    run.feed(0, 60, |t| frame(t, 0.95, vec![job(100, 1.0, 0.5)]));
    // Onset at 60 s: 30-45%, not one sample idle.
    run.feed(60, 400, |t| {
        frame(t, steady_mid(t), vec![job(100, 0.4, 0.25)])
    });
    let starts = run.starts(Kind::InputBound);
    assert_eq!(starts.len(), 1, "{:?}", run.events);
    assert!(
        starts[0] - 60.0 <= 180.0,
        "reported {}s after onset",
        starts[0] - 60.0
    );
    assert_eq!(run.kinds(), vec![Kind::InputBound]);
    assert_eq!(run.engine.status()[0].verdict, Verdict::Stalled);
    let ev = &run.events[0].evidence;
    assert_eq!(ev.idle_share, Some(0.0));
    assert!(ev.utilization_mean.unwrap() < 0.5);
    assert!(run.ends(Kind::InputBound).is_empty());
}

#[test]
fn steady_75_percent_is_healthy() {
    let mut run = Run::default();
    run.feed(0, 900, |t| {
        let util = 0.72 + 0.06 * f64::from((t as u32 * 3) % 5) / 4.0;
        frame(t, util, vec![job(100, 0.8, 0.4)])
    });
    assert!(run.events.is_empty(), "{:?}", run.kinds());
    assert_eq!(run.engine.status()[0].verdict, Verdict::Healthy);
}

#[test]
fn the_simulators_healthy_bursty_pattern_raises_nothing() {
    // As tests/workloads' healthy_bursty: ~99% busy, evaluation 20 s every
    // 90 s at ~67%, checkpoints 10 s every 150 s with the GPU idle.
    let mut run = Run::default();
    run.feed(0, 1800, |t| {
        let s = t as u32;
        let util = if s % 150 < 10 {
            0.0
        } else if s % 90 < 20 {
            0.67
        } else {
            0.99
        };
        frame(t, util, vec![job(100, 1.2, 0.3)])
    });
    assert!(run.events.is_empty(), "{:?}", run.kinds());
}

#[test]
fn input_bound_ends_after_recovery_and_not_in_between() {
    let mut run = Run::default();
    run.feed(0, 300, |t| {
        frame(t, steady_mid(t), vec![job(100, 0.4, 0.25)])
    });
    assert_eq!(run.starts(Kind::InputBound).len(), 1);
    // Between the thresholds (55%): still input-bound, no flapping.
    run.feed(300, 600, |t| frame(t, 0.55, vec![job(100, 0.5, 0.3)]));
    assert!(run.ends(Kind::InputBound).is_empty(), "{:?}", run.events);
    // Recovered (90%): one end, after the exit time.
    run.feed(600, 800, |t| frame(t, 0.9, vec![job(100, 1.0, 0.4)]));
    let ends = run.ends(Kind::InputBound);
    assert_eq!(ends.len(), 1, "{:?}", run.events);
    assert!(
        ends[0] >= 600.0 + 30.0 && ends[0] <= 600.0 + 120.0,
        "ended at {}",
        ends[0]
    );
    assert_eq!(run.starts(Kind::InputBound).len(), 1);
    assert_eq!(run.engine.status()[0].verdict, Verdict::Healthy);
}

#[test]
fn the_idle_share_is_still_required_where_configured() {
    let mut config = DiagnosisConfig::default();
    config.input_bound.min_idle_share = 0.2;
    config.input_bound.exit_idle_share = 0.1;
    let mut run = Run::new(config);
    run.feed(0, 400, |t| {
        frame(t, steady_mid(t), vec![job(100, 0.4, 0.25)])
    });
    assert!(run.events.is_empty(), "{:?}", run.kinds());
}

#[test]
fn a_short_check_sees_a_steady_mid_range_gpu_as_input_bound() {
    let config = DiagnosisConfig::default().fitted_to(30.0);
    let mut run = Run::new(config);
    run.feed(0, 30, |t| {
        frame(t, steady_mid(t), vec![job(100, 0.4, 0.25)])
    });
    assert_eq!(run.kinds(), vec![Kind::InputBound]);
}
