"""The orchestrator side of the GPU link: turns the slots' busy seconds into what
NVML would report, one dict per GPU in the stand-in library's scenario format.

Utilization of a process = its busy seconds over the last `window_s` (1 s, like
NVML's sample period) divided by the window, clamped to 0-1; a GPU's is the sum
of its processes', clamped. Power = idle + (busy - idle) x utilization, except
that a kernel spinning in low-power mode (a hung collective) draws only a tenth
of the busy increment. On a GPU with `gpm`, SM, tensor and DRAM activity follow the
kernels' SM share (a spinning kernel: a few SMs, nothing else). Memory used = a
small base + what the processes hold. A stopped process (SIGSTOP) keeps its memory
but its GPU goes idle. Processes that have exited (reaped or not) or whose pid was
reused hold nothing, as the driver frees a context when its process dies.
"""

import collections
from dataclasses import dataclass

from gpu_link import process_stat

GIB = 1 << 30
MIB = 1 << 20


@dataclass
class GpuSpec:
    """Static fields of one simulated GPU."""
    name: str = "NVIDIA H100 80GB HBM3"
    memory_total_bytes: int = 80 * GIB
    base_memory_bytes: int = 4 * MIB
    idle_power_w: float = 70.0
    busy_power_w: float = 520.0
    power_limit_w: float = 700.0
    low_power_share: float = 0.1
    # Hopper with GPM: the scenario GPU carries SM, tensor and DRAM activity.
    gpm: bool = False
    # MIG on: the GPU is one MIG instance (GPU instance 1, compute instance 0) holding
    # the processes, with the GPM activity; no utilization.gpu (as on a real MIG GPU).
    mig: bool = False
    xid: int = 0                  # an Xid the driver reports on this GPU...
    xid_at_s: float = None        # ...from this (unscaled) time on (None: never)


class GpuMeter:
    def __init__(self, link, gpus, window_s=1.0):
        self.link = link
        self.gpus = list(gpus)
        self.window_s = window_s
        self._history = {}

    def _utilization(self, key, now, busy_seconds):
        history = self._history.setdefault(key, collections.deque())
        history.append((now, busy_seconds))
        start = now - self.window_s
        while len(history) > 2 and history[1][0] <= start:
            history.popleft()
        t0, b0 = history[0]
        if t0 <= start and len(history) > 1:
            t1, b1 = history[1]
            if t1 > t0:
                b0 += (b1 - b0) * (start - t0) / (t1 - t0)
            t0 = start
        span = now - t0
        if span < 0.05:
            return 0.0
        return min(1.0, max(0.0, (busy_seconds - b0) / span))

    def frame(self):
        """Per-GPU state now: a list of dicts with `nvml` (the scenario GPU object)
        and `utilization` (0-1 float) and `processes` (pid -> details)."""
        # A process that has exited holds nothing, reaped or not: the driver frees its
        # contexts as it exits.
        registered = self.link.slots()
        stats = {s["pid"]: process_stat(s["pid"]) for s in registered}
        slots = [s for s in registered if stats[s["pid"]] and stats[s["pid"]][1] == s["start_ticks"]
                 and stats[s["pid"]][0] not in ("Z", "X")]
        seen = set()
        per_gpu = [[] for _ in self.gpus]
        for s in slots:
            key = (s["slot"], s["pid"], s["start_ticks"])
            seen.add(key)
            if stats[s["pid"]][0] in ("T", "t") and self._history.get(key):
                # A stopped process's GPU goes idle: its busy time stands still.
                s["busy_seconds"] = self._history[key][-1][1]
                s["low_power"] = False
            util = self._utilization(key, s["at"], s["busy_seconds"])
            if 0 <= s["gpu"] < len(self.gpus):
                per_gpu[s["gpu"]].append((s, util))
        for key in list(self._history):
            if key not in seen:
                del self._history[key]
        return [self._gpu_frame(spec, procs) for spec, procs in zip(self.gpus, per_gpu)]

    def _gpu_frame(self, spec, procs):
        util = min(1.0, sum(u for _, u in procs))
        drive = min(1.0, sum(u * (spec.low_power_share if s["low_power"] else 1.0) for s, u in procs))
        mem_util = min(1.0, sum(u * (0.02 if s["low_power"] else 0.4) for s, u in procs))
        used = spec.base_memory_bytes + sum(s["memory_bytes"] for s, _ in procs)
        power_w = spec.idle_power_w + (spec.busy_power_w - spec.idle_power_w) * drive
        idle = util < 0.05
        nvml = {
            "name": spec.name,
            "utilization_gpu": round(util * 100),
            "utilization_memory": round(mem_util * 100),
            "memory_total_bytes": spec.memory_total_bytes,
            "memory_used_bytes": min(used, spec.memory_total_bytes),
            "temperature_c": round(35 + 40 * drive),
            "power_mw": round(power_w * 1000),
            "power_limit_mw": round(spec.power_limit_w * 1000),
            "sm_clock_mhz": 345 if idle else 1980,
            "clock_event_reasons": 1 if idle else 0,
            # A spinning kernel moves no data.
            "pcie_rx_kbps": round(min(1.0, sum(u for s, u in procs if not s["low_power"])) * 2_000_000),
            "processes": [
                {
                    "pid": s["pid"],
                    "type": "compute",
                    "used_memory_bytes": s["memory_bytes"],
                    "sm_util": round(u * s["sm_share"] * 100),
                    "mem_util": round(u * (0.02 if s["low_power"] else 0.4) * 100),
                }
                for s, u in sorted(procs, key=lambda p: p[0]["pid"])
            ],
        }
        if spec.mig:
            nvml["gpm"] = {}
            nvml["mig"] = [{
                "gpu_instance_id": 1,
                "memory_total_bytes": spec.memory_total_bytes,
                "memory_used_bytes": nvml["memory_used_bytes"],
                "processes": [{k: p[k] for k in ("pid", "type", "used_memory_bytes")}
                              for p in nvml["processes"]],
                "gpm": gpm_activity(procs),
            }]
            nvml["processes"] = []
        elif spec.gpm:
            nvml["gpm"] = gpm_activity(procs)
        return {
            "nvml": nvml,
            "utilization": util,
            "power_w": power_w,
            "processes": {s["pid"]: {"memory_bytes": s["memory_bytes"], "utilization": u,
                                     "low_power": s["low_power"]} for s, u in procs},
        }


def gpm_activity(procs):
    """GPM readings (percent, MiB/s) from the processes' kernels: a working kernel keeps
    85% of its SM share active and uses tensor cores and DRAM; a spinning one (a collective
    waiting for a rank) keeps a few SMs polling and moves nothing."""
    def total(f):
        return min(100.0, 100.0 * sum(u * f(s) for s, u in procs))
    sm = total(lambda s: 0.03 if s["low_power"] else 0.85 * s["sm_share"])
    return {
        "sm_util": sm,
        "sm_occupancy": sm / 2,
        "any_tensor_util": total(lambda s: 0.0 if s["low_power"] else 0.5 * s["sm_share"]),
        "dram_bw_util": total(lambda s: 0.001 if s["low_power"] else 0.3),
        "nvlink_tx_mibps": 0.0,
        "nvlink_rx_mibps": 0.0,
    }
