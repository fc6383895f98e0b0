//! What one read of a job's stacks, and one burst of reads, may take. A job
//! can write anything into its own interpreter's structures, so what py-spy
//! hands back is cut to these budgets before it is kept, and the cut is
//! named, never hidden.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use super::raw::RawFrame;

/// Per read and per burst. The defaults are well above what real training
/// jobs need (docs/security.md gives the figures) and far below what a
/// hostile job could make py-spy copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Budgets {
    /// Python threads kept from one read.
    pub threads: usize,
    /// Frames kept per thread, leaf first.
    pub frames: usize,
    /// Characters kept of a function or file name.
    pub name_chars: usize,
    /// Bytes of names kept from one read.
    pub read_bytes: usize,
    /// Bytes of names kept over a burst; the burst ends there.
    pub burst_bytes: usize,
}

impl Default for Budgets {
    fn default() -> Self {
        Budgets {
            threads: 256,
            frames: 512,
            name_chars: 256,
            read_bytes: 1 << 20,
            burst_bytes: 16 << 20,
        }
    }
}

/// Which budget a read or a burst ran into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    /// More Python threads than the read keeps.
    Threads,
    /// A stack deeper than the read keeps (or than py-spy walks: 4,096).
    Frames,
    /// A function or file name longer than the read keeps.
    NameLength,
    /// A read's names over its byte budget.
    ReadBytes,
    /// The burst's names over its byte budget: the burst ended early.
    BurstBytes,
    /// The thread list leads back to a thread already read.
    ThreadCycle,
    /// A read that ran past its time budget (the reader was stopped).
    ReadTime,
    /// A read that needed more memory than the reader may have.
    Memory,
}

impl Limit {
    /// The budget's name in words, for evidence.
    pub fn words(self, budgets: &Budgets) -> String {
        match self {
            Limit::Threads => format!("the thread budget ({} threads a read)", budgets.threads),
            Limit::Frames => format!("the frame budget ({} frames a thread)", budgets.frames),
            Limit::NameLength => {
                format!("the name budget ({} characters a name)", budgets.name_chars)
            }
            Limit::ReadBytes => format!(
                "the read's byte budget ({} KiB of names)",
                budgets.read_bytes >> 10
            ),
            Limit::BurstBytes => format!(
                "the burst's byte budget ({} MiB of names)",
                budgets.burst_bytes >> 20
            ),
            Limit::ThreadCycle => "a thread list that loops back on itself".to_owned(),
            Limit::ReadTime => "the read time budget".to_owned(),
            Limit::Memory => "the reader's memory budget".to_owned(),
        }
    }
}

/// One thread as py-spy returned it, before the cut.
pub struct Found {
    /// The interpreter's own id of the thread (a pthread id).
    pub python_id: u64,
    pub owns_gil: bool,
    /// Leaf first.
    pub frames: Vec<RawFrame>,
}

/// `name` cut to `chars` characters, with `…` where it was cut.
fn cut_name(name: &mut String, chars: usize, hit: &mut HashSet<Limit>) {
    if let Some((at, _)) = name.char_indices().nth(chars) {
        name.truncate(at);
        name.push('…');
        hit.insert(Limit::NameLength);
    }
}

/// Cuts one read to the budgets: threads in the order the interpreter
/// lists them (the one holding the GIL first), each thread once (a thread
/// met again means the list loops: the rest is dropped), the leaf-most
/// frames, names cut, and no more bytes of names than a read may keep.
/// Returns the threads kept and the limits met.
pub fn cut(found: Vec<Found>, budgets: &Budgets) -> (Vec<Found>, HashSet<Limit>) {
    let mut hit = HashSet::new();
    let mut seen = HashSet::new();
    let mut unique = Vec::with_capacity(found.len().min(budgets.threads));
    for thread in found {
        if !seen.insert(thread.python_id) {
            hit.insert(Limit::ThreadCycle);
            break;
        }
        unique.push(thread);
    }
    // The GIL holder is the one most worth keeping.
    if let Some(at) = unique.iter().position(|t| t.owns_gil) {
        let gil = unique.remove(at);
        unique.insert(0, gil);
    }
    if unique.len() > budgets.threads {
        unique.truncate(budgets.threads);
        hit.insert(Limit::Threads);
    }
    let mut bytes = 0usize;
    let mut kept = Vec::with_capacity(unique.len());
    for mut thread in unique {
        if thread.frames.len() > budgets.frames {
            thread.frames.truncate(budgets.frames);
            hit.insert(Limit::Frames);
        }
        for frame in &mut thread.frames {
            cut_name(&mut frame.function, budgets.name_chars, &mut hit);
            cut_name(&mut frame.file, budgets.name_chars, &mut hit);
        }
        let size: usize = thread
            .frames
            .iter()
            .map(|f| f.function.len() + f.file.len())
            .sum();
        if bytes + size > budgets.read_bytes {
            hit.insert(Limit::ReadBytes);
            break;
        }
        bytes += size;
        kept.push(thread);
    }
    (kept, hit)
}

/// Bytes of names in a read, as counted against the burst's budget.
pub fn text_bytes(frames: &[RawFrame]) -> usize {
    frames.iter().map(|f| f.function.len() + f.file.len()).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(name: &str) -> RawFrame {
        RawFrame {
            function: name.into(),
            file: "data.py".into(),
            line: 1,
            library: false,
        }
    }

    fn thread(id: u64, depth: usize) -> Found {
        Found {
            python_id: id,
            owns_gil: false,
            frames: (0..depth).map(|i| frame(&format!("f{i}"))).collect(),
        }
    }

    #[test]
    fn an_ordinary_read_is_kept_whole() {
        let (kept, hit) = cut(vec![thread(1, 30), thread(2, 5)], &Budgets::default());
        assert!(hit.is_empty());
        assert_eq!(kept.len(), 2);
        assert_eq!(kept[0].frames.len(), 30);
    }

    #[test]
    fn a_thread_met_again_ends_the_list() {
        let found = vec![thread(1, 3), thread(2, 3), thread(1, 3), thread(2, 3)];
        let (kept, hit) = cut(found, &Budgets::default());
        assert_eq!(kept.iter().map(|t| t.python_id).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(hit, HashSet::from([Limit::ThreadCycle]));
    }

    #[test]
    fn threads_frames_and_names_are_cut_to_their_budgets() {
        let budgets = Budgets {
            threads: 2,
            frames: 4,
            name_chars: 8,
            ..Budgets::default()
        };
        let mut found: Vec<Found> = (0..5).map(|i| thread(i, 10)).collect();
        found[3].owns_gil = true;
        found[3].frames[0].function = "ä".repeat(20);
        let (kept, hit) = cut(found, &budgets);
        assert_eq!(kept.iter().map(|t| t.python_id).collect::<Vec<_>>(), [3, 0]);
        assert!(kept.iter().all(|t| t.frames.len() == 4));
        assert_eq!(kept[0].frames[0].function, format!("{}…", "ä".repeat(8)));
        assert_eq!(
            hit,
            HashSet::from([Limit::Threads, Limit::Frames, Limit::NameLength])
        );
    }

    #[test]
    fn a_read_keeps_no_more_bytes_than_its_budget() {
        let budgets = Budgets {
            read_bytes: 1000,
            ..Budgets::default()
        };
        // Each thread: 50 frames of about 9 bytes.
        let (kept, hit) = cut((0..10).map(|i| thread(i, 50)).collect(), &budgets);
        assert!(kept.len() < 10 && !kept.is_empty());
        let total: usize = kept.iter().map(|t| text_bytes(&t.frames)).sum();
        assert!(total <= 1000, "{total}");
        assert_eq!(hit, HashSet::from([Limit::ReadBytes]));
    }
}
