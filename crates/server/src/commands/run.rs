//! `stallwatch run`: load the config, start the sampler, serve HTTP until
//! SIGTERM or SIGINT.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex, mpsc};

use anyhow::Context;
use collector::collector::Collector;
use collector::gpu::GpuOptions;
use diagnosis::Engine;
use tokio::sync::watch;

/// Samples a GPU's drop is read through after its last low reading.
const THREAD_READ_HOLD_SAMPLES: u64 = 5;

use crate::api::router;
use crate::api::state::AppState;
use crate::cli::RunArgs;
use crate::config::{self, Config};
use crate::http::web_config::{WebConfig, WebConfigError};
use crate::http::web_config_reload::WebConfigSource;
use crate::logging;
use crate::notify;
use crate::own_cost::{self, Stage};
use crate::sampling::asked::ThreadViews;
use crate::sampling::bodies::MetricsBodies;
use crate::sampling::privileges::PrivilegesCheck;
use crate::sampling::sampler::Sampler;
use crate::sampling::stack_bursts::{Stacks, Trigger};

/// Exit status for a configuration the daemon cannot use.
pub const EXIT_CONFIG: u8 = 2;

pub fn load_config(args: &RunArgs) -> Result<Config, config::ConfigError> {
    let (path, explicit) = match &args.config {
        Some(p) => (p.clone(), true),
        None => (PathBuf::from(config::DEFAULT_PATH), false),
    };
    let mut config = Config::load(&path, explicit)?;
    if let Some(listen) = args.listen {
        config.server.listen = listen;
    }
    if let Some(path) = &args.web_config_file {
        config.server.web_config = path.clone();
    }
    Ok(config)
}

/// The web config named by the configuration, or plain HTTP without auth.
pub fn load_web_config(config: &Config) -> Result<WebConfig, WebConfigError> {
    match config.server.web_config_file() {
        Some(path) => WebConfig::load(path),
        None => Ok(WebConfig::default()),
    }
}

pub fn main(args: RunArgs) -> ExitCode {
    let config = match load_config(&args) {
        Ok(c) => c,
        Err(e) => {
            logging::early_error(&e);
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let web = match load_web_config(&config) {
        Ok(w) => w,
        Err(e) => {
            logging::early_error(&e);
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    logging::init(args.log_format);
    match serve(config, web, args.record_frames.clone()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

fn serve(config: Config, web: WebConfig, record_frames: Option<PathBuf>) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        // The HTTP side's CPU, each time it goes idle (a scrape's rendering
        // is charged to `render` as it happens).
        .on_thread_park(|| own_cost::charge(Stage::Http))
        .build()
        .context("cannot start the async runtime")?;
    own_cost::charge(Stage::Startup);
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(config.server.listen)
            .await
            .with_context(|| format!("cannot listen on {}", config.server.listen))?;
        // Room to keep the jobs' /proc files open (see the collector's open_files.rs).
        let open_files = collector::proc::raise_open_files_limit();
        tracing::debug!(?open_files, "limit on open files");
        let collector = Collector::new(
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
        .map(|c| {
            let every = config.sampling.busy_threads_every();
            let d = &config.diagnosis;
            // Read a GPU's jobs' threads every sample from the readings that
            // could start the kinds that use them (thread_reads.rs): a drop
            // under input_starved's mean, a recent mean under input_bound's
            // exit.
            c.with_thread_reads(
                d.input_starved.max_mean,
                d.input_bound.exit_mean,
                THREAD_READ_HOLD_SAMPLES,
                every,
            )
        })
        .and_then(|c| config.kubernetes.apply(c))
        .context("cannot start the collector")?;
        let record = match &record_frames {
            Some(path) => Some(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .with_context(|| format!("cannot open {} to record frames", path.display()))?,
            ),
            None => None,
        };
        // Phases and hang confirmations need short reads of the stacks.
        let diagnosis = if config.stacks.enabled {
            config.diagnosis.clone()
        } else {
            config.diagnosis.clone().without_short_reads()
        };
        let engine = Arc::new(Mutex::new(Engine::new(diagnosis)));
        let (publish, latest) = watch::channel(None);
        let (stop_tx, stop_rx) = mpsc::channel();
        let (trigger, stacks) = if config.stacks.enabled {
            let (stacks, done, _thread) = Stacks::spawn(&config.stacks, config.procfs.root.clone())
                .context("cannot start the stacks thread")?;
            let trigger = Trigger::new(stacks.clone(), done, config.stacks.duration);
            (Some(trigger), Some(stacks))
        } else {
            (None, None)
        };
        let metrics = Arc::new(MetricsBodies::default());
        let thread_views = Arc::new(ThreadViews::default());
        let privileges = PrivilegesCheck::start(config.procfs.root.clone());
        let sampler = Sampler {
            collector,
            engine: engine.clone(),
            interval: config.sampling.interval,
            record,
            stacks: trigger,
            metrics: metrics.clone(),
            max_processes: config.gpu.max_processes,
            privileges,
            thread_views: thread_views.clone(),
        }
        .spawn(publish, stop_rx)
        .context("cannot start the sampling thread")?;
        let app = router::router(AppState {
            latest,
            engine,
            interval: config.sampling.interval,
            max_processes: config.gpu.max_processes,
            stacks,
            stacks_config: config.stacks.clone(),
            metrics,
            thread_views,
        });
        tracing::info!(
            listen = %config.server.listen,
            interval = ?config.sampling.interval,
            tls = web.tls.is_some(),
            basic_auth = web.auth.is_some(),
            version = env!("CARGO_PKG_VERSION"),
            "stallwatch started"
        );
        if web.auth.is_some() && web.tls.is_none() {
            tracing::warn!("basic auth without TLS: passwords cross the network in clear text");
        }
        own_cost::charge(Stage::Startup);
        notify::ready();
        let web = WebConfigSource::new(config.server.web_config_file().map(Into::into), web);
        crate::http::serve::run(listener, app, &config.server, web, shutdown_signal()).await;
        notify::stopping();
        let _ = stop_tx.send(());
        let _ = sampler.join();
        tracing::info!("stallwatch stopped");
        Ok(())
    })
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot install signal handlers; stop with SIGKILL");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received, shutting down"),
        _ = int.recv() => tracing::info!("SIGINT received, shutting down"),
    }
}
