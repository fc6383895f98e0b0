"""The daemon run as an unprivileged user (nobody) with exactly the systemd
unit's ambient capabilities, against a job owned by root: what it sees with
those capabilities, and what it leaves out (and counts) without them."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from daemon import BINARY, FAKE_NVML, Daemon, gpu
from test_jobs import SPINNER, kill_group, wait_ready
from unit_file import unit_capabilities

NOBODY = 65534
CAP_BITS = {"sys_ptrace": 19, "dac_read_search": 2, "syslog": 34}

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="needs root: the job must belong to root and the daemon to nobody"
)


@pytest.fixture(scope="module")
def install_dir():
    """The daemon and the stand-in library where nobody can read them
    (the build tree may sit under a directory only root can enter)."""
    d = Path(tempfile.mkdtemp(prefix="stallwatch-priv-"))
    d.chmod(0o755)
    shutil.copy2(BINARY, d / "stallwatch")
    shutil.copy2(FAKE_NVML, d / "libnvidia_ml.so")
    yield d
    shutil.rmtree(d)


@pytest.fixture
def root_job(tmp_path):
    """The spinner run as root, its output going to a file in a directory
    only root can enter (as a training job's log usually is)."""
    tmp_path.chmod(0o700)
    log = tmp_path / "train.log"
    out = open(log, "w")
    p = subprocess.Popen([sys.executable, str(SPINNER)], stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    wait_ready(log)
    yield p
    kill_group(p)
    out.close()


def in_user_namespace():
    """Runs the next command as root of a user namespace of its own (every
    capability there, none over the host's processes: rootless podman, a
    user-namespaced pod)."""
    return ["unshare", "--user", "--map-root-user"]


def setpriv(caps):
    """Runs the next command as nobody with `caps` as its only capabilities
    (ambient, so they survive the exec into a binary without file capabilities)."""
    prefix = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--no-new-privs"]
    if caps:
        spec = ",".join(f"+{cap}" for cap in caps)
        prefix += [f"--inh-caps={spec}", f"--ambient-caps={spec}", f"--bounding-set=-all,{spec}"]
    else:
        prefix += ["--inh-caps=-all", "--bounding-set=-all"]
    return prefix


@pytest.fixture
def unprivileged(install_dir):
    made = []

    def make(pid, caps, prefix=None):
        d = Path(tempfile.mkdtemp(dir=install_dir))
        d.chmod(0o755)
        holding = {"pid": pid, "used_memory_bytes": 8 * 2**30, "sm_util": 5}
        daemon = Daemon(
            d,
            {"gpus": [gpu(0, processes=[holding])]},
            library=install_dir / "libnvidia_ml.so",
            binary=install_dir / "stallwatch",
            prefix=setpriv(caps) if prefix is None else prefix,
        )
        # Readable by nobody whatever the umask.
        daemon.config_path.chmod(0o644)
        daemon.scenario_path.chmod(0o644)
        made.append(daemon)
        daemon.start()
        if prefix is None:
            assert_identity(daemon.process.pid, caps)
        return daemon

    yield make
    for daemon in made:
        assert daemon.stop() == 0, daemon.logs()


def assert_identity(pid, caps):
    """The daemon really runs as nobody, with exactly `caps` effective."""
    status = dict(line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    assert status["Uid"].split()[:2] == [str(NOBODY)] * 2
    want = sum(1 << CAP_BITS[cap] for cap in caps)
    assert int(status["CapEff"], 16) == want, status["CapEff"]
    assert int(status["CapBnd"], 16) == want, status["CapBnd"]


def test_unit_grants_the_two_capabilities_tested_here():
    assert unit_capabilities() == sorted(CAP_BITS)


def test_with_the_units_capabilities_a_root_job_is_read_whole(unprivileged, root_job):
    d = unprivileged(root_job.pid, unit_capabilities())
    pid = str(root_job.pid)
    m = d.wait_for(
        lambda m: m.has("stallwatch_job_read_bytes_total", pid=pid)
        and m.has("stallwatch_job_last_output_timestamp_seconds", pid=pid)
        and any(s.value > 0 for s in m.find("stallwatch_job_top_thread_cpu_ratio", pid=pid, thread="spinner")),
        what="io counters, output recency and the pinned thread of the root job",
    )
    assert m.has("stallwatch_job_write_bytes_total", pid=pid)
    assert abs(time.time() - m.value("stallwatch_job_last_output_timestamp_seconds", pid=pid)) < 3
    time.sleep(1.0)  # a few more samples
    m = d.metrics()
    assert m.value("stallwatch_source_errors_total", source="proc_job") == 0, d.logs()
    assert m.value("stallwatch_source_errors_total", source="proc_host") == 0, d.logs()


def test_without_capabilities_io_and_output_are_left_out_and_counted(unprivileged, root_job):
    d = unprivileged(root_job.pid, [])
    pid = str(root_job.pid)
    m = d.wait_for(
        lambda m: any(s.value > 0 for s in m.find("stallwatch_job_top_thread_cpu_ratio", pid=pid, thread="spinner"))
        and m.find("stallwatch_job_processes", pid=pid)[0].value == 2,
        what="the root job's pinned thread and its child, read without capabilities",
    )
    # What stays: CPU, threads, memory, attribution, the host.
    assert m.value("stallwatch_job_threads", pid=pid, state="running") >= 1
    assert m.value("stallwatch_job_cpu_seconds_total", pid=pid) > 0
    assert m.value("stallwatch_job_memory_rss_bytes", pid=pid) > 1 << 20
    assert m.has("stallwatch_job_info", pid=pid)
    assert m.has("stallwatch_host_cpu_utilization_ratio")
    assert m.value("stallwatch_source_errors_total", source="proc_host") == 0
    # What goes: storage io and output recency, left out rather than zero.
    for name in (
        "stallwatch_job_read_bytes_total",
        "stallwatch_job_write_bytes_total",
        "stallwatch_job_last_output_timestamp_seconds",
    ):
        assert not m.has(name, pid=pid), name
    # Its environment is unreadable too: no run or rank, and the reason, in the status.
    (job,) = [j for g in json.loads(d.get("/api/v1/status")[2])["gpus"] for j in g.get("jobs", [])
              if j["pid"] == root_job.pid]
    assert job.get("run_unknown", "").startswith("the environment could not be read ("), job
    assert not m.has("stallwatch_job_rank_info", pid=pid)
    first = m.value("stallwatch_source_errors_total", source="proc_job")
    assert first > 0
    time.sleep(1.0)
    later = d.metrics().value("stallwatch_source_errors_total", source="proc_job")
    assert later > first, "every sample counts its failed reads"
    # Counted, not logged: the log does not grow a line per sample.
    assert "ermission denied" not in d.logs(), d.logs()


def test_with_the_units_capabilities_a_root_jobs_python_stacks_are_read(unprivileged, root_job):
    import json

    d = unprivileged(root_job.pid, unit_capabilities())
    d.wait_for(lambda m: m.has("stallwatch_job_info", pid=str(root_job.pid)), what="the root job")
    code, _, body = d.get(f"/api/v1/stacks/{root_job.pid}?seconds=1", timeout=15)
    report = json.loads(body)
    assert code == 200 and report["outcome"] == "sampled", report
    assert any(t["name"] == "spinner" and t["top"][0]["function"] == "spin" for t in report["threads"]), report


def test_without_capabilities_the_stacks_say_which_one_is_missing(unprivileged, root_job):
    import json

    d = unprivileged(root_job.pid, [])
    d.wait_for(lambda m: m.has("stallwatch_job_info", pid=str(root_job.pid)), what="the root job")
    code, _, body = d.get(f"/api/v1/stacks/{root_job.pid}?seconds=1", timeout=15)
    report = json.loads(body)
    assert code == 200 and report["outcome"] == "no_permission", report
    assert "lacks CAP_SYS_PTRACE" in report["detail"] and "another user" in report["detail"], report


def host_ptrace_scope():
    """This host's Yama scope, read (never changed by these tests); None without Yama."""
    path = Path("/proc/sys/kernel/yama/ptrace_scope")
    return int(path.read_text()) if path.exists() else None


def privileges(d):
    code, _, body = d.get("/api/v1/status")
    assert code == 200, body
    return json.loads(body)["privileges"]


def root_job_status(d, pid):
    """The job's entry in the status, once its environment has been tried."""
    deadline = time.monotonic() + 10
    while True:
        jobs = [j for g in json.loads(d.get("/api/v1/status")[2])["gpus"] for j in g.get("jobs", [])
                if j["pid"] == pid]
        if jobs and "run_unknown" in jobs[0] or time.monotonic() > deadline:
            assert jobs, "the job is not in the status"
            return jobs[0]
        time.sleep(0.2)


def stacks_of(d, pid):
    code, _, body = d.get(f"/api/v1/stacks/{pid}?seconds=1", timeout=15)
    assert code == 200, body
    return json.loads(body)


def test_with_the_units_capabilities_every_users_jobs_can_be_read(unprivileged, root_job):
    if host_ptrace_scope() == 3:
        pytest.skip("Yama ptrace_scope is 3 on this host: no stack can be read")
    d = unprivileged(root_job.pid, unit_capabilities())
    p = privileges(d)
    assert p["uid"] == NOBODY and p["ptrace_scope"] == host_ptrace_scope(), p
    assert p["capabilities"]["held"] == ["CAP_DAC_READ_SEARCH", "CAP_SYS_PTRACE", "CAP_SYSLOG"], p
    assert p["capabilities"]["missing"] == [] and p["capabilities"]["effective"] == "0000000400080004", p
    assert p["initial_user_namespace"] is True, p
    assert p["stacks"]["read"] == "yes" and p["environments"]["read"] == "yes", p
    assert "holds CAP_SYS_PTRACE" in p["stacks"]["why"], p
    # Said once at start, at info: nothing to warn of.
    lines = [l for l in d.logs().splitlines() if "what stallwatch may read" in l]
    assert len(lines) == 1 and "INFO" in lines[0] and "stacks=yes" in lines[0], d.logs()


def test_without_capabilities_the_report_says_only_its_own_users_jobs(unprivileged, root_job):
    if host_ptrace_scope() not in (None, 0):
        pytest.skip("Yama ptrace_scope is not 0 here: without CAP_SYS_PTRACE no stack can be read at all")
    d = unprivileged(root_job.pid, [])
    p = privileges(d)
    assert p["capabilities"]["held"] == [] and p["capabilities"]["effective"] == "0000000000000000", p
    assert p["capabilities"]["missing"] == ["CAP_DAC_READ_SEARCH", "CAP_SYS_PTRACE", "CAP_SYSLOG"], p
    assert p["stacks"]["read"] == "same_uid", p
    assert p["stacks"]["why"].startswith("stallwatch lacks CAP_SYS_PTRACE") and f"uid {NOBODY}" in p["stacks"]["why"], p
    assert p["environments"]["read"] == "same_uid", p
    assert "lacks CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH" in p["environments"]["why"], p
    # The root job's reads are refused for that reason, by name: its stacks,
    # and its environment (no run, no rank).
    report = stacks_of(d, root_job.pid)
    assert report["outcome"] == "no_permission", report
    assert "lacks CAP_SYS_PTRACE" in report["detail"] and "another user" in report["detail"], report
    job = root_job_status(d, root_job.pid)
    assert job["run_unknown"].endswith(
        "stallwatch lacks CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH, which another user's environment needs; "
        "the shipped systemd unit grants them"
    ), job
    # One warning at start, with the reason.
    lines = [l for l in d.logs().splitlines() if "what stallwatch may read" in l]
    assert len(lines) == 1 and "WARN" in lines[0] and "stacks=same_uid" in lines[0], d.logs()
    assert "lacks CAP_SYS_PTRACE" in lines[0], lines

    # The status page says it in a banner of its own.
    import browser
    from bs4 import BeautifulSoup

    dom, _, console = browser.load(d.url + "/", budget_ms=3000)
    assert console == [], console
    box = BeautifulSoup(dom, "html.parser").select_one("#privileges")
    said = box.get_text(" ", strip=True)
    assert not box.has_attr("hidden"), said
    assert said.startswith(
        "Python stacks can be read only for jobs of stallwatch's own user: stallwatch lacks CAP_SYS_PTRACE, so"
    ), said
    assert "Job environments (run and rank) can be read only for jobs of stallwatch's own user: stallwatch lacks" in said, said


def test_a_job_of_the_daemons_own_user_is_read_without_capabilities(unprivileged, tmp_path):
    """same_uid means what it says: nobody's own job is read with no capability."""
    if host_ptrace_scope() not in (None, 0):
        pytest.skip("Yama ptrace_scope is not 0 here")
    log = tmp_path / "own.log"
    log.touch()
    log.chmod(0o666)
    out = open(log, "w")
    own = subprocess.Popen([*setpriv([]), sys.executable, str(SPINNER)], stdout=out,
                           stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_ready(log)
        d = unprivileged(own.pid, [])
        d.wait_for(lambda m: m.has("stallwatch_job_info", pid=str(own.pid)), what="nobody's own job")
        report = stacks_of(d, own.pid)
        assert report["outcome"] == "sampled", report
        assert any(t["name"] == "spinner" for t in report["threads"]), report
    finally:
        kill_group(own)
        out.close()


def test_in_a_user_namespace_of_its_own_nothing_of_the_hosts_can_be_read(unprivileged, root_job):
    """Root of a user namespace holds every capability there and none over the
    host's processes, its own uid's included (the kernel's capability check
    wants the same namespace)."""
    d = unprivileged(root_job.pid, None, prefix=in_user_namespace())
    assert Path(f"/proc/{d.process.pid}/uid_map").read_text().split() == ["0", "0", "1"]
    p = privileges(d)
    assert p["initial_user_namespace"] is False, p
    assert p["stacks"]["read"] == "no" and p["environments"]["read"] == "no", p
    assert "user namespace of its own" in p["stacks"]["why"], p
    report = stacks_of(d, root_job.pid)
    assert report["outcome"] == "no_permission", report
    assert "user namespace of its own" in report["detail"] and "lacks" not in report["detail"], report
    job = root_job_status(d, root_job.pid)
    assert "user namespace of its own" in job["run_unknown"] and "lacks" not in job["run_unknown"], job


def test_check_says_what_it_may_read(install_dir, root_job, tmp_path):
    """`stallwatch check` as nobody without capabilities: the limit and its
    reason come first in its report."""
    if host_ptrace_scope() not in (None, 0):
        pytest.skip("Yama ptrace_scope is not 0 here")
    d = Path(tempfile.mkdtemp(dir=install_dir))
    d.chmod(0o755)
    holding = {"pid": root_job.pid, "used_memory_bytes": 8 * 2**30, "sm_util": 5}
    daemon = Daemon(d, {"gpus": [gpu(0, processes=[holding])]}, library=install_dir / "libnvidia_ml.so",
                    binary=install_dir / "stallwatch")
    daemon.config_path.chmod(0o644)
    daemon.scenario_path.chmod(0o644)
    r = subprocess.run(
        [*setpriv([]), str(install_dir / "stallwatch"), "check", "--duration", "5s",
         "--config", str(daemon.config_path)],
        env=dict(os.environ, STALLWATCH_FAKE_NVML=str(daemon.scenario_path)),
        capture_output=True, text=True, timeout=60,
    )
    assert r.returncode in (0, 1), r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "What stallwatch may read of other users' jobs:", r.stdout
    assert lines[1].startswith("  Python stacks: only its own user's (stallwatch lacks CAP_SYS_PTRACE"), r.stdout
    assert lines[2].startswith("  environments (run and rank): only its own user's ("), r.stdout
