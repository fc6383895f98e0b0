//! The job's own phases: a compilation, a checkpoint, the DataLoader's
//! start-up idle the GPU; while one lasts a normal time the stall kinds it
//! explains hold back and its GPU-time is counted.

mod script;

use diagnosis::frame::Frame;
use diagnosis::phase::JobPhase;
use diagnosis::stack_report::{Burst, CodeFrame, Focus, StackReport, ThreadRead, aggregate};
use diagnosis::{DiagnosisConfig, Kind};
use script::*;

fn frame_at(function: &str, file: &str, library: bool) -> CodeFrame {
    CodeFrame {
        function: function.into(),
        file: file.into(),
        line: 1,
        library,
    }
}

fn compiling() -> Vec<CodeFrame> {
    vec![
        frame_at("GraphLowering.run", "torch/_inductor/graph.py", true),
        frame_at("compile_fx", "torch/_inductor/compile_fx.py", true),
        frame_at("_compile", "torch/_dynamo/convert_frame.py", true),
        frame_at("train", "train.py", false),
    ]
}

fn burst(t: f64, frames: Vec<CodeFrame>) -> StackReport {
    let reads: Vec<Vec<ThreadRead>> = (0..20)
        .map(|_| {
            vec![ThreadRead {
                pid: 100,
                tid: 100,
                name: "python3".into(),
                state: 'R',
                owns_gil: true,
                frames: frames.clone(),
            }]
        })
        .collect();
    aggregate(
        &Burst {
            pid: 100,
            python_version: None,
            time: t,
            duration_seconds: 1.0,
            reads: &reads,
            times: &[],
            dropped: 0,
        },
        Focus::AllThreads,
    )
}

/// The GPU idle while the job's main thread burns a core (what a compiling
/// job and a starved one both look like), logging every 10 s.
fn busy_main_thread(t: f64) -> Frame {
    let mut j = job(100, 1.0, 0.99);
    j.top_threads[0].tid = 100;
    j.last_output = Some((t / 10.0).floor() * 10.0);
    frame(t, 0.0, vec![j])
}

/// The job's main thread at 30% of a core, its GPU busy at `util`.
fn training(t: f64, util: f64) -> Frame {
    let mut j = job(100, 0.3, 0.3);
    j.top_threads[0].tid = 100;
    j.last_output = Some((t / 10.0).floor() * 10.0);
    frame(t, util, vec![j])
}

/// Feeds frames at 1 Hz, answering each short read with `frames(t)`.
fn feed(run: &mut Run, from: u32, to: u32, frames: impl Fn(f64) -> Vec<CodeFrame>) -> usize {
    feed_frames(run, from, to, busy_main_thread, frames)
}

/// Feeds `frame(t)` at 1 Hz, answering each short read with `frames(t)`.
fn feed_frames(
    run: &mut Run,
    from: u32,
    to: u32,
    frame: impl Fn(f64) -> Frame,
    frames: impl Fn(f64) -> Vec<CodeFrame>,
) -> usize {
    let mut reads = 0;
    for t in from..to {
        let t = f64::from(t);
        run.events.extend(run.engine.observe(&frame(t)));
        for (gpu, uuid, _) in run.engine.short_reads_due() {
            run.engine.short_read_asked(gpu, &uuid, t);
            run.engine
                .attach_short_read(gpu, &uuid, &burst(t, frames(t)));
            reads += 1;
        }
    }
    reads
}

#[test]
fn a_compilation_of_normal_length_raises_no_stall_and_is_counted() {
    let mut run = Run::default();
    let reads = feed(&mut run, 0, 400, |_| compiling());
    assert!(run.events.is_empty(), "{:?}", run.kinds());
    assert!(
        reads >= 3,
        "read while the stall kinds' conditions held: {reads}"
    );
    let status = &run.engine.status()[0];
    let phase = status.phase.as_ref().expect("a phase");
    assert_eq!((phase.phase, phase.unusual), (JobPhase::Compiling, false));
    let counted = status.phase_seconds_total[&JobPhase::Compiling];
    assert!(counted > 250.0 && counted <= 400.0, "{counted}");
}

#[test]
fn a_compilation_past_its_longest_is_reported_with_the_phase_named() {
    let mut run = Run::default();
    feed(&mut run, 0, 1000, |_| compiling());
    let starts = run.starts(Kind::InputStarved);
    assert_eq!(starts.len(), 1, "{:?}", run.kinds());
    // Its conditions held from about 60 s; the phase held it back until 10 min after
    // the first read showed it.
    assert!(starts[0] >= 600.0, "at {}", starts[0]);
    let event = run.first(Kind::InputStarved);
    let phase = event
        .evidence
        .phase
        .as_ref()
        .expect("the phase in the evidence");
    assert!(phase.unusual && phase.phase == JobPhase::Compiling);
    assert!(
        event.hint.starts_with("The job has been compiling for "),
        "{}",
        event.hint
    );
    assert!(event.hint.contains("mark_dynamic"), "{}", event.hint);
}

#[test]
fn a_starved_job_without_a_phase_is_reported_as_before() {
    let mut run = Run::default();
    let step = || vec![frame_at("decode", "train.py", false)];
    feed(&mut run, 0, 400, |_| step());
    assert!(
        !run.starts(Kind::InputStarved).is_empty(),
        "{:?}",
        run.kinds()
    );
    assert!(run.engine.status()[0].phase.is_none());
    assert!(run.first(Kind::InputStarved).evidence.phase.is_none());
}

#[test]
fn with_phases_off_a_compilation_is_a_stall() {
    let mut config = DiagnosisConfig::default();
    config.phases.enabled = false;
    config.hang_confirmation.enabled = false;
    let mut run = Run::new(config);
    let reads = feed(&mut run, 0, 400, |_| compiling());
    assert_eq!(reads, 0);
    assert!(
        !run.starts(Kind::InputStarved).is_empty(),
        "{:?}",
        run.kinds()
    );
}

#[test]
fn a_read_that_never_comes_back_delays_a_stall_by_seconds_only() {
    let starved_at = |phases: bool| {
        let mut config = DiagnosisConfig::default();
        config.phases.enabled = phases;
        config.hang_confirmation.enabled = false;
        let mut run = Run::new(config);
        for t in 0..400 {
            let t = f64::from(t);
            run.events.extend(run.engine.observe(&busy_main_thread(t)));
            for (gpu, uuid, _) in run.engine.short_reads_due() {
                run.engine.short_read_asked(gpu, &uuid, t); // asked, never answered
            }
        }
        run.starts(Kind::InputStarved)[0]
    };
    let (with, without) = (starved_at(true), starved_at(false));
    assert!(
        with >= without && with - without <= diagnosis::phase::AWAIT_SECONDS + 1.0,
        "{with} against {without}"
    );
}

/// Compiles for 200 s, then does `after` (its frames reading `step`).
fn compile_then(after: impl Fn(f64) -> Frame) -> Run {
    let mut run = Run::default();
    let step = || vec![frame_at("decode", "train.py", false)];
    feed_frames(
        &mut run,
        0,
        600,
        |t| {
            if t < 200.0 {
                busy_main_thread(t)
            } else {
                after(t)
            }
        },
        |t| if t < 200.0 { compiling() } else { step() },
    );
    run
}

#[test]
fn the_idle_time_of_a_phase_that_ended_is_not_a_stall() {
    // Training at 80% once the compilation ends: for a minute or two the kinds'
    // windows still hold the compilation's idle time (a 2-minute mean under half).
    let run = compile_then(|t| training(t, 0.8));
    assert!(run.events.is_empty(), "{:?}", run.kinds());
}

#[test]
fn a_stall_after_a_phase_is_named_once_its_window_is_clear_of_the_phase() {
    let run = compile_then(busy_main_thread);
    let starts = run.starts(Kind::InputStarved);
    assert_eq!(starts.len(), 1, "{:?}", run.kinds());
    // The phase ends at the first read that no longer shows it (one interval, 20 s,
    // after the compilation); then a clear window (1 min) and the enter time (20 s).
    assert!(starts[0] > 260.0 && starts[0] <= 310.0, "at {}", starts[0]);
    assert!(run.first(Kind::InputStarved).evidence.phase.is_none());
}
