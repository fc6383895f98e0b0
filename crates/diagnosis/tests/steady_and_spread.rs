//! Input-bound at a steady mid-range utilization (no idle samples), and
//! single_thread_bound for GIL-bound work spread over several threads.

mod script;

use diagnosis::frame::{Frame, JobFrame, ProcessCpuFrame, ThreadFrame};
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

fn thread(pid: u32, tid: u32, cpu: f64) -> ThreadFrame {
    ThreadFrame {
        pid,
        tid,
        name: "python3".into(),
        state: 'R',
        cpu,
        wait: None,
    }
}

/// A one-process job whose py_function work hops between tf.data pool
/// threads: three unnamed threads sharing about one core, and the main thread.
fn gil_job(t: f64, process_cpu: f64) -> JobFrame {
    // The shares move between the threads from sample to sample.
    let k = (t as u32) % 3;
    let share = |i: u32| [0.42, 0.33, 0.24][((i + k) % 3) as usize];
    let mut j = job(100, process_cpu, 0.0);
    j.processes = 1;
    j.top_threads = vec![
        thread(100, 201, share(0)),
        thread(100, 202, share(1)),
        thread(100, 203, share(2)),
        thread(100, 100, 0.04),
    ];
    j.top_threads.sort_by(|a, b| b.cpu.total_cmp(&a.cpu));
    j.top_processes = vec![ProcessCpuFrame {
        pid: 100,
        cpu_cores: process_cpu,
    }];
    j
}

/// `gil_job` with its three busy threads at `cpu` each, waiting `wait` each.
fn even_gil_job(t: f64, process_cpu: f64, cpu: f64, wait: Option<f64>) -> JobFrame {
    let mut j = gil_job(t, process_cpu);
    for th in j.top_threads.iter_mut().filter(|th| th.cpu > 0.1) {
        th.cpu = cpu;
        th.wait = wait;
    }
    j
}

#[test]
fn gil_bound_work_spread_over_three_threads_is_single_thread_bound() {
    let mut run = Run::default();
    run.feed(0, 300, |t| frame(t, 0.02, vec![gil_job(t, 1.03)]));
    assert_eq!(
        run.kinds(),
        vec![Kind::InputStarved, Kind::SingleThreadBound]
    );
    let single = run.first(Kind::SingleThreadBound);
    assert!(single.time <= 180.0);
    let spread = single
        .evidence
        .gil_spread
        .as_ref()
        .expect("spread evidence");
    assert_eq!(spread.pid, 100);
    assert_eq!(spread.threads.len(), 3);
    assert!((spread.cpu_cores - 0.99).abs() < 1e-9, "{spread:?}");
    assert_eq!(spread.process_cpu_cores, Some(1.03));
    assert!(single.evidence.pinned_share.unwrap() >= 0.8);
    assert!(
        single.hint.contains("spread over 3 threads of pid 100"),
        "{}",
        single.hint
    );
    assert!(single.hint.contains("GIL"));
    // The status carries the same.
    let status = &run.engine.status()[0];
    let active = status
        .active
        .iter()
        .find(|a| a.kind == Kind::SingleThreadBound)
        .unwrap();
    assert!(active.evidence.gil_spread.is_some());
    // Fed again: the refinement ends with its parent.
    run.feed(300, 400, |t| frame(t, 0.9, vec![job(100, 1.0, 0.3)]));
    assert_eq!(
        run.ends(Kind::SingleThreadBound),
        run.ends(Kind::InputStarved)
    );
}

#[test]
fn a_spread_a_little_short_of_a_full_core_still_counts() {
    // Each handover of the GIL costs a wake-up: 3 x 0.28 = 0.84 cores.
    let mut run = Run::default();
    run.feed(0, 300, |t| {
        frame(t, 0.02, vec![even_gil_job(t, 0.88, 0.28, None)])
    });
    assert_eq!(
        run.kinds(),
        vec![Kind::InputStarved, Kind::SingleThreadBound]
    );
    // Well short of a core (3 x 0.2): not bound by the GIL.
    let mut run = Run::default();
    run.feed(0, 300, |t| {
        frame(t, 0.02, vec![even_gil_job(t, 0.64, 0.2, None)])
    });
    assert_eq!(run.kinds(), vec![Kind::InputStarved]);
}

/// GIL-bound work on a busy host, as measured on 2 cores with a third of
/// one taken by other work: the threads run 0.58 cores together and wait
/// 0.34 for a CPU (the GIL waits with the thread handed it), PSI cpu ~0.1.
fn contended_gil_job(t: f64, wait: Option<f64>) -> Frame {
    let mut f = frame(t, 0.02, vec![even_gil_job(t, 0.62, 0.2, wait)]);
    f.host.cpu_utilization = Some(0.62);
    f.host.psi_cpu_some = Some(0.12);
    f
}

#[test]
fn gil_bound_threads_kept_waiting_for_a_cpu_on_a_busy_host_are_still_gil_bound() {
    let mut run = Run::default();
    run.feed(0, 300, |t| contended_gil_job(t, Some(0.11)));
    assert_eq!(
        run.kinds(),
        vec![Kind::InputStarved, Kind::SingleThreadBound]
    );
    let single = run.first(Kind::SingleThreadBound);
    let spread = single
        .evidence
        .gil_spread
        .as_ref()
        .expect("spread evidence");
    assert!((spread.cpu_cores - 0.6).abs() < 1e-9, "{spread:?}");
    assert_eq!(spread.wait_cores, Some(0.33));
    assert_eq!(spread.threads[0].wait_ratio, Some(0.11));
    assert!(
        single.hint.contains(
            "uses 0.60 cores together (the whole process 0.62) and waits 0.33 more for a CPU"
        ),
        "{}",
        single.hint
    );

    // The same CPU without the waits known (a kernel without schedstat, or
    // frames recorded before): 0.6 cores is not a core's worth.
    let mut run = Run::default();
    run.feed(0, 300, |t| contended_gil_job(t, None));
    assert_eq!(run.kinds(), vec![Kind::InputStarved]);

    // Threads that wait little are not lifted to a core by their waits.
    let mut run = Run::default();
    run.feed(0, 300, |t| contended_gil_job(t, Some(0.03)));
    assert_eq!(run.kinds(), vec![Kind::InputStarved]);
}

/// `frame` on a virtual machine whose hypervisor took `steal` of all CPU
/// time: busy for the jobs' CPU and the steal, nothing else.
fn stolen(mut f: Frame, steal: f64) -> Frame {
    let cpus = f64::from(f.host.cpus.expect("the script's host has CPUs"));
    let jobs: f64 = f.jobs.iter().filter_map(|j| j.cpu_cores).sum();
    f.host.cpu_steal = Some(steal);
    f.host.cpu_utilization = Some((jobs / cpus + steal).min(1.0));
    f
}

#[test]
fn gil_bound_threads_on_a_vm_whose_hypervisor_steals_half_the_time_are_still_gil_bound() {
    // As measured on a cloud VM at 45-49% steal: GIL-bound threads get
    // about half a core between them, none of it waiting in a run queue.
    let mut run = Run::default();
    run.feed(0, 300, |t| {
        stolen(
            frame(t, 0.02, vec![even_gil_job(t, 0.56, 0.18, Some(0.01))]),
            0.45,
        )
    });
    assert_eq!(
        run.kinds(),
        vec![Kind::InputStarved, Kind::SingleThreadBound]
    );
    let single = run.first(Kind::SingleThreadBound);
    assert_eq!(single.evidence.cpu_steal_ratio, Some(0.45));
    let spread = single
        .evidence
        .gil_spread
        .as_ref()
        .expect("spread evidence");
    assert!((spread.cpu_cores - 0.54).abs() < 1e-9, "{spread:?}");
    assert!(
        single.hint.contains(
            "uses 0.54 cores together (0.98 cores without steal: the hypervisor took 45% of \
             this host's CPU time, which no thread is charged for)"
        ),
        "{}",
        single.hint
    );

    // The same figures on bare metal: half a core is not a core's worth.
    let mut run = Run::default();
    run.feed(0, 300, |t| {
        stolen(
            frame(t, 0.02, vec![even_gil_job(t, 0.56, 0.18, Some(0.01))]),
            0.0,
        )
    });
    assert_eq!(run.kinds(), vec![Kind::InputStarved]);

    // Some steal does not lift a trickle to a core: 0.45 cores at 20%.
    let mut run = Run::default();
    run.feed(0, 300, |t| {
        stolen(frame(t, 0.02, vec![even_gil_job(t, 0.47, 0.15, None)]), 0.2)
    });
    assert_eq!(run.kinds(), vec![Kind::InputStarved]);
}

#[test]
fn a_thread_pinned_on_a_vm_reads_low_by_what_its_cpu_lost() {
    // Two CPUs, one pinned thread: its CPU lost 40% of its time while the
    // other sat idle, so the steal is 20% of all CPU time, 40% of the busy.
    let pinned = |t| stolen(frame(t, 0.02, vec![job(100, 0.6, 0.58)]), 0.2);
    let mut run = Run::default();
    run.feed(0, 300, pinned);
    assert_eq!(
        run.kinds(),
        vec![Kind::InputStarved, Kind::SingleThreadBound]
    );
    let single = run.first(Kind::SingleThreadBound);
    assert!(
        single.hint.contains(
            "is pinned at 58% of a core (97% without steal: the hypervisor took 20% of this \
             host's CPU time, 40% of its busy time"
        ),
        "{}",
        single.hint
    );

    // Scaled by the share of all CPU time (what a host that does not report
    // its busy time leaves), 0.58 reads 0.73 cores: not pinned.
    let mut run = Run::default();
    run.feed(0, 300, |t| {
        let mut f = pinned(t);
        f.host.cpu_utilization = None;
        f
    });
    assert_eq!(run.kinds(), vec![Kind::InputStarved]);

    // On bare metal 0.58 cores is not pinned either.
    let mut run = Run::default();
    run.feed(0, 300, |t| {
        stolen(frame(t, 0.02, vec![job(100, 0.6, 0.58)]), 0.0)
    });
    assert_eq!(run.kinds(), vec![Kind::InputStarved]);

    // However much of the busy time was stolen (62% here), one thread
    // reads a core at most.
    let mut run = Run::default();
    run.feed(0, 300, |t| {
        stolen(frame(t, 0.02, vec![job(100, 0.55, 0.52)]), 0.45)
    });
    let single = run.first(Kind::SingleThreadBound);
    assert!(
        single
            .hint
            .contains("is pinned at 52% of a core (100% without steal"),
        "{}",
        single.hint
    );
}

#[test]
fn native_threads_on_a_vm_using_two_cores_without_steal_are_not_gil_bound() {
    // Three threads decoding outside the GIL at 0.37 each: 1.1 cores read,
    // under the GIL cap, but 2 cores without the 45% steal.
    let mut run = Run::default();
    run.feed(0, 300, |t| {
        stolen(
            frame(t, 0.02, vec![even_gil_job(t, 1.15, 0.37, None)]),
            0.45,
        )
    });
    assert_eq!(run.kinds(), vec![Kind::InputStarved]);
}

#[test]
fn one_pinned_thread_carries_no_spread_evidence() {
    let mut run = Run::default();
    run.feed(0, 300, |t| {
        let mut j = job(100, 1.05, 0.99);
        j.top_threads.push(thread(100, 300, 0.05));
        frame(t, 0.02, vec![j])
    });
    let single = run
        .events
        .iter()
        .find(|e| e.kind == Kind::SingleThreadBound)
        .expect("classic case");
    assert_eq!(single.evidence.gil_spread, None);
    assert!(single.hint.contains("`py_map`"), "{}", single.hint);
}

#[test]
fn three_threads_in_a_process_using_three_cores_are_not_gil_bound() {
    let mut run = Run::default();
    run.feed(0, 300, |t| {
        let mut j = gil_job(t, 3.0);
        for th in &mut j.top_threads {
            th.cpu = th.cpu.min(0.33);
        }
        frame(t, 0.02, vec![j])
    });
    assert_eq!(run.kinds(), vec![Kind::InputStarved]);
}

#[test]
fn three_threads_in_separate_processes_are_not_gil_bound() {
    // DataLoader-style workers: one busy thread each, each its own GIL.
    let mut run = Run::default();
    run.feed(0, 300, |t| {
        let mut j = job(100, 1.05, 0.0);
        j.processes = 4;
        j.top_threads = vec![
            thread(101, 101, 0.34),
            thread(102, 102, 0.33),
            thread(103, 103, 0.33),
        ];
        j.top_processes = [101, 102, 103]
            .map(|pid| ProcessCpuFrame {
                pid,
                cpu_cores: 0.34,
            })
            .to_vec();
        frame(t, 0.02, vec![j])
    });
    assert_eq!(run.kinds(), vec![Kind::InputStarved]);
}

#[test]
fn a_host_short_of_cpu_is_cpu_saturated_not_gil_bound() {
    let mut run = Run::default();
    run.feed(0, 300, |t| {
        let mut f = frame(t, 0.02, vec![gil_job(t, 1.03)]);
        f.host.cpu_utilization = Some(0.97);
        f.host.psi_cpu_some = Some(0.45);
        f
    });
    assert_eq!(run.kinds(), vec![Kind::InputStarved, Kind::CpuSaturated]);
}

#[test]
fn gil_bound_threads_confined_to_a_core_they_share_are_short_of_cpu() {
    // The job confined (cpuset, taskset) to one core that other work takes
    // half of: its threads run half a core and wait the other half. Their
    // waits make a core's worth, but PSI is not from handovers: the host,
    // half idle, is short of CPU where the job may run.
    let mut run = Run::default();
    run.feed(0, 300, |t| {
        let mut f = frame(t, 0.02, vec![even_gil_job(t, 0.52, 0.17, Some(0.16))]);
        f.host.cpu_utilization = Some(0.55);
        f.host.psi_cpu_some = Some(0.4);
        f
    });
    assert_eq!(run.kinds(), vec![Kind::InputStarved, Kind::CpuSaturated]);
}

#[test]
fn cpu_waits_from_gil_handovers_on_a_host_with_idle_cpus_are_not_saturation() {
    // Each handover wakes a thread that waits for the CPU the last holder is
    // leaving: PSI cpu reads 0.25 while the 2-core host is 60% busy.
    let mut run = Run::default();
    run.feed(0, 300, |t| {
        let mut f = frame(t, 0.02, vec![gil_job(t, 1.0)]);
        f.host.cpu_utilization = Some(0.6);
        f.host.psi_cpu_some = Some(0.25);
        f
    });
    assert_eq!(
        run.kinds(),
        vec![Kind::InputStarved, Kind::SingleThreadBound]
    );
    // The same waits with one pinned thread: PSI decides, as before.
    let mut run = Run::default();
    run.feed(0, 300, |t| {
        let mut f = frame(t, 0.02, vec![job(100, 1.0, 0.99)]);
        f.host.cpu_utilization = Some(0.6);
        f.host.psi_cpu_some = Some(0.25);
        f
    });
    assert_eq!(run.kinds(), vec![Kind::InputStarved, Kind::CpuSaturated]);
}

#[test]
fn frames_without_per_process_cpu_still_show_a_one_process_spread() {
    // Recorded before frames carried `top_processes`: a job of one process
    // has its CPU in `cpu_cores`.
    let mut run = Run::default();
    run.feed(0, 300, |t| {
        let mut j = gil_job(t, 1.03);
        j.top_processes.clear();
        frame(t, 0.02, vec![j])
    });
    assert_eq!(
        run.kinds(),
        vec![Kind::InputStarved, Kind::SingleThreadBound]
    );
}

#[test]
fn a_spread_on_a_healthy_gpu_raises_nothing() {
    let mut run = Run::default();
    run.feed(0, 400, |t| frame(t, 0.95, vec![gil_job(t, 1.03)]));
    assert!(run.events.is_empty(), "{:?}", run.kinds());
}

#[test]
fn a_short_check_sees_a_gil_spread() {
    let config = DiagnosisConfig::default().fitted_to(30.0);
    let mut run = Run::new(config);
    run.feed(0, 30, |t| frame(t, 0.02, vec![gil_job(t, 1.03)]));
    assert_eq!(
        run.kinds(),
        vec![Kind::InputStarved, Kind::SingleThreadBound]
    );
    let status = &run.engine.status()[0];
    let single = status
        .active
        .iter()
        .find(|a| a.kind == Kind::SingleThreadBound)
        .unwrap();
    assert_eq!(
        single.evidence.gil_spread.as_ref().unwrap().threads.len(),
        3
    );
}
