"""The diagnosis as users meet it: metrics, the JSON API, event log lines,
`stallwatch check` and `stallwatch status`, on a real process tree."""

import json
import re
import subprocess
import sys
import time

import pytest

from daemon import BINARY, gpu
from test_jobs import SPINNER, kill_group

FAST = '[diagnosis]\ntime_scale = 0.05\n'  # windows of seconds, warm-up 6 s


@pytest.fixture
def job(tmp_path):
    out = open(tmp_path / "train.log", "w")
    p = subprocess.Popen([sys.executable, str(SPINNER)], stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    yield p
    kill_group(p)
    out.close()


def scenario(pid, util):
    return {"gpus": [gpu(0, utilization_gpu=util, processes=[{"pid": pid, "used_memory_bytes": 8 * 2**30, "sm_util": util}]), gpu(1, utilization_gpu=0)]}


def status(d):
    code, _, body = d.get("/api/v1/status")
    assert code == 200, body
    return json.loads(body)


def wait_status(d, predicate, timeout=30, what="status"):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = status(d)
        if predicate(last):
            return last
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}: {json.dumps(last, indent=1)[:3000]}")


def active(s, gpu_index=0):
    return {a["kind"]: a for a in s["gpus"][gpu_index]["active"]}


def test_starved_gpu_is_diagnosed_and_recovers(daemon_factory, job):
    d = daemon_factory(scenario(job.pid, 1), config=FAST).start()
    s = wait_status(d, lambda s: "input_starved" in active(s), what="input_starved")
    g = s["gpus"][0]
    assert g["verdict"] == "stalled"
    assert s["gpus"][1]["verdict"] == "no_job"
    starved = active(s)["input_starved"]
    assert starved["evidence"]["utilization_mean"] < 0.1
    assert "prefetch" in starved["hint"]
    assert g["jobs"][0]["pid"] == job.pid
    # The pinned thread explains it: one thread at a full core (or, on a
    # host the test shares with other load, too little CPU overall).
    s = wait_status(d, lambda s: {"single_thread_bound", "cpu_saturated"} & set(active(s)), what="refinement")
    refinement = next(a for k, a in active(s).items() if k in ("single_thread_bound", "cpu_saturated"))
    assert refinement["evidence"]["top_threads"][0]["name"] == "spinner"
    m = d.metrics()
    labels = dict(gpu="0")
    assert m.value("stallwatch_gpu_verdict", verdict="stalled", **labels) == 1
    assert m.value("stallwatch_gpu_verdict", verdict="healthy", **labels) == 0
    assert m.value("stallwatch_gpu_stall_active", kind="input_starved", **labels) == 1
    assert m.value("stallwatch_gpu_stall_events_total", kind="input_starved", **labels) == 1
    assert m.value("stallwatch_gpu_stall_active", kind="busy_no_progress", **labels) == 0
    assert len(m.find("stallwatch_gpu_stall_active", gpu="1")) == 15, "every kind on every GPU"
    assert m.value("stallwatch_gpu_job_idle_seconds_total", **labels) > 0
    # Events: the start, with job, evidence and hint; one structured log line.
    code, _, body = d.get("/api/v1/events")
    events = json.loads(body)["events"]
    start = next(e for e in events if e["kind"] == "input_starved")
    assert start["phase"] == "start" and start["gpu"] == 0
    assert start["job"]["pid"] == job.pid and start["job"]["comm"].startswith("python")
    assert start["since"] <= start["time"]
    assert "stall started" in d.logs() and "input_starved" in d.logs()
    # Fed again: the episode ends, the GPU is healthy.
    d.set_scenario(scenario(job.pid, 92))
    s = wait_status(d, lambda s: s["gpus"][0]["verdict"] == "healthy", what="healthy again")
    code, _, body = d.get(f"/api/v1/events?after={start['id']}")
    later = json.loads(body)["events"]
    assert any(e["kind"] == "input_starved" and e["phase"] == "end" for e in later)
    assert all(e["id"] > start["id"] for e in later)
    m = d.metrics()
    assert m.value("stallwatch_gpu_stall_events_total", kind="input_starved", gpu="0") == 1
    assert m.value("stallwatch_gpu_stall_seconds_total", kind="input_starved", gpu="0") > 0


def test_an_mps_client_is_a_job_and_diagnosed(daemon_factory, job):
    # Under MPS the job's process is listed by the MPS calls, not the compute ones.
    client = {"pid": job.pid, "used_memory_bytes": 8 * 2**30, "sm_util": 1, "type": "mps"}
    d = daemon_factory({"gpus": [gpu(0, utilization_gpu=1, processes=[client])]}, config=FAST).start()
    s = wait_status(d, lambda s: "input_starved" in active(s), what="input_starved on the MPS client's GPU")
    assert s["gpus"][0]["jobs"][0]["pid"] == job.pid
    m = d.metrics()
    assert m.value("stallwatch_process_gpu_memory_bytes", gpu="0", pid=str(job.pid)) == 8 * 2**30


def test_warm_up_verdict_for_a_young_job(daemon_factory, job):
    d = daemon_factory(scenario(job.pid, 1), config='[diagnosis]\nwarmup = "10m"\n').start()
    s = wait_status(d, lambda s: s["gpus"][0]["jobs"], what="job seen")
    assert s["gpus"][0]["verdict"] == "warming_up"
    assert s["gpus"][0]["jobs"][0]["warming_up"] is True
    assert s["gpus"][0]["active"] == []


def test_events_query_is_checked(daemon_factory):
    d = daemon_factory({"gpus": [gpu(0)]}).start()
    assert d.get("/api/v1/events?limit=0")[0] == 400
    code, _, body = d.get("/api/v1/events?since=yesterday")
    assert code == 400 and b"since" in body
    assert d.get("/api/v1/events?bogus=1")[0] == 400
    code, _, body = d.get("/api/v1/events?since=0&limit=5")
    assert code == 200 and json.loads(body) == {"events": []}


def run_check(d, *args):
    env = {"STALLWATCH_FAKE_NVML": str(d.scenario_path), "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [str(BINARY), "check", "--config", str(d.config_path), *args],
        capture_output=True, text=True, timeout=60, env=env,
    )


def test_check_says_why_and_exits_1_then_0_when_healthy(daemon_factory, job):
    d = daemon_factory(scenario(job.pid, 1), config='[diagnosis]\nwarmup = "1s"\n')
    time.sleep(1.2)
    r = run_check(d, "--duration", "8s")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "GPU 0" in r.stdout and "STALLED" in r.stdout
    assert "input_starved" in r.stdout
    assert "What to do:" in r.stdout and "prefetch" in r.stdout
    assert "`spinner`" in r.stdout, r.stdout
    assert "GPU 1" in r.stdout and "no job" in r.stdout
    # What the check itself cost, by stage.
    own = re.search(r"stallwatch's own cost: ([0-9.]+)% of a core over \d+ s \(([0-9.]+) s CPU: (.*)\), ([0-9.]+) MiB resident", r.stdout)
    assert own, r.stdout
    assert "proc " in own[3] and "nvml " in own[3] and "diagnosis " in own[3], own[0]
    d.set_scenario(scenario(job.pid, 93))
    r = run_check(d, "--duration", "6s", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    body = json.loads(r.stdout)
    assert body["status"]["gpus"][0]["verdict"] == "healthy"
    own = body["own_cost"]
    assert 0 < sum(own["stage_cpu_seconds"].values()) <= own["cpu_seconds"] + 1e-6, own
    assert own["stage_cpu_seconds"]["proc"] > 0 and own["resident_bytes"] > 1 << 20, own


def test_check_without_nvml_exits_0_and_says_so(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text(f'[gpu]\nnvml_library = "{tmp_path}/none.so"\n')
    r = subprocess.run([str(BINARY), "check", "--config", str(config), "--duration", "5s"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert "NVML is unavailable" in r.stdout


def test_status_prints_the_daemons_diagnosis(daemon_factory, job):
    d = daemon_factory(scenario(job.pid, 1), config=FAST).start()
    wait_status(d, lambda s: "input_starved" in active(s), what="input_starved")
    r = subprocess.run([str(BINARY), "status", "--url", d.url], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1, r.stderr
    assert "STALLED" in r.stdout and "input_starved" in r.stdout
    r = subprocess.run([str(BINARY), "status", "--url", "http://127.0.0.1:9"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "cannot get" in r.stderr
