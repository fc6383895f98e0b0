//! Noticing changes to the scenario file: one `stat` per call, and a read only
//! when the file's identity changed or was recorded too close to a write.

use std::fs::Metadata;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

pub const ENV_VAR: &str = "STALLWATCH_FAKE_NVML";

/// File timestamps are coarse (a clock tick) and inode numbers are reused, so a
/// file read this soon after it was written may change again without its
/// metadata changing; its content is compared until it is read later than this.
const RACY_WINDOW: Duration = Duration::from_millis(100);

/// What identifies one version of the scenario file.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileId {
    path: PathBuf,
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
}

impl FileId {
    fn new(path: &Path, m: &Metadata) -> Self {
        Self {
            path: path.to_path_buf(),
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
        }
    }
}

/// The file version last read, and what was wrong with it, if anything.
struct Seen {
    id: FileId,
    text: String,
    racy: bool,
    problem: Option<String>,
}

/// What `Watch::look` found.
pub enum Look {
    /// The version last seen, which was good.
    Same,
    /// No usable file; the message names the problem (printed once).
    Bad(String),
    /// New content: parse it and report back with `Watch::outcome`.
    New { path: PathBuf, text: String },
}

#[derive(Default)]
pub struct Watch {
    seen: Option<Seen>,
    pending: Option<Seen>,
    last_complaint: Option<String>,
}

impl Watch {
    pub const fn new() -> Self {
        Self {
            seen: None,
            pending: None,
            last_complaint: None,
        }
    }

    pub fn look(&mut self) -> Look {
        let path = match std::env::var_os(ENV_VAR) {
            Some(p) if !p.is_empty() => PathBuf::from(p),
            _ => {
                return self.complain(format!(
                    "{ENV_VAR} is not set; it must name a scenario file"
                ));
            }
        };
        let (id, mtime) = match std::fs::metadata(&path) {
            Ok(m) => (FileId::new(&path, &m), m.modified().ok()),
            Err(e) => {
                return self.complain(format!("cannot read scenario {}: {e}", path.display()));
            }
        };
        let known = self.seen.as_mut().filter(|s| s.id == id);
        if let Some(seen) = &known
            && !seen.racy
        {
            return seen.problem.clone().map_or(Look::Same, Look::Bad);
        }
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) => {
                return self.complain(format!("cannot read scenario {}: {e}", path.display()));
            }
        };
        let racy = is_recent(mtime);
        if let Some(seen) = known
            && seen.text == text
        {
            seen.racy = racy;
            return seen.problem.clone().map_or(Look::Same, Look::Bad);
        }
        self.pending = Some(Seen {
            id,
            text: text.clone(),
            racy,
            problem: None,
        });
        Look::New { path, text }
    }

    /// Records what parsing the `Look::New` content gave; a problem is printed.
    pub fn outcome(&mut self, problem: Option<String>) {
        if let Some(msg) = &problem {
            self.complain(msg.clone());
        } else {
            self.last_complaint = None;
        }
        if let Some(mut seen) = self.pending.take() {
            seen.problem = problem;
            self.seen = Some(seen);
        }
    }

    /// Prints `msg` on stderr unless it was the last thing printed.
    fn complain(&mut self, msg: String) -> Look {
        if self.last_complaint.as_deref() != Some(msg.as_str()) {
            let _ = writeln!(std::io::stderr(), "fake-nvml: {msg}");
            self.last_complaint = Some(msg.clone());
        }
        Look::Bad(msg)
    }
}

fn is_recent(mtime: Option<SystemTime>) -> bool {
    mtime.is_none_or(|t| {
        SystemTime::now()
            .duration_since(t)
            .map_or(true, |age| age < RACY_WINDOW)
    })
}
