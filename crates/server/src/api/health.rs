//! `/healthz`: healthy while samples are fresh (the last one finished within
//! three intervals). A host without NVML is healthy; the body says so.

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::sampling::sampler::Latest;

#[derive(Debug, Serialize, PartialEq)]
pub struct Health {
    pub status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_sample_age_seconds: Option<f64>,
    /// `up`, `unavailable` (no library or driver) or `stale` (a call hangs).
    pub nvml: &'static str,
    pub gpus: usize,
    pub jobs: usize,
}

impl Health {
    pub fn is_ok(&self) -> bool {
        self.status == "ok"
    }
}

pub fn check(latest: Option<&Latest>, interval: Duration, now: Instant) -> Health {
    let Some(latest) = latest else {
        return Health {
            status: "unavailable",
            reason: Some("no sample taken yet".to_owned()),
            last_sample_age_seconds: None,
            nvml: "unavailable",
            gpus: 0,
            jobs: 0,
        };
    };
    let s = &latest.snapshot;
    let age = now.saturating_duration_since(latest.finished);
    let fresh = age <= interval * 3;
    Health {
        status: if fresh { "ok" } else { "unavailable" },
        reason: (!fresh).then(|| {
            format!(
                "last sample finished {:.1}s ago (more than 3 sampling intervals of {:?})",
                age.as_secs_f64(),
                interval
            )
        }),
        last_sample_age_seconds: Some(age.as_secs_f64()),
        nvml: crate::api::status::nvml_state(s.nvml_up, s.any_gpu_stale()),
        gpus: s.gpus.len(),
        jobs: s.jobs.len(),
    }
}
