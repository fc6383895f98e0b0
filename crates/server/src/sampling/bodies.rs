//! `/metrics` bodies, rendered (and gzipped) once per published sample and
//! format: a second scraper of the same sample (an HA pair of Prometheus
//! servers, a federating agent) gets the same bytes at no cost. The gzip
//! compressor is kept and reset, not made anew for each response (its
//! tables were a tenth of a scrape's CPU).
//!
//! Scrapers come at a steady interval, so the next scrape of each kind
//! (format, gzip or not) can be expected: when a sample is published, the
//! sampler renders the bodies whose next scrape falls before the following
//! sample ([`MetricsBodies::prepare`]), and the scrape only sends bytes. No
//! body is rendered that no scrape is expected to take; a scrape that comes
//! unexpected renders its body itself, as before.
//!
//! A gzip body is deflated in pieces (`gzip.rs`), the stall series'
//! piece kept from the last body while its text stays the same.

use std::ops::Range;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::body::Bytes;

use super::gzip::Gzip;
use crate::metrics::{Format, Renderer, Scrape};
use crate::own_cost::{self, Stage};
use collector::snapshot::Snapshot;

/// Scrapes further apart than this are not expected again.
const LONGEST_GAP: Duration = Duration::from_secs(600);

/// The responses of one sample, and the renderer that made them.
#[derive(Default)]
struct Rendered {
    /// The sample they were rendered from.
    snapshot: Option<Arc<Snapshot>>,
    /// [format][gzip]
    bodies: [[Option<Bytes>; 2]; 2],
    /// [format]: where the stall series lie in the plain body.
    stalls: [Range<usize>; 2],
    /// Kept from sample to sample: what the next body can reuse.
    renderer: Renderer,
    gzip: Gzip,
}

/// When a kind of body was last asked for, and the gap before that.
#[derive(Debug, Default, Clone, Copy)]
struct Asked {
    last: Option<Instant>,
    gap: Option<Duration>,
}

impl Asked {
    fn ask(&mut self, now: Instant) {
        self.gap = self.last.map(|last| now.saturating_duration_since(last));
        self.last = Some(now);
    }

    /// Whether the next scrape is expected from `now` up to `until` (or is
    /// due already: a late one).
    fn expected(&self, now: Instant, until: Instant) -> bool {
        let (Some(last), Some(gap)) = (self.last, self.gap) else {
            return false;
        };
        if gap.is_zero() || gap > LONGEST_GAP {
            return false;
        }
        let next = last + gap;
        // Overdue by more than half a gap: the scraper went away, or came
        // unevenly; wait for it to come again.
        next + gap / 2 >= now && next < until
    }
}

#[derive(Default)]
pub struct MetricsBodies {
    rendered: Mutex<Rendered>,
    /// [format][gzip]
    asked: Mutex<[[Asked; 2]; 2]>,
    renders: AtomicU64,
}

const FORMATS: [Format; 2] = [Format::OpenMetrics, Format::PrometheusText];

impl MetricsBodies {
    /// The body for `scrape` in `format`, gzipped when `gzip`.
    pub fn body(&self, scrape: Scrape, format: Format, gzip: bool) -> Bytes {
        self.body_at(scrape, format, gzip, Instant::now())
    }

    fn body_at(&self, scrape: Scrape, format: Format, gzip: bool, now: Instant) -> Bytes {
        self.asked.lock().unwrap_or_else(PoisonError::into_inner)[format as usize]
            [usize::from(gzip)]
        .ask(now);
        own_cost::charge(Stage::Http);
        let body = self.get(scrape, format, gzip);
        own_cost::charge(Stage::Render);
        body
    }

    /// Called as a sample is published (at `now`, the next one due
    /// `interval` later): renders the bodies a scrape is expected to take
    /// before the next sample, so that it finds them made. Runs on the
    /// sampler thread: a panic while making a body is caught and logged
    /// (the scrape then renders its own), so it cannot end sampling.
    pub fn prepare(&self, scrape: impl Fn() -> Scrape, now: Instant, interval: Duration) {
        let asked = *self.asked.lock().unwrap_or_else(PoisonError::into_inner);
        for format in FORMATS {
            for gzip in [false, true] {
                if asked[format as usize][usize::from(gzip)].expected(now, now + interval)
                    && catch_unwind(AssertUnwindSafe(|| self.get(scrape(), format, gzip))).is_err()
                {
                    tracing::error!(?format, gzip, "making a /metrics body ahead panicked");
                }
            }
        }
    }

    /// How many bodies were rendered (each format's plain text counts).
    pub fn renders(&self) -> u64 {
        self.renders.load(Ordering::Relaxed)
    }

    fn get(&self, scrape: Scrape, format: Format, gzip: bool) -> Bytes {
        let mut rendered = self.rendered.lock().unwrap_or_else(PoisonError::into_inner);
        let same = rendered
            .snapshot
            .as_ref()
            .is_some_and(|s| Arc::ptr_eq(s, &scrape.snapshot));
        if !same {
            rendered.snapshot = Some(scrape.snapshot.clone());
            rendered.bodies = Default::default();
        }
        let f = format as usize;
        if let Some(body) = &rendered.bodies[f][usize::from(gzip)] {
            return body.clone();
        }
        let plain = match &rendered.bodies[f][0] {
            Some(plain) => plain.clone(),
            None => {
                self.renders.fetch_add(1, Ordering::Relaxed);
                let (text, stalls) = rendered.renderer.render_parts(scrape, format);
                let plain = Bytes::from(text);
                rendered.bodies[f][0] = Some(plain.clone());
                rendered.stalls[f] = stalls;
                plain
            }
        };
        if !gzip {
            return plain;
        }
        let stalls = rendered.stalls[f].clone();
        let gzipped = Bytes::from(rendered.gzip.gzip(&plain, stalls, f));
        rendered.bodies[f][1] = Some(gzipped.clone());
        gzipped
    }
}

/// Whether `Accept-Encoding` allows gzip (`gzip` or `*` with a q-value
/// above 0; an explicit `gzip;q=0` refuses it).
pub fn accepts_gzip(accept_encoding: Option<&str>) -> bool {
    let Some(value) = accept_encoding else {
        return false;
    };
    let mut star = false;
    for item in value.split(',') {
        let mut parts = item.split(';');
        let coding = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let q = parts
            .filter_map(|p| {
                p.trim()
                    .strip_prefix("q=")
                    .or_else(|| p.trim().strip_prefix("Q="))
            })
            .find_map(|q| q.trim().parse::<f32>().ok())
            .unwrap_or(1.0);
        match coding.as_str() {
            "gzip" | "x-gzip" => return q > 0.0,
            "*" => star = q > 0.0,
            _ => {}
        }
    }
    star
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn scrape(snapshot: &Arc<Snapshot>) -> Scrape {
        Scrape {
            snapshot: snapshot.clone(),
            cost: Default::default(),
            diagnosis: Arc::new(Vec::new()),
            max_processes: 16,
        }
    }

    fn gunzip(bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(bytes)
            .read_to_end(&mut out)
            .unwrap();
        out
    }

    #[test]
    fn one_render_per_sample_and_format_and_the_gzip_is_the_plain_text() {
        let bodies = MetricsBodies::default();
        let first = Arc::new(Snapshot::default());
        let plain = bodies.body(scrape(&first), Format::OpenMetrics, false);
        assert!(std::str::from_utf8(&plain).unwrap().ends_with("# EOF\n"));
        let gzipped = bodies.body(scrape(&first), Format::OpenMetrics, true);
        assert_eq!(gunzip(&gzipped), plain);
        let again = bodies.body(scrape(&first), Format::OpenMetrics, true);
        assert_eq!(
            again.as_ptr(),
            gzipped.as_ptr(),
            "the same bytes, not a new render"
        );
        let text = bodies.body(scrape(&first), Format::PrometheusText, true);
        assert!(
            !gunzip(&text).ends_with(b"# EOF\n"),
            "each format its own body"
        );

        let second = Arc::new(Snapshot::default());
        let next = bodies.body(scrape(&second), Format::OpenMetrics, true);
        assert_ne!(next.as_ptr(), gzipped.as_ptr(), "a new sample, a new body");
        assert_eq!(
            gunzip(&next),
            plain,
            "the compressor is reset between bodies"
        );
    }

    #[test]
    fn bodies_are_made_ahead_only_for_the_scrapes_expected_before_the_next_sample() {
        let bodies = MetricsBodies::default();
        let t0 = Instant::now();
        let s = |secs: f64| t0 + Duration::from_secs_f64(secs);
        let second = Duration::from_secs(1);
        let prepare = |snapshot: &Arc<Snapshot>, at: f64| {
            bodies.prepare(|| scrape(snapshot), s(at), second);
        };
        let samples: Vec<Arc<Snapshot>> = (0..6).map(|_| Arc::new(Snapshot::default())).collect();

        prepare(&samples[0], 0.0);
        assert_eq!(bodies.renders(), 0, "no scraper seen yet: nothing made");
        bodies.body_at(scrape(&samples[0]), Format::OpenMetrics, true, s(0.2));
        bodies.body_at(scrape(&samples[1]), Format::OpenMetrics, true, s(15.2));
        assert_eq!(
            bodies.renders(),
            2,
            "each new sample's first scrape renders"
        );

        prepare(&samples[2], 16.0);
        prepare(&samples[3], 28.9);
        assert_eq!(
            bodies.renders(),
            2,
            "the next scrape (30.2 s) is not before these samples' next"
        );
        prepare(&samples[4], 29.9);
        assert_eq!(
            bodies.renders(),
            3,
            "made for the scrape expected at 30.2 s"
        );
        let body = bodies.body_at(scrape(&samples[4]), Format::OpenMetrics, true, s(30.2));
        assert_eq!(bodies.renders(), 3, "the scrape found it made");
        let plain = bodies.body_at(scrape(&samples[4]), Format::OpenMetrics, false, s(30.3));
        assert_eq!(gunzip(&body), plain);

        prepare(&samples[5], 60.0);
        assert_eq!(
            bodies.renders(),
            3,
            "a scraper overdue by more than half its interval is not expected"
        );
    }

    #[test]
    fn a_panic_while_making_a_body_ahead_is_caught_and_the_scrape_still_served() {
        let bodies = MetricsBodies::default();
        let t0 = Instant::now();
        let s = |secs: f64| t0 + Duration::from_secs_f64(secs);
        let snapshot = Arc::new(Snapshot::default());
        bodies.body_at(scrape(&snapshot), Format::OpenMetrics, true, s(0.0));
        bodies.body_at(scrape(&snapshot), Format::OpenMetrics, true, s(1.0));
        let next = Arc::new(Snapshot::default());
        // The scrape is expected at 2.0 s: prepare makes it, and panics.
        bodies.prepare(
            || -> Scrape { panic!("a render bug") },
            s(1.9),
            Duration::from_secs(1),
        );
        let body = bodies.body_at(scrape(&next), Format::OpenMetrics, true, s(2.0));
        assert!(
            gunzip(&body).ends_with(b"# EOF\n"),
            "the scrape renders its own"
        );
    }

    #[test]
    fn gzip_bodies_are_the_plain_ones_whether_the_stall_series_change_or_not() {
        use diagnosis::status::KindCounters;
        use diagnosis::{GpuStatus, Kind, Verdict};
        let status = |seconds_total: f64| GpuStatus {
            gpu: 0,
            uuid: "GPU-0".to_owned(),
            verdict: Verdict::Stalled,
            verdict_since: 0.0,
            active: Vec::new(),
            jobs: Vec::new(),
            job_idle_seconds_total: seconds_total,
            phase: None,
            phase_seconds_total: Default::default(),
            time: Default::default(),
            time_held_seconds: 0.0,
            lost_progress_seconds_total: 0.0,
            last_ended: None,
            share: None,
            no_activity_reading: None,
            lost_by_place: Vec::new(),
            lost_unplaced: Vec::new(),
            lost_pending_seconds: 0.0,
            kinds: Kind::ALL
                .into_iter()
                .map(|k| {
                    let c = KindCounters {
                        active: k == Kind::InputStarved,
                        seconds_total,
                        events_total: 1,
                    };
                    (k, c)
                })
                .collect(),
        };
        let bodies = MetricsBodies::default();
        // The same stall series twice, then growing, then the same again.
        for seconds in [1.0, 1.0, 2.0, 3.0, 3.0] {
            let scrape = Scrape {
                snapshot: Arc::new(Snapshot::default()),
                cost: Default::default(),
                diagnosis: Arc::new(vec![status(seconds)]),
                max_processes: 16,
            };
            let gzipped = bodies.body(scrape, Format::OpenMetrics, true);
            let scrape = Scrape {
                snapshot: bodies.rendered.lock().unwrap().snapshot.clone().unwrap(),
                cost: Default::default(),
                diagnosis: Arc::new(Vec::new()),
                max_processes: 16,
            };
            let plain = bodies.body(scrape, Format::OpenMetrics, false);
            let line = format!(
                r#"stallwatch_gpu_stall_seconds_total{{gpu="0",uuid="GPU-0",kind="input_starved"}} {seconds:.1}"#
            );
            assert!(std::str::from_utf8(&plain).unwrap().contains(&line));
            assert_eq!(gunzip(&gzipped), plain, "{seconds}");
        }
    }

    #[test]
    fn accept_encoding() {
        assert!(accepts_gzip(Some("gzip")));
        assert!(accepts_gzip(Some("deflate, GZIP;q=0.5")));
        assert!(accepts_gzip(Some("br, *")));
        assert!(!accepts_gzip(Some("gzip;q=0")));
        assert!(!accepts_gzip(Some("gzip;q=0, *")));
        assert!(!accepts_gzip(Some("identity")));
        assert!(!accepts_gzip(Some("*;q=0")));
        assert!(!accepts_gzip(None));
    }
}
