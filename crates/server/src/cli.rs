//! Command-line interface.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

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
    /// Watch this host for a while and say why its GPUs are idle (exit 0: no
    /// stall, 1: a stall or finding, 2: error).
    Check(CheckArgs),
    /// Print what a running daemon diagnoses (same exit codes as check).
    Status(StatusArgs),
    /// Sample a Python process's stacks for a while and say where each
    /// thread spends its time (exit 0: read, 1: not readable, 2: error).
    Stacks(StacksArgs),
}

#[derive(Debug, Clone, Args)]
pub struct StacksArgs {
    /// The process to read (any process you may read; a GPU job's worker too).
    pub pid: u32,
    /// How long to sample.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// Reads per second [default: `stacks.rate`, 20].
    #[arg(long, value_name = "HZ")]
    pub rate: Option<f64>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Clone, Args)]
pub struct CheckArgs {
    /// How long to watch; the rules' windows are fitted to it.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// Print JSON (the status and the events seen) instead of text.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Clone, Args)]
pub struct StatusArgs {
    /// Base URL of the daemon.
    #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:9847")]
    pub url: String,
    /// Print the API's JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Configuration file [default: /etc/stallwatch/config.toml, defaults if missing]
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Listen address; overrides `server.listen`.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Web config file for TLS and basic auth (the Prometheus exporters'
    /// web-config.yml format); overrides `server.web_config`.
    #[arg(long = "web.config.file", value_name = "PATH")]
    pub web_config_file: Option<PathBuf>,
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
