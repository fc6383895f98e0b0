"""Hostile process and thread names: quotes, backslashes, control bytes,
braces, `=`, bytes that are not UTF-8, names past the kernel's 15 bytes.
/metrics still parses strictly and passes promtool, label values round-trip,
and the JSON API stays valid."""

import json
import subprocess

from daemon import gpu
from realjob import job_factory  # noqa: F401 (fixture)

# Each at most 15 bytes, the kernel's limit (TASK_COMM_LEN - 1).
COMM = b'q"\\{x}=y\x01\xfe\t\n'
SPIN = b'sp"in\\\x7f\xc3(,}'  # set with prctl(PR_SET_NAME); \xc3( is not UTF-8
WRITTEN = b"w{r}i=te\x1b[31m"  # written to /proc/self/task/<tid>/comm by a sleeping and a spinning thread
LONG = b'0123456789"abcdefXYZ'  # cut by the kernel to its first 15 bytes


def shown(name: bytes) -> str:
    """How a name is shown: invalid UTF-8 replaced by U+FFFD."""
    return name.decode("utf-8", errors="replace")


def holding(*pids):
    return {"gpus": [gpu(0, processes=[{"pid": pid, "used_memory_bytes": 2**30, "sm_util": 5} for pid in pids])]}


def test_hostile_names_are_escaped_and_round_trip(daemon_factory, job_factory):
    hostile = job_factory("--comm", COMM.hex(), "--spin", "600", "--spin-name", SPIN.hex(), "--proc-comm", WRITTEN.hex())
    long = job_factory("--comm", LONG.hex(), "--spin", "600", "--spin-name", WRITTEN.hex(), "--spin-by-proc")
    d = daemon_factory(holding(hostile.pid, long.pid)).start()
    m = d.wait_for(
        lambda m: len(m.find("stallwatch_job_top_thread_cpu_ratio")) == 2, what="the spinning threads"
    )  # Metrics() parsed it strictly
    assert m.find("stallwatch_job_info", pid=hostile.pid)[0].labels["comm"] == shown(COMM)
    top = m.find("stallwatch_job_top_thread_cpu_ratio", pid=hostile.pid)[0]
    assert top.labels["thread"] == shown(SPIN)
    assert top.labels["comm"] == shown(COMM)
    assert m.find("stallwatch_process_gpu_memory_bytes", pid=hostile.pid)[0].labels["comm"] == shown(COMM)
    assert m.find("stallwatch_job_info", pid=long.pid)[0].labels["comm"] == shown(LONG[:15])
    assert m.find("stallwatch_job_top_thread_cpu_ratio", pid=long.pid)[0].labels["thread"] == shown(WRITTEN)
    assert m.value("stallwatch_job_threads", pid=hostile.pid, state="sleeping") >= 2
    assert m.value("stallwatch_source_errors_total", source="proc_job") == 0

    # The classic text format passes promtool.
    status, _, body = d.get("/metrics", headers={"Accept": "text/plain;version=0.0.4"})
    assert status == 200
    assert b"\\n" in body and b'\\"' in body and b"\\\\" in body, "escaped, not raw"
    lint = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr

    # The JSON API is valid JSON (strict: no raw control characters) with the same names.
    status, headers, body = d.get("/api/v1/status")
    assert status == 200 and headers["Content-Type"] == "application/json"
    s = json.loads(body.decode("utf-8"), strict=True)
    jobs = {j["pid"]: j for j in s["gpus"][0]["jobs"]}
    assert jobs[hostile.pid]["comm"] == shown(COMM)
    assert jobs[long.pid]["comm"] == shown(LONG[:15])
    assert jobs[hostile.pid]["top_thread"]["name"] == shown(SPIN)
    assert jobs[long.pid]["top_thread"]["name"] == shown(WRITTEN)
    events = json.loads(d.get("/api/v1/events")[2].decode("utf-8"), strict=True)
    assert events == {"events": []}
