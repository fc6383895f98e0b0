//! stallwatch: tells people why their GPUs are idle.

mod cli;
mod config;
mod health;
mod http;
mod logging;
mod metrics;
mod notify;
mod run;
mod sampler;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    match cli.command {
        None => run::main(cli.run),
        Some(cli::Command::Run(args)) => run::main(args),
    }
}
