//! Counting Xid reports: which GPU each names, whether it is the second
//! report of one Xid (NVML events and the kernel log both see most), and the
//! running counts per GPU. Pure: reports and GPU identities in.

use std::collections::{BTreeMap, HashMap, VecDeque};

use super::kmsg::PciAddr;
use super::report::{GpuRef, XidReport};
use crate::sample::GpuSample;
use crate::sample::faults::{FaultSource, XidRecord};

/// Reports of one Xid on one GPU from the two sources this close together
/// are one Xid.
pub const SAME_XID_SECONDS: f64 = 10.0;

#[derive(Debug, Clone)]
struct Seen {
    uuid: String,
    xid: u32,
    source: FaultSource,
    at: f64,
    matched: bool,
}

#[derive(Debug, Default)]
pub struct XidCounts {
    counts: HashMap<String, BTreeMap<u32, u64>>,
    last: HashMap<String, XidRecord>,
    /// The latest fatal Xid (the Xids that follow one, such as 45, do not
    /// hide it).
    last_fatal: HashMap<String, XidRecord>,
    recent: VecDeque<Seen>,
}

/// What became of a report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum XidReportFate {
    Counted {
        uuid: String,
    },
    /// The other source already reported this Xid.
    Duplicate {
        uuid: String,
    },
    /// It names a GPU that NVML does not know (not even as lost).
    NoGpu,
}

impl XidCounts {
    pub fn record(&mut self, r: XidReport, gpus: &[GpuSample]) -> XidReportFate {
        let Some(gpu) = find_gpu(&r.gpu, gpus) else {
            tracing::warn!(xid = r.xid, gpu = ?r.gpu, "Xid error on a GPU that NVML does not list; not counted");
            return XidReportFate::NoGpu;
        };
        let uuid = gpu.uuid.clone();
        self.recent
            .retain(|s| r.at_seconds - s.at <= SAME_XID_SECONDS);
        let twin = self
            .recent
            .iter_mut()
            .find(|s| !s.matched && s.uuid == uuid && s.xid == r.xid && s.source != r.source);
        if let Some(twin) = twin {
            twin.matched = true;
            // The kernel line names the process: add it to the record.
            for last in [self.last.get_mut(&uuid), self.last_fatal.get_mut(&uuid)]
                .into_iter()
                .flatten()
                .filter(|last| last.xid == r.xid)
            {
                last.pid = last.pid.or(r.pid);
                if last.comm.is_none() {
                    last.comm.clone_from(&r.comm);
                }
                if last.detail.is_empty() {
                    last.detail.clone_from(&r.detail);
                }
            }
            return XidReportFate::Duplicate { uuid };
        }
        let (meaning, action) = super::xid::describe(r.xid);
        tracing::warn!(
            gpu = gpu.index,
            uuid = %uuid,
            xid = r.xid,
            pid = r.pid,
            process = r.comm.as_deref().unwrap_or(""),
            meaning,
            action = action.as_str(),
            detail = %r.detail,
            "GPU Xid error"
        );
        self.recent.push_back(Seen {
            uuid: uuid.clone(),
            xid: r.xid,
            source: r.source,
            at: r.at_seconds,
            matched: false,
        });
        *self
            .counts
            .entry(uuid.clone())
            .or_default()
            .entry(r.xid)
            .or_default() += 1;
        let record = XidRecord {
            xid: r.xid,
            at_seconds: r.at_seconds,
            pid: r.pid,
            comm: r.comm,
            detail: r.detail,
            source: r.source,
        };
        if super::xid::lookup(r.xid).is_some_and(|i| i.fatal()) {
            self.last_fatal.insert(uuid.clone(), record.clone());
        }
        self.last.insert(uuid.clone(), record);
        XidReportFate::Counted { uuid }
    }

    /// Writes the counts and the latest Xid of every GPU into its sample.
    pub fn apply(&self, gpus: &mut [GpuSample]) {
        for g in gpus {
            g.xid_errors = self.counts.get(&g.uuid).cloned().unwrap_or_default();
            g.last_xid = self.last.get(&g.uuid).cloned();
            g.last_fatal_xid = self.last_fatal.get(&g.uuid).cloned();
        }
    }
}

/// Puts kernel-log lines before NVML events (a line names the process, so
/// the Xid is recorded with it and the event becomes its twin), and marks the
/// NVML events younger than `wait` seconds to hold back for their line when
/// the kernel log is read (`wait_for_lines`).
pub fn order(
    mut batch: Vec<XidReport>,
    now: f64,
    wait_for_lines: bool,
    wait: f64,
) -> Vec<(XidReport, bool)> {
    batch.sort_by_key(|r| r.source != FaultSource::KernelLog);
    let lines: Vec<u32> = batch
        .iter()
        .filter(|r| r.source == FaultSource::KernelLog)
        .map(|r| r.xid)
        .collect();
    batch
        .into_iter()
        .map(|r| {
            let young = now - r.at_seconds < wait;
            let line_seen = lines.contains(&r.xid);
            let hold = wait_for_lines && r.source == FaultSource::Nvml && young && !line_seen;
            (r, hold)
        })
        .collect()
}

fn find_gpu<'g>(r: &GpuRef, gpus: &'g [GpuSample]) -> Option<&'g GpuSample> {
    gpus.iter().find(|g| match r {
        GpuRef::Uuid(u) => !g.uuid.is_empty() && g.uuid == *u,
        GpuRef::Pci(a) => PciAddr::parse(&g.pci_bus_id) == Some(*a),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpus() -> Vec<GpuSample> {
        (0..2)
            .map(|i| GpuSample {
                index: i,
                uuid: format!("GPU-{i}"),
                pci_bus_id: format!("00000000:{:02X}:00.0", 0x10 + i),
                up: i == 0,
                ..GpuSample::default()
            })
            .collect()
    }

    fn report(at: f64, gpu: GpuRef, xid: u32, source: FaultSource, pid: Option<u32>) -> XidReport {
        XidReport {
            at_seconds: at,
            gpu,
            xid,
            source,
            pid,
            comm: pid.map(|_| "python".to_owned()),
            detail: String::new(),
        }
    }

    fn pci(bus: u32) -> GpuRef {
        GpuRef::Pci(PciAddr {
            domain: 0,
            bus,
            device: 0,
        })
    }

    #[test]
    fn both_sources_count_once_and_repeats_count_again() {
        let gpus = gpus();
        let mut l = XidCounts::default();
        let nvml = |at| {
            report(
                at,
                GpuRef::Uuid("GPU-0".into()),
                48,
                FaultSource::Nvml,
                None,
            )
        };
        let line = |at| report(at, pci(0x10), 48, FaultSource::KernelLog, Some(42));
        assert!(matches!(
            l.record(nvml(100.0), &gpus),
            XidReportFate::Counted { .. }
        ));
        assert!(matches!(
            l.record(line(100.5), &gpus),
            XidReportFate::Duplicate { .. }
        ));
        // The same Xid again: counted again, and its twin dropped again.
        assert!(matches!(
            l.record(line(103.0), &gpus),
            XidReportFate::Counted { .. }
        ));
        assert!(matches!(
            l.record(nvml(103.2), &gpus),
            XidReportFate::Duplicate { .. }
        ));
        // Long after: no twin left.
        assert!(matches!(
            l.record(nvml(200.0), &gpus),
            XidReportFate::Counted { .. }
        ));
        let mut out = gpus.clone();
        l.apply(&mut out);
        assert_eq!(out[0].xid_errors.get(&48), Some(&3));
        assert!(out[1].xid_errors.is_empty());
        let last = out[0].last_xid.clone().unwrap();
        assert_eq!((last.xid, last.at_seconds), (48, 200.0));
        // A non-fatal Xid after it (45 follows fatal ones) is the latest, not the fatal one.
        l.record(
            report(201.0, pci(0x10), 45, FaultSource::KernelLog, None),
            &gpus,
        );
        l.apply(&mut out);
        assert_eq!(out[0].last_xid.as_ref().unwrap().xid, 45);
        assert_eq!(out[0].last_fatal_xid.as_ref().unwrap().xid, 48);
    }

    #[test]
    fn events_wait_for_their_line_while_the_kernel_log_is_read() {
        let nvml = report(
            10.0,
            GpuRef::Uuid("GPU-0".into()),
            48,
            FaultSource::Nvml,
            None,
        );
        let line = report(10.1, pci(0x10), 48, FaultSource::KernelLog, Some(42));
        // Alone and young: held; old or without a kernel log: counted.
        assert!(order(vec![nvml.clone()], 10.5, true, 1.5)[0].1);
        assert!(!order(vec![nvml.clone()], 12.0, true, 1.5)[0].1);
        assert!(!order(vec![nvml.clone()], 10.5, false, 1.5)[0].1);
        // With its line in the batch: the line goes first, nothing is held.
        let out = order(vec![nvml, line], 10.5, true, 1.5);
        assert_eq!(out[0].0.source, FaultSource::KernelLog);
        assert!(out.iter().all(|(_, hold)| !hold));
    }

    #[test]
    fn a_kernel_line_after_the_event_names_the_process() {
        let gpus = gpus();
        let mut l = XidCounts::default();
        l.record(
            report(
                1.0,
                GpuRef::Uuid("GPU-1".into()),
                79,
                FaultSource::Nvml,
                None,
            ),
            &gpus,
        );
        l.record(
            report(1.2, pci(0x11), 79, FaultSource::KernelLog, Some(7)),
            &gpus,
        );
        let mut out = gpus.clone();
        l.apply(&mut out);
        let last = out[1].last_xid.clone().unwrap();
        assert_eq!((last.pid, last.comm.as_deref()), (Some(7), Some("python")));
        assert_eq!(out[1].xid_errors.get(&79), Some(&1));
    }

    #[test]
    fn two_lines_from_one_source_are_two_xids_and_unknown_gpus_are_dropped() {
        let gpus = gpus();
        let mut l = XidCounts::default();
        l.record(
            report(1.0, pci(0x10), 13, FaultSource::KernelLog, Some(5)),
            &gpus,
        );
        l.record(
            report(1.0, pci(0x10), 13, FaultSource::KernelLog, Some(5)),
            &gpus,
        );
        assert_eq!(
            l.record(
                report(1.0, pci(0x99), 13, FaultSource::KernelLog, None),
                &gpus
            ),
            XidReportFate::NoGpu
        );
        let mut out = gpus.clone();
        l.apply(&mut out);
        assert_eq!(out[0].xid_errors.get(&13), Some(&2));
    }
}
