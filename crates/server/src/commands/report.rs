//! The plain-language report `stallwatch check` and `stallwatch status`
//! print: per GPU the verdict, what was seen and what to do.

use std::fmt::Write;

use collector::privileges::{Privileges, Reach};
use diagnosis::evidence::Evidence;
use diagnosis::frame::Attribution;
use diagnosis::hint::fault_summary;
use diagnosis::stack_report::{
    Focus, ReadOutcome, StackReport, describe_batch_wait, describe_spot, per_call_text, thread_line,
};
use diagnosis::{Event, GpuStatus, Phase, Verdict};

use crate::api::status::StatusResponse;

fn pct(v: f64) -> String {
    format!("{:.0}%", v * 100.0)
}

fn duration(seconds: f64) -> String {
    let s = seconds.max(0.0).round() as u64;
    match s {
        0..=119 => format!("{s}s"),
        120..=7199 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// What the evidence says, as short sentences.
pub fn describe(e: &Evidence) -> Vec<String> {
    let mut out = Vec::new();
    if let (Some(mean), Some(window)) = (e.utilization_mean, e.window_seconds) {
        let mut s = format!(
            "GPU utilization averaged {} over the last {}",
            pct(mean),
            duration(window)
        );
        if let Some(idle) = e.idle_share {
            let _ = write!(s, ", idle in {} of samples", pct(idle));
        }
        if let Some(busy) = e.busy_share.filter(|b| *b > 0.5) {
            let _ = write!(s, ", busy in {} of samples", pct(busy));
        }
        out.push(s);
    }
    if let Some(f) = &e.fault {
        out.push(format!(
            "the GPU faulted: {}; action: {}",
            fault_summary(f),
            f.action.replace('_', " ")
        ));
    }
    if let Some(cpu) = e.job_cpu_cores {
        out.push(format!("the job used {cpu:.2} CPU cores"));
    }
    if let Some(t) = e.top_threads.first() {
        out.push(format!(
            "busiest thread: `{}` (tid {}, state {}) at {} of a core",
            t.name,
            t.tid,
            t.state,
            pct(t.cpu_ratio)
        ));
    }
    if let Some(g) = &e.gil_spread {
        let process = g
            .process_cpu_cores
            .map(|p| format!("; the whole process {p:.2}"))
            .unwrap_or_default();
        let waiting = g
            .noticeable_wait()
            .map(|w| format!(", {w:.2} more waiting for a CPU"))
            .unwrap_or_default();
        let threads: Vec<String> = g
            .threads
            .iter()
            .map(|t| format!("`{}` (tid {}) {}", t.name, t.tid, pct(t.cpu_ratio)))
            .collect();
        out.push(format!(
            "GIL-bound Python work spread over {} threads of pid {} ({:.2} cores together{waiting}{process}): {}",
            g.threads.len(),
            g.pid,
            g.cpu_cores,
            threads.join(", ")
        ));
    }
    if let Some(host) = e.host_cpu_ratio {
        let cpus = e
            .host_cpus
            .map(|n| format!(" of {n} CPUs"))
            .unwrap_or_default();
        out.push(format!("host CPU busy {}{cpus}", pct(host)));
    }
    if let Some(steal) = e.cpu_steal_ratio {
        out.push(format!(
            "the hypervisor took {} of the host's CPU time (steal): thread CPU reads low by it",
            pct(steal)
        ));
    }
    if let Some(d) = e.disk_sleep_share.filter(|d| *d > 0.0) {
        out.push(format!(
            "a job thread waited on storage (D state) in {} of samples",
            pct(d)
        ));
    }
    for (name, v) in [
        ("CPU", e.psi_cpu_some),
        ("I/O", e.psi_io_some),
        ("memory", e.psi_memory_some),
    ] {
        if let Some(v) = v.filter(|v| *v >= 0.05) {
            out.push(format!(
                "{name} pressure: some tasks stalled {} of the last 10s",
                pct(v)
            ));
        }
    }
    if let (Some(silent), Some(hang)) = (e.silent_seconds, e.hang_seconds) {
        out.push(format!(
            "no output for {} (hang time {})",
            duration(silent),
            duration(hang)
        ));
    }
    if let Some(p) = e.power_watts {
        let base = e
            .power_baseline_watts
            .map(|b| format!(", {b:.0} W when it was making progress"))
            .unwrap_or_default();
        out.push(format!("power {p:.0} W{base}"));
    }
    if let Some(a) = e.memory_available_ratio {
        out.push(format!("host memory available: {}", pct(a)));
    }
    if let Some(u) = e.gpu_memory_used_ratio.filter(|u| *u >= 0.9) {
        out.push(format!("GPU memory {} used", pct(u)));
    }
    for p in &e.processes {
        let mem = p
            .memory_bytes
            .map(|m| format!(", {} MiB", m >> 20))
            .unwrap_or_default();
        let name = if p.comm.is_empty() { "?" } else { &p.comm };
        out.push(format!("process {} ({name}, {}{mem})", p.pid, p.state));
    }
    if !e.clock_event_reasons.is_empty() {
        out.push(format!(
            "clock events: {}",
            e.clock_event_reasons.join(", ")
        ));
    }
    if let Some(s) = &e.stuck {
        out.push(format!(
            "stuck: every Python thread at the same place in {} reads over {}: {} ({})",
            s.reads,
            duration(s.over_seconds),
            s.place,
            s.thread
        ));
    }
    if let Some(p) = &e.phase {
        out.push(format!(
            "the job's own phase: {} for {}, {} of the last hour ({} times)",
            p.phase.as_str(),
            duration(p.seconds),
            pct(p.share_last_hour),
            p.entered_last_hour
        ));
    }
    if let Some(f) = &e.framework {
        let name = f.name.map_or("not settled", |n| n.name());
        let workers = f
            .data_loader_workers
            .map(|w| format!(", {w} DataLoader worker processes"))
            .unwrap_or_default();
        out.push(format!("framework: {name}{workers}"));
    }
    if let Some(r) = &e.stacks {
        out.extend(stack_lines(r, r.focus == Focus::AllThreads));
    }
    out
}

fn verdict_line(g: &GpuStatus) -> String {
    let verdict = match g.verdict {
        Verdict::Stalled => "STALLED",
        Verdict::Healthy => "healthy",
        Verdict::NoJob => "no job",
        Verdict::WarmingUp => "warming up",
        Verdict::Unknown => "unknown (no fresh GPU data)",
    };
    format!("GPU {} ({}): {verdict}", g.gpu, g.uuid)
}

/// A stack report as lines: what was read, the hot places, and each
/// thread's place (for every thread only when `all_threads`).
pub fn stack_lines(r: &StackReport, all_threads: bool) -> Vec<String> {
    if r.outcome != ReadOutcome::Sampled {
        return vec![format!("Python stacks: none ({})", r.summary)];
    }
    let version = r
        .python_version
        .as_deref()
        .map(|v| format!("Python {v}, "))
        .unwrap_or_default();
    let mut out = vec![format!(
        "Python stacks of pid {} ({version}{} samples over {}): {}",
        r.pid,
        r.samples,
        duration(r.duration_seconds),
        r.summary
    )];
    for h in &r.hot {
        out.push(format!(
            "  {:>4} {}{}",
            pct(h.share),
            describe_spot(h),
            per_call_text(h)
        ));
    }
    if let Some(b) = &r.batch_wait {
        out.push(format!("  {}", describe_batch_wait(b)));
    }
    if all_threads || r.hot.is_empty() {
        out.extend(r.threads.iter().map(|t| format!("  {}", thread_line(t))));
    }
    if let Some(d) = &r.detail {
        out.push(format!("  ({d})"));
    }
    out
}

fn reach(r: Reach) -> &'static str {
    match r {
        Reach::Yes => "yes",
        Reach::SameProfile => "only those under its own AppArmor profile",
        Reach::SameUid => "only its own user's",
        Reach::No => "no",
    }
}

/// What the daemon may read: one line when it reads every user's jobs,
/// each limit and its reason otherwise.
pub fn privilege_lines(p: &Privileges) -> Vec<String> {
    let (stacks, environments) = (p.stacks.read, p.environments.read);
    if stacks == Reach::Yes && environments == Reach::Yes {
        return vec![
            "stallwatch may read every user's jobs: their Python stacks and environments."
                .to_owned(),
        ];
    }
    vec![
        "What stallwatch may read of other users' jobs:".to_owned(),
        format!("  Python stacks: {} ({})", reach(stacks), p.stacks.why),
        format!(
            "  environments (run and rank): {} ({})",
            reach(environments),
            p.environments.why
        ),
    ]
}

/// The whole report. `events` are episodes seen during a check (for kinds
/// that came and went before its end). What the daemon may read comes
/// first where it is limited (it explains what is missing below), last
/// otherwise.
pub fn render(status: &StatusResponse, events: &[Event]) -> String {
    let mut out = String::new();
    let privileges = status.privileges.as_ref().map(privilege_lines);
    let limited = privileges.as_ref().is_some_and(|l| l.len() > 1);
    if limited {
        for line in privileges.iter().flatten() {
            let _ = writeln!(out, "{line}");
        }
    }
    if status.nvml != "up" {
        let _ = writeln!(out, "NVML is {}: no GPU data.", status.nvml);
    }
    if status.gpus.is_empty() {
        let _ = writeln!(out, "No GPUs found.");
    }
    for g in &status.gpus {
        let _ = writeln!(out, "{}", verdict_line(g));
        for j in &g.jobs {
            let mut line = format!("  job: {} (pid {})", j.comm, j.pid);
            if let Some(c) = j.cpu_cores {
                let _ = write!(line, ", {c:.2} CPU cores");
            }
            if j.warming_up {
                line.push_str(", warming up");
            }
            if let Some(r) = &j.run {
                let world = r.world_size.map_or(String::new(), |w| format!(" of {w}"));
                let _ = write!(line, ", rank {}{world} of run {}", r.rank, r.run);
            }
            let _ = writeln!(out, "{line}");
            if let Some(whose) = identity(&j.attribution) {
                let _ = writeln!(out, "    {whose}");
            }
        }
        if let Some(p) = &g.phase {
            let _ = writeln!(
                out,
                "  phase: {} for {}, {} of the last hour{}",
                p.phase.as_str(),
                duration(p.seconds),
                pct(p.share_last_hour),
                if p.unusual {
                    " (unusual: the stalls it explains are reported)"
                } else {
                    " (the job's own: no stall is reported for it)"
                }
            );
        }
        for a in &g.active {
            let _ = writeln!(
                out,
                "  {} (since {} ago)",
                a.kind,
                duration(status.time - a.since)
            );
            for s in describe(&a.evidence) {
                let _ = writeln!(out, "    - {s}");
            }
            let _ = writeln!(out, "    What to do: {}", a.hint);
        }
        let gone: Vec<&Event> = events
            .iter()
            .filter(|e| e.gpu == g.gpu && e.phase == Phase::End)
            .collect();
        for e in gone {
            let _ = writeln!(
                out,
                "  {} came and went ({} long)",
                e.kind,
                duration(e.time - e.since)
            );
        }
        if let Some(why) = &g.no_activity_reading {
            let _ = writeln!(out, "  no activity reading: {why}");
        }
        if let Some(line) = time_line(g) {
            let _ = writeln!(out, "  {line}");
        }
        if let Some(line) = held_idle_line(g) {
            let _ = writeln!(out, "  {line}");
        }
        if let Some(line) = ended_line(g) {
            let _ = writeln!(out, "  {line}");
        }
    }
    for line in costliest_lines(status) {
        let _ = writeln!(out, "{line}");
    }
    if !limited {
        for line in privileges.iter().flatten() {
            let _ = writeln!(out, "{line}");
        }
    }
    out
}

/// Places listed under "costliest lines".
const PLACES_LISTED: usize = 10;

/// The places in the jobs' code the host's GPUs lost time to, most first,
/// each with its fix; then the lost time tied to no place, by why.
fn costliest_lines(status: &StatusResponse) -> Vec<String> {
    let places = &status.costliest_lines;
    if places.is_empty() && status.lost_unplaced.is_empty() {
        return Vec::new();
    }
    let mut out =
        vec!["Costliest lines on this host (GPU time lost since the daemon started):".to_owned()];
    for p in places.iter().take(PLACES_LISTED) {
        let library = if p.place.library.is_empty() {
            String::new()
        } else {
            format!(" -> {}", p.place.library)
        };
        let call = p
            .call_seconds
            .map(|c| format!(", about {} a call", diagnosis::calls::seconds_text(c)))
            .unwrap_or_default();
        let gpus = if p.gpus == 1 {
            String::new()
        } else {
            format!(" over {} GPUs", p.gpus)
        };
        out.push(format!(
            "  {:>8} {}{library} ({}, {}{gpus}{call})",
            duration(p.seconds),
            p.place.place,
            p.state.as_str(),
            p.kind
        ));
        out.push(format!("           fix: {}", p.fix));
    }
    if places.len() > PLACES_LISTED {
        let rest: f64 = places[PLACES_LISTED..].iter().map(|p| p.seconds).sum();
        out.push(format!(
            "  {:>8} in {} more places",
            duration(rest),
            places.len() - PLACES_LISTED
        ));
    }
    for u in &status.lost_unplaced {
        out.push(format!(
            "  {:>8} with no place: {}",
            duration(u.seconds),
            unplaced_words(u.reason)
        ));
    }
    out
}

fn unplaced_words(reason: diagnosis::ledger::Unplaced) -> &'static str {
    use diagnosis::ledger::Unplaced;
    match reason {
        Unplaced::NoRead => "no stacks read (the episode ended first, or stacks are off)",
        Unplaced::NoPermission => "stacks not readable (stallwatch lacks CAP_SYS_PTRACE)",
        Unplaced::NotPython => "the job is not Python",
        Unplaced::UnsupportedPython => "a Python the stack reader does not know",
        Unplaced::NoFrames => "no Python frame in the stacks read",
        Unplaced::Failed => "the stack read failed or met its budget",
        Unplaced::OverCap => "places past the host's cap of 32",
    }
}

/// Where the GPU's watched time went (docs/goodput.md), largest share
/// first: `time watched 12m: 61% productive, 14% input, 25% idle`.
fn time_line(g: &GpuStatus) -> Option<String> {
    let total = g.time.total();
    if total < 1.0 {
        return None;
    }
    let mut states: Vec<(diagnosis::ledger::TimeState, f64)> =
        g.time.iter().filter(|(_, s)| *s > 0.0).collect();
    states.sort_by(|a, b| b.1.total_cmp(&a.1));
    let shares: Vec<String> = states
        .iter()
        .map(|(state, s)| format!("{} {}", pct(s / total), state.as_str()))
        .collect();
    // A MIG instance's seconds count its share of the GPU: say the time
    // watched in its own seconds and what it counts for.
    let (watched, of_gpu) = match g.share.filter(|s| *s > 0.0) {
        Some(share) => (total / share, format!(" ({share:.2} of a GPU)")),
        None => (total, String::new()),
    };
    Some(format!(
        "time watched {}{of_gpu}: {}",
        duration(watched),
        shares.join(", ")
    ))
}

/// Least idle time, and share of the watched time, said as held idle.
const HELD_IDLE_SECONDS: f64 = 60.0;
const HELD_IDLE_SHARE: f64 = 0.25;

/// A job holds the GPU and it idles with no stall kind to say why:
/// `held idle 42m (70% of the time watched): ...`.
fn held_idle_line(g: &GpuStatus) -> Option<String> {
    let total = g.time.total();
    let idle = g.time.seconds(diagnosis::ledger::TimeState::Idle);
    let own = |s: f64| g.share.filter(|w| *w > 0.0).map_or(s, |w| s / w);
    (own(idle) >= HELD_IDLE_SECONDS && idle >= HELD_IDLE_SHARE * total).then(|| {
        format!(
            "held idle {} ({} of the time watched): a job holds this GPU and it does nothing, \
             with no stall to explain it; free the GPU for others or find what the job waits \
             for (the alert StallwatchGPUHeldIdle fires after an hour of it)",
            duration(own(idle)),
            pct(idle / total)
        )
    })
}

/// The job that left the GPU last, and the training it lost when its run
/// came back: `last job 4242 (run torchelastic:7) ended: 4m10s trained
/// since its last checkpoint, lost to the run's restart`.
fn ended_line(g: &GpuStatus) -> Option<String> {
    let e = g.last_ended.as_ref()?;
    let run = e
        .run
        .as_deref()
        .map(|r| format!(" (run {r})"))
        .unwrap_or_default();
    let since = match e.last_checkpoint {
        Some(_) => "since its last checkpoint",
        None => "and no checkpoint seen",
    };
    let fate = if e.restarted {
        ", lost to the run's restart"
    } else {
        ""
    };
    Some(format!(
        "last job {}{run} ended: {} trained {since}{fate}",
        e.pid,
        duration(e.progress_since_checkpoint_seconds)
    ))
}

/// True when any GPU is stalled or has an active finding.
/// Where a job runs and whose it is, in a line: its pod (or pod UID and why
/// it has no name), its Slurm job, step and account, its user; `None` when
/// nothing is known.
fn identity(a: &Attribution) -> Option<String> {
    let mut parts = Vec::new();
    match (&a.namespace, &a.pod, &a.pod_uid) {
        (Some(ns), Some(pod), _) => parts.push(match &a.container {
            Some(c) => format!("pod {ns}/{pod}, container {c}"),
            None => format!("pod {ns}/{pod}"),
        }),
        (_, _, Some(uid)) => parts.push(match &a.pod_unknown {
            Some(why) => format!("pod UID {uid} ({why})"),
            None => format!("pod UID {uid}"),
        }),
        _ => {}
    }
    if let Some(job) = &a.slurm_job_id {
        parts.push(match &a.slurm_step {
            Some(step) => format!("Slurm job {job} step {step}"),
            None => format!("Slurm job {job}"),
        });
    }
    if let Some(account) = &a.slurm_account {
        parts.push(format!("account {account}"));
    }
    if let Some(user) = &a.user {
        parts.push(format!("user {user}"));
    }
    (!parts.is_empty()).then(|| parts.join(", "))
}

pub fn found_something(status: &StatusResponse) -> bool {
    status
        .gpus
        .iter()
        .any(|g| g.verdict == Verdict::Stalled || !g.active.is_empty())
}

#[cfg(test)]
mod tests {
    use diagnosis::evidence::{Evidence, GilSpread, ThreadEvidence};
    use diagnosis::frame::Attribution;

    use super::{describe, identity};

    #[test]
    fn a_jobs_pod_slurm_job_and_user_are_said_in_one_line() {
        let pod = Attribution {
            pod_uid: Some("1b2c".into()),
            namespace: Some("ml".into()),
            pod: Some("trainer-0".into()),
            container: Some("main".into()),
            user: Some("1000".into()),
            ..Attribution::default()
        };
        assert_eq!(
            identity(&pod).as_deref(),
            Some("pod ml/trainer-0, container main, user 1000")
        );
        let unnamed = Attribution {
            pod_uid: Some("1b2c".into()),
            pod_unknown: Some("no socket".into()),
            ..Attribution::default()
        };
        assert_eq!(
            identity(&unnamed).as_deref(),
            Some("pod UID 1b2c (no socket)")
        );
        let slurm = Attribution {
            slurm_job_id: Some("81234".into()),
            slurm_step: Some("batch".into()),
            slurm_account: Some("vision".into()),
            user: Some("alice".into()),
            systemd_unit: Some("slurmstepd.scope".into()),
            ..Attribution::default()
        };
        assert_eq!(
            identity(&slurm).as_deref(),
            Some("Slurm job 81234 step batch, account vision, user alice")
        );
        assert_eq!(identity(&Attribution::default()), None);
    }

    #[test]
    fn gil_bound_work_spread_over_threads_is_said_in_plain_words() {
        let thread = |tid, cpu_ratio| ThreadEvidence {
            pid: 123,
            tid,
            name: "python3".into(),
            state: "R".into(),
            cpu_ratio,
            wait_ratio: None,
        };
        let mut spread = GilSpread {
            pid: 123,
            threads: vec![thread(124, 0.35), thread(125, 0.33), thread(126, 0.29)],
            cpu_cores: 0.97,
            wait_cores: Some(0.02),
            process_cpu_cores: Some(1.01),
        };
        let e = Evidence {
            gil_spread: Some(spread.clone()),
            ..Evidence::default()
        };
        assert_eq!(
            describe(&e),
            vec![
                "GIL-bound Python work spread over 3 threads of pid 123 (0.97 cores together; \
                 the whole process 1.01): `python3` (tid 124) 35%, `python3` (tid 125) 33%, \
                 `python3` (tid 126) 29%"
            ]
        );
        // On a busy host the GIL waits with the thread it was handed to.
        spread.cpu_cores = 0.58;
        spread.wait_cores = Some(0.34);
        spread.process_cpu_cores = Some(0.6);
        let e = Evidence {
            gil_spread: Some(spread.clone()),
            ..Evidence::default()
        };
        assert!(
            describe(&e)[0].starts_with(
                "GIL-bound Python work spread over 3 threads of pid 123 (0.58 cores together, \
                 0.34 more waiting for a CPU; the whole process 0.60)"
            ),
            "{:?}",
            describe(&e)
        );
        // On a virtual machine the hypervisor's steal is said.
        let e = Evidence {
            gil_spread: Some(spread),
            cpu_steal_ratio: Some(0.45),
            ..Evidence::default()
        };
        assert_eq!(
            describe(&e)[1],
            "the hypervisor took 45% of the host's CPU time (steal): thread CPU reads low by it"
        );
    }
}

#[cfg(test)]
mod time_tests {
    use diagnosis::GpuStatus;
    use diagnosis::ledger::TimeState;

    use super::time_line;

    #[test]
    fn a_gpus_time_is_said_by_share_largest_first() {
        let mut g: GpuStatus = serde_json::from_value(serde_json::json!({
            "gpu": 0, "uuid": "GPU-0", "verdict": "healthy", "verdict_since": 0.0,
            "active": [], "jobs": [], "job_idle_seconds_total": 0.0, "kinds": {}
        }))
        .unwrap();
        assert_eq!(time_line(&g), None, "nothing watched yet");
        g.time.book(TimeState::Productive, 610.0);
        g.time.book(TimeState::Input, 140.0);
        g.time.book(TimeState::Startup, 250.0);
        assert_eq!(
            time_line(&g).unwrap(),
            "time watched 16m40s: 61% productive, 25% startup, 14% input"
        );
    }

    #[test]
    fn a_mig_instances_time_is_said_in_its_own_seconds_and_held_idle_is_said() {
        use super::held_idle_line;
        let mut g: GpuStatus = serde_json::from_value(serde_json::json!({
            "gpu": 16843008, "uuid": "MIG-1", "verdict": "healthy", "verdict_since": 0.0,
            "active": [], "jobs": [], "job_idle_seconds_total": 0.0, "kinds": {},
            "share": 0.25
        }))
        .unwrap();
        // 400 s watched of a quarter of a GPU: 100 GPU-seconds.
        g.time.book(TimeState::Idle, 75.0);
        g.time.book(TimeState::Productive, 25.0);
        assert_eq!(
            time_line(&g).unwrap(),
            "time watched 6m40s (0.25 of a GPU): 75% idle, 25% productive"
        );
        let held = held_idle_line(&g).unwrap();
        assert!(
            held.starts_with("held idle 5m00s (75% of the time watched)"),
            "{held}"
        );
        g.time.book(TimeState::Productive, 300.0);
        assert_eq!(
            held_idle_line(&g),
            None,
            "a GPU mostly at work is not held idle"
        );
    }

    #[test]
    fn a_restarted_jobs_lost_training_is_said() {
        let mut g: GpuStatus = serde_json::from_value(serde_json::json!({
            "gpu": 0, "uuid": "GPU-0", "verdict": "healthy", "verdict_since": 0.0,
            "active": [], "jobs": [], "job_idle_seconds_total": 0.0, "kinds": {},
            "last_ended": {"pid": 4242, "run": "torchelastic:7", "ended": 100.0,
                           "last_checkpoint": 50.0, "progress_since_checkpoint_seconds": 250.0,
                           "restarted": true}
        }))
        .unwrap();
        assert_eq!(
            super::ended_line(&g).unwrap(),
            "last job 4242 (run torchelastic:7) ended: 4m10s trained since its last checkpoint, lost to the run's restart"
        );
        g.last_ended = None;
        assert_eq!(super::ended_line(&g), None);
    }
}

#[cfg(test)]
mod privilege_tests {
    use collector::privileges::{Facts, Privileges};

    use super::render;
    use crate::api::status::StatusResponse;

    fn status(caps: u64) -> StatusResponse {
        let facts = Facts {
            uid: Some(65534),
            cap_effective: Some(caps),
            initial_user_namespace: Some(true),
            ..Facts::default()
        };
        StatusResponse {
            time: 0.0,
            nvml: "up".into(),
            gpus: Vec::new(),
            privileges: Some(Privileges::from_facts(&facts)),
            kubernetes: None,
            costliest_lines: Vec::new(),
            lost_unplaced: Vec::new(),
        }
    }

    #[test]
    fn a_limit_on_what_may_be_read_comes_first_with_its_reason() {
        let text = render(&status(0), &[]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "What stallwatch may read of other users' jobs:");
        assert!(
            lines[1].starts_with(
                "  Python stacks: only its own user's (stallwatch lacks CAP_SYS_PTRACE"
            ),
            "{text}"
        );
        assert!(lines[2].starts_with("  environments (run and rank): only its own user's"));
        assert_eq!(lines[3], "No GPUs found.");
    }

    #[test]
    fn no_limit_is_one_line_at_the_end() {
        let text = render(&status((1 << 2) | (1 << 19) | (1 << 34)), &[]);
        assert_eq!(
            text,
            "No GPUs found.\nstallwatch may read every user's jobs: their Python stacks and environments.\n"
        );
        let mut old = status(0);
        old.privileges = None; // a daemon from before the report
        assert_eq!(render(&old, &[]), "No GPUs found.\n");
    }

    #[test]
    fn the_costliest_lines_are_summed_over_gpus_with_their_fix() {
        let gpu = |n: u32| {
            serde_json::json!({
                "gpu": n, "uuid": format!("GPU-{n}"), "verdict": "stalled", "verdict_since": 0.0,
                "active": [], "jobs": [], "job_idle_seconds_total": 0.0, "kinds": {},
                "lost_by_place": [{"state": "input", "kind": "input_starved",
                                   "place": "load_record (records.py:17)", "library": "json.loads",
                                   "seconds": 600.0, "call_seconds": 0.42}],
                "lost_unplaced": [{"state": "hung", "reason": "no_permission", "seconds": 90.0}]
            })
        };
        let gpus: Vec<diagnosis::GpuStatus> =
            serde_json::from_value(serde_json::json!([gpu(0), gpu(1)])).unwrap();
        let status = StatusResponse {
            time: 0.0,
            nvml: "up".into(),
            costliest_lines: diagnosis::costliest::places(&gpus),
            lost_unplaced: diagnosis::costliest::unplaced(&gpus),
            gpus,
            privileges: None,
            kubernetes: None,
        };
        let lines = super::costliest_lines(&status);
        assert_eq!(
            lines[1],
            "    20m00s load_record (records.py:17) -> json.loads (input, input_starved over 2 GPUs, about 420 ms a call)"
        );
        assert!(
            lines[2].contains("fix: make this line cheaper"),
            "{}",
            lines[2]
        );
        assert_eq!(
            lines[3],
            "     3m00s with no place: stacks not readable (stallwatch lacks CAP_SYS_PTRACE)"
        );
    }
}
