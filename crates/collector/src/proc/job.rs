//! Jobs: a GPU-holding process and its descendants, found by walking
//! `/proc/<pid>/task/<tid>/children`, so the cost grows with the jobs'
//! processes and threads only, never with the rest of the host.

use std::collections::{HashSet, VecDeque};
use std::path::Path;

use procfs::process::{Io, Stat};

use super::children::ChildrenCache;
use super::open_files::OpenFiles;
use super::read::Buffer;
use super::{ProcReader, cgroup, job_value, output, vanished};
use crate::sample::{
    Attribution, ErrorCounts, IoCounters, JobSample, ProcessId, ProcessSample, ThreadSample,
};

pub(super) fn read_jobs(
    reader: &ProcReader,
    holders: &[(u32, Vec<u32>)],
    errors: &mut ErrorCounts,
    cache: &mut ChildrenCache,
    files: &mut OpenFiles,
) -> Vec<JobSample> {
    let holder_pids: HashSet<u32> = holders.iter().map(|(pid, _)| *pid).collect();
    let mut read = HashSet::new();
    let mut buf = Buffer::default();
    holders
        .iter()
        .filter(|(pid, _)| read.insert(*pid))
        .filter_map(|(pid, gpus)| {
            let mut walk = Walk {
                reader,
                errors: &mut *errors,
                buf: &mut buf,
                cache: &mut *cache,
                files: &mut *files,
            };
            walk.job(*pid, gpus, &holder_pids)
        })
        .collect()
}

/// What one walk over the jobs carries along.
struct Walk<'a> {
    reader: &'a ProcReader,
    errors: &'a mut ErrorCounts,
    buf: &'a mut Buffer,
    cache: &'a mut ChildrenCache,
    files: &'a mut OpenFiles,
}

impl Walk<'_> {
    fn job(&mut self, pid: u32, gpus: &[u32], holders: &HashSet<u32>) -> Option<JobSample> {
        let dir = self.reader.root().join(pid.to_string());
        let (leader, children) = self.process(&dir, None)?;
        let attribution = unless_exited(&dir, self.errors, self.buf, |e, buf| {
            read_attribution(&dir, e, buf)
        });
        let root = self.reader.root();
        let output = unless_exited(&dir, self.errors, self.buf, |e, _| {
            output::read_output(root, pid, e)
        });
        let descendants = self.descendants(pid, children, holders);
        Some(JobSample {
            gpus: gpus.to_vec(),
            leader,
            descendants,
            attribution,
            stdout_bytes: output.stdout_bytes,
            stderr_bytes: output.stderr_bytes,
            output_modified_seconds: output.modified_seconds,
        })
    }

    /// Breadth-first walk below the leader. Stops at processes that hold a
    /// GPU context themselves (they are their own job), and reads every pid
    /// at most once, so a pid reused into a loop cannot make the walk cycle.
    fn descendants(
        &mut self,
        leader: u32,
        children: Vec<u32>,
        holders: &HashSet<u32>,
    ) -> Vec<ProcessSample> {
        let mut seen = HashSet::from([leader]);
        let mut queue: VecDeque<(u32, u32)> = children.into_iter().map(|c| (c, leader)).collect();
        let mut descendants = Vec::new();
        while let Some((pid, parent)) = queue.pop_front() {
            if holders.contains(&pid) || !seen.insert(pid) {
                continue;
            }
            let dir = self.reader.root().join(pid.to_string());
            let Some((sample, children)) = self.process(&dir, Some(parent)) else {
                continue;
            };
            queue.extend(children.into_iter().map(|c| (c, pid)));
            descendants.push(sample);
        }
        descendants
    }

    /// One process (its `/proc/<pid>` directory `dir`) with its threads, and
    /// the pids of its children (from every thread). `None` when it is gone,
    /// when its `stat` cannot be read, or when its parent is not
    /// `expected_parent` (the pid was reused outside the job).
    fn process(
        &mut self,
        dir: &Path,
        expected_parent: Option<u32>,
    ) -> Option<(ProcessSample, Vec<u32>)> {
        let reader = self.reader;
        let stat: Stat = job_value(
            self.buf.parse_kept(self.files, &dir.join("stat")),
            "stat",
            self.errors,
        )?;
        let ppid = u32::try_from(stat.ppid).unwrap_or(0);
        if expected_parent.is_some_and(|parent| parent != ppid) {
            return None;
        }
        let pid = u32::try_from(stat.pid).unwrap_or(0);
        let cached = self.cache.get(pid, stat.starttime);
        let (threads, children) = if stat.num_threads == 1 {
            // One thread: it is the process; no need to list the task directory.
            let thread = ThreadSample {
                tid: pid,
                name: stat.comm.clone(),
                state: stat.state,
                cpu_seconds: reader.ticks_to_seconds(stat.utime.saturating_add(stat.stime)),
            };
            let children = cached.clone().unwrap_or_else(|| {
                let path = dir.join(format!("task/{pid}/children"));
                job_value(self.buf.pids(&path), "thread children", self.errors).unwrap_or_default()
            });
            (vec![thread], children)
        } else {
            let (threads, children) = self.threads(dir, cached.is_none());
            (threads, cached.clone().unwrap_or(children))
        };
        if cached.is_none() {
            self.cache.put(pid, stat.starttime, &children);
        }
        let files = &mut *self.files;
        let io = unless_exited(dir, self.errors, self.buf, |e, buf| {
            job_value(buf.parse_kept::<Io>(files, &dir.join("io")), "io", e)
        });
        let io = io.map(|io| IoCounters {
            rchar: io.rchar,
            wchar: io.wchar,
            read_bytes: io.read_bytes,
            write_bytes: io.write_bytes,
        });
        let sample = ProcessSample {
            id: ProcessId {
                pid,
                start_ticks: stat.starttime,
            },
            ppid,
            comm: stat.comm,
            state: stat.state,
            start_time_seconds: reader.boot_time_seconds as f64
                + reader.ticks_to_seconds(stat.starttime),
            cpu_seconds: reader.ticks_to_seconds(stat.utime.saturating_add(stat.stime)),
            rss_bytes: stat.rss.saturating_mul(reader.page_size_bytes),
            threads,
            io,
        };
        Some((sample, children))
    }

    /// Every thread's `stat`, in tid order, and (when `with_children`) the
    /// children listed by every thread: a child belongs to the thread that
    /// forked it.
    fn threads(&mut self, dir: &Path, with_children: bool) -> (Vec<ThreadSample>, Vec<u32>) {
        let task_dir = dir.join("task");
        let listing = match std::fs::read_dir(&task_dir) {
            Ok(listing) => listing,
            Err(e) => {
                job_value::<()>(
                    Err(procfs::ProcError::from(e)),
                    "task directory",
                    self.errors,
                );
                return (Vec::new(), Vec::new());
            }
        };
        let mut tids: Vec<u32> = listing
            .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
            .collect();
        tids.sort_unstable();
        let mut threads = Vec::with_capacity(tids.len());
        let mut children = Vec::new();
        let mut path = task_dir;
        for tid in tids {
            path.push(tid.to_string());
            path.push("stat");
            // A thread that exits between the listing and the read is skipped.
            if let Some(stat) = job_value::<Stat>(
                self.buf.parse_kept(self.files, &path),
                "thread stat",
                self.errors,
            ) {
                threads.push(ThreadSample {
                    tid,
                    name: stat.comm,
                    state: stat.state,
                    cpu_seconds: self
                        .reader
                        .ticks_to_seconds(stat.utime.saturating_add(stat.stime)),
                });
            }
            if with_children {
                path.set_file_name("children");
                if let Some(pids) = job_value(self.buf.pids(&path), "thread children", self.errors)
                {
                    children.extend(pids);
                }
            }
            path.pop();
            path.pop();
        }
        (threads, children)
    }
}

/// Runs a read whose failures count only while the process is alive: once
/// it is a zombie, its `io` and `fd/*` deny access to readers other than root.
fn unless_exited<T>(
    dir: &Path,
    errors: &mut ErrorCounts,
    buf: &mut Buffer,
    read: impl FnOnce(&mut ErrorCounts, &mut Buffer) -> T,
) -> T {
    let mut failures = ErrorCounts::default();
    let value = read(&mut failures, buf);
    if failures != ErrorCounts::default() && !exited(dir, buf) {
        errors.merge(&failures);
    }
    value
}

/// The process is a zombie, dead, or gone (checked only after a failure).
fn exited(dir: &Path, buf: &mut Buffer) -> bool {
    match buf.parse::<Stat>(&dir.join("stat")) {
        Ok(stat) => matches!(stat.state, 'Z' | 'X' | 'x'),
        Err(e) => vanished(&e),
    }
}

fn read_attribution(dir: &Path, errors: &mut ErrorCounts, buf: &mut Buffer) -> Attribution {
    let path = dir.join("cgroup");
    let text = buf
        .read(&path)
        .map_err(procfs::ProcError::from)
        .map(|bytes| String::from_utf8_lossy(bytes).into_owned());
    job_value(text, "cgroup", errors)
        .map(|text| cgroup::parse_attribution(&text))
        .unwrap_or_default()
}
