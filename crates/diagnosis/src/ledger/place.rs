//! Where lost GPU time went in the job's code: the place a stack report
//! names (the user's own frame, and the installed function it called), or
//! why none is named (docs/goodput.md#by-place).

use crate::types::ledger::{Place, Unplaced};
use crate::types::stack_report::{HotSpot, ReadOutcome, StackReport};

/// Longest place or library name kept, in characters: what a stack shows
/// of a function is bounded, whatever a job names its functions.
pub const NAME_MAX: usize = 120;

/// A place, with how long one call of it took where the read timed it.
#[derive(Debug, Clone, PartialEq)]
pub struct Located {
    pub place: Place,
    pub call_seconds: Option<f64>,
}

/// The place a report names: its most frequent place across the running
/// threads, else where its first thread stands; or why it names none.
pub fn locate(report: &StackReport) -> Result<Located, Unplaced> {
    match report.outcome {
        ReadOutcome::Sampled => {}
        ReadOutcome::NoPermission => return Err(Unplaced::NoPermission),
        ReadOutcome::NotPython => return Err(Unplaced::NotPython),
        ReadOutcome::UnsupportedPython | ReadOutcome::FreeThreaded => {
            return Err(Unplaced::UnsupportedPython);
        }
        ReadOutcome::NoThreads => return Err(Unplaced::NoFrames),
        ReadOutcome::Exited
        | ReadOutcome::Failed
        | ReadOutcome::NotWatched
        | ReadOutcome::OverBudget
        | ReadOutcome::BackedOff => return Err(Unplaced::Failed),
    }
    let spot = report
        .hot
        .first()
        .or_else(|| report.threads.iter().find_map(|t| t.top.first()))
        .ok_or(Unplaced::NoFrames)?;
    Ok(Located {
        place: place_of(spot),
        call_seconds: spot.per_call.as_ref().and_then(|c| c.median_seconds),
    })
}

/// `decode_image (data.py:42)` and `PIL.Image.open` for a leaf in installed
/// code under the user's frame; the leaf itself, no library, when it is the
/// user's own code.
pub fn place_of(spot: &HotSpot) -> Place {
    match (&spot.user_function, &spot.user_file) {
        (Some(function), Some(file)) => Place {
            place: frame(function, file, spot.user_line.unwrap_or(0)),
            library: bounded(spot.via.as_deref().unwrap_or(&spot.function)),
        },
        _ => Place {
            place: frame(&spot.function, &spot.file, spot.line),
            library: String::new(),
        },
    }
}

fn frame(function: &str, file: &str, line: u32) -> String {
    let base = file.rsplit(['/', '\\']).next().unwrap_or(file);
    bounded(&format!("{} ({}:{line})", bounded(function), bounded(base)))
}

/// At most [`NAME_MAX`] characters, control characters dropped.
fn bounded(s: &str) -> String {
    s.chars()
        .filter(|c| !c.is_control())
        .take(NAME_MAX)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stack_report::unavailable;
    use crate::types::stack_report::CallTime;
    use crate::types::stack_report::Focus;

    fn spot(user: Option<(&str, &str, u32)>, leaf: &str, via: Option<&str>) -> HotSpot {
        HotSpot {
            function: leaf.to_owned(),
            file: "/usr/lib/python3/site-packages/PIL/ImageFile.py".to_owned(),
            line: 300,
            via: via.map(str::to_owned),
            user_function: user.map(|u| u.0.to_owned()),
            user_file: user.map(|u| u.1.to_owned()),
            user_line: user.map(|u| u.2),
            callers: Vec::new(),
            samples: 10,
            share: 0.8,
            per_call: Some(CallTime {
                calls: 12,
                median_seconds: Some(0.42),
                p90_seconds: None,
                under_seconds: None,
                at_least_seconds: None,
                period_seconds: 0.01,
                batch_of_items: false,
                merged_by_tf_data: false,
            }),
        }
    }

    #[test]
    fn the_users_frame_and_the_library_it_called() {
        let s = spot(
            Some(("decode_image", "/home/ana/project/data.py", 42)),
            "PIL.ImageFile.load",
            Some("PIL.Image.open"),
        );
        assert_eq!(
            place_of(&s),
            Place {
                place: "decode_image (data.py:42)".into(),
                library: "PIL.Image.open".into()
            }
        );
        let leaf = spot(Some(("decode_image", "data.py", 42)), "time.sleep", None);
        assert_eq!(place_of(&leaf).library, "time.sleep");
        let own = HotSpot {
            file: "/srv/train/augment.py".into(),
            line: 17,
            ..spot(None, "resize", None)
        };
        assert_eq!(
            place_of(&own),
            Place {
                place: "resize (augment.py:17)".into(),
                library: String::new()
            }
        );
    }

    #[test]
    fn a_hostile_name_is_bounded_and_has_no_control_characters() {
        let long = format!("f\n{}", "x".repeat(10_000));
        let s = spot(Some((&long, "/a/b\r.py", 1)), &long, None);
        let p = place_of(&s);
        assert!(p.place.chars().count() <= NAME_MAX, "{}", p.place.len());
        assert!(p.library.chars().count() <= NAME_MAX);
        assert!(!p.place.contains('\n') && !p.place.contains('\r'));
    }

    #[test]
    fn a_report_without_a_place_says_why() {
        let r = unavailable(7, ReadOutcome::NoPermission, "no ptrace".into(), 0.0);
        assert_eq!(locate(&r), Err(Unplaced::NoPermission));
        let r = unavailable(7, ReadOutcome::FreeThreaded, String::new(), 0.0);
        assert_eq!(locate(&r), Err(Unplaced::UnsupportedPython));
        let mut sampled = unavailable(7, ReadOutcome::Sampled, String::new(), 0.0);
        sampled.focus = Focus::Busy;
        assert_eq!(locate(&sampled), Err(Unplaced::NoFrames));
        sampled.hot.push(spot(
            Some(("decode_image", "data.py", 42)),
            "PIL.Image.open",
            None,
        ));
        let got = locate(&sampled).unwrap();
        assert_eq!(got.place.place, "decode_image (data.py:42)");
        assert_eq!(got.call_seconds, Some(0.42));
    }
}
