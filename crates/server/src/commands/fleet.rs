//! `stallwatch fleet [RUN] --prometheus URL`: one answer per distributed run.

use std::fmt::Write as _;
use std::io::Write as _;
use std::process::ExitCode;

use serde::Serialize;

use crate::cli::{FleetArgs, PrometheusArgs};
use crate::commands::check::{EXIT_ERROR, EXIT_FOUND};
use crate::fleet::model::{self, Culprit, Run, State};
use crate::fleet::prometheus::{Client, Settings};
use collector::time::unix_now as now;

#[derive(Serialize)]
struct Output<'a> {
    runs: &'a [Run],
}

fn ago(since: f64, now: f64) -> String {
    let secs = (now - since).max(0.0) as u64;
    humantime::format_duration(std::time::Duration::from_secs(secs)).to_string()
}

fn culprit_line(out: &mut String, c: &Culprit, now: f64) {
    let share = |v: Option<f64>| v.map_or("?".to_owned(), |v| format!("{:.0}%", v * 100.0));
    let reads = if c.gone {
        "gone from its GPU".to_owned()
    } else {
        format!(
            "utilization {}, work {}",
            share(c.utilization),
            share(c.work)
        )
    };
    let _ = writeln!(
        out,
        "  rank {} on {} GPU {}: {} ({reads}), for {}",
        c.rank,
        c.instance,
        c.gpu,
        c.kind,
        ago(c.since, now)
    );
    if let Some(s) = &c.stacks {
        let _ = writeln!(out, "    stacks: {s}");
    }
    if let Some(h) = &c.hint {
        let _ = writeln!(out, "    hint: {h}");
    }
    if let Some(e) = &c.host_error {
        let _ = writeln!(out, "    (its host's evidence: {e})");
    }
}

/// The runs as text, one block each.
pub fn render(runs: &[Run], now: f64) -> String {
    let mut out = String::new();
    if runs.is_empty() {
        out.push_str("no distributed run seen (no stallwatch_job_rank_info in this Prometheus, or no run rules loaded)\n");
    }
    for r in runs {
        let world = r.world_size.map_or("?".to_owned(), |w| w.to_string());
        let _ = write!(
            out,
            "run {}: {} ({} of {} ranks seen",
            r.run,
            r.state.as_str(),
            r.ranks_seen,
            world
        );
        if let Some(since) = r.since {
            let _ = write!(out, ", since {} ago", ago(since, now));
        }
        if let Some(h) = r.lost_gpu_hours {
            let _ = write!(out, ", {h:.2} GPU-hours held back");
        }
        out.push_str(")\n");
        if !r.stalled_kinds.is_empty() {
            let _ = writeln!(out, "  most ranks: {}", r.stalled_kinds.join(", "));
        }
        if !r.stragglers.is_empty() {
            out.push_str(" holding it back:\n");
        }
        for c in &r.stragglers {
            culprit_line(&mut out, c, now);
        }
        if !r.suspects.is_empty() {
            out.push_str(" not waiting like the others (suspects):\n");
        }
        for c in &r.suspects {
            culprit_line(&mut out, c, now);
        }
        if r.missing_count > 0 {
            let listed: Vec<String> = r.missing_ranks.iter().map(u32::to_string).collect();
            let more = r.missing_count as usize - listed.len().min(r.missing_count as usize);
            let _ = writeln!(
                out,
                "  missing ranks: {}{}",
                listed.join(", "),
                if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                }
            );
        }
    }
    out
}

/// A client of the fleet's Prometheus, and of the daemons at `daemon_scheme`
/// and `daemon_port`.
pub fn client(p: &PrometheusArgs, daemon_scheme: &str, daemon_port: u16) -> Result<Client, String> {
    let prometheus = p
        .prometheus
        .as_deref()
        .ok_or("--prometheus URL is required")?;
    Client::new(&Settings {
        prometheus,
        user: p.user.as_deref(),
        password_file: p.password_file.as_deref(),
        ca_file: p.ca_file.as_deref(),
        cert_file: p.cert_file.as_deref(),
        key_file: p.key_file.as_deref(),
        daemon_scheme,
        daemon_port,
        timeout: p.timeout,
    })
}

/// The Prometheus client of a range command (`fleet goodput`, `fleet causes`),
/// or how it ends: `--since` under `shortest` (for the reason `why`), or a
/// client that cannot be made.
pub fn range_client(
    since: std::time::Duration,
    shortest: std::time::Duration,
    why: &str,
    p: &PrometheusArgs,
) -> Result<Client, ExitCode> {
    if since < shortest {
        eprintln!(
            "stallwatch: --since {}: give {} or more ({why})",
            humantime::format_duration(since),
            humantime::format_duration(shortest)
        );
        return Err(ExitCode::from(EXIT_ERROR));
    }
    client(p, "http", 9847).map_err(|e| {
        eprintln!("stallwatch: {e}");
        ExitCode::from(EXIT_ERROR)
    })
}

/// An answer of a range command (`fleet goodput`, `fleet causes`): its JSON,
/// or its text as `render` makes it.
pub fn output<T: Serialize>(
    answer: &T,
    json: bool,
    render: impl FnOnce(&T) -> String,
) -> Result<Option<String>, String> {
    if json {
        serde_json::to_string_pretty(answer)
            .map(|t| Some(t + "\n"))
            .map_err(|e| e.to_string())
    } else {
        Ok(Some(render(answer)))
    }
}

/// How a range command ends: its answer on stdout (exit 0), what `nothing`
/// says when no series lies in the range (exit 1), or the error (exit 2).
pub fn finish(
    answer: Result<Option<String>, String>,
    nothing: impl FnOnce() -> String,
) -> ExitCode {
    match answer {
        Ok(Some(text)) => {
            let _ = std::io::stdout().lock().write_all(text.as_bytes());
            ExitCode::SUCCESS
        }
        Ok(None) => {
            eprint!("stallwatch: {}", nothing());
            ExitCode::from(EXIT_FOUND)
        }
        Err(e) => {
            eprintln!("stallwatch: {e}");
            ExitCode::from(EXIT_ERROR)
        }
    }
}

pub fn main(args: FleetArgs) -> ExitCode {
    if !matches!(args.daemon_scheme.as_str(), "http" | "https") {
        eprintln!("stallwatch: --daemon-scheme must be http or https");
        return ExitCode::from(EXIT_ERROR);
    }
    let client = match client(&args.prometheus, &args.daemon_scheme, args.daemon_port) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("stallwatch: {e}");
            return ExitCode::from(EXIT_ERROR);
        }
    };
    let answers = match client.answers(args.run.as_deref()) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("stallwatch: {e}");
            return ExitCode::from(EXIT_ERROR);
        }
    };
    let now = now();
    let mut runs = model::runs(&answers);
    for r in &mut runs {
        if let Some(since) = r.since.filter(|_| r.state != State::Healthy) {
            match client.lost_gpu_hours(&r.run, since, now) {
                Ok(h) => r.lost_gpu_hours = h,
                Err(e) => eprintln!("stallwatch: {e}"),
            }
        }
        if !args.no_daemons {
            for c in r.stragglers.iter_mut().chain(r.suspects.iter_mut()) {
                client.host_evidence(c);
            }
        }
    }
    let text = if args.json {
        match serde_json::to_string_pretty(&Output { runs: &runs }) {
            Ok(t) => t + "\n",
            Err(e) => {
                eprintln!("stallwatch: {e}");
                return ExitCode::from(EXIT_ERROR);
            }
        }
    } else {
        render(&runs, now)
    };
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
    if runs
        .iter()
        .any(|r| r.state != State::Healthy || r.missing_count > 0)
    {
        ExitCode::from(EXIT_FOUND)
    } else {
        ExitCode::SUCCESS
    }
}
