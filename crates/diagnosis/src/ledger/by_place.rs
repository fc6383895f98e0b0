//! The host's lost GPU-seconds by place (docs/goodput.md#by-place): each
//! (GPU, state, kind, place) the ledger booked lost seconds to, at most
//! [`PLACES_EXPORTED`] of them shown whatever the jobs do (the top ones by
//! seconds over the last day), the rest counted as [`Unplaced::OverCap`].

use std::collections::BTreeMap;

use crate::types::ledger::{Place, PlaceLoss, Unplaced, UnplacedLoss};
use crate::types::time_state::TimeState;

/// Places a host shows at most: the series it adds to `/metrics`.
pub const PLACES_EXPORTED: usize = 32;
/// Places a host keeps count of (shown or not), to tell which ones lose the
/// most over a day; a new place beyond them replaces the least one not shown.
pub const PLACES_TRACKED: usize = 256;
/// A place not shown takes the room of the shown one that lost the least
/// over the last day once it lost this many times as much.
const SWAP_FACTOR: f64 = 1.5;
const HOUR_SECONDS: f64 = 3600.0;
const DAY_HOURS: usize = 24;

/// One counted place: on a GPU, for a lost state and the kind (or phase)
/// that lost it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PlaceKey {
    pub gpu: u32,
    pub uuid: String,
    pub state: TimeState,
    pub kind: &'static str,
    pub place: Place,
}

/// Seconds by hour over the last day.
#[derive(Debug, Clone, Default)]
struct Day {
    hours: [(u64, f64); DAY_HOURS],
}

impl Day {
    fn hour(t: f64) -> u64 {
        (t.max(0.0) / HOUR_SECONDS) as u64
    }

    fn add(&mut self, t: f64, seconds: f64) {
        let h = Day::hour(t);
        let slot = &mut self.hours[h as usize % DAY_HOURS];
        if slot.0 != h {
            *slot = (h, 0.0);
        }
        slot.1 += seconds;
    }

    fn sum(&self, t: f64) -> f64 {
        let now = Day::hour(t);
        self.hours
            .iter()
            .filter(|(h, _)| *h <= now && h + DAY_HOURS as u64 > now)
            .map(|(_, s)| s)
            .sum()
    }
}

#[derive(Debug, Clone)]
struct Entry {
    key: PlaceKey,
    /// Seconds counted while shown (the counter's value).
    seconds: f64,
    day: Day,
    call_seconds: Option<f64>,
    shown: bool,
}

/// The host's places and its unplaced seconds.
#[derive(Debug, Clone, Default)]
pub struct PlaceLedger {
    entries: Vec<Entry>,
    unplaced: BTreeMap<(u32, String, TimeState, Unplaced), f64>,
}

impl PlaceLedger {
    /// Books `seconds` at `t` to a place: to its own count while it is
    /// shown, else to `over_cap`.
    pub fn book_place(&mut self, key: PlaceKey, call_seconds: Option<f64>, seconds: f64, t: f64) {
        if !(seconds > 0.0 && seconds.is_finite()) {
            return;
        }
        let i = match self.entries.iter().position(|e| e.key == key) {
            Some(i) => i,
            None => self.track(key.clone(), t),
        };
        let entry = &mut self.entries[i];
        entry.day.add(t, seconds);
        if call_seconds.is_some() {
            entry.call_seconds = call_seconds;
        }
        if !entry.shown {
            self.consider(i, t);
        }
        let entry = &mut self.entries[i];
        if entry.shown {
            entry.seconds += seconds;
        } else {
            let (gpu, uuid, state) = (key.gpu, key.uuid, key.state);
            self.book_unplaced(gpu, &uuid, state, Unplaced::OverCap, seconds);
        }
    }

    pub fn book_unplaced(
        &mut self,
        gpu: u32,
        uuid: &str,
        state: TimeState,
        reason: Unplaced,
        seconds: f64,
    ) {
        if seconds > 0.0 && seconds.is_finite() {
            *self
                .unplaced
                .entry((gpu, uuid.to_owned(), state, reason))
                .or_default() += seconds;
        }
    }

    /// The places shown for a GPU, most seconds first.
    pub fn places(&self, gpu: u32, uuid: &str) -> Vec<PlaceLoss> {
        let mut out: Vec<PlaceLoss> = self
            .entries
            .iter()
            .filter(|e| e.shown && e.key.gpu == gpu && e.key.uuid == uuid)
            .map(|e| PlaceLoss {
                state: e.key.state,
                kind: e.key.kind.to_owned(),
                place: e.key.place.clone(),
                seconds: e.seconds,
                call_seconds: e.call_seconds,
            })
            .collect();
        out.sort_by(|a, b| b.seconds.total_cmp(&a.seconds));
        out
    }

    /// A GPU's unplaced seconds by state and reason.
    pub fn unplaced(&self, gpu: u32, uuid: &str) -> Vec<UnplacedLoss> {
        self.unplaced
            .iter()
            .filter(|((g, u, _, _), _)| *g == gpu && u == uuid)
            .map(|((_, _, state, reason), seconds)| UnplacedLoss {
                state: *state,
                reason: *reason,
                seconds: *seconds,
            })
            .collect()
    }

    /// Places shown, over every GPU.
    pub fn shown(&self) -> usize {
        self.entries.iter().filter(|e| e.shown).count()
    }

    /// Places counted, shown or not.
    pub fn tracked(&self) -> usize {
        self.entries.len()
    }

    /// Starts counting a new place, in the room of the place not shown that
    /// lost the least over the last day when all rooms are taken.
    fn track(&mut self, key: PlaceKey, t: f64) -> usize {
        let entry = Entry {
            key,
            seconds: 0.0,
            day: Day::default(),
            call_seconds: None,
            shown: false,
        };
        if self.entries.len() < PLACES_TRACKED {
            self.entries.push(entry);
            return self.entries.len() - 1;
        }
        let least = self
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| !e.shown)
            .min_by(|a, b| a.1.day.sum(t).total_cmp(&b.1.day.sum(t)))
            .map(|(i, _)| i);
        match least {
            Some(least) => {
                self.entries[least] = entry;
                least
            }
            // Never: more places are tracked than shown.
            None => {
                self.entries.push(entry);
                self.entries.len() - 1
            }
        }
    }

    /// Shows entry `i` if there is room, or in the room of the shown place
    /// that lost the least over the last day once `i` lost far more.
    fn consider(&mut self, i: usize, t: f64) {
        if self.shown() < PLACES_EXPORTED {
            self.entries[i].shown = true;
            return;
        }
        let own = self.entries[i].day.sum(t);
        let least = self
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.shown)
            .map(|(j, e)| (j, e.day.sum(t)))
            .min_by(|a, b| a.1.total_cmp(&b.1));
        if let Some((j, least)) = least
            && own > least * SWAP_FACTOR
        {
            self.entries[j].shown = false;
            self.entries[i].shown = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(gpu: u32, line: usize) -> PlaceKey {
        PlaceKey {
            gpu,
            uuid: format!("GPU-{gpu}"),
            state: TimeState::Input,
            kind: "input_starved",
            place: Place {
                place: format!("step_{line} (hostile.py:{line})"),
                library: String::new(),
            },
        }
    }

    fn total(l: &PlaceLedger, gpu: u32) -> f64 {
        let uuid = format!("GPU-{gpu}");
        l.places(gpu, &uuid).iter().map(|p| p.seconds).sum::<f64>()
            + l.unplaced(gpu, &uuid)
                .iter()
                .map(|u| u.seconds)
                .sum::<f64>()
    }

    #[test]
    fn ten_thousand_lines_stay_within_the_cap_and_no_second_is_lost() {
        let mut l = PlaceLedger::default();
        let mut booked = 0.0;
        for n in 0..10_000 {
            l.book_place(key(n as u32 % 8, n), None, 1.0, n as f64);
            booked += 1.0;
        }
        assert!(l.shown() <= PLACES_EXPORTED, "{}", l.shown());
        assert!(l.tracked() <= PLACES_TRACKED);
        let all: f64 = (0..8).map(|g| total(&l, g)).sum();
        assert!((all - booked).abs() < 1e-6, "{all} of {booked}");
    }

    #[test]
    fn a_costly_place_found_late_takes_the_room_of_the_least() {
        let mut l = PlaceLedger::default();
        for n in 0..PLACES_EXPORTED {
            l.book_place(key(0, n), None, 1.0, 10.0);
        }
        assert_eq!(l.shown(), PLACES_EXPORTED);
        let costly = key(0, 9999);
        let mut t = 20.0;
        for _ in 0..10 {
            l.book_place(costly.clone(), Some(0.42), 1.0, t);
            t += 1.0;
        }
        let shown = l.places(0, "GPU-0");
        assert_eq!(shown.len(), PLACES_EXPORTED);
        let top = &shown[0];
        assert_eq!(top.place, costly.place);
        assert_eq!(top.call_seconds, Some(0.42));
        // Its first seconds, before it outgrew the least, went to over_cap.
        let over: f64 = l
            .unplaced(0, "GPU-0")
            .iter()
            .filter(|u| u.reason == Unplaced::OverCap)
            .map(|u| u.seconds)
            .sum();
        assert!(over > 0.0 && over < 3.0, "{over}");
        assert!((top.seconds + over - 10.0).abs() < 1e-9);
    }

    #[test]
    fn a_day_forgets_what_is_older() {
        let mut d = Day::default();
        d.add(0.0, 5.0);
        d.add(3600.0 * 5.0, 1.0);
        assert_eq!(d.sum(3600.0 * 5.0), 6.0);
        assert_eq!(d.sum(3600.0 * 24.5), 1.0);
        assert_eq!(d.sum(3600.0 * 40.0), 0.0);
    }
}
