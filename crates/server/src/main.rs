//! stallwatch: tells people why their GPUs are idle.

use std::process::ExitCode;

use clap::Parser;
use stallwatch::{cli, run};

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    match cli.command {
        None => run::main(cli.run),
        Some(cli::Command::Run(args)) => run::main(args),
    }
}
