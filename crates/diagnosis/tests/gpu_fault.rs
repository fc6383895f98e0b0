//! gpu_fault: a fatal Xid, a failed remapping or a recovery action on a GPU
//! with a job (or that just lost it), and the hang it explains.

mod script;

use diagnosis::frame::{Frame, XidFrame};
use diagnosis::{Kind, Phase, Verdict};
use script::*;

fn xid(n: u32, t: f64, action: &str, fatal: bool) -> XidFrame {
    XidFrame {
        xid: n,
        t,
        pid: Some(100),
        comm: Some("python3".into()),
        meaning: format!("meaning of {n}"),
        action: action.into(),
        fatal,
        job_code: n == 31,
        detail: String::new(),
    }
}

/// A job that printed every 10 s until `stop`.
fn logging_until(t: f64, stop: f64) -> diagnosis::frame::JobFrame {
    let mut j = job(100, 1.0, 1.0);
    j.last_output = Some((t.min(stop) / 10.0).floor() * 10.0);
    j
}

#[test]
fn a_fatal_xid_during_a_job_is_a_gpu_fault_with_its_action() {
    let mut run = Run::default();
    run.feed(0, 100, |t| frame(t, 0.99, vec![logging_until(t, 1000.0)]));
    assert!(run.events.is_empty());
    // Xid 48 at t=100; the job goes on holding the GPU.
    run.feed(100, 120, |t| {
        let mut f = frame(t, 0.99, vec![logging_until(t, 1000.0)]);
        f.gpus[0].xid = Some(xid(48, 100.0, "reset_gpu", true));
        f
    });
    assert_eq!(run.starts(Kind::GpuFault), vec![100.0]);
    let e = &run.events[0];
    assert_eq!(e.job.as_ref().unwrap().pid, 100);
    let fault = e.evidence.fault.as_ref().unwrap();
    assert_eq!(fault.action, "reset_gpu");
    assert_eq!(fault.xid.as_ref().unwrap().pid, Some(100));
    assert!(
        e.hint.contains("Xid 48 (meaning of 48, pid 100 (python3))"),
        "{}",
        e.hint
    );
    assert!(e.hint.contains("nvidia-smi -r"), "{}", e.hint);
    assert!(
        !e.hint.contains("  "),
        "one space between words: {}",
        e.hint
    );
    let status = &run.engine.status()[0];
    assert_eq!(status.verdict, Verdict::Stalled);
    // It counts for fault_for (1 h), then ends after exit_for.
    run.feed(120, 100 + 3600 + 62, |t| {
        let mut f = frame(t, 0.99, vec![logging_until(t, 1000.0)]);
        f.gpus[0].xid = Some(xid(48, 100.0, "reset_gpu", true));
        f
    });
    let ends = run.ends(Kind::GpuFault);
    assert_eq!(ends.len(), 1);
    assert!(
        ends[0] >= 3760.0 && ends[0] <= 3762.0,
        "ended at {}",
        ends[0]
    );
}

#[test]
fn a_job_that_hangs_after_a_fault_reads_gpu_fault_and_the_hang_says_why() {
    let mut run = Run::default();
    run.feed(0, 600, |t| frame(t, 0.99, vec![logging_until(t, 600.0)]));
    // At 600: an Xid 13 from the job's kernel, then it spins silently at low power.
    run.feed(600, 1400, |t| {
        let mut f = frame(t, 1.0, vec![logging_until(t, 600.0)]);
        f.gpus[0].power_watts = Some(150.0);
        f.gpus[0].xid = Some(xid(13, 600.0, "restart_job", true));
        f
    });
    assert_eq!(run.starts(Kind::GpuFault), vec![600.0]);
    let hang: Vec<_> = run
        .events
        .iter()
        .filter(|e| e.kind == Kind::BusyNoProgress && e.phase == Phase::Start)
        .collect();
    assert_eq!(hang.len(), 1, "{:?}", run.kinds());
    assert!(
        hang[0].hint.starts_with("This GPU faulted (Xid 13"),
        "{}",
        hang[0].hint
    );
    assert_eq!(
        hang[0]
            .evidence
            .fault
            .as_ref()
            .unwrap()
            .xid
            .as_ref()
            .unwrap()
            .xid,
        13
    );
}

#[test]
fn a_lost_gpu_that_just_lost_its_job_is_a_gpu_fault() {
    let mut run = Run::default();
    run.feed(0, 100, |t| frame(t, 0.99, vec![logging_until(t, 1000.0)]));
    // Xid 79: the GPU falls off the bus; its process list and the job's GPU go.
    run.feed(100, 110, |t| {
        let mut f = frame(t, 0.0, vec![]);
        f.gpus[0].fresh = false;
        f.gpus[0].processes.clear();
        f.gpus[0].xid = Some(xid(79, 100.0, "drain_node", true));
        f
    });
    assert_eq!(run.starts(Kind::GpuFault), vec![100.0]);
    let e = &run.events[0];
    assert_eq!(e.job.as_ref().map(|j| j.pid), Some(100), "the job it lost");
    assert_eq!(e.evidence.fault.as_ref().unwrap().action, "drain_node");
    assert!(e.hint.contains("Drain the node"), "{}", e.hint);
    assert!(
        !e.hint.contains("  "),
        "one space between words: {}",
        e.hint
    );
    assert_eq!(run.engine.status()[0].verdict, Verdict::Unknown);
}

#[test]
fn faults_without_a_job_or_that_are_not_fatal_are_not_gpu_faults() {
    let mut run = Run::default();
    // No job ever: an Xid 48 is counted (metrics) but is no finding.
    run.feed(0, 50, |t| {
        let mut f = Frame {
            t,
            gpus: vec![gpu(0.0)],
            jobs: vec![],
            host: host(),
        };
        f.gpus[0].xid = Some(xid(48, 10.0, "reset_gpu", true));
        f
    });
    // A job and a non-fatal Xid (63: a remapping recorded).
    run.feed(50, 100, |t| {
        let mut f = frame(t, 0.99, vec![logging_until(t, 1000.0)]);
        f.gpus[0].xid = Some(xid(63, 60.0, "none", false));
        f
    });
    assert!(run.starts(Kind::GpuFault).is_empty(), "{:?}", run.events);
    // A failed remapping and a recovery action on a GPU with a job are.
    run.feed(100, 110, |t| {
        let mut f = frame(t, 0.99, vec![logging_until(t, 1000.0)]);
        f.gpus[0].row_remap_failure = true;
        f.gpus[0].recovery_action = Some("gpu_reset".into());
        f
    });
    assert_eq!(run.starts(Kind::GpuFault), vec![100.0]);
    let fault = run.events[0].evidence.fault.clone().unwrap();
    assert!(fault.row_remap_failure && fault.xid.is_none());
    assert_eq!(fault.action, "drain_node");
    assert_eq!(fault.recovery_action.as_deref(), Some("gpu_reset"));
}

#[test]
fn a_job_code_xid_says_to_look_at_the_job() {
    let mut run = Run::default();
    run.feed(0, 20, |t| {
        let mut f = frame(t, 0.99, vec![logging_until(t, 1000.0)]);
        f.gpus[0].xid = Some(xid(31, 5.0, "restart_job", true));
        f
    });
    let e = &run.events[0];
    assert_eq!(e.kind, Kind::GpuFault);
    assert!(e.hint.contains("CUDA_LAUNCH_BLOCKING=1"), "{}", e.hint);
    assert!(
        !e.hint.contains("  "),
        "one space between words: {}",
        e.hint
    );
}
