use super::*;

fn sample(labels: &[(&str, &str)], value: f64) -> Sample {
    Sample::of(labels, value)
}

/// GPU-hours lost at a place by an owner.
fn lost(ns: &str, run: &str, kind: &str, place: &str, library: &str, gpu_hours: f64) -> Sample {
    let state = match kind {
        "spinning" | "busy_no_progress" | "idle_no_progress" => "hung",
        "compiling" | "checkpointing" => kind,
        _ => "input",
    };
    sample(
        &[
            ("namespace", ns),
            ("user", "alice"),
            ("run", run),
            ("state", state),
            ("kind", kind),
            ("place", place),
            ("library", library),
        ],
        gpu_hours * 3600.0,
    )
}

fn unplaced(ns: &str, reason: &str, gpu_hours: f64) -> Sample {
    sample(
        &[("namespace", ns), ("state", "input"), ("reason", reason)],
        gpu_hours * 3600.0,
    )
}

fn at(place: &str, library: &str, value: f64) -> Sample {
    sample(&[("place", place), ("library", library)], value)
}

const DECODE: &str = "decode_image (data.py:42)";
const REDUCE: &str = "all_reduce (train.py:88)";
const SAVE: &str = "save_state (ckpt.py:10)";

struct Fixture {
    places: Vec<Sample>,
    hosts: Vec<Sample>,
    calls: Vec<Sample>,
    unplaced: Vec<Sample>,
}

fn fixture() -> Fixture {
    Fixture {
        places: vec![
            lost(
                "team-a",
                "r1",
                "input_starved",
                DECODE,
                "PIL.Image.open",
                30.0,
            ),
            lost(
                "team-a",
                "r2",
                "input_starved",
                DECODE,
                "PIL.Image.open",
                50.0,
            ),
            lost("team-a", "r2", "input_bound", DECODE, "PIL.Image.open", 5.0),
            lost("team-b", "", "input_bound", DECODE, "PIL.Image.open", 10.0),
            lost(
                "team-b",
                "r3",
                "input_starved",
                DECODE,
                "PIL.Image.open",
                20.0,
            ),
            lost(
                "team-a",
                "r4",
                "input_starved",
                DECODE,
                "PIL.Image.open",
                1.0,
            ),
            lost(
                "team-a",
                "r2",
                "spinning",
                REDUCE,
                "torch.distributed.all_reduce",
                40.0,
            ),
            lost("team-b", "", "checkpointing", SAVE, "", 12.0),
            // Nothing lost there in the range: not a place of the answer.
            lost("team-c", "r9", "input_starved", "idle (x.py:1)", "", 0.0),
        ],
        hosts: vec![
            at(DECODE, "PIL.Image.open", 812.0),
            at(REDUCE, "torch.distributed.all_reduce", 64.0),
            at(SAVE, "", 1.0),
        ],
        calls: vec![
            at(DECODE, "PIL.Image.open", 0.085),
            at(REDUCE, "torch.distributed.all_reduce", 2.5),
        ],
        unplaced: vec![
            unplaced("team-a", "no_read", 20.0),
            unplaced("team-b", "no_permission", 8.0),
            unplaced("team-a", "over_cap", 4.0),
            unplaced("team-a", "no_read", 0.0),
        ],
    }
}

fn answers(f: &Fixture, by: Option<By>, top: usize) -> Answers<'_> {
    Answers {
        since: "7d",
        range_seconds: 7 * 86_400,
        rules: Rules::Hourly,
        hours_recorded: Some(168),
        places: &f.places,
        hosts: &f.hosts,
        calls: &f.calls,
        unplaced: &f.unplaced,
        ledger: Some(200.0 * 3600.0),
        by,
        top,
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn hourly_queries_read_the_hourly_rules_over_the_range() {
    let q = Queries::new(Rules::Hourly, 604_800);
    assert_eq!(
        q.places,
        "sum by (namespace, user, run, state, kind, place, library) (sum_over_time(namespace_user_run_state_kind_place_library:stallwatch_gpu_lost_by_place_seconds:increase1h[604800s]))"
    );
    assert_eq!(
        q.hosts,
        "count by (place, library) (sum by (instance, place, library) (sum_over_time(instance_place_library:stallwatch_gpu_lost_by_place_seconds:increase1h[604800s])) > 0)"
    );
    assert_eq!(
        q.calls,
        "quantile by (place, library) (0.5, last_over_time(instance_place_library:stallwatch_gpu_place_call_seconds:last1h[604800s]))"
    );
    assert!(q.unplaced.contains(
        "sum_over_time(namespace_user_run_state_reason:stallwatch_gpu_lost_unplaced_seconds:increase1h[604800s])"
    ));
    assert_eq!(
        q.hours.as_deref(),
        Some("max(count_over_time(instance:stallwatch_gpu_lost_seconds:increase1h[604800s]))")
    );
}

#[test]
fn short_queries_sum_the_five_minute_rules_at_minute_steps() {
    let q = Queries::new(Rules::FiveMinute, 600);
    assert_eq!(
        q.places,
        "sum by (namespace, user, run, state, kind, place, library) (sum_over_time((instance_namespace_user_run_state_kind_place_library:stallwatch_gpu_lost_by_place_seconds:rate5m)[600s:1m]) * 600 / scalar(count_over_time(vector(1)[600s:1m])))"
    );
    assert!(q.hosts.starts_with("count by (place, library) (sum by (instance, place, library) (sum_over_time((instance_namespace_user_run_state_kind_place_library"));
    assert!(q.calls.contains(
        "last_over_time(instance_place_library:stallwatch_gpu_place_call_seconds:median[600s])"
    ));
    assert!(q.ledger.contains(
        "instance_state:stallwatch_gpu_time_seconds:rate5m{state=~\"input|hung|compiling|checkpointing\"}"
    ));
    assert_eq!(q.hours, None);
}

#[test]
fn places_ranked_by_gpu_hours_with_runs_namespaces_hosts_and_call_time() {
    let f = fixture();
    let c = causes(&answers(&f, None, 10)).unwrap();
    let r = &c.fleet;
    // 116 + 40 + 12 placed, 32 unplaced.
    assert!(close(r.placed_gpu_hours, 168.0));
    assert!(close(r.lost_gpu_hours, 200.0));
    assert!(close(r.placed_share.unwrap(), 0.84));
    assert_eq!(r.places_total, 3);
    let names: Vec<&str> = r.places.iter().map(|p| p.place.as_str()).collect();
    assert_eq!(names, [DECODE, REDUCE, SAVE]);
    let d = &r.places[0];
    assert_eq!(d.library.as_deref(), Some("PIL.Image.open"));
    assert!(close(d.gpu_hours, 116.0) && close(d.share, 0.58));
    // The kind it lost most to first; every kind with its GPU-hours.
    assert_eq!(
        (d.state.as_str(), d.kind.as_str()),
        ("input", "input_starved")
    );
    assert_eq!(d.kinds.len(), 2);
    assert!(close(d.kinds[0].gpu_hours, 101.0) && close(d.kinds[1].gpu_hours, 15.0));
    // r1, r2, r3, r4 (the notebook has no run); team-a and team-b.
    assert_eq!((d.runs, d.namespaces, d.hosts), (4, 2, Some(812)));
    assert_eq!(d.call_seconds, Some(0.085));
    let top: Vec<(&str, f64)> = d
        .top_runs
        .iter()
        .map(|x| (x.run.as_str(), x.gpu_hours))
        .collect();
    assert_eq!(top, [("r2", 55.0), ("r1", 30.0), ("r3", 20.0)]);
    // The user's own leaf: no library, no call timed.
    let s = &r.places[2];
    assert_eq!((s.library.as_deref(), s.call_seconds), (None, None));
    assert_eq!(
        (s.state.as_str(), s.kind.as_str()),
        ("checkpointing", "checkpointing")
    );
    assert_eq!((s.runs, s.namespaces, s.hosts), (0, 1, Some(1)));
    assert!(s.top_runs.is_empty());
    // Unplaced by reason, most first.
    let reasons: Vec<(&str, f64)> = r
        .unplaced
        .iter()
        .map(|x| (x.reason.as_str(), x.gpu_hours))
        .collect();
    assert_eq!(
        reasons,
        [("no_read", 20.0), ("no_permission", 8.0), ("over_cap", 4.0)]
    );
    assert_eq!(c.ledger_lost_gpu_hours, Some(200.0));
    assert_eq!((c.by, c.groups.as_ref()), (None, None));
}

#[test]
fn top_cuts_the_list_not_the_totals() {
    let f = fixture();
    let c = causes(&answers(&f, None, 1)).unwrap();
    assert_eq!(c.fleet.places.len(), 1);
    assert_eq!(c.fleet.places_total, 3);
    assert!(close(c.fleet.placed_gpu_hours, 168.0));
}

#[test]
fn by_namespace_ranks_each_namespace_on_its_own() {
    let f = fixture();
    let c = causes(&answers(&f, Some(By::Namespace), 10)).unwrap();
    let groups = c.groups.as_ref().unwrap();
    assert_eq!(c.groups_total, Some(2));
    assert_eq!(groups[0].name.as_deref(), Some("team-a"));
    let a = &groups[0].ranking;
    // 86 + 40 placed, 24 unplaced.
    assert!(close(a.placed_gpu_hours, 126.0) && close(a.lost_gpu_hours, 150.0));
    let names: Vec<&str> = a.places.iter().map(|p| p.place.as_str()).collect();
    assert_eq!(names, [DECODE, REDUCE]);
    let decode = &a.places[0];
    assert!(close(decode.gpu_hours, 86.0) && close(decode.share, 86.0 / 150.0));
    assert_eq!((decode.runs, decode.namespaces), (3, 1));
    // Hosts and call time are the place's over the fleet.
    assert_eq!(
        (decode.hosts, decode.call_seconds),
        (Some(812), Some(0.085))
    );
    let b = &groups[1].ranking;
    assert_eq!(groups[1].name.as_deref(), Some("team-b"));
    assert!(close(b.placed_gpu_hours, 42.0) && close(b.lost_gpu_hours, 50.0));
    assert_eq!(b.unplaced[0].reason, "no_permission");
    // The fleet's ranking is there too.
    assert_eq!(c.fleet.places_total, 3);
}

#[test]
fn by_run_puts_time_without_a_run_under_none() {
    let f = fixture();
    let c = causes(&answers(&f, Some(By::Run), 10)).unwrap();
    let names: Vec<Option<&str>> = c
        .groups
        .as_ref()
        .unwrap()
        .iter()
        .map(|g| g.name.as_deref())
        .collect();
    // r2: 55 + 40 placed; the notebook's 22 and the unplaced 32 have no run.
    assert_eq!(
        names,
        [Some("r2"), None, Some("r1"), Some("r3"), Some("r4")]
    );
    let text = render(&c);
    assert!(text.contains("\nrun (no run): 54.0 GPU-hours lost, 22.0 (40.7%) at places; unplaced no_read 20.0, no_permission 8.0, over_cap 4.0\n"), "{text}");
}

#[test]
fn nothing_in_the_range_is_no_answer() {
    let none: Vec<Sample> = vec![lost("t", "r", "input_starved", DECODE, "", 0.0)];
    let a = Answers {
        since: "10m",
        range_seconds: 600,
        rules: Rules::FiveMinute,
        hours_recorded: None,
        places: &none,
        hosts: &[],
        calls: &[],
        unplaced: &[],
        ledger: Some(0.0),
        by: None,
        top: 10,
    };
    assert_eq!(causes(&a), None);
    let msg = nothing_recorded(Rules::FiveMinute, "10m", "http://p:9090");
    assert!(msg.contains("in the last 10m at http://p:9090") && msg.contains("stallwatch.causes"));
    let msg = nothing_recorded(Rules::Hourly, "7d", "http://p:9090");
    assert!(msg.contains("within an hour of loading them") && msg.contains("under 6h"));
}

#[test]
fn table_names_each_place_with_its_numbers() {
    let f = fixture();
    let c = causes(&answers(&f, None, 10)).unwrap();
    let text = render(&c);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "last 7d (hourly rules): 200.0 GPU-hours lost in input, hung, compiling and checkpointing, 168.0 (84.0%) at a place in the jobs' code"
    );
    assert_eq!(
        lines[1],
        "unplaced: 32.0 GPU-hours: no_read 20.0, no_permission 8.0, over_cap 4.0"
    );
    assert_eq!(lines[3], "top 3 of 3 places by GPU-hours lost:");
    assert!(
        lines[4].starts_with(" GPU-HOURS   SHARE  PLACE"),
        "{}",
        lines[4]
    );
    let row: Vec<&str> = lines[5].split_whitespace().collect();
    assert_eq!(
        row,
        [
            "116.0",
            "58.0%",
            "decode_image",
            "(data.py:42)",
            "PIL.Image.open",
            "input_starved",
            "+1",
            "4",
            "2",
            "812",
            "85",
            "ms",
            "r2",
            "(55.0),",
            "r1",
            "(30.0),",
            "r3",
            "(20.0)"
        ]
    );
    let row: Vec<&str> = lines[6].split_whitespace().collect();
    assert_eq!(
        row,
        [
            "40.0",
            "20.0%",
            "all_reduce",
            "(train.py:88)",
            "torch.distributed.all_reduce",
            "spinning",
            "1",
            "1",
            "64",
            "2.5",
            "s",
            "r2",
            "(40.0)"
        ]
    );
    let row: Vec<&str> = lines[7].split_whitespace().collect();
    assert_eq!(&row[4..], ["-", "checkpointing", "0", "1", "1", "-", "-"]);
    assert_eq!(lines.len(), 8);
}

#[test]
fn short_hours_and_a_larger_ledger_are_said() {
    let f = fixture();
    let mut a = answers(&f, None, 10);
    a.hours_recorded = Some(20);
    a.ledger = Some(300.0 * 3600.0);
    let text = render(&causes(&a).unwrap());
    assert!(text.contains("\n(the hourly rules have recorded 20 of the 168 hours asked for)\n"));
    assert!(text.contains("\n(the ledger booked 300.0 GPU-hours to those states: the rest is on hosts whose daemon exports no places)\n"));
}

#[test]
fn json_has_the_documented_shape() {
    let f = fixture();
    let c = causes(&answers(&f, Some(By::Namespace), 1)).unwrap();
    let v = serde_json::to_value(&c).unwrap();
    assert_eq!(v["rules"], "1h");
    assert_eq!(v["by"], "namespace");
    assert_eq!(v["hours_recorded"], 168);
    assert_eq!(v["places_total"], 3);
    assert_eq!(v["places"][0]["place"], DECODE);
    assert_eq!(v["places"][0]["top_runs"][0]["run"], "r2");
    assert_eq!(v["unplaced"][0]["reason"], "no_read");
    assert_eq!(v["groups_total"], 2);
    assert_eq!(v["groups"].as_array().unwrap().len(), 1);
    assert_eq!(v["groups"][0]["name"], "team-a");
    assert_eq!(v["groups"][0]["places"][0]["place"], DECODE);
    let fleet = causes(&answers(&f, None, 10)).unwrap();
    let v = serde_json::to_value(&fleet).unwrap();
    assert!(v.get("groups").is_none() && v.get("by").is_none());
    assert!(v["places"][2]["library"].is_null());
    assert!(v["places"][2].get("call_seconds").is_none());
}
