//! The reader: spies kept per process, bursts of reads at a fixed rate.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use py_spy::config::LockingStrategy;
use py_spy::{Config, PythonSpy, StackTrace};

use super::budget::{self, Budgets, Found, Limit};
use super::burst::{BurstOptions, Sampled, Unavailable};
use super::pthread::TidFinder;
use super::raw::RawThread;
use super::tids::TidMap;
use super::{access, frames};

/// A spy and the process it was made for.
struct Spy {
    start_ticks: u64,
    spy: PythonSpy,
    /// Tids from `pthread_t`s, for interpreters that keep no native id,
    /// and the job's own tids and main thread they are checked against.
    finder: TidFinder,
    own_tids: Option<(std::collections::HashSet<u32>, u32)>,
}

/// CPython keeps each thread's Linux tid from 3.11 on; before, it is found
/// from the thread's `pthread_t` (`pthread.rs`).
fn keeps_native_ids(major: u64, minor: u64) -> bool {
    (major, minor) >= (3, 11)
}

/// Reads Python stacks. Not `Sync`: one thread owns it.
pub struct StackReader {
    root: PathBuf,
    spies: HashMap<u32, Spy>,
    budgets: Budgets,
}

/// `comm`, state and start time (clock ticks since boot) from a
/// `stat` text.
fn parse_stat(text: &str) -> Option<(String, char, u64)> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_owned();
    let mut rest = text.get(close + 2..)?.split(' ');
    let state = rest.next()?.chars().next()?;
    // After the state, start time is the 19th field (field 22 of stat).
    let start = rest.nth(18)?.parse().ok()?;
    Some((comm, state, start))
}

fn read_stat(path: &Path) -> Option<(String, char, u64)> {
    parse_stat(&std::fs::read_to_string(path).ok()?)
}

/// `pid`'s start time (clock ticks since boot), while it runs.
pub fn start_ticks(root: &Path, pid: u32) -> Option<u64> {
    read_stat(&root.join(pid.to_string()).join("stat"))
        .filter(|(_, state, _)| *state != 'Z')
        .map(|(_, _, start)| start)
}

/// The py-spy release the reader is built with (pinned in Cargo.toml).
pub const PY_SPY: &str = "0.4.3";

/// The most threads py-spy walks in one read.
const WALKED_THREADS: usize = 4096;

/// Whether `pid` has more threads than py-spy walks (counting no further).
fn over_walked_threads(root: &Path, pid: u32) -> bool {
    std::fs::read_dir(root.join(pid.to_string()).join("task"))
        .is_ok_and(|d| d.take(WALKED_THREADS + 1).count() > WALKED_THREADS)
}

/// The limit behind one of py-spy's own walk limits, if `e` is one: a
/// thread list longer than 4,096 entries in a process with fewer tasks than
/// that loops back on itself.
fn walk_limit(e: &anyhow::Error, root: &Path, pid: u32) -> Option<Limit> {
    let text = format!("{e:#}");
    if text.contains("Max thread recursion depth reached") {
        return Some(if over_walked_threads(root, pid) {
            Limit::Threads
        } else {
            Limit::ThreadCycle
        });
    }
    text.contains("Max frame recursion depth reached")
        .then_some(Limit::Frames)
}

fn now_seconds() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// py-spy's errors are `anyhow` chains: find the OS error, if any.
fn io_cause(e: &anyhow::Error) -> Option<&io::Error> {
    e.chain().find_map(|c| c.downcast_ref::<io::Error>())
}

impl StackReader {
    /// Reads under `root` (normally `/proc`). py-spy itself reads the
    /// process's memory and binaries through `/proc/<pid>`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        StackReader {
            root: root.into(),
            spies: HashMap::new(),
            budgets: Budgets::default(),
        }
    }

    /// Reads from now on are cut to `budgets` (the defaults otherwise).
    pub fn set_budgets(&mut self, budgets: Budgets) {
        self.budgets = budgets;
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Processes a spy is kept for.
    pub fn spies(&self) -> usize {
        self.spies.len()
    }

    /// Drops the spies of processes that exited (or whose pid was reused).
    pub fn prune(&mut self) {
        let root = self.root.clone();
        self.spies.retain(|pid, s| {
            read_stat(&root.join(pid.to_string()).join("stat"))
                .is_some_and(|(_, state, start)| start == s.start_ticks && state != 'Z')
        });
    }

    fn classify(&self, e: &anyhow::Error, pid: u32, comm: &str) -> Unavailable {
        let text = format!("{e:#}");
        let gone = read_stat(&self.root.join(pid.to_string()).join("stat"))
            .is_none_or(|(_, state, _)| state == 'Z');
        if gone {
            return access::exited(pid, comm);
        }
        if let Some(limit) = walk_limit(e, &self.root, pid) {
            return Unavailable::OverBudget(limit, over_walk(limit, pid, comm));
        }
        if let Some(at) = text.find("Unsupported version of Python") {
            let version = text[at..]
                .trim_start_matches("Unsupported version of Python")
                .trim_start_matches(':')
                .split_whitespace()
                .next()
                .unwrap_or("?");
            return Unavailable::UnsupportedPython(format!(
                "pid {pid} ({comm}) runs Python {version}, which this version of stallwatch cannot read \
                 (CPython 2.3-2.7 and 3.3-3.15 are supported)"
            ));
        }
        if io_cause(e).is_some_and(|io| matches!(io.raw_os_error(), Some(1 | 13)))
            || text.contains("Permission denied")
            || text.contains("Operation not permitted")
        {
            return Unavailable::NoPermission(access::no_permission(&self.root, pid, comm));
        }
        let first = text.lines().next().unwrap_or("unknown error");
        Unavailable::Failed(format!(
            "cannot read pid {pid} ({comm})'s Python stacks: {first}"
        ))
    }

    /// The spy for `pid`, made on first use (it maps the interpreter's
    /// binaries and looks up its symbols: milliseconds to a second).
    fn spy(&mut self, pid: u32) -> Result<(&mut Spy, String), Unavailable> {
        let stat = read_stat(&self.root.join(pid.to_string()).join("stat"));
        let Some((comm, state, start)) = stat.filter(|s| s.1 != 'Z') else {
            self.spies.remove(&pid);
            return Err(access::exited(pid, "?"));
        };
        let _ = state;
        if self.spies.get(&pid).is_some_and(|s| s.start_ticks != start) {
            self.spies.remove(&pid);
        }
        if !self.spies.contains_key(&pid) {
            access::check(&self.root, pid, &comm)?;
            // py-spy cannot read such a process, and finds that out only
            // after scanning its memory against every mapping (a thread
            // stack each): seconds of a core. Refused up front instead.
            if over_walked_threads(&self.root, pid) {
                return Err(Unavailable::OverBudget(
                    Limit::Threads,
                    over_walk(Limit::Threads, pid, &comm),
                ));
            }
            let config = Config {
                blocking: LockingStrategy::NonBlocking,
                native: false,
                collect_thread_names: false,
                ..Config::default()
            };
            let mut spy = PythonSpy::new(pid as py_spy::Pid, &config)
                .map_err(|e| self.classify(&e, pid, &comm))?;
            // A thread whose tid cannot be found is still shown, by the
            // name Python gave it (looked up once per thread by py-spy).
            spy.config.collect_thread_names =
                !keeps_native_ids(spy.version.major, spy.version.minor);
            self.spies.insert(
                pid,
                Spy {
                    start_ticks: start,
                    spy,
                    finder: TidFinder::default(),
                    own_tids: None,
                },
            );
        }
        let spy = self.spies.get_mut(&pid).expect("inserted above");
        Ok((spy, comm))
    }

    /// One read: every Python thread's stack, cut to the budgets, with
    /// state from `/proc`.
    fn read_once(
        root: &Path,
        pid: u32,
        spy: &mut Spy,
        tids: &mut TidMap,
        budgets: &Budgets,
    ) -> Result<(Vec<RawThread>, std::collections::HashSet<Limit>), anyhow::Error> {
        let traces: Vec<StackTrace> = spy.spy.get_stack_traces()?;
        let from_pthread = Self::tids_from_pthreads(root, pid, spy, &traces, tids, budgets);
        let mut native = HashMap::with_capacity(traces.len().min(budgets.threads + 1));
        let found = traces
            .into_iter()
            .map(|trace| {
                let tid = trace
                    .os_thread_id
                    .and_then(|t| u32::try_from(t).ok())
                    .or_else(|| from_pthread.get(&trace.thread_id).copied());
                native.insert(trace.thread_id, (tid, trace.active, trace.thread_name));
                Found {
                    python_id: trace.thread_id,
                    owns_gil: trace.owns_gil,
                    // One frame and one character past the budgets, so
                    // that the cut sees what it cuts.
                    frames: trace
                        .frames
                        .iter()
                        .take(budgets.frames + 1)
                        .map(|f| frames::frame(f, budgets.name_chars + 1))
                        .collect(),
                }
            })
            .collect();
        let (kept, hit) = budget::cut(found, budgets);
        let task = root.join(pid.to_string()).join("task");
        let mut out = Vec::with_capacity(kept.len());
        let mut refreshed = false;
        for thread in kept {
            let Some((ns_tid, active, python_name)) = native.remove(&thread.python_id) else {
                continue;
            };
            let Some(ns_tid) = ns_tid else {
                // No tid: kept with py-spy's own judgement of whether it
                // runs, under the name Python gave it.
                out.push(RawThread {
                    tid: 0,
                    name: unknown_tid_name(python_name, budgets.name_chars),
                    state: if active { 'R' } else { 'S' },
                    owns_gil: thread.owns_gil,
                    frames: thread.frames,
                });
                continue;
            };
            let mut tid = tids.host_tid(ns_tid);
            if tid.is_none() && !refreshed {
                *tids = TidMap::read(root, pid);
                refreshed = true;
                tid = tids.host_tid(ns_tid);
            }
            let Some(tid) = tid else { continue };
            // A thread that ended since the read is left out.
            let Some((name, state, _)) = read_stat(&task.join(tid.to_string()).join("stat")) else {
                continue;
            };
            out.push(RawThread {
                tid,
                name,
                state,
                owns_gil: thread.owns_gil,
                frames: thread.frames,
            });
        }
        Ok((out, hit))
    }

    /// The job's own tids of the threads py-spy gave none (CPython before
    /// 3.11), from their `pthread_t`s; at most as many as a read keeps.
    fn tids_from_pthreads(
        root: &Path,
        pid: u32,
        spy: &mut Spy,
        traces: &[StackTrace],
        tids: &TidMap,
        budgets: &Budgets,
    ) -> HashMap<u64, u32> {
        let pthreads: Vec<u64> = traces
            .iter()
            .filter(|t| t.os_thread_id.is_none())
            .map(|t| t.thread_id)
            .take(budgets.threads + 1)
            .collect();
        if pthreads.is_empty() {
            return HashMap::new();
        }
        // The job's own tids, kept across reads and read again only when a
        // thread is not among them (a thread made since); looked through
        // again only where they changed.
        let found = match &spy.own_tids {
            Some((own, main)) => spy.finder.find(&spy.spy.process, &pthreads, own, *main),
            None => HashMap::new(),
        };
        if found.len() == pthreads.len() {
            return found;
        }
        let fresh = tids.own_tids(root, pid);
        if spy.own_tids.as_ref() == Some(&fresh) {
            return found;
        }
        let (own, main) = spy.own_tids.insert(fresh);
        spy.finder.find(&spy.spy.process, &pthreads, own, *main)
    }

    /// Reads `pid`'s stacks `rate_hz` times a second for `duration`. The
    /// process is never stopped; a read that fails is dropped, and the
    /// burst ends early when the process exits.
    /// `on_read` is called after each read (kept or dropped) with the reads
    /// so far.
    pub fn burst(
        &mut self,
        pid: u32,
        options: BurstOptions,
        mut on_read: impl FnMut(usize),
    ) -> Result<Sampled, Unavailable> {
        let root = self.root.clone();
        let budgets = self.budgets;
        let (spy, comm) = self.spy(pid)?;
        let spy: &mut Spy = spy;
        // The burst's time starts once the spy is made (that can take a
        // while on a loaded host), so it always gets its reads.
        let started = now_seconds();
        let clock = Instant::now();
        let python_version = spy.spy.version.to_string();
        let mut tids = TidMap::read(&root, pid);
        let period = Duration::from_secs_f64(1.0 / options.rate_hz.max(0.1));
        let mut reads = Vec::new();
        let mut read_times = Vec::new();
        let mut dropped = 0;
        let mut exited = false;
        let mut next = clock;
        let mut first_error = None;
        let mut limits = std::collections::BTreeSet::new();
        let mut bytes = 0usize;
        while clock.elapsed() < options.duration {
            let before = clock.elapsed();
            match Self::read_once(&root, pid, spy, &mut tids, &budgets) {
                Ok((threads, hit)) => {
                    // The read's time: halfway through it.
                    read_times.push((before + clock.elapsed()).as_secs_f64() / 2.0);
                    limits.extend(hit);
                    bytes += threads
                        .iter()
                        .map(|t| budget::text_bytes(&t.frames))
                        .sum::<usize>();
                    reads.push(threads);
                    if bytes > budgets.burst_bytes {
                        limits.insert(Limit::BurstBytes);
                        on_read(reads.len() + dropped as usize);
                        break;
                    }
                }
                Err(e) => {
                    if !root.join(pid.to_string()).join("stat").exists() {
                        exited = true;
                        break;
                    }
                    dropped += 1;
                    // One of py-spy's walk limits: every read would walk as
                    // far again, so the burst ends here.
                    let walked = walk_limit(&e, &root, pid);
                    first_error.get_or_insert(e);
                    if let Some(limit) = walked {
                        limits.insert(limit);
                        on_read(reads.len() + dropped as usize);
                        break;
                    }
                }
            }
            on_read(reads.len() + dropped as usize);
            next += period;
            let now = Instant::now();
            if next > now {
                std::thread::sleep(next - now);
            } else {
                next = now;
            }
        }
        if exited {
            self.spies.remove(&pid);
        }
        if !exited && !reads.is_empty() && reads.iter().all(Vec::is_empty) {
            return Err(Unavailable::NoThreads(format!(
                "pid {pid} ({comm}) runs Python {python_version}, but none of {} reads found a \
                 Python thread in it: the interpreter is starting or ending, or this build's \
                 layout is not one py-spy {PY_SPY} knows",
                reads.len()
            )));
        }
        if reads.is_empty() {
            if exited {
                return Err(access::exited(pid, &comm));
            }
            if let Some(e) = first_error {
                return Err(self.classify(&e, pid, &comm));
            }
        }
        Ok(Sampled {
            python_version,
            started,
            duration_seconds: clock.elapsed().as_secs_f64(),
            reads,
            read_times,
            dropped,
            exited,
            limits,
        })
    }
}

/// A thread whose tid is unknown goes by the name Python gave it (cut to
/// the name budget), which the report marks as such.
fn unknown_tid_name(python_name: Option<String>, name_chars: usize) -> String {
    let name: String = python_name
        .unwrap_or_default()
        .chars()
        .filter(|c| !c.is_control())
        .take(name_chars)
        .collect();
    if name.is_empty() {
        "unnamed Python thread".to_owned()
    } else {
        name
    }
}

/// Why a read that met one of py-spy's walk limits was refused.
fn over_walk(limit: Limit, pid: u32, comm: &str) -> String {
    let what = match limit {
        Limit::ThreadCycle => {
            "its interpreter's thread list loops back on itself (more than 4,096 entries in a \
             process with fewer threads)"
        }
        Limit::Threads => "it has more than 4,096 threads (py-spy walks 4,096 at most)",
        _ => "a thread's stack is deeper than 4,096 frames or its frame list loops back on itself",
    };
    format!("pid {pid} ({comm})'s stacks were not read: {what}")
}

#[cfg(test)]
mod tests {
    use super::{Limit, PY_SPY, StackReader, Unavailable, parse_stat};

    fn reader_with(pid: u32, state: char) -> (tempfile::TempDir, StackReader) {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join(pid.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        let stat = format!("{pid} (python3) {state} 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 500 0 0");
        std::fs::write(dir.join("stat"), stat).unwrap();
        let reader = StackReader::new(root.path());
        (root, reader)
    }

    #[test]
    fn py_spys_errors_become_plain_answers() {
        let (_root, reader) = reader_with(42, 'S');
        let e = anyhow::anyhow!("Unsupported version of Python: 3.16.0a1");
        match reader.classify(&e, 42, "python3") {
            Unavailable::UnsupportedPython(why) => {
                assert!(
                    why.contains("Python 3.16.0a1") && why.contains("3.3-3.15"),
                    "{why}"
                )
            }
            other => panic!("{other:?}"),
        }
        let e = anyhow::Error::new(std::io::Error::from_raw_os_error(1))
            .context("Failed to copy PyThreadState");
        assert!(matches!(
            reader.classify(&e, 42, "python3"),
            Unavailable::NoPermission(_)
        ));
        let e = anyhow::anyhow!("Failed to find python version from target process");
        match reader.classify(&e, 42, "python3") {
            Unavailable::Failed(why) => {
                assert!(why.contains("Failed to find python version"), "{why}")
            }
            other => panic!("{other:?}"),
        }
        // Whatever the error, a process that is gone (or a zombie) exited.
        let (_root, reader) = reader_with(43, 'Z');
        assert!(matches!(
            reader.classify(&e, 43, "python3"),
            Unavailable::Exited(_)
        ));
        assert!(matches!(
            reader.classify(&e, 44, "python3"),
            Unavailable::Exited(_)
        ));
    }

    #[test]
    fn a_process_with_more_threads_than_py_spy_walks_is_refused_before_any_read() {
        let (root, mut reader) = reader_with(42, 'S');
        let dir = root.path().join("42");
        std::fs::write(
            dir.join("maps"),
            "7f0000000000-7f0000001000 r-xp 00000000 08:01 1 /usr/bin/python3.11\n",
        )
        .unwrap();
        for tid in 0..4096 {
            std::fs::create_dir_all(dir.join("task").join(tid.to_string())).unwrap();
        }
        // 4,096 threads: py-spy is asked (and fails here, as the fake
        // process has no memory to read).
        match reader.spy(42) {
            Err(Unavailable::OverBudget(..)) => panic!("refused at 4,096 threads"),
            Err(_) => {}
            Ok(_) => panic!("a spy for a fake process"),
        }
        std::fs::create_dir_all(dir.join("task").join("4096")).unwrap();
        match reader.spy(42) {
            Err(Unavailable::OverBudget(Limit::Threads, why)) => {
                assert!(why.contains("more than 4,096 threads"), "{why}")
            }
            Err(other) => panic!("{other:?}"),
            Ok(_) => panic!("a spy for 4,097 threads"),
        }
    }

    #[test]
    fn the_named_py_spy_is_the_one_cargo_pins() {
        let manifest = include_str!("../../../../Cargo.toml");
        let pin = format!("py-spy = {{ version = \"={PY_SPY}\"");
        assert!(manifest.contains(&pin), "Cargo.toml does not pin {pin}");
    }

    #[test]
    fn stat_gives_name_state_and_start() {
        let text = "4242 (py map) worker) R 1 4242 4242 0 -1 4194304 100 0 0 0 5 1 0 0 20 0 3 0 98765 1000 50 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        assert_eq!(
            parse_stat(text),
            Some(("py map) worker".into(), 'R', 98765))
        );
        assert_eq!(parse_stat("garbage"), None);
    }
}
