//! Where the fleet's GPU-hours went, as `stallwatch fleet goodput` shows
//! it, from the hourly recording rules' sums over a range. Pure: query
//! results in, the answer and its table out.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::model::Sample;

/// The ledger's states (`stallwatch_gpu_time_seconds_total{state}`,
/// docs/goodput.md), every one shown even when zero.
pub const STATES: [&str; 11] = [
    "productive",
    "no_job",
    "unknown",
    "startup",
    "compiling",
    "checkpointing",
    "input",
    "hung",
    "fault",
    "idle",
    "recovery",
];

/// A run's waiting ranks while a straggler holds it back, booked by the
/// run rules with the straggler's kind as `cause`.
pub const WAITING_FOR_PEERS: &str = "waiting_for_peers";

const PRODUCTIVE: &str = "productive";
const NO_JOB: &str = "no_job";
const IDLE: &str = "idle";

/// What the answer is grouped by (`--by`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum By {
    Run,
    Namespace,
    User,
    Instance,
}

impl By {
    /// The label the groups are named by.
    pub fn label(self) -> &'static str {
        match self {
            By::Run => "run",
            By::Namespace => "namespace",
            By::User => "user",
            By::Instance => "instance",
        }
    }

    /// The hourly rule it reads: the runs' own (with `waiting_for_peers`),
    /// each owner's over its hosts, or each host's. Each has a few series
    /// per run, owner or host, however often a host's owners change: a week
    /// of the per-host, per-owner rule holds many more.
    pub fn metric(self) -> &'static str {
        match self {
            By::Run => "run_state:stallwatch_gpu_time_seconds:increase1h",
            By::Namespace | By::User => {
                "namespace_user_run_state:stallwatch_gpu_time_seconds:increase1h"
            }
            By::Instance => "instance_state:stallwatch_gpu_time_seconds:increase1h",
        }
    }

    /// The GPU-seconds per group, state (and cause) over `range_s`.
    pub fn query(self, range_s: u64) -> String {
        let cause = if self == By::Run { ", cause" } else { "" };
        format!(
            "sum by ({}, state{cause}) (sum_over_time({}[{range_s}s]))",
            self.label(),
            self.metric()
        )
    }
}

/// How many hours of `range_s` the hourly rules have recorded: the most
/// samples of one host's series (owners coming and going do not break them).
pub fn hours_query(range_s: u64) -> String {
    format!(
        "max(count_over_time(instance_state:stallwatch_gpu_time_seconds:increase1h{{state=\"{PRODUCTIVE}\"}}[{range_s}s]))"
    )
}

/// The runs' progress lost to crashes and restarts, in GPU-seconds, over `range_s`.
pub fn lost_progress_query(range_s: u64) -> String {
    format!(
        "sum by (run) (sum_over_time(run:stallwatch_gpu_lost_progress_seconds:increase1h[{range_s}s]))"
    )
}

/// GPU-hours of one state (and, for `waiting_for_peers`, the straggler's kind).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StateHours {
    pub state: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
    pub gpu_hours: f64,
    /// Of all the GPU-hours of the fleet (or of the group).
    pub share: f64,
}

impl StateHours {
    /// The state in words: `waited for peers (input_bound)`.
    pub fn describe(&self) -> String {
        match (self.state.as_str(), &self.cause) {
            (WAITING_FOR_PEERS, Some(c)) => format!("waited for peers ({c})"),
            (WAITING_FOR_PEERS, None) => "waited for peers".to_owned(),
            (s, _) => s.to_owned(),
        }
    }
}

/// One run, namespace, user or host.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Group {
    /// None for the GPUs whose owner has no such label (no job, a job with
    /// no namespace).
    pub name: Option<String>,
    pub gpu_hours: f64,
    /// Neither productive nor `no_job`.
    pub lost_gpu_hours: f64,
    /// Booked `idle`: a job held the GPU, it idled and no stall kind or phase
    /// explains it (part of the lost GPU-hours; 0 when none).
    pub idle_gpu_hours: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub goodput: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ettr: Option<f64>,
    /// The state that lost it the most.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub main_lost: Option<StateHours>,
    /// A run's training time lost since its last checkpoint at its crashes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lost_progress_gpu_hours: Option<f64>,
}

/// The whole answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Goodput {
    pub by: By,
    /// The range asked for, as given (`7d`).
    pub since: String,
    pub range_seconds: u64,
    /// How many of the range's hours the hourly rules have recorded.
    pub hours_recorded: u64,
    pub gpu_hours: f64,
    /// The productive share of all GPU-hours.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub goodput: Option<f64>,
    /// The productive share of the GPU-hours jobs held (`no_job` left out).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ettr: Option<f64>,
    pub lost_gpu_hours: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lost_progress_gpu_hours: Option<f64>,
    /// Every state, productive first, then the largest.
    pub states: Vec<StateHours>,
    /// How many groups there are in all; `groups` holds the top ones.
    pub groups_total: usize,
    /// The groups that lost the most GPU-hours, most first.
    pub groups: Vec<Group>,
}

type Key = (String, Option<String>);

/// GPU-seconds by state and cause.
#[derive(Default)]
struct Ledger(BTreeMap<Key, f64>);

impl Ledger {
    fn add(&mut self, state: &str, cause: Option<&str>, seconds: f64) {
        let cause = (state == WAITING_FOR_PEERS)
            .then(|| cause.map(str::to_owned))
            .flatten();
        *self.0.entry((state.to_owned(), cause)).or_default() += seconds;
    }

    /// A state's GPU-seconds: 0.0 when it has none (an empty `sum()` of
    /// floats is -0.0, which the table would print as `-0.0`).
    fn of(&self, state: &str) -> f64 {
        self.0
            .iter()
            .filter(|((s, _), _)| s == state)
            .fold(0.0, |sum, (_, v)| sum + v)
    }

    fn total(&self) -> f64 {
        self.0.values().sum()
    }

    fn lost(&self) -> f64 {
        (self.total() - self.of(PRODUCTIVE) - self.of(NO_JOB)).max(0.0)
    }

    fn ratios(&self) -> (Option<f64>, Option<f64>) {
        let total = self.total();
        let held = total - self.of(NO_JOB);
        let productive = self.of(PRODUCTIVE);
        (
            (total > 0.0).then(|| productive / total),
            (held > 0.0).then(|| productive / held),
        )
    }

    /// Every state with its share, productive first, then the largest (the
    /// states at zero in the ledger's own order).
    fn states(&self, by: By) -> Vec<StateHours> {
        let mut all = self.0.clone();
        for s in STATES {
            all.entry((s.to_owned(), None)).or_default();
        }
        if by == By::Run && !all.keys().any(|(s, _)| s == WAITING_FOR_PEERS) {
            all.insert((WAITING_FOR_PEERS.to_owned(), None), 0.0);
        }
        let order = |s: &str| STATES.iter().position(|x| *x == s).unwrap_or(STATES.len());
        let mut out: Vec<(Key, f64)> = all.into_iter().collect();
        out.sort_by(|((a, ac), av), ((b, bc), bv)| {
            (b == PRODUCTIVE)
                .cmp(&(a == PRODUCTIVE))
                .then(bv.total_cmp(av))
                .then(order(a).cmp(&order(b)))
                .then(a.cmp(b))
                .then(ac.cmp(bc))
        });
        let total = self.total();
        out.into_iter()
            .map(|((state, cause), seconds)| StateHours {
                state,
                cause,
                gpu_hours: seconds / 3600.0,
                share: if total > 0.0 { seconds / total } else { 0.0 },
            })
            .collect()
    }

    fn main_lost(&self) -> Option<StateHours> {
        let total = self.total();
        self.0
            .iter()
            .filter(|((s, _), v)| s != PRODUCTIVE && s != NO_JOB && **v > 0.0)
            .max_by(|(a, av), (b, bv)| av.total_cmp(bv).then(b.cmp(a)))
            .map(|((state, cause), seconds)| StateHours {
                state: state.clone(),
                cause: cause.clone(),
                gpu_hours: seconds / 3600.0,
                share: seconds / total,
            })
    }
}

/// What the queries gave: GPU-seconds by group and state, and for runs
/// their lost progress.
pub struct Answers<'a> {
    pub by: By,
    pub since: &'a str,
    pub range_seconds: u64,
    pub hours_recorded: u64,
    pub time: &'a [Sample],
    pub lost_progress: &'a [Sample],
    pub top: usize,
}

/// The answer; None when no hourly series lies in the range.
pub fn goodput(a: &Answers) -> Option<Goodput> {
    let mut fleet = Ledger::default();
    let mut groups: BTreeMap<Option<String>, Ledger> = BTreeMap::new();
    for s in a.time.iter().filter(|s| s.value.is_finite()) {
        let state = s.label("state");
        if state.is_empty() {
            continue;
        }
        let cause = Some(s.label("cause")).filter(|c| !c.is_empty());
        let name = Some(s.label(a.by.label()))
            .filter(|n| !n.is_empty())
            .map(str::to_owned);
        fleet.add(state, cause, s.value);
        groups.entry(name).or_default().add(state, cause, s.value);
    }
    if groups.is_empty() {
        return None;
    }
    let progress: BTreeMap<&str, f64> = a
        .lost_progress
        .iter()
        .filter(|s| s.value.is_finite())
        .map(|s| (s.label("run"), s.value))
        .collect();
    let mut out: Vec<Group> = groups
        .into_iter()
        .map(|(name, l)| {
            let (goodput, ettr) = l.ratios();
            let lost_progress = (a.by == By::Run)
                .then(|| name.as_deref().and_then(|n| progress.get(n)))
                .flatten()
                .map(|s| s / 3600.0);
            Group {
                gpu_hours: l.total() / 3600.0,
                lost_gpu_hours: l.lost() / 3600.0,
                idle_gpu_hours: l.of(IDLE) / 3600.0,
                goodput,
                ettr,
                main_lost: l.main_lost(),
                lost_progress_gpu_hours: lost_progress,
                name,
            }
        })
        .collect();
    out.sort_by(|x, y| {
        y.lost_gpu_hours
            .total_cmp(&x.lost_gpu_hours)
            .then(y.gpu_hours.total_cmp(&x.gpu_hours))
            .then(x.name.cmp(&y.name))
    });
    let groups_total = out.len();
    out.truncate(a.top);
    let (goodput, ettr) = fleet.ratios();
    Some(Goodput {
        by: a.by,
        since: a.since.to_owned(),
        range_seconds: a.range_seconds,
        hours_recorded: a.hours_recorded,
        gpu_hours: fleet.total() / 3600.0,
        goodput,
        ettr,
        lost_gpu_hours: fleet.lost() / 3600.0,
        lost_progress_gpu_hours: (a.by == By::Run).then(|| progress.values().sum::<f64>() / 3600.0),
        states: fleet.states(a.by),
        groups_total,
        groups: out,
    })
}

/// What to say when no hourly series lies in the range.
pub fn nothing_recorded(by: By, since: &str, prometheus: &str) -> String {
    format!(
        "no hourly series of {} in the last {since} at {prometheus}: the rules that record \
         them run once an hour, so the first answer comes within an hour of loading them \
         (deploy/prometheus/stallwatch.rules.yml{}; docs/goodput.md#fleet)\n",
        by.metric(),
        if by == By::Run {
            " and stallwatch.runs.yml, the latter where every rank of a run meets"
        } else {
            ""
        }
    )
}

fn percent(v: Option<f64>) -> String {
    v.map_or("-".to_owned(), |v| format!("{:.1}%", v * 100.0))
}

fn hours(v: f64) -> String {
    format!("{v:.1}")
}

/// The answer as text: the fleet's line, its states, then the groups that
/// lost the most, each with its idle GPU-hours (part of its lost ones).
pub fn render(g: &Goodput) -> String {
    let mut out = String::new();
    let range_hours = g.range_seconds.div_ceil(3600);
    let whose = if g.by == By::Run {
        "GPU-hours of runs"
    } else {
        "GPU-hours"
    };
    let _ = writeln!(
        out,
        "last {}: {} {whose}, goodput {} (productive), ETTR {} (no_job left out), {} GPU-hours lost",
        g.since,
        hours(g.gpu_hours),
        percent(g.goodput),
        percent(g.ettr),
        hours(g.lost_gpu_hours),
    );
    if g.hours_recorded + 1 < range_hours {
        let _ = writeln!(
            out,
            "(the hourly rules have recorded {} of the {range_hours} hours asked for)",
            g.hours_recorded
        );
    }
    if let Some(p) = g.lost_progress_gpu_hours.filter(|p| *p > 0.0) {
        let _ = writeln!(
            out,
            "progress lost to crashes (since each run's last checkpoint): {} GPU-hours",
            hours(p)
        );
    }
    out.push('\n');
    let width = g
        .states
        .iter()
        .map(|s| s.describe().len())
        .max()
        .unwrap_or(5)
        .max(5);
    let _ = writeln!(
        out,
        "{:<width$}  {:>10}  {:>6}",
        "STATE", "GPU-HOURS", "SHARE"
    );
    for s in &g.states {
        let _ = writeln!(
            out,
            "{:<width$}  {:>10}  {:>6}",
            s.describe(),
            hours(s.gpu_hours),
            percent(Some(s.share))
        );
    }
    out.push('\n');
    let label = g.by.label();
    let _ = writeln!(
        out,
        "top {} of {} by lost GPU-hours (not productive, no_job left out):",
        g.groups.len(),
        match g.groups_total {
            1 => format!("1 {label}"),
            n => format!("{n} {label}s"),
        }
    );
    let name = |grp: &Group| grp.name.clone().unwrap_or_else(|| format!("(no {label})"));
    let nw = g
        .groups
        .iter()
        .map(|x| name(x).len())
        .max()
        .unwrap_or(0)
        .max(label.len());
    let run = g.by == By::Run;
    let _ = write!(
        out,
        "{:<nw$}  {:>10}  {:>10}  {:>10}  {:>8}  {:>8}",
        label.to_uppercase(),
        "GPU-HOURS",
        "LOST",
        "IDLE",
        "GOODPUT",
        "ETTR"
    );
    if run {
        let _ = write!(out, "  {:>13}", "LOST PROGRESS");
    }
    out.push_str("  MAIN LOST STATE\n");
    for x in &g.groups {
        let _ = write!(
            out,
            "{:<nw$}  {:>10}  {:>10}  {:>10}  {:>8}  {:>8}",
            name(x),
            hours(x.gpu_hours),
            hours(x.lost_gpu_hours),
            hours(x.idle_gpu_hours),
            percent(x.goodput),
            percent(x.ettr)
        );
        if run {
            let _ = write!(
                out,
                "  {:>13}",
                x.lost_progress_gpu_hours.map_or("-".to_owned(), hours)
            );
        }
        let main = x.main_lost.as_ref().map_or("-".to_owned(), |m| {
            format!("{} ({} GPU-hours)", m.describe(), hours(m.gpu_hours))
        });
        let _ = writeln!(out, "  {main}");
    }
    out
}

#[cfg(test)]
mod tests;
