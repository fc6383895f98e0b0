//! What the daemon may read, concluded from what the kernel says of its
//! own process: whether other users' jobs' Python stacks (their memory) and
//! environments can be read, and why; and, for one job whose read was
//! refused, which cause applies. Pure: the facts come in already read.

use serde::{Deserialize, Serialize};

use super::parse::{
    CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_SYS_PTRACE, CAP_SYSLOG, Label, cap_names, has,
};

/// The capabilities the daemon uses (the systemd unit's, docs/deploy.md).
pub const NEEDED: [u32; 3] = [CAP_DAC_READ_SEARCH, CAP_SYS_PTRACE, CAP_SYSLOG];

/// What was read about the daemon's own process and the host; `None`
/// where the file was missing or said nothing understood.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Facts {
    pub uid: Option<u32>,
    /// Yama's `ptrace_scope`; `None` without Yama.
    pub ptrace_scope: Option<u8>,
    pub cap_effective: Option<u64>,
    pub cap_permitted: Option<u64>,
    /// The security module's label of the daemon, if any gives one.
    pub label: Option<Label>,
    pub selinux_enforcing: Option<bool>,
    pub initial_user_namespace: Option<bool>,
    pub host_pid_namespace: Option<bool>,
}

/// What is known of a job whose read was refused.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Job {
    pub uid: Option<u32>,
    pub label: Option<Label>,
}

/// Whose jobs can be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reach {
    /// Every user's.
    Yes,
    /// Every user's under the daemon's own AppArmor profile, none other.
    SameProfile,
    /// Only the daemon's own uid's.
    SameUid,
    /// None.
    No,
}

impl Reach {
    pub fn as_str(self) -> &'static str {
        match self {
            Reach::Yes => "yes",
            Reach::SameProfile => "same_profile",
            Reach::SameUid => "same_uid",
            Reach::No => "no",
        }
    }

    /// Both limits at once.
    fn and(self, other: Reach) -> Reach {
        match (self, other) {
            (Reach::No, _) | (_, Reach::No) => Reach::No,
            (Reach::Yes, r) | (r, Reach::Yes) => r,
            (Reach::SameProfile, Reach::SameProfile) => Reach::SameProfile,
            _ => Reach::SameUid,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Conclusion {
    pub read: Reach,
    pub why: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capabilities {
    /// `CapEff` and `CapPrm` as the kernel writes them (16 hex digits).
    pub effective: Option<String>,
    pub permitted: Option<String>,
    /// The effective ones by name.
    pub held: Vec<String>,
    /// Those the daemon uses (`CAP_SYS_PTRACE`, `CAP_DAC_READ_SEARCH`,
    /// `CAP_SYSLOG`) that are not in effect.
    pub missing: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppArmor {
    pub profile: String,
    pub mode: Option<String>,
    /// Enforced: neither `unconfined` nor in complain mode.
    pub confined: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeLinux {
    pub context: String,
    pub enforcing: Option<bool>,
}

/// The privileges report: `/api/v1/status`'s `privileges`, the start log
/// line, `stallwatch check`, the status page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Privileges {
    pub uid: Option<u32>,
    pub ptrace_scope: Option<u8>,
    pub capabilities: Capabilities,
    pub apparmor: Option<AppArmor>,
    pub selinux: Option<SeLinux>,
    pub initial_user_namespace: Option<bool>,
    pub host_pid_namespace: Option<bool>,
    /// Other users' jobs' Python stacks (their memory).
    pub stacks: Conclusion,
    /// Other users' jobs' environments (their run and rank).
    pub environments: Conclusion,
}

impl Privileges {
    pub fn from_facts(f: &Facts) -> Privileges {
        let hex = |set: Option<u64>| set.map(|s| format!("{s:016x}"));
        let eff = f.cap_effective.unwrap_or(0);
        Privileges {
            uid: f.uid,
            ptrace_scope: f.ptrace_scope,
            capabilities: Capabilities {
                effective: hex(f.cap_effective),
                permitted: hex(f.cap_permitted),
                held: cap_names(eff),
                missing: NEEDED
                    .iter()
                    .filter(|c| !has(eff, **c))
                    .flat_map(|c| cap_names(1 << c))
                    .collect(),
            },
            apparmor: match &f.label {
                Some(l @ Label::AppArmor { profile, mode }) => Some(AppArmor {
                    profile: profile.clone(),
                    mode: mode.clone(),
                    confined: l.apparmor_confined(),
                }),
                _ => None,
            },
            selinux: match &f.label {
                Some(Label::SeLinux(context)) => Some(SeLinux {
                    context: context.clone(),
                    enforcing: f.selinux_enforcing,
                }),
                _ => None,
            },
            initial_user_namespace: f.initial_user_namespace,
            host_pid_namespace: f.host_pid_namespace,
            stacks: stacks(f),
            environments: environments(f),
        }
    }
}

/// Reasons that hold whatever the capabilities: Yama 3, a user namespace,
/// an AppArmor profile. `Err` with the conclusion when one forbids every
/// read outright.
fn outright(f: &Facts, memory: bool) -> Result<Vec<(Reach, String)>, Conclusion> {
    if memory && f.ptrace_scope == Some(3) {
        return Err(Conclusion {
            read: Reach::No,
            why: "Yama's ptrace_scope is 3 (/proc/sys/kernel/yama/ptrace_scope): no process may read \
                  another's memory, whatever its capabilities, until the host reboots"
                .to_owned(),
        });
    }
    if f.initial_user_namespace == Some(false) {
        return Err(Conclusion {
            read: Reach::No,
            why: "stallwatch runs in a user namespace of its own (its uid_map is not the host's \
                  `0 0 4294967295`): its capabilities do not reach the host's processes"
                .to_owned(),
        });
    }
    let mut limits = Vec::new();
    if let Some(l) = f.label.as_ref().filter(|l| l.apparmor_confined()) {
        limits.push((
            Reach::SameProfile,
            format!(
                "AppArmor confines stallwatch to profile `{}`: a container runtime's default profile \
                 lets it read only processes under that same profile, not the host's own; run it \
                 unconfined (docs/deploy.md)",
                l.text()
            ),
        ));
    }
    Ok(limits)
}

/// A caveat where SELinux enforces a domain that is not unconfined.
fn selinux_caveat(f: &Facts) -> Option<String> {
    let t = f.label.as_ref()?.selinux_type()?;
    let unconfined = [
        "unconfined_t",
        "unconfined_service_t",
        "spc_t",
        "kernel_t",
        "init_t",
        "sysadm_t",
    ];
    (f.selinux_enforcing == Some(true) && !unconfined.contains(&t)).then(|| {
        format!(
            "SELinux enforces domain `{t}`: its policy decides which other domains it may read \
             (a container's `container_t` may not read the host's processes)"
        )
    })
}

fn conclude(
    f: &Facts,
    memory: bool,
    by_caps: (Reach, String),
    granted: impl FnOnce() -> String,
) -> Conclusion {
    let limits = match outright(f, memory) {
        Ok(limits) => limits,
        Err(no) => return no,
    };
    let mut read = by_caps.0;
    let mut why = Vec::new();
    if by_caps.0 != Reach::Yes {
        why.push(by_caps.1);
    }
    for (reach, text) in limits {
        read = read.and(reach);
        why.push(text);
    }
    if why.is_empty() {
        why.push(granted());
    }
    why.extend(selinux_caveat(f));
    Conclusion {
        read,
        why: why.join("; "),
    }
}

fn own_uid(f: &Facts) -> String {
    f.uid
        .map_or_else(|| "its own".to_owned(), |u| format!("uid {u}"))
}

/// Where its capabilities count: said only when known.
fn in_host_namespace(f: &Facts) -> &'static str {
    match f.initial_user_namespace {
        Some(true) => " in the host's user namespace",
        _ => "",
    }
}

fn yama(f: &Facts) -> String {
    match f.ptrace_scope {
        Some(s) => format!("Yama's ptrace_scope is {s}"),
        None => "no Yama".to_owned(),
    }
}

/// Other users' jobs' memory: `process_vm_readv`, the kernel's ptrace
/// attach check (Yama applies).
fn stacks(f: &Facts) -> Conclusion {
    let eff = f.cap_effective.unwrap_or(0);
    let by_caps = if has(eff, CAP_SYS_PTRACE) {
        (Reach::Yes, String::new())
    } else {
        match f.ptrace_scope {
            Some(1) => (
                Reach::No,
                "stallwatch lacks CAP_SYS_PTRACE and Yama's ptrace_scope is 1: without it a \
                 process may read only its own descendants' memory"
                    .to_owned(),
            ),
            Some(2) => (
                Reach::No,
                "stallwatch lacks CAP_SYS_PTRACE and Yama's ptrace_scope is 2: only a process with \
                 it may read another's memory"
                    .to_owned(),
            ),
            _ => (
                Reach::SameUid,
                format!(
                    "stallwatch lacks CAP_SYS_PTRACE, so it may read the memory of {}'s processes only",
                    own_uid(f)
                ),
            ),
        }
    };
    conclude(f, true, by_caps, || {
        format!(
            "stallwatch holds CAP_SYS_PTRACE{}, {} and no AppArmor profile confines it",
            in_host_namespace(f),
            yama(f)
        )
    })
}

/// Other users' jobs' `/proc/<pid>/environ`: mode 0400 (a DAC check) and
/// the kernel's ptrace read check (Yama does not apply).
fn environments(f: &Facts) -> Conclusion {
    let eff = f.cap_effective.unwrap_or(0);
    let mut lacking = Vec::new();
    if !has(eff, CAP_SYS_PTRACE) {
        lacking.push("CAP_SYS_PTRACE");
    }
    if !has(eff, CAP_DAC_READ_SEARCH) && !has(eff, CAP_DAC_OVERRIDE) {
        lacking.push("CAP_DAC_READ_SEARCH");
    }
    let by_caps = if lacking.is_empty() {
        (Reach::Yes, String::new())
    } else {
        (
            Reach::SameUid,
            format!(
                "stallwatch lacks {}, so it may read the environments of {}'s processes only",
                lacking.join(" and "),
                own_uid(f)
            ),
        )
    };
    conclude(f, false, by_caps, || {
        format!(
            "stallwatch holds CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH{} and no AppArmor profile \
             confines it",
            in_host_namespace(f)
        )
    })
}

/// The causes any read of `pid` shares, memory or environment: a user
/// namespace (first), and an AppArmor profile other than the job's or
/// SELinux domains that differ (second).
fn shared_causes(own: &Facts, job: &Job, pid: u32) -> (Vec<String>, Vec<String>) {
    let mut first = Vec::new();
    if own.initial_user_namespace == Some(false) {
        first.push(format!(
            "stallwatch runs in a user namespace of its own, where its capabilities do not reach \
             pid {pid} (run it in the host's user namespace: no PrivateUsers=, no rootless container)"
        ));
    }
    let mut modules = Vec::new();
    if let Some(mine) = own.label.as_ref().filter(|l| l.apparmor_confined()) {
        let same = matches!(
            (mine, &job.label),
            (Label::AppArmor { profile: a, .. }, Some(Label::AppArmor { profile: b, .. })) if a == b
        );
        if !same {
            let theirs = job.label.as_ref().map_or_else(
                || "a profile that could not be read".to_owned(),
                |l| format!("`{}`", l.text()),
            );
            modules.push(format!(
                "AppArmor confines stallwatch to profile `{}` and pid {pid} runs under {theirs}: a \
                 container runtime's default profile lets a process read only processes under the \
                 same profile; run stallwatch unconfined (docs/deploy.md)",
                mine.text()
            ));
        }
    }
    if own.selinux_enforcing == Some(true)
        && let (Some(mine), Some(theirs)) = (
            own.label.as_ref().and_then(Label::selinux_type),
            job.label.as_ref().and_then(Label::selinux_type),
        )
        && mine != theirs
    {
        modules.push(format!(
            "SELinux is enforcing and stallwatch's domain `{mine}` may not be allowed to read \
             pid {pid}'s domain `{theirs}`"
        ));
    }
    (first, modules)
}

/// Says what keeps stallwatch from reading `pid`'s memory: each cause that
/// applies, from what the daemon's process and the job's say.
pub fn refusal(own: &Facts, job: &Job, pid: u32, comm: &str) -> String {
    let head = format!("cannot read pid {pid} ({comm})");
    if own.ptrace_scope == Some(3) {
        return format!(
            "{head}: Yama ptrace_scope is 3 (/proc/sys/kernel/yama/ptrace_scope), which forbids \
             reading any other process's memory, even with CAP_SYS_PTRACE"
        );
    }
    let (mut causes, modules) = shared_causes(own, job, pid);
    let has_cap = own.cap_effective.is_some_and(|c| has(c, CAP_SYS_PTRACE));
    let other_user = job.uid.is_some() && job.uid != own.uid;
    if !has_cap {
        let why = match (other_user, own.ptrace_scope) {
            (true, _) => Some("it belongs to another user".to_owned()),
            (false, Some(s)) if s >= 1 => Some(format!("Yama ptrace_scope is {s}")),
            _ => None,
        };
        if let Some(why) = why {
            causes.push(format!(
                "stallwatch lacks CAP_SYS_PTRACE, which reading its memory needs ({why}); the \
                 shipped systemd unit grants it"
            ));
        }
    }
    causes.extend(modules);
    if causes.is_empty() {
        if has_cap {
            return format!(
                "{head}: permission denied despite CAP_SYS_PTRACE (a security module or seccomp \
                 policy forbids process_vm_readv)"
            );
        }
        return format!(
            "{head}: stallwatch lacks CAP_SYS_PTRACE, which reading its memory needs (the kernel \
             refused); the shipped systemd unit grants it"
        );
    }
    format!("{head}: {}", causes.join("; and "))
}

/// Says what keeps stallwatch from reading `pid`'s environment, where a
/// cause is known: its mode (another user's) wants a DAC capability, the
/// ptrace read check `CAP_SYS_PTRACE` (Yama takes no part).
pub fn environ_refusal(own: &Facts, job: &Job, pid: u32) -> Option<String> {
    let (mut causes, modules) = shared_causes(own, job, pid);
    let eff = own.cap_effective.unwrap_or(0);
    let other_user = job.uid.is_some() && job.uid != own.uid;
    let mut lacking = Vec::new();
    if !has(eff, CAP_SYS_PTRACE) {
        lacking.push("CAP_SYS_PTRACE");
    }
    if !has(eff, CAP_DAC_READ_SEARCH) && !has(eff, CAP_DAC_OVERRIDE) {
        lacking.push("CAP_DAC_READ_SEARCH");
    }
    if other_user && !lacking.is_empty() {
        causes.push(format!(
            "stallwatch lacks {}, which another user's environment needs; the shipped systemd \
             unit grants them",
            lacking.join(" and ")
        ));
    }
    causes.extend(modules);
    (!causes.is_empty()).then(|| causes.join("; and "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::privileges::parse::label;

    const UNIT_CAPS: u64 = (1 << 2) | (1 << 19) | (1 << 34);

    /// The systemd unit on a Debian host: a dynamic user, its three
    /// capabilities, Yama 1, AppArmor loaded but not confining it.
    fn unit() -> Facts {
        Facts {
            uid: Some(61234),
            ptrace_scope: Some(1),
            cap_effective: Some(UNIT_CAPS),
            cap_permitted: Some(UNIT_CAPS),
            label: label("unconfined\n", true),
            selinux_enforcing: None,
            initial_user_namespace: Some(true),
            host_pid_namespace: Some(true),
        }
    }

    #[test]
    fn the_systemd_unit_reads_every_users_jobs() {
        let p = Privileges::from_facts(&unit());
        assert_eq!(p.stacks.read, Reach::Yes, "{}", p.stacks.why);
        assert!(
            p.stacks.why.contains("ptrace_scope is 1"),
            "{}",
            p.stacks.why
        );
        assert_eq!(p.environments.read, Reach::Yes);
        assert_eq!(
            p.capabilities.held,
            ["CAP_DAC_READ_SEARCH", "CAP_SYS_PTRACE", "CAP_SYSLOG"]
        );
        assert!(p.capabilities.missing.is_empty());
        assert_eq!(
            p.capabilities.effective.as_deref(),
            Some("0000000400080004")
        );
        let aa = p.apparmor.unwrap();
        assert!(aa.profile == "unconfined" && !aa.confined);
        assert_eq!(p.selinux, None);
    }

    #[test]
    fn without_capabilities_only_its_own_uids_jobs() {
        let f = Facts {
            cap_effective: Some(0),
            ptrace_scope: Some(0),
            ..unit()
        };
        let p = Privileges::from_facts(&f);
        assert_eq!(p.stacks.read, Reach::SameUid);
        assert!(
            p.stacks.why.contains("lacks CAP_SYS_PTRACE") && p.stacks.why.contains("uid 61234")
        );
        assert_eq!(p.environments.read, Reach::SameUid);
        assert!(
            p.environments
                .why
                .contains("lacks CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH"),
            "{}",
            p.environments.why
        );
        assert_eq!(
            p.capabilities.missing,
            ["CAP_DAC_READ_SEARCH", "CAP_SYS_PTRACE", "CAP_SYSLOG"]
        );
        // Yama 1 or 2 leaves it nothing: jobs are not its descendants.
        for scope in [1, 2] {
            let p = Privileges::from_facts(&Facts {
                ptrace_scope: Some(scope),
                ..f.clone()
            });
            assert_eq!(p.stacks.read, Reach::No);
            assert!(p.stacks.why.contains(&format!("ptrace_scope is {scope}")));
            // Yama does not guard environments.
            assert_eq!(p.environments.read, Reach::SameUid);
        }
    }

    #[test]
    fn dac_override_stands_in_for_dac_read_search() {
        let f = Facts {
            cap_effective: Some((1 << 1) | (1 << 19)),
            ..unit()
        };
        assert_eq!(Privileges::from_facts(&f).environments.read, Reach::Yes);
    }

    #[test]
    fn ptrace_scope_3_forbids_stacks_but_not_environments() {
        let f = Facts {
            ptrace_scope: Some(3),
            ..unit()
        };
        let p = Privileges::from_facts(&f);
        assert_eq!(p.stacks.read, Reach::No);
        assert!(p.stacks.why.contains("ptrace_scope is 3"));
        assert_eq!(p.environments.read, Reach::Yes);
    }

    #[test]
    fn a_user_namespace_reaches_nothing_of_the_hosts() {
        let f = Facts {
            initial_user_namespace: Some(false),
            ..unit()
        };
        let p = Privileges::from_facts(&f);
        assert_eq!(p.stacks.read, Reach::No);
        assert_eq!(p.environments.read, Reach::No);
        assert!(p.stacks.why.contains("user namespace"));
    }

    #[test]
    fn a_containers_default_apparmor_profile_reads_its_own_profile_only() {
        let f = Facts {
            uid: Some(0),
            cap_effective: Some((1 << 2) | (1 << 19)),
            label: label("cri-containerd.apparmor.d (enforce)\n", false),
            ..unit()
        };
        let p = Privileges::from_facts(&f);
        assert_eq!(p.stacks.read, Reach::SameProfile);
        assert!(p.stacks.why.contains("cri-containerd.apparmor.d (enforce)"));
        assert_eq!(p.environments.read, Reach::SameProfile);
        assert!(p.apparmor.unwrap().confined);
        assert_eq!(p.capabilities.missing, ["CAP_SYSLOG"]);
        // Without CAP_SYS_PTRACE as well: its own uid's, under its profile.
        let p = Privileges::from_facts(&Facts {
            cap_effective: Some(0),
            ptrace_scope: None,
            ..f
        });
        assert_eq!(p.stacks.read, Reach::SameUid);
        assert!(p.stacks.why.contains("lacks CAP_SYS_PTRACE") && p.stacks.why.contains("AppArmor"));
        // In complain mode it only logs.
        let p = Privileges::from_facts(&Facts {
            label: label("cri-containerd.apparmor.d (complain)", true),
            ..unit()
        });
        assert_eq!(p.stacks.read, Reach::Yes);
    }

    #[test]
    fn selinux_is_reported_with_a_caveat_for_confined_domains() {
        let f = Facts {
            label: label("system_u:system_r:container_t:s0:c1,c2", false),
            selinux_enforcing: Some(true),
            ..unit()
        };
        let p = Privileges::from_facts(&f);
        assert_eq!(
            p.selinux,
            Some(SeLinux {
                context: "system_u:system_r:container_t:s0:c1,c2".into(),
                enforcing: Some(true)
            })
        );
        assert!(
            p.stacks
                .why
                .contains("SELinux enforces domain `container_t`")
        );
        let spc = Facts {
            label: label("system_u:system_r:spc_t:s0", false),
            selinux_enforcing: Some(true),
            ..unit()
        };
        assert!(!Privileges::from_facts(&spc).stacks.why.contains("SELinux"));
    }

    #[test]
    fn unknown_facts_are_null_not_guesses() {
        let p = Privileges::from_facts(&Facts::default());
        assert_eq!(p.capabilities.effective, None);
        assert_eq!(p.ptrace_scope, None);
        assert_eq!(p.initial_user_namespace, None);
        let json = serde_json::to_value(&p).unwrap();
        assert!(json["host_pid_namespace"].is_null());
        assert_eq!(json["stacks"]["read"], "same_uid");
    }

    fn job(uid: u32, l: &str) -> Job {
        Job {
            uid: Some(uid),
            label: label(l, false),
        }
    }

    #[test]
    fn a_refusal_names_each_cause_that_applies() {
        let none = Facts {
            cap_effective: Some(0),
            ..unit()
        };
        let msg = refusal(&none, &job(0, "unconfined"), 77, "python3");
        assert!(
            msg.starts_with("cannot read pid 77 (python3): stallwatch lacks CAP_SYS_PTRACE")
                && msg.contains("another user"),
            "{msg}"
        );
        let msg = refusal(&none, &job(61234, "unconfined"), 77, "python3");
        assert!(msg.contains("Yama ptrace_scope is 1"), "{msg}");
        let three = Facts {
            ptrace_scope: Some(3),
            ..unit()
        };
        assert!(refusal(&three, &job(0, ""), 77, "python3").contains("ptrace_scope is 3"));
        let nested = Facts {
            initial_user_namespace: Some(false),
            ..unit()
        };
        assert!(refusal(&nested, &job(0, ""), 77, "python3").contains("user namespace of its own"));
        // The DaemonSet under containerd's default profile, a job on the host.
        let pod = Facts {
            uid: Some(0),
            label: label("cri-containerd.apparmor.d (enforce)", false),
            ..unit()
        };
        let msg = refusal(&pod, &job(1000, "unconfined"), 77, "python3");
        assert!(
            msg.contains(
                "profile `cri-containerd.apparmor.d (enforce)` and pid 77 runs under `unconfined`"
            ),
            "{msg}"
        );
        assert!(!msg.contains("lacks"), "{msg}");
        // A job in another pod under the same profile: AppArmor is not why.
        let msg = refusal(
            &pod,
            &job(1000, "cri-containerd.apparmor.d (enforce)"),
            77,
            "python3",
        );
        assert!(msg.contains("despite CAP_SYS_PTRACE"), "{msg}");
        // Both at once: both named.
        let msg = refusal(
            &Facts {
                cap_effective: Some(0),
                ..pod.clone()
            },
            &job(1000, "unconfined"),
            77,
            "python3",
        );
        assert!(
            msg.contains("lacks CAP_SYS_PTRACE") && msg.contains("; and AppArmor"),
            "{msg}"
        );
        let selinux = Facts {
            label: label("system_u:system_r:container_t:s0:c1,c2", false),
            selinux_enforcing: Some(true),
            ..unit()
        };
        let msg = refusal(
            &selinux,
            &job(0, "unconfined_u:unconfined_r:unconfined_t:s0"),
            77,
            "python3",
        );
        assert!(
            msg.contains("domain `container_t`") && msg.contains("`unconfined_t`"),
            "{msg}"
        );
    }

    #[test]
    fn an_environment_refusal_names_its_own_causes() {
        let none = Facts {
            cap_effective: Some(0),
            ..unit()
        };
        let why = environ_refusal(&none, &job(0, "unconfined"), 77).unwrap();
        assert!(
            why.starts_with(
                "stallwatch lacks CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH, which another user's"
            ),
            "{why}"
        );
        // Its own user's: no capability is why; Yama is never why.
        assert_eq!(environ_refusal(&none, &job(61234, ""), 77), None);
        let three = Facts {
            ptrace_scope: Some(3),
            ..unit()
        };
        assert_eq!(environ_refusal(&three, &job(0, ""), 77), None);
        let nested = Facts {
            initial_user_namespace: Some(false),
            ..unit()
        };
        let why = environ_refusal(&nested, &job(0, ""), 77).unwrap();
        assert!(why.contains("user namespace of its own"), "{why}");
        let pod = Facts {
            label: label("cri-containerd.apparmor.d (enforce)", false),
            ..unit()
        };
        let why = environ_refusal(&pod, &job(0, "unconfined"), 77).unwrap();
        assert!(why.starts_with("AppArmor confines stallwatch"), "{why}");
    }
}
