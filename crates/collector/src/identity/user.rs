//! Whose a job is: the real uid in the leader's `/proc/<pid>/status`, and
//! that uid's name in the host's user database (a passwd file, read at most
//! [`MAX_PASSWD`] bytes and again only when it changes). What reaches the
//! sample is what `[identity] user_label` allows: the name (the uid as a
//! number when the file has none), the uid, or nothing.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use super::per_process::PerProcess;

/// Most of a passwd file read (a site's whole directory in one file is
/// larger than any host's own, and would be cut here).
pub const MAX_PASSWD: u64 = 8 << 20;
/// Most of a `status` file read (it is about 1.5 KiB).
const MAX_STATUS: u64 = 16 << 10;
/// Longest user name kept (useradd's limit is 32).
pub const MAX_NAME: usize = 64;

/// What the `user` label and the status carry of a job's user.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UserLabel {
    /// The user's name from the passwd file (the uid as a number when the
    /// file does not name it).
    #[default]
    Name,
    /// The uid as a number, never a name.
    Uid,
    /// Nothing: the label is empty.
    None,
}

/// Where the names come from and how much of them is shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserOptions {
    pub label: UserLabel,
    /// The host's passwd file (`/etc/passwd`; in a container, the host's
    /// mounted in).
    pub passwd_file: PathBuf,
}

impl Default for UserOptions {
    fn default() -> Self {
        UserOptions {
            label: UserLabel::Name,
            passwd_file: PathBuf::from("/etc/passwd"),
        }
    }
}

/// The real uid (the first of the four on the `Uid:` line).
pub fn parse_uid(status: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// uid -> name of a passwd file's lines (`name:x:uid:gid:...`). Lines that
/// do not parse, and names that are not plain (letters, digits, `._-`, a
/// trailing `$`) or are longer than [`MAX_NAME`], are left out; the first
/// line for a uid wins, as in `getpwuid`.
pub fn parse_passwd(text: &str) -> HashMap<u32, String> {
    let mut names = HashMap::new();
    for line in text.lines() {
        let mut fields = line.split(':');
        let (Some(name), Some(_), Some(uid)) = (fields.next(), fields.next(), fields.next()) else {
            continue;
        };
        let Ok(uid) = uid.parse::<u32>() else {
            continue;
        };
        if plain_name(name) {
            names.entry(uid).or_insert_with(|| name.to_owned());
        }
    }
    names
}

fn plain_name(name: &str) -> bool {
    let body = name.strip_suffix('$').unwrap_or(name);
    !body.is_empty()
        && name.len() <= MAX_NAME
        && !body.starts_with('-')
        && body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

/// The passwd file as last read, and the stamp it had.
#[derive(Debug, Clone, Default)]
struct Passwd {
    stamp: Option<(SystemTime, u64)>,
    names: HashMap<u32, String>,
}

impl Passwd {
    /// `uid`'s name, reading `path` again when its size or time changed.
    fn name(&mut self, path: &Path, uid: u32) -> Option<String> {
        let stamp = std::fs::metadata(path)
            .ok()
            .map(|m| (m.modified().unwrap_or(SystemTime::UNIX_EPOCH), m.len()));
        if stamp != self.stamp {
            self.stamp = stamp;
            self.names = read_passwd(path);
        }
        self.names.get(&uid).cloned()
    }
}

fn read_passwd(path: &Path) -> HashMap<u32, String> {
    let mut text = Vec::new();
    match std::fs::File::open(path).and_then(|f| f.take(MAX_PASSWD).read_to_end(&mut text)) {
        Ok(_) => parse_passwd(&String::from_utf8_lossy(&text)),
        Err(e) => {
            tracing::debug!(path = %path.display(), error = %e, "cannot read the user database");
            HashMap::new()
        }
    }
}

/// Each job leader's uid, read once per process, and the names.
#[derive(Debug, Clone, Default)]
pub struct Users {
    options: UserOptions,
    uids: PerProcess<Option<u32>>,
    passwd: Passwd,
}

impl Users {
    pub fn new(options: UserOptions) -> Self {
        Users {
            options,
            ..Users::default()
        }
    }

    /// Starts a sample: forgets the leaders not seen in the previous one.
    pub fn begin(&mut self) {
        self.uids.begin();
    }

    /// The `user` of `pid` (started at `start_ticks`): its real uid from
    /// `root/<pid>/status`, else `fallback` (the uid in its Slurm cgroup
    /// path), shown as `[identity] user_label` says.
    pub fn get(
        &mut self,
        root: &Path,
        pid: u32,
        start_ticks: u64,
        fallback: Option<u32>,
    ) -> Option<String> {
        if self.options.label == UserLabel::None {
            return None;
        }
        let uid = self
            .uids
            .get(pid, start_ticks, || read_uid(root, pid))
            .or(fallback)?;
        if self.options.label == UserLabel::Name
            && let Some(name) = self.passwd.name(&self.options.passwd_file, uid)
        {
            return Some(name);
        }
        Some(uid.to_string())
    }
}

fn read_uid(root: &Path, pid: u32) -> Option<u32> {
    let mut text = Vec::new();
    std::fs::File::open(root.join(pid.to_string()).join("status"))
        .and_then(|f| f.take(MAX_STATUS).read_to_end(&mut text))
        .ok()?;
    parse_uid(&String::from_utf8_lossy(&text))
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "Name:\tpython3\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t4242\nPid:\t4242\nPPid:\t1\nUid:\t1003\t0\t0\t0\nGid:\t1003\t1003\t1003\t1003\n";

    #[test]
    fn the_real_uid_is_the_first_on_the_uid_line() {
        assert_eq!(
            parse_uid(STATUS),
            Some(1003),
            "a setuid job is its runner's"
        );
        assert_eq!(parse_uid("Name:\tx\n"), None);
        assert_eq!(parse_uid("Uid:\tnobody\n"), None);
    }

    #[test]
    fn passwd_lines_give_plain_names_only() {
        let names = parse_passwd(
            "root:x:0:0:root:/root:/bin/bash\n\
             alice:x:1003:1003:Alice,,,:/home/alice:/bin/bash\n\
             # a comment\n\
             broken line\n\
             alice2:x:1003:1003::/home/a:/bin/sh\n\
             <b>evil</b>:x:1004:1004::/:/bin/sh\n\
             host$:x:1005:1005::/:/bin/false\n\
             -rf:x:1006:1006::/:/bin/false\n",
        );
        assert_eq!(names.get(&0).map(String::as_str), Some("root"));
        assert_eq!(
            names.get(&1003).map(String::as_str),
            Some("alice"),
            "first wins"
        );
        assert_eq!(names.get(&1004), None, "markup is no name");
        assert_eq!(names.get(&1005).map(String::as_str), Some("host$"));
        assert_eq!(names.get(&1006), None);
        assert_eq!(names.len(), 3);
    }

    fn fixture(passwd: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("proc/4242")).unwrap();
        std::fs::write(dir.path().join("proc/4242/status"), STATUS).unwrap();
        let passwd_file = dir.path().join("passwd");
        std::fs::write(&passwd_file, passwd).unwrap();
        (dir, passwd_file)
    }

    fn user(label: UserLabel, passwd_file: &Path, dir: &Path, pid: u32) -> Option<String> {
        let mut users = Users::new(UserOptions {
            label,
            passwd_file: passwd_file.to_owned(),
        });
        users.begin();
        users.get(&dir.join("proc"), pid, 1, Some(2001))
    }

    #[test]
    fn the_label_setting_decides_name_uid_or_nothing() {
        let (dir, passwd) = fixture("alice:x:1003:1003::/home/alice:/bin/bash\n");
        let d = dir.path();
        assert_eq!(
            user(UserLabel::Name, &passwd, d, 4242).as_deref(),
            Some("alice")
        );
        assert_eq!(
            user(UserLabel::Uid, &passwd, d, 4242).as_deref(),
            Some("1003")
        );
        assert_eq!(user(UserLabel::None, &passwd, d, 4242), None);
        // A uid the file does not name, and no file at all: the number.
        let (dir, passwd) = fixture("bob:x:1:1::/:/bin/sh\n");
        assert_eq!(
            user(UserLabel::Name, &passwd, dir.path(), 4242).as_deref(),
            Some("1003")
        );
        let gone = dir.path().join("no-such-file");
        assert_eq!(
            user(UserLabel::Name, &gone, dir.path(), 4242).as_deref(),
            Some("1003")
        );
        // No status to read: the uid of the Slurm cgroup path.
        assert_eq!(
            user(UserLabel::Uid, &passwd, dir.path(), 77).as_deref(),
            Some("2001")
        );
    }

    #[test]
    fn a_changed_passwd_file_is_read_again() {
        let (dir, passwd) = fixture("alice:x:1003:1003::/:/bin/sh\n");
        let mut users = Users::new(UserOptions {
            label: UserLabel::Name,
            passwd_file: passwd.clone(),
        });
        let root = dir.path().join("proc");
        users.begin();
        assert_eq!(users.get(&root, 4242, 1, None).as_deref(), Some("alice"));
        std::fs::write(&passwd, "alicia:x:1003:1003::/home/alicia:/bin/sh\n").unwrap();
        users.begin();
        assert_eq!(users.get(&root, 4242, 1, None).as_deref(), Some("alicia"));
    }
}
