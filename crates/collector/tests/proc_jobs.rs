//! `ProcReader::read_jobs` against fake `/proc` trees built in a temp dir.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;

use collector::proc::ProcReader;
use collector::sample::{ErrorCounts, ErrorSource, IoCounters, JobSample};
use tempfile::TempDir;

const TICKS: u64 = 100;
const PAGE: u64 = 4096;
const BTIME: u64 = 1_700_000_000;
const CONTAINER: &str = "4f6c3d0e9a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5";

/// A fake procfs mount. Every process gets `stat`, `io`, `cgroup` and one
/// `task/<tid>/{stat,children}` per thread, like a real kernel.
struct Tree {
    dir: TempDir,
}

/// A thread: (tid, children forked by that thread).
type Thread<'a> = (u32, &'a [u32]);

impl Tree {
    fn new() -> Tree {
        let dir = TempDir::new().unwrap();
        let stat = format!(
            "cpu  1 0 1 10 0 0 0 0 0 0\ncpu0 1 0 1 10 0 0 0 0 0 0\nctxt 1\nbtime {BTIME}\nprocesses 9\n"
        );
        fs::write(dir.path().join("stat"), stat).unwrap();
        Tree { dir }
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn reader(&self) -> ProcReader {
        ProcReader::with_units(self.root(), TICKS, PAGE).unwrap()
    }

    /// Process: utime 250 + stime 50 ticks, starttime 1000 + pid, rss 10
    /// pages, io rchar = pid. Each thread: utime 100 ticks.
    fn add(&self, pid: u32, ppid: u32, comm: &str, threads: &[Thread]) -> &Self {
        let dir = self.root().join(pid.to_string());
        let start = 1000 + pid as u64;
        let line =
            |id, utime, stime| stat_line(id, comm, ppid, (utime, stime), threads.len(), start);
        write(&dir.join("stat"), &line(pid, 250, 50));
        let io = "wchar: 2\nsyscr: 3\nsyscw: 4\nread_bytes: 5\nwrite_bytes: 6\ncancelled_write_bytes: 0\n";
        write(&dir.join("io"), &format!("rchar: {pid}\n{io}"));
        write(
            &dir.join("cgroup"),
            "0::/user.slice/user-1000.slice/session-4.scope\n",
        );
        for (tid, children) in threads {
            let task = dir.join("task").join(tid.to_string());
            write(&task.join("stat"), &line(*tid, 100, 0));
            let listed: String = children.iter().map(|c| format!("{c} ")).collect();
            write(&task.join("children"), &listed);
        }
        self
    }

    fn path(&self, rel: &str) -> std::path::PathBuf {
        self.root().join(rel)
    }
}

fn write(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

/// A full 52-field `stat` line as Linux 6.x prints it.
fn stat_line(
    pid: u32,
    comm: &str,
    ppid: u32,
    cpu: (u64, u64),
    threads: usize,
    start: u64,
) -> String {
    let (utime, stime) = cpu;
    format!(
        "{pid} ({comm}) S {ppid} {pid} {pid} 0 -1 4194560 1000 0 0 0 {utime} {stime} 0 0 20 0 {threads} 0 \
         {start} 123456789 10 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0 0 0 0 0 0 0 0 0\n"
    )
}

fn pids(job: &JobSample) -> Vec<u32> {
    job.descendants.iter().map(|p| p.id.pid).collect()
}

/// Leader 100 (3 threads) -> children 200, 201 (forked by different
/// threads) -> grandchild 300 under 200. 201 also forked 400, which holds a
/// GPU itself, and lists 999, which has exited (no directory).
fn family() -> Tree {
    let tree = Tree::new();
    tree.add(
        100,
        1,
        "trainer",
        &[(100, &[200]), (101, &[]), (102, &[201])],
    )
    .add(200, 100, "worker", &[(200, &[300])])
    .add(201, 100, "logger", &[(201, &[400, 999]), (205, &[])])
    .add(300, 200, "loader", &[(300, &[])])
    .add(400, 201, "holder", &[(400, &[500])])
    .add(500, 400, "sub", &[(500, &[])]);
    tree
}

#[test]
fn job_is_leader_threads_and_descendants() {
    let tree = family();
    let mut errors = ErrorCounts::default();
    let jobs = tree.reader().read_jobs(&[(100, vec![0, 1])], &mut errors);
    assert_eq!(
        errors,
        ErrorCounts::default(),
        "an exited child is not an error"
    );
    assert_eq!(jobs.len(), 1);
    let job = &jobs[0];
    assert_eq!(job.gpus, vec![0, 1]);

    let leader = &job.leader;
    assert_eq!((leader.id.pid, leader.id.start_ticks), (100, 1100));
    assert_eq!(
        (leader.ppid, leader.comm.as_str(), leader.state),
        (1, "trainer", 'S')
    );
    assert_eq!(leader.start_time_seconds, BTIME as f64 + 11.0);
    assert_eq!(leader.cpu_seconds, 3.0);
    assert_eq!(leader.rss_bytes, 10 * PAGE);
    let tids: Vec<u32> = leader.threads.iter().map(|t| t.tid).collect();
    assert_eq!(tids, vec![100, 101, 102]);
    assert!(
        leader
            .threads
            .iter()
            .all(|t| t.cpu_seconds == 1.0 && t.name == "trainer")
    );
    let io = IoCounters {
        rchar: 100,
        wchar: 2,
        read_bytes: 5,
        write_bytes: 6,
    };
    assert_eq!(leader.io, Some(io));

    // 400 is a holder's pid only if it is listed as one; here it is not.
    assert_eq!(pids(job), vec![200, 201, 300, 400, 500]);
    let logger = &job.descendants[1];
    assert_eq!((logger.ppid, logger.threads.len()), (100, 2));
    assert_eq!(
        job.attribution.systemd_unit.as_deref(),
        Some("session-4.scope")
    );
}

#[test]
fn walk_stops_at_a_descendant_that_holds_a_gpu() {
    let tree = family();
    let mut errors = ErrorCounts::default();
    let holders = [(100, vec![0]), (400, vec![1]), (100, vec![0])];
    let jobs = tree.reader().read_jobs(&holders, &mut errors);
    assert_eq!(jobs.len(), 2, "a holder listed twice is one job");
    assert_eq!(pids(&jobs[0]), vec![200, 201, 300]);
    assert_eq!(
        (jobs[1].leader.id.pid, jobs[1].gpus.clone()),
        (400, vec![1])
    );
    assert_eq!(pids(&jobs[1]), vec![500]);
    assert_eq!(errors, ErrorCounts::default());
}

#[test]
fn missing_holder_is_skipped_silently() {
    let tree = family();
    let mut errors = ErrorCounts::default();
    let jobs = tree
        .reader()
        .read_jobs(&[(4242, vec![0]), (300, vec![1])], &mut errors);
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].leader.id.pid, 300);
    assert_eq!(errors, ErrorCounts::default());
}

#[test]
fn reused_pid_and_cycles_are_not_followed() {
    let tree = Tree::new();
    // 20 lists 30, but 30's parent is 1 (20's child exited, pid 30 was
    // reused); 21 lists the leader and itself.
    tree.add(10, 1, "leader", &[(10, &[20, 21])])
        .add(20, 10, "a", &[(20, &[30])])
        .add(21, 10, "b", &[(21, &[10, 21, 20])])
        .add(30, 1, "stranger", &[(30, &[])]);
    let mut errors = ErrorCounts::default();
    let jobs = tree.reader().read_jobs(&[(10, vec![0])], &mut errors);
    assert_eq!(pids(&jobs[0]), vec![20, 21]);
    assert_eq!(errors, ErrorCounts::default());
}

#[test]
fn comm_with_spaces_and_parentheses() {
    let tree = Tree::new();
    tree.add(7, 1, "my (weird) proc", &[(7, &[8])])
        .add(8, 7, ") x (", &[(8, &[])]);
    let mut errors = ErrorCounts::default();
    let jobs = tree.reader().read_jobs(&[(7, vec![0])], &mut errors);
    let job = &jobs[0];
    assert_eq!(job.leader.comm, "my (weird) proc");
    assert_eq!(job.leader.threads[0].name, "my (weird) proc");
    assert_eq!((job.leader.state, job.leader.ppid), ('S', 1));
    assert_eq!(job.descendants[0].comm, ") x (");
    assert_eq!(errors, ErrorCounts::default());
}

#[test]
fn unreadable_io_is_left_out_and_counted_once() {
    let tree = family();
    let io = tree.path("200/io");
    fs::remove_file(&io).unwrap();
    fs::create_dir(&io).unwrap(); // reading a directory fails, even as root
    let mut errors = ErrorCounts::default();
    let jobs = tree.reader().read_jobs(&[(100, vec![0])], &mut errors);
    let worker = &jobs[0].descendants[0];
    assert_eq!((worker.id.pid, worker.io), (200, None));
    assert_eq!(worker.threads.len(), 1, "the rest of the process is read");
    assert_eq!(pids(&jobs[0]), vec![200, 201, 300, 400, 500]);
    assert_eq!(errors.get(ErrorSource::ProcJob), 1);
}

#[test]
fn zombie_read_failures_are_not_errors() {
    let tree = family();
    let stat = fs::read_to_string(tree.path("200/stat")).unwrap();
    fs::write(tree.path("200/stat"), stat.replace(") S ", ") Z ")).unwrap();
    let io = tree.path("200/io");
    fs::remove_file(&io).unwrap();
    fs::create_dir(&io).unwrap(); // what non-root readers get: a failed read
    let mut errors = ErrorCounts::default();
    let jobs = tree.reader().read_jobs(&[(100, vec![0])], &mut errors);
    let zombie = &jobs[0].descendants[0];
    assert_eq!((zombie.id.pid, zombie.state, zombie.io), (200, 'Z', None));
    assert_eq!(errors, ErrorCounts::default());
}

#[test]
fn vanished_files_are_not_errors() {
    let tree = family();
    fs::remove_file(tree.path("201/io")).unwrap(); // exited between reads
    fs::remove_dir_all(tree.path("201/task/205")).unwrap(); // thread exited
    fs::remove_file(tree.path("300/stat")).unwrap(); // process exited
    let mut errors = ErrorCounts::default();
    let jobs = tree.reader().read_jobs(&[(100, vec![0])], &mut errors);
    assert_eq!(pids(&jobs[0]), vec![200, 201, 400, 500]);
    let logger = &jobs[0].descendants[1];
    assert_eq!((logger.io, logger.threads.len()), (None, 1));
    assert_eq!(errors, ErrorCounts::default());
}

#[test]
fn stdout_stderr_files_and_attribution() {
    let tree = family();
    let log = tree.path("train.log");
    fs::write(&log, vec![b'x'; 1234]).unwrap();
    fs::create_dir(tree.path("100/fd")).unwrap();
    symlink(&log, tree.path("100/fd/1")).unwrap();
    symlink("/dev/null", tree.path("100/fd/2")).unwrap(); // not a regular file
    let cgroup = format!("0::/system.slice/docker-{CONTAINER}.scope\n");
    fs::write(tree.path("100/cgroup"), cgroup).unwrap();

    let mut errors = ErrorCounts::default();
    let job = tree
        .reader()
        .read_jobs(&[(100, vec![0])], &mut errors)
        .remove(0);
    assert_eq!((job.stdout_bytes, job.stderr_bytes), (Some(1234), None));
    let modified = fs::metadata(&log).unwrap().modified().unwrap();
    let expected = modified
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!((job.output_modified_seconds.unwrap() - expected).abs() < 1e-6);
    assert_eq!(job.attribution.container_id.as_deref(), Some(CONTAINER));
    assert_eq!(job.attribution.systemd_unit, None);
    assert_eq!(errors, ErrorCounts::default());
}

#[test]
fn no_fd_directory_means_no_output_and_no_error() {
    let tree = family();
    let mut errors = ErrorCounts::default();
    let job = tree
        .reader()
        .read_jobs(&[(100, vec![0])], &mut errors)
        .remove(0);
    assert_eq!(
        (
            job.stdout_bytes,
            job.stderr_bytes,
            job.output_modified_seconds
        ),
        (None, None, None)
    );
    assert_eq!(errors, ErrorCounts::default());
}
