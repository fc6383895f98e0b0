"""The GPU-time ledger as a scrape and the API show it: every GPU has all ten states, a
GPU's states add up to the time the daemon watched it, and a starved stretch of a real
job's GPU is booked to `input` (docs/goodput.md)."""

import time

from test_diagnosis import FAST, active, job, scenario, status, wait_status  # noqa: F401

STATES = {"no_job", "unknown", "startup", "compiling", "checkpointing", "input", "hung", "fault", "idle", "productive"}


def ledger(m, gpu):
    return {s.labels["state"]: s.value for s in m.find("stallwatch_gpu_time_seconds_total", gpu=str(gpu))}


def test_every_gpu_second_is_booked_once(daemon_factory, job):
    d = daemon_factory(scenario(job.pid, 90), config=FAST).start()
    time.sleep(12)  # past the job's start-up: 10 s of sustained work
    d.set_scenario(scenario(job.pid, 1))
    wait_status(d, lambda s: "input_starved" in active(s), what="input_starved")
    d.set_scenario(scenario(job.pid, 90))
    wait_status(d, lambda s: "input_starved" not in active(s), timeout=60, what="input_starved to end")
    time.sleep(2)
    m = d.metrics()
    held = {g["gpu"]: g["time_held_seconds"] for g in status(d)["gpus"]}
    busy, free = ledger(m, 0), ledger(m, 1)
    assert set(busy) == set(free) == STATES, (busy, free)
    # GPU 1 holds no job: all its watched time is no_job, and GPU 0 was watched as long.
    assert free["no_job"] == sum(free.values()) > 20, free
    watched = sum(free.values())
    assert abs(sum(busy.values()) + held[0] - watched) <= 1.0, (busy, held, watched)
    assert busy["input"] > 3 and busy["productive"] > 5, busy
    assert busy["hung"] == busy["fault"] == busy["no_job"] == 0, busy
    # The API says the same.
    g = status(d)["gpus"][0]
    api = g["time"]
    assert set(api) == STATES and api["input"] >= busy["input"] - 0.001, api
    # The job held the GPU all along: its own ledger is the GPU's.
    mine = g["jobs"][0]["time"]
    assert set(mine) == STATES and abs(sum(mine.values()) - sum(api.values())) <= 0.01, (mine, api)
    assert mine["input"] == api["input"], (mine, api)
