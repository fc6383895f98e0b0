//! The sampling loop: its own OS thread and interval timer. Each tick takes a
//! raw sample, derives a snapshot from it and the previous one, runs the
//! diagnosis on it, adds it to the short history, publishes both for scrapes
//! and the API, pings the systemd watchdog, and makes the `/metrics` bodies
//! a scrape is expected to take before the next tick.

use std::io::Write;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use collector::collector::Collector;
use collector::delta::derive;
use collector::privileges::Privileges;
use collector::sample::Sample;
use collector::snapshot::Snapshot;
use diagnosis::{Engine, Event, GpuStatus, Phase};
use tokio::sync::watch;

use crate::metrics::Scrape;
use crate::notify;
use crate::own_cost::{self, SampleCost, Stage};
use crate::sampling::asked::ThreadViews;
use crate::sampling::bodies::MetricsBodies;
use crate::sampling::frame;
use crate::sampling::history::{History, SharedHistory};
use crate::sampling::privileges::PrivilegesCheck;
use crate::sampling::stack_bursts::{self, Trigger};

/// The latest snapshot, the diagnosis made from it, what the sample cost the
/// daemon, and when it finished; with the history it was added to (the same
/// one for every sample).
#[derive(Debug, Clone)]
pub struct Latest {
    pub snapshot: Arc<Snapshot>,
    pub cost: Arc<SampleCost>,
    pub diagnosis: Arc<Vec<GpuStatus>>,
    pub finished: Instant,
    pub history: SharedHistory,
    /// What the daemon may read (read again once a minute).
    pub privileges: Arc<Privileges>,
}

pub type LatestRx = watch::Receiver<Option<Latest>>;

/// The diagnosis engine, shared with the API (which reads its event ring).
pub type SharedEngine = Arc<Mutex<Engine>>;

pub struct Sampler {
    pub collector: Collector,
    pub engine: SharedEngine,
    pub interval: Duration,
    /// Where to append each frame as a JSON line, if anywhere.
    pub record: Option<std::fs::File>,
    /// Python stacks for stalled GPUs, unless turned off.
    pub stacks: Option<Trigger>,
    /// `/metrics` bodies, made ahead for the scrapes expected next.
    pub metrics: Arc<MetricsBodies>,
    /// `gpu.max_processes`, for those bodies.
    pub max_processes: usize,
    /// What the daemon may read.
    pub privileges: PrivilegesCheck,
    /// Whether someone asks for thread views.
    pub thread_views: Arc<ThreadViews>,
}

impl Sampler {
    pub fn spawn(
        mut self,
        publish: watch::Sender<Option<Latest>>,
        stop: Receiver<()>,
    ) -> std::io::Result<JoinHandle<()>> {
        std::thread::Builder::new()
            .name("sampler".into())
            .spawn(move || {
                let mut prev: Option<(Sample, Arc<Snapshot>)> = None;
                let history = History::shared();
                let mut next = Instant::now();
                loop {
                    // A reader bug must not end sampling: skip that tick.
                    match catch_unwind(AssertUnwindSafe(|| self.tick(prev.as_ref(), &history))) {
                        Ok((sample, latest)) => {
                            prev = Some((sample, latest.snapshot.clone()));
                            publish.send_replace(Some(latest.clone()));
                            notify::watchdog();
                            let scrape = || Scrape {
                                snapshot: latest.snapshot.clone(),
                                cost: latest.cost.clone(),
                                diagnosis: latest.diagnosis.clone(),
                                max_processes: self.max_processes,
                            };
                            own_cost::charge(Stage::Diagnosis);
                            self.metrics.prepare(scrape, Instant::now(), self.interval);
                            own_cost::charge(Stage::Render);
                        }
                        Err(_) => tracing::error!("a sample panicked and was skipped"),
                    }
                    if !sleep_until_next(&mut next, self.interval, &stop) {
                        return;
                    }
                }
            })
    }

    /// One sample: read, derive, diagnose. Its cost's `duration_seconds`
    /// covers all of it (the collector's own figure covers the reads only).
    fn tick(
        &mut self,
        prev: Option<&(Sample, Arc<Snapshot>)>,
        history: &SharedHistory,
    ) -> (Sample, Latest) {
        let started = Instant::now();
        let watched = self
            .engine
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .watched_gpus();
        self.collector
            .set_thread_needs(watched, self.thread_views.asked());
        own_cost::charge(Stage::Diagnosis);
        // Charges its own stages (NVML, /proc).
        let sample = self.collector.sample();
        let snapshot = derive(prev.map(|(s, n)| (s, &**n)), &sample);
        let frame = frame::from_snapshot(&snapshot);
        if let Some(file) = &mut self.record
            && let Err(e) = serde_json::to_writer(&mut *file, &frame)
                .map_err(std::io::Error::from)
                .and_then(|()| file.write_all(b"\n"))
        {
            tracing::warn!(error = %e, "cannot record frame; recording stopped");
            self.record = None;
        }
        let (events, amended, status) = {
            let mut engine = self.engine.lock().unwrap_or_else(|p| p.into_inner());
            let events = engine.observe(&frame);
            let amended = match &mut self.stacks {
                Some(trigger) => trigger.deliver(&mut engine),
                None => Vec::new(),
            };
            (events, amended, engine.status())
        };
        events.iter().for_each(log_event);
        own_cost::charge(Stage::Diagnosis);
        for (event, report) in &amended {
            stack_bursts::log_stacks(event, report);
        }
        if let Some(trigger) = &mut self.stacks {
            // The episodes' bursts first: short reads take the thread only
            // when no episode waits for its stacks.
            trigger.request(&status);
            let mut engine = self.engine.lock().unwrap_or_else(|p| p.into_inner());
            trigger.short_reads(&mut engine, frame.t);
        }
        own_cost::charge(Stage::Stacks);
        let duration_seconds = started.elapsed().as_secs_f64();
        history
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .record(&snapshot);
        own_cost::charge(Stage::Diagnosis);
        let cost = SampleCost {
            duration_seconds,
            own: own_cost::reading(),
        };
        let latest = Latest {
            snapshot: Arc::new(snapshot),
            cost: Arc::new(cost),
            diagnosis: Arc::new(status),
            finished: Instant::now(),
            history: history.clone(),
            privileges: self.privileges.latest(),
        };
        (sample, latest)
    }
}

/// One structured log line per event.
fn log_event(e: &Event) {
    let evidence = serde_json::to_string(&e.evidence).unwrap_or_default();
    let (pid, comm) = e.job.as_ref().map_or((0, ""), |j| (j.pid, j.comm.as_str()));
    let message = match e.phase {
        Phase::Start => "stall started",
        Phase::End => "stall ended",
    };
    tracing::warn!(
        target: "stallwatch::event",
        kind = e.kind.as_str(),
        phase = ?e.phase,
        gpu = e.gpu,
        uuid = %e.uuid,
        pid,
        comm,
        since = e.since,
        evidence = %evidence,
        hint = %e.hint,
        "{message}"
    );
}

/// Waits for the next tick (fixed rate; after an overrun, from now on).
/// Returns false when asked to stop.
fn sleep_until_next(next: &mut Instant, interval: Duration, stop: &Receiver<()>) -> bool {
    *next += interval;
    let now = Instant::now();
    if *next < now {
        *next = now;
    }
    matches!(
        stop.recv_timeout(*next - now),
        Err(RecvTimeoutError::Timeout)
    )
}
