//! Which processes a job's processes forked: read from every thread's
//! `children` file, then reused for a few samples. Children change when a
//! job starts or stops workers, rarely from one second to the next, and these
//! reads are a third of a sample's `/proc` cost. A new worker is found within
//! `REFRESH_SAMPLES` samples; one that exits disappears at once (its own
//! files are read every sample).
//!
//! A new child takes a new pid, and the kernel tells the last pid it gave
//! out (the fifth field of `/proc/loadavg`, in the reader's pid namespace,
//! where every process it can see has a pid). While that has not moved since
//! a process's children were read, no process or thread was made anywhere,
//! so its children are reused for up to `QUIET_REFRESH_SAMPLES` samples. On
//! a host that makes no process for a while, each process's `children`
//! files are read once in that many samples; one that does reads them every
//! `REFRESH_SAMPLES` samples, as before. What comes without a new pid, a
//! process handed to a subreaper inside the job when its parent exits, is
//! found within `QUIET_REFRESH_SAMPLES` samples.

use std::collections::HashMap;

/// Samples between two reads of a process's `children` files.
pub const REFRESH_SAMPLES: u64 = 5;

/// Samples between two reads while no pid was given out.
pub const QUIET_REFRESH_SAMPLES: u64 = 30;

/// A process's children as last read.
#[derive(Debug, Clone)]
struct Entry {
    read_at: u64,
    used: u64,
    /// The last pid given out when they were read.
    last_pid: Option<u64>,
    children: Vec<u32>,
}

#[derive(Debug, Clone, Default)]
pub struct ChildrenCache {
    sample: u64,
    /// The last pid given out, as of the start of this sample.
    last_pid: Option<u64>,
    /// (pid, start ticks) -> what was read
    entries: HashMap<(u32, u64), Entry>,
}

impl ChildrenCache {
    /// Starts a sample: forgets processes not seen in the previous one.
    /// `last_pid` is the last pid the kernel gave out, read before any
    /// `children` file of this sample (`None` where it cannot be read).
    pub fn begin(&mut self, last_pid: Option<u64>) {
        let previous = self.sample;
        self.entries.retain(|_, e| e.used == previous);
        self.sample += 1;
        self.last_pid = last_pid;
    }

    /// The process's children if they were read recently enough.
    pub fn get(&mut self, pid: u32, start_ticks: u64) -> Option<Vec<u32>> {
        let (sample, last_pid) = (self.sample, self.last_pid);
        let e = self.entries.get_mut(&(pid, start_ticks))?;
        let age = sample - e.read_at;
        let no_new_pid = last_pid.is_some() && e.last_pid == last_pid;
        if age >= REFRESH_SAMPLES && !(no_new_pid && age < QUIET_REFRESH_SAMPLES) {
            return None;
        }
        e.used = sample;
        Some(e.children.clone())
    }

    pub fn put(&mut self, pid: u32, start_ticks: u64, children: &[u32]) {
        let entry = Entry {
            read_at: self.sample,
            used: self.sample,
            last_pid: self.last_pid,
            children: children.to_vec(),
        };
        self.entries.insert((pid, start_ticks), entry);
    }
}

/// The last pid given out, from the text of `/proc/loadavg`
/// (`0.12 0.34 0.56 2/345 6789`).
pub fn parse_last_pid(loadavg: &[u8]) -> Option<u64> {
    std::str::from_utf8(loadavg)
        .ok()?
        .split_ascii_whitespace()
        .nth(4)?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_are_reused_for_a_few_samples_then_read_again() {
        let mut cache = ChildrenCache::default();
        cache.begin(None);
        assert_eq!(cache.get(10, 1), None);
        cache.put(10, 1, &[11, 12]);
        for _ in 1..REFRESH_SAMPLES {
            cache.begin(None);
            assert_eq!(cache.get(10, 1), Some(vec![11, 12]));
        }
        cache.begin(None);
        assert_eq!(
            cache.get(10, 1),
            None,
            "refreshed every REFRESH_SAMPLES samples"
        );
    }

    #[test]
    fn a_reused_pid_or_a_process_gone_for_a_sample_is_read_again() {
        let mut cache = ChildrenCache::default();
        cache.begin(None);
        cache.put(10, 1, &[11]);
        cache.begin(None);
        assert_eq!(cache.get(10, 2), None, "same pid, other start time");
        cache.begin(None);
        cache.begin(None);
        assert_eq!(cache.get(10, 1), None, "not seen in the previous sample");
    }

    /// Process 10's children read in a sample with `read_under` as the last
    /// pid; then how many samples with `then` as the last pid reuse them.
    fn reused_for(read_under: Option<u64>, then: Option<u64>) -> u64 {
        let mut cache = ChildrenCache::default();
        cache.begin(read_under);
        cache.put(10, 1, &[11]);
        let mut samples = 0;
        loop {
            cache.begin(then);
            match cache.get(10, 1) {
                Some(children) => assert_eq!(children, vec![11]),
                None => return samples,
            }
            samples += 1;
        }
    }

    #[test]
    fn while_no_pid_is_given_out_children_are_reused_longer() {
        assert_eq!(reused_for(Some(500), Some(500)), QUIET_REFRESH_SAMPLES - 1);
    }

    #[test]
    fn a_pid_given_out_since_the_read_brings_back_the_short_refresh() {
        assert_eq!(reused_for(Some(500), Some(501)), REFRESH_SAMPLES - 1);
        // Unknown (no loadavg): the short refresh.
        assert_eq!(reused_for(None, None), REFRESH_SAMPLES - 1);
        assert_eq!(reused_for(Some(500), None), REFRESH_SAMPLES - 1);

        // Read again after a pid was given out: reused while the new one holds.
        let mut cache = ChildrenCache::default();
        cache.begin(Some(500));
        cache.put(10, 1, &[11]);
        cache.begin(Some(501));
        cache.put(10, 1, &[11, 12]);
        for _ in 0..REFRESH_SAMPLES * 2 {
            cache.begin(Some(501));
            assert_eq!(cache.get(10, 1), Some(vec![11, 12]));
        }
    }

    #[test]
    fn the_last_pid_is_the_fifth_field_of_loadavg() {
        assert_eq!(parse_last_pid(b"0.12 0.34 0.56 2/345 6789\n"), Some(6789));
        assert_eq!(parse_last_pid(b"0.12 0.34 0.56 2/345"), None);
        assert_eq!(parse_last_pid(b"0.12 0.34 0.56 2/345 x"), None);
        assert_eq!(parse_last_pid(b"\xff"), None);
    }
}
