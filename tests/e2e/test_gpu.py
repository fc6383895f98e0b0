"""GPU values from the stand-in NVML library reach /metrics with the right units."""

import json
import time

import pytest

from daemon import gpu


def test_values_round_trip_with_units(daemon_factory):
    d = daemon_factory(
        {
            "driver_version": "550.54.15",
            "gpus": [
                gpu(
                    0,
                    utilization_gpu=87,
                    utilization_memory=40,
                    memory_used_bytes=60 * 2**30,
                    temperature_c=61,
                    power_mw=350500,
                    power_limit_mw=700000,
                    energy_mj=5_000_000,
                    sm_clock_mhz=1980,
                    memory_clock_mhz=2619,
                    clock_event_reasons=0x4 | 0x40,
                    pcie_tx_kbps=1000,
                    pcie_rx_kbps=2000,
                ),
                gpu(1, utilization_gpu=3, unsupported=["power", "pcie"]),
            ],
        }
    ).start()
    # PCIe rates come from the driver's cumulative byte counters: from the second reading on.
    m = d.wait_for(
        lambda m: m.has("stallwatch_gpu_utilization_ratio", gpu=1)
        and m.has("stallwatch_gpu_pcie_transmit_bytes_per_second", gpu=0),
        what="both GPUs, and two readings of GPU 0's PCIe counters",
    )
    g0 = dict(gpu="0", uuid="GPU-00000000-0000-0000-0000-000000000000")
    assert m.value("stallwatch_nvml_up") == 1
    assert m.value("stallwatch_gpu_up", **g0) == 1
    info = m.find("stallwatch_gpu_info", gpu="0")[0].labels
    assert info["name"] == "NVIDIA H100 80GB HBM3"
    assert info["pci_bus_id"] == "00000000:17:00.0"
    assert info["driver_version"] == "550.54.15"
    assert m.value("stallwatch_gpu_utilization_ratio", **g0) == 0.87
    assert m.value("stallwatch_gpu_memory_utilization_ratio", **g0) == 0.40
    assert m.value("stallwatch_gpu_memory_used_bytes", **g0) == 60 * 2**30
    assert m.value("stallwatch_gpu_memory_total_bytes", **g0) == 85899345920
    assert m.value("stallwatch_gpu_temperature_celsius", **g0) == 61
    assert m.value("stallwatch_gpu_power_watts", **g0) == 350.5
    assert m.value("stallwatch_gpu_power_limit_watts", **g0) == 700
    assert m.value("stallwatch_gpu_sm_clock_hertz", **g0) == 1.98e9
    assert m.value("stallwatch_gpu_memory_clock_hertz", **g0) == 2.619e9
    # The counters' growth over the driver's own timestamps (microseconds apart).
    assert m.value("stallwatch_gpu_pcie_transmit_bytes_per_second", **g0) == pytest.approx(1000 * 1024, rel=1e-3)
    assert m.value("stallwatch_gpu_pcie_receive_bytes_per_second", **g0) == pytest.approx(2000 * 1024, rel=1e-3)
    assert m.value("stallwatch_gpu_clock_event_active", reason="sw_power_cap", **g0) == 1
    assert m.value("stallwatch_gpu_clock_event_active", reason="hw_thermal_slowdown", **g0) == 1
    assert m.value("stallwatch_gpu_clock_event_active", reason="gpu_idle", **g0) == 0
    # Energy is a counter in joules that grows with power over time.
    e1 = m.value("stallwatch_gpu_energy_joules_total", **g0)
    assert e1 >= 5000
    time.sleep(1.0)
    e2 = d.metrics().value("stallwatch_gpu_energy_joules_total", **g0)
    assert 5000 <= e1 < e2, (e1, e2)
    assert 200 < e2 - e1 < 700, "about 350 W for about 1 s"
    # An unsupported field is left out, not an error and not 0.
    assert m.value("stallwatch_gpu_utilization_ratio", gpu=1) == 0.03
    assert not m.has("stallwatch_gpu_power_watts", gpu=1)
    assert not m.has("stallwatch_gpu_pcie_transmit_bytes_per_second", gpu=1)
    assert m.value("stallwatch_source_errors_total", source="nvml") == 0


def test_lost_gpu_is_down_and_the_others_go_on(daemon_factory):
    scenario = {"gpus": [gpu(0, utilization_gpu=70), gpu(1, utilization_gpu=80)]}
    d = daemon_factory(scenario).start()
    d.wait_for(lambda m: m.has("stallwatch_gpu_up", gpu=1), what="GPU 1")
    scenario["gpus"][1]["lost"] = True
    d.set_scenario(scenario)
    m = d.wait_for(lambda m: m.value("stallwatch_gpu_up", gpu=1) == 0, what="GPU 1 lost")
    assert m.value("stallwatch_gpu_up", gpu=0) == 1
    assert m.value("stallwatch_gpu_utilization_ratio", gpu=0) == 0.70
    assert not m.has("stallwatch_gpu_utilization_ratio", gpu=1)
    # The lost GPU keeps its identity so alerts can name it.
    lost = m.find("stallwatch_gpu_info", gpu="1")[0].labels
    assert lost["uuid"] == "GPU-00000000-0000-0000-0000-000000000001"
    assert d.get("/healthz")[0] == 200
    # It comes back.
    scenario["gpus"][1]["lost"] = False
    d.set_scenario(scenario)
    d.wait_for(lambda m: m.value("stallwatch_gpu_up", gpu=1) == 1, what="GPU 1 back")


def test_gpu_added_at_runtime_appears(daemon_factory):
    scenario = {"gpus": [gpu(0)]}
    d = daemon_factory(scenario).start()
    d.wait_for(lambda m: m.has("stallwatch_gpu_up", gpu=0), what="GPU 0")
    scenario["gpus"].append(gpu(1))
    d.set_scenario(scenario)
    d.wait_for(lambda m: m.has("stallwatch_gpu_up", gpu=1), what="GPU 1 added")


def test_process_series_capped_largest_first(daemon_factory):
    procs = [{"pid": 100000 + i, "used_memory_bytes": (i + 1) * 2**20, "sm_util": 10} for i in range(5)]
    d = daemon_factory({"gpus": [gpu(0, processes=procs)]}, config="max_processes = 3\n").start()
    m = d.wait_for(lambda m: m.has("stallwatch_process_gpu_memory_bytes"), what="process series")
    pids = sorted(int(s.labels["pid"]) for s in m.find("stallwatch_process_gpu_memory_bytes"))
    assert pids == [100002, 100003, 100004]
    assert m.value("stallwatch_process_gpu_memory_bytes", pid=100004) == 5 * 2**20
    assert m.value("stallwatch_process_gpu_sm_utilization_ratio", pid=100004) == 0.10
    # Pids that are not in /proc have no name to show.
    assert m.find("stallwatch_process_gpu_memory_bytes", pid=100004)[0].labels["comm"] == ""


def test_lost_gpu_that_returns_is_one_gpu_again_and_diagnosed(daemon_factory):
    """The same UUID comes back: up again, one set of series, and the diagnosis
    works on it as before (a thermal slowdown is reported on the returned GPU)."""
    scenario = {"gpus": [gpu(0, utilization_gpu=97), gpu(1, utilization_gpu=97)]}
    d = daemon_factory(scenario, config="[diagnosis]\ntime_scale = 0.05\n").start()
    d.wait_for(lambda m: m.has("stallwatch_gpu_verdict", gpu=1, verdict="no_job"), what="GPU 1 diagnosed")
    scenario["gpus"][1]["lost"] = True
    d.set_scenario(scenario)
    m = d.wait_for(lambda m: m.value("stallwatch_gpu_up", gpu=1) == 0, what="GPU 1 lost")
    d.wait_for(lambda m: m.value("stallwatch_gpu_verdict", gpu=1, verdict="unknown") == 1, what="unknown verdict")
    scenario["gpus"][1]["lost"] = False
    scenario["gpus"][1]["clock_event_reasons"] = 0x40  # hw_thermal_slowdown
    d.set_scenario(scenario)
    m = d.wait_for(
        lambda m: m.value("stallwatch_gpu_stall_active", gpu=1, kind="throttled") == 1,
        timeout=20,
        what="throttled diagnosed on the returned GPU",
    )
    uuid = "GPU-00000000-0000-0000-0000-000000000001"
    assert m.value("stallwatch_gpu_up", gpu=1) == 1
    assert m.value("stallwatch_gpu_utilization_ratio", gpu=1) == 0.97
    # One GPU, not two: every per-GPU family has exactly one series set for it.
    assert [s.labels["uuid"] for s in m.find("stallwatch_gpu_info", gpu="1")] == [uuid]
    assert len(m.find("stallwatch_gpu_up")) == 2
    assert len(m.find("stallwatch_gpu_verdict", gpu="1")) == len(m.find("stallwatch_gpu_verdict", gpu="0"))
    assert len(m.find("stallwatch_gpu_stall_active", kind="throttled")) == 2
    status = json.loads(d.get("/api/v1/status")[2])
    assert [g["uuid"] for g in status["gpus"]].count(uuid) == 1
    events = json.loads(d.get("/api/v1/events")[2])["events"]
    assert [(e["kind"], e["gpu"], e["uuid"]) for e in events if e["phase"] == "start"] == [("throttled", 1, uuid)]
    assert m.value("stallwatch_source_errors_total", source="nvml") == 0
