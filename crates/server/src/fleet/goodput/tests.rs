use super::*;

fn sample(labels: &[(&str, &str)], hours: f64) -> Sample {
    Sample {
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        value: hours * 3600.0,
    }
}

fn ns(namespace: &str, state: &str, hours: f64) -> Sample {
    sample(&[("namespace", namespace), ("state", state)], hours)
}

fn answers<'a>(by: By, time: &'a [Sample], progress: &'a [Sample], top: usize) -> Answers<'a> {
    Answers {
        by,
        since: "7d",
        range_seconds: 7 * 86_400,
        hours_recorded: 168,
        time,
        lost_progress: progress,
        top,
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn queries_read_the_hourly_rules_over_the_range() {
    assert_eq!(
        By::Namespace.query(604_800),
        "sum by (namespace, state) (sum_over_time(namespace_user_run_state:stallwatch_gpu_time_seconds:increase1h[604800s]))"
    );
    assert_eq!(
        By::Run.query(3600),
        "sum by (run, state, cause) (sum_over_time(run_state:stallwatch_gpu_time_seconds:increase1h[3600s]))"
    );
    assert_eq!(
        hours_query(86_400),
        "max(count_over_time(instance_state:stallwatch_gpu_time_seconds:increase1h{state=\"productive\"}[86400s]))"
    );
    assert!(
        lost_progress_query(60)
            .contains("run:stallwatch_gpu_lost_progress_seconds:increase1h[60s]")
    );
}

#[test]
fn goodput_ettr_and_every_state() {
    let time = [
        ns("team-a", "productive", 60.0),
        ns("team-a", "input", 20.0),
        ns("team-a", "no_job", 20.0),
        ns("team-b", "productive", 10.0),
        ns("team-b", "hung", 30.0),
        ns("team-b", "recovery", 5.0),
        // The GPUs with no owner.
        sample(&[("state", "no_job")], 55.0),
    ];
    let g = goodput(&answers(By::Namespace, &time, &[], 10)).unwrap();
    assert!(close(g.gpu_hours, 200.0));
    assert!(close(g.goodput.unwrap(), 70.0 / 200.0));
    assert!(close(g.ettr.unwrap(), 70.0 / 125.0));
    assert!(close(g.lost_gpu_hours, 55.0));
    // Every state, productive first, then the largest; zeros in the ledger's order.
    let names: Vec<&str> = g.states.iter().map(|s| s.state.as_str()).collect();
    assert_eq!(
        names,
        [
            "productive",
            "no_job",
            "hung",
            "input",
            "recovery",
            "unknown",
            "startup",
            "compiling",
            "checkpointing",
            "fault",
            "idle"
        ]
    );
    assert!(close(g.states.iter().map(|s| s.share).sum::<f64>(), 1.0));
    assert!(!names.contains(&WAITING_FOR_PEERS));
    // team-b lost the most (35 h: hung and recovery), then team-a (20 h of input), then
    // the GPUs of no namespace, which lost nothing.
    let order: Vec<Option<&str>> = g.groups.iter().map(|x| x.name.as_deref()).collect();
    assert_eq!(order, [Some("team-b"), Some("team-a"), None]);
    let b = &g.groups[0];
    assert!(close(b.lost_gpu_hours, 35.0));
    assert!(close(b.goodput.unwrap(), 10.0 / 45.0));
    let main = b.main_lost.as_ref().unwrap();
    assert_eq!((main.state.as_str(), main.gpu_hours), ("hung", 30.0));
    assert!(close(g.groups[1].ettr.unwrap(), 0.75));
    assert_eq!(g.groups[2].main_lost, None);
    assert_eq!(g.groups[2].ettr, None);
}

#[test]
fn runs_show_waiting_for_peers_with_its_cause_and_lost_progress() {
    let run = |r: &str, state: &str, cause: &str, hours: f64| {
        let mut l = vec![("run", r), ("state", state)];
        if !cause.is_empty() {
            l.push(("cause", cause));
        }
        sample(&l, hours)
    };
    let time = [
        run("r1", "productive", "", 70.0),
        run("r1", WAITING_FOR_PEERS, "input_bound", 25.0),
        run("r1", WAITING_FOR_PEERS, "throttled", 3.0),
        run("r1", "input", "", 2.0),
        run("r2", "productive", "", 40.0),
        run("r2", "recovery", "", 8.0),
        // A cause on a state other than waiting_for_peers is not one.
        run("r2", "hung", "spinning", 1.0),
    ];
    let progress = [sample(&[("run", "r2")], 6.0)];
    let g = goodput(&answers(By::Run, &time, &progress, 1)).unwrap();
    assert_eq!(g.groups_total, 2);
    assert_eq!(g.groups.len(), 1);
    let r1 = &g.groups[0];
    assert_eq!(r1.name.as_deref(), Some("r1"));
    let main = r1.main_lost.as_ref().unwrap();
    assert_eq!(main.describe(), "waited for peers (input_bound)");
    assert!(close(main.share, 0.25));
    assert_eq!(r1.lost_progress_gpu_hours, None);
    assert!(close(g.lost_progress_gpu_hours.unwrap(), 6.0));
    let waits: Vec<String> = g
        .states
        .iter()
        .filter(|s| s.state == WAITING_FOR_PEERS)
        .map(StateHours::describe)
        .collect();
    assert_eq!(
        waits,
        [
            "waited for peers (input_bound)",
            "waited for peers (throttled)"
        ]
    );
    assert!(
        g.states
            .iter()
            .any(|s| s.state == "hung" && s.cause.is_none())
    );

    let all = goodput(&answers(By::Run, &time, &progress, 10)).unwrap();
    assert!(close(all.groups[1].lost_progress_gpu_hours.unwrap(), 6.0));
    let text = render(&all);
    assert!(text.contains("LOST PROGRESS"), "{text}");
    assert!(
        text.contains("waited for peers (input_bound) (25.0 GPU-hours)"),
        "{text}"
    );
    assert!(text.contains("progress lost to crashes"), "{text}");
}

#[test]
fn runs_list_waiting_for_peers_even_at_zero() {
    let time = [sample(&[("run", "r1"), ("state", "productive")], 1.0)];
    let g = goodput(&answers(By::Run, &time, &[], 10)).unwrap();
    let waiting: Vec<&StateHours> = g
        .states
        .iter()
        .filter(|s| s.state == WAITING_FOR_PEERS)
        .collect();
    assert_eq!(waiting.len(), 1);
    assert_eq!(waiting[0].gpu_hours, 0.0);
    assert_eq!(g.states.len(), STATES.len() + 1);
}

#[test]
fn nothing_in_the_range_is_no_answer() {
    assert_eq!(goodput(&answers(By::User, &[], &[], 10)), None);
    let said = nothing_recorded(By::User, "7d", "http://prom:9090");
    assert!(said.contains("http://prom:9090"), "{said}");
    assert!(said.contains("within an hour"), "{said}");
    assert!(said.contains(" namespace_user_run_state:stallwatch_gpu_time_seconds:increase1h "));
}

#[test]
fn the_table() {
    let time = [
        sample(&[("user", "alice"), ("state", "productive")], 288.0),
        sample(&[("user", "alice"), ("state", "checkpointing")], 12.0),
        sample(&[("user", "bob"), ("state", "input")], 4.0),
        sample(&[("user", "bob"), ("state", "productive")], 16.0),
    ];
    let mut a = answers(By::User, &time, &[], 10);
    a.hours_recorded = 20;
    let text = render(&goodput(&a).unwrap());
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "last 7d: 320.0 GPU-hours, goodput 95.0% (productive), ETTR 95.0% (no_job left out), 16.0 GPU-hours lost"
    );
    assert_eq!(
        lines[1],
        "(the hourly rules have recorded 20 of the 168 hours asked for)"
    );
    assert!(
        text.contains("productive          304.0   95.0%\n"),
        "{text}"
    );
    assert!(
        text.contains("recovery              0.0    0.0%\n"),
        "{text}"
    );
    assert!(
        text.contains("top 2 of 2 users by lost GPU-hours"),
        "{text}"
    );
    let alice = lines.iter().find(|l| l.starts_with("alice")).unwrap();
    assert_eq!(
        *alice,
        "alice       300.0        12.0         0.0     96.0%     96.0%  checkpointing (12.0 GPU-hours)"
    );
    assert!(
        text.find("\nalice").unwrap() < text.find("\nbob").unwrap(),
        "{text}"
    );
}

#[test]
fn each_group_shows_its_idle_gpu_hours() {
    let time = [
        ns("team-a", "productive", 50.0),
        ns("team-a", "idle", 30.0),
        ns("team-a", "input", 20.0),
        ns("team-b", "productive", 90.0),
        ns("team-b", "hung", 10.0),
        sample(&[("state", "no_job")], 40.0),
    ];
    let g = goodput(&answers(By::Namespace, &time, &[], 10)).unwrap();
    let idle: Vec<(Option<&str>, f64)> = g
        .groups
        .iter()
        .map(|x| (x.name.as_deref(), x.idle_gpu_hours))
        .collect();
    assert_eq!(
        idle,
        [(Some("team-a"), 30.0), (Some("team-b"), 0.0), (None, 0.0)]
    );
    // Idle is part of what a group lost, and it is what team-a lost most to.
    let a = &g.groups[0];
    assert!(close(a.lost_gpu_hours, 50.0));
    assert_eq!(a.main_lost.as_ref().unwrap().state, "idle");

    // In --json, beside goodput, at zero too.
    let json: serde_json::Value = serde_json::to_value(&g).unwrap();
    let groups = json["groups"].as_array().unwrap();
    assert_eq!(groups[0]["idle_gpu_hours"], 30.0);
    assert_eq!(groups[1]["idle_gpu_hours"].to_string(), "0.0");
    assert!(groups.iter().all(|x| x.get("idle_gpu_hours").is_some()));

    // In the table, a column beside the lost GPU-hours and goodput.
    let text = render(&g);
    let lines: Vec<&str> = text.lines().collect();
    let head = lines.iter().find(|l| l.starts_with("NAMESPACE")).unwrap();
    assert_eq!(
        *head,
        "NAMESPACE        GPU-HOURS        LOST        IDLE   GOODPUT      ETTR  MAIN LOST STATE"
    );
    let a = lines.iter().find(|l| l.starts_with("team-a")).unwrap();
    assert_eq!(
        *a,
        "team-a               100.0        50.0        30.0     50.0%     50.0%  idle (30.0 GPU-hours)"
    );
    let b = lines.iter().find(|l| l.starts_with("team-b")).unwrap();
    assert_eq!(
        b.split_whitespace().collect::<Vec<_>>()[..5],
        ["team-b", "100.0", "10.0", "0.0", "90.0%"]
    );
}

#[test]
fn runs_show_their_idle_gpu_hours_beside_lost_progress() {
    let time = [
        sample(&[("run", "r1"), ("state", "productive")], 10.0),
        sample(&[("run", "r1"), ("state", "idle")], 2.5),
        sample(
            &[
                ("run", "r1"),
                ("state", WAITING_FOR_PEERS),
                ("cause", "input_bound"),
            ],
            4.0,
        ),
    ];
    let g = goodput(&answers(By::Run, &time, &[], 10)).unwrap();
    // Waiting for peers is not idle: the run rules moved those seconds out of it.
    assert!(close(g.groups[0].idle_gpu_hours, 2.5));
    let text = render(&g);
    let head = text.lines().find(|l| l.starts_with("RUN")).unwrap();
    assert!(
        head.contains("LOST        IDLE   GOODPUT      ETTR  LOST PROGRESS"),
        "{text}"
    );
}
