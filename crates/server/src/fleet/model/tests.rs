use super::*;

fn sample(labels: &[(&str, &str)], value: f64) -> Sample {
    Sample::of(labels, value)
}

fn rank(run: &str, host: &str, rank: &str, value: f64) -> Sample {
    sample(
        &[
            ("run", run),
            ("instance", host),
            ("gpu", "0"),
            ("rank", rank),
        ],
        value,
    )
}

fn alert(name: &str, run: &str, host: &str, rank: &str, kind: &str, since: f64) -> Sample {
    let mut labels = vec![("alertname", name), ("run", run)];
    if !host.is_empty() {
        labels.extend([("instance", host), ("gpu", "0"), ("rank", rank)]);
    }
    if !kind.is_empty() {
        labels.push(("kind", kind));
    }
    sample(&labels, since)
}

#[test]
fn a_straggler_with_two_findings_is_one_entry() {
    let a = Answers {
        utilization: vec![
            rank("r1", "a", "0", 1.0),
            rank("r1", "b", "1", 0.15),
            rank("r1", "c", "2", 1.0),
        ],
        work: vec![rank("r1", "b", "1", 0.1)],
        world_size: vec![sample(&[("run", "r1")], 4.0)],
        alerts: vec![
            alert(
                "StallwatchRunStraggler",
                "r1",
                "b",
                "1",
                "input_starved",
                100.0,
            ),
            alert(
                "StallwatchRunStraggler",
                "r1",
                "b",
                "1",
                "single_thread_bound",
                90.0,
            ),
            alert("StallwatchRunRanksMissing", "r1", "", "", "", 50.0),
        ],
        ..Answers::default()
    };
    let runs = runs(&a);
    assert_eq!(runs.len(), 1);
    let r = &runs[0];
    assert_eq!(
        (r.state, r.ranks_seen, r.world_size),
        (State::Straggler, 3, Some(4))
    );
    assert_eq!(r.missing_ranks, [3]);
    assert_eq!(r.stragglers.len(), 1);
    let s = &r.stragglers[0];
    assert_eq!(
        (s.rank, s.instance.as_str(), s.kind.as_str()),
        (1, "b", "input_starved, single_thread_bound")
    );
    assert_eq!(
        (s.since, s.utilization, s.work),
        (90.0, Some(0.15), Some(0.1))
    );
    assert_eq!(r.since, Some(50.0));
}

#[test]
fn a_hung_run_names_its_suspects_with_their_own_kinds() {
    let a = Answers {
        utilization: vec![rank("h", "a", "0", 1.0), rank("h", "b", "1", 0.0)],
        kinds: vec![sample(
            &[
                ("run", "h"),
                ("instance", "b"),
                ("gpu", "0"),
                ("kind", "idle_no_progress"),
            ],
            1.0,
        )],
        alerts: vec![alert("StallwatchRunHung", "h", "b", "1", "", 10.0)],
        ..Answers::default()
    };
    let r = &runs(&a)[0];
    assert_eq!(r.state, State::Hung);
    assert_eq!(r.suspects[0].kind, "idle_no_progress");
    assert!(!r.suspects[0].gone);
    assert!(
        serde_json::to_value(&r.suspects[0])
            .unwrap()
            .get("gone")
            .is_none()
    );
    assert!(r.stragglers.is_empty() && r.missing_ranks.is_empty());
}

#[test]
fn a_suspect_gone_from_its_gpu_is_named_where_it_was_last_seen() {
    let a = Answers {
        utilization: vec![rank("k", "a", "0", 1.0), rank("k", "c", "2", 1.0)],
        world_size: vec![sample(&[("run", "k")], 3.0)],
        alerts: vec![alert("StallwatchRunHung", "k", "b", "1", "", 10.0)],
        ..Answers::default()
    };
    let r = &runs(&a)[0];
    assert_eq!(r.state, State::Hung);
    let s = &r.suspects[0];
    assert_eq!((s.rank, s.instance.as_str(), s.gone), (1, "b", true));
    assert_eq!(r.missing_ranks, [1]);
    let json = serde_json::to_value(s).unwrap();
    assert_eq!(json["gone"], true);
    assert!(json.get("utilization").is_none());
    assert!(r.stragglers.is_empty());
}

#[test]
fn runs_with_problems_come_first_and_healthy_ones_say_so() {
    let a = Answers {
        utilization: vec![
            rank("a-healthy", "x", "0", 0.9),
            rank("z-stalled", "y", "0", 0.3),
        ],
        alerts: vec![alert(
            "StallwatchRunStalled",
            "z-stalled",
            "",
            "",
            "input_bound",
            5.0,
        )],
        ..Answers::default()
    };
    let runs = runs(&a);
    assert_eq!(
        runs.iter().map(|r| r.run.as_str()).collect::<Vec<_>>(),
        ["z-stalled", "a-healthy"]
    );
    assert_eq!(runs[0].state, State::Stalled);
    assert_eq!(runs[0].stalled_kinds, ["input_bound"]);
    assert_eq!((runs[1].state, runs[1].since), (State::Healthy, None));
    let json = serde_json::to_value(&runs[1]).unwrap();
    assert_eq!(json["state"], "healthy");
    assert_eq!(json["stragglers"], serde_json::json!([]));
}
