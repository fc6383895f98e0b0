//! Time per call, from a burst's reads: runs of consecutive reads in which
//! one thread stood inside the same call. A call of duration D is seen in
//! about D/T reads at a sampling period T, so a run estimates its call
//! within about one period; the reads' own times are used, not the rate
//! asked for. A new call is told from the last only where the call's frame
//! or a frame above it changes (its function, or the line of any caller):
//! back-to-back calls of one function from the same line merge.

use crate::round::round;
pub use crate::stack_text::{describe, seconds_text};
use crate::types::reads::CodeFrame;
pub use crate::types::stack_report::CallTime;

/// Calls estimated under this many sampling periods get no figure: only
/// that they are shorter than that.
pub const SHORT_PERIODS: f64 = 3.0;

/// Where each read of one thread stood: the read's index in the burst and
/// the slice of its frames from the call's frame up to the thread's root
/// (absent when it was not in such a call).
pub type Stood<'a> = (usize, Option<&'a [CodeFrame]>);

/// Two reads are inside the same call when the call's frame is the same
/// function and every frame above it is the same, line included.
fn same_call(a: &[CodeFrame], b: &[CodeFrame]) -> bool {
    a.len() == b.len()
        && match (a.split_first(), b.split_first()) {
            (Some((x, above_a)), Some((y, above_b))) => {
                x.function == y.function && x.file == y.file && above_a == above_b
            }
            _ => true,
        }
}

/// Durations of one thread's calls: seen whole (seconds, estimated from
/// the midpoints between the reads around each end), and the spans of the
/// calls cut by the burst's start or end or by the thread missing from a
/// read (they lasted at least that long). `times` holds each read's time;
/// `stood` the thread's reads in order, at most one per read.
pub fn runs(times: &[f64], stood: &[Stood]) -> (Vec<f64>, Vec<f64>) {
    let mut whole = Vec::new();
    let mut cut = Vec::new();
    // The call being followed: its frames, first and last read, and
    // whether the thread was seen outside it in the read before.
    let mut run: Option<(&[CodeFrame], usize, usize, bool)> = None;
    let mut previous: Option<usize> = None;
    let time = |i: usize| times.get(i).copied();
    let mut close = |run: (&[CodeFrame], usize, usize, bool), next_seen: bool| {
        let (_, first, last, started_seen) = run;
        let (Some(start), Some(end)) = (time(first), time(last)) else {
            return;
        };
        let around = (started_seen && next_seen)
            .then(|| Some((time(first - 1)?, time(last + 1)?)))
            .flatten();
        match around {
            // From the midpoint before its first read to the one after its last.
            Some((before, after)) => whole.push((end + after) / 2.0 - (before + start) / 2.0),
            None => cut.push(end - start),
        }
    };
    for &(i, call) in stood {
        let adjacent = previous.is_some_and(|p| p + 1 == i);
        match (run.take(), call) {
            (Some(r), Some(c)) if adjacent && same_call(r.0, c) => run = Some((r.0, r.1, i, r.3)),
            (Some(r), c) => {
                close(r, adjacent);
                run = c.map(|c| (c, i, i, adjacent));
            }
            (None, c) => run = c.map(|c| (c, i, i, adjacent)),
        }
        previous = Some(i);
    }
    if let Some(r) = run {
        close(r, false);
    }
    (whole, cut)
}

/// The `p` quantile (0 to 1) of sorted values, interpolated between the
/// two nearest ranks; `None` for no values.
pub fn quantile(sorted: &[f64], p: f64) -> Option<f64> {
    let last = sorted.len().checked_sub(1)?;
    let at = p.clamp(0.0, 1.0) * last as f64;
    let (lo, hi) = (at.floor() as usize, at.ceil() as usize);
    Some(sorted[lo] + (sorted[hi] - sorted[lo]) * (at - lo as f64))
}

/// The reads' sampling period: the median spacing of their times.
pub fn period(times: &[f64]) -> Option<f64> {
    let mut gaps: Vec<f64> = times.windows(2).map(|w| w[1] - w[0]).collect();
    gaps.sort_by(f64::total_cmp);
    quantile(&gaps, 0.5).filter(|p| *p > 0.0)
}

/// The call time from whole and cut durations; `None` when nothing was
/// seen of the call.
pub fn estimate(mut whole: Vec<f64>, cut: &[f64], period: f64) -> Option<CallTime> {
    if whole.is_empty() && cut.is_empty() {
        return None;
    }
    whole.sort_by(f64::total_cmp);
    let median = quantile(&whole, 0.5);
    let short = SHORT_PERIODS * period;
    let timed = median.filter(|m| *m >= short);
    let longest_cut = cut.iter().copied().reduce(f64::max);
    Some(CallTime {
        calls: whole.len() as u32,
        median_seconds: timed.map(round),
        p90_seconds: timed.and(quantile(&whole, 0.9)).map(round),
        under_seconds: (median.is_some() && timed.is_none()).then(|| round(short)),
        // Said only where it adds to what the whole calls say.
        at_least_seconds: longest_cut
            .filter(|c| whole.is_empty() || *c > whole[whole.len() - 1])
            .map(round),
        period_seconds: round(period),
        batch_of_items: false,
        merged_by_tf_data: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(function: &str, line: u32) -> CodeFrame {
        CodeFrame {
            function: function.into(),
            file: "job.py".into(),
            line,
            library: false,
        }
    }

    #[test]
    fn quantiles_interpolate_between_ranks() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(quantile(&v, 0.5), Some(2.5));
        assert_eq!(quantile(&v, 0.0), Some(1.0));
        assert_eq!(quantile(&v, 1.0), Some(4.0));
        assert!((quantile(&v, 0.9).unwrap() - 3.7).abs() < 1e-9);
        assert_eq!(quantile(&[7.0], 0.9), Some(7.0));
        assert_eq!(quantile(&[], 0.5), None);
    }

    #[test]
    fn the_period_is_the_median_spacing_of_the_reads() {
        // One late read does not move it.
        assert_eq!(period(&[0.0, 0.05, 0.10, 0.30, 0.35, 0.40]), Some(0.05));
        assert_eq!(period(&[1.0]), None);
    }

    /// A thread inside `call` in the reads marked 'c', elsewhere in '.',
    /// and missing from the others.
    fn stood<'a>(pattern: &str, call: &'a [CodeFrame]) -> Vec<Stood<'a>> {
        pattern
            .chars()
            .enumerate()
            .filter_map(|(i, c)| match c {
                'c' => Some((i, Some(call))),
                '.' => Some((i, None)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_run_inside_one_call_is_timed_from_the_midpoints_around_it() {
        let call = [f("spin", 10), f("loader", 33)];
        let times: Vec<f64> = (0..12).map(|i| i as f64 * 0.1).collect();
        // Two whole calls of 3 and 4 reads; one cut by the end.
        let (whole, cut) = runs(&times, &stood("..ccc..cccc.cc", &call));
        let whole: Vec<f64> = whole
            .iter()
            .map(|w| (w * 1000.0).round() / 1000.0)
            .collect();
        assert_eq!(whole, vec![0.3, 0.4]);
        // The last run's reads 12 and 13 have no time: nothing is said.
        assert!(cut.is_empty(), "{cut:?}");
        let (whole, cut) = runs(&times, &stood("ccc.....cccc", &call));
        assert!(whole.is_empty());
        let cut: Vec<f64> = cut.iter().map(|c| (c * 1000.0).round() / 1000.0).collect();
        assert_eq!(cut, vec![0.2, 0.3]);
    }

    #[test]
    fn runs_split_where_the_call_or_a_callers_line_changes_and_where_the_thread_is_missing() {
        let times: Vec<f64> = (0..10).map(|i| i as f64).collect();
        let a = [f("spin", 10), f("loader", 33)];
        // The call's own line moves inside it: the same call.
        let a2 = [f("spin", 12), f("loader", 33)];
        let from_other_line = [f("spin", 10), f("loader", 34)];
        let other = [f("fetch", 5), f("loader", 33)];
        let stood: Vec<Stood> = vec![
            (0, None),
            (1, Some(&a)),
            (2, Some(&a2)),
            (3, Some(&from_other_line)),
            (4, Some(&other)),
            (5, None),
            (6, Some(&a)),
            // Missing from read 7: the call is not seen to end.
            (8, None),
        ];
        let (whole, cut) = runs(&times, &stood);
        assert_eq!(whole, vec![2.0, 1.0, 1.0]);
        assert_eq!(cut, vec![0.0]);
    }

    #[test]
    fn short_calls_get_no_figure_and_long_ones_their_median() {
        let t = estimate(vec![0.05, 0.05, 0.1], &[], 0.05).unwrap();
        assert_eq!((t.median_seconds, t.under_seconds), (None, Some(0.15)));
        assert_eq!(describe(&t, "a call"), "under 150 ms a call");
        let t = estimate(vec![0.4, 0.45, 0.42, 0.5, 0.41], &[0.2], 0.05).unwrap();
        assert_eq!(t.median_seconds, Some(0.42));
        assert_eq!(t.at_least_seconds, None);
        assert_eq!(
            describe(&t, "a call"),
            "about 420 ms a call (median of 5 calls; p90 480 ms)"
        );
        let t = estimate(vec![], &[9.5, 1.0], 0.05).unwrap();
        assert_eq!((t.calls, t.at_least_seconds), (0, Some(9.5)));
        assert!(describe(&t, "a call").starts_with("at least 9.5 s a call"));
        assert_eq!(estimate(vec![], &[], 0.05), None);
    }

    #[test]
    fn calls_tf_data_merged_say_so_whatever_the_figure() {
        let mut t = estimate(vec![], &[0.45], 0.05).unwrap();
        t.merged_by_tf_data = true;
        assert_eq!(
            describe(&t, "a call"),
            "at least 450 ms a call (none seen to begin and end; tf.data's map calls its Python function one call after another, and those merge: the figure spans several calls)"
        );
        let mut t = estimate(vec![0.4, 0.4, 0.4], &[], 0.05).unwrap();
        t.merged_by_tf_data = true;
        assert!(describe(&t, "a call").ends_with("the figure spans several calls)"));
    }
}
