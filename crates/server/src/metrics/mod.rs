//! `/metrics`: a snapshot and its diagnosis encoded as OpenMetrics (or
//! Prometheus) text, once per sample (`api/metrics_body.rs` decides when).
//! Nothing here reads NVML or `/proc`; series of exited processes vanish with
//! the snapshot that no longer holds them.

mod faults;
mod gpm;
mod gpu;
mod host;
mod job;
mod labels;
mod verdicts;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use collector::sample::ErrorSource;
use collector::snapshot::{GpuProcessSnapshot, GpuSnapshot, Snapshot};
use diagnosis::GpuStatus;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

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

pub use labels::{Labels, Value};

pub fn ratio() -> Unit {
    Unit::Other("ratio".to_owned())
}

pub fn hertz() -> Unit {
    Unit::Other("hertz".to_owned())
}

/// What a scrape renders.
#[derive(Debug)]
pub struct Scrape {
    pub snapshot: Arc<Snapshot>,
    pub diagnosis: Arc<Vec<GpuStatus>>,
    pub max_processes: usize,
}

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = &self.snapshot;
        let e = &mut encoder;
        own(e, s)?;
        gpu::encode(e, s, self.max_processes)?;
        faults::encode(e, s)?;
        verdicts::encode(e, &self.diagnosis)?;
        job::encode(e, s, self.max_processes)?;
        host::encode(e, &s.host)
    }
}

/// The processes of a GPU that get series: the first `max_processes` (the
/// collector lists them largest GPU memory first). The one place the
/// `gpu.max_processes` cap is applied, for the process series and for the jobs.
fn exported_processes(
    g: &GpuSnapshot,
    max_processes: usize,
) -> impl Iterator<Item = &GpuProcessSnapshot> {
    g.processes.iter().take(max_processes)
}

/// The length of the last body rendered, so that the next one (about as
/// long) is written into one allocation instead of growing through several.
static LAST_LEN: AtomicUsize = AtomicUsize::new(16 * 1024);

/// Renders a snapshot and its diagnosis in the given format.
pub fn render(scrape: Scrape, format: Format) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(scrape));
    let last = LAST_LEN.load(Ordering::Relaxed);
    let mut out = String::with_capacity(last + last / 8);
    // Writing into a String cannot fail.
    let _ = match format {
        Format::OpenMetrics => prometheus_client::encoding::text::encode(&mut out, &registry),
        Format::PrometheusText => {
            prometheus_client::encoding::prometheus_text::encode(&mut out, &registry)
        }
    };
    LAST_LEN.store(out.len(), Ordering::Relaxed);
    out
}

/// Writes one metric family: a descriptor and a value per label set. A
/// family with no series writes nothing.
pub fn family<L, I>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    metric_type: MetricType,
    series: I,
) -> Result<(), std::fmt::Error>
where
    L: EncodeLabelSet,
    I: IntoIterator<Item = (L, f64)>,
{
    let mut series = series.into_iter().peekable();
    if series.peek().is_none() {
        return Ok(());
    }
    let mut metric = encoder.encode_descriptor(name, help, unit, metric_type)?;
    for (labels, value) in series {
        let mut m = metric.encode_family(&labels)?;
        match metric_type {
            MetricType::Counter => m.encode_counter::<Labels, f64, f64>(&value, None)?,
            _ => m.encode_gauge(&value)?,
        }
    }
    Ok(())
}

pub fn gauge<L, I>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    series: I,
) -> Result<(), std::fmt::Error>
where
    L: EncodeLabelSet,
    I: IntoIterator<Item = (L, f64)>,
{
    family(encoder, name, help, unit, MetricType::Gauge, series)
}

pub fn counter<L, I>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    series: I,
) -> Result<(), std::fmt::Error>
where
    L: EncodeLabelSet,
    I: IntoIterator<Item = (L, f64)>,
{
    family(encoder, name, help, unit, MetricType::Counter, series)
}

pub fn info<L: EncodeLabelSet>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: impl IntoIterator<Item = L>,
) -> Result<(), std::fmt::Error> {
    let mut series = series.into_iter().peekable();
    if series.peek().is_none() {
        return Ok(());
    }
    let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Info)?;
    for labels in series {
        metric.encode_info(&labels)?;
    }
    Ok(())
}

fn no_labels(value: f64) -> [(Labels<'static>, f64); 1] {
    [(Labels::none(), value)]
}

fn own(e: &mut DescriptorEncoder, s: &Snapshot) -> Result<(), std::fmt::Error> {
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
        no_labels(s.sample_duration_seconds),
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
    )
}
