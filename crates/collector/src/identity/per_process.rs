//! A value read once per job leader (pid and start time) and kept while the
//! leader is seen: what its environment or `status` said does not change
//! (or is taken as it was when it first held a GPU).

use std::collections::HashMap;

#[derive(Debug, Clone)]
pub struct PerProcess<T> {
    sample: u64,
    /// pid -> (start ticks, the value, sample last used)
    by_pid: HashMap<u32, (u64, T, u64)>,
}

impl<T> Default for PerProcess<T> {
    fn default() -> Self {
        PerProcess {
            sample: 0,
            by_pid: HashMap::new(),
        }
    }
}

impl<T: Clone> PerProcess<T> {
    /// Starts a sample: forgets the leaders not seen in the previous one.
    pub fn begin(&mut self) {
        let previous = self.sample;
        self.by_pid.retain(|_, (_, _, used)| *used == previous);
        self.sample += 1;
    }

    /// The value kept for `pid` started at `start_ticks`, or `read()`'s,
    /// kept from now on.
    pub fn get(&mut self, pid: u32, start_ticks: u64, read: impl FnOnce() -> T) -> T {
        let sample = self.sample;
        if let Some((start, known, used)) = self.by_pid.get_mut(&pid)
            && *start == start_ticks
        {
            *used = sample;
            return known.clone();
        }
        let value = read();
        self.by_pid
            .insert(pid, (start_ticks, value.clone(), sample));
        value
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.by_pid.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_once_per_process_and_forgotten_when_gone() {
        let mut kept = PerProcess::default();
        let mut reads = 0;
        for _ in 0..3 {
            kept.begin();
            assert_eq!(
                kept.get(7, 100, || {
                    reads += 1;
                    "a"
                }),
                "a"
            );
        }
        assert_eq!(reads, 1);
        kept.begin();
        assert_eq!(kept.get(7, 200, || "b"), "b", "a reused pid is read again");
        kept.begin();
        kept.begin();
        assert_eq!(kept.len(), 0);
    }
}
