"""Jobs are real processes: their threads, children and output are read from /proc."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from daemon import gpu, kill_group

SPINNER = Path(__file__).with_name("spinner.py")


@pytest.fixture
def spinner(tmp_path):
    out = open(tmp_path / "train.log", "w")
    p = subprocess.Popen(
        [sys.executable, str(SPINNER)], stdout=out, stderr=subprocess.STDOUT, start_new_session=True
    )
    wait_ready(tmp_path / "train.log")
    yield p
    kill_group(p)
    out.close()


def wait_ready(log):
    """Waits until the spinner has started its child and its thread."""
    deadline = time.monotonic() + 10
    while "ready" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)


def holding(pid, **fields):
    return {"gpus": [gpu(0, processes=[{"pid": pid, "used_memory_bytes": 8 * 2**30, "sm_util": 5}], **fields)]}


def test_spinning_thread_is_the_top_thread_and_vanishes_when_killed(daemon_factory, spinner):
    d = daemon_factory(holding(spinner.pid)).start()
    pid = str(spinner.pid)
    m = d.wait_for(
        lambda m: any(s.value > 0.8 for s in m.find("stallwatch_job_top_thread_cpu_ratio", pid=pid))
        and m.find("stallwatch_job_processes", pid=pid)[0].value == 2,
        what="the spinner's thread near one core, and its child in the job",
    )
    top = m.find("stallwatch_job_top_thread_cpu_ratio", pid=pid)[0]
    assert top.labels["thread"] == "spinner"
    assert top.labels["comm"] == "python3" or top.labels["comm"].startswith("python")
    assert top.value <= 1.0
    assert m.value("stallwatch_job_processes", pid=pid) == 2, "the job includes its child"
    assert m.value("stallwatch_job_threads", pid=pid, state="running") >= 1
    assert m.value("stallwatch_job_memory_rss_bytes", pid=pid) > 1 << 20
    cpu1 = m.value("stallwatch_job_cpu_seconds_total", pid=pid)
    info = m.find("stallwatch_job_info", pid=pid)[0].labels
    assert set(info) >= {"container_id", "systemd_unit", "pod_uid", "slurm_job_id"}
    assert m.find("stallwatch_process_gpu_memory_bytes", pid=pid)[0].labels["comm"].startswith("python")
    # Output progress: the log file behind stdout grows every 0.2 s.
    last = m.value("stallwatch_job_last_output_timestamp_seconds", pid=pid)
    assert abs(time.time() - last) < 3
    time.sleep(0.6)
    m = d.metrics()
    assert m.value("stallwatch_job_cpu_seconds_total", pid=pid) > cpu1
    # Killed: its job series are gone with the next samples.
    kill_group(spinner)
    m = d.wait_for(lambda m: not m.has("stallwatch_job_info", pid=pid), what="job series gone")
    assert not m.has("stallwatch_job_top_thread_cpu_ratio", pid=pid)
    # NVML still lists it (as a real driver does for a moment): nameless now.
    assert m.find("stallwatch_process_gpu_memory_bytes", pid=pid)[0].labels["comm"] == ""
    d.set_scenario({"gpus": [gpu(0)]})
    d.wait_for(lambda m: not m.has("stallwatch_process_gpu_memory_bytes", pid=pid), what="process series gone")


def test_silent_job_keeps_its_last_output_time(daemon_factory, tmp_path):
    out = open(tmp_path / "quiet.log", "w")
    p = subprocess.Popen([sys.executable, str(SPINNER), "--quiet"], stdout=out, start_new_session=True)
    try:
        wait_ready(tmp_path / "quiet.log")
        d = daemon_factory(holding(p.pid)).start()
        pid = str(p.pid)
        m = d.wait_for(lambda m: m.has("stallwatch_job_last_output_timestamp_seconds", pid=pid), what="output time")
        first = m.value("stallwatch_job_last_output_timestamp_seconds", pid=pid)
        time.sleep(1.0)
        assert d.metrics().value("stallwatch_job_last_output_timestamp_seconds", pid=pid) == first
    finally:
        kill_group(p)
        out.close()


# Two threads hashing outside the GIL (hashlib releases it for large buffers),
# the process confined to one CPU: each runs about half the time and waits for
# that CPU the other half.
SHARING_ONE_CPU = """
import hashlib, os, sys, threading
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
data = b"x" * (1 << 22)
def hash_forever():
    while True:
        hashlib.sha256(data).digest()
for i in range(2):
    threading.Thread(target=hash_forever, name=f"hasher{i}", daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
"""


def test_a_thread_kept_waiting_for_a_cpu_shows_its_wait(daemon_factory, tmp_path):
    out = open(tmp_path / "train.log", "w")
    p = subprocess.Popen([sys.executable, "-c", SHARING_ONE_CPU], stdout=out, start_new_session=True)
    try:
        wait_ready(tmp_path / "train.log")
        d = daemon_factory(holding(p.pid)).start()

        def top_thread():
            code, _, body = d.get("/api/v1/status")
            assert code == 200, body
            jobs = [j for g in json.loads(body)["gpus"] for j in g["jobs"] if j["pid"] == p.pid]
            return jobs[0].get("top_thread") if jobs else None

        deadline = time.monotonic() + 15
        seen = []
        while time.monotonic() < deadline:
            t = top_thread()
            if t and t.get("wait_ratio") is not None:
                seen.append(t)
                if len(seen) >= 3:
                    break
            time.sleep(0.5)
        assert len(seen) >= 3, f"no wait_ratio on the job's top thread: {seen}"
        for t in seen:
            assert t["tid"] != p.pid, f"a hashing thread, not the main one: {t}"
            # Half on the CPU, half waiting for it (give or take the daemon's
            # own turns on a busy test host).
            assert 0.25 <= t["cpu_ratio"] <= 0.75, t
            assert 0.25 <= t["wait_ratio"] <= 0.75, t
            assert t["cpu_ratio"] + t["wait_ratio"] >= 0.85, t
    finally:
        kill_group(p)
        out.close()
