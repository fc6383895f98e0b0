"""Job identity on Kubernetes and Slurm, end to end: a stand-in kubelet serving the real
PodResources v1 proto on a unix socket (kubelet.py), jobs in a /proc tree whose cgroups
name pods and Slurm steps, and what stallwatch_job_info, /api/v1/status and its
`kubernetes` object say; a kubelet that is missing, hangs or answers garbage costs no
sample and no scrape."""

import json
import os
import pwd
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from bs4 import BeautifulSoup

import browser
from daemon import gpu, kill_group
from kubelet import BadSocket, Kubelet, container, pod

from test_diagnosis import run_check, status, wait_status
from test_golden import FIXTURE_PROC

UID_A = "0d3b1c2a-5e6f-4a7b-8c9d-0e1f2a3b4c5d"  # ml/trainer-0: requested GPU 0
UID_B = "11112222-3333-4444-5555-666677778888"  # ml/small: a MIG device
UID_C = "99990000-aaaa-bbbb-cccc-ddddeeeeffff"  # ml/notebook: requested no GPU
MIG = "MIG-11111111-2222-3333-4444-555555555555"


def cid(n):
    return f"{n:064x}"


def pod_cgroup(uid, container_id):
    return (
        "0::/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{uid.replace('-', '_')}.slice/cri-containerd-{container_id}.scope\n"
    )


def proc_tree(tmp_path, processes):
    """The fixture /proc tree with these processes added: pid -> (comm, cgroup text,
    extra files such as status or environ)."""
    root = tmp_path / "proc"
    shutil.copytree(FIXTURE_PROC, root)
    template = (FIXTURE_PROC / "5151" / "stat").read_text().split(") ", 1)[1]
    for pid, (comm, cgroup, files) in processes.items():
        d = root / str(pid)
        (d / "task" / str(pid)).mkdir(parents=True)
        stat = f"{pid} ({comm}) {template}"
        (d / "stat").write_text(stat)
        (d / "task" / str(pid) / "stat").write_text(stat)
        (d / "task" / str(pid) / "children").write_text("")
        (d / "io").write_text((FIXTURE_PROC / "5151" / "io").read_text())
        (d / "cgroup").write_text(cgroup)
        for name, content in files.items():
            (d / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    return root


def holding(*pids):
    return [{"pid": p, "used_memory_bytes": 2**30, "sm_util": 10} for p in pids]


# GPU 0 to the trainer's main container; GPU 1 to nobody (the trainer's sidecar uses
# it); on GPU 2 a MIG instance to ml/small; GPU 3 to nobody (the notebook uses it).
SCENARIO = {
    "gpus": [
        gpu(0, processes=holding(7001)),
        gpu(1, processes=holding(7002)),
        gpu(2, mig=[{"gpu_instance_id": 1, "uuid": MIG, "profile": "1g.10gb", "processes": holding(7003)}]),
        gpu(3, processes=holding(7004)),
    ]
}

PROCESSES = {
    7001: ("trainer", pod_cgroup(UID_A, cid(1)), {}),
    7002: ("sidecar", pod_cgroup(UID_A, cid(2)), {}),
    7003: ("mig-job", pod_cgroup(UID_B, cid(3)), {}),
    7004: ("notebook", pod_cgroup(UID_C, cid(4)), {}),
}

PODS = [
    pod("ml", "trainer-0", container("main", "nvidia.com/gpu", "GPU-00000000-0000-0000-0000-000000000000"),
        container("sidecar")),
    pod("ml", "small", container("worker", "nvidia.com/mig-1g.10gb", MIG)),
    pod("ml", "notebook", container("jupyter")),
    pod("kube-system", "nvidia-device-plugin-x7k2p", container("plugin")),
]


def kubelet_config(socket, refresh="1s", timeout="300ms"):
    return (
        f'[kubernetes]\npod_resources_socket = "{socket}"\n'
        f'refresh = "{refresh}"\ntimeout = "{timeout}"\n'
    )


def info(m, pid):
    found = m.find("stallwatch_job_info", pid=str(pid))
    return found[0].labels if found else {}


def attribution(s, pid):
    for g in s["gpus"]:
        for j in g["jobs"]:
            if j["pid"] == pid:
                return j["attribution"]
    raise AssertionError(f"no job {pid} in {s}")


def test_jobs_get_namespace_pod_and_container_from_the_kubelet(daemon_factory, tmp_path):
    socket = tmp_path / "kubelet.sock"
    kubelet = Kubelet(socket, PODS).start()
    try:
        root = proc_tree(tmp_path, PROCESSES)
        d = daemon_factory(SCENARIO, config=f'[procfs]\nroot = "{root}"\n' + kubelet_config(socket))
        d.start()
        m = d.wait_for(
            lambda m: info(m, 7001).get("pod") == "trainer-0" and info(m, 7003).get("pod") == "small",
            what="the pods named from the kubelet",
        )
        # By the GPU's UUID, with the container that requested it.
        assert {k: info(m, 7001)[k] for k in ("namespace", "pod", "container", "pod_uid")} == {
            "namespace": "ml", "pod": "trainer-0", "container": "main", "pod_uid": UID_A}
        # The sidecar's GPU is nobody's: its pod comes from its cgroup's pod UID, which
        # the trainer's GPU tied to ml/trainer-0; the GPU's container is not its own.
        assert {k: info(m, 7002)[k] for k in ("namespace", "pod", "container", "pod_uid")} == {
            "namespace": "ml", "pod": "trainer-0", "container": "", "pod_uid": UID_A}
        # By the MIG device's UUID.
        assert (info(m, 7003)["namespace"], info(m, 7003)["pod"], info(m, 7003)["container"]) == (
            "ml", "small", "worker")
        # The notebook requested no GPU and no job of its pod uses one the kubelet
        # lists: its pod UID only.
        assert (info(m, 7004)["pod_uid"], info(m, 7004)["pod"], info(m, 7004)["namespace"]) == (UID_C, "", "")

        s = status(d)
        assert s["kubernetes"]["source"] == "kubelet"
        assert s["kubernetes"]["socket"] == str(socket)
        assert s["kubernetes"]["pods"] == len(PODS)
        assert "error" not in s["kubernetes"], s["kubernetes"]
        assert abs(s["kubernetes"]["last_refresh"] - time.time()) < 5
        a = attribution(s, 7001)
        assert (a["namespace"], a["pod"], a["container"], a["pod_uid"]) == ("ml", "trainer-0", "main", UID_A)
        a = attribution(s, 7004)
        assert "namespace" not in a and a["pod_uid"] == UID_C
        assert UID_C in a["pod_unknown"] and "did not request" in a["pod_unknown"], a

        # The status page and `stallwatch check` say the same.
        dom, _, console = browser.load(d.url + "/", budget_ms=3000)
        assert console == [], console
        page = BeautifulSoup(dom, "html.parser")
        assert "pod ml/trainer-0, container main" in page.select_one("article#gpu-0 .job").get_text()
        notebook = page.select_one("article#gpu-3 .job")
        assert f"pod UID {UID_C[:12]}" in notebook.get_text(), notebook.get_text()
        assert "did not request" in notebook.select_one("span[title]")["title"]
        report = run_check(d, "--duration", "5s").stdout
        assert "    pod ml/trainer-0, container main\n" in report, report
        assert "    pod ml/trainer-0\n" in report, report
        assert f"    pod UID {UID_C} (no job of pod UID {UID_C} uses a GPU" in report, report

        # A pod that comes later is picked up on the next refresh.
        kubelet.pods = PODS + [pod("ml", "late", container("main", "nvidia.com/gpu",
                                                         "GPU-00000000-0000-0000-0000-000000000003"))]
        m = d.wait_for(lambda m: info(m, 7004).get("pod") == "late", timeout=10, what="the late pod")
        assert info(m, 7004)["namespace"] == "ml"

        # The kubelet goes away: the names stay a few refreshes, then the UIDs alone,
        # with the reason.
        kubelet.stop()
        m = d.wait_for(lambda m: info(m, 7001).get("pod") == "", timeout=15, what="names dropped")
        assert info(m, 7001)["pod_uid"] == UID_A
        s = status(d)
        assert s["kubernetes"]["source"] == "cgroup"
        assert "cannot connect" in s["kubernetes"]["error"], s["kubernetes"]
        assert "cannot connect" in attribution(s, 7001)["pod_unknown"]
    finally:
        kubelet.stop()


def test_without_a_socket_pod_jobs_keep_their_uid_and_the_status_says_why(daemon_factory, tmp_path):
    socket = tmp_path / "no-such-kubelet.sock"
    root = proc_tree(tmp_path, PROCESSES)
    d = daemon_factory(SCENARIO, config=f'[procfs]\nroot = "{root}"\n' + kubelet_config(socket)).start()
    d.wait_for(lambda m: info(m, 7001), what="the job")
    s = wait_status(d, lambda s: "cannot connect" in (s.get("kubernetes") or {}).get("error", ""))
    k = s["kubernetes"]
    assert k["source"] == "cgroup" and k["pods"] == 0 and "last_refresh" not in k, k
    assert str(socket) in k["error"]
    a = attribution(s, 7001)
    assert a["pod_uid"] == UID_A and "pod" not in a
    assert "cannot connect" in a["pod_unknown"]
    labels = info(d.metrics(), 7001)
    assert (labels["pod_uid"], labels["namespace"], labels["pod"], labels["container"]) == (UID_A, "", "", "")


def test_no_socket_set_asks_no_kubelet(daemon_factory, tmp_path):
    root = proc_tree(tmp_path, PROCESSES)
    config = f'[procfs]\nroot = "{root}"\n[kubernetes]\npod_resources_socket = ""\n'
    d = daemon_factory(SCENARIO, config=config).start()
    d.wait_for(lambda m: info(m, 7001), what="the job")
    s = status(d)
    assert "kubernetes" not in s
    assert "pod_unknown" not in attribution(s, 7001)


def sample_gaps_and_scrape_times(d, seconds):
    """The longest gap between two samples and the slowest scrape over `seconds`."""
    stamps, slowest = [], 0.0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        t0 = time.monotonic()
        m = d.metrics()
        slowest = max(slowest, time.monotonic() - t0)
        stamp = m.value("stallwatch_last_sample_timestamp_seconds")
        if not stamps or stamp != stamps[-1]:
            stamps.append(stamp)
        time.sleep(0.05)
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    return max(gaps), slowest


def test_a_kubelet_that_hangs_or_answers_garbage_delays_no_sample_and_no_scrape(daemon_factory, tmp_path):
    root = proc_tree(tmp_path, PROCESSES)
    for name, answer, error in [
        ("hangs", None, "took longer than"),
        ("garbage", b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello" + bytes(range(256)) * 8, "List failed"),
    ]:
        socket = tmp_path / f"{name}.sock"
        bad = BadSocket(socket, answer).start()
        try:
            # Each call waits its whole 800 ms timeout, every second.
            config = f'[procfs]\nroot = "{root}"\n' + kubelet_config(socket, refresh="1s", timeout="800ms")
            d = daemon_factory(SCENARIO, config=config).start()
            d.wait_for(lambda m: info(m, 7001), what="the job")
            gap, slowest = sample_gaps_and_scrape_times(d, 4)
            assert gap < 0.75, f"{name}: samples 250 ms apart waited {gap:.2f} s"
            assert slowest < 0.5, f"{name}: a scrape took {slowest:.2f} s"
            assert bad.accepted >= 2, f"{name}: the daemon connected {bad.accepted} times"
            s = wait_status(d, lambda s: error in (s.get("kubernetes") or {}).get("error", ""))
            assert s["kubernetes"]["source"] == "cgroup", s["kubernetes"]
            assert info(d.metrics(), 7001)["pod"] == ""
            assert d.stop() == 0
        finally:
            bad.stop()


PASSWD = "root:x:0:0:root:/root:/bin/bash\nalice:x:1003:1003:Alice:/home/alice:/bin/bash\n"


def slurm_processes():
    status = "Name:\tpython3\nState:\tS (sleeping)\nUid:\t1003\t1003\t1003\t1003\nGid:\t1003\t1003\t1003\t1003\n"
    environ = b"PATH=/usr/bin\0SLURM_JOB_ID=512\0SLURM_JOB_ACCOUNT=vision-lab\0SECRET=x\0"
    return {
        # v1 with its uid; v2 on a multi-slurmd node, with the job's own status.
        7101: ("python3", "4:memory:/slurm/uid_1003/job_512/step_batch/task_0\n", {}),
        7102: ("python3", "0::/system.slice/node7_slurmstepd.scope/job_513/step_0/user/task_0\n",
               {"status": status, "environ": environ}),
    }


def test_slurm_jobs_steps_users_and_accounts(daemon_factory, tmp_path):
    root = proc_tree(tmp_path, slurm_processes())
    passwd = tmp_path / "passwd"
    passwd.write_text(PASSWD)
    scenario = {"gpus": [gpu(0, processes=holding(7101)), gpu(1, processes=holding(7102))]}
    labels = ("slurm_job_id", "slurm_step", "slurm_account", "user")
    expected = {
        "name": ({"slurm_job_id": "512", "slurm_step": "batch", "slurm_account": "", "user": "alice"},
                 {"slurm_job_id": "513", "slurm_step": "0", "slurm_account": "vision-lab", "user": "alice"}),
        "uid": ({"slurm_job_id": "512", "slurm_step": "batch", "slurm_account": "", "user": "1003"},
                {"slurm_job_id": "513", "slurm_step": "0", "slurm_account": "vision-lab", "user": "1003"}),
        "none": ({"slurm_job_id": "512", "slurm_step": "batch", "slurm_account": "", "user": ""},
                 {"slurm_job_id": "513", "slurm_step": "0", "slurm_account": "vision-lab", "user": ""}),
    }
    for setting, (v1, v2) in expected.items():
        config = (f'[procfs]\nroot = "{root}"\n[identity]\nuser_label = "{setting}"\n'
                  f'passwd_file = "{passwd}"\n[kubernetes]\npod_resources_socket = ""\n')
        d = daemon_factory(scenario, config=config).start()
        m = d.wait_for(lambda m: info(m, 7101) and info(m, 7102), what="both jobs")
        assert {k: info(m, 7101)[k] for k in labels} == v1, setting
        assert {k: info(m, 7102)[k] for k in labels} == v2, setting
        a = attribution(status(d), 7102)
        assert (a["slurm_job_id"], a["slurm_step"], a["slurm_account"]) == ("513", "0", "vision-lab")
        assert a.get("user") == (v2["user"] or None)
        assert "SECRET" not in json.dumps(status(d)) and "SECRET" not in d.metrics().text
        assert d.stop() == 0


def test_a_bad_identity_or_kubernetes_setting_names_the_field(daemon_factory, tmp_path):
    for config, field in [
        ('[identity]\nuser_label = "email"\n', "user_label"),
        ('[kubernetes]\nrefresh = "100ms"\n', "kubernetes.refresh"),
        ('[kubernetes]\ntimeout = "20s"\n', "kubernetes.timeout"),
    ]:
        d = daemon_factory({"gpus": [gpu(0)]}, config=config)
        d.start(wait=False)
        assert d.process.wait(timeout=10) != 0
        assert field in d.logs(), d.logs()


def test_an_answer_past_max_response_bytes_is_refused(daemon_factory, tmp_path):
    socket = tmp_path / "kubelet.sock"
    crowd = [pod("ml", f"pod-{i:04d}-" + "x" * 80, container("main")) for i in range(2000)]
    kubelet = Kubelet(socket, PODS + crowd).start()
    try:
        root = proc_tree(tmp_path, PROCESSES)
        config = f'[procfs]\nroot = "{root}"\n' + kubelet_config(socket) + "max_response_bytes = 65536\n"
        d = daemon_factory(SCENARIO, config=config).start()
        s = wait_status(d, lambda s: "OutOfRange" in (s.get("kubernetes") or {}).get("error", ""))
        assert "too large" in s["kubernetes"]["error"], s["kubernetes"]
        assert s["kubernetes"]["source"] == "cgroup" and kubelet.calls >= 1
        assert info(d.metrics(), 7001)["pod"] == ""
    finally:
        kubelet.stop()


class Cgroups:
    """Real cgroups for real jobs, below a directory of the test's own in the first
    hierarchy that takes them (cgroup v2, else v1's pids); removed afterwards."""

    ROOTS = ("/sys/fs/cgroup/unified", "/sys/fs/cgroup", "/sys/fs/cgroup/pids")

    def __init__(self, top):
        self.top = top
        self.base = None
        self.made = []

    @property
    def v2(self):
        return (self.base / "cgroup.controllers").exists()

    def find_base(self):
        for root in map(Path, self.ROOTS):
            if not (root / "cgroup.procs").exists():
                continue
            try:
                (root / self.top).mkdir()
            except OSError:
                continue
            self.base = root
            self.made.append(root / self.top)
            return True
        return False

    def move(self, relative, pid):
        path = self.base / self.top
        for part in relative.strip("/").split("/"):
            path = path / part
            if not path.exists():
                path.mkdir()
                self.made.append(path)
        (path / "cgroup.procs").write_text(str(pid))

    def remove(self):
        for path in reversed(self.made):
            try:
                path.rmdir()
            except OSError:
                pass


def sleeper(env=None):
    return subprocess.Popen(
        [sys.executable, "-c", "import time\nwhile True: time.sleep(1)"],
        env=dict(os.environ, **(env or {})), start_new_session=True,
    )


def test_real_jobs_in_real_cgroups(daemon_factory, tmp_path):
    """Real processes moved into real pod and Slurm cgroups, read from the host's /proc:
    their pods from the stand-in kubelet, the Slurm job's step, account and user."""
    cgroups = Cgroups(f"stallwatch-test-{os.getpid()}")
    if not cgroups.find_base():
        pytest.skip("no cgroup hierarchy here lets the test make cgroups (needs root)")
    jobs = [sleeper(), sleeper(), sleeper({"SLURM_JOB_ID": "612", "SLURM_JOB_ACCOUNT": "vision-lab"})]
    socket = tmp_path / "kubelet.sock"
    kubelet = Kubelet(socket, PODS).start()
    try:
        trainer, sidecar, slurm = jobs
        uid = UID_A.replace("-", "_")
        if cgroups.v2:
            pod_dir = f"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{uid}.slice"
            cgroups.move(f"{pod_dir}/cri-containerd-{cid(1)}.scope", trainer.pid)
            cgroups.move(f"{pod_dir}/cri-containerd-{cid(2)}.scope", sidecar.pid)
            cgroups.move("slurmstepd.scope/job_612/step_0/user/task_0", slurm.pid)
        else:
            cgroups.move(f"kubepods/besteffort/pod{UID_A}/{cid(1)}", trainer.pid)
            cgroups.move(f"kubepods/besteffort/pod{UID_A}/{cid(2)}", sidecar.pid)
            cgroups.move(f"slurm/uid_{os.getuid()}/job_612/step_0/task_0", slurm.pid)
        scenario = {"gpus": [gpu(0, processes=holding(trainer.pid)), gpu(1, processes=holding(sidecar.pid)),
                             gpu(2, processes=holding(slurm.pid))]}
        d = daemon_factory(scenario, config=kubelet_config(socket)).start()
        m = d.wait_for(lambda m: info(m, trainer.pid).get("pod") and info(m, slurm.pid),
                       what="the real jobs with their pod and Slurm job")
        assert (info(m, trainer.pid)["namespace"], info(m, trainer.pid)["pod"],
                info(m, trainer.pid)["container"]) == ("ml", "trainer-0", "main")
        assert (info(m, sidecar.pid)["pod"], info(m, sidecar.pid)["container"]) == ("trainer-0", "")
        assert info(m, trainer.pid)["container_id"] == cid(1)
        s = info(m, slurm.pid)
        assert (s["slurm_job_id"], s["slurm_step"], s["slurm_account"]) == ("612", "0", "vision-lab")
        assert s["user"] == pwd.getpwuid(os.getuid()).pw_name
    finally:
        kubelet.stop()
        for job in jobs:
            kill_group(job)
        cgroups.remove()
