//! `[faults]`: where Xid errors come from.

use std::path::PathBuf;
use std::time::Duration;

use collector::faults::FaultOptions;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FaultsConfig {
    /// Wait on NVML events for Xid errors (a thread of its own).
    pub nvml_events: bool,
    /// Longest single wait on NVML events (an Xid on any GPU ends it at
    /// once): the thread wakes this often when none comes.
    #[serde(with = "humantime_serde")]
    pub event_wait: Duration,
    /// The kernel log to follow for the driver's Xid lines (they name the
    /// process); empty reads none. `/dev/kmsg` needs CAP_SYSLOG where
    /// kernel.dmesg_restrict=1.
    pub kernel_log: PathBuf,
}

impl Default for FaultsConfig {
    fn default() -> Self {
        FaultsConfig {
            nvml_events: true,
            event_wait: Duration::from_millis(500),
            kernel_log: PathBuf::from("/dev/kmsg"),
        }
    }
}

impl FaultsConfig {
    pub fn validate(&self) -> Result<(), (&'static str, &'static str)> {
        if self.event_wait < Duration::from_millis(10) || self.event_wait > Duration::from_secs(10)
        {
            return Err(("faults.event_wait", "must be between 10ms and 10s"));
        }
        Ok(())
    }

    pub fn options(&self, library: Option<PathBuf>) -> FaultOptions {
        FaultOptions {
            nvml_events: self.nvml_events,
            library,
            kernel_log: (!self.kernel_log.as_os_str().is_empty()).then(|| self.kernel_log.clone()),
            event_wait: self.event_wait,
        }
    }
}
