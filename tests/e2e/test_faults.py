"""The daemon keeps serving when NVML is missing, fails or hangs."""

import time

from daemon import gpu


def test_missing_library_serves_host_metrics_and_is_healthy(daemon_factory, tmp_path):
    d = daemon_factory(library=tmp_path / "nowhere" / "libnvidia-ml.so.1").start()
    m = d.metrics()
    assert m.value("stallwatch_nvml_up") == 0
    assert m.value("stallwatch_host_cpus") >= 1
    assert m.value("stallwatch_host_memory_total_bytes") > 0
    assert not m.has("stallwatch_gpu_up")
    status, _, body = d.get("/healthz")
    assert status == 200
    assert b'"nvml":"unavailable"' in body
    time.sleep(1.5)  # several samples and retries
    assert d.logs().count("NVML unavailable") == 1, d.logs()


def test_init_failure_then_success_brings_gpus_without_restart(daemon_factory):
    scenario = {"init_error": "driver_not_loaded", "gpus": [gpu(0, utilization_gpu=42)]}
    d = daemon_factory(scenario).start()
    assert d.metrics().value("stallwatch_nvml_up") == 0
    del scenario["init_error"]
    d.set_scenario(scenario)
    m = d.wait_for(lambda m: m.value("stallwatch_nvml_up") == 1, timeout=10, what="NVML up")
    m = d.wait_for(lambda m: m.has("stallwatch_gpu_utilization_ratio", gpu=0), what="GPU data")
    assert m.value("stallwatch_gpu_utilization_ratio", gpu=0) == 0.42
    assert "NVML initialised" in d.logs()


def test_hanging_call_never_delays_scrapes_and_recovers(daemon_factory):
    scenario = {"gpus": [gpu(0, utilization_gpu=55)]}
    d = daemon_factory(scenario).start()
    d.wait_for(lambda m: m.has("stallwatch_gpu_utilization_ratio", gpu=0), what="GPU data")
    threads_before = d.threads()
    scenario["faults"] = [{"call": "nvmlDeviceGetUtilizationRates", "delay_ms": 30000}]
    d.set_scenario(scenario)
    d.wait_for(lambda m: m.value("stallwatch_nvml_stale") == 1, what="stale data")
    worst = 0.0
    end = time.monotonic() + 3.0
    while time.monotonic() < end:
        for path in ("/metrics", "/healthz"):
            t0 = time.monotonic()
            status, _, body = d.get(path, timeout=1.0)
            worst = max(worst, time.monotonic() - t0)
            assert status == 200, (path, body)
        time.sleep(0.05)
    assert worst < 1.0, f"slowest answer {worst:.3f}s"
    m = d.metrics()
    assert m.value("stallwatch_nvml_stale") == 1
    assert not m.has("stallwatch_gpu_utilization_ratio"), "stale values are not exported as current"
    assert m.value("stallwatch_gpu_up", gpu=0) == 1
    assert m.value("stallwatch_source_errors_total", source="nvml_timeout") >= 5
    assert b'"nvml":"stale"' in d.get("/healthz")[2]
    assert d.threads() == threads_before, "hung calls must not pile up threads"
    # The call returns: fresh data again.
    del scenario["faults"]
    d.set_scenario(scenario)
    m = d.wait_for(lambda m: m.value("stallwatch_nvml_stale") == 0, what="fresh data")
    d.wait_for(lambda m: m.has("stallwatch_gpu_utilization_ratio", gpu=0), what="values back")


def test_failing_call_leaves_that_field_out_and_counts_it(daemon_factory):
    d = daemon_factory(
        {
            "gpus": [gpu(0, temperature_c=70)],
            "faults": [{"call": "nvmlDeviceGetTemperature", "error": "unknown"}],
        }
    ).start()
    m = d.wait_for(lambda m: m.value("stallwatch_source_errors_total", source="nvml") >= 2, what="errors")
    assert not m.has("stallwatch_gpu_temperature_celsius")
    assert m.has("stallwatch_gpu_power_watts", gpu=0)


def test_a_gpu_that_cannot_list_mps_clients_counts_no_error_but_its_processes_are_read(daemon_factory):
    # GPUs before Volta, virtual GPUs and containers answer the MPS list with assorted errors.
    held = [{"pid": 4242, "used_memory_bytes": 2**30}]
    d = daemon_factory(
        {
            "gpus": [gpu(0, processes=held)],
            "faults": [{"call": "nvmlDeviceGetMPSComputeRunningProcesses", "error": "unknown"}],
        }
    ).start()
    m = d.wait_for(lambda m: m.has("stallwatch_process_gpu_memory_bytes", pid="4242"), what="the compute process")
    time.sleep(1.0)
    assert d.metrics().value("stallwatch_source_errors_total", source="nvml") == 0
    # The compute list failing the same way is an error, counted.
    d.set_scenario({"gpus": [gpu(0, processes=held)], "faults": [{"call": "nvmlDeviceGetComputeRunningProcesses", "error": "unknown"}]})
    d.wait_for(lambda m: m.value("stallwatch_source_errors_total", source="nvml") >= 2, what="errors of the compute list")
