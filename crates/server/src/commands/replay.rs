//! `stallwatch replay FRAMES`: frames recorded by `run --record-frames` fed
//! through the detectors at speed, with the rules of the daemon's config (or
//! the defaults). Prints the findings by kind, per 100 GPU-hours of GPUs that
//! held a job, and every episode; `--json` gives the events as
//! `/api/v1/events` does. The live daemon also reads stacks to find a job's
//! phase and to confirm a hang; the frames do not carry those reads, so the
//! replay runs the rules as a daemon with `[stacks] enabled = false` does.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use diagnosis::ledger::TimeState;
use diagnosis::{DiagnosisConfig, Engine, Event, Frame, Phase};
use serde::Serialize;

use crate::cli::ReplayArgs;
use crate::config::Config;

#[derive(Debug, Default, Serialize)]
pub struct Replay {
    pub frames: u64,
    /// Wall time of the first and last frame, seconds since the epoch.
    pub first: Option<f64>,
    pub last: Option<f64>,
    /// GPU-hours of fresh GPU data, and of those with a job on the GPU, as
    /// the engine's own ledger booked them (docs/goodput.md): its watched
    /// time less `unknown` (no GPU data, a gap in the recording), and of
    /// that the time booked to a job's states (all but `no_job`).
    pub gpu_hours_watched: f64,
    pub gpu_hours_held: f64,
    /// Start events by kind.
    pub findings: BTreeMap<String, u64>,
    pub findings_per_100_gpu_hours: BTreeMap<String, f64>,
    pub events: Vec<Event>,
}

/// Replays the frames in `path` through a fresh engine with `config`.
pub fn replay(path: &Path, config: DiagnosisConfig) -> anyhow::Result<Replay> {
    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut engine = Engine::new(config);
    let mut out = Replay::default();
    let mut lines = BufReader::new(file).lines().enumerate().peekable();
    while let Some((n, line)) = lines.next() {
        let line = line.with_context(|| format!("cannot read {}", path.display()))?;
        let frame: Frame = match serde_json::from_str(&line) {
            Ok(f) => f,
            // The daemon stopped in the middle of its last line.
            Err(_) if lines.peek().is_none() && out.frames > 0 => break,
            Err(e) => anyhow::bail!("{}:{}: {e}", path.display(), n + 1),
        };
        out.first.get_or_insert(frame.t);
        out.last = Some(frame.t);
        out.frames += 1;
        out.events.extend(engine.observe(&frame));
    }
    for g in engine.status() {
        let seen = g.time.total() - g.time.seconds(TimeState::Unknown);
        out.gpu_hours_watched += (seen + g.time_held_seconds) / 3600.0;
        out.gpu_hours_held += (seen - g.time.seconds(TimeState::NoJob)) / 3600.0;
    }
    for e in out.events.iter().filter(|e| e.phase == Phase::Start) {
        *out.findings.entry(e.kind.as_str().to_owned()).or_default() += 1;
    }
    if out.gpu_hours_held > 0.0 {
        out.findings_per_100_gpu_hours = out
            .findings
            .iter()
            .map(|(k, n)| (k.clone(), 100.0 * *n as f64 / out.gpu_hours_held))
            .collect();
    }
    Ok(out)
}

/// The rules a daemon with this config file runs, as a replay can apply them.
fn rules(args: &ReplayArgs) -> anyhow::Result<DiagnosisConfig> {
    let config = match &args.config {
        Some(path) => Config::load(path, true).map_err(|e| anyhow::anyhow!("{e}"))?,
        None => Config::default(),
    };
    let mut rules = config.diagnosis.without_short_reads();
    if let Some(scale) = args.time_scale {
        anyhow::ensure!(
            scale > 0.0 && scale.is_finite(),
            "--time-scale must be above 0"
        );
        rules.time_scale = scale;
    }
    Ok(rules)
}

pub fn main(args: ReplayArgs) -> ExitCode {
    let result = rules(&args).and_then(|rules| replay(&args.frames, rules));
    let replayed = match result {
        Ok(r) => r,
        Err(e) => {
            eprintln!("stallwatch replay: {e:#}");
            return ExitCode::from(2);
        }
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&replayed).unwrap_or_default()
        );
    } else {
        print!("{}", text_report(&replayed));
    }
    ExitCode::from(u8::from(!replayed.findings.is_empty()))
}

fn text_report(r: &Replay) -> String {
    let minutes = match (r.first, r.last) {
        (Some(a), Some(b)) => (b - a) / 60.0,
        _ => 0.0,
    };
    let mut s = format!(
        "{} frames, {minutes:.1} min: {:.2} GPU-hours watched, {:.2} with a job\n",
        r.frames, r.gpu_hours_watched, r.gpu_hours_held
    );
    if r.findings.is_empty() {
        s.push_str("findings: none\n");
        return s;
    }
    s.push_str("findings by kind (per 100 GPU-hours with a job):\n");
    for (kind, n) in &r.findings {
        let rate = r
            .findings_per_100_gpu_hours
            .get(kind)
            .copied()
            .unwrap_or(0.0);
        s.push_str(&format!("  {kind}: {n} ({rate:.1})\n"));
    }
    s.push_str("episodes (minutes from the first frame):\n");
    let first = r.first.unwrap_or(0.0);
    for e in r.events.iter().filter(|e| e.phase == Phase::Start) {
        let end = r
            .events
            .iter()
            .find(|x| {
                x.phase == Phase::End && x.kind == e.kind && x.gpu == e.gpu && x.time >= e.time
            })
            .map_or("still active".to_owned(), |x| {
                format!("ended at {:.1}", (x.time - first) / 60.0)
            });
        let job = e
            .job
            .as_ref()
            .map_or(String::new(), |j| format!(", pid {} {}", j.pid, j.comm));
        s.push_str(&format!(
            "  {:.1}: {} on GPU {}{job} ({end})\n",
            (e.time - first) / 60.0,
            e.kind.as_str(),
            e.gpu,
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn recorded() -> String {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/workloads/recorded/input_starved.jsonl");
        std::fs::read_to_string(path).unwrap()
    }

    fn rules() -> DiagnosisConfig {
        DiagnosisConfig {
            time_scale: 0.1,
            ..DiagnosisConfig::default()
        }
        .without_short_reads()
    }

    fn file_with(text: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(text.as_bytes()).unwrap();
        f
    }

    #[test]
    fn a_recorded_starvation_is_found_once_with_its_gpu_hours() {
        let text = recorded();
        let r = replay(file_with(&text).path(), rules()).unwrap();
        assert_eq!(r.frames as usize, text.lines().count());
        assert_eq!(r.findings.get("input_starved"), Some(&1));
        // One GPU held by its job from the second frame on, 36 s of frames.
        let span = r.last.unwrap() - r.first.unwrap();
        assert!(r.gpu_hours_held > 0.0 && r.gpu_hours_held <= r.gpu_hours_watched);
        assert!((r.gpu_hours_watched - span / 3600.0).abs() < 1e-9);
        let rate = r.findings_per_100_gpu_hours["input_starved"];
        assert!((rate - 100.0 / r.gpu_hours_held).abs() < 1e-6);
        assert!(text_report(&r).contains("input_starved: 1"));
    }

    #[test]
    fn a_last_line_cut_by_the_stop_is_left_out_but_a_bad_line_inside_is_an_error() {
        let text = recorded();
        let whole = text.lines().count();
        let cut = format!("{}{{\"t\":17959", text);
        let r = replay(file_with(&cut).path(), rules()).unwrap();
        assert_eq!(r.frames as usize, whole);

        let mut lines: Vec<&str> = text.lines().collect();
        lines.insert(10, "{\"t\":");
        let err = replay(file_with(&lines.join("\n")).path(), rules()).unwrap_err();
        assert!(err.to_string().contains(":11:"), "{err}");
    }

    #[test]
    fn a_recording_sampled_every_15_s_is_watched_time_as_the_daemon_books_it() {
        let text = recorded();
        let mut frames: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let t0 = frames[0]["t"].as_f64().unwrap();
        for (i, f) in frames.iter_mut().enumerate() {
            f["t"] = (t0 + 15.0 * i as f64).into();
        }
        let spaced: String = frames.iter().map(|f| format!("{f}\n")).collect();
        let r = replay(file_with(&spaced).path(), rules()).unwrap();
        let span = 15.0 * (frames.len() - 1) as f64;
        assert!((r.gpu_hours_watched - span / 3600.0).abs() < 1e-9, "{r:?}");
    }

    #[test]
    fn a_gap_in_the_recording_counts_as_no_time_watched() {
        let text = recorded();
        let whole = replay(file_with(&text).path(), rules()).unwrap();
        // The daemon stopped for an hour after the first half and started again.
        let mut frames: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let half = frames.len() / 2;
        for f in &mut frames[half..] {
            f["t"] = (f["t"].as_f64().unwrap() + 3600.0).into();
        }
        let gapped: String = frames.iter().map(|f| format!("{f}\n")).collect();
        let r = replay(file_with(&gapped).path(), rules()).unwrap();
        let step =
            frames[half]["t"].as_f64().unwrap() - 3600.0 - frames[half - 1]["t"].as_f64().unwrap();
        assert!((r.gpu_hours_watched - (whole.gpu_hours_watched - step / 3600.0)).abs() < 1e-9);
    }
}
