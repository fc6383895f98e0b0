//! The sampling loop: its own OS thread and interval timer. Each tick takes a
//! raw sample, derives a snapshot from it and the previous one, publishes it
//! for scrapes and the API, and pings the systemd watchdog.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use collector::collector::Collector;
use collector::delta::derive;
use collector::sample::Sample;
use collector::snapshot::Snapshot;
use tokio::sync::watch;

use crate::notify;

/// The latest snapshot and when its sample finished.
#[derive(Debug, Clone)]
pub struct Latest {
    pub snapshot: Arc<Snapshot>,
    pub finished: Instant,
}

pub type LatestRx = watch::Receiver<Option<Latest>>;

pub fn spawn(
    mut collector: Collector,
    interval: Duration,
    publish: watch::Sender<Option<Latest>>,
    stop: Receiver<()>,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("sampler".into())
        .spawn(move || {
            let mut prev: Option<(Sample, Arc<Snapshot>)> = None;
            let mut next = Instant::now();
            loop {
                // A reader bug must not end sampling: skip that tick.
                let sample = match catch_unwind(AssertUnwindSafe(|| collector.sample())) {
                    Ok(sample) => sample,
                    Err(_) => {
                        tracing::error!("a sample panicked and was skipped");
                        if !sleep_until_next(&mut next, interval, &stop) {
                            return;
                        }
                        continue;
                    }
                };
                let snapshot = Arc::new(derive(prev.as_ref().map(|(s, n)| (s, &**n)), &sample));
                publish.send_replace(Some(Latest {
                    snapshot: snapshot.clone(),
                    finished: Instant::now(),
                }));
                notify::watchdog();
                prev = Some((sample, snapshot));
                if !sleep_until_next(&mut next, interval, &stop) {
                    return;
                }
            }
        })
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
