//! Gzip for `/metrics` bodies, in three pieces. A body's middle part (the
//! per-kind stall series, half its bytes) is usually the same text as the
//! last body's, so its deflated bytes are kept and sent again instead of
//! deflating it anew.
//!
//! Each piece is deflated by a reset compressor (no match reaches back into
//! the piece before it) and ends on a byte boundary (a sync flush; the last
//! piece finishes the stream), so the pieces laid end to end are one valid
//! deflate stream. The gzip trailer's CRC-32 is combined from the pieces'.
//! Starting each piece with an empty window costs a few hundred bytes of
//! the ~7 KB a body compresses to.

use std::ops::Range;

use flate2::{Compress, CompressError, Compression, Crc, FlushCompress, Status};

/// The fixed gzip header (RFC 1952): deflate, no flags, no time, fastest
/// compression, an unknown OS.
const HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 4, 255];

/// A middle piece and what it deflated to.
struct Kept {
    plain: Vec<u8>,
    deflated: Vec<u8>,
    crc: Crc,
}

/// A raw deflate compressor, kept and reset (making one costs a tenth of
/// a scrape), and the middle piece of the last body of each slot.
pub struct Gzip {
    deflate: Compress,
    kept: [Option<Kept>; 2],
}

impl Default for Gzip {
    fn default() -> Self {
        Gzip {
            // No zlib header: raw deflate, with the largest window.
            deflate: Compress::new(Compression::fast(), false),
            kept: [None, None],
        }
    }
}

impl Gzip {
    /// `body` as one gzip member. `middle` is the range that is likely the
    /// same text as in the last body of `slot` (0 or 1: one per format).
    pub fn gzip(&mut self, body: &[u8], middle: Range<usize>, slot: usize) -> Vec<u8> {
        match self.pieces(body, middle, slot) {
            Ok(out) => out,
            // Deflating into a vector with room cannot fail; send it stored.
            Err(e) => {
                tracing::warn!(error = %e, "cannot gzip /metrics");
                stored(body)
            }
        }
    }

    fn pieces(
        &mut self,
        body: &[u8],
        middle: Range<usize>,
        slot: usize,
    ) -> Result<Vec<u8>, CompressError> {
        let (head, rest) = body.split_at(middle.start.min(body.len()));
        let (mid, tail) = rest.split_at(middle.len().min(rest.len()));
        let mut out = Vec::with_capacity(body.len() / 8 + 1024);
        out.extend_from_slice(&HEADER);
        let mut crc = Crc::new();

        deflate(&mut self.deflate, head, &mut out, FlushCompress::Sync)?;
        crc.update(head);

        let kept = match self.kept[slot].take() {
            Some(k) if k.plain == mid => k,
            _ => {
                let mut deflated = Vec::with_capacity(mid.len() / 8 + 64);
                deflate(&mut self.deflate, mid, &mut deflated, FlushCompress::Sync)?;
                let mut crc = Crc::new();
                crc.update(mid);
                Kept {
                    plain: mid.to_vec(),
                    deflated,
                    crc,
                }
            }
        };
        out.extend_from_slice(&kept.deflated);
        crc.combine(&kept.crc);
        self.kept[slot] = Some(kept);

        deflate(&mut self.deflate, tail, &mut out, FlushCompress::Finish)?;
        crc.update(tail);

        out.extend_from_slice(&crc.sum().to_le_bytes());
        out.extend_from_slice(&crc.amount().to_le_bytes());
        Ok(out)
    }
}

/// Appends `input` deflated by a reset compressor to `out`: a sync flush
/// ends on a byte boundary with the stream open, `Finish` closes it.
fn deflate(
    c: &mut Compress,
    input: &[u8],
    out: &mut Vec<u8>,
    flush: FlushCompress,
) -> Result<(), CompressError> {
    c.reset();
    out.reserve(input.len() / 8 + 64);
    loop {
        let consumed = c.total_in() as usize;
        let status = c.compress_vec(&input[consumed..], out, flush)?;
        let done = match flush {
            FlushCompress::Finish => status == Status::StreamEnd,
            // All taken, and the flush did not fill the output (zlib's rule
            // for a flush that is complete).
            _ => c.total_in() as usize == input.len() && out.len() < out.capacity(),
        };
        if done {
            return Ok(());
        }
        out.reserve(out.capacity().max(4096));
    }
}

/// A gzip member of stored (uncompressed) blocks, for the case that cannot
/// happen: the compressor failing.
fn stored(input: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), Compression::none());
    let _ = e.write_all(input);
    e.finish().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn gunzip(bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut d = flate2::read::GzDecoder::new(bytes);
        d.read_to_end(&mut out).unwrap();
        // One member, nothing after it.
        assert_eq!(d.into_inner().len(), 0);
        out
    }

    /// Incompressible bytes, larger than any first guess of the output.
    fn noise(n: u32, seed: u32) -> Vec<u8> {
        (0..n)
            .map(|i| (i.wrapping_add(seed).wrapping_mul(2654435761) >> 13) as u8)
            .collect()
    }

    #[test]
    fn pieces_of_any_size_make_the_body_again() {
        let mut g = Gzip::default();
        let text = b"stallwatch_gpu_stall_active{gpu=\"0\",kind=\"input_starved\"} 0\n".repeat(500);
        let cases: Vec<(Vec<u8>, Range<usize>)> = vec![
            (text.clone(), 1000..20_000),
            (noise(200_000, 1), 50_000..150_000),
            (noise(200_000, 2), 0..0),
            (b"small".to_vec(), 5..5),
            (Vec::new(), 0..0),
            ([text.clone(), noise(100_000, 3)].concat(), 0..30_000),
            // A range past the end is cut to the body.
            (b"short".to_vec(), 2..10_000),
        ];
        for (body, middle) in cases {
            assert_eq!(
                gunzip(&g.gzip(&body, middle.clone(), 0)),
                body,
                "{middle:?}"
            );
        }
    }

    #[test]
    fn the_middle_is_deflated_again_only_when_its_text_changed() {
        let mut g = Gzip::default();
        let body = |head: &str, mid: &str| {
            let b = format!("{head}\n{mid}\ntail {head}\n");
            let start = head.len() + 1;
            (b.clone(), start..start + mid.len() + 1)
        };
        let stalls = "stall{kind=\"a\"} 0\n".repeat(300);
        let (one, r1) = body("t 1", &stalls);
        let (two, r2) = body("t 22", &stalls);
        let first = g.gzip(one.as_bytes(), r1, 0);
        let kept = g.kept[0].as_ref().unwrap().deflated.clone();
        let second = g.gzip(two.as_bytes(), r2.clone(), 0);
        assert_eq!(gunzip(&first), one.as_bytes());
        assert_eq!(gunzip(&second), two.as_bytes());
        assert_eq!(
            g.kept[0].as_ref().unwrap().deflated,
            kept,
            "kept, not deflated anew"
        );

        // Another slot keeps its own.
        let (other, ro) = body("t 3", "other\n");
        assert_eq!(gunzip(&g.gzip(other.as_bytes(), ro, 1)), other.as_bytes());
        assert_eq!(g.kept[0].as_ref().unwrap().deflated, kept);

        // The middle's text changed: the body is still right.
        let changed = stalls.replacen("} 0", "} 1", 1);
        let (three, r3) = body("t 1", &changed);
        assert_eq!(gunzip(&g.gzip(three.as_bytes(), r3, 0)), three.as_bytes());
        assert_ne!(g.kept[0].as_ref().unwrap().deflated, kept);
    }
}
