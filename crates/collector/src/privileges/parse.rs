//! The texts the kernel gives about a process's privileges, parsed: Yama's
//! `ptrace_scope`, the capability sets and ids in `status`, a security
//! module's label in `attr/current`, SELinux's `enforce`, a `uid_map`.
//! Pure: each takes the text read and returns what it says, or `None` when
//! it says nothing this code understands.

/// The capabilities by bit number (linux/capability.h), as the kernel and
/// `capsh` name them.
pub const CAP_NAMES: [&str; 41] = [
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_DAC_READ_SEARCH",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_LINUX_IMMUTABLE",
    "CAP_NET_BIND_SERVICE",
    "CAP_NET_BROADCAST",
    "CAP_NET_ADMIN",
    "CAP_NET_RAW",
    "CAP_IPC_LOCK",
    "CAP_IPC_OWNER",
    "CAP_SYS_MODULE",
    "CAP_SYS_RAWIO",
    "CAP_SYS_CHROOT",
    "CAP_SYS_PTRACE",
    "CAP_SYS_PACCT",
    "CAP_SYS_ADMIN",
    "CAP_SYS_BOOT",
    "CAP_SYS_NICE",
    "CAP_SYS_RESOURCE",
    "CAP_SYS_TIME",
    "CAP_SYS_TTY_CONFIG",
    "CAP_MKNOD",
    "CAP_LEASE",
    "CAP_AUDIT_WRITE",
    "CAP_AUDIT_CONTROL",
    "CAP_SETFCAP",
    "CAP_MAC_OVERRIDE",
    "CAP_MAC_ADMIN",
    "CAP_SYSLOG",
    "CAP_WAKE_ALARM",
    "CAP_BLOCK_SUSPEND",
    "CAP_AUDIT_READ",
    "CAP_PERFMON",
    "CAP_BPF",
    "CAP_CHECKPOINT_RESTORE",
];

pub const CAP_DAC_OVERRIDE: u32 = 1;
pub const CAP_DAC_READ_SEARCH: u32 = 2;
pub const CAP_SYS_PTRACE: u32 = 19;
pub const CAP_SYSLOG: u32 = 34;

/// Whether bit `cap` is set in `set`.
pub fn has(set: u64, cap: u32) -> bool {
    set & (1 << cap) != 0
}

/// The names of the capabilities in `set`, lowest bit first; a bit past
/// the table is named by its number (`cap_45`), as `capsh` does.
pub fn cap_names(set: u64) -> Vec<String> {
    (0..64)
        .filter(|bit| has(set, *bit))
        .map(|bit| match CAP_NAMES.get(bit as usize) {
            Some(name) => (*name).to_owned(),
            None => format!("cap_{bit}"),
        })
        .collect()
}

/// `/proc/sys/kernel/yama/ptrace_scope`: 0 to 3.
pub fn ptrace_scope(text: &str) -> Option<u8> {
    text.trim().parse::<u8>().ok().filter(|s| *s <= 3)
}

/// The value of a `Name:\tvalue` line of a `status` file.
pub fn status_field<'a>(status: &'a str, name: &str) -> Option<&'a str> {
    status.lines().find_map(|line| {
        line.strip_prefix(name)
            .and_then(|rest| rest.strip_prefix(':'))
            .map(str::trim)
    })
}

/// A capability set of a `status` file (`CapEff`, `CapPrm`): 16 hex digits.
pub fn cap_set(status: &str, name: &str) -> Option<u64> {
    status_field(status, name).and_then(|hex| u64::from_str_radix(hex, 16).ok())
}

/// The real uid of a `status` file (the first of `Uid:`'s four).
pub fn uid(status: &str) -> Option<u32> {
    status_field(status, "Uid")?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// How many PID namespaces a `status` file's `NSpid:` names the process in,
/// from the procfs mount's own down to the process's (1: the same one).
pub fn pid_levels(status: &str) -> Option<usize> {
    let n = status_field(status, "NSpid")?.split_whitespace().count();
    (n > 0).then_some(n)
}

/// Whether a `uid_map` is the initial user namespace's, which maps every
/// uid to itself (`0 0 4294967295`); a nested namespace maps a range of
/// the host's uids (`0 100000 65536`) or less.
pub fn initial_user_namespace(uid_map: &str) -> Option<bool> {
    let lines: Vec<Vec<&str>> = uid_map
        .lines()
        .map(|l| l.split_whitespace().collect())
        .filter(|f: &Vec<&str>| !f.is_empty())
        .collect();
    if lines.iter().any(|f| f.len() != 3) {
        return None;
    }
    Some(lines == [vec!["0", "0", "4294967295"]])
}

/// Whether a `/proc/2/stat` is the kernel's `kthreadd`, whose parent is 0:
/// kernel threads are seen only from the host's (the initial) PID namespace,
/// where `kthreadd` is always pid 2.
pub fn is_kthreadd(stat: &str) -> bool {
    let Some(rest) = stat.strip_prefix("2 (kthreadd) ") else {
        return false;
    };
    rest.split(' ').nth(1) == Some("0")
}

/// A security module's label of a process (`/proc/<pid>/attr/current`,
/// or `attr/apparmor/current` where modules are stacked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Label {
    /// `unconfined`, or `name (mode)`: `enforce`, `complain`, `kill`,
    /// `unconfined` (a profile that confines nothing)...
    AppArmor {
        profile: String,
        mode: Option<String>,
    },
    /// `user:role:type:level`.
    SeLinux(String),
    /// Another module's label (Smack's, for one).
    Other(String),
}

impl Label {
    /// Whether AppArmor enforces a profile on the process: one that is
    /// neither `unconfined` nor in complain mode.
    pub fn apparmor_confined(&self) -> bool {
        match self {
            Label::AppArmor { profile, mode } => {
                profile != "unconfined" && matches!(mode.as_deref(), Some("enforce" | "kill"))
            }
            _ => false,
        }
    }

    /// The SELinux type (`spc_t`, `container_t`), the third field.
    pub fn selinux_type(&self) -> Option<&str> {
        match self {
            Label::SeLinux(context) => context.split(':').nth(2),
            _ => None,
        }
    }

    /// As written in `attr/current`.
    pub fn text(&self) -> String {
        match self {
            Label::AppArmor {
                profile,
                mode: Some(mode),
            } => format!("{profile} ({mode})"),
            Label::AppArmor {
                profile,
                mode: None,
            } => profile.clone(),
            Label::SeLinux(s) | Label::Other(s) => s.clone(),
        }
    }
}

/// Longest label kept (AppArmor's profile names and SELinux contexts are
/// far shorter): a longer one is cut.
const MAX_LABEL: usize = 256;

/// Parses a label. `apparmor` is true for `attr/apparmor/current`, which
/// only AppArmor writes; `attr/current` is told apart by its form. Empty
/// text (no module gives a label) is `None`.
pub fn label(text: &str, apparmor: bool) -> Option<Label> {
    let text = text.trim_end_matches(['\n', '\0']).trim();
    if text.is_empty() {
        return None;
    }
    let text: String = text.chars().take(MAX_LABEL).collect();
    let selinux = {
        let parts: Vec<&str> = text.split(':').collect();
        parts.len() >= 4
            && parts[..3].iter().all(|p| !p.is_empty())
            && !text.contains(char::is_whitespace)
    };
    if !apparmor && selinux {
        return Some(Label::SeLinux(text));
    }
    if let Some((profile, mode)) = text.rsplit_once(" (")
        && let Some(mode) = mode.strip_suffix(')')
        && !mode.is_empty()
        && !mode.contains(char::is_whitespace)
    {
        return Some(Label::AppArmor {
            profile: profile.to_owned(),
            mode: Some(mode.to_owned()),
        });
    }
    if apparmor || text == "unconfined" {
        return Some(Label::AppArmor {
            profile: text,
            mode: None,
        });
    }
    Some(Label::Other(text))
}

/// `/sys/fs/selinux/enforce`: `1` enforcing, `0` permissive.
pub fn selinux_enforcing(text: &str) -> Option<bool> {
    match text.trim() {
        "1" => Some(true),
        "0" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "Name:\tstallwatch\nUmask:\t0077\nState:\tS (sleeping)\n\
        Tgid:\t812\nNgid:\t0\nPid:\t812\nPPid:\t1\nTracerPid:\t0\n\
        Uid:\t61234\t61234\t61234\t61234\nGid:\t61234\t61234\t61234\t61234\n\
        NSpid:\t812\nCapInh:\t0000000000000000\nCapPrm:\t0000000400080004\n\
        CapEff:\t0000000400080004\nCapBnd:\t0000000400080004\nCapAmb:\t0000000400080004\n\
        NoNewPrivs:\t1\nSeccomp:\t2\n";

    #[test]
    fn capability_sets_of_the_systemd_unit() {
        let eff = cap_set(STATUS, "CapEff").unwrap();
        assert_eq!(
            cap_names(eff),
            ["CAP_DAC_READ_SEARCH", "CAP_SYS_PTRACE", "CAP_SYSLOG"]
        );
        assert!(has(eff, CAP_SYS_PTRACE) && !has(eff, CAP_DAC_OVERRIDE));
        assert_eq!(cap_set(STATUS, "CapPrm"), Some(eff));
        // Root's full set (Linux 5.9 and later: 41 capabilities).
        let root = cap_set("CapEff:\t000001ffffffffff\n", "CapEff").unwrap();
        assert_eq!(cap_names(root).len(), 41);
        assert_eq!(cap_names(root)[40], "CAP_CHECKPOINT_RESTORE");
        // A kernel newer than the table: the bit is named by number.
        assert_eq!(cap_names(1 << 45), ["cap_45"]);
        assert_eq!(cap_set("CapEff:\tnothex\n", "CapEff"), None);
        assert_eq!(cap_set("", "CapEff"), None);
        // `CapEffective:` is not `CapEff:`.
        assert_eq!(status_field("CapEffx:\t1\n", "CapEff"), None);
    }

    #[test]
    fn ids_and_namespace_levels() {
        assert_eq!(uid(STATUS), Some(61234));
        assert_eq!(pid_levels(STATUS), Some(1));
        assert_eq!(pid_levels("NSpid:\t48213\t7\n"), Some(2));
        assert_eq!(pid_levels("Name:\tx\n"), None);
        assert_eq!(uid("Uid:\tx\n"), None);
    }

    #[test]
    fn yama_scope() {
        assert_eq!(ptrace_scope("1\n"), Some(1));
        assert_eq!(ptrace_scope("3"), Some(3));
        assert_eq!(ptrace_scope("7\n"), None);
        assert_eq!(ptrace_scope(""), None);
    }

    #[test]
    fn the_initial_user_namespace_maps_every_uid_to_itself() {
        assert_eq!(
            initial_user_namespace("         0          0 4294967295\n"),
            Some(true)
        );
        // rootless podman, a user-namespaced pod: a range of the host's uids.
        assert_eq!(
            initial_user_namespace("         0     100000      65536\n"),
            Some(false)
        );
        assert_eq!(
            initial_user_namespace(
                "         0       1000          1\n         1     100000      65536\n"
            ),
            Some(false)
        );
        // A namespace with no map written yet maps nothing.
        assert_eq!(initial_user_namespace(""), Some(false));
        assert_eq!(initial_user_namespace("0 0\n"), None);
    }

    #[test]
    fn kthreadd_is_seen_from_the_hosts_pid_namespace_only() {
        assert!(is_kthreadd(
            "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0 2"
        ));
        // pid 2 of a container: a process whose parent is its pid 1.
        assert!(!is_kthreadd("2 (python3) S 1 2 1 0 -1 4194560 0"));
        assert!(!is_kthreadd("2 (kthreadd) S 1 2 1 0 -1 4194560 0"));
        assert!(!is_kthreadd(""));
    }

    #[test]
    fn apparmor_labels() {
        assert_eq!(
            label("unconfined\n", false),
            Some(Label::AppArmor {
                profile: "unconfined".into(),
                mode: None
            })
        );
        let containerd = label("cri-containerd.apparmor.d (enforce)\n", false).unwrap();
        assert_eq!(
            containerd,
            Label::AppArmor {
                profile: "cri-containerd.apparmor.d".into(),
                mode: Some("enforce".into())
            }
        );
        assert!(containerd.apparmor_confined());
        assert_eq!(containerd.text(), "cri-containerd.apparmor.d (enforce)");
        let complain = label("docker-default (complain)", true).unwrap();
        assert!(!complain.apparmor_confined());
        // A profile in unconfined mode (AppArmor 4) confines nothing.
        assert!(
            !label("firefox (unconfined)", false)
                .unwrap()
                .apparmor_confined()
        );
        assert!(!label("unconfined", true).unwrap().apparmor_confined());
        // A profile in another policy namespace (LXD) is AppArmor's, not SELinux's.
        assert!(matches!(
            label(":lxd-c1_<var-snap-lxd-common-lxd>:unconfined\n", true),
            Some(Label::AppArmor { .. })
        ));
    }

    #[test]
    fn selinux_contexts() {
        let spc = label("system_u:system_r:spc_t:s0\0", false).unwrap();
        assert_eq!(spc, Label::SeLinux("system_u:system_r:spc_t:s0".into()));
        assert_eq!(spc.selinux_type(), Some("spc_t"));
        let container = label("system_u:system_r:container_t:s0:c123,c456", false).unwrap();
        assert_eq!(container.selinux_type(), Some("container_t"));
        let user = label(
            "unconfined_u:unconfined_r:unconfined_t:s0-s0:c0.c1023\n",
            false,
        );
        assert!(matches!(user, Some(Label::SeLinux(_))));
        assert!(!user.unwrap().apparmor_confined());
        assert_eq!(selinux_enforcing("1\n"), Some(true));
        assert_eq!(selinux_enforcing("0"), Some(false));
        assert_eq!(selinux_enforcing(""), None);
    }

    #[test]
    fn other_and_empty_labels() {
        assert_eq!(label("", false), None);
        assert_eq!(label("\0", false), None);
        assert_eq!(label("_\n", false), Some(Label::Other("_".into())));
        let long = "p".repeat(10_000);
        assert_eq!(label(&long, true).unwrap().text().len(), MAX_LABEL);
    }
}
