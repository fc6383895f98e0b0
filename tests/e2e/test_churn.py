"""Processes come and go: hundreds of short-lived GPU processes, a pid reused
by a new job, zombies, and pids NVML lists that /proc no longer has."""

import json
import os
import subprocess
import sys
import time

import pytest

from churn import Churn
from daemon import gpu
from realjob import JOB, job_factory, stop_job  # noqa: F401 (fixture)

FAST = "[diagnosis]\ntime_scale = 0.05\n"  # warm-up 6 s: churned jobs get diagnosed too
NS_LAST_PID = "/proc/sys/kernel/ns_last_pid"


def job_pids(m):
    """Pids with any job or per-process GPU series."""
    return {
        int(s.labels["pid"])
        for s in m.samples
        if (s.name.startswith("stallwatch_job") or s.name.startswith("stallwatch_process_")) and "pid" in s.labels
    }


def errors(m):
    return {s.labels["source"]: s.value for s in m.find("stallwatch_source_errors_total")}


def events(d):
    return json.loads(d.get("/api/v1/events")[2])["events"]


def test_churn_leaves_no_series_no_errors_and_no_events(daemon_factory):
    d = daemon_factory({"gpus": [gpu(0, utilization_gpu=97), gpu(1, utilization_gpu=97)]}, config=FAST)
    churn = Churn(
        lambda c: d.set_scenario(
            {"gpus": [gpu(0, utilization_gpu=97, processes=c.processes(0)), gpu(1, utilization_gpu=97, processes=c.processes(1))]}
        ),
        gpus=2,
        per_minute=600,
        lifetime=(0.2, 8.0),  # some outlive the 6 s warm-up
    )
    d.start()
    churn.start()
    seen = set()
    most_processes = 0
    counters = {}  # (series name, labels) -> last value: must never go backwards
    try:
        end = time.monotonic() + 15
        while time.monotonic() < end:
            assert d.get("/healthz")[0] == 200
            m = d.metrics()  # parses strictly
            live = job_pids(m)
            seen |= live
            # A job's counters end with it (its pid may be reused by another).
            counters = {k: v for k, v in counters.items() if "pid" not in dict(k[1]) or int(dict(k[1])["pid"]) in live}
            for s in m.samples:
                if s.name.endswith("_total"):
                    key = (s.name, tuple(sorted(s.labels.items())))
                    assert s.value >= counters.get(key, 0), f"{key} went from {counters[key]} to {s.value}"
                    counters[key] = s.value
            most_processes = max([most_processes] + [s.value for s in m.find("stallwatch_job_processes")])
            assert errors(m) == {"nvml": 0, "nvml_timeout": 0, "proc_job": 0, "proc_host": 0}
            time.sleep(0.1)
        assert churn.started >= 150
        assert len(seen) >= 50, f"only {len(seen)} churned jobs were ever seen"
        assert most_processes == 2, "the `sh` jobs' children were counted in their jobs"
    finally:
        churn.stop()
    m = d.wait_for(lambda m: not job_pids(m), what="every churned process's series gone")
    assert not m.has("stallwatch_job_info")
    assert errors(m)["proc_job"] == 0
    assert events(d) == [], "churn alone raised diagnosis events"
    assert "WARN" not in d.logs() and "ERROR" not in d.logs(), d.logs()
    status = json.loads(d.get("/api/v1/status")[2])
    assert all(g["active"] == [] and g["jobs"] == [] for g in status["gpus"]), status
    assert d.get("/healthz")[0] == 200


def spawn_with_pid(pid, *args):
    """Starts job.py as pid `pid` (host pid namespace: the daemon's view) by
    setting the kernel's last allocated pid just below it; retries when
    another process on the host takes the pid first."""
    if not os.access(NS_LAST_PID, os.W_OK):
        pytest.skip(f"{NS_LAST_PID} is not writable (needs root): pid reuse cannot be arranged")
    for _ in range(100):
        with open(NS_LAST_PID, "w") as f:
            f.write(str(pid - 1))
        p = subprocess.Popen([sys.executable, str(JOB), *args], stdout=subprocess.PIPE, start_new_session=True)
        if p.pid == pid:
            assert p.stdout.readline().startswith(b"ready")
            return p
        stop_job(p)
    raise AssertionError(f"could not get pid {pid} in 100 tries")


def jobs_on(d, gpu_index=0):
    return json.loads(d.get("/api/v1/status")[2])["gpus"][gpu_index]["jobs"]


def test_reused_pid_is_a_new_job_with_its_own_counters(daemon_factory, job_factory):
    name = b"trainer".hex()
    old = job_factory("--comm", name, "--spin", "600")
    pid = old.pid
    d = daemon_factory(
        {"gpus": [gpu(0, processes=[{"pid": pid, "used_memory_bytes": 2**30, "sm_util": 50}])]},
        config=FAST,
        interval="1s",  # the swap below fits inside one sampling interval
    ).start()
    d.wait_for(
        lambda m: m.value("stallwatch_job_cpu_seconds_total", pid=pid) > 1.0,
        timeout=15,
        what="the old job's CPU counter past 1 s",
    )
    before = jobs_on(d)[0]
    assert before["top_thread"]["name"] == "spin"
    stop_job(old)
    new = spawn_with_pid(pid, "--comm", name)  # same pid, same name, idle
    try:
        after = None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            jobs = jobs_on(d)
            if jobs and jobs[0]["start_time"] > before["start_time"] and "cpu_cores" in jobs[0]:
                after = jobs[0]
                break
            time.sleep(0.2)
        assert after is not None, "the new process was not seen as a new job"
        assert after["pid"] == pid and after["comm"] == "trainer"
        assert after["warming_up"], "a new job warms up afresh"
        assert after["cpu_cores"] < 0.5, "the old job's CPU use is not carried over"
        assert after["top_thread"]["name"] != "spin"
        m = d.metrics()
        assert m.value("stallwatch_job_cpu_seconds_total", pid=pid) < 0.5, "a fresh counter, not the old job's"
        assert not m.has("stallwatch_job_top_thread_cpu_ratio", thread="spin")
        assert m.value("stallwatch_source_errors_total", source="proc_job") == 0
        assert events(d) == []
    finally:
        stop_job(new)


def test_zombie_child_is_counted_without_errors(daemon_factory, job_factory):
    j = job_factory("--zombie")
    d = daemon_factory(
        {"gpus": [gpu(0, processes=[{"pid": j.pid, "used_memory_bytes": 2**30}])]}
    ).start()
    m = d.wait_for(
        lambda m: m.has("stallwatch_job_threads", pid=j.pid, state="zombie")
        and m.value("stallwatch_job_threads", pid=j.pid, state="zombie") == 1,
        what="the unreaped child counted as a zombie",
    )
    assert m.value("stallwatch_job_processes", pid=j.pid) == 2
    time.sleep(1.0)  # several samples of the zombie
    m = d.metrics()
    assert m.value("stallwatch_job_threads", pid=j.pid, state="zombie") == 1
    assert m.value("stallwatch_source_errors_total", source="proc_job") == 0
    assert d.get("/healthz")[0] == 200


def test_listed_pid_without_a_proc_entry_is_no_error_and_no_job(daemon_factory):
    gone = subprocess.Popen(["true"])
    gone.wait()  # exited and reaped: NVML still lists it, /proc has nothing
    scenario = {"gpus": [gpu(0, processes=[{"pid": gone.pid, "used_memory_bytes": 2**30}])]}
    d = daemon_factory(scenario).start()
    m = d.wait_for(lambda m: m.has("stallwatch_process_gpu_memory_bytes", pid=gone.pid), what="NVML's record")
    time.sleep(1.0)
    m = d.metrics()
    # What NVML says is shown (GPU memory is held), with no name to give it...
    assert m.find("stallwatch_process_gpu_memory_bytes", pid=gone.pid)[0].labels["comm"] == ""
    # ...but there is no job, and no error.
    assert not [s for s in m.samples if s.name.startswith("stallwatch_job")]
    assert m.value("stallwatch_source_errors_total", source="proc_job") == 0
    assert json.loads(d.get("/healthz")[2])["jobs"] == 0
    # Once NVML stops listing it, nothing is left.
    scenario["gpus"][0]["processes"] = []
    d.set_scenario(scenario)
    d.wait_for(lambda m: not job_pids(m), what="its series gone")
