"""What other users' processes reveal stays private: no command line,
environment, working directory or file path of a job reaches /metrics, the
JSON API (status, events, evidence, the job's Python stacks) or the log, even
at debug level."""

import os
import shutil
import subprocess
import sys
import time

from daemon import gpu
from realjob import JOB, stop_job

SECRETS = {
    "argv": "ARGVSECRET-1f2e",
    "env": "ENVSECRET-3c4d",
    "cwd": "CWDSECRET-5a6b",
    "file": "FILESECRET-7e8f",
}
FAST = "[diagnosis]\ntime_scale = 0.05\n"


def test_no_command_line_environment_or_path_is_exposed(daemon_factory, tmp_path):
    home = tmp_path / "job"
    cwd = home / f"cwd-{SECRETS['cwd']}"
    cwd.mkdir(parents=True)
    out_path = home / f"train-{SECRETS['file']}.log"
    env = dict(os.environ, AWS_SECRET_ACCESS_KEY=SECRETS["env"], STALLWATCH_TEST_TOKEN=SECRETS["env"])
    # The script itself lives in the secret directory: its stack frames carry that path.
    script = cwd / "job.py"
    shutil.copy(JOB, script)
    with open(out_path, "w") as out:
        job = subprocess.Popen(
            [sys.executable, str(script), "--spin", "600", "--print-every", "0.2", "--", f"--api-key={SECRETS['argv']}", str(out_path)],
            stdout=out,
            stderr=out,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 10
        while "ready" not in out_path.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        # An idle GPU under a busy job: diagnosed, so events carry evidence.
        d = daemon_factory(
            {"gpus": [gpu(0, utilization_gpu=1, processes=[{"pid": job.pid, "used_memory_bytes": 2**30, "sm_util": 1}])]},
            config=FAST,
        ).start(log_level="stallwatch=debug,collector=debug,diagnosis=debug")
        # The daemon did follow the job's stdout file (output recency)...
        d.wait_for(
            lambda m: m.has("stallwatch_job_last_output_timestamp_seconds", pid=job.pid), what="output recency"
        )
        deadline = time.monotonic() + 45
        while b'"stacks"' not in d.get("/api/v1/events")[2] and time.monotonic() < deadline:
            time.sleep(0.2)
        seen = {
            "/api/v1/stacks": d.get(f"/api/v1/stacks/{job.pid}?seconds=1", timeout=15)[2],
            "/metrics": d.get("/metrics")[2],
            "/metrics (text)": d.get("/metrics", headers={"Accept": "text/plain"})[2],
            "/api/v1/status": d.get("/api/v1/status")[2],
            "/api/v1/events": d.get("/api/v1/events")[2],
            "/healthz": d.get("/healthz")[2],
        }
        assert b'"phase":"start"' in seen["/api/v1/events"], "the job was diagnosed: events with evidence"
        assert b'"outcome":"sampled"' in seen["/api/v1/events"], "its Python stacks were read"
        assert b'"file":"job.py"' in seen["/api/v1/stacks"], seen["/api/v1/stacks"][:500]
        d.stop()
        seen["log"] = d.log_path.read_bytes()
        assert b"stall started" in seen["log"]
    finally:
        stop_job(job)
    # ...but none of what it knows about the job beyond pid and name is shown.
    for where, text in seen.items():
        for what, secret in SECRETS.items():
            assert secret.encode() not in text, f"the job's {what} appears in {where}"
        assert str(home).encode() not in text, f"a path under the job's directory appears in {where}"
