//! Lost GPU time by the place in the job's code that lost it: every lost
//! second of the ledger goes to the place the episode's stacks name, or to
//! why none is named, the seconds re-booked before a finding included.

mod script;

use diagnosis::ledger::{TimeState, Unplaced};
use diagnosis::stack_report::{
    Burst, CodeFrame, Focus, ReadOutcome, ThreadRead, aggregate, unavailable,
};
use script::{Run, frame, job};

fn code(function: &str, file: &str, line: u32, library: bool) -> CodeFrame {
    CodeFrame {
        function: function.into(),
        file: file.into(),
        line,
        library,
    }
}

/// A worker thread inside `json.loads`, called from a shared helper's
/// `load_record` (`records.py:17`), for every read of a 10 s burst.
fn slow_helper(t: f64) -> diagnosis::stack_report::StackReport {
    let frames = vec![
        code("loads", "json/__init__.py", 346, true),
        code("load_record", "/srv/company/records.py", 17, false),
        code("__getitem__", "dataset.py", 30, false),
    ];
    let read = ThreadRead {
        pid: 100,
        tid: 101,
        name: "pt_worker".into(),
        state: 'R',
        owns_gil: true,
        frames,
    };
    let reads = vec![vec![read]; 50];
    aggregate(
        &Burst {
            pid: 100,
            python_version: Some("3.11.7".into()),
            time: t,
            duration_seconds: 10.0,
            reads: &reads,
            times: &[],
            dropped: 0,
        },
        Focus::Busy,
    )
}

fn starved(t: f64) -> diagnosis::Frame {
    frame(t, 0.0, vec![job(100, 1.0, 0.98)])
}

fn fed(t: f64) -> diagnosis::Frame {
    frame(t, 0.9, vec![job(100, 1.0, 0.5)])
}

/// Lost seconds of `state` on GPU 0: in the ledger, by place, unplaced by
/// reason, and waiting for stacks.
fn lost(run: &Run, state: TimeState) -> (f64, f64, Vec<(Unplaced, f64)>, f64) {
    let s = &run.engine.status()[0];
    let placed = s
        .lost_by_place
        .iter()
        .filter(|p| p.state == state)
        .map(|p| p.seconds)
        .sum();
    let unplaced = s
        .lost_unplaced
        .iter()
        .filter(|u| u.state == state)
        .map(|u| (u.reason, u.seconds))
        .collect();
    (
        s.time.seconds(state),
        placed,
        unplaced,
        s.lost_pending_seconds,
    )
}

#[test]
fn a_starved_gpu_s_lost_seconds_go_to_the_line_its_stacks_name() {
    let mut run = Run::default();
    run.feed(0, 200, starved);
    // The finding re-booked its idle run to input: it waits for the stacks.
    let (input, placed, unplaced, pending) = lost(&run, TimeState::Input);
    assert!(input > 100.0, "{input}");
    assert_eq!(placed, 0.0);
    assert!(unplaced.is_empty(), "{unplaced:?}");
    assert!((pending - input).abs() < 1e-6, "{pending} of {input}");

    run.engine.attach_stacks(0, "GPU-0", slow_helper(200.0));
    run.feed(200, 400, starved);
    run.feed(400, 600, fed);
    let (input, placed, unplaced, pending) = lost(&run, TimeState::Input);
    assert!(input > 300.0, "{input}");
    assert!(
        (placed - input).abs() < 1e-6,
        "{placed} of {input}: {unplaced:?}"
    );
    assert_eq!(pending, 0.0);
    let s = &run.engine.status()[0];
    let place = &s.lost_by_place[0];
    assert_eq!(place.place.place, "load_record (records.py:17)");
    assert!(place.place.library.ends_with("loads"), "{:?}", place.place);
    // A thread pinned at a full core: the refinement names the kind.
    assert_eq!(place.kind, "single_thread_bound");
    assert!(
        s.lost_by_place
            .iter()
            .all(|p| p.place == place.place && p.call_seconds.is_none()),
        "{:?}",
        s.lost_by_place
    );
}

#[test]
fn an_episode_that_ends_unread_says_so() {
    let mut run = Run::default();
    run.feed(0, 200, starved);
    run.feed(200, 400, fed);
    let (input, placed, unplaced, pending) = lost(&run, TimeState::Input);
    assert!(input > 100.0, "{input}");
    assert_eq!(placed, 0.0);
    assert_eq!(pending, 0.0);
    assert_eq!(unplaced.len(), 1, "{unplaced:?}");
    assert_eq!(unplaced[0].0, Unplaced::NoRead);
    assert!((unplaced[0].1 - input).abs() < 1e-6);
}

#[test]
fn a_job_that_is_not_python_is_named_as_such() {
    let mut run = Run::default();
    run.feed(0, 200, starved);
    let report = unavailable(100, ReadOutcome::NotPython, "pid 100 is java".into(), 200.0);
    run.engine.attach_stacks(0, "GPU-0", report);
    run.feed(200, 300, starved);
    let (input, placed, unplaced, _) = lost(&run, TimeState::Input);
    assert_eq!(placed, 0.0);
    assert_eq!(unplaced, vec![(Unplaced::NotPython, input)]);
}
