"""GPM activity (Hopper and later) from the stand-in NVML reaches /metrics as ratios
and bytes; GPUs without GPM and failing GPM calls leave the series out."""

from daemon import gpu

G0 = dict(gpu="0", uuid="GPU-00000000-0000-0000-0000-000000000000")
MIB = 1024 * 1024

ACTIVITY = [
    "stallwatch_gpu_sm_active_ratio",
    "stallwatch_gpu_sm_occupancy_ratio",
    "stallwatch_gpu_tensor_active_ratio",
    "stallwatch_gpu_dram_active_ratio",
    "stallwatch_gpu_nvlink_transmit_bytes_per_second",
    "stallwatch_gpu_nvlink_receive_bytes_per_second",
]

BUSY = {
    "sm_util": 85.0,
    "sm_occupancy": 40.0,
    "any_tensor_util": 62.5,
    "dram_bw_util": 30.0,
    "nvlink_tx_mibps": 1000.0,
    "nvlink_rx_mibps": 2000.0,
}


def sm_active(m):
    """GPU 0's SM activity, or None while it is left out."""
    found = m.find("stallwatch_gpu_sm_active_ratio", **G0)
    return found[0].value if found else None


def scenario(gpm=BUSY, faults=()):
    return {
        "gpus": [gpu(0, utilization_gpu=100, gpm=gpm), gpu(1, utilization_gpu=40)],
        "faults": list(faults),
    }


def test_gpm_series_with_units_and_only_where_supported(daemon_factory):
    d = daemon_factory(scenario()).start()
    m = d.wait_for(lambda m: m.has("stallwatch_gpu_sm_active_ratio", gpu=0), what="GPM series")
    assert m.value("stallwatch_gpu_gpm_supported", **G0) == 1
    assert m.value("stallwatch_gpu_gpm_supported", gpu=1) == 0
    assert m.value("stallwatch_gpu_sm_active_ratio", **G0) == 0.85
    assert m.value("stallwatch_gpu_sm_occupancy_ratio", **G0) == 0.40
    assert m.value("stallwatch_gpu_tensor_active_ratio", **G0) == 0.625
    assert m.value("stallwatch_gpu_dram_active_ratio", **G0) == 0.30
    assert m.value("stallwatch_gpu_nvlink_transmit_bytes_per_second", **G0) == 1000 * MIB
    assert m.value("stallwatch_gpu_nvlink_receive_bytes_per_second", **G0) == 2000 * MIB
    for name in ACTIVITY:
        assert not m.has(name, gpu=1), f"{name} on a GPU without GPM"
    assert m.value("stallwatch_source_errors_total", source="nvml") == 0
    # The values follow the device: a spinning kernel reads low.
    d.set_scenario(scenario(gpm={"sm_util": 2.0}))
    m = d.wait_for(
        lambda m: sm_active(m) == 0.02, what="low SM activity"
    )
    assert m.value("stallwatch_gpu_tensor_active_ratio", **G0) == 0
    assert m.value("stallwatch_gpu_utilization_ratio", **G0) == 1.0


def test_failing_gpm_calls_are_counted_and_left_out(daemon_factory):
    d = daemon_factory(scenario()).start()
    d.wait_for(lambda m: m.has("stallwatch_gpu_sm_active_ratio", gpu=0), what="GPM series")
    d.set_scenario(scenario(faults=[{"call": "nvmlGpmMetricsGet", "gpu": 0, "error": "unknown"}]))
    m = d.wait_for(
        lambda m: not m.has("stallwatch_gpu_sm_active_ratio", gpu=0)
        and m.value("stallwatch_source_errors_total", source="nvml") >= 2,
        what="GPM left out and counted",
    )
    # Everything else goes on.
    assert m.value("stallwatch_gpu_utilization_ratio", **G0) == 1.0
    assert m.value("stallwatch_nvml_stale") == 0
    d.set_scenario(scenario())
    d.wait_for(
        lambda m: sm_active(m) == 0.85, what="GPM back"
    )


def test_a_hung_gpm_call_is_a_stale_read_like_any_other(daemon_factory):
    d = daemon_factory(scenario()).start()
    d.wait_for(lambda m: m.has("stallwatch_gpu_sm_active_ratio", gpu=0), what="GPM series")
    d.set_scenario(scenario(faults=[{"call": "nvmlGpmSampleGet", "delay_ms": 30000}]))
    m = d.wait_for(lambda m: m.value("stallwatch_nvml_stale") == 1, what="stale data")
    assert not m.has("stallwatch_gpu_sm_active_ratio")
    assert d.get("/healthz")[0] == 200
    d.set_scenario(scenario())
    d.wait_for(
        lambda m: m.value("stallwatch_nvml_stale") == 0
        and m.has("stallwatch_gpu_sm_active_ratio", gpu=0),
        what="fresh data with GPM",
    )
