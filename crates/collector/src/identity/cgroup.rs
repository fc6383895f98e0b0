//! Where a job runs, from the cgroup paths in `/proc/<pid>/cgroup`: container,
//! Kubernetes pod, systemd unit, Slurm job and step (and, in Slurm's v1
//! layout, the job's uid).

use procfs::ProcessCGroups;
use procfs::prelude::*;
use rustc_hash::FxHashMap;

use crate::sample::Attribution;

/// Each job leader's last `cgroup` text and what it gave, so that the text,
/// which changes only when the process is moved, is parsed once: a sample
/// compares the bytes and reuses the attribution while they are the same.
/// (The attribution is a function of the text alone, so a reused pid with
/// the same text rightly gets the same answer.)
#[derive(Debug, Clone, Default)]
pub struct Attributions {
    sample: u64,
    /// pid -> (cgroup text, its attribution, sample last used)
    by_pid: FxHashMap<u32, (Vec<u8>, Attribution, u64)>,
}

impl Attributions {
    /// Starts a sample: forgets the leaders not seen in the previous one.
    pub fn begin(&mut self) {
        let previous = self.sample;
        self.by_pid.retain(|_, (_, _, used)| *used == previous);
        self.sample += 1;
    }

    /// The attribution of `pid`'s cgroup `text`.
    pub fn get(&mut self, pid: u32, text: &[u8]) -> Attribution {
        let sample = self.sample;
        if let Some((known, attribution, used)) = self.by_pid.get_mut(&pid)
            && known.as_slice() == text
        {
            *used = sample;
            return attribution.clone();
        }
        let attribution = parse_attribution(&String::from_utf8_lossy(text));
        self.by_pid
            .insert(pid, (text.to_vec(), attribution.clone(), sample));
        attribution
    }
}

/// Container runtimes' systemd scope (or cgroupfs directory) prefixes. The
/// runtime monitors' scopes (`crio-conmon-`, `libpod-conmon-`) are neither a
/// container nor a unit of interest.
const CONTAINER_PREFIXES: [&str; 4] = ["docker-", "cri-containerd-", "crio-", "libpod-"];
const MONITOR_PREFIXES: [&str; 2] = ["crio-conmon-", "libpod-conmon-"];

/// Reads the text of `/proc/<pid>/cgroup` (cgroup v1, v2 or hybrid).
/// Lines that do not parse are skipped. For each field the first line that
/// yields a value wins; within one path the innermost component wins.
pub fn parse_attribution(text: &str) -> Attribution {
    let mut attribution = Attribution::default();
    let paths = text
        .lines()
        .filter_map(|line| ProcessCGroups::from_read(line.as_bytes()).ok())
        .flat_map(|groups| groups.0)
        .map(|group| group.pathname);
    for path in paths {
        let found = path_attribution(&path);
        let a = &mut attribution;
        a.container_id = a.container_id.take().or(found.container_id);
        a.systemd_unit = a.systemd_unit.take().or(found.systemd_unit);
        a.pod_uid = a.pod_uid.take().or(found.pod_uid);
        if a.slurm_job_id.is_none() {
            a.slurm_job_id = found.slurm_job_id;
            a.slurm_step = found.slurm_step;
            a.slurm_uid = found.slurm_uid;
        }
    }
    attribution
}

fn path_attribution(path: &str) -> Attribution {
    let mut found = Attribution::default();
    let mut under_kubepods = false;
    let mut under_slurm = false;
    for part in path.split('/').filter(|p| !p.is_empty()) {
        if let Some(id) = container_id(part) {
            found.container_id = Some(id.to_owned());
        } else if let Some(uid) = pod_uid(part, under_kubepods) {
            found.pod_uid = Some(uid);
        } else if is_unit(part) {
            found.systemd_unit = Some(part.to_owned());
        } else if under_slurm {
            slurm_part(part, &mut found);
        }
        under_kubepods |= part.starts_with("kubepods");
        under_slurm |= is_slurm_root(part);
    }
    found
}

/// The directory (or scope) Slurm's cgroup plugin puts its jobs below: `slurm`
/// (v1; `slurm_<node>` on multi-slurmd builds), `slurmstepd.scope` (v2) or
/// `<node>_slurmstepd.scope` (v2, multi-slurmd).
fn is_slurm_root(part: &str) -> bool {
    part == "slurm"
        || part.starts_with("slurm_")
        || part == "slurmstepd.scope"
        || part.ends_with("_slurmstepd.scope")
}

/// `docker-<id>.scope`, `cri-containerd-<id>.scope`, `crio-<id>.scope`,
/// `libpod-<id>.scope`, the same without `.scope` (cgroupfs driver), or a
/// bare 64-hex directory (`/docker/<id>`, `/kubepods/.../pod<uid>/<id>`).
fn container_id(part: &str) -> Option<&str> {
    if is_container_id(part) {
        return Some(part);
    }
    if MONITOR_PREFIXES.iter().any(|p| part.starts_with(p)) {
        return None;
    }
    let name = part.strip_suffix(".scope").unwrap_or(part);
    CONTAINER_PREFIXES
        .iter()
        .filter_map(|prefix| name.strip_prefix(prefix))
        .find(|id| is_container_id(id))
}

fn is_container_id(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// `kubepods-burstable-pod<uid with _>.slice` (systemd driver) or
/// `pod<uid>` below a `kubepods` directory (cgroupfs driver).
fn pod_uid(part: &str, under_kubepods: bool) -> Option<String> {
    let uid = if let Some(slice) = part
        .strip_suffix(".slice")
        .filter(|_| part.starts_with("kubepods"))
    {
        let at = slice.rfind("-pod")?;
        &slice[at + "-pod".len()..]
    } else if under_kubepods {
        part.strip_prefix("pod")?
    } else {
        return None;
    };
    let valid = !uid.is_empty()
        && uid
            .bytes()
            .all(|b| b.is_ascii_hexdigit() || b == b'-' || b == b'_');
    valid.then(|| uid.replace('_', "-"))
}

/// A systemd service, or a scope that is not a container runtime's.
fn is_unit(part: &str) -> bool {
    let runtime_scope = CONTAINER_PREFIXES
        .iter()
        .chain(&MONITOR_PREFIXES)
        .any(|p| part.starts_with(p));
    part.ends_with(".service") || (part.ends_with(".scope") && !runtime_scope)
}

/// Longest Slurm job id or step name kept (Slurm's are numbers and the
/// words `batch`, `extern`, `interactive`; anything else is kept when short
/// and plain).
const MAX_SLURM_ID: usize = 32;

/// One component below a Slurm root: `uid_<uid>` (v1), `job_<id>`, and below
/// the job `step_<step>` (`step_0`, `step_batch`, `step_extern`,
/// `step_interactive`, ...). `task_<n>`, `user` and the rest say nothing more.
/// A step is taken only below a job, and a job only once per path.
fn slurm_part(part: &str, found: &mut Attribution) {
    if let Some(uid) = part.strip_prefix("uid_") {
        if found.slurm_job_id.is_none() {
            found.slurm_uid = uid.parse().ok();
        }
    } else if let Some(job) = part.strip_prefix("job_").filter(|id| slurm_id(id)) {
        if found.slurm_job_id.is_none() {
            found.slurm_job_id = Some(job.to_owned());
        }
    } else if let Some(step) = part.strip_prefix("step_").filter(|id| slurm_id(id))
        && found.slurm_job_id.is_some()
        && found.slurm_step.is_none()
    {
        found.slurm_step = Some(step.to_owned());
    }
}

/// A job id or step as Slurm writes them (digits, `batch`, `extern`,
/// `interactive`), or another short plain word from a build that names them
/// otherwise; never anything that could carry a path or markup.
fn slurm_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_SLURM_ID
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_attribution_is_parsed_again_only_when_the_text_changes() {
        let mut known = Attributions::default();
        let docker = format!("0::/system.slice/docker-{ID}.scope\n");
        let unit = "0::/system.slice/train.service\n";
        known.begin();
        assert_eq!(
            known.get(7, docker.as_bytes()).container_id.as_deref(),
            Some(ID)
        );
        known.begin();
        assert_eq!(
            known.get(7, docker.as_bytes()).container_id.as_deref(),
            Some(ID)
        );
        let moved = known.get(7, unit.as_bytes());
        assert_eq!(moved.container_id, None, "moved: the new text counts");
        assert_eq!(moved.systemd_unit.as_deref(), Some("train.service"));
        known.begin();
        known.begin();
        assert!(
            known.by_pid.is_empty(),
            "a leader not seen for a sample is forgotten"
        );
    }

    const ID: &str = "4f6c3d0e9a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5";

    fn parse(text: &str) -> Attribution {
        parse_attribution(&text.replace("<ID>", ID))
    }

    #[test]
    fn docker_systemd_driver_v2() {
        let a = parse("0::/system.slice/docker-<ID>.scope\n");
        assert_eq!(a.container_id.as_deref(), Some(ID));
        assert_eq!(a.systemd_unit, None, "a container scope is not a unit");
        assert_eq!(a.pod_uid, None);
    }

    #[test]
    fn docker_cgroupfs_driver_v1() {
        let text =
            "12:pids:/docker/<ID>\n11:cpu,cpuacct:/docker/<ID>\n1:name=systemd:/docker/<ID>\n";
        let a = parse(text);
        assert_eq!(a.container_id.as_deref(), Some(ID));
        assert_eq!(a.systemd_unit, None);
    }

    #[test]
    fn kubepods_systemd_driver_containerd() {
        let a = parse(
            "0::/kubepods.slice/kubepods-burstable.slice/\
             kubepods-burstable-pod0d3b1c2a_5e6f_4a7b_8c9d_0e1f2a3b4c5d.slice/\
             cri-containerd-<ID>.scope\n",
        );
        assert_eq!(
            a.pod_uid.as_deref(),
            Some("0d3b1c2a-5e6f-4a7b-8c9d-0e1f2a3b4c5d")
        );
        assert_eq!(a.container_id.as_deref(), Some(ID));
        assert_eq!(a.systemd_unit, None);
    }

    #[test]
    fn kubepods_guaranteed_crio() {
        let a = parse(
            "0::/kubepods.slice/kubepods-pod11112222_3333_4444_5555_666677778888.slice/crio-<ID>.scope\n",
        );
        assert_eq!(
            a.pod_uid.as_deref(),
            Some("11112222-3333-4444-5555-666677778888")
        );
        assert_eq!(a.container_id.as_deref(), Some(ID));
    }

    #[test]
    fn crio_monitor_scope_is_neither_container_nor_unit() {
        let a = parse("0::/kubepods.slice/kubepods-podabc.slice/crio-conmon-<ID>.scope\n");
        assert_eq!(a.container_id, None);
        assert_eq!(a.systemd_unit, None);
        assert_eq!(a.pod_uid.as_deref(), Some("abc"));
    }

    #[test]
    fn kubepods_cgroupfs_driver_v1() {
        let text = "\
            11:memory:/kubepods/burstable/pod0d3b1c2a-5e6f-4a7b-8c9d-0e1f2a3b4c5d/<ID>\n\
            3:cpu,cpuacct:/kubepods/burstable/pod0d3b1c2a-5e6f-4a7b-8c9d-0e1f2a3b4c5d/<ID>\n";
        let a = parse(text);
        assert_eq!(
            a.pod_uid.as_deref(),
            Some("0d3b1c2a-5e6f-4a7b-8c9d-0e1f2a3b4c5d")
        );
        assert_eq!(a.container_id.as_deref(), Some(ID));
    }

    #[test]
    fn systemd_service_is_the_last_unit() {
        let a = parse("0::/user.slice/user-1000.slice/user@1000.service/app.slice/train.service\n");
        assert_eq!(a.systemd_unit.as_deref(), Some("train.service"));
        assert_eq!(a.container_id, None);

        let a = parse("0::/user.slice/user-1000.slice/session-42.scope\n");
        assert_eq!(a.systemd_unit.as_deref(), Some("session-42.scope"));
    }

    /// (job, step, uid) of a cgroup text.
    fn slurm(text: &str) -> (Option<String>, Option<String>, Option<u32>) {
        let a = parse(text);
        (a.slurm_job_id, a.slurm_step, a.slurm_uid)
    }

    fn job(
        job: &str,
        step: &str,
        uid: Option<u32>,
    ) -> (Option<String>, Option<String>, Option<u32>) {
        (Some(job.to_owned()), Some(step.to_owned()), uid)
    }

    #[test]
    fn slurm_cgroup_v2() {
        let a = parse("0::/system.slice/slurmstepd.scope/job_73421/step_0/user/task_0\n");
        assert_eq!(a.slurm_job_id.as_deref(), Some("73421"));
        assert_eq!(a.slurm_step.as_deref(), Some("0"));
        assert_eq!(a.slurm_uid, None, "v2 paths carry no uid");
        assert_eq!(a.systemd_unit.as_deref(), Some("slurmstepd.scope"));
    }

    #[test]
    fn slurm_cgroup_v2_every_step_kind() {
        for step in ["batch", "extern", "interactive", "0", "17"] {
            let text = format!("0::/system.slice/slurmstepd.scope/job_9/step_{step}/user/task_0\n");
            assert_eq!(slurm(&text), job("9", step, None), "{text}");
        }
        // The step's own slurmstepd sits beside the user's tasks.
        let text = "0::/system.slice/slurmstepd.scope/job_9/step_extern/slurm\n";
        assert_eq!(slurm(text), job("9", "extern", None));
    }

    #[test]
    fn slurm_cgroup_v2_multi_slurmd_names_the_node() {
        let text = "0::/system.slice/gpu-node-07_slurmstepd.scope/job_88/step_batch/user/task_0\n";
        assert_eq!(slurm(text), job("88", "batch", None));
        assert_eq!(
            parse(text).systemd_unit.as_deref(),
            Some("gpu-node-07_slurmstepd.scope")
        );
    }

    #[test]
    fn slurm_cgroup_v1() {
        let text = "\
            12:devices:/slurm/uid_1000/job_512/step_batch/task_0\n\
            4:memory:/slurm/uid_1000/job_512/step_batch/task_0\n\
            1:name=systemd:/system.slice/slurmd.service\n";
        let a = parse(text);
        assert_eq!(a.slurm_job_id.as_deref(), Some("512"));
        assert_eq!(a.slurm_step.as_deref(), Some("batch"));
        assert_eq!(a.slurm_uid, Some(1000));
        assert_eq!(a.systemd_unit.as_deref(), Some("slurmd.service"));
    }

    #[test]
    fn slurm_cgroup_v1_multi_slurmd_and_numbered_steps() {
        let text = "5:cpuset:/slurm_node3/uid_2001/job_40/step_3/task_1\n";
        assert_eq!(slurm(text), job("40", "3", Some(2001)));
    }

    #[test]
    fn a_slurm_job_without_a_step_and_odd_ids() {
        // The job's own directory (a process slurmstepd put there itself).
        let text = "0::/system.slice/slurmstepd.scope/job_7\n";
        assert_eq!(slurm(text), (Some("7".into()), None, None));
        // Another build's ids: kept when short and plain.
        let text = "0::/system.slice/slurmstepd.scope/job_7_3/step_het-1/user/task_0\n";
        assert_eq!(slurm(text), job("7_3", "het-1", None));
        // Anything else is left out, never passed on.
        let long = "9".repeat(MAX_SLURM_ID + 1);
        let text = format!("0::/system.slice/slurmstepd.scope/job_{long}/step_0\n");
        assert_eq!(slurm(&text), (None, None, None), "no step without its job");
        let text = "0::/system.slice/slurmstepd.scope/job_7/step_a b/user\n";
        assert_eq!(slurm(text), (Some("7".into()), None, None));
        let text = "0::/slurm/uid_x/job_7/step_0\n";
        assert_eq!(
            slurm(text),
            job("7", "0", None),
            "a uid that is not a number"
        );
    }

    #[test]
    fn job_directory_outside_slurm_is_not_a_slurm_job() {
        let a = parse("0::/system.slice/runner.service/job_9\n");
        assert_eq!(a.slurm_job_id, None);
        assert_eq!(a.systemd_unit.as_deref(), Some("runner.service"));
    }

    #[test]
    fn root_malformed_and_empty_give_nothing() {
        assert_eq!(parse("0::/\n"), Attribution::default());
        assert_eq!(parse(""), Attribution::default());
        assert_eq!(parse("garbage\nnot:a number:/x\n"), Attribution::default());
        let a = parse("garbage line\n0::/system.slice/docker-<ID>.scope\n");
        assert_eq!(a.container_id.as_deref(), Some(ID));
    }

    #[test]
    fn nested_container_takes_the_innermost() {
        let inner = "b".repeat(64);
        let a = parse(&format!(
            "0::/docker/<ID>/kubepods/besteffort/podabc-123/{inner}\n"
        ));
        assert_eq!(a.container_id.as_deref(), Some(inner.as_str()));
        assert_eq!(a.pod_uid.as_deref(), Some("abc-123"));
    }
}
