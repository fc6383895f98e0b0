//! Command-line interface.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "stallwatch",
    version,
    about = "Tells you why your GPUs are idle: GPU, job and host metrics with stall diagnosis."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon (the default).
    Run(RunArgs),
}

#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Configuration file [default: /etc/stallwatch/config.toml, defaults if missing]
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Listen address; overrides `server.listen`.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Append every frame the diagnosis sees to this file as JSON lines (for
    /// replaying a run through the detectors).
    #[arg(long, value_name = "PATH")]
    pub record_frames: Option<PathBuf>,
    /// Log line format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}
