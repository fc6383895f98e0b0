//! Jobs: a GPU-holding process and its descendants, found by walking
//! `/proc/<pid>/task/<tid>/children`, so the cost grows with the jobs'
//! processes and threads only, never with the rest of the host.

use std::collections::{HashSet, VecDeque};
use std::path::{Path, PathBuf};

use super::children::{ChildrenCache, parse_last_pid};
use super::gone::job_value;
use super::mount::Mount;
use super::open_files::{Kind, OpenFiles};
use super::read::Buffer;
use super::stat::{Schedstat, StatFields, parse_io, parse_schedstat, parse_stat};
use super::tasks::{Activity, Tasks};
use super::{libraries, output, singles};
use crate::identity::{cgroup, rank, user};
use crate::sample::{ErrorCounts, JobSample, ProcessId, ProcessSample, ThreadSample};

/// What the job reader keeps from one sample to the next.
#[derive(Debug, Clone, Default)]
pub(super) struct Memory {
    pub children: ChildrenCache,
    pub attributions: cgroup::Attributions,
    pub ranks: rank::Ranks,
    pub users: user::Users,
    pub libraries: libraries::Libraries,
    pub files: OpenFiles,
    pub tasks: Tasks,
    pub singles: singles::Singles,
    /// Threads' CPU time and run counts come from `schedstat` (a real procfs
    /// whose kernel keeps the accounting), not from `stat`.
    pub schedstat: bool,
}

/// Reads the jobs of `holders`; the threads of the jobs whose leader is in
/// `carry` are carried as last read where they can be (see thread_reads.rs).
pub(super) fn read_jobs(
    reader: &Mount,
    holders: &[(u32, Vec<u32>)],
    carry: &[u32],
    errors: &mut ErrorCounts,
    memory: &mut Memory,
) -> Vec<JobSample> {
    let holder_pids: HashSet<u32> = holders.iter().map(|(pid, _)| *pid).collect();
    let mut read = HashSet::new();
    let mut buf = Buffer::default();
    // Before any `children` file: the last pid given out (see children.rs);
    // not read on a host with no job.
    let last_pid = if holders.is_empty() {
        None
    } else {
        let path = || reader.root().join("loadavg");
        let loadavg = buf.kept(&mut memory.files, 0, Kind::Loadavg, path);
        loadavg.ok().and_then(|(text, _)| parse_last_pid(text))
    };
    memory.children.begin(last_pid);
    holders
        .iter()
        .filter(|(pid, _)| read.insert(*pid))
        .filter_map(|(pid, gpus)| {
            let mut walk = Walk {
                reader,
                errors: &mut *errors,
                buf: &mut buf,
                memory: &mut *memory,
                carry: carry.contains(pid),
                carried: false,
                read_anyway: false,
            };
            let job = walk.job(*pid, gpus, &holder_pids);
            if !(walk.read_anyway && walk.carried) {
                return job.map(|mut j| {
                    j.threads_carried = walk.carried && !walk.read_anyway;
                    j
                });
            }
            // A process of a carried job had to be read (new, or its thread
            // count changed) after others were carried: the whole job is
            // read, so that all its threads' times are from one moment.
            walk.carry = false;
            walk.job(*pid, gpus, &holder_pids)
        })
        .collect()
}

/// What one walk over the jobs carries along.
struct Walk<'a> {
    reader: &'a Mount,
    errors: &'a mut ErrorCounts,
    buf: &'a mut Buffer,
    memory: &'a mut Memory,
    /// This job's threads are carried as last read, not read.
    carry: bool,
    /// Threads of the job's processes were carried.
    carried: bool,
    /// A process of the carried job could not be carried: the rest of the
    /// job is read.
    read_anyway: bool,
}

/// The fields of a `stat` line the reader keeps, owned.
struct Stat {
    pid: u32,
    comm: String,
    state: char,
    ppid: u32,
    cpu_ticks: u64,
    num_threads: u64,
    starttime: u64,
    rss_pages: u64,
}

impl From<StatFields<'_>> for Stat {
    fn from(s: StatFields<'_>) -> Self {
        Stat {
            pid: s.pid,
            comm: s.comm_string(),
            state: s.state,
            ppid: s.ppid,
            cpu_ticks: s.cpu_ticks,
            num_threads: s.num_threads,
            starttime: s.starttime,
            rss_pages: s.rss_pages,
        }
    }
}

impl Walk<'_> {
    fn job(&mut self, pid: u32, gpus: &[u32], holders: &HashSet<u32>) -> Option<JobSample> {
        let dir = self.reader.root().join(pid.to_string());
        let (leader, children) = self.process(pid, &dir, None)?;
        let memory = &mut *self.memory;
        let mut attribution = unless_exited(&dir, self.errors, self.buf, |e, buf| {
            let path = || dir.join("cgroup");
            let text = buf.kept(&mut memory.files, pid, Kind::Cgroup, path);
            job_value(text, "cgroup", e)
                .map(|(text, _)| memory.attributions.get(pid, text))
                .unwrap_or_default()
        });
        let root = self.reader.root();
        let env = memory.ranks.get(root, pid, leader.id.start_ticks);
        let rank = env.rank;
        attribution.slurm_account = env.slurm_account;
        attribution.user =
            memory
                .users
                .get(root, pid, leader.id.start_ticks, attribution.slurm_uid);
        let frameworks = memory.libraries.get(root, pid, leader.id.start_ticks);
        let output = unless_exited(&dir, self.errors, self.buf, |e, _| {
            output::read_output(root, pid, e)
        });
        let descendants = self.descendants(pid, children, holders);
        Some(JobSample {
            gpus: gpus.to_vec(),
            leader,
            descendants,
            attribution,
            rank,
            frameworks,
            stdout_bytes: output.stdout_bytes,
            stderr_bytes: output.stderr_bytes,
            output_modified_seconds: output.modified_seconds,
            threads_carried: false,
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
            let Some((sample, children)) = self.process(pid, &dir, Some(parent)) else {
                continue;
            };
            queue.extend(children.into_iter().map(|c| (c, pid)));
            descendants.push(sample);
        }
        descendants
    }

    /// A kept file's `stat` fields; `None` (counted unless the process or
    /// thread is gone) when it cannot be read or parsed.
    fn stat(&mut self, id: u32, kind: Kind, path: impl FnOnce() -> PathBuf) -> Option<Stat> {
        let what = if kind == Kind::ProcessStat {
            "stat"
        } else {
            "thread stat"
        };
        let bytes = job_value(
            self.buf.kept(&mut self.memory.files, id, kind, path),
            what,
            self.errors,
        )?
        .0;
        match parse_stat(bytes) {
            Some(fields) => Some(fields.into()),
            None => {
                job_value::<()>(
                    Err(procfs::ProcError::Other(format!(
                        "{what} of {id} does not parse"
                    ))),
                    what,
                    self.errors,
                );
                None
            }
        }
    }

    /// One process (its `/proc/<pid>` directory `dir`) with its threads, and
    /// the pids of its children (from every thread). `None` when it is gone,
    /// when its `stat` cannot be read, or when its parent is not
    /// `expected_parent` (the pid was reused outside the job).
    fn process(
        &mut self,
        pid: u32,
        dir: &Path,
        expected_parent: Option<u32>,
    ) -> Option<(ProcessSample, Vec<u32>)> {
        let reader = self.reader;
        let mut sched = None;
        if self.memory.schedstat && self.memory.singles.checks(pid, self.memory.tasks.due(pid)) {
            match self.still_asleep(pid, dir, expected_parent) {
                Ok(carried) => return Some(carried),
                Err(read) => sched = read,
            }
        }
        let stat = self.stat(pid, Kind::ProcessStat, || dir.join("stat"))?;
        if expected_parent.is_some_and(|parent| parent != stat.ppid) {
            return None;
        }
        let pid = stat.pid;
        let files = &mut self.memory.files;
        let io = unless_exited(dir, self.errors, self.buf, |e, buf| {
            let bytes = job_value(buf.kept(files, pid, Kind::Io, || dir.join("io")), "io", e)?.0;
            let io = parse_io(bytes)
                .ok_or_else(|| procfs::ProcError::Other(format!("io of {pid} does not parse")));
            job_value(io, "io", e)
        });
        let cached = self.memory.children.get(pid, stat.starttime);
        let (threads, children) = if stat.num_threads == 1 {
            // One thread: it is the process; no need to list the task directory.
            let thread = ThreadSample {
                tid: pid,
                name: stat.comm.clone(),
                state: stat.state,
                cpu_seconds: reader.ticks_to_seconds(stat.cpu_ticks),
                wait_seconds: None,
            };
            let children = match cached.clone() {
                Some(children) => children,
                None => self.children(dir, pid),
            };
            (vec![thread], children)
        } else {
            let activity = Activity {
                cpu_ticks: stat.cpu_ticks,
                io,
            };
            let (threads, children) = self.threads(dir, &stat, activity, cached.is_none());
            (threads, cached.clone().unwrap_or(children))
        };
        if cached.is_none() {
            self.memory.children.put(pid, stat.starttime, &children);
        }
        let sample = ProcessSample {
            id: ProcessId {
                pid,
                start_ticks: stat.starttime,
            },
            ppid: stat.ppid,
            comm: stat.comm,
            state: stat.state,
            start_time_seconds: reader.boot_time_seconds as f64
                + reader.ticks_to_seconds(stat.starttime),
            cpu_seconds: reader.ticks_to_seconds(stat.cpu_ticks),
            rss_bytes: stat.rss_pages.saturating_mul(reader.page_size_bytes),
            threads,
            io,
        };
        if self.memory.schedstat {
            self.memory.singles.put(&sample, sched);
        }
        Some((sample, children))
    }

    /// A single-threaded process that did not run since it was last read,
    /// as then, with its children (see singles.rs). `Err` with the
    /// `schedstat` it read, if any, when it is to be read in full.
    #[allow(clippy::result_large_err)]
    fn still_asleep(
        &mut self,
        pid: u32,
        dir: &Path,
        expected_parent: Option<u32>,
    ) -> Result<(ProcessSample, Vec<u32>), Option<Schedstat>> {
        let read = self
            .buf
            .kept(&mut self.memory.files, pid, Kind::Schedstat, || {
                dir.join("schedstat")
            });
        // Any failure (gone, unreadable): the full read says what it is.
        let Ok((bytes, fresh)) = read else {
            return Err(None);
        };
        let sched = parse_schedstat(bytes).ok_or(None)?;
        let process = self
            .memory
            .singles
            .unchanged(pid, sched, fresh)
            .filter(|p| expected_parent.is_none_or(|parent| parent == p.ppid))
            .ok_or(Some(sched))?;
        let start = process.id.start_ticks;
        let children = match self.memory.children.get(pid, start) {
            Some(children) => children,
            None => {
                let children = self.children(dir, pid);
                self.memory.children.put(pid, start, &children);
                children
            }
        };
        Ok((process, children))
    }

    /// The children a thread forked, from its kept `children` file.
    fn children(&mut self, dir: &Path, tid: u32) -> Vec<u32> {
        let path = || dir.join(format!("task/{tid}/children"));
        let pids = self
            .buf
            .kept(&mut self.memory.files, tid, Kind::Children, path)
            .and_then(|(bytes, _)| {
                super::read::parse_pids(bytes)
                    .map_err(|e| procfs::ProcError::Other(format!("children of {tid}: {e}")))
            });
        job_value(pids, "thread children", self.errors).unwrap_or_default()
    }

    /// Every thread, in tid order, and (when `with_children`) the children
    /// listed by every thread: a child belongs to the thread that forked it.
    /// The thread ids listed in an earlier sample are used while they hold
    /// (see tasks.rs); a listed thread that is gone makes a new listing. A
    /// quiet process's threads (see tasks.rs), and those of a job whose
    /// threads are not read this sample (thread_reads.rs), are carried, none
    /// read.
    fn threads(
        &mut self,
        dir: &Path,
        stat: &Stat,
        activity: Activity,
        with_children: bool,
    ) -> (Vec<ThreadSample>, Vec<u32>) {
        let (pid, start) = (stat.pid, stat.starttime);
        let tasks = &mut self.memory.tasks;
        let kept = if self.carry {
            tasks.carried(pid, start, stat.num_threads)
        } else if self.memory.schedstat {
            tasks.quiet(pid, start, stat.num_threads, activity)
        } else {
            None
        };
        if self.carry {
            self.carried |= kept.is_some();
            self.read_anyway |= kept.is_none();
            self.carry = kept.is_some();
        }
        if let Some(threads) = kept {
            let mut children = Vec::new();
            if with_children {
                for thread in &threads {
                    children.extend(self.children(dir, thread.tid));
                }
            }
            return (threads, children);
        }
        let known = self
            .memory
            .tasks
            .listed(pid, start, stat.num_threads)
            .map(<[u32]>::to_vec);
        let reused = known.is_some();
        let Some(tids) = known.or_else(|| self.list_tasks(dir)) else {
            return (Vec::new(), Vec::new());
        };
        let mut threads = Vec::with_capacity(tids.len());
        let mut children = Vec::new();
        let missing =
            self.read_threads(dir, pid, &tids, with_children, &mut threads, &mut children);
        if missing && reused {
            // A listed thread is gone: list again, read the new ones.
            if let Some(listed) = self.list_tasks(dir) {
                let new: Vec<u32> = listed
                    .into_iter()
                    .filter(|tid| tids.binary_search(tid).is_err())
                    .collect();
                self.read_threads(dir, pid, &new, with_children, &mut threads, &mut children);
            }
        }
        if !reused || missing {
            // Listed anew: keep the list when it holds every thread.
            threads.sort_unstable_by_key(|t| t.tid);
            let alive: Vec<u32> = threads.iter().map(|t| t.tid).collect();
            if alive.len() as u64 == stat.num_threads {
                self.memory.tasks.put_list(pid, start, alive);
            }
        }
        if self.memory.schedstat {
            let asleep =
                threads.len() as u64 == stat.num_threads && threads.iter().all(|t| t.state == 'S');
            let activity = asleep.then_some(activity);
            self.memory.tasks.set_asleep(pid, start, activity);
        }
        (threads, children)
    }

    /// Reads the threads `tids` into `threads` (and their children into
    /// `children`); returns whether one of them could not be read.
    fn read_threads(
        &mut self,
        dir: &Path,
        pid: u32,
        tids: &[u32],
        with_children: bool,
        threads: &mut Vec<ThreadSample>,
        children: &mut Vec<u32>,
    ) -> bool {
        let mut missing = false;
        for &tid in tids {
            match self.thread(dir, pid, tid) {
                Some(thread) => threads.push(thread),
                // Gone between the listing and the read: skipped.
                None => missing = true,
            }
            if with_children {
                children.extend(self.children(dir, tid));
            }
        }
        missing
    }

    /// The task directory's thread ids, sorted; `None` (counted unless the
    /// process is gone) when it cannot be listed.
    fn list_tasks(&mut self, dir: &Path) -> Option<Vec<u32>> {
        let listing = match std::fs::read_dir(dir.join("task")) {
            Ok(listing) => listing,
            Err(e) => {
                job_value::<()>(
                    Err(procfs::ProcError::from(e)),
                    "task directory",
                    self.errors,
                );
                return None;
            }
        };
        let mut tids: Vec<u32> = listing
            .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
            .collect();
        tids.sort_unstable();
        Some(tids)
    }

    /// One thread: from its `schedstat` and, when it ran or is new, its
    /// `stat` (see tasks.rs); from its `stat` alone without schedstat.
    /// `None` when it is gone or cannot be read.
    fn thread(&mut self, dir: &Path, pid: u32, tid: u32) -> Option<ThreadSample> {
        let task = || dir.join("task").join(tid.to_string());
        if !self.memory.schedstat {
            let stat = self.stat(tid, Kind::ThreadStat, || task().join("stat"))?;
            let cpu_seconds = self.reader.ticks_to_seconds(stat.cpu_ticks);
            self.memory
                .tasks
                .put_stat_thread(tid, cpu_seconds, &stat.comm, stat.state);
            return Some(ThreadSample {
                tid,
                name: stat.comm,
                state: stat.state,
                cpu_seconds,
                wait_seconds: None,
            });
        }
        let read = self
            .buf
            .kept(&mut self.memory.files, tid, Kind::Schedstat, || {
                task().join("schedstat")
            });
        let (bytes, fresh) = job_value(read, "thread schedstat", self.errors)?;
        let Some(sched) = parse_schedstat(bytes) else {
            let e = procfs::ProcError::Other(format!("schedstat of {tid} does not parse"));
            return job_value(Err(e), "thread schedstat", self.errors);
        };
        let cpu_seconds = sched.cpu_seconds();
        let wait_seconds = Some(sched.wait_seconds());
        if let Some((name, state)) = self.memory.tasks.unchanged(pid, tid, sched, fresh) {
            return Some(ThreadSample {
                tid,
                name: name.to_owned(),
                state,
                cpu_seconds,
                wait_seconds,
            });
        }
        let stat = self.stat(tid, Kind::ThreadStat, || task().join("stat"))?;
        self.memory
            .tasks
            .put_thread(tid, sched, &stat.comm, stat.state);
        Some(ThreadSample {
            tid,
            name: stat.comm,
            state: stat.state,
            cpu_seconds,
            wait_seconds,
        })
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
    match buf.read(&dir.join("stat")) {
        Ok(bytes) => parse_stat(bytes).is_some_and(|s| matches!(s.state, 'Z' | 'X' | 'x')),
        Err(e) => super::gone::io_vanished(&e),
    }
}
