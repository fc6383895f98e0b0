//! Which processes a job's processes forked: read from every thread's
//! `children` file, then reused for a few samples. Children change when a
//! job starts or stops workers, rarely from one second to the next, and these
//! reads are a third of a sample's `/proc` cost. A new worker is found within
//! `REFRESH_SAMPLES` samples; one that exits disappears at once (its own
//! files are read every sample).

use std::collections::HashMap;

/// Samples between two reads of a process's `children` files.
pub const REFRESH_SAMPLES: u64 = 5;

#[derive(Debug, Clone, Default)]
pub struct ChildrenCache {
    sample: u64,
    /// (pid, start ticks) -> (sample read at, sample last used, children)
    entries: HashMap<(u32, u64), (u64, u64, Vec<u32>)>,
}

impl ChildrenCache {
    /// Starts a sample: forgets processes not seen in the previous one.
    pub fn begin(&mut self) {
        let previous = self.sample;
        self.entries.retain(|_, (_, used, _)| *used == previous);
        self.sample += 1;
    }

    /// The process's children if they were read recently enough.
    pub fn get(&mut self, pid: u32, start_ticks: u64) -> Option<Vec<u32>> {
        let sample = self.sample;
        let (read_at, used, children) = self.entries.get_mut(&(pid, start_ticks))?;
        if sample - *read_at >= REFRESH_SAMPLES {
            return None;
        }
        *used = sample;
        Some(children.clone())
    }

    pub fn put(&mut self, pid: u32, start_ticks: u64, children: &[u32]) {
        self.entries.insert(
            (pid, start_ticks),
            (self.sample, self.sample, children.to_vec()),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_are_reused_for_a_few_samples_then_read_again() {
        let mut cache = ChildrenCache::default();
        cache.begin();
        assert_eq!(cache.get(10, 1), None);
        cache.put(10, 1, &[11, 12]);
        for _ in 1..REFRESH_SAMPLES {
            cache.begin();
            assert_eq!(cache.get(10, 1), Some(vec![11, 12]));
        }
        cache.begin();
        assert_eq!(
            cache.get(10, 1),
            None,
            "refreshed every REFRESH_SAMPLES samples"
        );
    }

    #[test]
    fn a_reused_pid_or_a_process_gone_for_a_sample_is_read_again() {
        let mut cache = ChildrenCache::default();
        cache.begin();
        cache.put(10, 1, &[11]);
        cache.begin();
        assert_eq!(cache.get(10, 2), None, "same pid, other start time");
        cache.begin();
        cache.begin();
        assert_eq!(cache.get(10, 1), None, "not seen in the previous sample");
    }
}
