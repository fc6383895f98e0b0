//! Reads the facts: the daemon's own process through the procfs mount it
//! reads (`<root>/self/...`), Yama's scope, SELinux's mode; and, for a job
//! whose read was refused, its uid and label. Every file is read whole up
//! to a small bound (they are a few lines); one that is missing or
//! unreadable leaves its fact unknown.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use super::parse::{self, Label};
use super::report::{Facts, Job, Privileges, environ_refusal};

/// Most of a `status` file read (about 1.5 KiB on Linux 6).
const MAX_STATUS: u64 = 16 << 10;
/// Most of a one-line file read (a label, a scope, a map, a `stat`).
const MAX_LINE: u64 = 4 << 10;

fn read_bounded(path: &Path, max: u64) -> Option<String> {
    let mut bytes = Vec::new();
    File::open(path)
        .ok()?
        .take(max)
        .read_to_end(&mut bytes)
        .ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// The label of the process whose `/proc` directory is `dir`: AppArmor's
/// own file where modules are stacked (Linux 5.1 and later), else the
/// shared `attr/current`. Reading another process's label needs no
/// ptrace access.
fn label(dir: &Path) -> Option<Label> {
    if let Some(text) = read_bounded(&dir.join("attr/apparmor/current"), MAX_LINE) {
        return parse::label(&text, true);
    }
    read_bounded(&dir.join("attr/current"), MAX_LINE).and_then(|t| parse::label(&t, false))
}

/// The sysfs mount beside a procfs mount: `/sys` for `/proc`, `/host/sys`
/// for `/host/proc`.
pub fn sys_beside(proc_root: &Path) -> PathBuf {
    proc_root.parent().unwrap_or(Path::new("/")).join("sys")
}

/// What the procfs mount at `proc_root` (and sysfs at `sys_root`) says of
/// the process reading them.
pub fn facts(proc_root: &Path, sys_root: &Path) -> Facts {
    let own = proc_root.join("self");
    let status = read_bounded(&own.join("status"), MAX_STATUS).unwrap_or_default();
    let label = label(&own);
    let selinux_enforcing = match label {
        Some(Label::SeLinux(_)) => read_bounded(&sys_root.join("fs/selinux/enforce"), MAX_LINE)
            .and_then(|t| parse::selinux_enforcing(&t)),
        _ => None,
    };
    let host_pid_namespace = parse::pid_levels(&status).map(|levels| {
        levels == 1
            && read_bounded(&proc_root.join("2/stat"), MAX_LINE)
                .is_some_and(|stat| parse::is_kthreadd(&stat))
    });
    Facts {
        uid: parse::uid(&status),
        ptrace_scope: read_bounded(&proc_root.join("sys/kernel/yama/ptrace_scope"), MAX_LINE)
            .and_then(|t| parse::ptrace_scope(&t)),
        cap_effective: parse::cap_set(&status, "CapEff"),
        cap_permitted: parse::cap_set(&status, "CapPrm"),
        label,
        selinux_enforcing,
        initial_user_namespace: read_bounded(&own.join("uid_map"), MAX_LINE)
            .and_then(|t| parse::initial_user_namespace(&t)),
        host_pid_namespace,
    }
}

/// The privileges report of the process reading `proc_root`.
pub fn read(proc_root: &Path) -> Privileges {
    Privileges::from_facts(&facts(proc_root, &sys_beside(proc_root)))
}

/// What `proc_root` says of `pid`: its uid and its label.
pub fn job(proc_root: &Path, pid: u32) -> Job {
    let dir = proc_root.join(pid.to_string());
    Job {
        uid: read_bounded(&dir.join("status"), MAX_STATUS).and_then(|s| parse::uid(&s)),
        label: label(&dir),
    }
}

/// Why `pid`'s environment could not be opened (`error`), where it is a
/// refusal and a cause is known.
pub fn environ_refused(proc_root: &Path, pid: u32, error: &std::io::Error) -> Option<String> {
    if !matches!(error.raw_os_error(), Some(1 | 13)) {
        return None;
    }
    let own = facts(proc_root, &sys_beside(proc_root));
    environ_refusal(&own, &job(proc_root, pid), pid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::privileges::report::Reach;

    fn write(root: &Path, path: &str, text: &str) {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn a_pod_under_containerds_profile_in_a_fixture_tree() {
        let dir = tempfile::tempdir().unwrap();
        let proc = dir.path().join("proc");
        write(
            &proc,
            "self/status",
            "Uid:\t0\t0\t0\t0\nNSpid:\t4711\nCapPrm:\t0000000000080004\nCapEff:\t0000000000080004\n",
        );
        write(
            &proc,
            "self/attr/current",
            "cri-containerd.apparmor.d (enforce)\n",
        );
        write(&proc, "self/uid_map", "         0          0 4294967295\n");
        write(&proc, "sys/kernel/yama/ptrace_scope", "1\n");
        write(&proc, "2/stat", "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0");
        write(&proc, "77/status", "Uid:\t1000\t1000\t1000\t1000\n");
        write(&proc, "77/attr/current", "unconfined\n");
        let p = read(&proc);
        assert_eq!(p.uid, Some(0));
        assert_eq!(p.ptrace_scope, Some(1));
        assert_eq!(p.host_pid_namespace, Some(true));
        assert_eq!(p.initial_user_namespace, Some(true));
        assert_eq!(p.stacks.read, Reach::SameProfile);
        assert_eq!(p.capabilities.missing, ["CAP_SYSLOG"]);
        let j = job(&proc, 77);
        assert_eq!(j.uid, Some(1000));
        assert_eq!(j.label.unwrap().text(), "unconfined");
        // AppArmor's own file wins over the shared one.
        write(&proc, "self/attr/apparmor/current", "unconfined\n");
        assert_eq!(read(&proc).stacks.read, Reach::Yes);
        // In a PID namespace of its own: two levels, no kthreadd.
        write(&proc, "self/status", "Uid:\t0\t0\t0\t0\nNSpid:\t4711\t1\n");
        assert_eq!(read(&proc).host_pid_namespace, Some(false));
    }

    #[test]
    fn selinux_mode_comes_from_the_sysfs_beside_proc() {
        let dir = tempfile::tempdir().unwrap();
        let proc = dir.path().join("proc");
        write(&proc, "self/attr/current", "system_u:system_r:spc_t:s0\0");
        write(dir.path(), "sys/fs/selinux/enforce", "1");
        assert_eq!(sys_beside(&proc), dir.path().join("sys"));
        let p = read(&proc);
        assert_eq!(p.selinux.unwrap().enforcing, Some(true));
        assert_eq!(sys_beside(Path::new("/proc")), Path::new("/sys"));
    }

    #[test]
    fn an_empty_tree_is_all_unknown() {
        let dir = tempfile::tempdir().unwrap();
        let p = read(dir.path());
        assert_eq!(p.uid, None);
        assert_eq!(p.host_pid_namespace, None);
        assert_eq!(p.apparmor, None);
        assert_eq!(job(dir.path(), 1), Job::default());
    }

    #[test]
    fn this_process_reads_itself() {
        // Whatever the host, the real /proc gives a uid and capability sets.
        let p = read(Path::new("/proc"));
        assert!(
            p.uid.is_some() && p.capabilities.effective.is_some(),
            "{p:?}"
        );
        assert!(p.initial_user_namespace.is_some());
    }
}
