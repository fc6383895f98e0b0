"""Series stay bounded per GPU however many processes a GPU has and however
many threads a job runs: the budget in docs/metrics.md ("Series budget")."""

import subprocess

from daemon import gpu
from realjob import job_factory  # noqa: F401 (fixture)

MAX_PROCESSES = 16  # gpu.max_processes, default
# docs/metrics.md, "Series budget": per host, per GPU, per exported process and per job.
HOST, PER_GPU, PER_PROCESS, PER_JOB = 49, 140, 2, 16
# Lost time by place: at most 32 place series and 32 call times a host, 28 unplaced a GPU.
PLACES, UNPLACED = 64, 28


def test_many_processes_and_threads_stay_within_the_series_budget(daemon_factory, job_factory):
    crowd = [subprocess.Popen(["sleep", "600"]) for _ in range(40)]
    try:
        big = job_factory("--threads", "300")
        # GPU 0: 40 separate jobs, GPU memory growing with the index; GPU 1: one job of 301 threads.
        listed = [{"pid": p.pid, "used_memory_bytes": (i + 1) * 2**20, "sm_util": 1} for i, p in enumerate(crowd)]
        d = daemon_factory(
            {"gpus": [gpu(0, processes=listed), gpu(1, processes=[{"pid": big.pid, "used_memory_bytes": 2**30}])]}
        ).start()
        m = d.wait_for(
            lambda m: m.has("stallwatch_job_top_thread_cpu_ratio", pid=big.pid)
            and len(m.find("stallwatch_job_info")) == MAX_PROCESSES + 1,
            what="every exported job's series",
        )
        largest = {str(p.pid) for p in crowd[-MAX_PROCESSES:]}
        on_gpu0 = {s.labels["pid"] for s in m.find("stallwatch_process_gpu_memory_bytes", gpu="0")}
        assert on_gpu0 == largest, "the largest gpu.max_processes processes"
        jobs = {s.labels["pid"] for s in m.find("stallwatch_job_info")}
        assert jobs == largest | {str(big.pid)}, "job series only for exported processes"
        for name in {s.name for s in m.samples if s.name.startswith("stallwatch_job")}:
            assert {s.labels["pid"] for s in m.find(name)} <= jobs, name
        # 301 threads: counted by state, never a series each.
        threads = m.find("stallwatch_job_threads", pid=big.pid)
        assert len(threads) == 6 and sum(s.value for s in threads) >= 301
        assert len(m.find("stallwatch_job_top_thread_cpu_ratio", pid=big.pid)) == 1
        per_job = [s for s in m.samples if s.labels.get("pid") == str(big.pid) and s.name.startswith("stallwatch_job")]
        assert len(per_job) <= PER_JOB
        gpus = 2
        budget = HOST + PLACES + gpus * (PER_GPU + UNPLACED + MAX_PROCESSES * (PER_PROCESS + PER_JOB))
        assert len(m.samples) <= budget, f"{len(m.samples)} series, budget {budget}"
        assert len([s for s in m.samples if "gpu" not in s.labels and "pid" not in s.labels]) <= HOST
        assert len([s for s in m.samples if s.labels.get("gpu") == "1" and "pid" not in s.labels]) <= PER_GPU + UNPLACED + PLACES
    finally:
        for p in crowd:
            p.kill()
            p.wait()
