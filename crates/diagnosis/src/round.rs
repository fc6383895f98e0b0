//! Rounding for what the evidence shows.

/// Rounds to 4 significant decimals so evidence reads cleanly.
pub fn round(v: f64) -> f64 {
    (v * 10_000.0).round() / 10_000.0
}

pub fn round_opt(v: Option<f64>) -> Option<f64> {
    v.map(round)
}
