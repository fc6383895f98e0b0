//! How one metric family is written: a descriptor and a value per label set,
//! its units, and the series per GPU and per exported process.

use collector::snapshot::{GpuProcessSnapshot, GpuSnapshot};
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;

use super::labels::Labels;

pub fn ratio() -> Unit {
    Unit::Other("ratio".to_owned())
}

pub fn hertz() -> Unit {
    Unit::Other("hertz".to_owned())
}

/// The processes of a GPU that get series: the first `max_processes` (the
/// collector lists them largest GPU memory first). The one place the
/// `gpu.max_processes` cap is applied, for the process series and for the jobs.
pub fn exported_processes(
    g: &GpuSnapshot,
    max_processes: usize,
) -> impl Iterator<Item = &GpuProcessSnapshot> {
    g.processes.iter().take(max_processes)
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

pub fn no_labels(value: f64) -> [(Labels<'static>, f64); 1] {
    [(Labels::none(), value)]
}

/// A gauge with one series per GPU that has the value.
pub fn per_gpu(
    e: &mut DescriptorEncoder,
    gpus: &[&GpuSnapshot],
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    value: impl Fn(&GpuSnapshot) -> Option<f64>,
) -> Result<(), std::fmt::Error> {
    gauge(
        e,
        name,
        help,
        unit,
        gpus.iter()
            .filter_map(|g| Some((Labels::gpu(g.index, &g.uuid), value(g)?))),
    )
}
