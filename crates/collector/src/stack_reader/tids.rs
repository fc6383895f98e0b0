//! Linux tids as py-spy reports them (from the target's own PID namespace,
//! `PyThreadState.native_thread_id`) to the tids of the reader's `/proc`.
//! A containerised job's threads carry both in the `NSpid:` line of
//! `/proc/<pid>/task/<tid>/status`: the host's first, the innermost last.

use std::collections::{HashMap, HashSet};
use std::path::Path;

/// The ids in a `status` file's `NSpid:` line, outermost first.
pub fn nspid(status: &str) -> Vec<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .map(|ids| {
            ids.split_whitespace()
                .filter_map(|i| i.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Maps the target's own tids to the reader's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TidMap {
    /// None: the target shares the reader's PID namespace.
    inner: Option<HashMap<u32, u32>>,
}

impl TidMap {
    /// From each thread's reader-side tid and its `status` text.
    pub fn from_statuses<'a>(threads: impl IntoIterator<Item = (u32, &'a str)>) -> TidMap {
        let mut map = HashMap::new();
        let mut nested = false;
        for (tid, status) in threads {
            let ids = nspid(status);
            nested |= ids.len() > 1;
            if let Some(inner) = ids.last() {
                map.insert(*inner, tid);
            }
        }
        TidMap {
            inner: nested.then_some(map),
        }
    }

    /// Reads `root/<pid>/task/*/status`. A process in the reader's own
    /// namespace costs one read.
    pub fn read(root: &Path, pid: u32) -> TidMap {
        let own = std::fs::read_to_string(root.join(pid.to_string()).join("status"))
            .map(|s| nspid(&s).len() > 1)
            .unwrap_or(false);
        if !own {
            return TidMap::default();
        }
        let task = root.join(pid.to_string()).join("task");
        let statuses: Vec<(u32, String)> = std::fs::read_dir(&task)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let tid = e.file_name().to_str()?.parse().ok()?;
                Some((tid, std::fs::read_to_string(e.path().join("status")).ok()?))
            })
            .collect();
        TidMap::from_statuses(statuses.iter().map(|(t, s)| (*t, s.as_str())))
    }

    /// The target's tids as it numbers them, and its main thread's: what a
    /// thread descriptor in its memory holds (see `pthread.rs`).
    pub fn own_tids(&self, root: &Path, pid: u32) -> (HashSet<u32>, u32) {
        match &self.inner {
            Some(map) => {
                let main = map
                    .iter()
                    .find_map(|(inner, host)| (*host == pid).then_some(*inner))
                    .unwrap_or(0);
                (map.keys().copied().collect(), main)
            }
            None => {
                let tids = std::fs::read_dir(root.join(pid.to_string()).join("task"))
                    .into_iter()
                    .flatten()
                    .flatten()
                    .filter_map(|e| e.file_name().to_str()?.parse().ok())
                    .collect();
                (tids, pid)
            }
        }
    }

    pub fn is_identity(&self) -> bool {
        self.inner.is_none()
    }

    /// The reader-side tid of the target's `tid`, if known.
    pub fn host_tid(&self, tid: u32) -> Option<u32> {
        match &self.inner {
            None => Some(tid),
            Some(map) => map.get(&tid).copied(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nspid_lists_every_level() {
        assert_eq!(
            nspid("Name:\tpython3\nNSpid:\t4242\t17\nNSpgid:\t1\n"),
            vec![4242, 17]
        );
        assert_eq!(nspid("NSpid:\t99\n"), vec![99]);
        assert!(nspid("Name:\told kernel\n").is_empty());
    }

    #[test]
    fn a_containerised_job_maps_its_tids_to_the_hosts() {
        let map = TidMap::from_statuses([(4242, "NSpid:\t4242\t1\n"), (4250, "NSpid:\t4250\t9\n")]);
        assert!(!map.is_identity());
        assert_eq!(map.host_tid(1), Some(4242));
        assert_eq!(map.host_tid(9), Some(4250));
        assert_eq!(
            map.host_tid(4250),
            None,
            "a host tid is not a namespaced one"
        );
    }

    #[test]
    fn the_same_namespace_maps_each_tid_to_itself() {
        let map = TidMap::from_statuses([(10, "NSpid:\t10\n"), (11, "NSpid:\t11\n")]);
        assert!(map.is_identity());
        assert_eq!(map.host_tid(12), Some(12));
    }

    #[test]
    fn reads_a_nested_task_tree() {
        let dir = tempfile::tempdir().unwrap();
        for (tid, ns) in [(300, 1), (301, 2)] {
            let t = dir.path().join("300/task").join(tid.to_string());
            std::fs::create_dir_all(&t).unwrap();
            std::fs::write(t.join("status"), format!("NSpid:\t{tid}\t{ns}\n")).unwrap();
        }
        std::fs::write(dir.path().join("300/status"), "NSpid:\t300\t1\n").unwrap();
        let map = TidMap::read(dir.path(), 300);
        assert_eq!(map.host_tid(2), Some(301));
        // What the job's own memory holds: its own numbers, main thread 1.
        assert_eq!(map.own_tids(dir.path(), 300), ([1, 2].into(), 1));
        let identity = TidMap::default();
        assert_eq!(identity.own_tids(dir.path(), 300), ([300, 301].into(), 300));
        assert_eq!(TidMap::read(dir.path(), 999), TidMap::default());
    }
}
