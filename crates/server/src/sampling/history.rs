//! The last minutes of each GPU: utilization and the CPU of the busiest thread of
//! the jobs on it, one point a second, for `/api/v1/history` and the status page.
//!
//! Memory is bounded: a ring of [`CAPACITY`] points per GPU, allocated once, each
//! point [`POINT_BYTES`] bytes (the thread name is stored inline, cut to the
//! kernel's 15-byte limit), so 8 GPUs hold 900 x 32 x 8 = 230,400 bytes plus the
//! GPUs' UUIDs. Recording a sample allocates nothing once the rings exist, and a
//! request serializes straight from the rings, copying nothing.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use collector::snapshot::Snapshot;
use serde::ser::{Serialize, SerializeStruct, Serializer};

/// Points kept per GPU: 15 minutes at one point a second.
pub const CAPACITY: usize = 900;
/// Seconds between points (when samples are taken more often, the others are
/// not recorded; when less often, every sample is one point).
pub const RESOLUTION_SECONDS: f64 = 1.0;
/// Bytes one point takes in the ring.
pub const POINT_BYTES: usize = std::mem::size_of::<Point>();

/// The history, shared between the sampler (which records) and the API.
pub type SharedHistory = Arc<Mutex<History>>;

/// Longest thread name Linux keeps (`TASK_COMM_LEN` less the NUL).
const NAME_BYTES: usize = 15;

#[derive(Debug, Clone, Copy, PartialEq)]
struct Point {
    /// Sample time, seconds since the epoch.
    t: f64,
    /// GPU utilization 0-1; NaN when unknown (NVML down or stale, GPU lost).
    utilization: f32,
    /// Share of one core the busiest thread used; NaN when no job has one.
    thread_cpu: f32,
    thread: ThreadName,
}

/// A thread name stored inline: no allocation per point.
#[derive(Debug, Clone, Copy, PartialEq)]
struct ThreadName {
    len: u8,
    bytes: [u8; NAME_BYTES],
}

impl ThreadName {
    const NONE: ThreadName = ThreadName {
        len: 0,
        bytes: [0; NAME_BYTES],
    };

    fn new(name: &str) -> ThreadName {
        let mut end = name.len().min(NAME_BYTES);
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        let mut bytes = [0; NAME_BYTES];
        bytes[..end].copy_from_slice(&name.as_bytes()[..end]);
        ThreadName {
            len: end as u8,
            bytes,
        }
    }

    fn as_str(&self) -> Option<&str> {
        // Built from a &str cut at a char boundary, so always valid UTF-8.
        (self.len > 0)
            .then(|| std::str::from_utf8(&self.bytes[..usize::from(self.len)]).ok())
            .flatten()
    }
}

#[derive(Debug)]
struct GpuRing {
    index: u32,
    uuid: String,
    points: VecDeque<Point>,
}

#[derive(Debug, Default)]
pub struct History {
    gpus: Vec<GpuRing>,
    /// Time of the latest sample recorded.
    latest: Option<f64>,
}

impl History {
    pub fn shared() -> SharedHistory {
        Arc::new(Mutex::new(History::default()))
    }

    /// Adds a point per GPU from this snapshot, unless the last point is less than
    /// [`RESOLUTION_SECONDS`] old. GPUs no longer present are dropped; a GPU whose
    /// UUID changed, or a clock that went back, starts its ring again.
    pub fn record(&mut self, s: &Snapshot) {
        let t = s.timestamp_seconds;
        self.gpus
            .retain(|r| s.gpus.iter().any(|g| g.index == r.index));
        let fresh = s.nvml_up && !s.gpu_stale;
        for g in &s.gpus {
            let ring = match self.gpus.iter().position(|r| r.index == g.index) {
                Some(i) => &mut self.gpus[i],
                None => {
                    self.gpus.push(GpuRing {
                        index: g.index,
                        uuid: g.uuid.clone(),
                        points: VecDeque::with_capacity(CAPACITY),
                    });
                    self.gpus.sort_by_key(|r| r.index);
                    let i = self.gpus.iter().position(|r| r.index == g.index);
                    &mut self.gpus[i.unwrap_or_default()]
                }
            };
            if ring.uuid != g.uuid {
                ring.uuid.clone_from(&g.uuid);
                ring.points.clear();
            }
            if let Some(last) = ring.points.back()
                && t < last.t
            {
                ring.points.clear();
            }
            if !ring.points.back().is_none_or(|last| due(last.t, t)) {
                continue;
            }
            let utilization = g
                .utilization_ratio
                .filter(|_| fresh && g.up && !g.stale)
                .map_or(f32::NAN, |u| u as f32);
            let busiest = s
                .jobs
                .iter()
                .filter(|j| j.gpus.contains(&g.index))
                .filter_map(|j| j.top_threads.first())
                .max_by(|a, b| a.cpu_ratio.total_cmp(&b.cpu_ratio));
            if ring.points.len() == CAPACITY {
                ring.points.pop_front();
            }
            ring.points.push_back(Point {
                t,
                utilization,
                thread_cpu: busiest.map_or(f32::NAN, |b| b.cpu_ratio as f32),
                thread: busiest.map_or(ThreadName::NONE, |b| ThreadName::new(&b.name)),
            });
        }
        self.latest = Some(t);
    }

    /// The points of the last `seconds` before the latest sample, ready to
    /// serialize; `None` before the first sample.
    pub fn window(&self, seconds: f64) -> Option<Window<'_>> {
        let latest = self.latest?;
        Some(Window {
            history: self,
            latest,
            from: latest - seconds,
        })
    }
}

/// Whether a point at `t` is due after one at `last`: a second later, or in the
/// next wall-clock second and at least half a second later (so a sampling
/// interval of exactly one second, with jitter, records every sample).
fn due(last: f64, t: f64) -> bool {
    let elapsed = t - last;
    elapsed >= 0.9 * RESOLUTION_SECONDS
        || (elapsed >= 0.5 * RESOLUTION_SECONDS
            && (t / RESOLUTION_SECONDS).floor() != (last / RESOLUTION_SECONDS).floor())
}

/// A view of the history from a time on, serialized as in docs/api.md.
pub struct Window<'a> {
    history: &'a History,
    latest: f64,
    from: f64,
}

impl Serialize for Window<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut out = s.serialize_struct("History", 3)?;
        out.serialize_field("time", &self.latest)?;
        out.serialize_field("resolution_seconds", &RESOLUTION_SECONDS)?;
        let gpus: Vec<GpuWindow<'_>> = self
            .history
            .gpus
            .iter()
            .map(|ring| GpuWindow {
                ring,
                skip: ring.points.partition_point(|p| p.t < self.from),
            })
            .collect();
        out.serialize_field("gpus", &gpus)?;
        out.end()
    }
}

struct GpuWindow<'a> {
    ring: &'a GpuRing,
    skip: usize,
}

impl<'a> GpuWindow<'a> {
    fn column<T: Serialize, F: Fn(&'a Point) -> T>(&self, f: F) -> Column<'a, F> {
        Column {
            points: &self.ring.points,
            skip: self.skip,
            f,
        }
    }
}

/// One field of every point in the window, as a JSON array.
struct Column<'a, F> {
    points: &'a VecDeque<Point>,
    skip: usize,
    f: F,
}

impl<'a, T: Serialize, F: Fn(&'a Point) -> T> Serialize for Column<'a, F> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.points.range(self.skip..).map(&self.f))
    }
}

/// A ratio to three decimals; `None` (JSON null) for NaN.
fn ratio(v: f32) -> Option<f64> {
    (!v.is_nan()).then(|| (f64::from(v) * 1000.0).round() / 1000.0)
}

impl Serialize for GpuWindow<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut out = s.serialize_struct("GpuHistory", 6)?;
        out.serialize_field("gpu", &self.ring.index)?;
        out.serialize_field("uuid", &self.ring.uuid)?;
        // Down to the millisecond: a point is never later than the history's `time`.
        out.serialize_field("t", &self.column(|p| (p.t * 1000.0).floor() / 1000.0))?;
        out.serialize_field("utilization", &self.column(|p| ratio(p.utilization)))?;
        out.serialize_field("thread_cpu", &self.column(|p| ratio(p.thread_cpu)))?;
        out.serialize_field("thread", &self.column(|p| p.thread.as_str()))?;
        out.end()
    }
}

#[cfg(test)]
mod tests;
