"""Stacks on every CPython that training jobs run, 3.8 to 3.15: the same
small job (a thread named `spinner` burning in `decode_image`, the main
thread waiting on a queue) under each real interpreter this machine has,
read by `stallwatch stacks` without stopping it. pyenv's builds run on the
host; Debian's own builds run from roots of their release (debroot.py) in
their own PID and mount namespaces, so the tids py-spy (or the thread
descriptors) give are the namespace's and must be mapped to the host's.
A Python the machine lacks is a skipped test that says so."""

import json
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from container_image import podman_env
from daemon import BINARY, kill_group
from debroot import PYTHON_ROOTS, debian_root, locked, python_root_spec
from test_stacks import FAST, holding

HERE = Path(__file__).parent
PYENV = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"


def pyenv_python(version):
    """pyenv's newest build of `version` (`3.9`), if this machine has one."""
    builds = sorted(PYENV.glob(f"{version}.*/bin/python{version}"),
                    key=lambda p: [int(x) for x in p.parts[-3].split(".") if x.isdigit()])
    return builds[-1] if builds else None


def started(command, log):
    """Starts the job; returns its process once it printed "ready"."""
    out = open(log, "w")
    p = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    out.close()
    deadline = time.monotonic() + 30
    while "ready" not in log.read_text() and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.05)
    assert "ready" in log.read_text(), f"the job did not start: {log.read_text()[-2000:]}"
    return p


def stacks(pid):
    r = subprocess.run([str(BINARY), "stacks", str(pid), "--duration", "2s", "--json"],
                       capture_output=True, text=True, timeout=60)
    assert r.stdout, r.stderr
    return json.loads(r.stdout)


def comm(pid, tid):
    return Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()


def assert_read_right(report, pid, version):
    """Threads named by the kernel, the hot place found, the main thread's
    wait, every tid one of the job's threads on the host."""
    assert report["outcome"] == "sampled", report
    assert report["python_version"].startswith(version + "."), report["python_version"]
    threads = report["threads"]
    assert threads, f"a sampled read with no thread: {report}"
    for t in threads:
        assert Path(f"/proc/{pid}/task/{t['tid']}").is_dir(), f"tid {t['tid']} is not a thread of pid {pid}: {threads}"
        assert t["name"] == comm(pid, t["tid"]), t
    spinner = next((t for t in threads if t["name"] == "spinner"), None)
    assert spinner, f"no thread named spinner: {threads}"
    assert spinner["running_share"] >= 0.5 and spinner["top"][0]["function"] == "decode_image", spinner
    main = next((t for t in threads if t["tid"] == pid), None)
    assert main, f"the main thread (tid {pid}) is missing: {threads}"
    assert main["running_share"] < 0.5 and main.get("waiting_on") == "queue.get", main
    hot = report["hot"][0]
    assert hot["function"] == "decode_image" and hot["file"] == "pyjob.py", hot


@pytest.mark.parametrize("version", ["3.8", "3.9", "3.10", "3.11", "3.12", "3.13"])
def test_pyenvs_cpython(version, tmp_path):
    python = pyenv_python(version)
    if python is None:
        pytest.skip(f"CPython {version} is not on this machine ({PYENV} has no build of it)")
    script = tmp_path / "pyjob.py"
    shutil.copy(HERE / "pyjob.py", script)
    job = started([str(python), str(script), "decode"], tmp_path / "job.log")
    try:
        assert_read_right(stacks(job.pid), job.pid, version)
        text = subprocess.run([str(BINARY), "stacks", str(job.pid), "--duration", "1s"],
                              capture_output=True, text=True, timeout=60).stdout
        assert f"(Python {version}." in text.splitlines()[0] and "decode_image (pyjob.py:" in text, text
    finally:
        kill_group(job)


@pytest.mark.parametrize("name", list(PYTHON_ROOTS))
def test_debians_cpython_in_its_own_namespaces(name, tmp_path):
    suite, command, version = PYTHON_ROOTS[name]
    if not shutil.which("mmdebstrap") or not shutil.which("unshare"):
        pytest.skip("mmdebstrap and unshare are needed to run Debian's Pythons (scripts/install-test-deps)")
    root = debian_root(python_root_spec(suite))
    # The job's file inside the root, in a folder of its own (roots are shared).
    inside = Path("/tmp") / f"job-{uuid.uuid4().hex[:8]}" / "pyjob.py"
    (root / inside.parent.relative_to("/")).mkdir()
    shutil.copy(HERE / "pyjob.py", root / inside.relative_to("/"))
    outer = started(["unshare", "--pid", "--mount", "--fork", f"--mount-proc={root}/proc",
                     "chroot", str(root), command, str(inside), "decode"], tmp_path / "job.log")
    try:
        pid = int(Path(f"/proc/{outer.pid}/task/{outer.pid}/children").read_text().split()[0])
        nspid = next(l for l in Path(f"/proc/{pid}/status").read_text().splitlines() if l.startswith("NSpid:"))
        assert nspid.split()[1:] == [str(pid), "1"], f"not in a namespace of its own: {nspid}"
        assert_read_right(stacks(pid), pid, version)
    finally:
        kill_group(outer)
        shutil.rmtree(root / inside.parent.relative_to("/"), ignore_errors=True)


def podman(env, *args, **kwargs):
    r = subprocess.run(["podman", *args], env=env, capture_output=True, text=True, timeout=300, **kwargs)
    assert r.returncode == 0, f"podman {args[0]}: {r.stderr[-2000:]}"
    return r.stdout.strip()


def python_image(env):
    """bookworm's root with its CPython as a local image, made with `podman
    import` (no registry), once per root."""
    root = debian_root(python_root_spec("bookworm"))
    tag = f"localhost/stallwatch-python:{root.name.rsplit('-', 1)[-1]}"
    with locked(root.parent / "python-image.lock"):
        if subprocess.run(["podman", "image", "exists", tag], env=env).returncode != 0:
            tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
            podman(env, "import", "-", tag, stdin=tar.stdout)
            assert tar.wait() == 0
    return tag


def test_a_job_in_a_podman_container_with_a_launchers_environment(daemon_factory, tmp_path):
    """A rank started by torchrun in a real container: its stacks (tids of
    the container's namespace mapped to the host's), thread names, rank and
    container id, read from the host."""
    if os.geteuid() != 0 or not shutil.which("podman"):
        pytest.skip("a rootful podman is needed (scripts/install-test-deps, as root)")
    env = podman_env()
    image = python_image(env)
    tmp_path.chmod(0o755)
    shutil.copy(HERE / "pyjob.py", tmp_path / "pyjob.py")
    name = f"stallwatch-pyjob-{uuid.uuid4().hex[:8]}"
    launcher = {"RANK": "3", "LOCAL_RANK": "3", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "8",
                "MASTER_ADDR": "10.1.2.3", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "run-42"}
    podman(env, "run", "--detach", f"--name={name}", f"--volume={tmp_path}:/job:ro",
           *[f"--env={k}={v}" for k, v in launcher.items()], image, "python3", "/job/pyjob.py", "decode")
    try:
        deadline = time.monotonic() + 30
        while "ready" not in podman(env, "logs", name) and time.monotonic() < deadline:
            time.sleep(0.1)
        pid = int(podman(env, "inspect", "--format", "{{.State.Pid}}", name))
        container = podman(env, "inspect", "--format", "{{.Id}}", name)
        d = daemon_factory(holding(pid, 95), config=FAST).start()
        m = d.wait_for(lambda m: m.has("stallwatch_job_rank_info", pid=str(pid)), what="the container's rank")
        assert m.has("stallwatch_job_info", pid=str(pid), container_id=container), d.get("/metrics")[2].decode()
        assert m.has("stallwatch_job_rank_info", pid=str(pid), run="torchelastic:run-42", rank="3", world_size="8", launcher="torchrun")
        code, _, body = d.get(f"/api/v1/stacks/{pid}?seconds=2", timeout=30)
        assert code == 200, body
        assert_read_right(json.loads(body), pid, "3.11")
    finally:
        subprocess.run(["podman", "rm", "--force", name], env=env, capture_output=True, timeout=120)
