//! What the daemon may read (`collector::privileges`): read at start and
//! logged once, then read again once a minute on the sampler thread (Yama's
//! `ptrace_scope` can be raised while it runs) and logged again only when
//! it changed. The API, `check` and the status page show the latest.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use collector::privileges::{self, Privileges, Reach};

/// How often the report is read again: a few small files.
pub const REFRESH: Duration = Duration::from_secs(60);

pub struct PrivilegesCheck {
    root: PathBuf,
    current: Arc<Privileges>,
    checked: Instant,
}

impl PrivilegesCheck {
    /// Reads the report of this process through the procfs mount at `root`
    /// and logs it.
    pub fn start(root: PathBuf) -> PrivilegesCheck {
        let current = Arc::new(privileges::read(&root));
        log(&current, false);
        PrivilegesCheck {
            root,
            current,
            checked: Instant::now(),
        }
    }

    /// The report, read again when [`REFRESH`] has passed.
    pub fn latest(&mut self) -> Arc<Privileges> {
        if self.checked.elapsed() >= REFRESH {
            self.checked = Instant::now();
            let now = privileges::read(&self.root);
            if now != *self.current {
                log(&now, true);
                self.current = Arc::new(now);
            }
        }
        self.current.clone()
    }
}

fn or_unknown<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "unknown".to_owned(), |v| v.to_string())
}

fn namespace(initial: Option<bool>) -> &'static str {
    match initial {
        Some(true) => "host",
        Some(false) => "own",
        None => "unknown",
    }
}

/// One log line: info when every user's jobs can be read, a warning when not.
pub fn log(p: &Privileges, changed: bool) {
    let message = if changed {
        "what stallwatch may read has changed"
    } else {
        "what stallwatch may read"
    };
    let label = p
        .apparmor
        .as_ref()
        .map(|a| match &a.mode {
            Some(mode) => format!("apparmor {} ({mode})", a.profile),
            None => format!("apparmor {}", a.profile),
        })
        .or_else(|| p.selinux.as_ref().map(|s| format!("selinux {}", s.context)))
        .unwrap_or_else(|| "none".to_owned());
    let held = p.capabilities.held.len();
    let capabilities = if held > 8 {
        format!("{held} capabilities")
    } else {
        p.capabilities.held.join(",")
    };
    macro_rules! line {
        ($level:ident) => {
            tracing::$level!(
                stacks = %p.stacks.read.as_str(),
                environments = %p.environments.read.as_str(),
                ptrace_scope = %p.ptrace_scope.map_or_else(|| "none".to_owned(), |s| s.to_string()),
                uid = %or_unknown(p.uid),
                capabilities = %capabilities,
                missing = %p.capabilities.missing.join(","),
                security_label = %label,
                user_namespace = %namespace(p.initial_user_namespace),
                pid_namespace = %namespace(p.host_pid_namespace),
                stacks_why = %p.stacks.why,
                environments_why = %p.environments.why,
                "{message}"
            )
        };
    }
    if p.stacks.read == Reach::Yes && p.environments.read == Reach::Yes {
        line!(info);
    } else {
        line!(warn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_raised_ptrace_scope_is_seen_within_a_refresh() {
        let root = tempfile::tempdir().unwrap();
        let p = root.path();
        std::fs::create_dir_all(p.join("self")).unwrap();
        std::fs::create_dir_all(p.join("sys/kernel/yama")).unwrap();
        std::fs::write(
            p.join("self/status"),
            "Uid:\t0\t0\t0\t0\nCapEff:\t000001ffffffffff\n",
        )
        .unwrap();
        std::fs::write(p.join("sys/kernel/yama/ptrace_scope"), "1\n").unwrap();
        let mut check = PrivilegesCheck::start(p.to_path_buf());
        assert_eq!(check.latest().stacks.read, Reach::Yes);
        std::fs::write(p.join("sys/kernel/yama/ptrace_scope"), "3\n").unwrap();
        // Not before the refresh is due: the report is not read each sample.
        assert_eq!(check.latest().stacks.read, Reach::Yes);
        if let Some(earlier) = Instant::now().checked_sub(REFRESH) {
            check.checked = earlier;
            let now = check.latest();
            assert_eq!(now.stacks.read, Reach::No);
            assert_eq!(now.ptrace_scope, Some(3));
        }
    }
}
