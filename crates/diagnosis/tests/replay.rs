//! Replays the recorded scenario runs (tests/workloads/recorded: frames as
//! JSON lines, with the labels and time scale of the run) through the
//! detectors. The same frames must give the same verdicts as the live run:
//! each labelled kind once, within its bound, and nothing else.

use std::fs;
use std::path::{Path, PathBuf};

use diagnosis::frame::Frame;
use diagnosis::{DiagnosisConfig, Engine, Phase};
use serde::Deserialize;

#[derive(Deserialize)]
struct Meta {
    scenario: String,
    time_scale: f64,
    /// Wall time the scenario started, seconds since the epoch.
    start: f64,
    labels: Vec<Label>,
}

#[derive(Deserialize)]
struct Label {
    kind: String,
    gpu: u32,
    onset_s: f64,
    deadline_s: f64,
}

fn recorded() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/workloads/recorded")
}

fn replay(meta_path: &Path) -> Result<(), String> {
    let meta: Meta = serde_json::from_str(&fs::read_to_string(meta_path).unwrap()).unwrap();
    let frames_path = meta_path.with_extension("jsonl");
    let text =
        fs::read_to_string(&frames_path).map_err(|e| format!("{}: {e}", frames_path.display()))?;
    let config = DiagnosisConfig {
        time_scale: meta.time_scale,
        ..DiagnosisConfig::default()
    };
    let mut engine = Engine::new(config);
    let mut starts = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let frame: Frame = serde_json::from_str(line)
            .map_err(|e| format!("{}:{}: {e}", frames_path.display(), n + 1))?;
        for e in engine.observe(&frame) {
            if e.phase == Phase::Start {
                starts.push((e.kind.as_str().to_owned(), e.gpu, e.time - meta.start));
            }
        }
    }
    let mut problems = Vec::new();
    for l in &meta.labels {
        let mine: Vec<f64> = starts
            .iter()
            .filter(|(k, g, _)| *k == l.kind && *g == l.gpu)
            .map(|s| s.2)
            .collect();
        match mine.as_slice() {
            [at] if (l.onset_s - 3.0..=l.deadline_s).contains(at) => {}
            [at] => problems.push(format!(
                "{} at {at:.1}s, expected [{:.1}, {:.1}]",
                l.kind, l.onset_s, l.deadline_s
            )),
            [] => problems.push(format!("{} never fired", l.kind)),
            many => problems.push(format!("{} fired {} times", l.kind, many.len())),
        }
    }
    for (kind, gpu, at) in &starts {
        if !meta.labels.iter().any(|l| l.kind == *kind && l.gpu == *gpu) {
            problems.push(format!("unexpected {kind} on GPU {gpu} at {at:.1}s"));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!("{}: {}", meta.scenario, problems.join("; ")))
    }
}

#[test]
fn recorded_runs_replay_to_their_labels() {
    let mut metas: Vec<PathBuf> = fs::read_dir(recorded())
        .expect("tests/workloads/recorded is missing")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    metas.sort();
    assert!(
        metas.len() >= 10,
        "expected the recorded set, found {metas:?}"
    );
    let failures: Vec<String> = metas.iter().filter_map(|m| replay(m).err()).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
