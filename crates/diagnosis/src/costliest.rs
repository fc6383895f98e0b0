//! The host's costliest lines (docs/goodput.md#by-place): the places its
//! GPUs lost time to, summed over the GPUs, most first, each with the fix
//! its kind carries; and the lost time no place is tied to, by why.

use serde::{Deserialize, Serialize};

use crate::types::ledger::{Place, Unplaced};

use crate::types::status::GpuStatus;
use crate::types::time_state::TimeState;

/// One place over the host's GPUs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostPlace {
    #[serde(flatten)]
    pub place: Place,
    pub state: TimeState,
    pub kind: String,
    /// GPU-seconds lost to it since the daemon started (a MIG slice's
    /// weighted by its share), over all GPUs.
    pub seconds: f64,
    /// GPUs that lost time to it.
    pub gpus: u32,
    /// The longest of its GPUs' latest median call times.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_seconds: Option<f64>,
    /// What to do about a place of this kind.
    pub fix: String,
}

/// Lost time tied to no place, over the host's GPUs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostUnplaced {
    pub reason: Unplaced,
    pub seconds: f64,
}

/// The places of `gpus`, most GPU-seconds first.
pub fn places(gpus: &[GpuStatus]) -> Vec<HostPlace> {
    let mut out: Vec<HostPlace> = Vec::new();
    for g in gpus {
        for p in &g.lost_by_place {
            let found = out
                .iter_mut()
                .find(|h| h.place == p.place && h.state == p.state && h.kind == p.kind);
            match found {
                Some(h) => {
                    h.seconds += p.seconds;
                    h.gpus += 1;
                    h.call_seconds = match (h.call_seconds, p.call_seconds) {
                        (Some(a), Some(b)) => Some(a.max(b)),
                        (a, b) => a.or(b),
                    };
                }
                None => out.push(HostPlace {
                    place: p.place.clone(),
                    state: p.state,
                    kind: p.kind.clone(),
                    seconds: p.seconds,
                    gpus: 1,
                    call_seconds: p.call_seconds,
                    fix: fix(&p.kind).to_owned(),
                }),
            }
        }
    }
    out.sort_by(|a, b| b.seconds.total_cmp(&a.seconds));
    out
}

/// The lost time of `gpus` no place is tied to, by reason, most first.
pub fn unplaced(gpus: &[GpuStatus]) -> Vec<HostUnplaced> {
    let mut out: Vec<HostUnplaced> = Unplaced::ALL
        .into_iter()
        .map(|reason| HostUnplaced {
            reason,
            seconds: gpus
                .iter()
                .flat_map(|g| &g.lost_unplaced)
                .filter(|u| u.reason == reason)
                .map(|u| u.seconds)
                .sum(),
        })
        .filter(|u| u.seconds > 0.0)
        .collect();
    out.sort_by(|a, b| b.seconds.total_cmp(&a.seconds));
    out
}

/// What to do about a place that lost time to `kind` (a stall kind or a
/// phase), in one sentence.
pub fn fix(kind: &str) -> &'static str {
    match kind {
        "input_starved" | "input_bound" => {
            "make this line cheaper or take it off the training loop's path: more DataLoader \
             workers, prefetching, or its work done once ahead of training"
        }
        "single_thread_bound" => {
            "this line holds one core or the GIL: spread it over worker processes, or call \
             vectorised or native code"
        }
        "cpu_saturated" => {
            "the host's CPUs are all busy: make this line cheaper or run fewer workers per GPU"
        }
        "io_bound" => {
            "this line waits on storage: read from a local copy, in larger reads, or from \
             more workers"
        }
        "busy_no_progress" | "idle_no_progress" | "spinning" => {
            "the job stands still here: look for a deadlock, a collective a rank never \
             joined, or a wait that never ends, then restart from the last checkpoint"
        }
        "compiling" => {
            "compilation is redone: keep shapes static and the compiler's cache between runs"
        }
        "checkpointing" => {
            "saving blocks training: save asynchronously, less often, or to faster storage"
        }
        _ => "see the kind's hint on the GPU's finding",
    }
}
