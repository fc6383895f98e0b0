//! `spinning` and `launch_bound` from GPM activity (and `spinning`'s power
//! fallback without it), and the rules reading GPM where utilization.gpu is
//! not reported (a MIG instance).

mod script;

use diagnosis::frame::{Frame, JobFrame};
use diagnosis::window::ActivitySignal;
use diagnosis::{Kind, Verdict};
use script::*;

/// A job that printed every 10 s until `stop`, then went silent.
fn logging_until(pid: u32, t: f64, stop: f64) -> JobFrame {
    let mut j = job(pid, 1.0, 1.0);
    j.last_output = Some((t.min(stop) / 10.0).floor() * 10.0);
    j
}

/// GPU 0 with GPM: SM, tensor and DRAM activity, NVLink and PCIe bytes/s.
fn with_gpm(mut f: Frame, sm: f64, tensor: f64, dram: f64, link: f64) -> Frame {
    let g = &mut f.gpus[0];
    g.sm_active = Some(sm);
    g.tensor_active = Some(tensor);
    g.dram_active = Some(dram);
    g.nvlink_bytes_per_second = Some(link);
    g.pcie_bytes_per_second = Some(link / 10.0);
    f
}

/// Training at full tilt: busy, SMs, tensor cores and links working, ~595 W.
fn training(t: f64, stop: f64) -> Frame {
    with_gpm(
        frame(t, 0.99, vec![logging_until(100, t, stop)]),
        0.8,
        0.5,
        0.3,
        1e10,
    )
}

/// A collective waiting for a rank: utilization 100%, a few SMs spinning,
/// nothing else moving, idle power.
fn spinning(t: f64, stop: f64) -> Frame {
    let wobble = if (t as u64).is_multiple_of(2) {
        0.001
    } else {
        -0.001
    };
    let mut f = with_gpm(
        frame(t, 1.0, vec![logging_until(100, t, stop)]),
        0.03 + wobble,
        0.0,
        0.001,
        0.0,
    );
    f.gpus[0].power_watts = Some(75.0);
    f
}

#[test]
fn a_spinning_kernel_is_reported_within_three_minutes_from_gpm() {
    let mut run = Run::default();
    run.feed(0, 600, |t| training(t, 600.0));
    assert!(run.events.is_empty(), "{:?}", run.kinds());
    run.feed(600, 800, |t| spinning(t, 600.0));
    let starts = run.starts(Kind::Spinning);
    assert_eq!(starts.len(), 1, "{:?}", run.kinds());
    assert!(starts[0] - 600.0 <= 180.0, "at {}", starts[0]);
    assert_eq!(run.kinds(), vec![Kind::Spinning], "before the hang time");
    assert_eq!(run.engine.status()[0].verdict, Verdict::Stalled);
    let event = run.first(Kind::Spinning);
    let ev = &event.evidence;
    assert_eq!(ev.activity_signal, Some(ActivitySignal::GpmSmActive));
    assert!((ev.sm_active_mean.unwrap() - 0.03).abs() < 0.01, "{ev:?}");
    assert_eq!(ev.tensor_active_mean, Some(0.0));
    assert_eq!(ev.nvlink_bytes_per_second, Some(0.0));
    assert!(
        event.hint.contains("NCCL") && event.hint.contains("SMs"),
        "{}",
        event.hint
    );
    // Work and output resume: it ends.
    run.feed(800, 830, |t| training(t, 2000.0));
    assert_eq!(run.ends(Kind::Spinning).len(), 1);
}

#[test]
fn busy_and_silent_with_the_sms_at_work_is_not_spinning() {
    // A long evaluation without output: busy, SMs and tensor cores working,
    // even at modest power.
    let mut run = Run::default();
    run.feed(0, 600, |t| training(t, 600.0));
    run.feed(600, 1000, |t| {
        let mut f = training(t, 600.0);
        f.gpus[0].power_watts = Some(200.0);
        f
    });
    assert!(run.starts(Kind::Spinning).is_empty(), "{:?}", run.kinds());
}

#[test]
fn without_gpm_spinning_falls_back_to_power_against_the_baseline() {
    let mut run = Run::default();
    run.feed(0, 600, |t| {
        frame(t, 0.99, vec![logging_until(100, t, 600.0)])
    });
    run.feed(600, 800, |t| {
        let mut f = frame(t, 1.0, vec![logging_until(100, t, 600.0)]);
        f.gpus[0].power_watts = Some(120.0);
        f
    });
    let starts = run.starts(Kind::Spinning);
    assert_eq!(starts.len(), 1, "{:?}", run.kinds());
    assert!(starts[0] - 600.0 <= 180.0, "at {}", starts[0]);
    let ev = &run.events[0].evidence;
    assert_eq!(ev.activity_signal, Some(ActivitySignal::PowerBaseline));
    assert!(ev.power_baseline_watts.unwrap() > 550.0);
    assert!(ev.sm_active_mean.is_none());
    assert!(
        run.events[0].hint.contains("power"),
        "{}",
        run.events[0].hint
    );
}

#[test]
fn without_gpm_a_job_that_ran_healthy_under_busy_above_still_has_a_baseline() {
    // Healthy at 72-89% (as `busy_hung` ran once on a loaded host), never at
    // `busy_above`: its working power is still the baseline.
    let mut run = Run::default();
    run.feed(0, 600, |t| {
        let util = [0.72, 0.8, 0.89][(t as usize) % 3];
        frame(t, util, vec![logging_until(100, t, 600.0)])
    });
    run.feed(600, 800, |t| {
        let mut f = frame(t, 1.0, vec![logging_until(100, t, 600.0)]);
        f.gpus[0].power_watts = Some(115.0);
        f
    });
    let starts = run.starts(Kind::Spinning);
    assert_eq!(starts.len(), 1, "{:?}", run.kinds());
    let ev = &run.first(Kind::Spinning).evidence;
    assert_eq!(ev.power_baseline_watts, Some(500.0));

    // Healthy at 60%: under `baseline_above`, no baseline is learned, and
    // without GPM spinning stays silent (busy_no_progress still fires later).
    let mut run = Run::default();
    run.feed(0, 600, |t| {
        frame(t, 0.6, vec![logging_until(100, t, 600.0)])
    });
    run.feed(600, 800, |t| {
        let mut f = frame(t, 1.0, vec![logging_until(100, t, 600.0)]);
        f.gpus[0].power_watts = Some(115.0);
        f
    });
    assert!(run.starts(Kind::Spinning).is_empty(), "{:?}", run.kinds());
}

#[test]
fn without_gpm_or_a_baseline_spinning_stays_silent() {
    // Low power from the first sample: no baseline was ever learned.
    let mut run = Run::default();
    run.feed(0, 800, |t| {
        let mut f = frame(t, 1.0, vec![logging_until(100, t, 0.0)]);
        f.gpus[0].power_watts = Some(120.0);
        f
    });
    assert!(run.starts(Kind::Spinning).is_empty(), "{:?}", run.kinds());
}

#[test]
fn busy_gpu_with_idle_sms_while_the_job_progresses_is_launch_bound() {
    let mut run = Run::default();
    run.feed(0, 600, |t| {
        with_gpm(
            frame(t, 1.0, vec![logging_until(100, t, 1e9)]),
            0.2,
            0.05,
            0.05,
            0.0,
        )
    });
    let starts = run.starts(Kind::LaunchBound);
    assert_eq!(starts.len(), 1, "{:?}", run.kinds());
    assert!(starts[0] <= 300.0 + 60.0 + 5.0, "at {}", starts[0]);
    assert_eq!(run.kinds(), vec![Kind::LaunchBound]);
    // A finding, not a stall.
    assert_eq!(run.engine.status()[0].verdict, Verdict::Healthy);
    let ev = &run.events[0].evidence;
    assert_eq!(ev.activity_signal, Some(ActivitySignal::GpmSmActive));
    assert_eq!(ev.sm_active_mean, Some(0.2));
    assert!(run.events[0].hint.contains("CUDA graphs"));
    // Bigger kernels: it ends.
    run.feed(600, 740, |t| training(t, 1e9));
    assert_eq!(run.ends(Kind::LaunchBound).len(), 1);
}

#[test]
fn well_fed_training_with_gpm_raises_nothing() {
    let mut run = Run::default();
    run.feed(0, 1200, |t| training(t, 1e9));
    assert!(run.events.is_empty(), "{:?}", run.kinds());
    assert_eq!(run.engine.status()[0].verdict, Verdict::Healthy);
}

#[test]
fn without_utilization_gpu_the_rules_read_gpm_and_say_so() {
    // A MIG instance: no utilization.gpu, SM activity only. The job works on
    // its input while the SMs sit idle: starved.
    let mut run = Run::default();
    run.feed(0, 200, |t| {
        let mut f = with_gpm(frame(t, 0.0, vec![job(100, 1.0, 0.5)]), 0.0, 0.0, 0.0, 0.0);
        f.gpus[0].utilization = None;
        f
    });
    let starts = run.starts(Kind::InputStarved);
    assert_eq!(starts.len(), 1, "{:?}", run.kinds());
    let ev = &run.events[0].evidence;
    assert_eq!(ev.activity_signal, Some(ActivitySignal::GpmSmActive));
    // With utilization.gpu reported, the evidence names it.
    let mut run = Run::default();
    run.feed(0, 200, |t| frame(t, 0.0, vec![job(100, 1.0, 0.5)]));
    let ev = &run.events[0].evidence;
    assert_eq!(ev.activity_signal, Some(ActivitySignal::UtilizationGpu));
}
