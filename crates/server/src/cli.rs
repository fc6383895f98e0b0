//! Command-line interface.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::fleet::causes::By as CausesBy;
use crate::fleet::goodput::By;

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
    /// One answer per distributed run, from the fleet's Prometheus: which rank
    /// holds it back, and why (exit 0: every run healthy, 1: a run has a
    /// straggler, stalls or hangs, 2: error); `fleet goodput`: where the
    /// fleet's GPU-hours went; `fleet causes`: the lines of the jobs' code
    /// that lost them.
    Fleet(FleetArgs),
    /// The contained reader of jobs' Python stacks, started by the other
    /// commands; not for use by hand.
    #[command(hide = true)]
    StackReader(ReaderArgs),
    /// Feed frames recorded by `run --record-frames` through the detectors
    /// at speed and print the findings (exit 0: none, 1: findings, 2: error).
    /// A maintenance tool: not in the man pages.
    #[command(hide = true)]
    Replay(ReplayArgs),
}

#[derive(Debug, Clone, Args)]
pub struct ReplayArgs {
    /// The frames file (JSON lines, as `run --record-frames` writes them).
    #[arg(value_name = "FRAMES")]
    pub frames: PathBuf,
    /// The configuration the recording daemon ran with (its `[diagnosis]`
    /// rules, run as with `[stacks] enabled = false`: the frames carry no
    /// stack reads) [default: the built-in defaults].
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Overrides `diagnosis.time_scale` (the recorded scenarios ran at 0.1).
    #[arg(long, value_name = "SCALE")]
    pub time_scale: Option<f64>,
    /// Print JSON: the counts and every event, as `/api/v1/events` gives them.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
#[command(subcommand_negates_reqs = true)]
pub struct FleetArgs {
    #[command(subcommand)]
    pub command: Option<FleetCommand>,
    /// Only this run (as in `stallwatch_job_rank_info{run}`).
    pub run: Option<String>,
    #[command(flatten)]
    pub prometheus: PrometheusArgs,
    /// Port of the daemons, asked for a culprit's own evidence (its hint and
    /// Python stacks) at `instance`.
    #[arg(long, value_name = "PORT", default_value_t = 9847)]
    pub daemon_port: u16,
    /// Scheme of the daemons: http or https.
    #[arg(long, value_name = "SCHEME", default_value = "http")]
    pub daemon_scheme: String,
    /// Do not ask the culprits' daemons.
    #[arg(long)]
    pub no_daemons: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Subcommand)]
pub enum FleetCommand {
    /// Where the fleet's GPU-hours went over a range, from the hourly
    /// recording rules: the productive share (goodput), the rest by state,
    /// and the runs, namespaces, users or hosts that lost the most (exit 0:
    /// answered, 1: no hourly series in the range yet, 2: error).
    Goodput(Box<GoodputArgs>),
    /// The lines of the jobs' Python code that lost the most GPU-hours over a
    /// range (input, hung, compiling, checkpointing), each with its kind, the
    /// library call under it, its runs, namespaces and hosts, its call time
    /// and the runs that lost most there, and the lost time no line was tied
    /// to, by reason (exit 0: answered, 1: no such series in the range yet,
    /// 2: error).
    Causes(Box<CausesArgs>),
}

/// How to reach the fleet's Prometheus.
#[derive(Debug, Clone, Args)]
pub struct PrometheusArgs {
    /// The Prometheus that evaluates the rules (the run rules of
    /// deploy/prometheus/stallwatch.runs.yml; for `goodput` and `causes`, the
    /// hourly rules).
    #[arg(long, value_name = "URL", required = true)]
    pub prometheus: Option<String>,
    /// Basic auth user for Prometheus (with --password-file).
    #[arg(long, value_name = "USER")]
    pub user: Option<String>,
    /// File holding the basic auth password.
    #[arg(long, value_name = "PATH")]
    pub password_file: Option<PathBuf>,
    /// PEM CA certificates to verify Prometheus (and the daemons) over https.
    #[arg(long, value_name = "PATH")]
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate (with --key-file), for servers that require one.
    #[arg(long, value_name = "PATH")]
    pub cert_file: Option<PathBuf>,
    /// PEM key of the client certificate.
    #[arg(long, value_name = "PATH")]
    pub key_file: Option<PathBuf>,
    /// Longest wait for one answer.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
}

#[derive(Debug, Clone, Args)]
pub struct GoodputArgs {
    /// What to rank by lost GPU-hours: runs (their own ledger, with the
    /// time their ranks waited for a straggler), namespaces, users or hosts.
    #[arg(long, value_enum, default_value_t = By::Namespace)]
    pub by: By,
    /// How far back: the hours up to now.
    #[arg(long, value_name = "DURATION", default_value = "7d", value_parser = humantime::parse_duration)]
    pub since: Duration,
    /// How many runs, namespaces, users or hosts to list.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub top: usize,
    #[command(flatten)]
    pub prometheus: PrometheusArgs,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct CausesArgs {
    /// Rank the places of each namespace, run or user on their own (the
    /// groups that lost most first) [default: one ranking for the fleet].
    #[arg(long, value_enum)]
    pub by: Option<CausesBy>,
    /// How far back, up to now: under 6h from the 5-minute rules (10m or
    /// more), from 6h on from the hourly ones.
    #[arg(long, value_name = "DURATION", default_value = "7d", value_parser = humantime::parse_duration)]
    pub since: Duration,
    /// How many places to list (with --by, in each group, and how many groups).
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = clap::value_parser!(u16).range(1..))]
    pub top: u16,
    #[command(flatten)]
    pub prometheus: PrometheusArgs,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct ReaderArgs {
    /// Where `/proc` is.
    #[arg(long, value_name = "PATH")]
    pub root: PathBuf,
    /// Heap the reader may use (`RLIMIT_DATA`), in bytes.
    #[arg(long, value_name = "BYTES")]
    pub memory_bytes: u64,
    /// CPU time the reader may use over its life (`RLIMIT_CPU`), in seconds.
    #[arg(long, value_name = "SECONDS")]
    pub cpu_seconds: u64,
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
