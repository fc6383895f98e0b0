"""What the daemon costs and reads, as an operator sees it on /metrics and the
API: its CPU by stage adding up to its process CPU, a busy job's threads read
at the slow cadence until its GPU waits, the API's thread view fresh, and a
scrape between two samples the same bytes."""

import gzip
import json
import random
import threading
import time

from daemon import gpu
from test_diagnosis import FAST, active, job, wait_status  # noqa: F401 (fixture)

STAGES = ["nvml", "proc", "faults", "kubelet", "diagnosis", "stacks", "render", "http", "startup"]
REASONS = ["always", "asked", "finding", "not_busy", "cadence", "changed"]


def scenario(pid, util):
    return {"gpus": [gpu(0, utilization_gpu=util, processes=[{"pid": pid, "used_memory_bytes": 8 * 2**30, "sm_util": util}])]}


def reads(m):
    out = {r: m.value("stallwatch_thread_reads_total", reason=r) for r in REASONS}
    out["deferred"] = m.value("stallwatch_thread_reads_deferred_total")
    return out


def delta(a, b):
    return {k: b[k] - a[k] for k in a}


def stages(m):
    return {s: m.value("stallwatch_self_cpu_seconds_total", stage=s) for s in STAGES}


def test_a_busy_jobs_threads_are_read_at_the_slow_cadence_until_its_gpu_waits(daemon_factory, job):
    # 250 ms samples, a busy job's threads every 2 s: every 8th sample.
    d = daemon_factory(scenario(job.pid, 100), config=FAST, sampling='busy_threads_interval = "2s"\n').start()
    time.sleep(3)  # no status asked for: nobody asks for thread views
    m0 = d.metrics()
    time.sleep(6)
    m1 = d.metrics()
    samples = (m1.value("stallwatch_last_sample_timestamp_seconds") - m0.value("stallwatch_last_sample_timestamp_seconds")) / 0.25
    r = delta(reads(m0), reads(m1))
    assert r["deferred"] >= 0.7 * samples, (r, samples)
    assert 2 <= r["cadence"] <= 4, r
    assert r["not_busy"] == r["finding"] == r["asked"] == r["always"] == 0, r
    # Rates from reads 2 s apart are the thread's own: the spinner holds a core.
    spinner = m1.find("stallwatch_job_top_thread_cpu_ratio", pid=str(job.pid), thread="spinner")
    assert spinner and 0.5 < spinner[0].value <= 1.0, m1.find("stallwatch_job_top_thread_cpu_ratio")

    # Its own CPU, by stage, adds up to its process CPU over the window.
    used = m1.value("process_cpu_seconds_total") - m0.value("process_cpu_seconds_total")
    by_stage = delta(stages(m0), stages(m1))
    assert all(by_stage[s] > 0 for s in ("nvml", "proc", "diagnosis", "render", "http")), by_stage
    assert abs(sum(by_stage.values()) - used) <= 0.05 * used + 0.02, (by_stage, used)
    assert m1.value("process_resident_memory_bytes") > 1 << 20

    # The GPU drops: the next sample reads the threads, every sample after.
    d.set_scenario(scenario(job.pid, 1))
    m2 = d.wait_for(lambda m: reads(m)["not_busy"] > 0, timeout=3, what="a read for the idle GPU")
    m3 = d.wait_for(lambda m: reads(m)["not_busy"] + reads(m)["finding"] >= reads(m2)["not_busy"] + 4, timeout=3, what="reads every sample")
    assert reads(m3)["deferred"] <= reads(m2)["deferred"] + 1
    # And the per-thread finding comes as before.
    s = wait_status(d, lambda s: {"single_thread_bound", "cpu_saturated"} & set(active(s)), what="refinement")
    refinement = next(a for k, a in active(s).items() if k in ("single_thread_bound", "cpu_saturated"))
    assert refinement["evidence"]["top_threads"][0]["name"] == "spinner"


def test_a_healthy_gpu_at_85_to_99_percent_with_dips_is_read_at_the_slow_cadence(daemon_factory, job):
    """Utilization as a healthy training job's reads: 85-99%, a dip to 40-75% about one sample
    in eight, changed every quarter second (the sample interval). No kind that reads threads
    can start from that: the job's threads are read at the slow cadence; then the GPU drops
    to 0 and the spinner is named within a couple of samples."""
    d = daemon_factory(scenario(job.pid, 95), config=FAST, sampling='busy_threads_interval = "2s"\n').start()
    stop = threading.Event()
    rng = random.Random(7)

    def wander():
        while not stop.is_set():
            util = rng.randint(40, 75) if rng.random() < 1 / 8 else rng.randint(85, 99)
            d.set_scenario(scenario(job.pid, util))
            stop.wait(0.25)

    walker = threading.Thread(target=wander, daemon=True)
    walker.start()
    try:
        time.sleep(3)
        m0 = d.metrics()
        time.sleep(8)
        m1 = d.metrics()
    finally:
        stop.set()
        walker.join()
    samples = (m1.value("stallwatch_last_sample_timestamp_seconds") - m0.value("stallwatch_last_sample_timestamp_seconds")) / 0.25
    r = delta(reads(m0), reads(m1))
    assert r["not_busy"] == r["finding"] == r["asked"] == r["always"] == 0, (r, samples)
    assert 3 <= r["cadence"] <= 5, r
    assert r["deferred"] >= 0.7 * samples, (r, samples)
    # It drops to 0 with the spinner pinned: read at once, and named.
    d.set_scenario(scenario(job.pid, 0))
    t0 = time.monotonic()
    d.wait_for(lambda m: reads(m)["not_busy"] > reads(m1)["not_busy"], timeout=2, what="a read on the drop")
    m = d.wait_for(
        lambda m: reads(m)["not_busy"] >= reads(m1)["not_busy"] + 2
        and any(s.value > 0.5 for s in m.find("stallwatch_job_top_thread_cpu_ratio", pid=str(job.pid), thread="spinner")),
        timeout=3, what="the spinner named from reads a sample apart",
    )
    assert time.monotonic() - t0 < 3
    assert m.value("stallwatch_thread_reads_total", reason="not_busy") > 0


def test_the_api_thread_view_of_a_busy_job_is_fresh_and_a_scrape_is_the_samples_bytes(daemon_factory, job):
    d = daemon_factory(scenario(job.pid, 100), config=FAST, sampling='busy_threads_interval = "30s"\n').start()
    time.sleep(2)
    before = reads(d.metrics())
    assert before["deferred"] > 0
    code, _, body = d.get("/api/v1/status")
    assert code == 200, body
    s = json.loads(body)
    j = s["gpus"][0]["jobs"][0]
    assert j["pid"] == job.pid
    # Read in the very sample the answer is from, though the next slow read
    # is 30 s away; its rate is over the time since the last read.
    assert j["threads_read_at"] >= s["time"] - 1e-6, (j, s["time"])
    assert j["top_thread"]["name"] == "spinner" and j["top_thread"]["cpu_ratio"] > 0.5, j
    # Asked once, every sample reads the threads for a while.
    time.sleep(1.5)
    after = delta(before, reads(d.metrics()))
    assert after["asked"] >= 4 and after["deferred"] <= 1, after

    # Two scrapes of one sample are the same bytes, plain or gzipped; a
    # scrape of the next sample is not.
    def scrape(encoding):
        code, headers, body = d.get("/metrics", headers={"Accept-Encoding": encoding})
        assert code == 200
        text = gzip.decompress(body) if headers.get("Content-Encoding") == "gzip" else body
        stamp = next(line for line in text.decode().splitlines() if line.startswith("stallwatch_last_sample_timestamp_seconds "))
        return stamp, body

    for encoding in ("gzip", "identity"):
        same = 0
        for _ in range(5):
            (t1, b1), (t2, b2) = scrape(encoding), scrape(encoding)
            if t1 == t2:
                assert b1 == b2, encoding
                same += 1
            time.sleep(0.3)  # past the next sample
            t3, b3 = scrape(encoding)
            assert t3 != t2 and b3 != b2, encoding
        assert same >= 3, (encoding, same)
