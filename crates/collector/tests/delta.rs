//! The pure step from samples to snapshots: rates, totals that never go
//! backwards, pid reuse, busiest threads, output progress.

use collector::delta::{counter_delta, derive};
use collector::sample::*;
use collector::snapshot::{ClockEventReason, Snapshot};

fn thread(tid: u32, name: &str, state: char, cpu: f64) -> ThreadSample {
    ThreadSample {
        tid,
        name: name.into(),
        state,
        cpu_seconds: cpu,
        wait_seconds: None,
    }
}

fn process(pid: u32, start: u64, cpu: f64, threads: Vec<ThreadSample>) -> ProcessSample {
    ProcessSample {
        id: ProcessId {
            pid,
            start_ticks: start,
        },
        ppid: 1,
        comm: format!("p{pid}"),
        state: 'S',
        start_time_seconds: 1000.0,
        cpu_seconds: cpu,
        rss_bytes: 1 << 20,
        threads,
        io: Some(IoCounters {
            rchar: 0,
            wchar: 0,
            read_bytes: 0,
            write_bytes: 0,
        }),
    }
}

fn job(leader: ProcessSample, descendants: Vec<ProcessSample>) -> JobSample {
    JobSample {
        gpus: vec![0],
        leader,
        descendants,
        attribution: Attribution::default(),
        rank: Default::default(),
        frameworks: Default::default(),
        stdout_bytes: Some(100),
        stderr_bytes: None,
        output_modified_seconds: Some(900.0),
        threads_carried: false,
    }
}

fn sample(t: f64, jobs: Vec<JobSample>) -> Sample {
    Sample {
        timestamp_seconds: t,
        jobs,
        ..Sample::default()
    }
}

fn chain(samples: &[Sample]) -> Vec<Snapshot> {
    let mut out: Vec<Snapshot> = Vec::new();
    for (i, s) in samples.iter().enumerate() {
        let prev = (i > 0).then(|| (&samples[i - 1], &out[i - 1]));
        let snap = derive(prev, s);
        out.push(snap);
    }
    out
}

#[test]
fn counter_going_backwards_gives_no_value() {
    assert_eq!(counter_delta(10.0, 12.5), Some(2.5));
    assert_eq!(counter_delta(10.0, 3.0), None);
}

#[test]
fn busiest_thread_is_found_by_its_own_delta() {
    let a = sample(
        0.0,
        vec![job(
            process(
                10,
                5,
                100.0,
                vec![
                    thread(10, "python", 'S', 90.0),
                    thread(11, "pt_data", 'R', 10.0),
                ],
            ),
            vec![],
        )],
    );
    let b = sample(
        2.0,
        vec![job(
            process(
                10,
                5,
                102.1,
                vec![
                    thread(10, "python", 'S', 90.1),
                    thread(11, "pt_data", 'R', 11.9),
                ],
            ),
            vec![],
        )],
    );
    let snaps = chain(&[a, b]);
    let j = &snaps[1].jobs[0];
    assert_eq!(j.top_threads[0].name, "pt_data");
    assert!((j.top_threads[0].cpu_ratio - 0.95).abs() < 1e-9);
    assert!((j.top_threads[1].cpu_ratio - 0.05).abs() < 1e-9);
    assert!((j.cpu_cores.unwrap() - 1.05).abs() < 1e-9);
    assert!(
        snaps[0].jobs[0].top_threads.is_empty(),
        "no rate from one sample"
    );
}

#[test]
fn a_threads_wait_for_a_cpu_is_a_rate_where_both_samples_know_it() {
    let waited = |t: ThreadSample, wait: Option<f64>| ThreadSample {
        wait_seconds: wait,
        ..t
    };
    let at = |t: f64, cpu: [f64; 2], wait: [Option<f64>; 2]| {
        sample(
            t,
            vec![job(
                process(
                    10,
                    5,
                    cpu[0] + cpu[1],
                    vec![
                        waited(thread(11, "map0", 'R', cpu[0]), wait[0]),
                        waited(thread(12, "map1", 'R', cpu[1]), wait[1]),
                    ],
                ),
                vec![],
            )],
        )
    };
    let snaps = chain(&[
        at(0.0, [10.0, 10.0], [Some(4.0), None]),
        at(2.0, [11.2, 10.8], [Some(4.6), Some(1.0)]),
        at(4.0, [12.4, 11.6], [Some(4.5), Some(2.0)]),
    ]);
    let threads = &snaps[1].jobs[0].top_threads;
    assert_eq!(threads[0].name, "map0");
    assert!((threads[0].wait_ratio.unwrap() - 0.3).abs() < 1e-9);
    assert_eq!(threads[1].wait_ratio, None, "unknown at the first sample");
    let threads = &snaps[2].jobs[0].top_threads;
    assert_eq!(threads[0].wait_ratio, None, "went backwards: no rate");
    assert!((threads[1].wait_ratio.unwrap() - 0.5).abs() < 1e-9);
}

#[test]
fn the_processes_of_the_top_threads_carry_their_own_cpu() {
    // The leader's three pool threads share about one core; a worker process
    // has one busy thread; a new process is left out (no delta yet).
    let leader = |cpu: f64, t: f64| {
        process(
            10,
            5,
            cpu,
            vec![
                thread(10, "python", 'S', 1.0),
                thread(11, "python", 'R', 1.0 + t * 0.35),
                thread(12, "python", 'R', 1.0 + t * 0.33),
                thread(13, "python", 'S', 1.0 + t * 0.30),
            ],
        )
    };
    let worker = |cpu: f64| process(20, 7, cpu, vec![thread(20, "worker", 'R', cpu)]);
    let a = sample(0.0, vec![job(leader(4.0, 0.0), vec![worker(1.0)])]);
    let b = sample(
        2.0,
        vec![job(
            leader(6.0, 2.0),
            vec![
                worker(1.8),
                process(30, 9, 50.0, vec![thread(30, "new", 'R', 50.0)]),
            ],
        )],
    );
    let snaps = chain(&[a, b]);
    let j = &snaps[1].jobs[0];
    assert_eq!(j.top_threads.len(), 5);
    assert_eq!(j.top_processes.len(), 2, "{:?}", j.top_processes);
    assert_eq!(j.top_processes[0].pid, 10);
    assert!((j.top_processes[0].cpu_cores - 1.0).abs() < 1e-9);
    assert_eq!(j.top_processes[1].pid, 20);
    assert!((j.top_processes[1].cpu_cores - 0.4).abs() < 1e-9);
    assert!(snaps[0].jobs[0].top_processes.is_empty());
}

#[test]
fn job_cpu_total_never_goes_backwards_when_a_worker_exits() {
    let leader = |cpu| process(10, 5, cpu, vec![thread(10, "python", 'S', cpu)]);
    let worker = |cpu| process(11, 7, cpu, vec![thread(11, "worker", 'R', cpu)]);
    let snaps = chain(&[
        sample(0.0, vec![job(leader(1.0), vec![worker(5.0)])]),
        sample(1.0, vec![job(leader(1.5), vec![worker(5.8)])]),
        sample(2.0, vec![job(leader(2.0), vec![])]),
        // A new worker joins: all its CPU time counts.
        sample(
            3.0,
            vec![job(leader(2.0), vec![process(12, 9, 0.4, vec![])])],
        ),
    ]);
    let totals: Vec<f64> = snaps.iter().map(|s| s.jobs[0].cpu_seconds_total).collect();
    let expected = [6.0, 7.3, 7.8, 8.2];
    for (t, e) in totals.iter().zip(expected) {
        assert!((t - e).abs() < 1e-9, "{totals:?}");
    }
    assert_eq!(snaps[1].jobs[0].processes, 2);
    assert_eq!(snaps[2].jobs[0].processes, 1);
}

#[test]
fn a_reused_pid_is_a_new_job() {
    let old = process(10, 5, 500.0, vec![thread(10, "old", 'R', 500.0)]);
    let new = process(10, 999, 1.0, vec![thread(10, "new", 'R', 1.0)]);
    let snaps = chain(&[
        sample(0.0, vec![job(old, vec![])]),
        sample(1.0, vec![job(new, vec![])]),
    ]);
    let j = &snaps[1].jobs[0];
    assert_eq!(
        j.cpu_seconds_total, 1.0,
        "no carry-over from the old process"
    );
    assert_eq!(j.cpu_cores, None, "no rate across different processes");
    assert!(j.top_threads.is_empty());
}

#[test]
fn thread_counter_going_backwards_is_not_a_rate() {
    let snaps = chain(&[
        sample(
            0.0,
            vec![job(
                process(10, 5, 9.0, vec![thread(10, "a", 'R', 9.0)]),
                vec![],
            )],
        ),
        sample(
            1.0,
            vec![job(
                process(10, 5, 9.5, vec![thread(10, "a", 'R', 2.0)]),
                vec![],
            )],
        ),
    ]);
    assert!(snaps[1].jobs[0].top_threads.is_empty());
}

#[test]
fn io_totals_grow_by_per_process_deltas() {
    let with_io = |pid, start, read| {
        let mut p = process(pid, start, 0.0, vec![]);
        p.io = Some(IoCounters {
            rchar: read,
            wchar: 0,
            read_bytes: read,
            write_bytes: 0,
        });
        p
    };
    let snaps = chain(&[
        sample(
            0.0,
            vec![job(with_io(10, 5, 100), vec![with_io(11, 6, 1000)])],
        ),
        sample(
            2.0,
            vec![job(with_io(10, 5, 300), vec![with_io(11, 6, 1400)])],
        ),
        sample(4.0, vec![job(with_io(10, 5, 300), vec![])]),
    ]);
    assert_eq!(snaps[0].jobs[0].read_bytes_total, Some(1100));
    assert_eq!(snaps[1].jobs[0].read_bytes_total, Some(1700));
    assert_eq!(snaps[1].jobs[0].read_bytes_per_second, Some(300.0));
    assert_eq!(snaps[2].jobs[0].read_bytes_total, Some(1700));
}

#[test]
fn unreadable_io_is_left_out_not_zero() {
    // Another user's job, read without the capabilities: no `io` at all.
    let unreadable = |pid, start| {
        let mut p = process(pid, start, 0.0, vec![]);
        p.io = None;
        p
    };
    let mut readable = process(10, 5, 0.0, vec![]);
    readable.io = Some(IoCounters {
        rchar: 50,
        wchar: 20,
        read_bytes: 4096,
        write_bytes: 8192,
    });
    let snaps = chain(&[
        sample(0.0, vec![job(unreadable(10, 5), vec![unreadable(11, 6)])]),
        sample(1.0, vec![job(unreadable(10, 5), vec![unreadable(11, 6)])]),
        // Readable from now on (capabilities granted, the daemon restarted
        // into the same job, or a process the daemon may read joined).
        sample(2.0, vec![job(readable.clone(), vec![unreadable(11, 6)])]),
        sample(3.0, vec![job(readable, vec![unreadable(11, 6)])]),
    ]);
    for snap in &snaps[..2] {
        let j = &snap.jobs[0];
        assert_eq!(j.read_bytes_total, None);
        assert_eq!(j.write_bytes_total, None);
        assert_eq!(j.rchar_total, None);
        assert_eq!(j.wchar_total, None);
        assert_eq!(j.read_bytes_per_second, None, "no rate from nothing");
    }
    assert_eq!(snaps[1].jobs[0].cpu_cores, Some(0.0), "CPU is still read");
    assert_eq!(snaps[2].jobs[0].read_bytes_total, Some(4096));
    assert_eq!(snaps[2].jobs[0].write_bytes_total, Some(8192));
    assert_eq!(snaps[2].jobs[0].read_bytes_per_second, None, "first sight");
    assert_eq!(snaps[3].jobs[0].read_bytes_total, Some(4096));
    assert_eq!(snaps[3].jobs[0].read_bytes_per_second, Some(0.0));
}

#[test]
fn last_output_moves_when_stdout_grows_or_wchar_grows() {
    let mut s0 = job(process(10, 5, 0.0, vec![]), vec![]);
    s0.output_modified_seconds = Some(500.0);
    let s1 = s0.clone();
    let mut s2 = s0.clone();
    s2.stdout_bytes = Some(200);
    let s3 = s2.clone();
    let mut s4 = s2.clone();
    s4.leader.io.as_mut().unwrap().wchar = 50;
    let snaps = chain(&[
        sample(1000.0, vec![s0]),
        sample(1001.0, vec![s1]),
        sample(1002.0, vec![s2]),
        sample(1003.0, vec![s3]),
        sample(1004.0, vec![s4]),
    ]);
    let last: Vec<Option<f64>> = snaps
        .iter()
        .map(|s| s.jobs[0].last_output_seconds)
        .collect();
    assert_eq!(
        last,
        vec![
            Some(500.0),
            Some(500.0),
            Some(1002.0),
            Some(1002.0),
            Some(1004.0)
        ]
    );
}

#[test]
fn thread_states_are_counted_across_the_tree() {
    let snaps = chain(&[sample(
        0.0,
        vec![job(
            process(
                10,
                5,
                0.0,
                vec![
                    thread(10, "a", 'R', 0.0),
                    thread(11, "b", 'S', 0.0),
                    thread(12, "c", 'D', 0.0),
                ],
            ),
            vec![process(
                20,
                6,
                0.0,
                vec![thread(20, "w", 'D', 0.0), thread(21, "z", 'Z', 0.0)],
            )],
        )],
    )]);
    let t = snaps[0].jobs[0].threads;
    assert_eq!(
        (t.running, t.sleeping, t.disk_sleep, t.zombie),
        (1, 1, 2, 1)
    );
    assert_eq!(t.total(), 5);
}

#[test]
fn host_cpu_ratios_come_from_deltas_and_skip_backwards_counters() {
    let host = |busy: f64, total: f64, cores: Vec<(f64, f64)>| HostSample {
        cpu: Some(CpuTimes {
            busy_seconds: busy,
            total_seconds: total,
            steal_seconds: None,
        }),
        cores: cores
            .into_iter()
            .map(|(b, t)| CpuTimes {
                busy_seconds: b,
                total_seconds: t,
                steal_seconds: None,
            })
            .collect(),
        online_cpus: Some(2),
        ..HostSample::default()
    };
    let mut a = sample(0.0, vec![]);
    a.host = host(10.0, 100.0, vec![(5.0, 50.0), (5.0, 50.0)]);
    let mut b = sample(1.0, vec![]);
    b.host = host(11.2, 102.0, vec![(6.0, 51.0), (5.2, 51.0)]);
    let mut c = sample(2.0, vec![]);
    c.host = host(1.0, 104.0, vec![(6.5, 52.0), (5.2, 52.0)]);
    let snaps = chain(&[a, b, c]);
    assert_eq!(snaps[0].host.cpu_utilization_ratio, None);
    assert!((snaps[1].host.cpu_utilization_ratio.unwrap() - 0.6).abs() < 1e-9);
    assert!((snaps[1].host.busiest_core_ratio.unwrap() - 1.0).abs() < 1e-9);
    assert_eq!(
        snaps[2].host.cpu_utilization_ratio, None,
        "busy went backwards"
    );
    assert!((snaps[2].host.busiest_core_ratio.unwrap() - 0.5).abs() < 1e-9);
}

#[test]
fn steal_is_a_share_of_all_cpu_time_where_the_kernel_reports_it() {
    let host = |busy: f64, total: f64, steal: Option<f64>| HostSample {
        cpu: Some(CpuTimes {
            busy_seconds: busy,
            total_seconds: total,
            steal_seconds: steal,
        }),
        ..HostSample::default()
    };
    let mut a = sample(0.0, vec![]);
    a.host = host(10.0, 100.0, Some(1.0));
    // 2 s of CPU time over the second, 1.1 s busy, 0.5 s of it taken by
    // the hypervisor.
    let mut b = sample(1.0, vec![]);
    b.host = host(11.1, 102.0, Some(1.5));
    let mut c = sample(2.0, vec![]);
    c.host = host(11.1, 104.0, Some(1.5));
    let mut d = sample(3.0, vec![]);
    d.host = host(12.0, 106.0, None);
    let snaps = chain(&[a, b, c, d]);
    assert_eq!(snaps[0].host.cpu_steal_ratio, None);
    assert!((snaps[1].host.cpu_steal_ratio.unwrap() - 0.25).abs() < 1e-9);
    assert!((snaps[1].host.cpu_utilization_ratio.unwrap() - 0.55).abs() < 1e-9);
    assert_eq!(
        snaps[2].host.cpu_steal_ratio,
        Some(0.0),
        "an idle host has none"
    );
    assert_eq!(snaps[3].host.cpu_steal_ratio, None, "not reported");
}

#[test]
fn gpu_processes_get_comm_and_are_sorted_by_memory() {
    let mut s = sample(0.0, vec![job(process(10, 5, 0.0, vec![]), vec![])]);
    s.gpu = GpuReadout {
        nvml_up: true,
        gpus: vec![GpuSample {
            index: 0,
            up: true,
            clock_event_reasons: Some(0x1 | 0x40),
            processes: vec![
                GpuProcessSample {
                    pid: 77,
                    kind: GpuProcessKind::Compute,
                    memory_bytes: Some(10),
                    sm_utilization_ratio: Some(0.0),
                    memory_utilization_ratio: None,
                },
                GpuProcessSample {
                    pid: 10,
                    kind: GpuProcessKind::Compute,
                    memory_bytes: Some(1000),
                    sm_utilization_ratio: Some(0.5),
                    memory_utilization_ratio: None,
                },
            ],
            ..GpuSample::default()
        }],
        ..GpuReadout::default()
    };
    let snaps = chain(&[s]);
    let g = &snaps[0].gpus[0];
    assert_eq!(g.processes[0].pid, 10);
    assert_eq!(g.processes[0].comm, "p10");
    assert_eq!(g.processes[1].comm, "", "not visible in /proc");
    assert_eq!(
        g.clock_events.as_deref(),
        Some(
            &[
                ClockEventReason::GpuIdle,
                ClockEventReason::HwThermalSlowdown
            ][..]
        )
    );
}

#[test]
fn errors_accumulate_across_snapshots() {
    let mut a = sample(0.0, vec![]);
    a.errors.add(ErrorSource::ProcJob);
    let mut b = sample(1.0, vec![]);
    b.errors.add(ErrorSource::ProcJob);
    b.errors.add(ErrorSource::Nvml);
    let snaps = chain(&[a, b]);
    assert_eq!(snaps[1].errors_total.get(ErrorSource::ProcJob), 2);
    assert_eq!(snaps[1].errors_total.get(ErrorSource::Nvml), 1);
}

#[test]
fn carried_threads_keep_the_last_rates_and_the_next_read_rates_over_the_time_since() {
    // Read at 1 s and 2 s, carried at 3-5 s (its GPU busy), read at 6 s: the
    // loader thread used 2 s of CPU in the 4 s since the last read.
    let at = |t: f64, loader: f64, carried: bool| {
        let mut j = job(
            process(
                10,
                5,
                100.0 + t,
                vec![
                    thread(10, "python", 'S', 90.0),
                    thread(11, "loader", 'R', loader),
                ],
            ),
            vec![],
        );
        j.threads_carried = carried;
        sample(t, vec![j])
    };
    let samples = [
        at(1.0, 10.0, false),
        at(2.0, 10.9, false),
        at(3.0, 10.9, true),
        at(4.0, 10.9, true),
        at(5.0, 10.9, true),
        at(6.0, 12.9, false),
    ];
    let snaps = chain(&samples);
    let loader = |s: &Snapshot| s.jobs[0].top_threads[0].cpu_ratio;
    assert!((loader(&snaps[1]) - 0.9).abs() < 1e-9);
    for s in &snaps[2..5] {
        assert!((loader(s) - 0.9).abs() < 1e-9, "carried, not 0");
        assert_eq!(s.jobs[0].threads_read_seconds, Some(2.0));
        assert!(
            (s.jobs[0].cpu_cores.unwrap() - 1.0).abs() < 1e-9,
            "the process's own CPU is fresh"
        );
    }
    assert!(
        (loader(&snaps[5]) - 0.5).abs() < 1e-9,
        "2 s over 4 s, not over 1"
    );
    assert_eq!(snaps[5].jobs[0].threads_read_seconds, Some(6.0));
}
