"""What the stand-in NVML library (crates/fake-nvml) is told a GPU shows.

One H100's readings, shared by the end-to-end tests (tests/e2e/daemon.py) and
the benchmark scripts (scripts/benchload.py, scripts/bench-http). Standard
library only: the scripts run without the tests' venv.
"""

# An H100 SXM at half load, holding 1 GiB and no process.
H100 = {
    "name": "NVIDIA H100 80GB HBM3",
    "utilization_gpu": 50,
    "utilization_memory": 20,
    "memory_total_bytes": 85899345920,
    "memory_used_bytes": 1073741824,
    "temperature_c": 50,
    "power_mw": 200000,
    "power_limit_mw": 700000,
    "energy_mj": 1000000,
    "sm_clock_mhz": 1980,
    "memory_clock_mhz": 2619,
    "clock_event_reasons": 0,
    "pcie_tx_kbps": 1000,
    "pcie_rx_kbps": 2000,
}


def uuid(index):
    """GPU `index`'s UUID: GPU-00000000-0000-0000-0000-000000000001 for 1."""
    return f"GPU-00000000-0000-0000-0000-{index:012d}"


def gpu(index, **fields):
    """A scenario GPU: the H100's readings, GPU `index`'s UUID and PCI bus
    (from 0x17 up), no process; `fields` replace or add readings."""
    base = {
        "uuid": uuid(index),
        "pci_bus_id": f"00000000:{0x17 + index:02X}:00.0",
        **H100,
        "processes": [],
    }
    base.update(fields)
    return base


def scenario(gpus, **fields):
    """The stand-in's scenario of `gpus` such GPUs, `fields` set on each."""
    return {"gpus": [gpu(i, **fields) for i in range(gpus)]}
