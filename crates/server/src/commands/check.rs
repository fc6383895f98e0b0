//! `stallwatch check`: for the person at the terminal of a stuck job. Samples
//! for a while with the rules fitted to that time, then prints per GPU the
//! verdict, what it saw and what to do.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use collector::collector::Collector;
use collector::delta::derive;
use collector::gpu::GpuOptions;
use diagnosis::Engine;

use crate::api::status::{StatusResponse, nvml_state};
use crate::cli::CheckArgs;
use crate::commands::{report, run};
use crate::config::Config;
use crate::contained::ContainedReader;
use crate::own_cost::{self, OwnCost, Stage};
use crate::sampling::stack_bursts::SHORT_BURST;
use crate::sampling::{frame, stack_bursts};
use diagnosis::stack_report::Focus;

/// Longest stack burst a check adds to its run.
const CHECK_STACKS: Duration = Duration::from_secs(5);

/// Reads the stacks of each GPU whose episodes want them, as the daemon
/// would, and attaches them before the report.
fn sample_stacks(
    engine: &mut Engine,
    reader: &mut ContainedReader,
    config: &Config,
    quiet: bool,
) -> Vec<diagnosis::Event> {
    let mut amended = Vec::new();
    let duration = config.stacks.duration.min(CHECK_STACKS);
    for gpu in engine.status() {
        let Some((pid, focus)) = stack_bursts::target(&gpu) else {
            continue;
        };
        if !quiet {
            eprintln!(
                "stallwatch: GPU {} is stalled; reading the Python stacks of pid {pid} for {} ...",
                gpu.gpu,
                humantime::format_duration(duration)
            );
        }
        let report = reader.sample(pid, focus, config.stacks.rate, duration);
        amended.extend(engine.attach_stacks(gpu.gpu, &gpu.uuid, report));
    }
    amended
}

/// The short reads the engine finds due (a silent job's hang confirmation,
/// a stalled job's phase), taken at once: each holds the loop for its burst.
fn short_reads(engine: &mut Engine, reader: &mut ContainedReader, config: &Config, t: f64) {
    for (gpu, uuid, pid) in engine.short_reads_due() {
        engine.short_read_asked(gpu, &uuid, t);
        let report = reader.sample(pid, Focus::AllThreads, config.stacks.rate, SHORT_BURST);
        engine.attach_short_read(gpu, &uuid, &report);
    }
}

/// What this run of `check` cost: its CPU by stage and its memory.
fn own_cost_line(own: &OwnCost, seconds: f64) -> String {
    let total = own.process_cpu_seconds;
    let mut stages: Vec<(Stage, f64)> = Stage::ALL
        .into_iter()
        .map(|s| (s, own.stage(s)))
        .filter(|(_, used)| *used >= 0.0005)
        .collect();
    stages.sort_by(|a, b| b.1.total_cmp(&a.1));
    let stages: Vec<String> = stages
        .iter()
        .map(|(s, used)| format!("{} {:.0}%", s.as_str(), 100.0 * used / total.max(1e-9)))
        .collect();
    let memory = own
        .resident_bytes
        .map(|b| format!(", {:.1} MiB resident", b as f64 / 1048576.0))
        .unwrap_or_default();
    format!(
        "stallwatch's own cost: {:.2}% of a core over {:.0} s ({:.2} s CPU: {}){memory}",
        100.0 * total / seconds.max(1e-9),
        seconds,
        total,
        stages.join(", "),
    )
}

fn own_cost_json(own: &OwnCost, seconds: f64) -> serde_json::Value {
    let stages: serde_json::Map<String, serde_json::Value> = Stage::ALL
        .into_iter()
        .map(|s| (s.as_str().to_owned(), own.stage(s).into()))
        .collect();
    serde_json::json!({
        "seconds": seconds,
        "cpu_seconds": own.process_cpu_seconds,
        "stage_cpu_seconds": stages,
        "resident_bytes": own.resident_bytes,
    })
}

pub const EXIT_FOUND: u8 = 1;
pub const EXIT_ERROR: u8 = 2;

pub fn main(args: CheckArgs) -> ExitCode {
    let config = match run::load_config(&args.run) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("stallwatch: {e}");
            return ExitCode::from(EXIT_ERROR);
        }
    };
    let seconds = args.duration.as_secs_f64();
    if seconds < 5.0 {
        eprintln!("stallwatch: --duration must be at least 5s");
        return ExitCode::from(EXIT_ERROR);
    }
    let mut collector = match Collector::new(
        GpuOptions {
            library: config.nvml_library(),
            timeout: config.gpu.timeout,
            init_retry_max: config.gpu.init_retry_max,
        },
        config.procfs.root.clone(),
        own_cost::COLLECTOR_METER,
    )
    .and_then(|c| c.with_faults(config.faults.options(config.nvml_library())))
    .map(|c| config.identity.apply(c))
    .and_then(|c| config.kubernetes.apply(c))
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("stallwatch: {e}");
            return ExitCode::from(EXIT_ERROR);
        }
    };
    // At least 30 samples, and no slower than the configured interval.
    let interval = config
        .sampling
        .interval
        .min(Duration::from_secs_f64(seconds / 30.0));
    let mut reader = config
        .stacks
        .enabled
        .then(|| config.stacks.reader(&config.procfs.root));
    let mut diagnosis = config.diagnosis.fitted_to(seconds);
    if reader.is_none() {
        diagnosis = diagnosis.without_short_reads();
    }
    let mut engine = Engine::new(diagnosis);
    let privileges = collector::privileges::read(&config.procfs.root);
    if !args.json {
        eprintln!(
            "stallwatch: watching for {} ...",
            humantime::format_duration(args.duration)
        );
    }
    let started = Instant::now();
    let mut prev = None;
    let mut events = Vec::new();
    let mut last = None;
    while started.elapsed() < args.duration {
        let tick = Instant::now();
        let sample = collector.sample();
        let snapshot = derive(prev.as_ref().map(|(s, n)| (s, n)), &sample);
        events.extend(engine.observe(&frame::from_snapshot(&snapshot)));
        own_cost::charge(Stage::Diagnosis);
        if let Some(reader) = reader.as_mut() {
            short_reads(&mut engine, reader, &config, snapshot.timestamp_seconds);
            own_cost::charge(Stage::Stacks);
        }
        last = Some((
            snapshot.timestamp_seconds,
            snapshot.nvml_up,
            snapshot.gpu_stale,
        ));
        prev = Some((sample, snapshot));
        std::thread::sleep(interval.saturating_sub(tick.elapsed()));
    }
    if let Some(reader) = reader.as_mut() {
        for amended in sample_stacks(&mut engine, reader, &config, args.json) {
            if let Some(e) = events.iter_mut().find(|e| e.id == amended.id) {
                *e = amended;
            }
        }
        own_cost::charge(Stage::Stacks);
    }
    let own = own_cost::reading();
    let watched = started.elapsed().as_secs_f64();
    let (time, up, stale) = last.unwrap_or_default();
    let gpus = engine.status();
    let status = StatusResponse {
        time,
        nvml: nvml_state(up, stale).to_owned(),
        costliest_lines: diagnosis::costliest::places(&gpus),
        lost_unplaced: diagnosis::costliest::unplaced(&gpus),
        gpus,
        privileges: Some(privileges),
        kubernetes: prev.as_ref().and_then(|(_, s)| s.kubernetes.clone()),
    };
    if args.json {
        let body = serde_json::json!({
            "status": status,
            "events": events,
            "own_cost": own_cost_json(&own, watched),
        });
        println!("{body:#}");
    } else {
        print!("{}", report::render(&status, &events));
        println!("{}", own_cost_line(&own, watched));
    }
    if report::found_something(&status) {
        ExitCode::from(EXIT_FOUND)
    } else {
        ExitCode::SUCCESS
    }
}
