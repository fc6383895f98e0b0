//! The daemon's side: starts the stack reader, gives each read its time,
//! kills the reader when a read overruns or it misbehaves, and keeps the
//! back-off.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use collector::stack_reader::{Budgets, Limit, start_ticks};
use diagnosis::stack_report::{Focus, ReadOutcome, StackReport, unavailable};

use super::backoff::BackOff;
use super::child::limit_name;
use super::limits::ReaderLimits;
use super::protocol::{MAX_REPLY, Reply, Request};
use collector::time::unix_now as now;

/// Longest wait for the report once the reads are done.
const SUMMING: Duration = Duration::from_secs(2);
/// What is kept of the reader's error output when it dies.
const STDERR_KEPT: u64 = 4096;

enum Line {
    Reply(Reply),
    Bad(String),
    Closed,
}

struct Reader {
    process: Child,
    stdin: ChildStdin,
    lines: Receiver<Line>,
}

/// Reads stacks through a contained child. One owner at a time.
pub struct ContainedReader {
    program: PathBuf,
    root: PathBuf,
    limits: ReaderLimits,
    budgets: Budgets,
    reader: Option<Reader>,
    backoff: BackOff,
    spies: usize,
}

/// Forwards the reader's reply lines, each at most [`MAX_REPLY`] bytes.
fn forward(stdout: impl Read, tx: mpsc::Sender<Line>) {
    let mut input = BufReader::new(stdout);
    loop {
        let mut line = Vec::new();
        let line = match input
            .by_ref()
            .take(MAX_REPLY as u64 + 1)
            .read_until(b'\n', &mut line)
        {
            Ok(0) | Err(_) => Line::Closed,
            Ok(_) if line.len() > MAX_REPLY => Line::Bad(format!("a reply over {MAX_REPLY} bytes")),
            Ok(_) => match serde_json::from_slice(&line) {
                Ok(reply) => Line::Reply(reply),
                Err(e) => Line::Bad(format!("an unreadable reply ({e})")),
            },
        };
        let last = !matches!(line, Line::Reply(_));
        crate::own_cost::charge(crate::own_cost::Stage::Stacks);
        if tx.send(line).is_err() || last {
            return;
        }
    }
}

impl ContainedReader {
    /// A reader of stacks under `root` (normally `/proc`); the child is
    /// started on first use.
    pub fn new(root: impl Into<PathBuf>, limits: ReaderLimits, budgets: Budgets) -> Self {
        ContainedReader {
            // The running binary itself, even if its file was replaced since.
            program: PathBuf::from("/proc/self/exe"),
            root: root.into(),
            limits,
            budgets,
            reader: None,
            backoff: BackOff::default(),
            spies: 0,
        }
    }

    pub fn root(&self) -> &std::path::Path {
        &self.root
    }

    /// The reader process's pid, while one runs.
    pub fn reader_pid(&self) -> Option<u32> {
        self.reader.as_ref().map(|r| r.process.id())
    }

    /// Processes the reader keeps a spy for.
    pub fn spies(&self) -> usize {
        self.spies
    }

    fn start(&mut self) -> std::io::Result<&mut Reader> {
        if self.reader.is_none() {
            let mut process = Command::new(&self.program)
                .arg0("stallwatch")
                .arg("stack-reader")
                .arg("--root")
                .arg(&self.root)
                .arg("--memory-bytes")
                .arg(self.limits.memory_bytes.to_string())
                .arg("--cpu-seconds")
                .arg(self.limits.cpu_seconds.to_string())
                .env_clear()
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()?;
            let stdin = process.stdin.take().expect("piped");
            let stdout = process.stdout.take().expect("piped");
            let (tx, lines) = mpsc::channel();
            let spawned = std::thread::Builder::new()
                .name("stack-replies".into())
                .spawn(move || forward(stdout, tx));
            if let Err(e) = spawned {
                let _ = process.kill();
                let _ = process.wait();
                return Err(e);
            }
            self.reader = Some(Reader {
                process,
                stdin,
                lines,
            });
        }
        Ok(self.reader.as_mut().expect("started above"))
    }

    /// Kills the reader (if any) and says how it ended.
    fn stop(&mut self) -> String {
        self.spies = 0;
        let Some(mut reader) = self.reader.take() else {
            return "no reader".into();
        };
        let _ = reader.process.kill();
        let status = reader.process.wait();
        let mut stderr = String::new();
        if let Some(err) = reader.process.stderr.take() {
            let _ = err.take(STDERR_KEPT).read_to_string(&mut stderr);
        }
        let how = match status {
            Ok(s) if s.signal() == Some(9) => "was stopped".to_owned(),
            Ok(s) => match s.signal() {
                Some(sig) => format!("died of signal {sig}"),
                None => format!("exited with {}", s.code().unwrap_or(-1)),
            },
            Err(e) => format!("could not be waited for ({e})"),
        };
        match last_words(&stderr) {
            Some(words) => format!("{how}: {words}"),
            None => how,
        }
    }

    /// Drops what the reader keeps for processes that exited (while it keeps any).
    pub fn prune(&mut self) {
        if self.spies == 0 {
            return;
        }
        let Some(reader) = self.reader.as_mut() else {
            return;
        };
        let sent = send(&mut reader.stdin, &Request::Prune);
        let answer = sent.ok().and_then(|()| {
            loop {
                match reader.lines.recv_timeout(SUMMING) {
                    Ok(Line::Reply(Reply::Pruned { spies })) => break Some(spies),
                    Ok(Line::Reply(_)) => continue,
                    _ => break None,
                }
            }
        });
        match answer {
            Some(spies) => self.spies = spies,
            None => {
                let how = self.stop();
                tracing::warn!(
                    "the stack reader {how} while dropping exited processes; a new one starts on the next read"
                );
            }
        }
    }

    /// Reads `pid`'s stacks `rate_hz` times a second for `duration` in the
    /// reader and sums them up; a process in back-off is not read.
    pub fn sample(
        &mut self,
        pid: u32,
        focus: Focus,
        rate_hz: f64,
        duration: Duration,
    ) -> StackReport {
        let started = now();
        let ticks = start_ticks(&self.root, pid);
        if let Some(ticks) = ticks
            && let Some(wait) = self.backoff.waiting(pid, ticks, Instant::now())
        {
            let mut report = unavailable(
                pid,
                ReadOutcome::BackedOff,
                format!(
                    "pid {pid} is read again in {} s: its last read was refused ({})",
                    wait.left.as_secs().max(1),
                    wait.why
                ),
                started,
            );
            report.focus = focus;
            return report;
        }
        let report = self.burst(pid, focus, rate_hz, duration, started);
        if let Some(ticks) = ticks {
            let refused = matches!(
                report.outcome,
                ReadOutcome::OverBudget | ReadOutcome::Failed
            ) || report
                .limits
                .iter()
                .any(|l| *l == limit_name(Limit::ThreadCycle));
            if refused {
                let wait = self
                    .backoff
                    .missed(pid, ticks, Instant::now(), report.summary.clone());
                tracing::info!(
                    pid,
                    wait_seconds = wait.as_secs(),
                    "stacks of pid {pid} not read again for {} s: {}",
                    wait.as_secs(),
                    report.summary
                );
            } else if report.outcome == ReadOutcome::Sampled {
                self.backoff.read(pid);
            }
        }
        report
    }

    fn burst(
        &mut self,
        pid: u32,
        focus: Focus,
        rate_hz: f64,
        duration: Duration,
        started: f64,
    ) -> StackReport {
        let failed = |detail: String| {
            let mut r = unavailable(pid, ReadOutcome::Failed, detail, started);
            r.focus = focus;
            r
        };
        let over = |limit: Limit, detail: String| {
            let mut r = unavailable(pid, ReadOutcome::OverBudget, detail, started);
            r.focus = focus;
            r.limits = vec![limit_name(limit)];
            r
        };
        let request = Request::Burst {
            pid,
            focus,
            rate_hz,
            duration_ms: u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
            budgets: self.budgets,
        };
        let limits = self.limits;
        let reader = match self.start() {
            Ok(r) => r,
            Err(e) => return failed(format!("cannot start the stack reader: {e}")),
        };
        if let Err(e) = send(&mut reader.stdin, &request) {
            let how = self.stop();
            return failed(format!("the stack reader {how} ({e})"));
        }
        let period = Duration::from_secs_f64(1.0 / rate_hz.max(0.1));
        let mut gap = limits.spy_timeout + period;
        let mut reads = 0;
        loop {
            let reader = self.reader.as_mut().expect("started above");
            match reader.lines.recv_timeout(gap) {
                Ok(Line::Reply(Reply::Read { reads: n })) => {
                    reads = n;
                    gap = period + limits.read_timeout;
                }
                Ok(Line::Reply(Reply::Summing)) => gap = SUMMING,
                Ok(Line::Reply(Reply::Report { report, spies })) => {
                    self.spies = spies;
                    return *report;
                }
                Ok(Line::Reply(Reply::Pruned { .. })) => {}
                Ok(Line::Bad(what)) => {
                    let how = self.stop();
                    return failed(format!(
                        "the stack reader sent {what} while reading pid {pid}, and {how}"
                    ));
                }
                Err(RecvTimeoutError::Timeout) => {
                    self.stop();
                    return if reads == 0 {
                        over(
                            Limit::ReadTime,
                            format!(
                                "pid {pid}'s stacks were not read: its first read took longer than {} ms \
                                 (stacks.spy_timeout), and the reader was stopped",
                                limits.spy_timeout.as_millis()
                            ),
                        )
                    } else {
                        over(
                            Limit::ReadTime,
                            format!(
                                "pid {pid}'s stacks were not read: read {} took longer than {} ms \
                                 (stacks.read_timeout), and the reader was stopped",
                                reads + 1,
                                limits.read_timeout.as_millis()
                            ),
                        )
                    };
                }
                Ok(Line::Closed) | Err(RecvTimeoutError::Disconnected) => {
                    let how = self.stop();
                    if how.contains("memory allocation of") {
                        return over(
                            Limit::Memory,
                            format!(
                                "pid {pid}'s stacks were not read: a read needed more than the reader's \
                                 {} MiB (stacks.reader_memory), and the reader ended",
                                limits.memory_bytes >> 20
                            ),
                        );
                    }
                    return failed(format!("the stack reader {how} while reading pid {pid}"));
                }
            }
        }
    }
}

/// What the reader said last before it ended: the failed allocation, the
/// panic's message (the line after `panicked at`), or its last line.
fn last_words(stderr: &str) -> Option<String> {
    let lines: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let words = if let Some(alloc) = lines.iter().find(|l| l.contains("memory allocation of")) {
        (*alloc).to_owned()
    } else if let Some(at) = lines.iter().position(|l| l.contains("panicked at")) {
        let place = lines[at]
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .trim_end_matches(':');
        let message = lines.get(at + 1).copied().unwrap_or("?");
        format!("panicked ({message}, at {place})")
    } else {
        (*lines.last()?).to_owned()
    };
    Some(words.chars().take(300).collect())
}

fn send(stdin: &mut ChildStdin, request: &Request) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(request).map_err(std::io::Error::other)?;
    line.push(b'\n');
    stdin.write_all(&line)?;
    stdin.flush()
}

impl Drop for ContainedReader {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::last_words;

    #[test]
    fn the_readers_last_words_name_what_ended_it() {
        let panic = "\nthread 'main' (30413) panicked at /root/.cargo/registry/src/x/py-spy-0.4.3/src/python_interpreters.rs:821:14:\nattempt to add with overflow\nnote: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n";
        assert_eq!(
            last_words(panic).unwrap(),
            "panicked (attempt to add with overflow, at python_interpreters.rs:821:14)"
        );
        assert_eq!(
            last_words("memory allocation of 4096 bytes failed\n").unwrap(),
            "memory allocation of 4096 bytes failed"
        );
        assert_eq!(last_words("a\nb\n\n").unwrap(), "b");
        assert_eq!(last_words(""), None);
    }
}
