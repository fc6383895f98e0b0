//! `stallwatch run`: load the config, start the sampler, serve HTTP until
//! SIGTERM or SIGINT.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use anyhow::Context;
use collector::collector::Collector;
use collector::gpu::GpuOptions;
use diagnosis::Engine;
use tokio::sync::{oneshot, watch};

use crate::cli::RunArgs;
use crate::config::{self, Config};
use crate::http::{self, AppState};
use crate::logging;
use crate::notify;
use crate::sampler::Sampler;

/// Exit status for a configuration the daemon cannot use.
pub const EXIT_CONFIG: u8 = 2;

/// How long a stop waits for requests in flight. A client that stalls (one
/// that never finishes sending its request, or stops reading a response)
/// must not keep the daemon from stopping; its connection is closed.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

pub fn load_config(args: &RunArgs) -> Result<Config, config::ConfigError> {
    let (path, explicit) = match &args.config {
        Some(p) => (p.clone(), true),
        None => (PathBuf::from(config::DEFAULT_PATH), false),
    };
    let mut config = Config::load(&path, explicit)?;
    if let Some(listen) = args.listen {
        config.server.listen = listen;
    }
    Ok(config)
}

pub fn main(args: RunArgs) -> ExitCode {
    let config = match load_config(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("stallwatch: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    logging::init(args.log_format);
    match serve(config, args.record_frames.clone()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

fn serve(config: Config, record_frames: Option<PathBuf>) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(config.server.listen)
            .await
            .with_context(|| format!("cannot listen on {}", config.server.listen))?;
        let collector = Collector::new(
            GpuOptions {
                library: config.nvml_library(),
                timeout: config.gpu.timeout,
                init_retry_max: config.gpu.init_retry_max,
            },
            config.procfs.root.clone(),
        )
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
        let engine = Arc::new(Mutex::new(Engine::new(config.diagnosis.clone())));
        let (publish, latest) = watch::channel(None);
        let (stop_tx, stop_rx) = mpsc::channel();
        let sampler = Sampler {
            collector,
            engine: engine.clone(),
            interval: config.sampling.interval,
            record,
        }
        .spawn(publish, stop_rx)
        .context("cannot start the sampling thread")?;
        let app = http::router(AppState {
            latest,
            engine,
            interval: config.sampling.interval,
            max_processes: config.gpu.max_processes,
        });
        tracing::info!(
            listen = %config.server.listen,
            interval = ?config.sampling.interval,
            version = env!("CARGO_PKG_VERSION"),
            "stallwatch started"
        );
        notify::ready();
        let (signalled, grace) = oneshot::channel();
        let server = axum::serve(listener, app).with_graceful_shutdown(async {
            shutdown_signal().await;
            let _ = signalled.send(());
        });
        let deadline = async {
            match grace.await {
                Ok(()) => tokio::time::sleep(SHUTDOWN_GRACE).await,
                Err(_) => std::future::pending().await,
            }
        };
        tokio::select! {
            served = server => served.context("HTTP server failed")?,
            () = deadline => tracing::warn!(
                "connections still open {SHUTDOWN_GRACE:?} after the signal are closed"
            ),
        }
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
