//! Python stacks for stalled GPUs and on request. A thread of its own runs
//! the bursts through the contained stack reader (a child process, see
//! `contained`), so a job that cannot be read quickly (hung, in D state,
//! huge, hostile) never holds up sampling or HTTP: the sampler and the API
//! only hand it work when it is idle and never wait on it, and it takes one
//! burst at a time.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::thread::JoinHandle;
use std::time::Duration;

use collector::stack_reader::in_jobs;
use diagnosis::stack_report::{Focus, ReadOutcome, StackReport, unavailable};
use diagnosis::{Engine, Event, GpuStatus};

use crate::config::StacksConfig;
use collector::time::unix_now as now;

/// How often the worker drops the spies of exited processes while it holds any.
const PRUNE_EVERY: Duration = Duration::from_secs(10);

/// How long a short read lasts (a hang's confirmation, a job's phase): not
/// scaled, it is a burst of reads, not a window of the rules.
pub const SHORT_BURST: Duration = Duration::from_secs(1);

/// What a GPU's report is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// Evidence for the GPU's active episodes.
    Episode,
    /// A short read: a silent job's hang confirmation
    /// (`hang_confirmation`), or the job's phase (`phases`).
    Short,
}

/// Where a burst's report goes.
pub enum Deliver {
    /// To the diagnosis of this GPU (through [`Trigger`]).
    Gpu {
        gpu: u32,
        uuid: String,
        purpose: Purpose,
    },
    /// To a waiting caller (the API).
    Caller(tokio::sync::oneshot::Sender<StackReport>),
}

pub struct Request {
    pub pid: u32,
    pub focus: Focus,
    pub duration: Duration,
    /// Only read `pid` if it is one of these job holders or descends from one.
    pub only_jobs: Option<Vec<u32>>,
    pub deliver: Deliver,
}

/// A GPU's finished report, as the stacks thread hands it back: GPU index,
/// uuid, report, what it is for.
pub type GpuReport = (u32, String, StackReport, Purpose);

/// A handle to the stacks thread.
#[derive(Clone)]
pub struct Stacks {
    tx: SyncSender<Request>,
    /// Set while a request is taken and not yet answered.
    busy: Arc<AtomicBool>,
    /// Callers (the API) waiting for the thread: the automatic reads let
    /// them go first.
    callers: Arc<AtomicUsize>,
    /// Set while a caller's burst runs: another caller is not made to wait
    /// for it.
    on_demand: Arc<AtomicBool>,
}

/// How often a waiting caller looks whether the thread is free.
const CALLER_POLL: Duration = Duration::from_millis(50);

/// The stacks thread is in a burst: ask again later.
#[derive(Debug)]
pub struct Busy;

impl Stacks {
    /// Starts the stacks thread. Reports for GPUs come out of the receiver.
    pub fn spawn(
        config: &StacksConfig,
        root: PathBuf,
    ) -> std::io::Result<(Stacks, Receiver<GpuReport>, JoinHandle<()>)> {
        // One request at a time: `busy` admits it, the channel carries it.
        let (tx, rx) = mpsc::sync_channel::<Request>(1);
        let busy = Arc::new(AtomicBool::new(false));
        let idle = busy.clone();
        let on_demand = Arc::new(AtomicBool::new(false));
        let answered = on_demand.clone();
        let (done_tx, done_rx) = mpsc::channel();
        let rate = config.rate;
        let config = config.clone();
        let handle = std::thread::Builder::new()
            .name("stacks".into())
            .spawn(move || {
                let mut reader = config.reader(&root);
                loop {
                    crate::own_cost::charge(crate::own_cost::Stage::Stacks);
                    let request = if reader.spies() > 0 {
                        match rx.recv_timeout(PRUNE_EVERY) {
                            Ok(r) => r,
                            Err(RecvTimeoutError::Timeout) => {
                                reader.prune();
                                continue;
                            }
                            Err(RecvTimeoutError::Disconnected) => return,
                        }
                    } else {
                        match rx.recv() {
                            Ok(r) => r,
                            Err(_) => return,
                        }
                    };
                    let report = if request
                        .only_jobs
                        .as_ref()
                        .is_some_and(|jobs| !in_jobs(reader.root(), request.pid, jobs))
                    {
                        unavailable(
                            request.pid,
                            ReadOutcome::NotWatched,
                            format!(
                                "pid {} is not part of a GPU job stallwatch watches; run \
                                 `stallwatch stacks {}` on the host instead",
                                request.pid, request.pid
                            ),
                            now(),
                        )
                    } else {
                        reader.sample(request.pid, request.focus, rate, request.duration)
                    };
                    // Free before the answer, so that its receiver may ask again at once.
                    if matches!(request.deliver, Deliver::Caller(_)) {
                        answered.store(false, Ordering::Release);
                    }
                    idle.store(false, Ordering::Release);
                    match request.deliver {
                        Deliver::Gpu { gpu, uuid, purpose } => {
                            if done_tx.send((gpu, uuid, report, purpose)).is_err() {
                                return;
                            }
                        }
                        Deliver::Caller(reply) => {
                            let _ = reply.send(report);
                        }
                    }
                }
            })?;
        let callers = Arc::new(AtomicUsize::new(0));
        Ok((
            Stacks {
                tx,
                busy,
                callers,
                on_demand,
            },
            done_rx,
            handle,
        ))
    }

    /// Hands an automatic request to the thread if it is idle and no
    /// caller waits for it.
    pub fn try_request(&self, request: Request) -> Result<(), Busy> {
        if self.callers.load(Ordering::Acquire) > 0 {
            return Err(Busy);
        }
        self.hand_over(request)
    }

    /// Hands a caller's request to the thread, waiting up to `wait` for an
    /// automatic burst in progress (it ends within its own duration); no
    /// automatic read starts while a caller waits. Another caller's burst is
    /// not waited for: `Busy` at once.
    pub async fn request_within(&self, request: Request, wait: Duration) -> Result<(), Busy> {
        struct Waiting<'a>(&'a AtomicUsize);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::AcqRel);
            }
        }
        self.callers.fetch_add(1, Ordering::AcqRel);
        let _waiting = Waiting(&self.callers);
        let deadline = tokio::time::Instant::now() + wait;
        let mut request = request;
        loop {
            // Marked before the hand-over (the burst may end before this
            // would run after it), unmarked where it did not happen.
            if self.on_demand.swap(true, Ordering::AcqRel) {
                return Err(Busy);
            }
            match self.hand_over_or_return(request) {
                Ok(()) => return Ok(()),
                Err(back) if tokio::time::Instant::now() < deadline => {
                    self.on_demand.store(false, Ordering::Release);
                    request = back;
                    tokio::time::sleep(CALLER_POLL).await;
                }
                Err(_) => {
                    self.on_demand.store(false, Ordering::Release);
                    return Err(Busy);
                }
            }
        }
    }

    fn hand_over(&self, request: Request) -> Result<(), Busy> {
        self.hand_over_or_return(request).map_err(|_| Busy)
    }

    /// Hands `request` over if the thread is idle, else gives it back.
    fn hand_over_or_return(&self, request: Request) -> Result<(), Request> {
        if self
            .busy
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Err(request);
        }
        match self.tx.try_send(request) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(back) | TrySendError::Disconnected(back)) => {
                self.busy.store(false, Ordering::Release);
                Err(back)
            }
        }
    }
}

/// Which process to read for a GPU, and for what: the job (every thread)
/// when it makes no progress, else the process that owns the busiest
/// thread (a DataLoader worker, say). `None` when the GPU has no active
/// episode still waiting for stacks.
pub fn target(gpu: &GpuStatus) -> Option<(u32, Focus)> {
    let waiting: Vec<_> = gpu
        .active
        .iter()
        .filter(|a| a.kind.wants_stacks() && a.evidence.stacks.is_none())
        .collect();
    if waiting.is_empty() {
        return None;
    }
    let job = gpu
        .jobs
        .iter()
        .max_by_key(|j| (j.gpu_memory_bytes.unwrap_or(0), std::cmp::Reverse(j.pid)))
        .map(|j| j.pid);
    if waiting
        .iter()
        .any(|a| a.kind.stacks_focus() == Focus::AllThreads)
    {
        return job.map(|pid| (pid, Focus::AllThreads));
    }
    let busiest = waiting
        .iter()
        .flat_map(|a| a.evidence.top_threads.first())
        .max_by(|a, b| a.cpu_ratio.total_cmp(&b.cpu_ratio))
        .map(|t| t.pid);
    busiest.or(job).map(|pid| (pid, Focus::Busy))
}

/// The sampler's side: asks for stacks when an episode that wants them has
/// none, and hands finished reports to the diagnosis.
pub struct Trigger {
    pub stacks: Stacks,
    pub done: Receiver<GpuReport>,
    pub duration: Duration,
    pending: HashSet<u32>,
}

impl Trigger {
    pub fn new(stacks: Stacks, done: Receiver<GpuReport>, duration: Duration) -> Self {
        Trigger {
            stacks,
            done,
            duration,
            pending: HashSet::new(),
        }
    }

    /// Attaches finished reports; returns the start events they amended.
    pub fn deliver(&mut self, engine: &mut Engine) -> Vec<(Event, StackReport)> {
        let mut amended = Vec::new();
        while let Ok((gpu, uuid, report, purpose)) = self.done.try_recv() {
            self.pending.remove(&gpu);
            if purpose == Purpose::Short {
                engine.attach_short_read(gpu, &uuid, &report);
                continue;
            }
            for event in engine.attach_stacks(gpu, &uuid, report.clone()) {
                amended.push((event, report.clone()));
            }
        }
        amended
    }

    /// Asks for the stacks the GPUs' episodes wait for (while the thread is
    /// idle; otherwise again on a later tick). Costs nothing while no GPU
    /// has such an episode.
    pub fn request(&mut self, status: &[GpuStatus]) {
        for gpu in status {
            if self.pending.contains(&gpu.gpu) {
                continue;
            }
            let Some((pid, focus)) = target(gpu) else {
                continue;
            };
            let request = Request {
                pid,
                focus,
                duration: self.duration,
                only_jobs: None,
                deliver: Deliver::Gpu {
                    gpu: gpu.gpu,
                    uuid: gpu.uuid.clone(),
                    purpose: Purpose::Episode,
                },
            };
            if self.stacks.try_request(request).is_err() {
                return;
            }
            self.pending.insert(gpu.gpu);
        }
    }

    /// Asks for the short reads the engine finds due (a burst of every
    /// thread of a silent job whose GPU looks hung, or of a job whose GPU
    /// looks stalled, for its phase), while the thread is idle; `t` is the
    /// frame's time.
    pub fn short_reads(&mut self, engine: &mut Engine, t: f64) {
        for (gpu, uuid, pid) in engine.short_reads_due() {
            if self.pending.contains(&gpu) {
                continue;
            }
            let request = Request {
                pid,
                focus: Focus::AllThreads,
                duration: SHORT_BURST,
                only_jobs: None,
                deliver: Deliver::Gpu {
                    gpu,
                    uuid: uuid.clone(),
                    purpose: Purpose::Short,
                },
            };
            if self.stacks.try_request(request).is_err() {
                return;
            }
            engine.short_read_asked(gpu, &uuid, t);
            self.pending.insert(gpu);
        }
    }
}

/// One log line per start event that gained stacks.
pub fn log_stacks(event: &Event, report: &StackReport) {
    let (pid, comm) = event
        .job
        .as_ref()
        .map_or((0, ""), |j| (j.pid, j.comm.as_str()));
    let outcome = serde_json::to_value(report.outcome)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    tracing::warn!(
        target: "stallwatch::event",
        event_id = event.id,
        kind = event.kind.as_str(),
        gpu = event.gpu,
        uuid = %event.uuid,
        pid,
        comm,
        stacks_pid = report.pid,
        outcome = %outcome,
        samples = report.samples,
        "stall stacks: {}",
        report.summary
    );
}
