use super::*;
use crate::identity::kubelet::proto::{ContainerDevices, ContainerResources, PodResources};
use crate::sample::{Attribution, MigIdentity, ProcessId, ProcessSample};

const GPU0: &str = "GPU-00000000-0000-0000-0000-000000000000";
const GPU1: &str = "GPU-00000000-0000-0000-0000-000000000001";
const GPU2: &str = "GPU-00000000-0000-0000-0000-000000000002";
const MIG: &str = "MIG-11111111-2222-3333-4444-555555555555";

fn gpus() -> Vec<GpuSample> {
    let mut out: Vec<GpuSample> = [GPU0, GPU1, GPU2]
        .iter()
        .enumerate()
        .map(|(i, uuid)| GpuSample {
            index: i as u32,
            uuid: (*uuid).into(),
            ..GpuSample::default()
        })
        .collect();
    out.push(GpuSample {
        index: crate::sample::mig_index(2, 7, 0),
        uuid: MIG.into(),
        mig: Some(MigIdentity {
            parent_index: 2,
            parent_uuid: GPU2.into(),
            gpu_instance_id: 7,
            compute_instance_id: 0,
        }),
        ..GpuSample::default()
    });
    out
}

fn container(name: &str, resource: &str, ids: &[&str]) -> ContainerResources {
    ContainerResources {
        name: name.into(),
        devices: vec![ContainerDevices {
            resource_name: resource.into(),
            device_ids: ids.iter().map(|s| (*s).into()).collect(),
        }],
    }
}

fn pod(namespace: &str, name: &str, containers: Vec<ContainerResources>) -> PodResources {
    PodResources {
        name: name.into(),
        namespace: namespace.into(),
        containers,
    }
}

fn table(pods: Vec<PodResources>) -> PodTable {
    PodTable::from_answer(ListPodResourcesResponse {
        pod_resources: pods,
    })
}

fn job(pid: u32, gpus: &[u32], pod_uid: Option<&str>, container_id: Option<&str>) -> JobSample {
    JobSample {
        gpus: gpus.to_vec(),
        leader: ProcessSample {
            id: ProcessId {
                pid,
                start_ticks: 1,
            },
            ppid: 1,
            comm: "python3".into(),
            state: 'S',
            start_time_seconds: 0.0,
            cpu_seconds: 0.0,
            rss_bytes: 0,
            threads: vec![],
            io: None,
        },
        descendants: vec![],
        attribution: Attribution {
            pod_uid: pod_uid.map(str::to_owned),
            container_id: container_id.map(str::to_owned),
            ..Attribution::default()
        },
        rank: Default::default(),
        frameworks: Default::default(),
        stdout_bytes: None,
        stderr_bytes: None,
        output_modified_seconds: None,
        threads_carried: false,
    }
}

/// (namespace, pod, container) of each job, and the reasons.
fn names(jobs: &[JobSample]) -> Vec<(String, String, String)> {
    jobs.iter()
        .map(|j| {
            let a = &j.attribution;
            let s = |v: &Option<String>| v.clone().unwrap_or_default();
            (s(&a.namespace), s(&a.pod), s(&a.container))
        })
        .collect()
}

fn n(ns: &str, pod: &str, c: &str) -> (String, String, String) {
    (ns.into(), pod.into(), c.into())
}

#[test]
fn jobs_are_matched_by_gpu_uuid_mig_and_index() {
    let t = table(vec![
        pod(
            "ml",
            "trainer-0",
            vec![container("main", "nvidia.com/gpu", &[GPU0])],
        ),
        pod(
            "ml",
            "small",
            vec![container("worker", "nvidia.com/mig-1g.10gb", &[MIG])],
        ),
        pod(
            "batch",
            "indexed",
            vec![container("c", "nvidia.com/gpu", &["1"])],
        ),
        pod(
            "other",
            "no-gpu",
            vec![container("app", "example.com/fpga", &[GPU2])],
        ),
    ]);
    let mut jobs = vec![
        job(1, &[0], Some("uid-a"), None),
        job(2, &[crate::sample::mig_index(2, 7, 0)], Some("uid-b"), None),
        job(3, &[1], Some("uid-c"), None),
        job(4, &[2], Some("uid-d"), None),
    ];
    attribute(Some(&t), "", &gpus(), &mut jobs);
    assert_eq!(
        names(&jobs),
        [
            n("ml", "trainer-0", "main"),
            n("ml", "small", "worker"),
            n("batch", "indexed", "c"),
            n("", "", ""),
        ]
    );
    assert!(
        jobs[..3]
            .iter()
            .all(|j| j.attribution.pod_unknown.is_none())
    );
    let why = jobs[3].attribution.pod_unknown.as_deref().unwrap();
    assert!(
        why.contains("uid-d") && why.contains("did not request"),
        "{why}"
    );
}

#[test]
fn older_mig_ids_and_time_sliced_replicas_name_their_gpu() {
    let t = table(vec![
        pod(
            "ml",
            "legacy-mig",
            vec![container(
                "main",
                "nvidia.com/mig-1g.10gb",
                &[&format!("MIG-{GPU2}/7/0")],
            )],
        ),
        pod(
            "ml",
            "sliced",
            vec![container(
                "main",
                "nvidia.com/gpu",
                &[&format!("{GPU1}::3")],
            )],
        ),
    ]);
    let mut jobs = vec![
        job(1, &[crate::sample::mig_index(2, 7, 0)], Some("u1"), None),
        job(2, &[1], Some("u2"), None),
    ];
    attribute(Some(&t), "", &gpus(), &mut jobs);
    assert_eq!(
        names(&jobs),
        [n("ml", "legacy-mig", "main"), n("ml", "sliced", "main")]
    );
}

#[test]
fn a_pod_uid_ties_a_job_on_a_gpu_its_pod_did_not_request() {
    // Pod P requested GPU 0; its sidecar container uses GPU 1, which pod Q
    // requested and uses too. Q's own job sets Q aside, so P's UID is P.
    let t = table(vec![
        pod(
            "ml",
            "p",
            vec![
                container("main", "nvidia.com/gpu", &[GPU0]),
                container("sidecar", "nvidia.com/gpu", &[]),
            ],
        ),
        pod(
            "ml",
            "q",
            vec![container("main", "nvidia.com/gpu", &[GPU1])],
        ),
    ]);
    let mut jobs = vec![
        job(1, &[0], Some("uid-p"), Some("c1")),
        job(2, &[1], Some("uid-p"), Some("c2")),
        job(3, &[1], Some("uid-q"), Some("c3")),
    ];
    attribute(Some(&t), "", &gpus(), &mut jobs);
    assert_eq!(
        names(&jobs),
        [n("ml", "p", "main"), n("ml", "p", ""), n("ml", "q", "main")],
        "the sidecar's job has its pod but not the GPU's container"
    );
}

#[test]
fn a_uid_on_several_pods_gpus_is_not_guessed() {
    let t = table(vec![
        pod(
            "ml",
            "p",
            vec![container("main", "nvidia.com/gpu", &[GPU0])],
        ),
        pod(
            "ml",
            "q",
            vec![container("main", "nvidia.com/gpu", &[GPU1])],
        ),
    ]);
    let mut jobs = vec![job(1, &[0, 1], Some("uid-x"), None)];
    attribute(Some(&t), "", &gpus(), &mut jobs);
    assert_eq!(names(&jobs), [n("", "", "")]);
    let why = jobs[0].attribution.pod_unknown.as_deref().unwrap();
    assert!(why.contains("several pods"), "{why}");
    assert_eq!(
        jobs[0].attribution.pod_uid.as_deref(),
        Some("uid-x"),
        "the UID stays"
    );
}

#[test]
fn two_containers_on_one_gpu_keep_the_pod_but_not_the_container() {
    let t = table(vec![pod(
        "ml",
        "p",
        vec![container("main", "nvidia.com/gpu", &[GPU0])],
    )]);
    let mut jobs = vec![
        job(1, &[0], Some("uid-p"), Some("c1")),
        job(2, &[0], Some("uid-p"), Some("c2")),
    ];
    attribute(Some(&t), "", &gpus(), &mut jobs);
    assert_eq!(names(&jobs), [n("ml", "p", ""), n("ml", "p", "")]);
}

#[test]
fn without_the_kubelet_a_pod_job_keeps_its_uid_and_the_reason() {
    let mut jobs = vec![job(1, &[0], Some("uid-p"), None), job(2, &[0], None, None)];
    attribute(
        None,
        "the kubelet's pods are not known (no socket)",
        &gpus(),
        &mut jobs,
    );
    assert_eq!(names(&jobs), [n("", "", ""), n("", "", "")]);
    assert_eq!(
        jobs[0].attribution.pod_unknown.as_deref(),
        Some("the kubelet's pods are not known (no socket)")
    );
    assert_eq!(
        jobs[1].attribution.pod_unknown, None,
        "a job in no pod has no reason"
    );
}

#[test]
fn a_job_placed_elsewhere_by_its_cgroup_is_not_matched_by_gpu() {
    let t = table(vec![pod(
        "ml",
        "p",
        vec![container("main", "nvidia.com/gpu", &[GPU0])],
    )]);
    let mut unit = job(1, &[0], None, None);
    unit.attribution.systemd_unit = Some("train.service".into());
    let mut jobs = vec![unit, job(2, &[0], None, None)];
    attribute(Some(&t), "", &gpus(), &mut jobs);
    assert_eq!(names(&jobs), [n("", "", ""), n("ml", "p", "main")]);
}

#[test]
fn an_answer_is_kept_within_bounds() {
    let mut pods: Vec<PodResources> = (0..MAX_PODS + 3)
        .map(|i| pod("ns", &format!("p{i}"), vec![]))
        .collect();
    pods[0].name = "Bad Name".into();
    pods[1].containers = vec![container(
        "c",
        "nvidia.com/gpu",
        &["GPU-1"; MAX_DEVICES + 2],
    )];
    pods[2].containers = vec![container("x\u{1b}[31m", "nvidia.com/gpu", &[GPU0])];
    let t = table(pods);
    assert_eq!(t.pods.len(), MAX_PODS - 1);
    assert_eq!(t.pods[0].containers[0].devices.len(), MAX_DEVICES);
    assert!(t.pods[1].containers.is_empty());
    let left_out = t.left_out.unwrap();
    for part in [
        "3 pods past the limit",
        "1 pods with invalid names",
        "1 containers with invalid names",
        "2 device ids past the limit",
    ] {
        assert!(left_out.contains(part), "{left_out}");
    }
}
