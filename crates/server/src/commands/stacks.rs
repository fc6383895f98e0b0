//! `stallwatch stacks PID`: a Python process's stacks, read for a while
//! from this terminal with the caller's own permissions (no daemon needed).

use std::io::Write;
use std::process::ExitCode;

use diagnosis::stack_report::{Focus, ReadOutcome};

use crate::cli::StacksArgs;
use crate::commands::{report, run};

pub const EXIT_UNREADABLE: u8 = 1;
pub const EXIT_ERROR: u8 = 2;

pub fn main(args: StacksArgs) -> ExitCode {
    let config = match run::load_config(&args.run) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("stallwatch: {e}");
            return ExitCode::from(EXIT_ERROR);
        }
    };
    let rate = args.rate.unwrap_or(config.stacks.rate);
    if !(0.1..=200.0).contains(&rate) {
        eprintln!("stallwatch: --rate must be between 0.1 and 200");
        return ExitCode::from(EXIT_ERROR);
    }
    if args.duration.as_millis() < 100 || args.duration.as_secs() > 600 {
        eprintln!("stallwatch: --duration must be between 100ms and 10m");
        return ExitCode::from(EXIT_ERROR);
    }
    let mut reader = config.stacks.reader(&config.procfs.root);
    let report = reader.sample(args.pid, Focus::AllThreads, rate, args.duration);
    let text = if args.json {
        match serde_json::to_string_pretty(&report) {
            Ok(text) => text,
            Err(e) => {
                eprintln!("stallwatch: {e}");
                return ExitCode::from(EXIT_ERROR);
            }
        }
    } else {
        report::stack_lines(&report, true).join("\n")
    };
    // A closed pipe (`| head`) is not an error worth a panic.
    let _ = writeln!(std::io::stdout().lock(), "{text}");
    if report.outcome == ReadOutcome::Sampled {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_UNREADABLE)
    }
}
