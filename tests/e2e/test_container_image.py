"""The container image built without a registry by scripts/build-image
(mmdebstrap and buildah, from the .deb; container_image.py), run by podman as
the DaemonSet runs it: in the host's PID namespace, as uid 0 with only
CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH, read-only, with the config mounted;
and as the image's own unprivileged user."""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

import packages
from container_image import built_image, podman_env
from daemon import FAKE_NVML, ROOT, Metrics, free_port, gpu, http_get, kill_group

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mmdebstrap, buildah and podman run as root here")

CAPS = {"sys_ptrace": 19, "dac_read_search": 2}


@pytest.fixture(scope="module")
def env():
    return podman_env()


def daemonset_image():
    docs = yaml.safe_load_all((ROOT / "deploy/kubernetes/daemonset.yaml").read_text())
    (daemonset,) = [d for d in docs if d and d.get("kind") == "DaemonSet"]
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    return container["image"]


@pytest.fixture(scope="module")
def image():
    tag = built_image()
    assert tag == daemonset_image() == f"stallwatch:{packages.workspace_version()}", "the DaemonSet's image"
    return tag


def podman(env, *args, check=True, timeout=120):
    result = subprocess.run(["podman", *args], env=env, capture_output=True, text=True, timeout=timeout)
    if check:
        assert result.returncode == 0, f"podman {args}: {result.stderr}"
    return result


@pytest.fixture
def host_job():
    """A process of root's on the host, with a child."""
    p = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, time; subprocess.Popen(['sleep', '600']); time.sleep(600)"],
        start_new_session=True,
    )
    yield p
    kill_group(p)


@pytest.fixture
def mounts(tmp_path):
    """The stand-in NVML library and a config naming it, readable by anyone."""
    tmp_path.chmod(0o755)
    shutil.copy(FAKE_NVML, tmp_path / "libnvidia_ml.so")
    port = free_port()
    (tmp_path / "config.toml").write_text(
        f'[server]\nlisten = "127.0.0.1:{port}"\n[gpu]\nnvml_library = "/opt/nvml/libnvidia_ml.so"\n'
    )
    for f in tmp_path.iterdir():
        f.chmod(0o644)
    return tmp_path, port


def run_image(env, image, mounts, job_pid, *options):
    d, port = mounts
    scenario = d / "scenario.json"
    scenario.write_text(json.dumps({"gpus": [gpu(0, processes=[{"pid": job_pid, "used_memory_bytes": 2**30, "sm_util": 5}])]}))
    scenario.chmod(0o644)
    name = f"stallwatch-test-{os.getpid()}-{port}"
    podman(
        env, "run", "--detach", f"--name={name}", "--pid=host", "--network=host", "--read-only",
        "--env=STALLWATCH_FAKE_NVML=/opt/nvml/scenario.json",
        f"--volume={d}:/opt/nvml:ro", f"--volume={d / 'config.toml'}:/etc/stallwatch/config.toml:ro",
        *options, image, "--config", "/etc/stallwatch/config.toml",
    )
    return name, f"http://127.0.0.1:{port}"


def wait_for_job(env, name, url, pid, want):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            status, _, body = http_get(url + "/metrics", timeout=2)
        except OSError:
            status = None
        if status == 200:
            m = Metrics(body.decode())
            if want(m):
                return m
        time.sleep(0.3)
    logs = podman(env, "logs", name, check=False)
    raise AssertionError(f"job {pid} not seen: {logs.stdout}{logs.stderr}")


def test_the_image_runs_the_packaged_binary_as_nobody(env, image):
    (info,) = json.loads(podman(env, "image", "inspect", image).stdout)
    config = info["Config"]
    assert config["Entrypoint"] == ["stallwatch"]
    assert config["User"] == "65534:65534"
    assert "9847/tcp" in config["ExposedPorts"]
    version = podman(env, "run", "--rm", image, "--version").stdout.strip()
    assert version == f"stallwatch {packages.workspace_version()}"


def test_run_as_the_daemonset_runs_it_a_host_job_is_read_whole(env, image, mounts, host_job):
    name, url = run_image(
        env, image, mounts, host_job.pid,
        "--user=0", "--cap-drop=all", "--cap-add=SYS_PTRACE,DAC_READ_SEARCH", "--security-opt=no-new-privileges",
        # As the DaemonSet: no AppArmor profile (podman's default one reads only its own profile's processes).
        "--security-opt=apparmor=unconfined",
    )
    pid = str(host_job.pid)
    try:
        m = wait_for_job(
            env, name, url, pid,
            lambda m: m.has("stallwatch_job_info", pid=pid) and m.has("stallwatch_job_read_bytes_total", pid=pid),
        )
        assert m.value("stallwatch_nvml_up") == 1
        assert m.value("stallwatch_job_processes", pid=pid) == 2, "its child, through the host's /proc"
        status, _, body = http_get(url + "/healthz")
        assert status == 200 and json.loads(body)["status"] == "ok", body
        # The daemon's own process, seen from the host.
        inner = podman(env, "inspect", "--format", "{{.State.Pid}}", name).stdout.strip()
        status = dict(l.split(":\t", 1) for l in open(f"/proc/{inner}/status").read().splitlines())
        assert status["Uid"].split()[0] == "0"
        assert int(status["CapEff"], 16) == sum(1 << b for b in CAPS.values()), status["CapEff"]
        assert status["NoNewPrivs"].strip() == "1"
        # What it says it may read: every user's jobs, from the host's PID and user namespaces.
        p = json.loads(http_get(url + "/api/v1/status")[2])["privileges"]
        assert p["host_pid_namespace"] is True and p["initial_user_namespace"] is True, p
        assert p["capabilities"]["missing"] == ["CAP_SYSLOG"], p
        assert p["stacks"]["read"] == "yes" and p["environments"]["read"] == "yes", p
    finally:
        podman(env, "rm", "--force", name, check=False)


def test_run_as_the_images_user_the_job_is_seen_without_its_io(env, image, mounts, host_job):
    name, url = run_image(env, image, mounts, host_job.pid)
    pid = str(host_job.pid)
    try:
        m = wait_for_job(env, name, url, pid, lambda m: m.has("stallwatch_job_info", pid=pid))
        assert [s.value for s in m.find("stallwatch_process_gpu_memory_bytes", pid=pid)] == [2**30]
        assert not m.has("stallwatch_job_read_bytes_total", pid=pid), "nobody cannot read root's /proc/<pid>/io"
        assert http_get(url + "/healthz")[0] == 200
        # And it says so: without capabilities, only its own user's jobs (none
        # at all where Yama wants CAP_SYS_PTRACE for them).
        p = json.loads(http_get(url + "/api/v1/status")[2])["privileges"]
        scope = Path("/proc/sys/kernel/yama/ptrace_scope")
        want = "no" if scope.exists() and scope.read_text().strip() != "0" else "same_uid"
        assert p["uid"] == 65534 and p["stacks"]["read"] == want, p
        assert p["environments"]["read"] == "same_uid", p
    finally:
        podman(env, "rm", "--force", name, check=False)
