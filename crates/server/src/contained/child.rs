//! `stallwatch stack-reader`: the child that reads jobs' stacks for the
//! daemon (and for `stallwatch stacks` and `check`). It limits itself,
//! then answers requests on stdin until stdin closes.

use std::io::{BufRead, Write};
use std::process::ExitCode;
use std::time::Duration;

use collector::stack_reader::{BurstOptions, Limit, Sampled, StackReader, Unavailable};
use diagnosis::stack_report::{
    Burst, CodeFrame, Focus, ReadOutcome, StackReport, ThreadRead, aggregate, unavailable,
};

use super::limits;
use super::protocol::{MAX_REQUEST, Reply, Request};
use crate::cli::ReaderArgs;
use collector::time::unix_now as now;

/// A limit's name as the report carries it (`thread_cycle`).
pub fn limit_name(limit: Limit) -> String {
    serde_json::to_value(limit)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// Sums up one burst, or says why there is none.
pub fn to_report(
    pid: u32,
    focus: Focus,
    result: Result<Sampled, Unavailable>,
    started: f64,
    budgets: &collector::stack_reader::Budgets,
) -> StackReport {
    match result {
        Ok(burst) => {
            let reads: Vec<Vec<ThreadRead>> = burst
                .reads
                .iter()
                .map(|read| {
                    read.iter()
                        .map(|t| ThreadRead {
                            pid,
                            tid: t.tid,
                            name: t.name.clone(),
                            state: t.state,
                            owns_gil: t.owns_gil,
                            frames: t
                                .frames
                                .iter()
                                .map(|f| CodeFrame {
                                    function: f.function.clone(),
                                    file: f.file.clone(),
                                    line: f.line,
                                    library: f.library,
                                })
                                .collect(),
                        })
                        .collect()
                })
                .collect();
            let mut report = aggregate(
                &Burst {
                    pid,
                    python_version: Some(burst.python_version.clone()),
                    time: burst.started,
                    duration_seconds: burst.duration_seconds,
                    reads: &reads,
                    times: &burst.read_times,
                    dropped: burst.dropped,
                },
                focus,
            );
            let mut notes = Vec::new();
            if burst.exited {
                notes.push(format!("pid {pid} exited during the burst"));
            }
            if !burst.limits.is_empty() {
                let words: Vec<String> = burst.limits.iter().map(|l| l.words(budgets)).collect();
                notes.push(format!("reads cut to {}", words.join(", ")));
            }
            if let Some(d) = report.detail.take() {
                notes.push(d);
            }
            report.detail = (!notes.is_empty()).then(|| notes.join("; "));
            report.limits = burst.limits.iter().copied().map(limit_name).collect();
            report
        }
        Err(why) => {
            let (outcome, limit) = match &why {
                Unavailable::NotPython(_) => (ReadOutcome::NotPython, None),
                Unavailable::UnsupportedPython(_) => (ReadOutcome::UnsupportedPython, None),
                Unavailable::FreeThreaded(_) => (ReadOutcome::FreeThreaded, None),
                Unavailable::NoThreads(_) => (ReadOutcome::NoThreads, None),
                Unavailable::NoPermission(_) => (ReadOutcome::NoPermission, None),
                Unavailable::Exited(_) => (ReadOutcome::Exited, None),
                Unavailable::OverBudget(limit, _) => (ReadOutcome::OverBudget, Some(*limit)),
                Unavailable::Failed(_) => (ReadOutcome::Failed, None),
            };
            let mut report = unavailable(pid, outcome, why.detail().to_owned(), started);
            report.focus = focus;
            report.limits = limit.map(limit_name).into_iter().collect();
            report
        }
    }
}

fn send(out: &mut impl Write, reply: &Reply) -> std::io::Result<()> {
    serde_json::to_writer(&mut *out, reply)?;
    out.write_all(b"\n")?;
    out.flush()
}

/// One request line, at most [`MAX_REQUEST`] bytes; `None` at the end.
fn request_line(input: &mut impl BufRead) -> std::io::Result<Option<Vec<u8>>> {
    let mut line = Vec::new();
    let n =
        std::io::Read::take(&mut *input, MAX_REQUEST as u64 + 1).read_until(b'\n', &mut line)?;
    if n == 0 {
        return Ok(None);
    }
    if line.len() > MAX_REQUEST {
        return Err(std::io::Error::other("request line too long"));
    }
    Ok(Some(line))
}

pub fn main(args: ReaderArgs) -> ExitCode {
    if let Err(e) = limits::apply(args.memory_bytes, args.cpu_seconds) {
        eprintln!("stallwatch stack-reader: cannot limit itself: {e}");
        return ExitCode::from(2);
    }
    // Its own name in `top` (it was started as /proc/self/exe: `exe`).
    let _ = rustix::thread::set_name(c"stallwatch-read");
    let mut reader = StackReader::new(args.root);
    let mut input = std::io::stdin().lock();
    let mut out = std::io::stdout().lock();
    loop {
        let line = match request_line(&mut input) {
            Ok(Some(line)) => line,
            Ok(None) => return ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("stallwatch stack-reader: {e}");
                return ExitCode::from(2);
            }
        };
        let request: Request = match serde_json::from_slice(&line) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("stallwatch stack-reader: bad request: {e}");
                return ExitCode::from(2);
            }
        };
        let sent = match request {
            Request::Burst {
                pid,
                focus,
                rate_hz,
                duration_ms,
                budgets,
            } => {
                reader.set_budgets(budgets);
                let started = now();
                let options = BurstOptions {
                    rate_hz,
                    duration: Duration::from_millis(duration_ms),
                };
                // A reply a read lets the daemon time each read.
                let mut heartbeat = Ok(());
                let result = reader.burst(pid, options, |reads| {
                    if heartbeat.is_ok() {
                        heartbeat = send(&mut out, &Reply::Read { reads });
                    }
                });
                heartbeat
                    .and_then(|()| send(&mut out, &Reply::Summing))
                    .and_then(|()| {
                        let report = to_report(pid, focus, result, started, &budgets);
                        reader.prune();
                        send(
                            &mut out,
                            &Reply::Report {
                                report: Box::new(report),
                                spies: reader.spies(),
                            },
                        )
                    })
            }
            Request::Prune => {
                reader.prune();
                send(
                    &mut out,
                    &Reply::Pruned {
                        spies: reader.spies(),
                    },
                )
            }
        };
        if sent.is_err() {
            // The daemon is gone or stopped listening.
            return ExitCode::SUCCESS;
        }
    }
}
