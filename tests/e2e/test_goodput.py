"""The GPU-time ledger as a scrape and the API show it: every GPU has all ten states, a
GPU's states add up to the time the daemon watched it, and a starved stretch of a real
job's GPU is booked to `input` (docs/goodput.md)."""

import os
import re
import subprocess
import sys
import time

from daemon import BINARY, gpu, kill_group
from test_diagnosis import FAST, active, job, scenario, status, wait_status  # noqa: F401
from test_jobs import SPINNER

STATES = {"no_job", "unknown", "startup", "compiling", "checkpointing", "input", "hung", "fault", "idle", "productive",
          "recovery"}


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


def rank_job(tmp_path, name):
    """A rank of torchrun run `restart-7`, as torchrun's environment names it."""
    env = dict(os.environ, TORCHELASTIC_RUN_ID="restart-7", RANK="0", LOCAL_RANK="0", WORLD_SIZE="1",
               GROUP_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT="29500")
    out = open(tmp_path / f"{name}.log", "w")
    return subprocess.Popen([sys.executable, str(SPINNER)], stdout=out, stderr=subprocess.STDOUT,
                            start_new_session=True, env=env), out


def test_a_rank_that_comes_back_under_its_run_books_the_gap_as_recovery(daemon_factory, tmp_path):
    first, log1 = rank_job(tmp_path, "first")
    second = log2 = None
    try:
        d = daemon_factory(scenario(first.pid, 90), config=FAST).start()
        # Trains past its start-up (10 s of sustained work), then dies.
        wait_status(d, lambda s: s["gpus"][0]["time"]["productive"] > 5, timeout=40, what="training")
        kill_group(first)
        d.set_scenario({"gpus": [gpu(0, utilization_gpu=0), gpu(1, utilization_gpu=0)]})
        s = wait_status(d, lambda s: "last_ended" in s["gpus"][0], what="the rank to be seen gone")
        trained = s["gpus"][0]["last_ended"]["progress_since_checkpoint_seconds"]
        assert s["gpus"][0]["last_ended"]["run"] == "torchelastic:restart-7" and trained > 5, s["gpus"][0]
        assert not s["gpus"][0]["last_ended"]["restarted"]
        time.sleep(5)  # the gap: held, not yet booked
        assert status(d)["gpus"][0]["time_held_seconds"] >= 4
        # torchrun starts the rank again: same run id, new pid, same GPU.
        second, log2 = rank_job(tmp_path, "second")
        d.set_scenario(scenario(second.pid, 0))
        s = wait_status(d, lambda s: s["gpus"][0]["last_ended"]["restarted"], what="the restart")
        time.sleep(3)
        m = d.metrics()
        booked = ledger(m, 0)
        g = status(d)["gpus"][0]
        # The gap and the new rank's start-up so far are the run's recovery, not no_job.
        assert booked["recovery"] >= 8, booked
        assert booked["no_job"] < 2, booked
        assert g["jobs"][0]["time"]["recovery"] >= 2, g["jobs"][0]["time"]
        # The first rank's training since it came (it saved no checkpoint) is lost.
        lost = m.value("stallwatch_gpu_lost_progress_seconds_total", gpu="0")
        assert lost == g["lost_progress_seconds_total"] and abs(lost - trained) < 0.01, (lost, trained)
        assert m.value("stallwatch_gpu_lost_progress_seconds_total", gpu="1") == 0
        # `stallwatch status` says it.
        r = subprocess.run([str(BINARY), "status", "--url", d.url], capture_output=True, text=True, timeout=30)
        out = r.stdout
        assert re.search(r"last job \d+ \(run torchelastic:restart-7\) ended: \S+ trained and no checkpoint seen, "
                         r"lost to the run's restart", out), out
    finally:
        for p in (first, second):
            if p is not None:
                kill_group(p)
        for log in (log1, log2):
            if log is not None:
                log.close()
