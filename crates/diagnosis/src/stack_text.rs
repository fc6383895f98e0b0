//! A stack report in words: a place in the code, a call's time, the
//! training loop's wait for a batch, a thread. The hints, the confirmed
//! hang's place and `stallwatch report` say them so.

use crate::types::stack_report::{BatchWait, CallTime, HotSpot, ThreadStacks};

/// `PIL.ImageFile.load <- PIL.Image.open <- decode_image (data.py:42) <-
/// __getitem__ (data.py:57)`, or `resize (data.py:30) <- decode_image
/// (data.py:42)` when the leaf is the user's own code.
pub fn describe_spot(s: &HotSpot) -> String {
    let via = s
        .via
        .as_ref()
        .map(|v| format!(" <- {v}"))
        .unwrap_or_default();
    let callers: String = s
        .callers
        .iter()
        .map(|c| format!(" <- {} ({}:{})", c.function, c.file, c.line))
        .collect();
    match (&s.user_function, &s.user_file) {
        (Some(uf), Some(file)) => format!(
            "{}{via} <- {uf} ({file}:{}){callers}",
            s.function,
            s.user_line.unwrap_or(0)
        ),
        _ => format!("{}{via} ({}:{}){callers}", s.function, s.file, s.line),
    }
}

/// `the training loop (train (train.py:88), tid 12) waits about 1.9 s for
/// each batch (median of 5 calls; p90 2.1 s) on the DataLoader's next
/// batch`.
pub fn describe_batch_wait(b: &BatchWait) -> String {
    format!(
        "the training loop ({} ({}:{}), tid {}) waits {} on {}",
        b.function,
        b.file,
        b.line,
        b.tid,
        describe(&b.per_batch, "for each batch"),
        b.waiting_on
    )
}

pub(crate) fn pct(v: f64) -> String {
    format!("{:.0}%", v * 100.0)
}

/// `, about 420 ms a call (median of 23 calls; p90 510 ms)` where the
/// place's calls were timed, else nothing.
pub fn per_call_text(s: &HotSpot) -> String {
    s.per_call
        .as_ref()
        .map(|t| describe(t, "a call"))
        .filter(|t| !t.is_empty())
        .map(|t| format!(", {t}"))
        .unwrap_or_default()
}

/// `tid 12 (python3, S): waits on queue.get at train_step (train.py:88)`.
pub fn thread_line(t: &ThreadStacks) -> String {
    let doing = if t.running_share >= 0.5 {
        format!("running {}", pct(t.running_share))
    } else {
        "not running".to_owned()
    };
    let place = t
        .top
        .first()
        .map(|s| format!("{}{}", describe_spot(s), per_call_text(s)))
        .unwrap_or_else(|| "no Python frame".to_owned());
    let wait = t
        .waiting_on
        .as_ref()
        .map(|w| format!("waits on {w} at "))
        .unwrap_or_else(|| "at ".to_owned());
    let who = if t.tid == 0 {
        // Named by Python; state from py-spy's idle judgement.
        format!("thread {} (tid unknown, {doing})", t.name)
    } else {
        format!("tid {} ({}, {}, {doing})", t.tid, t.name, t.state)
    };
    format!("{who}: {wait}{place}")
}

/// `0.42` -> `420 ms`, `1.93` -> `1.9 s`.
pub fn seconds_text(s: f64) -> String {
    if s < 1.0 {
        let ms = s * 1000.0;
        let ms = if ms >= 100.0 {
            (ms / 10.0).round() * 10.0
        } else {
            ms.round()
        };
        format!("{ms:.0} ms")
    } else if s < 10.0 {
        format!("{s:.1} s")
    } else {
        format!("{s:.0} s")
    }
}

/// What a figure says of calls tf.data's `py_function` runner made back to
/// back.
const TF_DATA_MERGED: &str = "; tf.data's map calls its Python function one call after another, and those merge: the figure spans several calls";

/// `about 420 ms a call (median of 23 calls; p90 510 ms)`, `under 150 ms
/// a call`, or `at least 9.5 s a call (none seen to begin and end)`; `what` names the unit (`a call`, `for each batch`).
pub fn describe(t: &CallTime, what: &str) -> String {
    let plural = |n: u32| if n == 1 { "" } else { "s" };
    if let Some(m) = t.median_seconds {
        let p90 = t
            .p90_seconds
            .filter(|_| t.calls > 1)
            .map(|p| format!("; p90 {}", seconds_text(p)))
            .unwrap_or_default();
        let batch = if t.batch_of_items {
            "; a batch's items, called one after another by the DataLoader's fetch, count as one call"
        } else if t.merged_by_tf_data {
            TF_DATA_MERGED
        } else {
            ""
        };
        return format!(
            "about {} {what} (median of {} call{}{p90}{batch})",
            seconds_text(m),
            t.calls,
            plural(t.calls)
        );
    }
    if let Some(u) = t.under_seconds {
        return format!("under {} {what}", seconds_text(u));
    }
    match t.at_least_seconds {
        Some(a) => format!(
            "at least {} {what} (none seen to begin and end{})",
            seconds_text(a),
            if t.merged_by_tf_data {
                TF_DATA_MERGED
            } else {
                ""
            }
        ),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(seconds_text(0.4249), "420 ms");
        assert_eq!(seconds_text(0.0634), "63 ms");
        assert_eq!(seconds_text(1.93), "1.9 s");
        assert_eq!(seconds_text(12.4), "12 s");
    }
}
