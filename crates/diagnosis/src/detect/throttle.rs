//! Clocks held down by power, thermal or hardware limits while busy.

use super::ctx::{Ctx, Finding};
use crate::Kind;
use crate::hysteresis::Condition;
use crate::round::{round, round_opt};
use crate::types::evidence::Evidence;

/// sw_power_cap, hw_slowdown, sw_thermal, hw_thermal, hw_power_brake.
pub const THROTTLE_MASK: u64 = 0x4 | 0x8 | 0x20 | 0x40 | 0x80;

const REASONS: [(u64, &str); 5] = [
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
];

pub fn throttled(ctx: &Ctx) -> Finding {
    let c = &ctx.config.throttled;
    let w = ctx.window(Kind::Throttled);
    let busy = |p: &crate::window::Point| p.utilization.is_some_and(|u| u >= c.min_utilization);
    let busy_share = w.share(|p| Some(busy(p))).unwrap_or(0.0);
    let share = w.share(|p| busy(p).then_some(p.throttled));
    let enter = w.covered() && busy_share >= 0.5 && share.is_some_and(|s| s >= c.min_share);
    let exit = !ctx.history.latest().is_some_and(|p| p.throttled);
    ctx.finding(Condition { enter, exit }, || Evidence {
        window_seconds: Some(round(w.seconds())),
        throttled_share: round_opt(share),
        busy_share: Some(round(busy_share)),
        clock_event_reasons: REASONS
            .iter()
            .filter(|(bit, _)| ctx.gpu.clock_events & bit != 0)
            .map(|(_, name)| (*name).to_owned())
            .collect(),
        temperature_celsius: ctx.gpu.temperature_celsius,
        power_watts: ctx.gpu.power_watts,
        power_limit_watts: ctx.gpu.power_limit_watts,
        ..Evidence::default()
    })
}

/// The hint of `throttled`: what to tell the user, in plain words.
pub fn throttled_hint(evidence: &Evidence) -> String {
    let why = if evidence.clock_event_reasons.is_empty() {
        "power or thermal limits".to_owned()
    } else {
        evidence.clock_event_reasons.join(", ")
    };
    format!(
        "The GPU is busy but its clocks are held down ({why}). Check cooling and airflow, \
         the power limit (nvidia-smi -q -d POWER), and the host's power capping."
    )
}
