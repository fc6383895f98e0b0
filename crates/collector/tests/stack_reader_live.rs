//! The stack reader against real processes: a Python job whose hot
//! function is known, a program that is not Python, a process that exited.

use std::process::{Child, Command};
use std::time::Duration;

use collector::stack_reader::{BurstOptions, StackReader, Unavailable};

struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

const SCRIPT: &str = r#"
import threading, time

def decode_image(n):
    total = 0
    for i in range(n):
        total += i * i
    return total

def spin():
    while True:
        decode_image(10000)

threading.Thread(target=spin, daemon=True).start()
print("ready", flush=True)
while True:
    time.sleep(0.5)
"#;

fn python_job(dir: &std::path::Path) -> Kill {
    let script = dir.join("data.py");
    std::fs::write(&script, SCRIPT).unwrap();
    let mut child = Command::new("python3")
        .arg(&script)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs");
    // Wait for "ready": the interpreter and the thread are up.
    use std::io::BufRead;
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready");
    Kill(child)
}

fn options(ms: u64) -> BurstOptions {
    BurstOptions {
        rate_hz: 20.0,
        duration: Duration::from_millis(ms),
    }
}

#[test]
fn reads_the_hot_function_of_a_python_thread_without_directories() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("alice-secret-project");
    std::fs::create_dir(&secret).unwrap();
    let job = python_job(&secret);
    let pid = job.0.id();
    let mut reader = StackReader::new("/proc");
    let burst = reader
        .burst(pid, options(1500), |_| {})
        .expect("stacks read");
    assert!(
        burst.python_version.starts_with('3'),
        "{}",
        burst.python_version
    );
    assert!(burst.reads.len() >= 15, "{} reads", burst.reads.len());
    let hot = burst
        .reads
        .iter()
        .flatten()
        .filter(|t| {
            t.frames
                .first()
                .is_some_and(|f| f.function == "decode_image")
        })
        .count();
    assert!(
        hot >= burst.reads.len() / 2,
        "decode_image leaf in {hot} of {} reads",
        burst.reads.len()
    );
    let frame = burst
        .reads
        .iter()
        .flatten()
        .flat_map(|t| &t.frames)
        .find(|f| f.function == "decode_image")
        .unwrap();
    assert_eq!(frame.file, "data.py");
    assert!(!frame.library && frame.line > 0);
    // Every tid is one of the process's real threads, named from /proc.
    let threads: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_str().unwrap().parse().unwrap())
        .collect();
    for t in burst.reads.iter().flatten() {
        assert!(
            threads.contains(&t.tid),
            "tid {} not in /proc/{pid}/task",
            t.tid
        );
        assert_eq!(t.name, "python3");
    }
    let text = format!("{burst:?}");
    assert!(!text.contains("alice-secret-project") && !text.contains(dir.path().to_str().unwrap()));
    // The spy is kept for the next burst, and dropped once the process is gone.
    assert_eq!(reader.spies(), 1);
    assert!(reader.burst(pid, options(200), |_| {}).is_ok());
    assert_eq!(reader.spies(), 1);
    drop(job);
    reader.prune();
    assert_eq!(reader.spies(), 0);
}

#[test]
fn a_program_that_is_not_python_says_so() {
    let sleeper = Kill(Command::new("sleep").arg("30").spawn().unwrap());
    std::thread::sleep(Duration::from_millis(100));
    let mut reader = StackReader::new("/proc");
    match reader.burst(sleeper.0.id(), options(200), |_| {}) {
        Err(Unavailable::NotPython(why)) => assert!(why.contains("not a Python process"), "{why}"),
        other => panic!("expected NotPython, got {other:?}"),
    }
    assert_eq!(reader.spies(), 0);
}

#[test]
fn a_process_that_exited_says_so() {
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    let mut reader = StackReader::new("/proc");
    match reader.burst(pid, options(200), |_| {}) {
        Err(Unavailable::Exited(why)) => assert!(why.contains("exited"), "{why}"),
        other => panic!("expected Exited, got {other:?}"),
    }
}

#[test]
fn a_process_exiting_mid_burst_keeps_what_was_read() {
    let dir = tempfile::tempdir().unwrap();
    let mut job = python_job(dir.path());
    let pid = job.0.id();
    let mut reader = StackReader::new("/proc");
    // The spy is made first, so the burst below starts reading at once.
    reader
        .burst(pid, options(100), |_| {})
        .expect("a first read");
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(600));
        let _ = job.0.kill();
        let _ = job.0.wait();
    });
    let burst = reader
        .burst(pid, options(3000), |_| {})
        .expect("reads before the exit are kept");
    killer.join().unwrap();
    assert!(burst.exited);
    assert!(!burst.reads.is_empty());
    assert!(burst.duration_seconds < 2.5, "{}", burst.duration_seconds);
    assert_eq!(reader.spies(), 0);
}
