//! Wall-clock time as the samples carry it: seconds since the epoch.

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in seconds since the epoch.
pub fn unix_now() -> f64 {
    unix_seconds(SystemTime::now())
}

/// `t` in seconds since the epoch (0 for a time before it).
pub fn unix_seconds(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}
