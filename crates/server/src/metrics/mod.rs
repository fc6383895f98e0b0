//! `/metrics`: a snapshot and its diagnosis encoded as OpenMetrics (or
//! Prometheus) text, once per sample (`sampling/bodies.rs` decides when).
//! Nothing here reads NVML or `/proc`; series of exited processes vanish with
//! the snapshot that no longer holds them.

mod family;
mod faults;
mod gpm;
mod gpu;
mod host;
mod job;
mod labels;
mod own_cost;
mod places;
mod verdicts;

use std::ops::Range;
use std::sync::Arc;

use collector::sample::ErrorSource;
use collector::snapshot::Snapshot;
use diagnosis::GpuStatus;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::{Registry, Unit};

use crate::own_cost::SampleCost;

/// The exposition formats `/metrics` can answer in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0 text: the default, and what Prometheus asks for.
    OpenMetrics,
    /// The classic Prometheus text format 0.0.4, for clients that ask for
    /// `text/plain` only (older scrapers, `promtool check metrics`).
    PrometheusText,
}

impl Format {
    /// Picks the format from an `Accept` header.
    pub fn negotiate(accept: Option<&str>) -> Format {
        match accept {
            Some(a) if a.contains("text/plain") && !a.contains("application/openmetrics-text") => {
                Format::PrometheusText
            }
            _ => Format::OpenMetrics,
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::PrometheusText => "text/plain; version=0.0.4; charset=utf-8",
        }
    }
}

use family::no_labels;
pub use family::{counter, family, gauge, hertz, info, ratio};
pub use labels::{Labels, Value};

/// What a scrape renders.
#[derive(Debug)]
pub struct Scrape {
    pub snapshot: Arc<Snapshot>,
    /// What the sample the snapshot comes from cost the daemon.
    pub cost: Arc<SampleCost>,
    pub diagnosis: Arc<Vec<GpuStatus>>,
    pub max_processes: usize,
}

/// A body is written in three parts, in this order; the middle one, the
/// per-kind stall series (15 kinds per GPU: half the body's series), holds
/// the same text sample after sample until an episode starts, runs or ends.
#[derive(Debug, Clone, Copy)]
enum Section {
    /// The daemon's own series, the GPUs, their faults, the verdicts.
    Head,
    /// Every kind's state and counters per GPU.
    Stalls,
    /// The GPUs' job idle time, the jobs, the host.
    Tail,
}

#[derive(Debug)]
struct Part {
    scrape: Arc<Scrape>,
    section: Section,
}

impl Collector for Part {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = &self.scrape.snapshot;
        let cost = &self.scrape.cost;
        let diagnosis = &self.scrape.diagnosis;
        let max_processes = self.scrape.max_processes;
        let e = &mut encoder;
        match self.section {
            Section::Head => {
                own(e, s, cost)?;
                gpu::encode(e, s, max_processes)?;
                faults::encode(e, s)?;
                verdicts::verdict(e, diagnosis)
            }
            Section::Stalls => verdicts::stalls(e, diagnosis),
            Section::Tail => {
                verdicts::job_idle(e, diagnosis)?;
                verdicts::time(e, diagnosis)?;
                verdicts::lost_progress(e, diagnosis)?;
                verdicts::phases(e, diagnosis)?;
                places::encode(e, diagnosis)?;
                job::encode(e, s, max_processes)?;
                host::encode(e, &s.host)
            }
        }
    }
}

/// Renders bodies one after another, keeping what the next can reuse: the
/// stall series' text per format (with the diagnosis it was written from),
/// and the last body's length (the next, about as long, is written into one
/// allocation instead of growing through several).
#[derive(Debug)]
pub struct Renderer {
    last_len: usize,
    /// [format]
    stalls: [Option<(Arc<Vec<GpuStatus>>, String)>; 2],
}

impl Default for Renderer {
    fn default() -> Self {
        Renderer {
            last_len: 16 * 1024,
            stalls: [None, None],
        }
    }
}

impl Renderer {
    /// Renders a snapshot and its diagnosis in the given format.
    pub fn render(&mut self, scrape: Scrape, format: Format) -> String {
        self.render_parts(scrape, format).0
    }

    /// [`Renderer::render`], with where the stall series lie in the body
    /// (the part that is usually the same as in the last body).
    pub fn render_parts(&mut self, scrape: Scrape, format: Format) -> (String, Range<usize>) {
        let scrape = Arc::new(scrape);
        let mut out = String::with_capacity(self.last_len + self.last_len / 8);
        encode(&mut out, &scrape, Section::Head, format);
        let diagnosis = &scrape.diagnosis;
        let start = out.len();
        match &self.stalls[format as usize] {
            Some((from, text)) if verdicts::same_stalls(from, diagnosis) => out.push_str(text),
            _ => {
                let mut text = String::new();
                encode(&mut text, &scrape, Section::Stalls, format);
                out.push_str(&text);
                self.stalls[format as usize] = Some((diagnosis.clone(), text));
            }
        }
        let stalls = start..out.len();
        encode(&mut out, &scrape, Section::Tail, format);
        if format == Format::OpenMetrics {
            // Writing into a String cannot fail.
            let _ = prometheus_client::encoding::text::encode_eof(&mut out);
        }
        self.last_len = out.len();
        (out, stalls)
    }
}

/// Renders a snapshot and its diagnosis in the given format, once (a
/// [`Renderer`] keeps what the next body can reuse).
pub fn render(scrape: Scrape, format: Format) -> String {
    Renderer::default().render(scrape, format)
}

/// Appends one section of a body to `out`.
fn encode(out: &mut String, scrape: &Arc<Scrape>, section: Section, format: Format) {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Part {
        scrape: scrape.clone(),
        section,
    }));
    // Writing into a String cannot fail.
    let _ = match format {
        Format::OpenMetrics => prometheus_client::encoding::text::encode_registry(out, &registry),
        Format::PrometheusText => {
            prometheus_client::encoding::prometheus_text::encode(out, &registry)
        }
    };
}

fn own(e: &mut DescriptorEncoder, s: &Snapshot, cost: &SampleCost) -> Result<(), std::fmt::Error> {
    info(
        e,
        "stallwatch_build",
        "Version of the stallwatch binary.",
        [Labels::none().with("version", env!("CARGO_PKG_VERSION"))],
    )?;
    gauge(
        e,
        "stallwatch_sample_duration",
        "How long the latest sample took: reading GPUs, jobs and host, deriving rates, and the diagnosis.",
        Some(&Unit::Seconds),
        no_labels(cost.duration_seconds),
    )?;
    gauge(
        e,
        "stallwatch_nvml_read_duration",
        "How long the latest sample waited for its NVML reading (every GPU read side by side).",
        Some(&Unit::Seconds),
        no_labels(s.gpu_read_duration_seconds),
    )?;
    gauge(
        e,
        "stallwatch_last_sample_timestamp",
        "When the latest sample was taken, as a Unix time.",
        Some(&Unit::Seconds),
        no_labels(s.timestamp_seconds),
    )?;
    counter(
        e,
        "stallwatch_source_errors",
        "Read errors by source since start (a process exiting mid-read is not an error).",
        None,
        ErrorSource::ALL.map(|src| {
            (
                Labels::none().with("source", src.as_str()),
                s.errors_total.get(src) as f64,
            )
        }),
    )?;
    own_cost::encode(e, s, &cost.own)
}

#[cfg(test)]
mod tests {
    use super::*;
    use diagnosis::status::KindCounters;
    use diagnosis::{Kind, Verdict};

    fn status(verdict: Verdict, starved: KindCounters) -> GpuStatus {
        GpuStatus {
            gpu: 0,
            uuid: "GPU-0".to_owned(),
            verdict,
            verdict_since: 0.0,
            active: Vec::new(),
            jobs: Vec::new(),
            job_idle_seconds_total: 0.0,
            phase: None,
            phase_seconds_total: Default::default(),
            time: Default::default(),
            time_held_seconds: 0.0,
            lost_progress_seconds_total: 0.0,
            last_ended: None,
            share: None,
            no_activity_reading: None,
            lost_by_place: Vec::new(),
            lost_unplaced: Vec::new(),
            lost_pending_seconds: 0.0,
            kinds: Kind::ALL
                .into_iter()
                .map(|k| (k, KindCounters::default()))
                .chain([(Kind::InputStarved, starved)])
                .collect(),
        }
    }

    #[test]
    fn a_renderer_reuses_the_stall_series_only_while_they_are_the_same() {
        let snapshot = Arc::new(Snapshot::default());
        let scrape = |d: &Arc<Vec<GpuStatus>>| Scrape {
            snapshot: snapshot.clone(),
            cost: Default::default(),
            diagnosis: d.clone(),
            max_processes: 16,
        };
        let quiet = status(Verdict::Healthy, KindCounters::default());
        let starved = |seconds_total| KindCounters {
            active: true,
            seconds_total,
            events_total: 1,
        };
        let diagnoses = [
            quiet.clone(),
            // The same stall series under another verdict and idle time.
            GpuStatus {
                verdict: Verdict::Stalled,
                job_idle_seconds_total: 3.0,
                phase: None,
                phase_seconds_total: Default::default(),
                ..quiet.clone()
            },
            status(Verdict::Stalled, starved(1.0)),
            status(Verdict::Stalled, starved(2.0)),
            // Another GPU with the same counters.
            GpuStatus {
                uuid: "GPU-1".to_owned(),
                ..status(Verdict::Stalled, starved(2.0))
            },
            quiet,
        ]
        .map(|g| Arc::new(vec![g]));
        let line =
            r#"stallwatch_gpu_stall_seconds_total{gpu="0",uuid="GPU-0",kind="input_starved"} 2.0"#;
        let mut renderer = Renderer::default();
        for format in [Format::OpenMetrics, Format::PrometheusText] {
            let mut bodies = Vec::new();
            for d in &diagnoses {
                let body = renderer.render(scrape(d), format);
                assert_eq!(body, render(scrape(d), format), "{format:?} {d:?}");
                bodies.push(body);
            }
            let has = |i: usize| bodies[i].lines().any(|l| l == line);
            assert_eq!(
                (0..bodies.len()).map(has).collect::<Vec<_>>(),
                [false, false, false, true, false, false],
                "{format:?}"
            );
            assert!(bodies[4].contains(r#"uuid="GPU-1",kind="input_starved"} 2.0"#));
        }
    }
}
