//! A GPU fault the job's work does not survive: a fatal Xid reported within
//! `gpu_fault.fault_for`, a failed row remapping, or a recovery action the
//! driver asks for, on a GPU that holds a job or lost it a moment ago.

use super::ctx::{Ctx, Finding};
use crate::hint::{fault_action, fault_summary};
use crate::hysteresis::Condition;
use crate::types::evidence::{Evidence, FaultEvidence};

/// Actions from least to most drastic.
const ACTIONS: [&str; 4] = ["none", "restart_job", "reset_gpu", "drain_node"];

fn rank(action: &str) -> usize {
    ACTIONS.iter().position(|a| *a == action).unwrap_or(0)
}

/// What an operator does for the driver's recovery action.
fn for_recovery(action: &str) -> &'static str {
    match action {
        "gpu_reset" | "drain_p2p" => "reset_gpu",
        "node_reboot" | "drain_and_reset" => "drain_node",
        _ => "reset_gpu",
    }
}

/// The fault on the GPU now, if any (whether or not it holds a job).
pub fn current(ctx: &Ctx) -> Option<FaultEvidence> {
    let (fault_for, _) = ctx.config.fault_seconds();
    let xid = ctx
        .gpu
        .xid
        .as_ref()
        .filter(|x| x.fatal && ctx.t - x.t <= fault_for)
        .cloned();
    let recovery = ctx.gpu.recovery_action.clone();
    if xid.is_none() && !ctx.gpu.row_remap_failure && recovery.is_none() {
        return None;
    }
    let mut action = "none";
    for candidate in [
        xid.as_ref().map(|x| x.action.as_str()),
        recovery.as_deref().map(for_recovery),
        ctx.gpu.row_remap_failure.then_some("drain_node"),
    ]
    .into_iter()
    .flatten()
    {
        if rank(candidate) > rank(action) {
            action = ACTIONS[rank(candidate)];
        }
    }
    Some(FaultEvidence {
        xid,
        row_remap_failure: ctx.gpu.row_remap_failure,
        recovery_action: recovery,
        action: action.to_owned(),
    })
}

pub fn gpu_fault(ctx: &Ctx) -> Finding {
    let fault = current(ctx);
    Finding {
        condition: Condition {
            enter: fault.is_some() && ctx.had_job,
            exit: fault.is_none(),
        },
        evidence: Evidence {
            power_watts: ctx.gpu.power_watts,
            fault,
            ..Evidence::default()
        },
    }
}

/// The hint of `gpu_fault`: what to tell the user, in plain words.
pub fn gpu_fault_hint(evidence: &Evidence) -> String {
    match &evidence.fault {
        Some(f) => format!(
            "The GPU faulted: {}. The job's work on this GPU is lost and will not go on by \
             itself. {}",
            fault_summary(f),
            fault_action(f)
        ),
        None => "The GPU faulted; see docs/faults.md.".to_owned(),
    }
}
