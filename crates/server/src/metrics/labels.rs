//! Label sets that borrow from the snapshot: a series' labels are written
//! straight from the snapshot's strings and numbers, with nothing allocated
//! per series (a render writes about a thousand series a second).

use std::fmt::Write;

use collector::sample::{GpuLabel, MIG_INDEX_BASE};
use prometheus_client::encoding::{
    EncodeLabel, EncodeLabelSet, EncodeLabelValue, LabelSetEncoder, LabelValueEncoder,
};

/// The most labels a series has (a job's `_info`: pid, comm and ten
/// attribution labels).
const CAPACITY: usize = 12;

/// One label's value.
#[derive(Debug, Clone, Copy)]
pub enum Value<'a> {
    Str(&'a str),
    Int(u64),
    /// A GPU's index, written as its `gpu` label (`parent/gi/ci` for a MIG
    /// instance).
    Gpu(u32),
}

impl<'a> From<&'a str> for Value<'a> {
    fn from(s: &'a str) -> Self {
        Value::Str(s)
    }
}

impl<'a> From<&'a String> for Value<'a> {
    fn from(s: &'a String) -> Self {
        Value::Str(s)
    }
}

impl From<u32> for Value<'_> {
    fn from(n: u32) -> Self {
        Value::Int(u64::from(n))
    }
}

impl EncodeLabelValue for Value<'_> {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        match *self {
            Value::Str(s) => encoder.write_str(s),
            Value::Int(n) => EncodeLabelValue::encode(&n, encoder),
            Value::Gpu(i) if i < MIG_INDEX_BASE => EncodeLabelValue::encode(&i, encoder),
            Value::Gpu(i) => write!(encoder, "{}", GpuLabel(i)),
        }
    }
}

/// A series' labels, in order.
#[derive(Debug, Clone, Copy)]
pub struct Labels<'a> {
    pairs: [(&'static str, Value<'a>); CAPACITY],
    len: usize,
}

impl<'a> Labels<'a> {
    /// No labels.
    pub const fn none() -> Self {
        Labels {
            pairs: [("", Value::Int(0)); CAPACITY],
            len: 0,
        }
    }

    /// A GPU's: `gpu` and `uuid`.
    pub fn gpu(index: u32, uuid: &'a str) -> Self {
        Labels::none()
            .with("gpu", Value::Gpu(index))
            .with("uuid", uuid)
    }

    /// These labels and one more. A set is never built beyond `CAPACITY`
    /// (a test builds the largest); a label past it would be left out.
    pub fn with(mut self, key: &'static str, value: impl Into<Value<'a>>) -> Self {
        if let Some(slot) = self.pairs.get_mut(self.len) {
            *slot = (key, value.into());
            self.len += 1;
        }
        self
    }
}

impl EncodeLabelSet for Labels<'_> {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        for label in &self.pairs[..self.len] {
            label.encode(encoder.encode_label())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use collector::sample::mig_index;
    use prometheus_client::encoding::DescriptorEncoder;
    use prometheus_client::metrics::MetricType;
    use prometheus_client::registry::Registry;

    struct One(Labels<'static>);

    impl std::fmt::Debug for One {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("One")
        }
    }

    impl prometheus_client::collector::Collector for One {
        fn encode(&self, mut e: DescriptorEncoder) -> Result<(), std::fmt::Error> {
            let mut m = e.encode_descriptor("x", "x", None, MetricType::Gauge)?;
            m.encode_family(&self.0)?.encode_gauge(&1.0)
        }
    }

    fn line(labels: Labels<'static>) -> String {
        let mut r = Registry::default();
        r.register_collector(Box::new(One(labels)));
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &r).unwrap();
        out.lines().find(|l| l.starts_with("x")).unwrap().to_owned()
    }

    #[test]
    fn gpu_labels_numbers_and_escaping() {
        assert_eq!(
            line(Labels::gpu(3, "GPU-a").with("pid", 42u32)),
            r#"x{gpu="3",uuid="GPU-a",pid="42"} 1.0"#
        );
        assert_eq!(
            line(Labels::gpu(mig_index(1, 2, 0), "MIG-b")),
            r#"x{gpu="1/2/0",uuid="MIG-b"} 1.0"#
        );
        assert_eq!(
            line(Labels::none().with("comm", "a\"b\\c\nd")),
            r#"x{comm="a\"b\\c\nd"} 1.0"#
        );
        assert_eq!(line(Labels::none()), "x 1.0");
    }

    #[test]
    fn the_largest_set_fits() {
        let job_info = Labels::none()
            .with("pid", 1u32)
            .with("comm", "python")
            .with("container_id", "")
            .with("systemd_unit", "")
            .with("pod_uid", "")
            .with("namespace", "")
            .with("pod", "")
            .with("container", "")
            .with("slurm_job_id", "")
            .with("slurm_step", "")
            .with("slurm_account", "")
            .with("user", "u");
        assert_eq!(
            line(job_info),
            r#"x{pid="1",comm="python",container_id="",systemd_unit="",pod_uid="",namespace="",pod="",container="",slurm_job_id="",slurm_step="",slurm_account="",user="u"} 1.0"#
        );
    }
}
