//! Stacks as evidence: aggregation of a burst's reads, and how the engine
//! carries a report on its findings and start events.

mod script;

use diagnosis::evidence::Evidence;
use diagnosis::hint::with_context;
use diagnosis::stack_report::StackReport;
use diagnosis::stack_report::{
    Burst, CodeFrame, Focus, ReadOutcome, ThreadRead, aggregate, describe_spot, unavailable,
};
use diagnosis::{Kind, Phase};
use script::{Run, frame, job};

fn lib(function: &str, file: &str, line: u32) -> CodeFrame {
    CodeFrame {
        function: function.into(),
        file: file.into(),
        line,
        library: true,
    }
}

fn own(function: &str, file: &str, line: u32) -> CodeFrame {
    CodeFrame {
        function: function.into(),
        file: file.into(),
        line,
        library: false,
    }
}

fn thread(tid: u32, state: char, gil: bool, frames: Vec<CodeFrame>) -> ThreadRead {
    ThreadRead {
        pid: 100,
        tid,
        name: "python3".into(),
        state,
        owns_gil: gil,
        frames,
    }
}

/// PIL decoding inside the user's `decode_image`, called from the map.
fn pil() -> Vec<CodeFrame> {
    vec![
        lib("ImageFile.load", "PIL/ImageFile.py", 291),
        lib("open", "PIL/Image.py", 3300),
        own("decode_image", "data.py", 42),
        own("<module>", "train.py", 10),
    ]
}

fn main_waiting() -> Vec<CodeFrame> {
    vec![
        lib("Condition.wait", "threading.py", 320),
        lib("Queue.get", "queue.py", 171),
        own("train_step", "train.py", 88),
    ]
}

fn report(reads: &[Vec<ThreadRead>], focus: Focus) -> diagnosis::stack_report::StackReport {
    aggregate(
        &Burst {
            pid: 100,
            python_version: Some("3.11.7".into()),
            time: 1000.0,
            duration_seconds: 10.0,
            reads,
            times: &[],
            dropped: 0,
        },
        focus,
    )
}

#[test]
fn the_hot_place_names_the_library_call_and_the_users_line_with_its_share() {
    // 200 reads: the worker decodes in 174, sits in its own loop in 26.
    let reads: Vec<Vec<ThreadRead>> = (0..200)
        .map(|i| {
            let worker = if i < 174 {
                pil()
            } else {
                vec![own("loop", "data.py", 50)]
            };
            vec![
                thread(101, 'R', true, worker),
                thread(100, 'S', false, main_waiting()),
            ]
        })
        .collect();
    let r = report(&reads, Focus::Busy);
    assert_eq!(r.outcome, ReadOutcome::Sampled);
    assert_eq!(r.samples, 200);
    let top = &r.hot[0];
    assert_eq!(top.function, "PIL.ImageFile.ImageFile.load");
    assert_eq!(top.via.as_deref(), Some("PIL.Image.open"));
    assert_eq!(
        (
            top.user_function.as_deref(),
            top.user_file.as_deref(),
            top.user_line
        ),
        (Some("decode_image"), Some("data.py"), Some(42))
    );
    assert_eq!((top.samples, top.share), (174, 0.87));
    assert_eq!(
        r.summary,
        "PIL.ImageFile.ImageFile.load <- PIL.Image.open <- decode_image (data.py:42) \
         <- <module> (train.py:10) in 87% of 200 samples"
    );
    assert_eq!(r.hot[1].function, "loop");
    // The main thread is not running: it is listed with what it waits on.
    let main = r.threads.iter().find(|t| t.tid == 100).unwrap();
    assert_eq!(main.running_share, 0.0);
    assert_eq!(main.waiting_on.as_deref(), Some("queue.get"));
    assert_eq!(r.threads[0].tid, 101, "the running thread comes first");
    assert_eq!(r.threads[0].gil_share, 1.0);
}

#[test]
fn gil_bound_work_hopping_between_pool_threads_is_one_place_on_several_threads() {
    // Three pool threads take turns: one runs (holds the GIL) per read.
    let reads: Vec<Vec<ThreadRead>> = (0..90)
        .map(|i| {
            (0..3u32)
                .map(|k| {
                    let running = i % 3 == k as usize;
                    thread(
                        201 + k,
                        if running { 'R' } else { 'S' },
                        running,
                        vec![
                            own("py_func", "pipeline.py", 17),
                            own("<module>", "train.py", 3),
                        ],
                    )
                })
                .collect()
        })
        .collect();
    let r = report(&reads, Focus::Busy);
    assert_eq!(r.hot[0].share, 1.0, "the work was running in every read");
    assert_eq!(r.busy_threads, Some(3));
    assert!(
        r.summary
            .starts_with("py_func (pipeline.py:17) <- <module> (train.py:3) in 100% of 90 samples"),
        "{}",
        r.summary
    );
    assert!(r.summary.contains("spread over 3 threads"), "{}", r.summary);
    assert!(
        r.threads
            .iter()
            .all(|t| (t.running_share - 1.0 / 3.0).abs() < 0.01)
    );
}

#[test]
fn with_no_running_thread_the_busy_summary_says_so_and_where_threads_wait() {
    let reads: Vec<Vec<ThreadRead>> = (0..20)
        .map(|_| vec![thread(100, 'S', false, main_waiting())])
        .collect();
    let r = report(&reads, Focus::Busy);
    assert!(r.hot.is_empty());
    assert!(
        r.summary
            .starts_with("no Python thread of pid 100 was running in 20 samples"),
        "{}",
        r.summary
    );
    assert!(r.summary.contains("waits on queue.get"), "{}", r.summary);
}

#[test]
fn every_thread_is_summarised_for_a_hang() {
    let lock_wait = vec![
        own("take_both", "train.py", 61),
        own("worker", "train.py", 70),
    ];
    let reads: Vec<Vec<ThreadRead>> = (0..30)
        .map(|_| {
            vec![
                thread(100, 'S', false, lock_wait.clone()),
                thread(102, 'S', false, main_waiting()),
            ]
        })
        .collect();
    let r = report(&reads, Focus::AllThreads);
    assert_eq!(r.focus, Focus::AllThreads);
    assert!(
        r.summary
            .contains("tid 100 (python3, S, not running): at take_both (train.py:61)"),
        "{}",
        r.summary
    );
    assert!(
        r.summary
            .contains("tid 102 (python3, S, not running): waits on queue.get at"),
        "{}",
        r.summary
    );
}

#[test]
fn threads_whose_tid_is_unknown_stay_apart_by_their_python_names() {
    // CPython before 3.11 where no tid could be found: tid 0, Python's names.
    let named = |name: &str, state, frames| ThreadRead {
        name: name.into(),
        ..thread(0, state, false, frames)
    };
    let reads: Vec<Vec<ThreadRead>> = (0..10)
        .map(|_| {
            vec![
                named("loader", 'R', pil()),
                named("MainThread", 'S', main_waiting()),
            ]
        })
        .collect();
    let r = report(&reads, Focus::AllThreads);
    assert_eq!(r.threads.len(), 2, "{:?}", r.threads);
    assert_eq!(r.threads[0].name, "loader");
    assert_eq!(r.threads[0].running_share, 1.0);
    assert_eq!(r.threads[1].name, "MainThread");
    assert!(
        r.summary
            .starts_with("thread loader (tid unknown, running 100%): at PIL.ImageFile"),
        "{}",
        r.summary
    );
    assert!(
        r.summary
            .contains("thread MainThread (tid unknown, not running): waits on queue.get"),
        "{}",
        r.summary
    );
}

#[test]
fn describing_a_place_in_the_users_own_code_names_file_and_line() {
    let reads = vec![vec![thread(1, 'R', true, vec![own("spin", "train.py", 9)])]];
    let r = report(&reads, Focus::Busy);
    assert_eq!(describe_spot(&r.hot[0]), "spin (train.py:9)");
    assert_eq!(r.hot[0].via, None);
}

/// A helper of the user's, under two more of the user's functions, under
/// the framework's loader, under the user's training loop.
fn helper_chain() -> Vec<CodeFrame> {
    vec![
        lib("asarray", "numpy/core/_asarray.py", 10),
        own("resize_pixels", "data.py", 30),
        own("decode_image", "data.py", 42),
        own("__getitem__", "data.py", 57),
        own("extra_user_frame", "data.py", 70),
        lib("fetch", "torch/utils/data/_utils/fetch.py", 52),
        own("train", "train.py", 101),
    ]
}

#[test]
fn a_hot_place_shows_the_users_own_chain_above_it_three_deep() {
    let reads = vec![vec![thread(1, 'R', true, helper_chain())]];
    let r = report(&reads, Focus::Busy);
    assert_eq!(
        describe_spot(&r.hot[0]),
        "numpy.core._asarray.asarray <- resize_pixels (data.py:30) <- decode_image (data.py:42) \
         <- __getitem__ (data.py:57)"
    );
    // The leaf in the user's own code: it and two callers.
    let reads = vec![vec![thread(1, 'R', true, helper_chain()[1..].to_vec())]];
    let r = report(&reads, Focus::Busy);
    assert_eq!(
        describe_spot(&r.hot[0]),
        "resize_pixels (data.py:30) <- decode_image (data.py:42) <- __getitem__ (data.py:57)"
    );
    assert_eq!(r.framework, Some(diagnosis::framework::Framework::Pytorch));
    // The run of the user's frames ends at the framework's: the training
    // loop below the loader is not part of the chain.
    let reads = vec![vec![thread(1, 'R', true, helper_chain()[3..].to_vec())]];
    let r = report(&reads, Focus::Busy);
    assert_eq!(
        describe_spot(&r.hot[0]),
        "__getitem__ (data.py:57) <- extra_user_frame (data.py:70)"
    );
}

#[test]
fn a_jupyter_kernel_is_known_as_interactive() {
    let kernel = vec![
        lib("select", "selectors.py", 468),
        lib("Kernel.dispatch_queue", "ipykernel/kernelbase.py", 520),
    ];
    let r = report(&[vec![thread(1, 'S', false, kernel)]], Focus::AllThreads);
    assert!(r.interactive);
    assert!(!report(&[vec![thread(1, 'R', true, pil())]], Focus::Busy).interactive);
}

#[test]
fn an_empty_burst_says_nothing_was_read() {
    let r = report(&[], Focus::Busy);
    assert_eq!(r.samples, 0);
    assert_eq!(r.summary, "no stack of pid 100 could be read");
}

/// GPU 0 has an active episode that wants stacks and has none yet.
fn waits_for_stacks(run: &Run) -> bool {
    run.engine.status()[0]
        .active
        .iter()
        .any(|a| a.kind.wants_stacks() && a.evidence.stacks.is_none())
}

fn starved(pid: u32) -> impl Fn(f64) -> diagnosis::Frame {
    move |t| frame(t, 0.0, vec![job(pid, 1.0, 0.98)])
}

#[test]
fn a_report_is_carried_by_the_active_findings_and_their_start_events() {
    let mut run = Run::default();
    run.feed(0, 200, starved(100));
    assert!(run.active().contains(&Kind::InputStarved));
    assert!(waits_for_stacks(&run));
    let reads = vec![vec![thread(101, 'R', true, pil())]; 10];
    let amended = run
        .engine
        .attach_stacks(0, "GPU-0", report(&reads, Focus::Busy));
    let kinds: Vec<Kind> = amended.iter().map(|e| e.kind).collect();
    assert!(
        kinds.contains(&Kind::InputStarved) && kinds.contains(&Kind::SingleThreadBound),
        "{kinds:?}"
    );
    assert!(
        amended
            .iter()
            .all(|e| e.phase == Phase::Start && e.evidence.stacks.is_some())
    );
    assert!(
        amended[0]
            .hint
            .starts_with("Python stacks of pid 100: PIL.ImageFile"),
        "{}",
        amended[0].hint
    );
    // The ring holds the amended events, and the status the report.
    let ring = run.engine.events(0.0, 0, 100);
    assert!(
        ring.iter()
            .filter(|e| e.phase == Phase::Start)
            .all(|e| e.evidence.stacks.is_some())
    );
    assert!(!waits_for_stacks(&run));
    run.feed(200, 205, starved(100));
    let status = &run.engine.status()[0];
    for a in &status.active {
        assert_eq!(
            a.evidence.stacks.is_some(),
            a.kind.wants_stacks(),
            "{:?}",
            a.kind
        );
    }
    // A kind that starts later in the same episode carries the report at once.
    assert!(
        status
            .active
            .iter()
            .any(|a| a.hint.contains("decode_image (data.py:42)"))
    );
}

#[test]
fn stacks_end_with_the_episode_and_a_new_one_wants_new_stacks() {
    let mut run = Run::default();
    run.feed(0, 200, starved(100));
    let report = unavailable(
        100,
        ReadOutcome::NotPython,
        "pid 100 (java) is not a Python process".into(),
        200.0,
    );
    run.engine.attach_stacks(0, "GPU-0", report);
    let status = &run.engine.status()[0];
    let starved_now = status
        .active
        .iter()
        .find(|a| a.kind == Kind::InputStarved)
        .unwrap();
    assert!(
        starved_now
            .hint
            .ends_with("(No Python stacks: pid 100 (java) is not a Python process.)"),
        "{}",
        starved_now.hint
    );
    // Fed again: the episode ends and its stacks go with it.
    run.feed(200, 400, |t| frame(t, 0.9, vec![job(100, 1.0, 0.5)]));
    assert!(run.active().is_empty(), "{:?}", run.active());
    assert!(
        run.engine
            .attach_stacks(
                0,
                "GPU-0",
                unavailable(100, ReadOutcome::Exited, "gone".into(), 400.0)
            )
            .is_empty()
    );
    run.feed(400, 600, starved(100));
    assert!(waits_for_stacks(&run));
}

#[test]
fn a_report_for_an_unknown_gpu_is_dropped() {
    let mut run = Run::default();
    run.feed(0, 200, starved(100));
    let r = unavailable(100, ReadOutcome::Exited, "gone".into(), 0.0);
    assert!(
        run.engine
            .attach_stacks(0, "GPU-other", r.clone())
            .is_empty()
    );
    assert!(run.engine.attach_stacks(7, "", r).is_empty());
}

#[test]
fn the_lines_of_one_loop_count_as_one_function_shown_at_its_busiest_line() {
    let reads: Vec<Vec<ThreadRead>> = (0..10)
        .map(|i| {
            let line = if i < 6 { 29 } else { 28 };
            vec![thread(
                101,
                'R',
                true,
                vec![
                    own("decode_image", "pyjob.py", line),
                    own("spinner", "pyjob.py", 35),
                ],
            )]
        })
        .collect();
    let r = report(&reads, Focus::Busy);
    assert_eq!(r.hot.len(), 1);
    assert_eq!(
        (r.hot[0].line, r.hot[0].samples, r.hot[0].share),
        (29, 10, 1.0)
    );
    assert_eq!(
        r.summary,
        "decode_image (pyjob.py:29) <- spinner (pyjob.py:35) in 100% of 10 samples"
    );
}

// Time per call and wait per batch, from the reads' times.

const PERIOD: f64 = 0.05;

fn timed_report(reads: &[Vec<ThreadRead>], focus: Focus) -> StackReport {
    // Reads 50 ms apart, with a little jitter as real ones have.
    let times: Vec<f64> = (0..reads.len())
        .map(|i| i as f64 * PERIOD + if i % 3 == 0 { 0.002 } else { 0.0 })
        .collect();
    aggregate(
        &Burst {
            pid: 100,
            python_version: Some("3.11.7".into()),
            time: 1000.0,
            duration_seconds: reads.len() as f64 * PERIOD,
            reads,
            times: &times,
            dropped: 0,
        },
        focus,
    )
}

/// A worker that opens an image from `decode_image` for 8 reads (the leaf
/// moving between lines of PIL's), then spends 2 in its own loop.
fn worker(i: usize) -> ThreadRead {
    let frames = match i % 10 {
        0 | 1 => vec![own("__getitem__", "data.py", 57)],
        n => vec![
            lib("ImageFile.load", "PIL/ImageFile.py", 290 + (n % 2) as u32),
            lib("open", "PIL/Image.py", 3300),
            own("decode_image", "data.py", 42),
            own("__getitem__", "data.py", 58),
        ],
    };
    thread(2, 'R', true, frames)
}

/// The training loop: waits 30 reads in the DataLoader's `__next__`, then
/// steps for 5.
fn trainer(i: usize) -> ThreadRead {
    if i % 35 < 30 {
        thread(
            1,
            'S',
            false,
            vec![
                lib("Condition.wait", "threading.py", 320),
                lib(
                    "_BaseDataLoaderIter.__next__",
                    "torch/utils/data/dataloader.py",
                    630,
                ),
                own("train", "train.py", 88),
            ],
        )
    } else {
        thread(
            1,
            'R',
            true,
            vec![
                own("train_step", "train.py", 70),
                own("train", "train.py", 90),
            ],
        )
    }
}

#[test]
fn the_hot_place_says_how_long_one_call_takes_and_the_loop_its_wait_per_batch() {
    let reads: Vec<Vec<ThreadRead>> = (0..200).map(|i| vec![trainer(i), worker(i)]).collect();
    let r = timed_report(&reads, Focus::Busy);
    let top = &r.hot[0];
    assert_eq!(top.function, "PIL.ImageFile.ImageFile.load");
    let t = top.per_call.as_ref().expect("timed");
    // 8 reads a call, 50 ms apart; the first call and the last are cut by
    // the burst's ends (reads 2-9 are seen whole: read 1 is outside).
    assert!((t.median_seconds.unwrap() - 0.4).abs() < 0.01, "{t:?}");
    assert!(t.calls >= 18, "{t:?}");
    assert!(
        r.summary
            .contains("in 80% of 200 samples, about 400 ms a call (median of"),
        "{}",
        r.summary
    );
    // The loop's wait per batch: 30 reads.
    let b = r.batch_wait.as_ref().expect("a batch wait");
    assert_eq!((b.tid, b.function.as_str(), b.line), (1, "train", 88));
    assert_eq!(b.waiting_on, "the DataLoader's next batch");
    assert!(
        (b.per_batch.median_seconds.unwrap() - 1.5).abs() < 0.01,
        "{b:?}"
    );
    // The input kinds' hint says it; others do not.
    let evidence = Evidence {
        stacks: Some(r.clone()),
        ..Evidence::default()
    };
    let hint = with_context(Kind::InputStarved, &evidence, "Add workers.".into());
    assert!(
        hint.contains(". The training loop (train (train.py:88), tid 1) waits about 1.5 s for each batch (median of"),
        "{hint}"
    );
    let hint = with_context(Kind::IdleNoProgress, &evidence, "Look.".into());
    assert!(!hint.contains("for each batch"), "{hint}");
}

#[test]
fn one_function_from_two_callers_is_timed_apart() {
    // `resize` takes 6 reads when `small` calls it and 12 when `large` does.
    let reads: Vec<Vec<ThreadRead>> = (0..240)
        .map(|i| {
            let frames = match i % 20 {
                0 => vec![own("loop", "job.py", 5)],
                1..=6 => vec![
                    own("resize", "job.py", 30 + (i % 2) as u32),
                    own("small", "job.py", 10),
                ],
                7 => vec![own("loop", "job.py", 6)],
                _ => vec![own("resize", "job.py", 30), own("large", "job.py", 20)],
            };
            vec![thread(1, 'R', true, frames)]
        })
        .collect();
    let r = timed_report(&reads, Focus::Busy);
    let by_caller = |caller: &str| {
        r.hot
            .iter()
            .find(|h| h.callers.first().is_some_and(|c| c.function == caller))
            .and_then(|h| h.per_call.as_ref())
            .and_then(|t| t.median_seconds)
            .unwrap()
    };
    assert!((by_caller("small") - 0.3).abs() < 0.01);
    assert!((by_caller("large") - 0.6).abs() < 0.01);
}

#[test]
fn calls_of_a_read_or_two_are_said_to_be_short_and_a_call_through_the_burst_at_least_its_length() {
    let reads: Vec<Vec<ThreadRead>> = (0..100)
        .map(|i| {
            let short = if i % 2 == 0 {
                vec![own("tiny", "job.py", 3), own("loop", "job.py", 9)]
            } else {
                vec![own("loop", "job.py", 10)]
            };
            // A second thread in one blocking call the whole burst.
            let stuck = vec![
                lib("sleep", "<built-in>", 0),
                own("fetch", "job.py", 40),
                own("main", "job.py", 50),
            ];
            vec![thread(1, 'R', true, short), thread(2, 'S', false, stuck)]
        })
        .collect();
    let r = timed_report(&reads, Focus::AllThreads);
    let tiny = r.threads.iter().find(|t| t.tid == 1).unwrap();
    let t = tiny
        .top
        .iter()
        .find(|h| h.function == "tiny")
        .unwrap()
        .per_call
        .clone()
        .unwrap();
    assert_eq!((t.median_seconds, t.under_seconds), (None, Some(0.15)));
    let fetch = r.threads.iter().find(|t| t.tid == 2).unwrap();
    let t = fetch.top[0].per_call.clone().unwrap();
    assert_eq!((t.calls, t.median_seconds), (0, None));
    assert!(t.at_least_seconds.unwrap() > 4.9, "{t:?}");
    assert!(
        r.summary
            .contains("at least 5.0 s a call (none seen to begin and end)"),
        "{}",
        r.summary
    );
}

#[test]
fn reads_without_times_time_nothing() {
    let reads: Vec<Vec<ThreadRead>> = (0..50).map(|i| vec![worker(i)]).collect();
    let r = report(&reads, Focus::Busy);
    assert!(r.hot[0].per_call.is_none() && r.batch_wait.is_none());
    assert!(!r.summary.contains("a call"), "{}", r.summary);
}

#[test]
fn items_a_data_loader_fetches_one_after_another_are_said_to_count_as_one_call() {
    // A batch of 4 items of 2 reads each, then 2 reads of the loop.
    let reads: Vec<Vec<ThreadRead>> = (0..100)
        .map(|i| {
            let frames = if i % 10 < 8 {
                vec![
                    own("Images.__getitem__", "data.py", 20),
                    lib("<listcomp>", "torch/utils/data/_utils/fetch.py", 52),
                    lib(
                        "_MapDatasetFetcher.fetch",
                        "torch/utils/data/_utils/fetch.py",
                        52,
                    ),
                    own("train", "train.py", 88),
                ]
            } else {
                vec![
                    own("train_step", "train.py", 70),
                    own("train", "train.py", 90),
                ]
            };
            vec![thread(1, 'R', true, frames)]
        })
        .collect();
    let r = timed_report(&reads, Focus::Busy);
    let t = r.hot[0].per_call.as_ref().unwrap();
    assert!(
        t.batch_of_items && (t.median_seconds.unwrap() - 0.4).abs() < 0.01,
        "{t:?}"
    );
    assert!(r.summary.contains("count as one call"), "{}", r.summary);
}
