"""A GPU behind an older driver's NVML, one without the call versions that
nvml-wrapper uses first (memory `_v2` and processes `_v3`, from R510), is still
diagnosed: its memory and its job come from the calls that driver has. And on
the 535 drivers whose `_v3` process records are wider than nvml-wrapper's
(535.43 to 535.86), every process is read right, not only the first.

The library is a second stand-in (fixtures/older_nvml.c), written apart from
crates/fake-nvml and built here with the system's C compiler: it exports only
what such a driver exports, so a missing symbol is really missing."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from daemon import kill_group
from test_diagnosis import FAST, active, wait_status
from test_jobs import SPINNER, wait_ready

SOURCE = Path(__file__).with_name("fixtures") / "older_nvml.c"
UUID = "GPU-0fde7c1a-4701-4470-8d2b-6c0d3a9e5b21"
GIB = 2**30


@pytest.fixture
def job(tmp_path):
    """The spinner: a Python process with one thread pinned at a core, printing."""
    out = open(tmp_path / "train.log", "w")
    p = subprocess.Popen([sys.executable, str(SPINNER)], stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    wait_ready(tmp_path / "train.log")
    yield p
    kill_group(p)
    out.close()


def older_library(tmp_path, driver, pid, other=None):
    compiler = shutil.which("cc") or shutil.which("gcc")
    assert compiler, "a C compiler (cc) is needed to build the older driver's stand-in NVML"
    library = tmp_path / f"libnvidia-ml-{driver}.so.1"
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-O2", "-Wall", "-Werror", f"-DDRIVER_{driver.upper()}",
         f"-DJOB_PID={pid}", *([f"-DOTHER_PID={other}"] if other else []), "-o", str(library), str(SOURCE)],
        check=True,
    )
    exported = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True, check=True).stdout
    # The premise: the newest versions are absent (or, for stubs, present but answer "not found").
    if driver in ("r470", "r440"):
        assert "nvmlDeviceGetMemoryInfo_v2" not in exported
        assert "nvmlDeviceGetComputeRunningProcesses_v3" not in exported
    return library


@pytest.mark.parametrize("driver", ["r470", "r440", "stubs"])
def test_an_older_drivers_gpu_shows_its_memory_and_job_and_is_diagnosed(daemon_factory, job, tmp_path, driver):
    d = daemon_factory(library=older_library(tmp_path, driver, job.pid), config=FAST).start()
    g0 = dict(gpu="0", uuid=UUID)
    pid = str(job.pid)
    m = d.wait_for(lambda m: m.has("stallwatch_job_info", pid=pid), what="the job on the older driver's GPU")
    assert m.value("stallwatch_gpu_memory_used_bytes", **g0) == 78 * GIB
    assert m.value("stallwatch_gpu_memory_total_bytes", **g0) == 80 * GIB
    assert m.value("stallwatch_process_gpu_memory_bytes", pid=pid, **g0) == 77 * GIB
    assert m.value("stallwatch_gpu_verdict", verdict="no_job", **g0) == 0
    # The GPU idles while the job's one thread is pinned: the stall and its cause.
    s = wait_status(d, lambda s: "input_starved" in active(s), what="input_starved")
    assert s["gpus"][0]["jobs"][0]["pid"] == job.pid
    s = wait_status(d, lambda s: {"single_thread_bound", "cpu_saturated"} & set(active(s)), what="refinement")
    # Calls the library lacks are left out, not counted as errors.
    assert d.metrics().value("stallwatch_source_errors_total", source="nvml") == 0


def test_on_an_early_535_driver_every_process_on_the_gpu_is_read_right(daemon_factory, job, tmp_path):
    # A second process on the GPU: a sleeping one outside the job.
    other = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        library = older_library(tmp_path, "r535_early", job.pid, other=other.pid)
        d = daemon_factory(library=library, config=FAST).start()
        g0 = dict(gpu="0", uuid=UUID)
        m = d.wait_for(
            lambda m: m.has("stallwatch_process_gpu_memory_bytes", pid=str(other.pid)),
            what="the second process on the GPU",
        )
        held = {s.labels["pid"]: s.value for s in m.find("stallwatch_process_gpu_memory_bytes", **g0)}
        # Read through the 24-byte records of `_v2`: both pids and their memory, nothing else.
        assert held == {str(job.pid): 77 * GIB, str(other.pid): 1 * GIB}
        assert m.value("stallwatch_gpu_memory_used_bytes", **g0) == 78 * GIB
        assert "535.54.03" in m.find("stallwatch_gpu_info", gpu="0")[0].labels["driver_version"]
        assert m.value("stallwatch_source_errors_total", source="nvml") == 0
    finally:
        kill_group(other)
