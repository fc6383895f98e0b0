//! The GPU-time ledger: a scripted GPU's day booked by cause, every second
//! once, adding up to the time the engine watched it.

mod script;

use diagnosis::ledger::TimeState;
use script::*;

fn seconds(run: &Run, state: TimeState) -> f64 {
    run.engine.status()[0].time.seconds(state)
}

fn assert_near(run: &Run, state: TimeState, want: f64, slack: f64) {
    let got = seconds(run, state);
    assert!(
        (got - want).abs() <= slack,
        "{state:?}: {got} s booked, {want} s expected, ledger {:?}",
        run.engine.status()[0].time
    );
}

/// A job that started at `start`.
fn started_at(pid: u32, start: f64, cpu: f64) -> diagnosis::frame::JobFrame {
    diagnosis::frame::JobFrame {
        start_time: start,
        ..job(pid, cpu, 0.3)
    }
}

#[test]
fn every_second_is_booked_once_to_its_cause() {
    let mut run = Run::default();
    // 0-60: nothing holds the GPU.
    run.feed(0, 60, |t| frame(t, 0.0, vec![]));
    // 60-120: a job starts (imports, set-up): GPU idle, then 60 s of work.
    run.feed(60, 120, |t| frame(t, 0.0, vec![started_at(100, 60.0, 1.0)]));
    run.feed(120, 180, |t| {
        frame(t, 0.9, vec![started_at(100, 60.0, 1.2)])
    });
    // 180-480: the input pipeline starves the GPU.
    run.feed(180, 480, |t| {
        frame(t, 0.01, vec![started_at(100, 60.0, 0.6)])
    });
    // 480-600: fed again.
    run.feed(480, 600, |t| {
        frame(t, 0.9, vec![started_at(100, 60.0, 1.2)])
    });
    // 600-660: the daemon did not sample (paused); 660-700: NVML down.
    run.feed(660, 700, |t| {
        let mut f = frame(t, 0.9, vec![started_at(100, 60.0, 1.2)]);
        f.gpus[0].fresh = false;
        f
    });
    run.feed(700, 760, |t| {
        frame(t, 0.9, vec![started_at(100, 60.0, 1.2)])
    });

    let status = &run.engine.status()[0];
    let ledger = status.time;
    // Watched from the first frame (t=0) to the last (t=759); nothing held
    // back at the end (the GPU works).
    assert_eq!(status.time_held_seconds, 0.0);
    assert!((ledger.total() - 759.0).abs() < 1e-6, "{ledger:?}");
    assert_near(&run, TimeState::NoJob, 60.0, 1.0);
    // Start-up: the idle minute; the 10 s of work that end it are training.
    assert_near(&run, TimeState::Startup, 60.0, 2.0);
    // The starved stretch, to the second: its idle run before
    // input_starved started is the kind's, the busy seconds before it
    // ended are not.
    assert_near(&run, TimeState::Input, 300.0, 1.0);
    assert_eq!(seconds(&run, TimeState::Idle), 0.0);
    assert_near(&run, TimeState::Unknown, 61.0 + 40.0, 2.0);
    assert_eq!(seconds(&run, TimeState::Hung), 0.0);
    assert_eq!(seconds(&run, TimeState::Fault), 0.0);
    // Every state is there, counted or not.
    assert_eq!(ledger.iter().count(), TimeState::ALL.len());
}

#[test]
fn a_gpu_gone_from_the_frames_is_unknown_time() {
    let mut run = Run::default();
    run.feed(0, 30, |t| frame(t, 0.9, vec![job(100, 1.2, 0.3)]));
    // The GPU is missing from the frames (the collector lost it) for 20 s.
    run.feed(30, 50, |t| diagnosis::Frame {
        gpus: vec![],
        ..frame(t, 0.9, vec![])
    });
    run.feed(50, 60, |t| frame(t, 0.9, vec![job(100, 1.2, 0.3)]));
    let ledger = run.engine.status()[0].time;
    assert!((ledger.total() - 59.0).abs() < 1e-6, "{ledger:?}");
    assert_near(&run, TimeState::Productive, 39.0, 1.0);
    assert_near(&run, TimeState::Unknown, 20.0, 1.0);
}

#[test]
fn a_daemon_sampling_every_15_s_books_every_step() {
    let mut run = Run::default();
    for i in 0..40 {
        let t = f64::from(i) * 15.0;
        run.events
            .extend(run.engine.observe(&frame(t, 0.9, vec![job(100, 1.2, 0.3)])));
    }
    // A pause of two minutes is still a gap.
    run.events.extend(run.engine.observe(&frame(
        39.0 * 15.0 + 120.0,
        0.9,
        vec![job(100, 1.2, 0.3)],
    )));
    let ledger = run.engine.status()[0].time;
    assert!(
        (ledger.total() - (39.0 * 15.0 + 120.0)).abs() < 1e-6,
        "{ledger:?}"
    );
    assert_near(&run, TimeState::Productive, 39.0 * 15.0, 1.0);
    assert_near(&run, TimeState::Unknown, 120.0, 1.0);
}

#[test]
fn each_job_has_its_own_ledger_since_it_came() {
    let mut run = Run::default();
    run.feed(0, 100, |t| frame(t, 0.9, vec![job(100, 1.2, 0.3)]));
    // The job is replaced by a new one (a restart: a new pid, just started).
    run.feed(100, 200, |t| {
        frame(t, 0.9, vec![started_at(200, 100.0, 1.2)])
    });
    let status = &run.engine.status()[0];
    assert_eq!(status.jobs.len(), 1);
    let mine = status.jobs[0].time;
    assert_eq!(status.jobs[0].pid, 200);
    assert!((mine.total() - 100.0).abs() <= 1.0, "{mine:?}");
    // It worked from the start: its first 10 s of work ended its start-up
    // and were training, not start-up.
    assert_eq!(mine.seconds(TimeState::Startup), 0.0, "{mine:?}");
    assert!(
        (mine.seconds(TimeState::Productive) - 100.0).abs() <= 1.0,
        "{mine:?}"
    );
    // The GPU's own ledger has both jobs' time.
    assert!(
        (status.time.total() - 199.0).abs() < 1e-6,
        "{:?}",
        status.time
    );
}

/// A rank of run `run` that started at `start`.
fn rank_of(pid: u32, start: f64, cpu: f64, run: &str) -> diagnosis::frame::JobFrame {
    diagnosis::frame::JobFrame {
        run: Some(diagnosis::frame::RunRank {
            run: run.to_owned(),
            rank: 0,
            local_rank: Some(0),
            world_size: Some(2),
            launcher: "torchrun".to_owned(),
        }),
        ..started_at(pid, start, cpu)
    }
}

#[test]
fn a_runs_restart_is_its_recovery_and_loses_the_training_since_the_job_came() {
    let mut run = Run::default();
    // 0-10 start-up, 10-200 trains (the first 10 s of work end the start-up).
    run.feed(0, 10, |t| frame(t, 0.0, vec![rank_of(100, 0.0, 1.0, "r")]));
    run.feed(10, 200, |t| {
        frame(t, 0.9, vec![rank_of(100, 0.0, 1.2, "r")])
    });
    // Killed: 200-230 the GPU waits for the run's next job.
    run.feed(200, 230, |t| frame(t, 0.0, vec![]));
    let s = &run.engine.status()[0];
    assert_eq!(
        s.time_held_seconds, 30.0,
        "the gap is held until the run comes back or not"
    );
    let ended = s.last_ended.clone().expect("the job that left");
    assert_eq!(ended.pid, 100);
    assert_eq!(ended.run.as_deref(), Some("r"));
    assert!(
        (ended.progress_since_checkpoint_seconds - 190.0).abs() <= 2.0,
        "{ended:?}"
    );
    assert!(!ended.restarted);
    // 230: torchrun starts it again; 230-245 its start-up, then it trains.
    run.feed(230, 245, |t| {
        frame(t, 0.0, vec![rank_of(101, 230.0, 1.0, "r")])
    });
    run.feed(245, 300, |t| {
        frame(t, 0.9, vec![rank_of(101, 230.0, 1.2, "r")])
    });
    let s = &run.engine.status()[0];
    // The gap (30 s) and the new job's start-up (15 s idle); its first 10 s
    // of work are training.
    assert_near(&run, TimeState::Recovery, 45.0, 2.0);
    assert_near(&run, TimeState::NoJob, 0.0, 0.0);
    assert_near(&run, TimeState::Startup, 10.0, 2.0);
    assert!(
        (s.lost_progress_seconds_total - 190.0).abs() <= 2.0,
        "{s:?}"
    );
    assert!(s.last_ended.as_ref().unwrap().restarted);
    assert!((s.time.total() + s.time_held_seconds - 299.0).abs() < 1e-6);
    // The restarted job's own ledger starts with its recovery.
    assert_near_job(&run, 101, TimeState::Recovery, 15.0, 2.0);
}

#[test]
fn a_gpu_a_run_left_for_good_is_no_job_time() {
    let mut run = Run::default();
    run.feed(0, 60, |t| {
        frame(t, 0.9, vec![rank_of(100, -600.0, 1.2, "r")])
    });
    run.feed(60, 120, |t| frame(t, 0.0, vec![]));
    // Another run's job comes: the gap was no restart.
    run.feed(120, 130, |t| {
        frame(t, 0.9, vec![rank_of(200, 120.0, 1.2, "other")])
    });
    assert_near(&run, TimeState::NoJob, 60.0, 1.0);
    assert_near(&run, TimeState::Recovery, 0.0, 0.0);
    assert_eq!(run.engine.status()[0].lost_progress_seconds_total, 0.0);
}

fn assert_near_job(run: &Run, pid: u32, state: TimeState, want: f64, slack: f64) {
    let s = &run.engine.status()[0];
    let job = s.jobs.iter().find(|j| j.pid == pid).expect("the job");
    let got = job.time.seconds(state);
    assert!(
        (got - want).abs() <= slack,
        "{state:?}: {got} s, {want} s expected: {:?}",
        job.time
    );
}

/// An H100 with MIG on: the GPU itself (no processes, no utilization) and
/// instances of 3, 2 and 1 slices, the 1g one held by a job that works,
/// reported by GPM's SM activity alone.
fn mig_frame(t: f64) -> diagnosis::Frame {
    let slice = |index: u32, share: f64| diagnosis::frame::GpuFrame {
        index,
        uuid: format!("MIG-{index}"),
        utilization: None,
        sm_active: Some(0.8),
        share: Some(share),
        mig: true,
        ..gpu(0.0)
    };
    let mut job_on_1g = job(100, 1.2, 0.3);
    job_on_1g.gpus = vec![13];
    diagnosis::Frame {
        gpus: vec![
            diagnosis::frame::GpuFrame {
                utilization: None,
                share: Some(1.0 / 7.0),
                ..gpu(0.0)
            },
            slice(11, 3.0 / 7.0),
            slice(12, 2.0 / 7.0),
            holding(slice(13, 1.0 / 7.0), 100, 8 * GIB, 0.8),
        ],
        ..frame(t, 0.0, vec![job_on_1g])
    }
}

#[test]
fn a_mig_gpu_and_its_instances_add_up_to_one_gpu() {
    let mut run = Run::default();
    run.feed(0, 101, mig_frame);
    let status = run.engine.status();
    let by_gpu = |gpu: u32| status.iter().find(|s| s.gpu == gpu).unwrap().time;
    let total: f64 = status.iter().map(|s| s.time.total()).sum();
    // 100 s watched, one physical GPU: 100 GPU-seconds, not 400.
    assert!((total - 100.0).abs() < 1e-6, "{total}");
    assert!((by_gpu(11).total() - 300.0 / 7.0).abs() < 1e-6);
    assert!((by_gpu(12).total() - 200.0 / 7.0).abs() < 1e-6);
    // The one slice no instance holds, and the instances no job holds.
    assert!((by_gpu(0).seconds(TimeState::NoJob) - 100.0 / 7.0).abs() < 1e-6);
    assert!((by_gpu(11).seconds(TimeState::NoJob) - 300.0 / 7.0).abs() < 1e-6);
    // The job's own ledger is its share too.
    let job = &status.iter().find(|s| s.gpu == 13).unwrap().jobs[0];
    assert!(
        (job.time.seconds(TimeState::Productive) - 100.0 / 7.0).abs() < 1e-6,
        "{:?}",
        job.time
    );
}

#[test]
fn a_gpu_with_no_activity_reading_is_never_productive() {
    let mut run = Run::default();
    // An A100 MIG instance: no utilization, no GPM; its job logs and works.
    run.feed(0, 200, |t| {
        let mut f = frame(t, 0.0, vec![job(100, 1.2, 0.3)]);
        f.gpus[0].utilization = None;
        f.gpus[0].mig = true;
        f.gpus[0].share = Some(4.0 / 7.0);
        f
    });
    assert_eq!(seconds(&run, TimeState::Productive), 0.0);
    assert_eq!(seconds(&run, TimeState::Idle), 0.0);
    assert_near(&run, TimeState::Unknown, 199.0 * 4.0 / 7.0, 1e-6);
    // A new job's start-up on it is still a start-up.
    let mut run = Run::default();
    run.feed(0, 60, |t| {
        let mut f = frame(t, 0.0, vec![started_at(100, 0.0, 1.0)]);
        f.gpus[0].utilization = None;
        f
    });
    assert_near(&run, TimeState::Startup, 59.0, 1e-6);
    assert_eq!(seconds(&run, TimeState::Productive), 0.0);
}

#[test]
fn a_new_job_that_holds_a_gpu_and_does_nothing_is_idle_not_starting() {
    let mut run = Run::default();
    // A notebook left open: no CPU, no storage, SMs at 0, for 10 minutes.
    run.feed(0, 600, |t| {
        let mut j = started_at(100, 0.0, 0.0);
        j.read_bytes_per_second = Some(0.0);
        frame(t, 0.0, vec![j])
    });
    assert_eq!(seconds(&run, TimeState::Startup), 0.0);
    let held = run.engine.status()[0].time_held_seconds;
    assert_near(&run, TimeState::Idle, 599.0 - held, 1e-6);
    // Importing (a core busy) before it idles is its start-up.
    let mut run = Run::default();
    run.feed(0, 30, |t| frame(t, 0.0, vec![started_at(100, 0.0, 1.0)]));
    run.feed(30, 100, |t| {
        let mut j = started_at(100, 0.0, 0.0);
        j.read_bytes_per_second = Some(0.0);
        frame(t, 0.0, vec![j])
    });
    assert_near(&run, TimeState::Startup, 29.0, 1e-6);
    let status = &run.engine.status()[0];
    assert_near(&run, TimeState::Idle, 70.0 - status.time_held_seconds, 1e-6);
    assert!((status.time.total() + status.time_held_seconds - 99.0).abs() < 1e-6);
}
