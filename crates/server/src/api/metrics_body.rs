//! `/metrics` bodies, rendered (and gzipped) once per published sample and
//! format: a second scraper of the same sample (an HA pair of Prometheus
//! servers, a federating agent) gets the same bytes at no cost. The gzip
//! compressor is kept and reset, not made anew for each response (its
//! tables were a tenth of a scrape's CPU).

use std::sync::{Arc, Mutex, PoisonError};

use axum::body::Bytes;
use flate2::{Compress, Compression, FlushCompress, Status};

use crate::metrics::{self, Format, Scrape};
use collector::snapshot::Snapshot;

/// What the responses of one sample are made of.
#[derive(Default)]
struct Rendered {
    /// The sample they were rendered from.
    snapshot: Option<Arc<Snapshot>>,
    /// [format][gzip]
    bodies: [[Option<Bytes>; 2]; 2],
}

pub struct MetricsBodies {
    rendered: Mutex<Rendered>,
    gzip: Mutex<Compress>,
}

impl Default for MetricsBodies {
    fn default() -> Self {
        MetricsBodies {
            rendered: Mutex::default(),
            // 15: the largest window; `new_gzip` writes the gzip header and trailer.
            gzip: Mutex::new(Compress::new_gzip(Compression::fast(), 15)),
        }
    }
}

impl MetricsBodies {
    /// The body for `scrape` in `format`, gzipped when `gzip`.
    pub fn body(&self, scrape: Scrape, format: Format, gzip: bool) -> Bytes {
        let mut rendered = self.rendered.lock().unwrap_or_else(PoisonError::into_inner);
        let same = rendered
            .snapshot
            .as_ref()
            .is_some_and(|s| Arc::ptr_eq(s, &scrape.snapshot));
        if !same {
            *rendered = Rendered {
                snapshot: Some(scrape.snapshot.clone()),
                ..Rendered::default()
            };
        }
        let f = format as usize;
        if let Some(body) = &rendered.bodies[f][usize::from(gzip)] {
            return body.clone();
        }
        let plain = match &rendered.bodies[f][0] {
            Some(plain) => plain.clone(),
            None => {
                let plain = Bytes::from(metrics::render(scrape, format));
                rendered.bodies[f][0] = Some(plain.clone());
                plain
            }
        };
        if !gzip {
            return plain;
        }
        let gzipped = Bytes::from(self.compress(&plain));
        rendered.bodies[f][1] = Some(gzipped.clone());
        gzipped
    }

    fn compress(&self, input: &[u8]) -> Vec<u8> {
        let mut c = self.gzip.lock().unwrap_or_else(PoisonError::into_inner);
        c.reset();
        let mut out = Vec::with_capacity(input.len() / 4 + 1024);
        loop {
            let consumed = c.total_in() as usize;
            match c.compress_vec(&input[consumed..], &mut out, FlushCompress::Finish) {
                Ok(Status::StreamEnd) => return out,
                // The output is full: make room and go on.
                Ok(Status::Ok | Status::BufError) => out.reserve(out.capacity().max(4096)),
                // Deflating into a vector with room cannot fail; send it plain.
                Err(e) => {
                    tracing::warn!(error = %e, "cannot gzip /metrics");
                    return flate_fallback(input);
                }
            }
        }
    }
}

/// A gzip member of stored (uncompressed) blocks, for the case that cannot
/// happen: the compressor failing.
fn flate_fallback(input: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), Compression::none());
    let _ = e.write_all(input);
    e.finish().unwrap_or_default()
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
    fn a_body_larger_than_the_first_guess_is_compressed_whole() {
        let bodies = MetricsBodies::default();
        // Incompressible input, larger than the output's first capacity.
        let input: Vec<u8> = (0..200_000u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        assert_eq!(gunzip(&bodies.compress(&input)), input);
        assert_eq!(gunzip(&bodies.compress(b"small")), b"small");
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
