//! Before a spy is made: is the process there, is it CPython (and not a
//! free-threaded build), and, when reading fails, why in plain words.

use std::io;
use std::path::Path;

use super::burst::Unavailable;
use crate::privileges;

/// What the process's memory map says about its interpreter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Interpreter {
    CPython,
    FreeThreaded(String),
    None,
}

/// The interpreter a `/proc/<pid>/maps` text shows: a mapped `python3.X`
/// binary or `libpython3.X.so`; a `t` after the version is a free-threaded
/// build (`python3.13t`, `libpython3.13t.so`), which py-spy cannot read.
pub fn interpreter(maps: &str) -> Interpreter {
    let mut found = Interpreter::None;
    for path in maps.lines().filter_map(|l| l.split_whitespace().nth(5)) {
        let name = path.rsplit('/').next().unwrap_or(path);
        let rest = name
            .strip_prefix("libpython")
            .or_else(|| name.strip_prefix("python"));
        let Some(rest) = rest else { continue };
        let version: String = rest
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        let version = version.trim_end_matches('.');
        let after = &rest[version.len()..];
        if version.is_empty() && !after.is_empty() {
            continue; // `pythonic.so`, `python-foo`: not an interpreter
        }
        if after.starts_with('t') {
            return Interpreter::FreeThreaded(format!("{version}t"));
        }
        if after.is_empty()
            || after.starts_with(".so")
            || after.starts_with('d')
            || after.starts_with('m')
        {
            found = Interpreter::CPython;
        }
    }
    found
}

fn is_permission(e: &io::Error) -> bool {
    // EPERM or EACCES
    matches!(e.raw_os_error(), Some(1 | 13)) || e.kind() == io::ErrorKind::PermissionDenied
}

/// Most of a job's `maps` read (about 50,000 lines): a job py-spy can read
/// (at most 4,096 threads, two mappings each, and its libraries) has far
/// fewer, and the map of one with more is its own to make long.
const MAX_MAPS: u64 = 4 << 20;

/// The first [`MAX_MAPS`] bytes of a `maps` file, as text.
fn read_maps(path: &Path) -> io::Result<String> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(MAX_MAPS)
        .read_to_end(&mut bytes)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Checks that `pid` runs a CPython stallwatch can read.
pub fn check(root: &Path, pid: u32, comm: &str) -> Result<(), Unavailable> {
    let dir = root.join(pid.to_string());
    match read_maps(&dir.join("maps")) {
        Ok(maps) => match interpreter(&maps) {
            Interpreter::CPython => Ok(()),
            Interpreter::FreeThreaded(v) => Err(Unavailable::FreeThreaded(format!(
                "pid {pid} ({comm}) runs free-threaded Python {v}, whose stacks cannot be read yet"
            ))),
            Interpreter::None if maps.is_empty() => Err(exited(pid, comm)),
            Interpreter::None => Err(Unavailable::NotPython(format!(
                "pid {pid} ({comm}) is not a Python process (no Python interpreter in its memory map)"
            ))),
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(3) => {
            Err(exited(pid, comm))
        }
        Err(e) if is_permission(&e) => {
            Err(Unavailable::NoPermission(no_permission(root, pid, comm)))
        }
        Err(e) => Err(Unavailable::Failed(format!(
            "cannot read pid {pid}'s memory map: {e}"
        ))),
    }
}

pub fn exited(pid: u32, comm: &str) -> Unavailable {
    Unavailable::Exited(format!(
        "pid {pid} ({comm}) exited before its stacks were read"
    ))
}

/// Says exactly what keeps stallwatch from reading `pid`'s memory: each
/// cause that applies (Yama's scope, a missing CAP_SYS_PTRACE, an AppArmor
/// profile other than the job's, a user namespace, SELinux domains).
pub fn no_permission(root: &Path, pid: u32, comm: &str) -> String {
    let own = privileges::facts(root, &privileges::sys_beside(root));
    privileges::refusal(&own, &privileges::job(root, pid), pid, comm)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn maps(paths: &[&str]) -> String {
        paths
            .iter()
            .map(|p| format!("7f00-7f10 r-xp 00000000 08:01 1234 {p}\n"))
            .collect()
    }

    #[test]
    fn a_long_map_is_read_no_further_than_its_bound() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("7")).unwrap();
        let stacks = maps(&["[anon:thread stack]"]).repeat((MAX_MAPS as usize) / 40);
        // The interpreter first, as the kernel lists it: found.
        let first = maps(&["/usr/bin/python3.11"]) + &stacks;
        std::fs::write(root.path().join("7/maps"), &first).unwrap();
        assert_eq!(check(root.path(), 7, "python3"), Ok(()));
        // A python mapped only past the bound is not looked for.
        let last = stacks + &maps(&["/usr/bin/python3.11"]);
        std::fs::write(root.path().join("7/maps"), &last).unwrap();
        assert!(matches!(
            check(root.path(), 7, "python3"),
            Err(Unavailable::NotPython(_))
        ));
    }

    #[test]
    fn tells_python_from_other_programs() {
        assert_eq!(
            interpreter(&maps(&["/usr/bin/python3.11", "/usr/lib/libc.so.6"])),
            Interpreter::CPython
        );
        assert_eq!(
            interpreter(&maps(&[
                "/opt/app/bin/trainer",
                "/opt/conda/lib/libpython3.10.so.1.0"
            ])),
            Interpreter::CPython
        );
        assert_eq!(
            interpreter(&maps(&["/usr/bin/python3.8m"])),
            Interpreter::CPython
        );
        assert_eq!(
            interpreter(&maps(&["/usr/bin/sleep", "/usr/lib/libc.so.6"])),
            Interpreter::None
        );
        assert_eq!(
            interpreter(&maps(&[
                "/srv/pythonic-tools/bin/run",
                "/usr/lib/python-support.so"
            ])),
            Interpreter::None
        );
        assert_eq!(
            interpreter("7f00-7f10 rw-p 00000000 00:00 0 \n"),
            Interpreter::None
        );
    }

    #[test]
    fn free_threaded_builds_are_named() {
        assert_eq!(
            interpreter(&maps(&["/usr/bin/python3.13t"])),
            Interpreter::FreeThreaded("3.13t".into())
        );
        assert_eq!(
            interpreter(&maps(&["/usr/bin/app", "/usr/lib/libpython3.14t.so.1.0"])),
            Interpreter::FreeThreaded("3.14t".into())
        );
    }

    #[test]
    fn says_which_permission_is_missing() {
        let root = tempfile::tempdir().unwrap();
        let p = root.path();
        std::fs::create_dir_all(p.join("self")).unwrap();
        std::fs::create_dir_all(p.join("77")).unwrap();
        std::fs::create_dir_all(p.join("sys/kernel/yama")).unwrap();
        std::fs::write(
            p.join("self/status"),
            "Uid:\t65534\t65534\t65534\t65534\nCapEff:\t0000000000000000\n",
        )
        .unwrap();
        std::fs::write(p.join("77/status"), "Uid:\t0\t0\t0\t0\n").unwrap();
        std::fs::write(p.join("sys/kernel/yama/ptrace_scope"), "1\n").unwrap();
        let msg = no_permission(p, 77, "python3");
        assert!(
            msg.contains("lacks CAP_SYS_PTRACE") && msg.contains("another user"),
            "{msg}"
        );
        std::fs::write(p.join("sys/kernel/yama/ptrace_scope"), "3\n").unwrap();
        assert!(no_permission(p, 77, "python3").contains("ptrace_scope is 3"));
        std::fs::write(p.join("sys/kernel/yama/ptrace_scope"), "0\n").unwrap();
        std::fs::write(
            p.join("self/status"),
            "Uid:\t0\t0\t0\t0\nCapEff:\t000001ffffffffff\n",
        )
        .unwrap();
        assert!(no_permission(p, 77, "python3").contains("despite CAP_SYS_PTRACE"));
        // A daemon under a container's default AppArmor profile, a job on the host.
        std::fs::create_dir_all(p.join("self/attr")).unwrap();
        std::fs::create_dir_all(p.join("77/attr")).unwrap();
        std::fs::write(p.join("self/attr/current"), "docker-default (enforce)\n").unwrap();
        std::fs::write(p.join("77/attr/current"), "unconfined\n").unwrap();
        let msg = no_permission(p, 77, "python3");
        assert!(msg.contains("pid 77 runs under `unconfined`"), "{msg}");
    }
}

/// Whether `pid` is one of `holders` or descends from one (its parent
/// chain in `/proc`, at most 64 levels).
pub fn in_jobs(root: &Path, pid: u32, holders: &[u32]) -> bool {
    let mut current = pid;
    for _ in 0..64 {
        if holders.contains(&current) {
            return true;
        }
        let Ok(stat) = std::fs::read_to_string(root.join(current.to_string()).join("stat")) else {
            return false;
        };
        let parent = stat
            .rfind(')')
            .and_then(|close| stat.get(close + 2..))
            .and_then(|rest| rest.split(' ').nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        match parent {
            Some(p) if p > 1 => current = p,
            _ => return false,
        }
    }
    false
}

#[cfg(test)]
mod job_tests {
    use super::in_jobs;

    #[test]
    fn a_worker_belongs_to_its_holders_job() {
        let root = tempfile::tempdir().unwrap();
        for (pid, ppid) in [(10, 1), (20, 10), (30, 20), (40, 1)] {
            let dir = root.path().join(pid.to_string());
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("stat"), format!("{pid} (python3) S {ppid} 1 1 0")).unwrap();
        }
        assert!(in_jobs(root.path(), 30, &[10]));
        assert!(in_jobs(root.path(), 10, &[10]));
        assert!(!in_jobs(root.path(), 40, &[10]));
        assert!(!in_jobs(root.path(), 99, &[10]));
    }
}
