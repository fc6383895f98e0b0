//! Which ML frameworks a job has loaded, from the shared libraries in
//! `/proc/<pid>/maps`: what the hints speak (a PyTorch job is told about
//! `num_workers`, a TensorFlow job about `tf.data`). The map is the job's
//! own and can be long (one line per mapping, up to `vm.max_map_count`): it
//! is read as a stream, at most [`MAX_MAPS`] bytes, and only three yes/no
//! answers are kept. A process is read once it holds a GPU (its framework is
//! loaded by then); a read that found nothing is repeated at most every
//! [`RETRY`], for frameworks loaded later.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::time::{Duration, Instant};

use crate::sample::job::Frameworks;

/// Most of a `maps` file read.
pub const MAX_MAPS: u64 = 4 << 20;
/// Longest line looked at: a path is at most `PATH_MAX` (4,096) bytes, the
/// rest of a longer line is read as lines of its own.
const MAX_LINE: u64 = 4096 + 128;
/// How long a read that found no framework stands.
pub const RETRY: Duration = Duration::from_secs(60);

/// Reads a `maps` stream: at most `MAX_MAPS` bytes, each line looked at
/// once and dropped.
pub fn read(maps: impl Read) -> Frameworks {
    let mut found = Frameworks::default();
    let mut lines = BufReader::new(maps.take(MAX_MAPS));
    let mut line = Vec::new();
    loop {
        line.clear();
        match (&mut lines).take(MAX_LINE).read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        // The path is the sixth field; anonymous mappings have none.
        if let Some(at) = line.iter().position(|b| *b == b'/')
            && let Ok(path) = std::str::from_utf8(&line[at..])
        {
            found.note(path.trim_end());
        }
        if found.all() {
            break;
        }
    }
    found
}

/// What each job leader had mapped, kept between samples.
#[derive(Debug, Clone, Default)]
pub struct Libraries {
    sample: u64,
    /// pid -> (start ticks, what its map said, when read, sample last used)
    by_pid: HashMap<u32, (u64, Frameworks, Instant, u64)>,
}

impl Libraries {
    /// Starts a sample: forgets the leaders not seen in the previous one.
    pub fn begin(&mut self) {
        let previous = self.sample;
        self.by_pid.retain(|_, (.., used)| *used == previous);
        self.sample += 1;
    }

    /// `pid`'s frameworks, from `root/<pid>/maps`: read the first time this
    /// process (started at `start_ticks`) is asked for, and again after
    /// [`RETRY`] while none was found.
    pub fn get(&mut self, root: &std::path::Path, pid: u32, start_ticks: u64) -> Frameworks {
        let sample = self.sample;
        if let Some((start, known, when, used)) = self.by_pid.get_mut(&pid)
            && *start == start_ticks
            && (known.any() || when.elapsed() < RETRY)
        {
            *used = sample;
            return *known;
        }
        let found = std::fs::File::open(root.join(pid.to_string()).join("maps"))
            .map(read)
            .unwrap_or_default();
        self.by_pid
            .insert(pid, (start_ticks, found, Instant::now(), sample));
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TORCH: &str = "\
7f1c2a000000-7f1c2b000000 r-xp 00000000 fd:01 1234 /venv/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so
7f1c2b000000-7f1c2b100000 rw-p 00000000 00:00 0
7ffd1c000000-7ffd1c021000 rw-p 00000000 00:00 0                          [stack]
";

    #[test]
    fn finds_each_framework_by_its_libraries() {
        assert_eq!(
            read(TORCH.as_bytes()),
            Frameworks {
                pytorch: true,
                ..Frameworks::default()
            }
        );
        let tf = "7f00-7f10 r-xp 0 fd:01 9 /usr/lib/python3/dist-packages/tensorflow/libtensorflow_framework.so.2\n";
        assert!(read(tf.as_bytes()).tensorflow);
        let jax = "7f00-7f10 r-xp 0 fd:01 9 /opt/env/site-packages/jaxlib/xla_extension.so\n";
        assert!(read(jax.as_bytes()).jax);
        assert!(
            !read("7f00-7f10 r-xp 0 fd:01 9 /usr/lib/libtorchlight-ish\n".as_bytes()).tensorflow
        );
    }

    #[test]
    fn a_plain_python_process_has_none() {
        let plain = "55d0-55e0 r-xp 0 fd:01 7 /usr/bin/python3.11\n7f00-7f10 r-xp 0 fd:01 8 /usr/lib/x86_64-linux-gnu/libc.so.6\n";
        assert!(!read(plain.as_bytes()).any());
    }

    #[test]
    fn reads_no_further_than_its_budget() {
        // A map longer than the budget, the framework's line after it.
        let filler = "7f00-7f10 rw-p 0 00:00 0\n".repeat((MAX_MAPS as usize / 24) + 1);
        let late = format!("{filler}7f00-7f10 r-xp 0 fd:01 9 /x/torch/lib/libtorch_cpu.so\n");
        assert!(!read(late.as_bytes()).pytorch);
        let early = format!("{TORCH}{filler}");
        assert!(read(early.as_bytes()).pytorch);
    }

    #[test]
    fn a_long_line_without_newline_is_bounded_too() {
        let endless = std::io::repeat(b'/').take(64 << 20);
        assert!(!read(endless).any());
    }

    #[test]
    fn a_process_is_read_once_while_it_has_a_framework() {
        let dir = std::env::temp_dir().join(format!("sw-libs-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("42")).unwrap();
        std::fs::write(dir.join("42/maps"), TORCH).unwrap();
        let mut libs = Libraries::default();
        libs.begin();
        assert!(libs.get(&dir, 42, 7).pytorch);
        std::fs::write(dir.join("42/maps"), "").unwrap();
        libs.begin();
        assert!(libs.get(&dir, 42, 7).pytorch, "kept from the first read");
        libs.begin();
        assert!(
            !libs.get(&dir, 42, 8).pytorch,
            "a new process of the same pid is read again"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
