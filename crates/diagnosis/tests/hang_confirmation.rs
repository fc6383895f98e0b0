//! Hangs confirmed by the job's stacks: a silent job whose GPU idles or
//! spins is read every `hang_confirmation.interval`, and the same stacks in
//! every read name the hang long before the hang time.

mod script;

use diagnosis::Kind;
use diagnosis::frame::{Frame, JobFrame};
use diagnosis::stack_report::{Burst, CodeFrame, Focus, StackReport, ThreadRead, aggregate};
use script::*;

fn frame_at(function: &str, file: &str, line: u32, library: bool) -> CodeFrame {
    CodeFrame {
        function: function.into(),
        file: file.into(),
        line,
        library,
    }
}

fn locked() -> Vec<CodeFrame> {
    vec![
        frame_at("Lock.acquire", "threading.py", 100, true),
        frame_at("run", "train.py", 88, false),
    ]
}

fn all_reduce() -> Vec<CodeFrame> {
    vec![
        frame_at(
            "all_reduce",
            "torch/distributed/distributed_c10d.py",
            2800,
            true,
        ),
        frame_at("step", "train.py", 61, false),
    ]
}

/// A burst of 20 reads of the job's main thread (pid 100) at `at(i)`.
fn burst(t: f64, at: impl Fn(usize) -> Vec<CodeFrame>) -> StackReport {
    let reads: Vec<Vec<ThreadRead>> = (0..20)
        .map(|i| {
            vec![ThreadRead {
                pid: 100,
                tid: 100,
                name: "python3".into(),
                state: 'S',
                owns_gil: false,
                frames: at(i),
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

/// Feeds frames at 1 Hz and answers every confirming read the engine asks
/// for with `read(t, n)` (n: the reads so far); returns how many it took.
fn feed_reading(
    run: &mut Run,
    from: u32,
    to: u32,
    f: impl Fn(f64) -> Frame,
    read: impl Fn(f64, usize) -> StackReport,
) -> usize {
    let mut n = 0;
    for t in from..to {
        let t = f64::from(t);
        run.events.extend(run.engine.observe(&f(t)));
        for (gpu, uuid, pid) in run.engine.short_reads_due() {
            assert_eq!(pid, 100);
            run.engine.short_read_asked(gpu, &uuid, t);
            let report = read(t, n);
            run.engine.attach_short_read(gpu, &uuid, &report);
            n += 1;
        }
    }
    n
}

fn logging_until(cpu: f64, t: f64, stop: f64) -> JobFrame {
    let mut j = job(100, cpu, cpu.min(1.0));
    j.last_output = Some((t.min(stop) / 10.0).floor() * 10.0);
    j
}

fn deadlocked(t: f64) -> Frame {
    let mut j = logging_until(0.0, t, 300.0);
    j.threads_running = 0;
    j.top_threads[0].cpu = 0.0;
    frame(t, 0.0, vec![j])
}

#[test]
fn a_deadlock_whose_stacks_stand_still_is_named_in_two_minutes_with_its_line() {
    let mut run = Run::default();
    run.feed(0, 300, |t| {
        frame(t, 0.95, vec![logging_until(1.0, t, 300.0)])
    });
    assert!(
        run.engine.short_reads_due().is_empty(),
        "no read while the job logs"
    );
    let reads = feed_reading(&mut run, 300, 500, deadlocked, |t, _| {
        burst(t, |_| locked())
    });
    let starts = run.starts(Kind::IdleNoProgress);
    assert_eq!(starts.len(), 1, "{:?}", run.kinds());
    // Reads at 20, 40 and 60 s of silence, then the kind's 30 s enter time.
    assert!(
        starts[0] > 300.0 && starts[0] <= 300.0 + 120.0,
        "at {}",
        starts[0]
    );
    assert!(reads >= 3, "{reads} reads");
    let event = run.first(Kind::IdleNoProgress);
    let stuck = event.evidence.stuck.as_ref().expect("stuck evidence");
    assert_eq!(stuck.place, "threading.Lock.acquire <- run (train.py:88)");
    assert_eq!((stuck.reads, stuck.over_seconds), (3, 40.0));
    assert!(
        event.hint.starts_with(
            "Stuck at threading.Lock.acquire <- run (train.py:88) (tid 100 (python3), waiting on"
        ),
        "{}",
        event.hint
    );
    // Output resumes: it ends.
    run.feed(500, 520, |t| {
        frame(t, 0.95, vec![logging_until(1.0, t, 2000.0)])
    });
    assert_eq!(run.ends(Kind::IdleNoProgress).len(), 1);
}

#[test]
fn stacks_that_move_keep_the_hang_time() {
    let mut run = Run::default();
    run.feed(0, 300, |t| {
        frame(t, 0.95, vec![logging_until(1.0, t, 300.0)])
    });
    let stepping = || vec![frame_at("step", "train.py", 60, false)];
    let reads = feed_reading(&mut run, 300, 1000, deadlocked, |t, n| {
        burst(t, |_| if n % 2 == 0 { locked() } else { stepping() })
    });
    assert!(reads >= 3);
    let starts = run.starts(Kind::IdleNoProgress);
    assert_eq!(starts.len(), 1, "{:?}", run.kinds());
    assert!(
        starts[0] >= 300.0 + 600.0,
        "before the hang time: {}",
        starts[0]
    );
    assert!(run.first(Kind::IdleNoProgress).evidence.stuck.is_none());
}

#[test]
fn a_collective_that_never_returns_is_a_hang_in_two_minutes() {
    let mut run = Run::default();
    // Healthy: busy at high power, logging every 10 s (the busy baseline).
    run.feed(0, 600, |t| {
        frame(t, 0.99, vec![logging_until(1.0, t, 600.0)])
    });
    let spinning = |t: f64| {
        let mut f = frame(t, 1.0, vec![logging_until(1.0, t, 600.0)]);
        f.gpus[0].power_watts = Some(150.0);
        f
    };
    feed_reading(&mut run, 600, 800, spinning, |t, _| {
        burst(t, |_| all_reduce())
    });
    let starts = run.starts(Kind::BusyNoProgress);
    assert_eq!(starts.len(), 1, "{:?}", run.kinds());
    assert!(starts[0] <= 600.0 + 120.0, "at {}", starts[0]);
    let hint = &run.first(Kind::BusyNoProgress).hint;
    assert!(
        hint.contains("torch.distributed.distributed_c10d.all_reduce <- step (train.py:61)"),
        "{hint}"
    );
    assert!(hint.contains("a torch.distributed collective"), "{hint}");
}

#[test]
fn without_confirmation_nothing_is_read_and_the_hang_time_stands() {
    let mut config = diagnosis::DiagnosisConfig::default();
    config.hang_confirmation.enabled = false;
    config.phases.enabled = false;
    let mut run = Run::new(config);
    run.feed(0, 300, |t| {
        frame(t, 0.95, vec![logging_until(1.0, t, 300.0)])
    });
    let reads = feed_reading(&mut run, 300, 1000, deadlocked, |t, _| {
        burst(t, |_| locked())
    });
    assert_eq!(reads, 0);
    assert!(run.starts(Kind::IdleNoProgress)[0] >= 900.0);
}

#[test]
fn an_orphan_idle_at_its_gpu_is_left_to_the_leftover_rule() {
    let mut run = Run::default();
    let orphan = |t: f64| {
        let mut f = deadlocked(t);
        f.jobs[0].ppid = 1;
        f
    };
    run.feed(0, 300, |t| {
        frame(t, 0.95, vec![logging_until(1.0, t, 300.0)])
    });
    feed_reading(&mut run, 300, 500, orphan, |t, _| burst(t, |_| locked()));
    assert!(
        run.starts(Kind::IdleNoProgress).is_empty(),
        "{:?}",
        run.kinds()
    );
}
