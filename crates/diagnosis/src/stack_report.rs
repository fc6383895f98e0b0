//! Python stacks as evidence: the reads of one sampling burst in, a summary
//! per thread and for the process out. Pure: the server hands in what the
//! collector read, with each thread's state taken from `/proc`.

use std::collections::HashMap;

use crate::calls::{self, Stood};
use crate::round::round;
use crate::stack_text::pct;
pub use crate::stack_text::{describe_batch_wait, describe_spot, per_call_text, thread_line};
pub use crate::types::reads::{CodeFrame, ThreadRead};
pub use crate::types::stack_report::{
    BatchWait, CallTime, Caller, Focus, HotSpot, ReadOutcome, StackReport, ThreadStacks,
};

/// The user's own frames shown for a place: the one it runs under and up
/// to two of its callers.
pub const CALLERS_KEPT: usize = 3;
/// Places listed per report and per thread, and threads per report.
const HOT_KEPT: usize = 3;
const THREADS_KEPT: usize = 8;
/// A thread counts among the busy ones when it ran the hot place in at
/// least this share of reads.
const BUSY_THREAD_SHARE: f64 = 0.1;
/// Threads named in a summary of every thread.
const SUMMARY_THREADS: usize = 4;

/// A report without stacks, saying why.
pub fn unavailable(pid: u32, outcome: ReadOutcome, detail: String, time: f64) -> StackReport {
    StackReport {
        pid,
        outcome,
        focus: Focus::Busy,
        summary: detail.clone(),
        detail: Some(detail),
        python_version: None,
        time,
        duration_seconds: 0.0,
        samples: 0,
        dropped: 0,
        limits: Vec::new(),
        hot: Vec::new(),
        busy_threads: None,
        threads: Vec::new(),
        framework: None,
        interactive: false,
        phase: None,
        batch_wait: None,
    }
}

/// Reads of one burst, and how it went.
pub struct Burst<'a> {
    pub pid: u32,
    pub python_version: Option<String>,
    pub time: f64,
    pub duration_seconds: f64,
    pub reads: &'a [Vec<ThreadRead>],
    /// When each read was taken, seconds from any fixed origin (one per
    /// read; empty where unknown: nothing is then timed).
    pub times: &'a [f64],
    pub dropped: u32,
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct Place {
    leaf: CodeFrame,
    /// The installed function the user's code called, when the leaf is
    /// deeper inside it.
    entry: Option<CodeFrame>,
    user: Option<CodeFrame>,
    /// The user's frames right above the leaf (a user's leaf) or above
    /// `user`, innermost first.
    callers: Vec<CodeFrame>,
}

/// The run of the user's own frames that starts at `frames[0]`, at most
/// `n` of them.
fn user_run(frames: &[CodeFrame], n: usize) -> Vec<CodeFrame> {
    frames
        .iter()
        .take_while(|f| !f.library)
        .take(n)
        .cloned()
        .collect()
}

impl Place {
    fn of(frames: &[CodeFrame]) -> Option<Place> {
        let leaf = frames.first()?.clone();
        if !leaf.library {
            return Some(Place {
                leaf,
                entry: None,
                user: None,
                callers: user_run(&frames[1..], CALLERS_KEPT - 1),
            });
        }
        let user_at = frames.iter().position(|f| !f.library);
        let entry = user_at
            .filter(|at| *at > 1)
            .map(|at| frames[at - 1].clone());
        let user = user_at.map(|at| frames[at].clone());
        let callers = user_at
            .map(|at| user_run(&frames[at + 1..], CALLERS_KEPT - 1))
            .unwrap_or_default();
        Some(Place {
            leaf,
            entry,
            user,
            callers,
        })
    }

    /// The place without its line numbers: a loop's lines count as one
    /// function.
    fn function(&self) -> Place {
        let unlined = |f: &CodeFrame| CodeFrame {
            line: 0,
            ..f.clone()
        };
        Place {
            leaf: unlined(&self.leaf),
            entry: self.entry.as_ref().map(unlined),
            user: self.user.as_ref().map(unlined),
            callers: self.callers.iter().map(unlined).collect(),
        }
    }

    fn spot(&self, samples: u32, of: u32) -> HotSpot {
        HotSpot {
            function: display_function(&self.leaf),
            file: self.leaf.file.clone(),
            line: self.leaf.line,
            via: self.entry.as_ref().map(display_function),
            user_function: self.user.as_ref().map(|u| u.function.clone()),
            user_file: self.user.as_ref().map(|u| u.file.clone()),
            user_line: self.user.as_ref().map(|u| u.line),
            callers: self
                .callers
                .iter()
                .map(|c| Caller {
                    function: c.function.clone(),
                    file: c.file.clone(),
                    line: c.line,
                })
                .collect(),
            samples,
            share: round(samples as f64 / of.max(1) as f64),
            per_call: None,
        }
    }

    /// The call this place is timed by, as it stands in `frames` (leaf
    /// first): from its frame to the thread's root. That is the call the
    /// user's frame makes (`PIL.Image.open` from `decode_image`), or the
    /// leaf's own where the leaf is the user's code; found by function, with
    /// the user's frames above it, whatever the leaf is now.
    fn call_in<'f>(&self, frames: &'f [CodeFrame]) -> Option<&'f [CodeFrame]> {
        let call = match &self.user {
            Some(_) => self.entry.as_ref().unwrap_or(&self.leaf),
            None => &self.leaf,
        };
        let above = self.user.iter().chain(&self.callers);
        let same = |a: &CodeFrame, b: &CodeFrame| a.function == b.function && a.file == b.file;
        // The outermost: a recursive call is one call.
        (0..frames.len()).rev().find_map(|at| {
            let fits = same(&frames[at], call)
                && above
                    .clone()
                    .enumerate()
                    .all(|(k, a)| frames.get(at + 1 + k).is_some_and(|f| same(f, a)));
            fits.then(|| &frames[at..])
        })
    }
}

/// Each thread's frames in the reads it was in, in order: (read, frames).
type Timeline<'a> = Vec<(usize, &'a [CodeFrame])>;

/// How long a call of `call_in` takes, over the threads' timelines.
fn time_calls<'a, 'f: 'a>(
    times: &[f64],
    timelines: impl Iterator<Item = &'a Timeline<'f>>,
    call_in: impl Fn(&'f [CodeFrame]) -> Option<&'f [CodeFrame]>,
) -> Option<CallTime> {
    let period = calls::period(times)?;
    let (mut whole, mut cut) = (Vec::new(), Vec::new());
    let (mut batch_of_items, mut merged_by_tf_data) = (false, false);
    for timeline in timelines {
        let stood: Vec<Stood> = timeline.iter().map(|(i, f)| (*i, call_in(f))).collect();
        let above = |by: fn(&[CodeFrame]) -> bool| {
            stood
                .iter()
                .any(|(_, c)| c.is_some_and(|c| c.get(1..).is_some_and(by)))
        };
        batch_of_items |= above(fetched_by_data_loader);
        merged_by_tf_data |= above(run_by_tf_data);
        let (w, c) = calls::runs(times, &stood);
        whole.extend(w);
        cut.extend(c);
    }
    calls::estimate(whole, &cut, period).map(|t| CallTime {
        batch_of_items,
        merged_by_tf_data,
        ..t
    })
}

/// Frames above a call that hold a PyTorch DataLoader's fetch of a batch:
/// it calls the dataset's `__getitem__` for each item from one line.
fn fetched_by_data_loader(above: &[CodeFrame]) -> bool {
    above
        .iter()
        .any(|f| f.library && f.file == "torch/utils/data/_utils/fetch.py")
}

/// Frames above a call that hold tf.data's runner of a `py_function` (or
/// `numpy_function`): it calls the map's Python function for each element
/// from one place.
fn run_by_tf_data(above: &[CodeFrame]) -> bool {
    above
        .iter()
        .any(|f| f.library && f.file == "tensorflow/python/ops/script_ops.py")
}

/// `PIL/Image.py` + `open` -> `PIL.Image.open`; the user's own functions
/// keep their bare name (the file and line say where).
fn display_function(f: &CodeFrame) -> String {
    if !f.library {
        return f.function.clone();
    }
    let module = f
        .file
        .strip_suffix(".py")
        .unwrap_or(&f.file)
        .trim_end_matches("/__init__")
        .replace('/', ".");
    if module.is_empty() || module.starts_with('<') {
        f.function.clone()
    } else {
        format!("{module}.{}", f.function)
    }
}

/// Well-known blocking calls, by the leaf's module file and function.
const WAITS: &[(&str, &str, &str)] = &[
    ("queue.py", "get", "queue.get"),
    ("threading.py", "wait", "a threading Condition or Event"),
    ("threading.py", "join", "Thread.join"),
    ("threading.py", "_wait_for_tstate_lock", "Thread.join"),
    ("threading.py", "acquire", "a threading Semaphore"),
    (
        "multiprocessing/connection.py",
        "",
        "a multiprocessing pipe",
    ),
    (
        "multiprocessing/queues.py",
        "get",
        "a multiprocessing queue",
    ),
    (
        "multiprocessing/synchronize.py",
        "",
        "a multiprocessing lock",
    ),
    ("concurrent/futures/_base.py", "result", "a Future's result"),
    ("selectors.py", "select", "network or pipe I/O (select)"),
    ("socket.py", "", "a socket"),
    ("subprocess.py", "wait", "a child process"),
    (
        "torch/cuda/__init__.py",
        "synchronize",
        "torch.cuda.synchronize (the GPU)",
    ),
    (
        "torch/distributed/",
        "",
        "a torch.distributed collective (another rank?)",
    ),
    (
        "torch/utils/data/dataloader.py",
        "",
        "the DataLoader's next batch",
    ),
    (
        "tensorflow/python/data/",
        "",
        "the tf.data iterator's next element",
    ),
];

/// Data-loading calls a training loop waits on for its next batch, by
/// module file and function; what each waits on is its entry in `WAITS`.
const BATCH_CALLS: &[(&str, &str)] = &[
    ("torch/utils/data/dataloader.py", "__next__"),
    ("tensorflow/python/data/ops/iterator_ops.py", "__next__"),
    ("queue.py", "get"),
];

/// A data-loading call the user's own code makes in `frames`: from the
/// call's frame to the root.
fn batch_call(frames: &[CodeFrame]) -> Option<&[CodeFrame]> {
    (0..frames.len().saturating_sub(1)).rev().find_map(|at| {
        let (f, caller) = (&frames[at], &frames[at + 1]);
        let known = BATCH_CALLS
            .iter()
            .any(|(file, func)| f.file == *file && bare_function(f) == *func);
        (f.library && known && !caller.library).then_some(&frames[at..])
    })
}

/// The thread that waits longest in data-loading calls, and its wait for
/// each batch.
fn batch_wait(
    times: &[f64],
    timelines: &HashMap<(u32, &str), (u32, &str, Timeline)>,
) -> Option<BatchWait> {
    let (_, (tid, name, timeline), _) = timelines
        .iter()
        .map(|(k, v)| {
            (
                k,
                v,
                v.2.iter().filter(|(_, f)| batch_call(f).is_some()).count(),
            )
        })
        .filter(|(_, _, n)| *n > 0)
        .max_by(|a, b| a.2.cmp(&b.2).then_with(|| b.0.cmp(a.0)))?;
    let call = timeline.iter().find_map(|(_, f)| batch_call(f))?;
    let caller = &call[1];
    let per_batch = time_calls(times, std::iter::once(timeline), batch_call)?;
    Some(BatchWait {
        waiting_on: waiting_on(&call[0])?,
        tid: *tid,
        thread: (*name).to_owned(),
        function: caller.function.clone(),
        file: caller.file.clone(),
        line: caller.line,
        per_batch,
    })
}

/// `Queue.get` -> `get`: the function without its class.
fn bare_function(f: &CodeFrame) -> &str {
    f.function.rsplit('.').next().unwrap_or(&f.function)
}

fn waiting_on(leaf: &CodeFrame) -> Option<String> {
    let function = bare_function(leaf);
    WAITS
        .iter()
        .find(|(file, func, _)| {
            let file_matches = if file.ends_with('/') {
                leaf.file.starts_with(file)
            } else {
                leaf.file == *file
            };
            file_matches && (func.is_empty() || *func == function)
        })
        .map(|(_, _, what)| (*what).to_owned())
}

#[derive(Default)]
struct ThreadTally {
    pid: u32,
    name: String,
    state: char,
    reads: u32,
    running: u32,
    gil: u32,
    places: Places,
}

/// Counts per function-level place (lines left out, so the lines of one
/// loop count together), each with the counts of its exact lines.
#[derive(Default)]
struct Places(HashMap<Place, (u32, HashMap<Place, u32>)>);

impl Places {
    fn add(&mut self, place: &Place) {
        let (n, lines) = self.0.entry(place.function()).or_default();
        *n += 1;
        *lines.entry(place.clone()).or_default() += 1;
    }

    /// Most frequent first, each as its most frequent lines (ties broken
    /// by file, line and name, so the result does not depend on hashing).
    fn ranked(&self) -> Vec<(Place, u32)> {
        let order = |a: &Place, b: &Place| {
            a.leaf
                .file
                .cmp(&b.leaf.file)
                .then_with(|| a.leaf.line.cmp(&b.leaf.line))
                .then_with(|| a.leaf.function.cmp(&b.leaf.function))
                .then_with(|| {
                    a.user
                        .as_ref()
                        .map(|u| u.line)
                        .cmp(&b.user.as_ref().map(|u| u.line))
                })
        };
        let mut list: Vec<(Place, u32)> = self
            .0
            .values()
            .filter_map(|(n, lines)| {
                let (best, _) = lines
                    .iter()
                    .max_by(|a, b| a.1.cmp(b.1).then_with(|| order(b.0, a.0)))?;
                Some((best.clone(), *n))
            })
            .collect();
        list.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| order(&a.0, &b.0)));
        list
    }

    /// The places kept, each timed by its calls over `timelines`.
    fn top<'a, 'f: 'a>(
        &self,
        of: u32,
        times: &[f64],
        timelines: impl Iterator<Item = &'a Timeline<'f>> + Clone,
    ) -> Vec<HotSpot> {
        self.ranked()
            .into_iter()
            .take(HOT_KEPT)
            .map(|(p, n)| HotSpot {
                per_call: time_calls(times, timelines.clone(), |f| p.call_in(f)),
                ..p.spot(n, of)
            })
            .collect()
    }
}

/// A thread's key in a burst: its tid, or, where the tid could not be
/// found (0), its name.
fn thread_key(t: &ThreadRead) -> (u32, &str) {
    (t.tid, if t.tid == 0 { t.name.as_str() } else { "" })
}

fn is_running(t: &ThreadRead) -> bool {
    t.state == 'R'
}

/// Aggregates a burst's reads into a report.
pub fn aggregate(burst: &Burst, focus: Focus) -> StackReport {
    let reads = burst.reads.len() as u32;
    // By tid, and by name among the threads whose tid is unknown (0).
    let mut threads: HashMap<(u32, &str), ThreadTally> = HashMap::new();
    // Per place: reads in which a running thread stood there (once per read).
    let mut hot = Places::default();
    // Per function-level place and thread: reads in which that thread ran it.
    let mut by_thread: HashMap<(Place, (u32, &str)), u32> = HashMap::new();
    // Per thread: its tid, name and frames in each read it was in, to time
    // calls by (only where every read has its time).
    let times = if burst.times.len() == burst.reads.len() {
        burst.times
    } else {
        &[]
    };
    let mut timelines: HashMap<(u32, &str), (u32, &str, Timeline)> = HashMap::new();
    for (i, read) in burst.reads.iter().enumerate() {
        let mut seen: Vec<Place> = Vec::new();
        for t in read {
            let key = thread_key(t);
            timelines
                .entry(key)
                .or_insert_with(|| (t.tid, t.name.as_str(), Vec::new()))
                .2
                .push((i, t.frames.as_slice()));
            let tally = threads.entry(key).or_default();
            tally.pid = t.pid;
            tally.name.clone_from(&t.name);
            tally.state = t.state;
            tally.reads += 1;
            tally.gil += u32::from(t.owns_gil);
            let Some(place) = Place::of(&t.frames) else {
                continue;
            };
            if is_running(t) {
                tally.running += 1;
                *by_thread.entry((place.function(), key)).or_default() += 1;
                if !seen.iter().any(|s| s.function() == place.function()) {
                    seen.push(place.clone());
                }
            }
            tally.places.add(&place);
        }
        for place in &seen {
            hot.add(place);
        }
    }
    let ranked = hot.ranked();
    let hot_spots = hot.top(reads, times, timelines.values().map(|v| &v.2));
    let busy_threads = ranked.first().map(|(top, _)| {
        let top = top.function();
        by_thread
            .iter()
            .filter(|((p, _), n)| *p == top && **n as f64 >= BUSY_THREAD_SHARE * reads as f64)
            .count() as u32
    });
    let mut thread_list: Vec<((u32, &str), ThreadTally)> = threads.into_iter().collect();
    thread_list.sort_by(|a, b| {
        b.1.running
            .cmp(&a.1.running)
            .then(b.1.reads.cmp(&a.1.reads))
            .then(a.0.cmp(&b.0))
    });
    let thread_stacks: Vec<ThreadStacks> = thread_list
        .into_iter()
        .take(THREADS_KEPT)
        .map(|(key, t)| {
            let tid = key.0;
            let top = t.places.top(
                t.reads,
                times,
                timelines.get(&key).map(|v| &v.2).into_iter(),
            );
            let most = t.places.ranked().into_iter().next().map(|(p, _)| p);
            ThreadStacks {
                pid: t.pid,
                tid,
                name: t.name,
                state: t.state.to_string(),
                samples: t.reads,
                running_share: round(t.running as f64 / t.reads.max(1) as f64),
                gil_share: round(t.gil as f64 / t.reads.max(1) as f64),
                waiting_on: most.filter(|_| t.running * 2 < t.reads).and_then(|p| {
                    // The call the user made (`queue.get`) says more than
                    // the lock inside it (`Condition.wait`).
                    p.entry
                        .as_ref()
                        .and_then(waiting_on)
                        .or_else(|| waiting_on(&p.leaf))
                }),
                top,
            }
        })
        .collect();
    let mut report = StackReport {
        pid: burst.pid,
        outcome: ReadOutcome::Sampled,
        focus,
        detail: (burst.dropped > 0).then(|| {
            format!(
                "{} of {} reads dropped (torn or failed)",
                burst.dropped,
                reads + burst.dropped
            )
        }),
        python_version: burst.python_version.clone(),
        time: burst.time,
        duration_seconds: round(burst.duration_seconds),
        samples: reads,
        dropped: burst.dropped,
        limits: Vec::new(),
        summary: String::new(),
        hot: hot_spots,
        busy_threads: busy_threads.filter(|n| *n > 0),
        threads: thread_stacks,
        framework: crate::framework::of_reads(burst.reads),
        interactive: burst
            .reads
            .iter()
            .flatten()
            .flat_map(|t| t.frames.iter())
            .any(|f| f.library && f.file.starts_with("ipykernel/")),
        phase: crate::phase::of_reads(burst.reads),
        batch_wait: batch_wait(times, &timelines),
    };
    report.summary = summarize(&report, focus);
    report
}

fn summarize(r: &StackReport, focus: Focus) -> String {
    if r.samples == 0 {
        return format!("no stack of pid {} could be read", r.pid);
    }
    let busy = r.hot.first().map(|top| {
        let mut s = format!(
            "{} in {} of {} samples{}",
            describe_spot(top),
            pct(top.share),
            r.samples,
            per_call_text(top)
        );
        if let Some(n) = r.busy_threads.filter(|n| *n > 1) {
            s.push_str(&format!(
                ", spread over {n} threads (GIL-bound work hopping between them)"
            ));
        }
        s
    });
    match focus {
        Focus::Busy => busy.unwrap_or_else(|| {
            format!(
                "no Python thread of pid {} was running in {} samples{}",
                r.pid,
                r.samples,
                r.threads
                    .first()
                    .map(|t| format!("; {}", thread_line(t)))
                    .unwrap_or_default()
            )
        }),
        Focus::AllThreads => {
            let mut lines: Vec<String> = r
                .threads
                .iter()
                .take(SUMMARY_THREADS)
                .map(thread_line)
                .collect();
            if r.threads.len() > SUMMARY_THREADS {
                lines.push(format!(
                    "{} more threads",
                    r.threads.len() - SUMMARY_THREADS
                ));
            }
            lines.join("; ")
        }
    }
}
