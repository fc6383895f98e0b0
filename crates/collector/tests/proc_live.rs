//! `ProcReader` against the live `/proc` of the machine running the tests.

use std::io::{BufRead, BufReader, Lines, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

use collector::proc::ProcReader;
use collector::sample::{ErrorCounts, ErrorSource, ThreadSample};

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

/// A Python process with named threads: `burner` spins, `sleeper` sleeps,
/// `short` waits until a line on stdin ends it and starts `fresh` (same
/// thread count, a new tid).
const THREADS: &str = r#"
import ctypes, sys, threading, time
libc = ctypes.CDLL(None)
name = lambda n: libc.prctl(15, n.encode(), 0, 0, 0)
def burner():
    name("burner")
    while True:
        pass
named = threading.Semaphore(0)
def sleeper():
    name("sleeper")
    named.release()
    time.sleep(600)
go = threading.Event()
def short():
    name("short")
    named.release()
    go.wait()
def fresh():
    name("fresh")
    time.sleep(600)
for f in (burner, sleeper, short):
    threading.Thread(target=f, daemon=True).start()
# Ready once the sleepers sleep, not while one still waits for the GIL the
# burner holds to get there (it would read as running).
named.acquire()
named.acquire()
time.sleep(0.3)
print("ready", flush=True)
sys.stdin.readline()
t = threading.Thread(target=fresh, daemon=True)
go.set()
time.sleep(0.5)
t.start()
time.sleep(0.3)
print("swapped", flush=True)
sys.stdin.readline()
"#;

/// A Python process running `code`, once it printed "ready": its stdin,
/// the lines it prints next, and the process.
fn python(code: &str) -> (ChildStdin, Lines<BufReader<ChildStdout>>, Reaped) {
    let mut child = Command::new("python3")
        .args(["-c", code])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    let stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let child = Reaped(child);
    assert_eq!(lines.next().unwrap().unwrap(), "ready");
    (stdin, lines, child)
}

/// The thread called `name`.
fn named(threads: &[ThreadSample], name: &str) -> Option<ThreadSample> {
    threads.iter().find(|t| t.name == name).cloned()
}

/// The threads of the job leader `pid`, as `reader` reads them.
fn leader_threads(
    reader: &mut ProcReader,
    errors: &mut ErrorCounts,
    pid: u32,
) -> Vec<ThreadSample> {
    let jobs = reader.read_jobs(&[(pid, vec![0])], errors);
    jobs[0].leader.threads.clone()
}

#[test]
fn threads_read_between_samples_show_their_state_cpu_and_replacements() {
    let (mut stdin, mut lines, child) = python(THREADS);
    let pid = child.0.id();
    let mut reader = ProcReader::new("/proc").unwrap();
    let mut errors = ErrorCounts::default();
    let mut sample = || leader_threads(&mut reader, &mut errors, pid);
    let first = sample();
    assert_eq!(first.len(), 4, "{first:?}");
    // At least 1 s of samples; on a loaded host (other tests, builds) the
    // spinning thread gets less than a core, so up to 10 s for its 0.3 s.
    let mut last = first.clone();
    for i in 0..50 {
        std::thread::sleep(std::time::Duration::from_millis(200));
        last = sample();
        let used = named(&last, "burner").unwrap().cpu_seconds
            - named(&first, "burner").unwrap().cpu_seconds;
        if i >= 4 && used > 0.3 {
            break;
        }
    }
    let (b0, b1) = (
        named(&first, "burner").unwrap(),
        named(&last, "burner").unwrap(),
    );
    assert_eq!(b1.state, 'R');
    assert!(
        b1.cpu_seconds - b0.cpu_seconds > 0.3,
        "the spinning thread used {} s of CPU in 10 s",
        b1.cpu_seconds - b0.cpu_seconds
    );
    let (s0, s1) = (
        named(&first, "sleeper").unwrap(),
        named(&last, "sleeper").unwrap(),
    );
    assert_eq!((s0.state, s1.state), ('S', 'S'));
    assert_eq!(
        s1.cpu_seconds, s0.cpu_seconds,
        "a sleeping thread uses no CPU"
    );
    let short = named(&last, "short").unwrap();

    writeln!(stdin).unwrap();
    assert_eq!(lines.next().unwrap().unwrap(), "swapped");
    let threads = sample();
    assert_eq!(threads.len(), 4, "{threads:?}");
    let fresh = named(&threads, "fresh").expect("the new thread, at the same thread count");
    assert!(named(&threads, "short").is_none(), "the thread that ended");
    assert_ne!(fresh.tid, short.tid);
    assert_eq!(errors.get(ErrorSource::ProcJob), 0);
}

/// A Python process whose threads all sleep; a first line on stdin makes
/// `writer` write 4 KiB to /dev/null once (well under a clock tick of CPU),
/// a second one wakes `spinner`, which then spins.
const QUIET: &str = r#"
import ctypes, os, sys, threading
libc = ctypes.CDLL(None)
name = lambda n: libc.prctl(15, n.encode(), 0, 0, 0)
write, spin = threading.Event(), threading.Event()
def writer():
    name("writer")
    write.wait()
    fd = os.open("/dev/null", os.O_WRONLY)
    os.write(fd, b"x" * 4096)
    print("written", flush=True)
    threading.Event().wait()
def spinner():
    name("spinner")
    spin.wait()
    while True:
        pass
threading.Thread(target=writer, daemon=True).start()
threading.Thread(target=spinner, daemon=True).start()
print("ready", flush=True)
sys.stdin.readline()
write.set()
sys.stdin.readline()
spin.set()
threading.Event().wait()
"#;

#[test]
fn a_thread_that_runs_or_moves_bytes_in_a_quiet_process_is_seen_at_the_next_sample() {
    use std::time::Duration;

    let (mut stdin, mut lines, child) = python(QUIET);
    let pid = child.0.id();
    let mut reader = ProcReader::new("/proc").unwrap();
    let mut errors = ErrorCounts::default();
    let mut sample = || {
        let mut threads = leader_threads(&mut reader, &mut errors, pid);
        threads.sort_by(|a, b| a.name.cmp(&b.name));
        threads
    };
    let names = |threads: &[ThreadSample]| {
        threads
            .iter()
            .map(|t| (t.name.clone(), t.state))
            .collect::<Vec<_>>()
    };
    let asleep = vec![
        ("python3".to_owned(), 'S'),
        ("spinner".to_owned(), 'S'),
        ("writer".to_owned(), 'S'),
    ];
    // Until the threads that just started are all asleep.
    let mut first = sample();
    for _ in 0..100 {
        if names(&first) == asleep {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
        first = sample();
    }
    assert_eq!(names(&first), asleep);
    // Quiet from here on.
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(names(&sample()), asleep);
    }
    let thread = |threads: &[ThreadSample], name: &str| named(threads, name).unwrap();
    let before = sample();

    // Its CPU time moves by microseconds, not a tick: the bytes it wrote
    // are what make the process read.
    writeln!(stdin).unwrap();
    assert_eq!(lines.next().unwrap().unwrap(), "written");
    std::thread::sleep(Duration::from_millis(50));
    let written = sample();
    let (w0, w1) = (thread(&before, "writer"), thread(&written, "writer"));
    assert!(
        w1.cpu_seconds > w0.cpu_seconds,
        "the writer's CPU time: {} s, then {} s",
        w0.cpu_seconds,
        w1.cpu_seconds
    );

    writeln!(stdin).unwrap();
    // 0.1 s of CPU takes 0.1 s on an idle core; a loaded host (other tests,
    // builds) gives the spinner less of one, so it is given up to 5 s.
    let mut after = sample();
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(100));
        after = sample();
        if thread(&after, "spinner").cpu_seconds - thread(&before, "spinner").cpu_seconds > 0.1 {
            break;
        }
    }
    let (s0, s1) = (thread(&before, "spinner"), thread(&after, "spinner"));
    assert_eq!(s1.state, 'R', "{after:?}");
    assert!(
        s1.cpu_seconds - s0.cpu_seconds > 0.1,
        "the spinner used {} s of CPU in 5 s",
        s1.cpu_seconds - s0.cpu_seconds
    );
    assert_eq!(errors.get(ErrorSource::ProcJob), 0);
}

/// A Python process with a spinning thread; each line on stdin starts one
/// more sleeping thread.
const GROWING: &str = r#"
import ctypes, sys, threading, time
libc = ctypes.CDLL(None)
name = lambda n: libc.prctl(15, n.encode(), 0, 0, 0)
named = threading.Event()
def burner():
    name("burner")
    named.set()
    while True:
        pass
def late():
    name("late")
    time.sleep(600)
threading.Thread(target=burner, daemon=True).start()
named.wait()  # on a loaded host the new thread may not have run yet
print("ready", flush=True)
for line in sys.stdin:
    threading.Thread(target=late, daemon=True).start()
    time.sleep(0.2)
    print("started", flush=True)
"#;

#[test]
fn a_carried_jobs_threads_are_not_read_until_its_thread_count_changes() {
    use std::time::Duration;

    let (mut stdin, mut lines, child) = python(GROWING);
    let pid = child.0.id();
    let mut reader = ProcReader::new("/proc").unwrap();
    let mut errors = ErrorCounts::default();
    let holders = [(pid, vec![0])];
    let first = reader.read_jobs(&holders, &mut errors).remove(0);
    assert!(!first.threads_carried);
    // The burner's 0.1 s of CPU: 0.1 s on an idle core, up to 5 s on a
    // loaded host (other tests, builds).
    let mut carried = first.clone();
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(100));
        carried = reader
            .read_jobs_carrying(&holders, &[pid], &mut errors)
            .remove(0);
        if carried.leader.cpu_seconds > first.leader.cpu_seconds + 0.1 {
            break;
        }
    }
    assert!(carried.threads_carried);
    assert_eq!(
        named(&carried.leader.threads, "burner")
            .unwrap()
            .cpu_seconds,
        named(&first.leader.threads, "burner").unwrap().cpu_seconds,
        "carried as last read"
    );
    assert!(
        carried.leader.cpu_seconds > first.leader.cpu_seconds + 0.1,
        "the process itself is read every sample"
    );

    writeln!(stdin).unwrap();
    assert_eq!(lines.next().unwrap().unwrap(), "started");
    let changed = reader
        .read_jobs_carrying(&holders, &[pid], &mut errors)
        .remove(0);
    assert!(!changed.threads_carried, "a thread more: read");
    assert!(named(&changed.leader.threads, "late").is_some());
    assert!(
        named(&changed.leader.threads, "burner")
            .unwrap()
            .cpu_seconds
            > named(&first.leader.threads, "burner").unwrap().cpu_seconds + 0.1
    );
    let again = reader
        .read_jobs_carrying(&holders, &[pid], &mut errors)
        .remove(0);
    assert!(again.threads_carried, "the same threads: carried again");
    assert_eq!(errors.get(ErrorSource::ProcJob), 0);
}

#[test]
fn a_single_threaded_process_carried_while_asleep_is_read_once_it_runs() {
    use std::time::Duration;

    // One thread: sleeps on stdin, then spins.
    let (mut stdin, _lines, child) = python(
        "import sys\nprint('ready', flush=True)\nsys.stdin.readline()\nwhile True:\n    pass\n",
    );
    let pid = child.0.id();
    let mut reader = ProcReader::new("/proc").unwrap();
    let mut errors = ErrorCounts::default();
    let mut read = || {
        reader
            .read_jobs(&[(pid, vec![0])], &mut errors)
            .remove(0)
            .leader
    };
    let first = read();
    assert_eq!(first.threads.len(), 1);
    for _ in 0..4 {
        std::thread::sleep(Duration::from_millis(50));
        let again = read();
        assert_eq!(again.cpu_seconds, first.cpu_seconds);
        assert_eq!(again.state, 'S');
    }
    writeln!(stdin).unwrap();
    // 0.1 s of CPU: up to 5 s on a loaded host.
    let mut running = read();
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(100));
        running = read();
        if running.cpu_seconds > first.cpu_seconds + 0.1 {
            break;
        }
    }
    assert!(
        running.cpu_seconds > first.cpu_seconds + 0.1,
        "{} then {}",
        first.cpu_seconds,
        running.cpu_seconds
    );
    assert_eq!(running.state, 'R');
    assert_eq!(errors.get(ErrorSource::ProcJob), 0);
}
