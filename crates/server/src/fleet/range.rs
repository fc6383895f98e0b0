//! A range of the fleet commands (`--since`): as people write it, and which
//! recording rules answer it, the 5-minute ones or the hourly ones.

use std::time::Duration;

use serde::Serialize;

/// From this range on, the hourly rules answer; under it, the 5-minute ones.
/// An hourly sample covers the hour before its evaluation, which falls at a
/// fixed minute of each hour, so a range of a few hours read from them can be
/// off by most of an hour at its ends; the 5-minute rules are read at
/// 1-minute steps, which costs a step per minute of the range and series: a
/// week of them would read 10,080 steps of every series.
pub const HOURLY_FROM: Duration = Duration::from_secs(6 * 3600);

/// Which recording rules answer a range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Rules {
    /// The rules evaluated with the others (`...:rate5m`), summed at 1-minute
    /// steps: there minutes after the rules are loaded.
    #[serde(rename = "5m")]
    FiveMinute,
    /// The hourly rules (`...:increase1h`): a sample an hour, so a week reads
    /// 168 samples a series; the first comes within an hour of loading them.
    #[serde(rename = "1h")]
    Hourly,
}

impl Rules {
    /// The rules for a range: see [`HOURLY_FROM`].
    pub fn for_range(range: Duration) -> Rules {
        if range < HOURLY_FROM {
            Rules::FiveMinute
        } else {
            Rules::Hourly
        }
    }

    /// In words, for the answer's first line.
    pub fn words(self) -> &'static str {
        match self {
            Rules::FiveMinute => "5-minute rules",
            Rules::Hourly => "hourly rules",
        }
    }
}

/// A range as people write it: `7d`, `36h`, `90m`.
pub fn words(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        s if s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s % 3600 == 0 => format!("{}h", s / 3600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

/// GPU-seconds over the last `range_s` of a 5-minute rate (an expression of
/// GPU-seconds per second): its values at 1-minute steps, each weighing the
/// range over the number of steps (one more where the query falls on a whole
/// minute: the subquery takes both ends), as the hourly rules weigh theirs.
pub fn five_minute_sum(expr: &str, range_s: u64) -> String {
    format!(
        "sum_over_time(({expr})[{range_s}s:1m]) * {range_s} / scalar(count_over_time(vector(1)[{range_s}s:1m]))"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_read_as_written() {
        assert_eq!(words(Duration::from_secs(7 * 86_400)), "7d");
        assert_eq!(words(Duration::from_secs(36 * 3600)), "36h");
        assert_eq!(words(Duration::from_secs(90 * 60)), "90m");
        assert_eq!(words(Duration::from_secs(3601)), "3601s");
    }

    #[test]
    fn short_ranges_read_the_five_minute_rules() {
        let rules = |s| Rules::for_range(Duration::from_secs(s));
        assert_eq!(rules(600), Rules::FiveMinute);
        assert_eq!(rules(6 * 3600 - 1), Rules::FiveMinute);
        assert_eq!(rules(6 * 3600), Rules::Hourly);
        assert_eq!(rules(7 * 86_400), Rules::Hourly);
        assert_eq!(serde_json::to_string(&Rules::FiveMinute).unwrap(), "\"5m\"");
        assert_eq!(serde_json::to_string(&Rules::Hourly).unwrap(), "\"1h\"");
    }

    #[test]
    fn a_five_minute_sum_weighs_its_steps() {
        assert_eq!(
            five_minute_sum("sum by (place) (r:rate5m)", 600),
            "sum_over_time((sum by (place) (r:rate5m))[600s:1m]) * 600 / scalar(count_over_time(vector(1)[600s:1m]))"
        );
    }
}
