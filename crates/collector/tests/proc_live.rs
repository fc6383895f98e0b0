//! `ProcReader` against the live `/proc` of the machine running the tests.

use std::process::{Child, Command};
use std::time::{SystemTime, UNIX_EPOCH};

use collector::proc::ProcReader;
use collector::sample::{ErrorCounts, ErrorSource};

/// Kills and reaps the child however the test ends.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn now_seconds() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

#[test]
fn own_child_is_a_descendant_with_its_real_comm() {
    let child = Reaped(
        Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep"),
    );
    let child_pid = child.0.id();
    let me = std::process::id();

    let mut reader = ProcReader::new("/proc").unwrap();
    let mut errors = ErrorCounts::default();
    let jobs = reader.read_jobs(&[(me, vec![0])], &mut errors);
    assert_eq!(jobs.len(), 1);
    let job = &jobs[0];

    assert_eq!(job.leader.id.pid, me);
    assert!(!job.leader.threads.is_empty());
    assert!(job.leader.threads.iter().any(|t| t.tid == me));
    assert!(job.leader.rss_bytes > 0);
    assert!(job.leader.io.is_some(), "a process may read its own io");
    let started = job.leader.start_time_seconds;
    assert!(started > reader.boot_time_seconds() as f64 && started <= now_seconds() + 1.0);

    // `sleep` was forked by this test's thread, not the main thread: only a
    // walk over every thread's `children` finds it.
    let sleeper = job
        .descendants
        .iter()
        .find(|p| p.id.pid == child_pid)
        .unwrap_or_else(|| panic!("{child_pid} not among {:?}", job.descendants));
    assert_eq!(sleeper.comm, "sleep");
    assert_eq!(sleeper.ppid, me);
    assert_eq!(errors.get(ErrorSource::ProcJob), 0);
}

#[test]
fn live_host_numbers_are_plausible() {
    let reader = ProcReader::new("/proc").unwrap();
    let mut errors = ErrorCounts::default();
    let host = reader.read_host(&mut errors);

    assert!(!host.cores.is_empty());
    assert_eq!(host.online_cpus, Some(host.cores.len() as u32));
    let cpu = host.cpu.unwrap();
    assert!(cpu.total_seconds > 0.0 && cpu.busy_seconds <= cpu.total_seconds);
    let memory = host.memory.unwrap();
    assert!(memory.total_bytes > 0 && memory.available_bytes <= memory.total_bytes);
    for ratio in [
        host.pressure.cpu_some,
        host.pressure.io_some,
        host.pressure.memory_some,
    ]
    .into_iter()
    .flatten()
    {
        assert!((0.0..=1.0).contains(&ratio), "{ratio}");
    }
    assert_eq!(errors.get(ErrorSource::ProcHost), 0);
}

#[test]
fn zombie_child_is_read_without_errors() {
    let child = Reaped(Command::new("true").spawn().expect("spawn true"));
    let pid = child.0.id();
    let stat = format!("/proc/{pid}/stat");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !std::fs::read_to_string(&stat).is_ok_and(|s| s.contains(") Z ")) {
        assert!(
            std::time::Instant::now() < deadline,
            "{pid} never became a zombie"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }

    let mut reader = ProcReader::new("/proc").unwrap();
    let mut errors = ErrorCounts::default();
    let jobs = reader.read_jobs(&[(std::process::id(), vec![0])], &mut errors);
    let zombie = jobs[0].descendants.iter().find(|p| p.id.pid == pid);
    assert_eq!(zombie.map(|p| p.state), Some('Z'));
    assert_eq!(errors.get(ErrorSource::ProcJob), 0);
}

#[test]
fn a_child_started_later_is_found_within_a_few_samples() {
    let mut reader = ProcReader::new("/proc").unwrap();
    let mut errors = ErrorCounts::default();
    let me = std::process::id();
    let has = |jobs: &[collector::sample::JobSample], pid: u32| {
        jobs[0].descendants.iter().any(|p| p.id.pid == pid)
    };
    reader.read_jobs(&[(me, vec![0])], &mut errors);
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let found = (0..6).any(|_| has(&reader.read_jobs(&[(me, vec![0])], &mut errors), child.id()));
    assert!(found, "a new child must be found within 5 samples");
    child.kill().unwrap();
    child.wait().unwrap();
    // Gone at once: its own files are read every sample.
    assert!(!has(
        &reader.read_jobs(&[(me, vec![0])], &mut errors),
        child.id()
    ));
}
