"""The GPU-time ledger on the GPUs fleets have: MIG slices counted as their share of the
physical GPU, no time booked productive with no activity reading, a job that holds a GPU
and does nothing booked idle, and a wedged GPU costing only its own readings; with the
stand-in's real drivers' latencies on (its default)."""

import json
import subprocess
import sys
import time

import pytest

from daemon import gpu, kill_group
from test_diagnosis import job  # noqa: F401 (job: the spinner fixture)
from test_prometheus import query
from test_prometheus_rules import prometheus_with_rules  # noqa: F401 (fixture)

GIB = 2**30
STATES = ("no_job", "unknown", "startup", "compiling", "checkpointing", "input", "hung",
          "fault", "idle", "productive", "recovery")


@pytest.fixture
def idle_job():
    """A process that holds a GPU and does nothing: a notebook left open."""
    p = subprocess.Popen(["sleep", "600"], start_new_session=True)
    yield p
    kill_group(p)


@pytest.fixture
def logging_job(tmp_path):
    """A job that logs a line a second and uses a little CPU."""
    out = open(tmp_path / "a100.log", "w")
    code = "import time\nwhile True:\n    print('step', flush=True)\n    time.sleep(1)\n"
    p = subprocess.Popen([sys.executable, "-c", code], stdout=out, start_new_session=True)
    yield p
    kill_group(p)
    out.close()


def host(working, idle, logging):
    """8 GPUs: an H100 with 3g, 2g and 1g instances (one slice left), an A100 with one 4g
    instance (no GPM: nothing says how busy it is), 6 whole GPUs."""
    held = lambda pid: [{"pid": pid, "used_memory_bytes": 4 * GIB}]  # noqa: E731
    h100 = gpu(0, utilization_gpu=0, gpm={"sm_util": 0.0}, mig=[
        {"gpu_instance_id": 1, "profile": "3g.40gb", "memory_total_bytes": 40 * GIB,
         "gpm": {"sm_util": 0.0}},
        {"gpu_instance_id": 2, "profile": "2g.20gb", "memory_total_bytes": 20 * GIB,
         "processes": held(idle) if idle else [], "gpm": {"sm_util": 0.0}},
        {"gpu_instance_id": 3, "profile": "1g.10gb", "memory_total_bytes": 10 * GIB,
         "processes": held(working), "gpm": {"sm_util": 85.0}},
    ])
    a100 = gpu(1, name="NVIDIA A100-SXM4-80GB", mig=[
        {"gpu_instance_id": 1, "profile": "4g.40gb", "memory_total_bytes": 40 * GIB,
         "processes": held(logging)},
    ])
    return {"gpus": [h100, a100] + [gpu(i, utilization_gpu=90) for i in range(2, 8)]}


def status(d):
    code, _, body = d.get("/api/v1/status")
    assert code == 200, body
    return json.loads(body)


def watched(g):
    """A GPU's seconds in its ledger and held back (a run still being judged)."""
    return sum(g["time"].values()) + g["time_held_seconds"]


def test_a_mig_gpu_counts_once_and_unmeasured_time_is_never_productive(
        daemon_factory, job, idle_job, logging_job):
    d = daemon_factory(host(job.pid, idle_job.pid, logging_job.pid)).start()
    d.wait_for(lambda m: m.has("stallwatch_gpu_info", gpu="1/1/0"), timeout=15, what="the instances")
    time.sleep(30)
    s = status(d)
    by = {g["gpu"]: g for g in s["gpus"]}
    mig = {(g["gpu"] >> 16) & 0xFF: {} for g in s["gpus"] if g["gpu"] >= 1 << 24}
    for g in s["gpus"]:
        if g["gpu"] >= 1 << 24:
            mig[(g["gpu"] >> 16) & 0xFF][(g["gpu"] >> 8) & 0xFF] = g
    whole = watched(by[2])
    assert whole > 25
    # Each physical GPU (itself and its instances) adds up to one GPU's time, within 1%.
    h100 = watched(by[0]) + sum(watched(g) for g in mig[0].values())
    a100 = watched(by[1]) + sum(watched(g) for g in mig[1].values())
    assert h100 == pytest.approx(whole, rel=0.01)
    assert a100 == pytest.approx(whole, rel=0.01)
    host_total = sum(watched(g) for g in s["gpus"])
    assert host_total == pytest.approx(8 * whole, rel=0.01), "8 GPUs: 8 GPU-seconds a second"
    # The H100's instances book 3/7, 2/7 and 1/7 of its time; the slice left, 1/7, no job.
    for gi, slices in ((1, 3), (2, 2), (3, 1)):
        assert watched(mig[0][gi]) == pytest.approx(whole * slices / 7, rel=0.01), gi
        assert mig[0][gi]["share"] == pytest.approx(slices / 7, abs=0.01)
    assert by[0]["time"]["no_job"] == pytest.approx(whole / 7, rel=0.01)
    assert mig[0][1]["time"]["no_job"] == pytest.approx(whole * 3 / 7, rel=0.01)
    # The 1g instance's job works (its SMs at 85%): its time is training, after its start.
    assert mig[0][3]["time"]["productive"] > 0
    # The 2g instance's job does nothing: idle (or held as idle), never a start-up.
    two = mig[0][2]
    assert two["time"]["startup"] == 0 and two["time"]["productive"] == 0
    assert two["time"]["idle"] + two["time_held_seconds"] == pytest.approx(watched(two), rel=0.01)
    # The A100 instance: no utilization, no GPM. Its job logs, but nothing says the GPU
    # works: not one second productive, and the status says why.
    a = mig[1][1]
    assert a["time"]["productive"] == 0 and a["time"]["idle"] == 0
    assert a["time"]["unknown"] > 0
    assert a["share"] == pytest.approx(4 / 7, abs=0.01)
    assert "MIG instance" in a["no_activity_reading"]
    assert "no_activity_reading" not in mig[0][3]
    # With the driver's latencies, each sample's NVML reading stays short and never stale.
    m = d.metrics()
    assert m.value("stallwatch_nvml_read_duration_seconds") < 0.25
    assert m.value("stallwatch_source_errors_total", source="nvml_timeout") == 0
    assert sum(by[i]["time"]["unknown"] for i in range(2, 8)) == 0


def test_the_shipped_rules_count_physical_gpus(daemon_factory, prometheus_with_rules, job,  # noqa: F811
                                               logging_job):
    """A real Prometheus with the shipped rules: the host's GPU time grows by 8 GPU-seconds a
    second (not 12: the H100, its 3 instances, the A100 and its instance are 2 GPUs). (No
    idle job here: an idle run is held up to 5 minutes before it is booked.)"""
    d = daemon_factory(host(job.pid, None, logging_job.pid)).start()
    base = prometheus_with_rules(f"127.0.0.1:{d.port}")
    exprs = {
        "raw": "sum(rate(stallwatch_gpu_time_seconds_total[20s]))",
        # The hosts' 5-minute rule (a share: its rate over 5m of a minute's data is a fifth).
        "rule": 'sum(instance_state:stallwatch_gpu_time_seconds:rate5m{state="unknown"})'
                " / sum(instance_state:stallwatch_gpu_time_seconds:rate5m)",
        "h100": 'sum(rate(stallwatch_gpu_time_seconds_total{gpu=~"0|0/.*"}[20s]))',
        "a100_unknown": 'sum(rate(stallwatch_gpu_time_seconds_total{gpu="1/1/0",state="unknown"}[20s]))',
        "productive": 'sum(rate(stallwatch_gpu_time_seconds_total{gpu=~"1|1/.*",state="productive"}[20s]))',
    }
    got = {}
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        time.sleep(1)
        try:
            got = {k: float(query(base, e)[0]["value"][1]) for k, e in exprs.items()}
        except (IndexError, OSError, ValueError, KeyError):
            continue
        # Past the first samples: every series has its steady rate.
        # (A start-up's held seconds are booked at once when it ends: a step in the rates.)
        if abs(got["raw"] - 8) < 0.08 and abs(got["h100"] - 1) < 0.01 and abs(got["rule"] - 4 / 7 / 8) < 0.0007:
            break
    assert got.get("raw") == pytest.approx(8, rel=0.01), got
    assert got.get("rule") == pytest.approx(4 / 7 / 8, rel=0.01), got
    assert got.get("h100") == pytest.approx(1, rel=0.01), got
    # The A100's 4g instance, held, nothing to say how busy: 4/7 of a GPU unknown, none productive.
    assert got.get("a100_unknown") == pytest.approx(4 / 7, rel=0.02), got
    assert got.get("productive") == 0, got


def test_a_wedged_gpu_costs_only_its_own_readings(daemon_factory):
    scenario = {"gpus": [gpu(i, utilization_gpu=60) for i in range(4)]}
    d = daemon_factory(scenario).start()
    d.wait_for(lambda m: m.has("stallwatch_gpu_utilization_ratio", gpu=3), what="four GPUs")
    # GPU 2's calls never return.
    scenario["faults"] = [{"call": "nvmlDeviceGetUtilizationRates", "gpu": 2, "delay_ms": 60000}]
    d.set_scenario(scenario)
    d.wait_for(lambda m: m.value("stallwatch_nvml_stale") == 1, what="GPU 2 stale")
    time.sleep(5)
    m = d.metrics()
    assert not m.has("stallwatch_gpu_utilization_ratio", gpu="2")
    for i in (0, 1, 3):
        assert m.value("stallwatch_gpu_utilization_ratio", gpu=str(i)) == 0.6, i
    s = status(d)
    by = {g["gpu"]: g for g in s["gpus"]}
    assert by[2]["time"]["unknown"] >= 4
    assert all(by[i]["time"]["unknown"] == 0 for i in (0, 1, 3))
    assert by[2]["verdict"] == "unknown"
    # It answers again: fresh with the others.
    del scenario["faults"]
    d.set_scenario(scenario)
    d.wait_for(
        lambda m: m.value("stallwatch_nvml_stale") == 0 and m.has("stallwatch_gpu_utilization_ratio", gpu="2"),
        timeout=90, what="GPU 2 back",
    )
