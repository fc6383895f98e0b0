//! The runs as `stallwatch fleet` shows them, assembled from the answers
//! of the fleet's Prometheus. Pure: query results in, runs out.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

/// One sample of an instant query: its labels and value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

impl Sample {
    pub fn label(&self, name: &str) -> &str {
        self.labels.get(name).map_or("", String::as_str)
    }

    /// A sample of these labels, as the tests of what reads answers write one.
    #[cfg(test)]
    pub fn of(labels: &[(&str, &str)], value: f64) -> Sample {
        Sample {
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            value,
        }
    }
}

/// What the queries returned.
#[derive(Debug, Default)]
pub struct Answers {
    /// `instance_gpu_run_rank:stallwatch_gpu_utilization:avg2m`
    pub utilization: Vec<Sample>,
    /// `instance_gpu_run_rank:stallwatch_gpu_work:avg2m`
    pub work: Vec<Sample>,
    /// `instance_gpu_run_rank:stallwatch_gpu_stall_active:max`
    pub kinds: Vec<Sample>,
    /// `run:stallwatch_world_size:max`
    pub world_size: Vec<Sample>,
    /// `ALERTS_FOR_STATE` of the run alerts, firing ones only (value: since when).
    pub alerts: Vec<Sample>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    Healthy,
    Stalled,
    Straggler,
    Hung,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Healthy => "healthy",
            State::Stalled => "stalled",
            State::Straggler => "straggler",
            State::Hung => "hung",
        }
    }
}

/// A rank that a run alert names.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Culprit {
    pub rank: u32,
    pub instance: String,
    pub gpu: String,
    /// Its own finding (`none` without one); for a hung run's suspect, its
    /// active kinds joined, or `none`.
    pub kind: String,
    /// When the alert became active, seconds since the epoch.
    pub since: f64,
    /// Its GPU's utilization and work over the last 2 minutes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub utilization: Option<f64>,
    /// A suspect no longer seen on its GPU (killed or exited, its GPU lost,
    /// its host's daemon down): named where it was last seen.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub gone: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub work: Option<f64>,
    /// From its host's daemon: what to do, and its Python stacks' summary.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stacks: Option<String>,
    /// Why the host's evidence is missing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_error: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Run {
    pub run: String,
    pub world_size: Option<u32>,
    pub ranks_seen: u32,
    pub state: State,
    /// The kind of a stalled run.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stalled_kinds: Vec<String>,
    pub stragglers: Vec<Culprit>,
    pub suspects: Vec<Culprit>,
    /// At most [`MISSING_LISTED`]; `missing_count` says how many in all.
    pub missing_ranks: Vec<u32>,
    pub missing_count: u32,
    /// Since when the run has had its current problem.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<f64>,
    /// GPU-hours held back since then (filled in by a later query).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lost_gpu_hours: Option<f64>,
}

/// Missing ranks listed per run.
pub const MISSING_LISTED: usize = 64;

fn rank_of(s: &Sample) -> Option<u32> {
    s.label("rank").parse().ok()
}

/// The runs in the answers, problems first, then by name.
pub fn runs(a: &Answers) -> Vec<Run> {
    let mut names: BTreeSet<String> = BTreeSet::new();
    for s in a.utilization.iter().chain(&a.world_size).chain(&a.alerts) {
        if !s.label("run").is_empty() {
            names.insert(s.label("run").to_owned());
        }
    }
    let mut out: Vec<Run> = names.into_iter().map(|name| run(a, &name)).collect();
    out.sort_by(|x, y| y.state.cmp(&x.state).then_with(|| x.run.cmp(&y.run)));
    out
}

fn signal(samples: &[Sample], run: &str, instance: &str, gpu: &str) -> Option<f64> {
    samples
        .iter()
        .find(|s| s.label("run") == run && s.label("instance") == instance && s.label("gpu") == gpu)
        .map(|s| s.value)
}

fn run(a: &Answers, name: &str) -> Run {
    let of_run = |s: &&Sample| s.label("run") == name;
    let seen: BTreeSet<u32> = a
        .utilization
        .iter()
        .filter(of_run)
        .filter_map(rank_of)
        .collect();
    let world_size = a
        .world_size
        .iter()
        .find(of_run)
        .map(|s| s.value)
        .filter(|v| v.is_finite() && *v >= 0.0 && *v <= f64::from(u32::MAX))
        .map(|v| v as u32);
    let missing: Vec<u32> = match world_size {
        Some(w) => (0..w)
            .filter(|r| !seen.contains(r))
            .take(MISSING_LISTED)
            .collect(),
        None => Vec::new(),
    };
    let missing_count = world_size.map_or(0, |w| w.saturating_sub(seen.len() as u32));
    let alerts: Vec<&Sample> = a.alerts.iter().filter(of_run).collect();
    let culprit = |s: &Sample, kind: String| {
        let utilization = signal(&a.utilization, name, s.label("instance"), s.label("gpu"));
        Culprit {
            rank: rank_of(s).unwrap_or(0),
            instance: s.label("instance").to_owned(),
            gpu: s.label("gpu").to_owned(),
            kind,
            since: s.value,
            utilization,
            gone: utilization.is_none(),
            work: signal(&a.work, name, s.label("instance"), s.label("gpu")),
            hint: None,
            stacks: None,
            host_error: None,
        }
    };
    // A straggler with several findings has one alert per kind: one entry, kinds joined.
    let mut stragglers: Vec<Culprit> = Vec::new();
    for s in alerts
        .iter()
        .filter(|s| s.label("alertname") == "StallwatchRunStraggler")
    {
        let kind = s.label("kind").to_owned();
        match stragglers
            .iter_mut()
            .find(|c| c.instance == s.label("instance") && c.gpu == s.label("gpu"))
        {
            Some(c) => {
                if c.kind == "none" {
                    c.kind = kind;
                } else if kind != "none" && !c.kind.split(", ").any(|k| k == kind) {
                    c.kind = format!("{}, {kind}", c.kind);
                }
                c.since = c.since.min(s.value);
            }
            None => stragglers.push(culprit(s, kind)),
        }
    }
    let mut suspects: Vec<Culprit> = alerts
        .iter()
        .filter(|s| s.label("alertname") == "StallwatchRunHung")
        .map(|s| {
            let kinds: Vec<&str> = a
                .kinds
                .iter()
                .filter(|k| {
                    k.label("run") == name
                        && k.label("instance") == s.label("instance")
                        && k.label("gpu") == s.label("gpu")
                })
                .map(|k| k.label("kind"))
                .collect();
            let kind = if kinds.is_empty() {
                "none".to_owned()
            } else {
                kinds.join(", ")
            };
            culprit(s, kind)
        })
        .collect();
    let stalled_kinds: Vec<String> = alerts
        .iter()
        .filter(|s| s.label("alertname") == "StallwatchRunStalled")
        .map(|s| s.label("kind").to_owned())
        .collect();
    let state = if !suspects.is_empty() {
        State::Hung
    } else if !stragglers.is_empty() {
        State::Straggler
    } else if !stalled_kinds.is_empty() {
        State::Stalled
    } else {
        State::Healthy
    };
    let since = alerts.iter().map(|s| s.value).reduce(f64::min);
    stragglers.sort_by_key(|c| c.rank);
    suspects.sort_by_key(|c| c.rank);
    Run {
        run: name.to_owned(),
        world_size,
        ranks_seen: seen.len() as u32,
        state,
        stalled_kinds,
        stragglers,
        suspects,
        missing_ranks: missing,
        missing_count,
        since,
        lost_gpu_hours: None,
    }
}

#[cfg(test)]
mod tests;
