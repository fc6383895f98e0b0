//! Which pod and container each job belongs to: the kubelet's answer kept
//! within bounds, and the pure match of jobs to it.
//!
//! A job is matched by its GPUs: the device ids the kubelet lists for an
//! `nvidia.com/*` resource are GPU UUIDs (`GPU-...`), MIG device UUIDs
//! (`MIG-...`, or `MIG-GPU-<uuid>/<gi>/<ci>` from older device plugins), or
//! GPU indexes; a time-sliced replica (`<id>::<n>`) counts as its GPU. The
//! kubelet names no pod UID, so a job's cgroup pod UID is tied to a pod
//! through the GPUs its jobs use: a UID whose jobs use GPUs of one pod only
//! (after the pods other UIDs account for alone are set aside) is that pod,
//! and every job of it, one on a GPU the pod did not request included, gets
//! the pod's names. A UID that cannot be tied keeps its UID and gets the
//! reason in `pod_unknown`.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::proto::ListPodResourcesResponse;
use crate::sample::{GpuSample, JobSample};

/// Most pods kept of one answer (a node runs at most a few hundred).
pub const MAX_PODS: usize = 4096;
/// Most containers kept of one pod.
pub const MAX_CONTAINERS: usize = 64;
/// Most GPU device ids kept of one container.
pub const MAX_DEVICES: usize = 256;
/// Longest name (a DNS subdomain) or device id kept.
pub const MAX_NAME: usize = 253;

/// A pod as kept: its names and its containers' GPU device ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pod {
    pub namespace: String,
    pub name: String,
    pub containers: Vec<Container>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Container {
    pub name: String,
    /// Device ids of `nvidia.com/*` resources.
    pub devices: Vec<String>,
}

/// The kubelet's last answer, bounded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodTable {
    pub pods: Vec<Pod>,
    /// What was left out, in words.
    pub left_out: Option<String>,
    /// Device id (without a replica suffix) -> the containers given it,
    /// made once per answer.
    by_device: HashMap<String, Vec<Slot>>,
}

/// A Kubernetes name: lowercase letters, digits, `-` and `.`, at most
/// [`MAX_NAME`] bytes.
fn kube_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_NAME
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
}

/// A device id as device plugins write them: printable ASCII without
/// spaces, at most [`MAX_NAME`] bytes.
fn device_id(s: &str) -> bool {
    !s.is_empty() && s.len() <= MAX_NAME && s.bytes().all(|b| b.is_ascii_graphic())
}

impl PodTable {
    /// Keeps what stallwatch reads of `answer`: pods and containers with
    /// valid names (at most [`MAX_PODS`] and [`MAX_CONTAINERS`]), and of
    /// each container the ids of its `nvidia.com/` resources (at most
    /// [`MAX_DEVICES`]).
    pub fn from_answer(answer: ListPodResourcesResponse) -> PodTable {
        let mut left_out = BTreeMap::<&str, usize>::new();
        let total = answer.pod_resources.len();
        let mut pods = Vec::new();
        for pod in answer.pod_resources.into_iter().take(MAX_PODS) {
            if !kube_name(&pod.namespace) || !kube_name(&pod.name) {
                *left_out.entry("pods with invalid names").or_default() += 1;
                continue;
            }
            let mut containers = Vec::new();
            for c in pod.containers.into_iter().take(MAX_CONTAINERS) {
                if !kube_name(&c.name) {
                    *left_out.entry("containers with invalid names").or_default() += 1;
                    continue;
                }
                let mut devices: Vec<String> = c
                    .devices
                    .into_iter()
                    .filter(|d| d.resource_name.starts_with("nvidia.com/"))
                    .flat_map(|d| d.device_ids)
                    .filter(|id| device_id(id))
                    .collect();
                if devices.len() > MAX_DEVICES {
                    *left_out.entry("device ids past the limit").or_default() +=
                        devices.len() - MAX_DEVICES;
                    devices.truncate(MAX_DEVICES);
                }
                containers.push(Container {
                    name: c.name,
                    devices,
                });
            }
            pods.push(Pod {
                namespace: pod.namespace,
                name: pod.name,
                containers,
            });
        }
        if total > MAX_PODS {
            left_out.insert("pods past the limit", total - MAX_PODS);
        }
        let left_out = (!left_out.is_empty()).then(|| {
            let parts: Vec<String> = left_out
                .iter()
                .map(|(what, n)| format!("{n} {what}"))
                .collect();
            format!("left out of the kubelet's answer: {}", parts.join(", "))
        });
        let mut by_device: HashMap<String, Vec<Slot>> = HashMap::new();
        for (p, pod) in pods.iter().enumerate() {
            for (c, container) in pod.containers.iter().enumerate() {
                for id in &container.devices {
                    by_device
                        .entry(device_key(id).to_owned())
                        .or_default()
                        .push((p, c));
                }
            }
        }
        PodTable {
            pods,
            left_out,
            by_device,
        }
    }
}

/// The ids a device plugin may give `gpu`: its UUID; for a whole GPU its
/// index; for a MIG instance the older `MIG-<parent uuid>/<gi>/<ci>`.
fn gpu_keys(gpu: &GpuSample) -> Vec<String> {
    let mut keys = vec![gpu.uuid.clone()];
    match &gpu.mig {
        None => keys.push(gpu.index.to_string()),
        Some(m) => keys.push(format!(
            "MIG-{}/{}/{}",
            m.parent_uuid, m.gpu_instance_id, m.compute_instance_id
        )),
    }
    keys
}

/// A device id without a time-slicing replica suffix (`<id>::<n>`).
fn device_key(id: &str) -> &str {
    id.split_once("::").map_or(id, |(id, _)| id)
}

/// (pod, container) positions in the table.
type Slot = (usize, usize);

/// Sets each job's `namespace`, `pod`, `container` and `pod_unknown`.
/// `table` is `None` while the kubelet's pods are not known; `unknown` then
/// says why, for the jobs whose cgroup names a pod.
pub fn attribute(
    table: Option<&PodTable>,
    unknown: &str,
    gpus: &[GpuSample],
    jobs: &mut [JobSample],
) {
    let Some(table) = table else {
        for job in jobs.iter_mut().filter(|j| j.attribution.pod_uid.is_some()) {
            job.attribution.pod_unknown = Some(unknown.to_owned());
        }
        return;
    };
    let by_index: HashMap<u32, &GpuSample> = gpus.iter().map(|g| (g.index, g)).collect();
    let candidates: Vec<BTreeSet<Slot>> = jobs
        .iter()
        .map(|job| {
            job.gpus
                .iter()
                .filter_map(|i| by_index.get(i))
                .flat_map(|g| gpu_keys(g))
                .filter_map(|key| table.by_device.get(key.as_str()))
                .flatten()
                .copied()
                .collect()
        })
        .collect();
    let pods_of = tie_uids(jobs, &candidates);
    for (job, slots) in jobs.iter_mut().zip(&candidates) {
        let a = &mut job.attribution;
        let pod = match &a.pod_uid {
            Some(uid) => match pods_of.get(uid.as_str()) {
                Some(Tie::Pod(p)) => Some(*p),
                Some(Tie::Several) => {
                    a.pod_unknown = Some(format!(
                        "the jobs of pod UID {uid} use GPUs the kubelet lists for several pods"
                    ));
                    None
                }
                None => {
                    a.pod_unknown = Some(format!(
                        "no job of pod UID {uid} uses a GPU the kubelet lists for a pod (a pod that did not request its GPUs)"
                    ));
                    None
                }
            },
            // No pod in the cgroup: matched by its GPU only when the cgroup
            // says nothing else (it could not be read).
            None if a.container_id.is_none()
                && a.systemd_unit.is_none()
                && a.slurm_job_id.is_none() =>
            {
                let pods: BTreeSet<usize> = slots.iter().map(|(p, _)| *p).collect();
                (pods.len() == 1).then(|| pods.into_iter().next()).flatten()
            }
            None => None,
        };
        let Some(p) = pod else { continue };
        let found = &table.pods[p];
        let containers: BTreeSet<usize> = slots
            .iter()
            .filter(|(sp, _)| *sp == p)
            .map(|(_, c)| *c)
            .collect();
        a.namespace = Some(found.namespace.clone());
        a.pod = Some(found.name.clone());
        a.container = (containers.len() == 1)
            .then(|| containers.into_iter().next())
            .flatten()
            .map(|c| found.containers[c].name.clone());
    }
    untie_shared_containers(jobs);
}

/// What a pod UID was tied to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tie {
    Pod(usize),
    Several,
}

/// Each pod UID whose jobs use GPUs the kubelet lists: the pods those GPUs
/// are listed for, narrowed by setting aside a pod that another UID alone
/// uses, until each UID has one pod (tied) or no more can be set aside.
fn tie_uids(jobs: &[JobSample], candidates: &[BTreeSet<Slot>]) -> HashMap<String, Tie> {
    let mut open: BTreeMap<&str, BTreeSet<usize>> = BTreeMap::new();
    for (job, slots) in jobs.iter().zip(candidates) {
        if let Some(uid) = job.attribution.pod_uid.as_deref()
            && !slots.is_empty()
        {
            open.entry(uid)
                .or_default()
                .extend(slots.iter().map(|(p, _)| *p));
        }
    }
    let mut tied: HashMap<String, Tie> = HashMap::new();
    loop {
        // Pods wanted by exactly one open UID that wants nothing else.
        let mut sole: BTreeMap<usize, Vec<&str>> = BTreeMap::new();
        for (uid, pods) in &open {
            if pods.len() == 1 {
                sole.entry(*pods.first().unwrap_or(&0))
                    .or_default()
                    .push(uid);
            }
        }
        let newly: Vec<(&str, usize)> = sole
            .iter()
            .filter(|(_, uids)| uids.len() == 1)
            .map(|(p, uids)| (uids[0], *p))
            .collect();
        if newly.is_empty() {
            break;
        }
        for (uid, p) in newly {
            open.remove(uid);
            tied.insert(uid.to_owned(), Tie::Pod(p));
            for pods in open.values_mut() {
                pods.remove(&p);
            }
        }
        open.retain(|_, pods| !pods.is_empty());
    }
    for uid in open.into_keys() {
        tied.insert(uid.to_owned(), Tie::Several);
    }
    tied
}

/// Jobs of two different containers (by their cgroup container ids) given
/// one container name: the GPU's container is one of them, which one is not
/// known, so none keeps the name.
fn untie_shared_containers(jobs: &mut [JobSample]) {
    let mut ids: HashMap<(String, String, String), BTreeSet<String>> = HashMap::new();
    let key = |j: &JobSample| {
        let a = &j.attribution;
        Some((a.namespace.clone()?, a.pod.clone()?, a.container.clone()?))
    };
    for job in jobs.iter() {
        if let (Some(k), Some(id)) = (key(job), &job.attribution.container_id) {
            ids.entry(k).or_default().insert(id.clone());
        }
    }
    for job in jobs.iter_mut() {
        if key(job).is_some_and(|k| ids.get(&k).is_some_and(|s| s.len() > 1)) {
            job.attribution.container = None;
        }
    }
}

#[cfg(test)]
mod tests;
