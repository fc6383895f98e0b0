//! Enter and leave with hysteresis: a kind becomes active only after its
//! condition held for the enter time, and inactive only after a stricter exit
//! condition held for the exit time. One episode, one event pair.

/// What a detector says about one sample.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Condition {
    /// The enter condition holds now.
    pub enter: bool,
    /// The (stricter) exit condition holds now.
    pub exit: bool,
}

/// A change of state to report.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Transition {
    /// Became active; the condition first held at `onset`.
    Started { onset: f64 },
    /// Became inactive; the episode started at `since`.
    Ended { since: f64 },
}

#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Episode {
    /// When the current episode started (the enter time was reached).
    pub active_since: Option<f64>,
    /// When the enter condition (inactive) or exit condition (active) began to hold.
    pending_since: Option<f64>,
}

impl Episode {
    pub fn is_active(&self) -> bool {
        self.active_since.is_some()
    }

    /// Inactive, with its enter condition holding since some time.
    pub fn is_pending(&self) -> bool {
        self.active_since.is_none() && self.pending_since.is_some()
    }

    /// Feeds one sample's condition at time `t`. `allowed` false forbids
    /// starting (a refinement whose parent is not active); `force_end` ends an
    /// active episode at once.
    pub fn update(
        &mut self,
        t: f64,
        condition: Condition,
        enter_for: f64,
        exit_for: f64,
        allowed: bool,
        force_end: bool,
    ) -> Option<Transition> {
        match self.active_since {
            None => {
                if !condition.enter {
                    self.pending_since = None;
                    return None;
                }
                let onset = *self.pending_since.get_or_insert(t);
                if allowed && t - onset >= enter_for - 1e-9 {
                    self.active_since = Some(t);
                    self.pending_since = None;
                    return Some(Transition::Started { onset });
                }
                None
            }
            Some(since) => {
                if force_end {
                    return Some(self.end(since));
                }
                if !condition.exit {
                    self.pending_since = None;
                    return None;
                }
                let begun = *self.pending_since.get_or_insert(t);
                (t - begun >= exit_for - 1e-9).then(|| self.end(since))
            }
        }
    }

    fn end(&mut self, since: f64) -> Transition {
        *self = Episode::default();
        Transition::Ended { since }
    }

    /// Drops a pending (not yet active) condition, e.g. during warm-up.
    pub fn reset_pending(&mut self) {
        if self.active_since.is_none() {
            self.pending_since = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ON: Condition = Condition {
        enter: true,
        exit: false,
    };
    const OFF: Condition = Condition {
        enter: false,
        exit: true,
    };
    const BETWEEN: Condition = Condition {
        enter: false,
        exit: false,
    };

    fn feed(e: &mut Episode, seq: &[(f64, Condition)]) -> Vec<(f64, Transition)> {
        seq.iter()
            .filter_map(|(t, c)| e.update(*t, *c, 10.0, 5.0, true, false).map(|tr| (*t, tr)))
            .collect()
    }

    #[test]
    fn starts_only_after_the_enter_time() {
        let mut e = Episode::default();
        let got = feed(&mut e, &[(0.0, ON), (5.0, ON), (9.0, ON), (10.0, ON)]);
        assert_eq!(got, vec![(10.0, Transition::Started { onset: 0.0 })]);
    }

    #[test]
    fn an_interruption_restarts_the_enter_time() {
        let mut e = Episode::default();
        let got = feed(
            &mut e,
            &[(0.0, ON), (8.0, BETWEEN), (9.0, ON), (18.0, ON), (19.0, ON)],
        );
        assert_eq!(got, vec![(19.0, Transition::Started { onset: 9.0 })]);
    }

    #[test]
    fn flapping_between_thresholds_gives_one_episode() {
        let mut e = Episode::default();
        let mut seq = vec![(0.0, ON), (10.0, ON)];
        // In the hysteresis band, or briefly past the exit threshold: stays active.
        for i in 0..20 {
            let t = 11.0 + i as f64 * 2.0;
            seq.push((t, if i % 2 == 0 { OFF } else { BETWEEN }));
        }
        seq.extend([(60.0, OFF), (65.0, OFF)]);
        let got = feed(&mut e, &seq);
        assert_eq!(
            got,
            vec![
                (10.0, Transition::Started { onset: 0.0 }),
                (65.0, Transition::Ended { since: 10.0 })
            ]
        );
    }

    #[test]
    fn not_allowed_waits_and_force_end_ends_at_once() {
        let mut e = Episode::default();
        assert_eq!(e.update(0.0, ON, 0.0, 5.0, false, false), None);
        assert_eq!(
            e.update(1.0, ON, 0.0, 5.0, true, false),
            Some(Transition::Started { onset: 0.0 })
        );
        assert_eq!(
            e.update(2.0, ON, 0.0, 5.0, true, true),
            Some(Transition::Ended { since: 1.0 })
        );
        assert!(!e.is_active());
    }
}
