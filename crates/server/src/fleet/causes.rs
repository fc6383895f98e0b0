//! The lines of the jobs' code that lost the fleet's GPU-hours, as
//! `stallwatch fleet causes` shows them, from the recording rules of the
//! lost time by place (group `stallwatch.causes` and its hourly sums). Pure:
//! query results in, the answer and its table out.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde::Serialize;

use super::model::Sample;
use super::range::{Rules, five_minute_sum};

/// The lost states a place can be tied to.
pub const STATES: &str = "input|hung|compiling|checkpointing";

/// How many runs that lost most at a place are named.
pub const TOP_RUNS: usize = 3;

/// What the ranking is grouped by (`--by`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum By {
    Namespace,
    Run,
    User,
}

impl By {
    pub fn label(self) -> &'static str {
        match self {
            By::Namespace => "namespace",
            By::Run => "run",
            By::User => "user",
        }
    }
}

/// The rules each query reads.
const PLACES_5M: &str = "instance_namespace_user_run_state_kind_place_library:stallwatch_gpu_lost_by_place_seconds:rate5m";
const UNPLACED_5M: &str =
    "instance_namespace_user_run_state_reason:stallwatch_gpu_lost_unplaced_seconds:rate5m";
const CALLS_5M: &str = "instance_place_library:stallwatch_gpu_place_call_seconds:median";
const PLACES_1H: &str =
    "namespace_user_run_state_kind_place_library:stallwatch_gpu_lost_by_place_seconds:increase1h";
const UNPLACED_1H: &str =
    "namespace_user_run_state_reason:stallwatch_gpu_lost_unplaced_seconds:increase1h";
const HOST_PLACES_1H: &str =
    "instance_place_library:stallwatch_gpu_lost_by_place_seconds:increase1h";
const CALLS_1H: &str = "instance_place_library:stallwatch_gpu_place_call_seconds:last1h";
const LEDGER_1H: &str = "instance:stallwatch_gpu_lost_seconds:increase1h";

const PLACE_LABELS: &str = "namespace, user, run, state, kind, place, library";
const UNPLACED_LABELS: &str = "namespace, user, run, state, reason";

/// The PromQL of one answer over the last `range_s`, from the rules given.
#[derive(Debug, Clone, PartialEq)]
pub struct Queries {
    /// GPU-seconds lost by owner, state, kind and place.
    pub places: String,
    /// Hosts each place lost time on.
    pub hosts: String,
    /// The median over hosts of each place's call time, as last measured.
    pub calls: String,
    /// GPU-seconds lost by owner, state and reason that no place was tied to.
    pub unplaced: String,
    /// The ledger's GPU-seconds in the states a place can be tied to.
    pub ledger: String,
    /// How many hours the hourly rules recorded (hourly rules only).
    pub hours: Option<String>,
}

impl Queries {
    pub fn new(rules: Rules, range_s: u64) -> Queries {
        let r = range_s;
        match rules {
            Rules::Hourly => Queries {
                places: format!("sum by ({PLACE_LABELS}) (sum_over_time({PLACES_1H}[{r}s]))"),
                hosts: format!(
                    "count by (place, library) (sum by (instance, place, library) (sum_over_time({HOST_PLACES_1H}[{r}s])) > 0)"
                ),
                calls: format!(
                    "quantile by (place, library) (0.5, last_over_time({CALLS_1H}[{r}s]))"
                ),
                unplaced: format!(
                    "sum by ({UNPLACED_LABELS}) (sum_over_time({UNPLACED_1H}[{r}s]))"
                ),
                ledger: format!("sum(sum_over_time({LEDGER_1H}[{r}s]))"),
                hours: Some(format!("max(count_over_time({LEDGER_1H}[{r}s]))")),
            },
            Rules::FiveMinute => Queries {
                places: format!(
                    "sum by ({PLACE_LABELS}) ({})",
                    five_minute_sum(PLACES_5M, r)
                ),
                hosts: format!(
                    "count by (place, library) (sum by (instance, place, library) ({}) > 0)",
                    five_minute_sum(PLACES_5M, r)
                ),
                calls: format!(
                    "quantile by (place, library) (0.5, last_over_time({CALLS_5M}[{r}s]))"
                ),
                unplaced: format!(
                    "sum by ({UNPLACED_LABELS}) ({})",
                    five_minute_sum(UNPLACED_5M, r)
                ),
                ledger: format!(
                    "sum({})",
                    five_minute_sum(
                        &format!(
                            "instance_state:stallwatch_gpu_time_seconds:rate5m{{state=~\"{STATES}\"}}"
                        ),
                        r
                    )
                ),
                hours: None,
            },
        }
    }
}

/// GPU-hours of one state and kind (or phase) at a place.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KindHours {
    pub state: String,
    pub kind: String,
    pub gpu_hours: f64,
}

/// A run's GPU-hours lost at a place.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunHours {
    pub run: String,
    pub gpu_hours: f64,
}

/// One place: a line of the user's code, and the installed function under
/// it (none when the line is the user's own leaf).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Place {
    pub place: String,
    pub library: Option<String>,
    /// The state and kind it lost most to.
    pub state: String,
    pub kind: String,
    pub gpu_hours: f64,
    /// Of the lost GPU-hours (placed and unplaced) of the fleet or the group.
    pub share: f64,
    /// Every state and kind it lost to, most first.
    pub kinds: Vec<KindHours>,
    pub runs: usize,
    pub namespaces: usize,
    /// Hosts it lost time on, over the fleet (absent when not known).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hosts: Option<usize>,
    /// The median over hosts of one call's time there, as last measured
    /// (absent where none was timed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call_seconds: Option<f64>,
    /// The runs that lost most at it, most first.
    pub top_runs: Vec<RunHours>,
}

/// Lost GPU-hours no place was tied to, for one reason.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReasonHours {
    pub reason: String,
    pub gpu_hours: f64,
}

/// The places of the fleet or of one group, ranked.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ranking {
    /// Placed and unplaced.
    pub lost_gpu_hours: f64,
    pub placed_gpu_hours: f64,
    /// Placed over lost; absent when nothing was lost.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placed_share: Option<f64>,
    /// By reason, most first.
    pub unplaced: Vec<ReasonHours>,
    /// How many places there are in all; `places` holds the top ones.
    pub places_total: usize,
    pub places: Vec<Place>,
}

/// One namespace, run or user, with its own ranking.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Group {
    /// None for the time of GPUs whose owner has no such label.
    pub name: Option<String>,
    #[serde(flatten)]
    pub ranking: Ranking,
}

/// The whole answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Causes {
    /// The range asked for, as given (`7d`).
    pub since: String,
    pub range_seconds: u64,
    /// The rules read: `5m` or `1h`.
    pub rules: Rules,
    /// How many of the range's hours the hourly rules have recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hours_recorded: Option<u64>,
    /// The ledger's GPU-hours in the states a place can be tied to, on every
    /// host (a host whose daemon exports no places counts here only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ledger_lost_gpu_hours: Option<f64>,
    #[serde(flatten)]
    pub fleet: Ranking,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by: Option<By>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub groups_total: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub groups: Option<Vec<Group>>,
}

/// What the queries gave.
pub struct Answers<'a> {
    pub since: &'a str,
    pub range_seconds: u64,
    pub rules: Rules,
    pub hours_recorded: Option<u64>,
    pub places: &'a [Sample],
    pub hosts: &'a [Sample],
    pub calls: &'a [Sample],
    pub unplaced: &'a [Sample],
    pub ledger: Option<f64>,
    pub by: Option<By>,
    pub top: usize,
}

/// A place's key: its line and library.
type Key = (String, Option<String>);

fn key(s: &Sample) -> Key {
    let library = s.label("library");
    (
        s.label("place").to_owned(),
        (!library.is_empty()).then(|| library.to_owned()),
    )
}

/// One place's lost GPU-seconds as read: by (state, kind), run and namespace.
#[derive(Default)]
struct Tally {
    kinds: BTreeMap<(String, String), f64>,
    runs: BTreeMap<String, f64>,
    namespaces: BTreeSet<String>,
}

impl Tally {
    fn add(&mut self, s: &Sample) {
        let k = (s.label("state").to_owned(), s.label("kind").to_owned());
        *self.kinds.entry(k).or_default() += s.value;
        if !s.label("run").is_empty() {
            *self.runs.entry(s.label("run").to_owned()).or_default() += s.value;
        }
        if !s.label("namespace").is_empty() {
            self.namespaces.insert(s.label("namespace").to_owned());
        }
    }

    fn seconds(&self) -> f64 {
        self.kinds.values().fold(0.0, |sum, v| sum + v)
    }
}

/// Most first, then by name: the order of every list here.
fn most_first<K: Ord>(a: &(K, f64), b: &(K, f64)) -> std::cmp::Ordering {
    b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
}

/// What the fleet-wide queries say of each place: its hosts and call time.
struct Fleetwide {
    hosts: BTreeMap<Key, usize>,
    calls: BTreeMap<Key, f64>,
}

fn rank(places: &[&Sample], unplaced: &[&Sample], fleetwide: &Fleetwide, top: usize) -> Ranking {
    let mut tallies: BTreeMap<Key, Tally> = BTreeMap::new();
    for s in places {
        tallies.entry(key(s)).or_default().add(s);
    }
    let mut reasons: BTreeMap<String, f64> = BTreeMap::new();
    for s in unplaced {
        *reasons.entry(s.label("reason").to_owned()).or_default() += s.value;
    }
    let placed = tallies.values().fold(0.0, |sum, t| sum + t.seconds());
    let unplaced_seconds = reasons.values().fold(0.0, |sum, v| sum + v);
    let lost = placed + unplaced_seconds;
    let mut ranked: Vec<(Key, f64)> = tallies
        .iter()
        .map(|(k, t)| (k.clone(), t.seconds()))
        .collect();
    ranked.sort_by(most_first);
    let places_total = ranked.len();
    let places = ranked
        .into_iter()
        .take(top)
        .map(|(k, seconds)| {
            let t = &tallies[&k];
            let mut kinds: Vec<((String, String), f64)> =
                t.kinds.iter().map(|(k, v)| (k.clone(), *v)).collect();
            kinds.sort_by(most_first);
            let mut runs: Vec<(String, f64)> =
                t.runs.iter().map(|(r, v)| (r.clone(), *v)).collect();
            runs.sort_by(most_first);
            let ((state, kind), _) = kinds[0].clone();
            Place {
                state,
                kind,
                gpu_hours: seconds / 3600.0,
                share: if lost > 0.0 { seconds / lost } else { 0.0 },
                kinds: kinds
                    .into_iter()
                    .map(|((state, kind), v)| KindHours {
                        state,
                        kind,
                        gpu_hours: v / 3600.0,
                    })
                    .collect(),
                runs: runs.len(),
                namespaces: t.namespaces.len(),
                hosts: fleetwide.hosts.get(&k).copied(),
                call_seconds: fleetwide.calls.get(&k).copied(),
                top_runs: runs
                    .into_iter()
                    .take(TOP_RUNS)
                    .map(|(run, v)| RunHours {
                        run,
                        gpu_hours: v / 3600.0,
                    })
                    .collect(),
                place: k.0,
                library: k.1,
            }
        })
        .collect();
    let mut reasons: Vec<(String, f64)> = reasons.into_iter().collect();
    reasons.sort_by(most_first);
    Ranking {
        lost_gpu_hours: lost / 3600.0,
        placed_gpu_hours: placed / 3600.0,
        placed_share: (lost > 0.0).then(|| placed / lost),
        unplaced: reasons
            .into_iter()
            .map(|(reason, v)| ReasonHours {
                reason,
                gpu_hours: v / 3600.0,
            })
            .collect(),
        places_total,
        places,
    }
}

/// A sample worth counting: a finite, positive amount.
fn counts(s: &&Sample) -> bool {
    s.value.is_finite() && s.value > 0.0
}

/// The answer; None when no place and no unplaced time lies in the range.
pub fn causes(a: &Answers) -> Option<Causes> {
    let places: Vec<&Sample> = a
        .places
        .iter()
        .filter(counts)
        .filter(|s| !s.label("place").is_empty())
        .collect();
    let unplaced: Vec<&Sample> = a.unplaced.iter().filter(counts).collect();
    if places.is_empty() && unplaced.is_empty() {
        return None;
    }
    let fleetwide = Fleetwide {
        hosts: a
            .hosts
            .iter()
            .filter(|s| s.value.is_finite() && s.value >= 0.0)
            .map(|s| (key(s), s.value as usize))
            .collect(),
        calls: a
            .calls
            .iter()
            .filter(|s| s.value.is_finite())
            .map(|s| (key(s), s.value))
            .collect(),
    };
    let fleet = rank(&places, &unplaced, &fleetwide, a.top);
    let groups = a.by.map(|by| {
        let name = |s: &Sample| Some(s.label(by.label()).to_owned()).filter(|n| !n.is_empty());
        let mut split: BTreeMap<Option<String>, (Vec<&Sample>, Vec<&Sample>)> = BTreeMap::new();
        for s in &places {
            split.entry(name(s)).or_default().0.push(s);
        }
        for s in &unplaced {
            split.entry(name(s)).or_default().1.push(s);
        }
        let mut groups: Vec<Group> = split
            .into_iter()
            .map(|(name, (p, u))| Group {
                name,
                ranking: rank(&p, &u, &fleetwide, a.top),
            })
            .collect();
        groups.sort_by(|x, y| {
            y.ranking
                .lost_gpu_hours
                .total_cmp(&x.ranking.lost_gpu_hours)
                .then(x.name.cmp(&y.name))
        });
        groups
    });
    Some(Causes {
        since: a.since.to_owned(),
        range_seconds: a.range_seconds,
        rules: a.rules,
        hours_recorded: a.hours_recorded,
        ledger_lost_gpu_hours: a.ledger.filter(|v| v.is_finite()).map(|v| v / 3600.0),
        fleet,
        by: a.by,
        groups_total: groups.as_ref().map(Vec::len),
        groups: groups.map(|mut g| {
            g.truncate(a.top);
            g
        }),
    })
}

/// What to say when no place and no unplaced time lies in the range.
pub fn nothing_recorded(rules: Rules, since: &str, prometheus: &str) -> String {
    match rules {
        Rules::Hourly => format!(
            "no hourly series of {PLACES_1H} or {UNPLACED_1H} in the last {since} at {prometheus}: \
             the rules that record them (group stallwatch.causes.hourly of \
             deploy/prometheus/stallwatch.rules.yml) run once an hour, so the first answer comes \
             within an hour of loading them; a range under 6h reads the 5-minute rules \
             (docs/fleet.md#costliest-lines)\n"
        ),
        Rules::FiveMinute => format!(
            "no series of {PLACES_5M} or {UNPLACED_5M} in the last {since} at {prometheus}: \
             the rules of group stallwatch.causes (deploy/prometheus/stallwatch.rules.yml) record \
             them from the daemons' stallwatch_gpu_lost_by_place_seconds_total and \
             stallwatch_gpu_lost_unplaced_seconds_total, which count only lost time in \
             input, hung, compiling or checkpointing (docs/fleet.md#costliest-lines)\n"
        ),
    }
}

fn hours(v: f64) -> String {
    format!("{v:.1}")
}

fn percent(v: Option<f64>) -> String {
    v.map_or("-".to_owned(), |v| format!("{:.1}%", v * 100.0))
}

/// A call's time: `85 ms`, `2.5 s`.
fn call(v: Option<f64>) -> String {
    match v {
        None => "-".to_owned(),
        Some(s) if s < 1.0 => format!("{:.0} ms", s * 1000.0),
        Some(s) => format!("{s:.1} s"),
    }
}

/// The unplaced time by reason: `no_read 1020.4, over_cap 152.2`.
fn reasons(r: &[ReasonHours]) -> String {
    r.iter()
        .map(|x| format!("{} {}", x.reason, hours(x.gpu_hours)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `top 10 of 52 places by GPU-hours lost:` and the table.
fn places_table(out: &mut String, r: &Ranking) {
    let _ = writeln!(
        out,
        "top {} of {} by GPU-hours lost:",
        r.places.len(),
        match r.places_total {
            1 => "1 place".to_owned(),
            n => format!("{n} places"),
        }
    );
    let library = |p: &Place| p.library.clone().unwrap_or_else(|| "-".to_owned());
    let kind = |p: &Place| match p.kinds.len() {
        1 => p.kind.clone(),
        n => format!("{} +{}", p.kind, n - 1),
    };
    let pw = r
        .places
        .iter()
        .map(|p| p.place.len())
        .max()
        .unwrap_or(0)
        .max(5);
    let lw = r
        .places
        .iter()
        .map(|p| library(p).len())
        .max()
        .unwrap_or(0)
        .max(7);
    let kw = r
        .places
        .iter()
        .map(|p| kind(p).len())
        .max()
        .unwrap_or(0)
        .max(4);
    let _ = writeln!(
        out,
        "{:>10}  {:>6}  {:<pw$}  {:<lw$}  {:<kw$}  {:>5}  {:>10}  {:>5}  {:>7}  TOP RUNS",
        "GPU-HOURS", "SHARE", "PLACE", "LIBRARY", "KIND", "RUNS", "NAMESPACES", "HOSTS", "CALL"
    );
    for p in &r.places {
        let runs = if p.top_runs.is_empty() {
            "-".to_owned()
        } else {
            p.top_runs
                .iter()
                .map(|x| format!("{} ({})", x.run, hours(x.gpu_hours)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = writeln!(
            out,
            "{:>10}  {:>6}  {:<pw$}  {:<lw$}  {:<kw$}  {:>5}  {:>10}  {:>5}  {:>7}  {runs}",
            hours(p.gpu_hours),
            percent(Some(p.share)),
            p.place,
            library(p),
            kind(p),
            p.runs,
            p.namespaces,
            p.hosts.map_or("-".to_owned(), |h| h.to_string()),
            call(p.call_seconds),
        );
    }
}

/// The answer as text: the fleet's lost time and the share placed, the
/// unplaced time by reason, then the places that lost most (per group with
/// `--by`).
pub fn render(c: &Causes) -> String {
    let mut out = String::new();
    let f = &c.fleet;
    let _ = writeln!(
        out,
        "last {} ({}): {} GPU-hours lost in input, hung, compiling and checkpointing, {} ({}) at a place in the jobs' code",
        c.since,
        c.rules.words(),
        hours(f.lost_gpu_hours),
        hours(f.placed_gpu_hours),
        percent(f.placed_share),
    );
    if let Some(recorded) = c.hours_recorded {
        let range_hours = c.range_seconds.div_ceil(3600);
        if recorded + 1 < range_hours {
            let _ = writeln!(
                out,
                "(the hourly rules have recorded {recorded} of the {range_hours} hours asked for)"
            );
        }
    }
    if let Some(ledger) = c.ledger_lost_gpu_hours
        && ledger > f.lost_gpu_hours * 1.05 + 0.05
    {
        let _ = writeln!(
            out,
            "(the ledger booked {} GPU-hours to those states: the rest is on hosts whose daemon exports no places)",
            hours(ledger)
        );
    }
    let unplaced = f.lost_gpu_hours - f.placed_gpu_hours;
    if f.unplaced.is_empty() {
        let _ = writeln!(out, "unplaced: none");
    } else {
        let _ = writeln!(
            out,
            "unplaced: {} GPU-hours: {}",
            hours(unplaced.max(0.0)),
            reasons(&f.unplaced)
        );
    }
    out.push('\n');
    let (Some(by), Some(groups)) = (c.by, &c.groups) else {
        places_table(&mut out, f);
        return out;
    };
    let label = by.label();
    let total = c.groups_total.unwrap_or(groups.len());
    let _ = writeln!(
        out,
        "top {} of {} by lost GPU-hours:",
        groups.len(),
        match total {
            1 => format!("1 {label}"),
            n => format!("{n} {label}s"),
        }
    );
    for g in groups {
        let r = &g.ranking;
        let name = g.name.clone().unwrap_or_else(|| format!("(no {label})"));
        out.push('\n');
        let _ = write!(
            out,
            "{label} {name}: {} GPU-hours lost, {} ({}) at places",
            hours(r.lost_gpu_hours),
            hours(r.placed_gpu_hours),
            percent(r.placed_share)
        );
        if r.unplaced.is_empty() {
            out.push('\n');
        } else {
            let _ = writeln!(out, "; unplaced {}", reasons(&r.unplaced));
        }
        if !r.places.is_empty() {
            places_table(&mut out, r);
        }
    }
    out
}

#[cfg(test)]
mod tests;
