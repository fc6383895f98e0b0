//! The Xid catalogue: what the driver's error codes mean and what to do about
//! each, summarised from NVIDIA's published Xid catalogue (docs.nvidia.com,
//! "Xid Errors" and its catalogue for Ampere and newer). `docs/faults.md`
//! holds the same table; a test keeps the two together.
//!
//! The catalogued codes plus `other` are the closed value set of the `xid`
//! label of `stallwatch_gpu_xid_errors_total`.

use serde::{Deserialize, Serialize};

/// What an operator should do after an Xid, from least to most drastic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum XidAction {
    /// Nothing now: informational, or a trend to watch.
    None,
    /// The job's work on the GPU is lost: restart the job (and, for errors of
    /// the job's own kernels, check its code).
    RestartJob,
    /// The GPU needs a reset (nvidia-smi -r, or a driver reload) before it
    /// runs work again.
    ResetGpu,
    /// Take the node out of service: it needs a reboot or a hardware check.
    DrainNode,
}

impl XidAction {
    pub fn as_str(self) -> &'static str {
        match self {
            XidAction::None => "none",
            XidAction::RestartJob => "restart_job",
            XidAction::ResetGpu => "reset_gpu",
            XidAction::DrainNode => "drain_node",
        }
    }
}

/// One catalogued Xid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XidInfo {
    pub xid: u32,
    /// What happened, in a few words.
    pub meaning: &'static str,
    pub action: XidAction,
    /// Most often caused by the job's own code (a bad address, an illegal
    /// instruction) rather than the hardware or the driver.
    pub job_code: bool,
}

impl XidInfo {
    /// The job's work on this GPU is lost (or the GPU is unusable): the
    /// fault explains a stall of the job that held it.
    pub fn fatal(&self) -> bool {
        self.action >= XidAction::RestartJob
    }
}

const fn x(xid: u32, meaning: &'static str, action: XidAction, job_code: bool) -> XidInfo {
    XidInfo {
        xid,
        meaning,
        action,
        job_code,
    }
}

use XidAction::{DrainNode, None as Watch, ResetGpu, RestartJob};

/// The catalogue, in Xid order.
pub const CATALOGUE: &[XidInfo] = &[
    x(
        8,
        "GPU stopped processing (channel idle timeout)",
        RestartJob,
        false,
    ),
    x(
        13,
        "graphics engine exception: most often an out-of-range access or illegal instruction in the job's kernel",
        RestartJob,
        true,
    ),
    x(
        31,
        "GPU memory page fault: the job's kernel touched an invalid address",
        RestartJob,
        true,
    ),
    x(
        32,
        "invalid or corrupted push buffer stream",
        RestartJob,
        false,
    ),
    x(38, "driver firmware error", ResetGpu, false),
    x(
        43,
        "GPU stopped processing: the channel was stopped after a fault in the job",
        RestartJob,
        true,
    ),
    x(
        45,
        "preemptive cleanup: work torn down after an earlier error or the process's exit",
        Watch,
        false,
    ),
    x(
        48,
        "double-bit (uncorrectable) ECC memory error",
        ResetGpu,
        false,
    ),
    x(61, "internal micro-controller breakpoint", ResetGpu, false),
    x(62, "internal micro-controller halt", ResetGpu, false),
    x(
        63,
        "ECC page retirement or row remapping recorded (active after the next GPU reset)",
        Watch,
        false,
    ),
    x(
        64,
        "ECC page retirement or row remapping failed to record",
        DrainNode,
        false,
    ),
    x(68, "video processor exception", RestartJob, false),
    x(69, "graphics engine class error", RestartJob, false),
    x(74, "NVLink error", ResetGpu, false),
    x(79, "GPU has fallen off the bus", DrainNode, false),
    x(92, "high single-bit ECC error rate", Watch, false),
    x(
        94,
        "contained ECC error: the affected job's memory was hit, other work goes on",
        RestartJob,
        false,
    ),
    x(
        95,
        "uncontained ECC error: every job on the GPU is affected",
        ResetGpu,
        false,
    ),
    x(109, "context switch timeout", RestartJob, false),
    x(
        119,
        "GSP firmware did not answer in time (RPC timeout)",
        ResetGpu,
        false,
    ),
    x(120, "GSP firmware error", ResetGpu, false),
    x(140, "unrecovered ECC error in GPU memory", ResetGpu, false),
    x(
        154,
        "the driver's recommended recovery action changed",
        Watch,
        false,
    ),
];

/// The catalogue entry for `xid`, if it has one.
pub fn lookup(xid: u32) -> Option<&'static XidInfo> {
    CATALOGUE
        .binary_search_by_key(&xid, |i| i.xid)
        .ok()
        .map(|i| &CATALOGUE[i])
}

/// The `xid` label value: the number for a catalogued Xid, else `other`.
pub fn label(xid: u32) -> String {
    match lookup(xid) {
        Some(info) => info.xid.to_string(),
        None => "other".to_owned(),
    }
}

/// Meaning and action for any Xid, uncatalogued ones included.
pub fn describe(xid: u32) -> (&'static str, XidAction) {
    match lookup(xid) {
        Some(info) => (info.meaning, info.action),
        None => (
            "an Xid not in stallwatch's catalogue: see NVIDIA's Xid catalogue",
            XidAction::None,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalogue_is_sorted_and_unique() {
        assert!(CATALOGUE.windows(2).all(|w| w[0].xid < w[1].xid));
    }

    #[test]
    fn lookups_and_labels() {
        assert_eq!(lookup(79).unwrap().action, XidAction::DrainNode);
        assert!(lookup(79).unwrap().fatal());
        assert!(!lookup(63).unwrap().fatal());
        assert!(lookup(31).unwrap().job_code);
        assert_eq!(label(48), "48");
        assert_eq!(label(1), "other");
        assert_eq!(label(u32::MAX), "other");
        assert_eq!(describe(5000).1, XidAction::None);
    }

    #[test]
    fn the_fatal_xid_alert_names_the_fatal_xids() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../deploy/prometheus/stallwatch.rules.yml"
        );
        let rules = std::fs::read_to_string(path).expect("stallwatch.rules.yml");
        let want: Vec<String> = CATALOGUE
            .iter()
            .filter(|i| i.fatal())
            .map(|i| i.xid.to_string())
            .collect();
        let matcher = format!("xid=~\"{}\"", want.join("|"));
        let alert = rules
            .split("- alert: StallwatchGPUFatalXid")
            .nth(1)
            .and_then(|r| r.split("- alert:").next())
            .expect("the StallwatchGPUFatalXid alert");
        assert_eq!(alert.matches(&matcher).count(), 2, "{matcher} in\n{alert}");
    }

    #[test]
    fn docs_table_matches_the_catalogue() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/faults.md");
        let doc = std::fs::read_to_string(path).expect("docs/faults.md");
        let rows: Vec<(u32, String)> = doc
            .lines()
            .filter_map(|l| {
                let cells: Vec<&str> = l.split('|').map(str::trim).collect();
                let xid = cells.get(1)?.parse().ok()?;
                Some((xid, cells.get(3)?.trim_matches('`').to_owned()))
            })
            .collect();
        let want: Vec<(u32, String)> = CATALOGUE
            .iter()
            .map(|i| (i.xid, i.action.as_str().to_owned()))
            .collect();
        assert_eq!(
            rows, want,
            "docs/faults.md's Xid table (xid | meaning | action)"
        );
    }
}
