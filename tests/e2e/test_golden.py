"""/metrics for a fixed scenario and a fixture /proc tree equals a checked-in
file, and passes strict OpenMetrics parsing and `promtool check metrics`.

Regenerate after an intended change: STALLWATCH_UPDATE_GOLDEN=1 scripts/test -k golden
"""

import os
import re
import subprocess
from pathlib import Path

from daemon import Metrics, gpu

HERE = Path(__file__).parent
GOLDEN = HERE / "golden" / "metrics.txt"
FIXTURE_PROC = HERE / "fixtures" / "proc"

# Values that depend on the clock, not on the inputs.
VOLATILE = (
    "stallwatch_sample_duration_seconds",
    "stallwatch_nvml_read_duration_seconds",
    # From the driver's byte counters over the time between two readings.
    "stallwatch_gpu_pcie_transmit_bytes_per_second",
    "stallwatch_gpu_pcie_receive_bytes_per_second",
    "stallwatch_last_sample_timestamp_seconds",
    "stallwatch_nvml_last_read_timestamp_seconds",
    "stallwatch_gpu_energy_joules_total",
    # Seconds between the first samples, booked to a state.
    "stallwatch_gpu_time_seconds_total",
    "stallwatch_build_info",
    # The daemon's own CPU and memory, and reads counted per sample.
    "stallwatch_self_cpu_seconds_total",
    "process_cpu_seconds_total",
    "process_resident_memory_bytes",
    "stallwatch_thread_reads_total",
    "stallwatch_thread_reads_deferred_total",
)

SCENARIO = {
    "driver_version": "550.54.15",
    "gpus": [
        gpu(
            0,
            utilization_gpu=7,
            utilization_memory=2,
            memory_used_bytes=79 * 2**30,
            temperature_c=38,
            power_mw=95000,
            clock_event_reasons=0x1,
            processes=[
                {"pid": 4242, "used_memory_bytes": 78 * 2**30, "sm_util": 6, "mem_util": 1},
                {"pid": 5151, "used_memory_bytes": 512 * 2**20, "sm_util": 0},
            ],
        ),
        gpu(
            1,
            name="NVIDIA A100-SXM4-40GB",
            memory_total_bytes=40 * 2**30,
            unsupported=["pcie"],
            health={"ecc_corrected": 3, "remapped_rows_correctable": 1, "nvlink_replay_errors": 2},
        ),
    ],
}


def mask(text):
    pattern = re.compile(r"^(%s)(\{[^}]*\})? \S+$" % "|".join(VOLATILE))
    return "\n".join(pattern.sub(r"\1\2 <volatile>", line) for line in text.splitlines()) + "\n"


def test_metrics_match_golden_file(daemon_factory):
    d = daemon_factory(SCENARIO, config=f'[procfs]\nroot = "{FIXTURE_PROC}"\n').start()
    m = d.wait_for(lambda m: m.has("stallwatch_job_top_thread_cpu_ratio"), what="second sample")
    Metrics(m.text)  # strict OpenMetrics parse (raises on any violation)
    # promtool reads the classic text format, which the daemon serves to
    # clients that ask for text/plain only.
    status, headers, body = d.get("/metrics", headers={"Accept": "text/plain;version=0.0.4"})
    assert status == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4")
    lint = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    assert lint.stdout + lint.stderr == b"", "promtool has remarks on the metric names"
    got = mask(m.text)
    if os.environ.get("STALLWATCH_UPDATE_GOLDEN"):
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(got)
    assert GOLDEN.exists(), f"{GOLDEN} missing; run with STALLWATCH_UPDATE_GOLDEN=1"
    assert got == GOLDEN.read_text()
