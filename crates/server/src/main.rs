//! stallwatch: tells people why their GPUs are idle.

use std::process::ExitCode;

use clap::Parser;
use stallwatch::cli;
use stallwatch::commands::{
    causes, check, fleet, goodput, replay, run, stacks as stacks_cmd, status as status_cmd,
};

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    match cli.command {
        None => run::main(cli.run),
        Some(cli::Command::Run(args)) => run::main(args),
        Some(cli::Command::Check(args)) => check::main(args),
        Some(cli::Command::Status(args)) => status_cmd::main(args),
        Some(cli::Command::Stacks(args)) => stacks_cmd::main(args),
        Some(cli::Command::Fleet(cli::FleetArgs {
            command: Some(cli::FleetCommand::Goodput(args)),
            ..
        })) => goodput::main(*args),
        Some(cli::Command::Fleet(cli::FleetArgs {
            command: Some(cli::FleetCommand::Causes(args)),
            ..
        })) => causes::main(*args),
        Some(cli::Command::Fleet(args)) => fleet::main(args),
        Some(cli::Command::StackReader(args)) => stallwatch::contained::child::main(args),
        Some(cli::Command::Replay(args)) => replay::main(args),
    }
}
