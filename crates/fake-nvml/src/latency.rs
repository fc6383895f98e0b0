//! How long real drivers take to answer some calls, modelled as sleeps.
//!
//! Real NVML calls block. The figures:
//!
//! | call | sleep | source |
//! |---|---|---|
//! | `nvmlDeviceGetPcieThroughput` | 20 ms | NVML's API reference: the call "is querying a byte counter over a 20ms interval" (a public monitor measured 21 ms a direction on driver 610) |
//! | `nvmlDeviceGetPowerUsage` | 3.3 ms | a public monitor's measurement on driver 610 |
//! | `nvmlDeviceGetHandleByIndex`, `_v2` | 6 ms | the same measurement |
//! | `nvmlInit`, `_v2`, `nvmlInitWithFlags` | 4 ms | the same measurement |
//! | `nvmlDeviceGetFieldValues` asking for field 197 or 198 (PCIe byte counters) | 0.3 ms | the same measurement (0.2-0.4 ms) |
//!
//! Every other call, and `nvmlDeviceGetFieldValues` without those fields,
//! takes a few µs on a real driver and does not sleep here.
//!
//! A call sleeps without holding the library's state, so calls on different
//! GPUs from different threads overlap as on a real driver. The sleeps are on
//! unless the scenario's top level says `"latencies": false` or the
//! environment variable [`ENV_VAR`] says so; the variable, when set, wins.

use std::time::Duration;

use crate::scenario::{Scenario, call_family};

/// `0` (also `false`, `off`, `no`) turns the sleeps off, any other non-empty
/// value on, whatever the scenario says. Unset or empty: the scenario decides.
pub const ENV_VAR: &str = "STALLWATCH_FAKE_NVML_LATENCIES";

pub const PCIE_THROUGHPUT: Duration = Duration::from_millis(20);
pub const POWER_USAGE: Duration = Duration::from_micros(3_300);
pub const HANDLE_BY_INDEX: Duration = Duration::from_millis(6);
pub const INIT: Duration = Duration::from_millis(4);
/// `nvmlDeviceGetFieldValues` when it is asked for a PCIe byte counter.
pub const PCIE_COUNTER_FIELDS: Duration = Duration::from_micros(300);

/// The modelled latency of the call `call` (an exported symbol name), when it has one.
pub fn of(call: &str) -> Option<Duration> {
    match call_family(call) {
        "nvmlDeviceGetPcieThroughput" => Some(PCIE_THROUGHPUT),
        "nvmlDeviceGetPowerUsage" => Some(POWER_USAGE),
        "nvmlDeviceGetHandleByIndex" => Some(HANDLE_BY_INDEX),
        "nvmlInit" => Some(INIT),
        _ => None,
    }
}

/// Whether the sleeps are on: the environment variable when set, else the scenario.
pub fn enabled(scenario: &Scenario) -> bool {
    match std::env::var(ENV_VAR) {
        Ok(value) if !value.trim().is_empty() => switch(&value),
        _ => scenario.latencies,
    }
}

/// A set value of the environment variable: on unless it says off.
fn switch(value: &str) -> bool {
    let value = value.trim().to_ascii_lowercase();
    !matches!(value.as_str(), "0" | "false" | "off" | "no")
}

/// `latency`, when the sleeps are on.
pub fn applies(scenario: &Scenario, latency: Option<Duration>) -> Option<Duration> {
    latency.filter(|d| !d.is_zero() && enabled(scenario))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_and_their_latencies() {
        assert_eq!(
            of("nvmlDeviceGetPcieThroughput"),
            Some(Duration::from_millis(20))
        );
        assert_eq!(of("nvmlDeviceGetHandleByIndex_v2"), Some(HANDLE_BY_INDEX));
        assert_eq!(of("nvmlDeviceGetHandleByIndex"), Some(HANDLE_BY_INDEX));
        assert_eq!(of("nvmlInitWithFlags"), Some(INIT));
        assert_eq!(of("nvmlInit_v2"), Some(INIT));
        assert_eq!(of("nvmlDeviceGetPowerUsage"), Some(POWER_USAGE));
        assert_eq!(of("nvmlDeviceGetHandleByUUID"), None);
        assert_eq!(of("nvmlDeviceGetFieldValues"), None);
        assert_eq!(of("nvmlDeviceGetUtilizationRates"), None);
    }

    #[test]
    fn switch_values() {
        for off in ["0", "false", "OFF", " no "] {
            assert!(!switch(off), "{off:?}");
        }
        for on in ["1", "true", "on", "yes"] {
            assert!(switch(on), "{on:?}");
        }
    }
}
