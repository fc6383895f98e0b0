"""scripts/gpu-smoke, in the parts that run without a GPU: it refuses clearly where
there is no CUDA driver, its metric reader reads the real daemon (on the stand-in
NVML, a GPU with GPM), and its GPM request has NVML's layout."""

import ctypes
import importlib.machinery
import importlib.util
import subprocess
import sys

from daemon import ROOT, gpu

SCRIPT = ROOT / "scripts" / "gpu-smoke"


def load_script():
    loader = importlib.machinery.SourceFileLoader("gpu_smoke", str(SCRIPT))
    spec = importlib.util.spec_from_loader("gpu_smoke", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_without_a_cuda_driver_it_says_so_and_exits_2(tmp_path):
    missing = tmp_path / "libcuda.so.1"
    r = subprocess.run([sys.executable, str(SCRIPT), "--cuda-library", str(missing)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r
    assert "cannot run here" in r.stderr and str(missing) in r.stderr, r.stderr
    assert "NVIDIA driver" in r.stderr


def test_its_reader_finds_the_daemons_gpm_series(daemon_factory):
    smoke = load_script()
    d = daemon_factory({"gpus": [gpu(0, utilization_gpu=100, gpm={"sm_util": 3.0})]}).start()
    d.wait_for(lambda m: m.has("stallwatch_gpu_sm_active_ratio", gpu=0), what="GPM series")
    m = smoke.scrape(d.url)
    assert smoke.value(m, "stallwatch_nvml_up") == 1
    assert smoke.value(m, "stallwatch_gpu_gpm_supported", gpu=0) == 1
    assert smoke.value(m, "stallwatch_gpu_sm_active_ratio", gpu=0) == 0.03
    assert smoke.value(m, "stallwatch_gpu_utilization_ratio", gpu=0) == 1.0
    assert smoke.value(m, "stallwatch_gpu_stall_active", kind="spinning", gpu=0) == 0
    assert smoke.value(m, "stallwatch_gpu_sm_active_ratio", gpu=1) is None


def test_its_gpm_request_has_nvmls_layout():
    smoke = load_script()
    # version, numMetrics, two sample pointers, then 210 metrics of 40 bytes.
    assert ctypes.sizeof(smoke.GpmMetricsGet.Metric) == 40
    assert ctypes.sizeof(smoke.GpmMetricsGet) == 24 + 210 * 40
    assert smoke.GpmMetricsGet.metrics.offset == 24
    for entry in ("spin", "busy", "memtouch"):
        assert f".visible .entry {entry}(" in smoke.PTX
